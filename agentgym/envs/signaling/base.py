"""What the AEC and the Parallel signaling envs share: options, agents, spaces, seeding, infos,
rendering and the game record.

Agents are ``player_1`` and ``player_2``, both in ``agents`` from reset to the end of the game,
which comes after exactly ``2 * rounds`` answers: every agent is then terminated (a game is never
truncated). Each won round gives both players reward 1 on the step of the winning pick, so an
agent's return is the rounds won.

Reset: ``reset(seed=s)`` plays a task of the env's split drawn from ``s``; without a seed the
next task is drawn from the last seed given (or from the OS). ``options={"task_id": t}`` plays
task ``t`` (``info["task_id"]``; it must be in the split) whatever the seed. Other option keys
are ignored (PettingZoo's api tests pass some).

Per-agent info keys: the standard ``task_id``, ``instruction`` (the agent's role explained),
``state_key`` (the whole state, the secret included: for trainers, never shown to players),
``admissible_actions`` (the cards, to the player who must answer; else none), ``action_valid``
(after the agent answered) and ``success`` (the partners have won the game); the multi-agent
``action_required``, ``role`` (``"sender"`` or ``"receiver"``), ``team`` (``"partners"``),
``signals`` (after an answer: the sender's ``sent_secret``, the receiver's ``picked_sent`` where
a card was sent) and, at the end, ``metrics``; ``rounds_won``; and ``signaling``, the agent's
knowledge as values for rule-based bots (:meth:`~agentgym.envs.signaling.game.Game.view`).
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agentgym.env import MAX_OBSERVATION_CHARS, TypedText, UnicodeText
from agentgym.envs.signaling.game import (
    AGENTS,
    MAX_RESPONSE_CHARS,
    RECEIVER,
    SENDER,
    TEAM,
    Answered,
    Game,
    to_text,
)
from agentgym.envs.signaling.tasks import HIGHEST, draw_index, make_task, parse_task_id
from agentgym.seeding import check_split

__all__ = ["SignalingBase"]


class SignalingBase:
    """Mixin of :class:`~.aec.SignalingAECEnv` and :class:`~.parallel.SignalingParallelEnv`.

    Args:
        split: ``"train"`` or ``"test"``: the tasks played.
        rounds: rounds per game, from 1 to 20.
        cards: cards on the table each round, from 2 to 9.
        sender: ``"player_1"`` or ``"player_2"`` sends in every game; ``None``: each task says.
        render_mode: ``"ansi"`` (the record as text), ``"human"`` (printed) or ``None``.

    ``metadata["roles"]``: ``("sender", "receiver")``.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "signaling_v0",
        "render_modes": ["ansi", "human"],
        "roles": (SENDER, RECEIVER),
    }

    def __init__(
        self,
        split: str = "train",
        rounds: int = 3,
        cards: int = 4,
        sender: str | None = None,
        render_mode: str | None = None,
    ):
        check_split(split)
        for name, value, lowest, highest in (("rounds", rounds, 1, 20), ("cards", cards, 2, HIGHEST)):
            if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
                raise ValueError(f"signaling: {name} must be an int in [{lowest}, {highest}], got {value!r}")
        if sender is not None and sender not in AGENTS:
            raise ValueError(f"signaling: sender must be one of {list(AGENTS)} or None, got {sender!r}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; choose one of "
                f"{self.metadata['render_modes']} or None"
            )
        self.split, self.rounds, self.cards, self.sender = split, rounds, cards, sender
        self.render_mode = render_mode
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.observation_spaces = {a: UnicodeText(MAX_OBSERVATION_CHARS) for a in self.possible_agents}
        self.action_spaces = {a: UnicodeText(MAX_RESPONSE_CHARS) for a in self.possible_agents}
        self._seeds = random.Random()
        self._game: Game | None = None

    @property
    def game(self) -> Game:
        """The current game (after ``reset``)."""
        if self._game is None:
            raise RuntimeError("call reset() before using the env")
        return self._game

    def observation_space(self, agent: str) -> UnicodeText:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> UnicodeText:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> TypedText:
        """What ``agent`` sees now."""
        return TypedText(self.game.observation(agent))

    def _new_game(self, seed: int | None, options: dict[str, Any] | None) -> None:
        if seed is not None:
            self._seeds = random.Random(seed)
        task_id = (options or {}).get("task_id")
        index = draw_index(self._seeds, self.split) if task_id is None else parse_task_id(task_id, self.split)
        self._game = Game(make_task(index, self.rounds, self.cards), self.sender)
        self.agents = list(self.possible_agents)

    def _infos(self, answered: dict[str, Answered] | None = None) -> dict[str, dict[str, Any]]:
        game = self.game
        state = game.state_key()
        current = game.task.rounds[len(game.played)] if not game.over else None
        infos = {}
        for agent in self.possible_agents:
            required = game.pending == agent
            info: dict[str, Any] = {
                "task_id": game.task.task_id,
                "instruction": game.instruction(agent),
                "state_key": f"{agent}|{state}",
                "role": game.role(agent),
                "team": TEAM,
                "action_required": required,
                "admissible_actions": [str(c) for c in current.cards] if current and required else [],
                "success": game.success,
                "rounds_won": game.won,
                "signaling": game.view(agent),
            }
            if answered and agent in answered:
                info["action_valid"] = answered[agent].valid
                if answered[agent].signals:
                    info["signals"] = dict(answered[agent].signals)
            if game.over:
                info["metrics"] = game.metrics(agent)
            infos[agent] = info
        return infos

    def game_record(self) -> dict[str, Any]:
        """The whole game so far as JSON values (see :meth:`~.game.Game.record`)."""
        return self.game.record()

    def render(self) -> str | None:
        """The record as text (``"ansi"``; ``"human"`` prints it); ``None`` without a render
        mode."""
        if self.render_mode is None or self._game is None:
            return None
        text = to_text(self.game_record())
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release: the game lives in this process."""
