"""What the AEC and the Parallel Werewolf envs share: rules, agents, spaces, seeding, infos,
rendering and the game record.

Agents are ``player_1`` .. ``player_N`` (``Player1`` .. ``PlayerN`` in game text), all of them
in ``agents`` from reset to the end of the game: a dead player stays, never asked to act, and
ends with their team's result. Rewards come at the end: +1 to the winning team, -1 to the
losers, 0 to everyone when the game stops undecided after ``max_days`` (truncation).

Reset: ``reset(seed=s)`` plays the game of seed ``s`` (deal and tie-breaks); without a seed the
next game's seed is drawn from the last seed given (or from the OS). ``options={"task_id": t}``
replays the game ``t`` = ``info["task_id"]`` (``"<deal>/<seed>"``, the deal one letter per
seat: W werewolf, S seer, D doctor, V villager) whatever the seed. Other option keys are
ignored (PettingZoo's api tests pass some).

Per-agent info keys: the standard ``task_id``, ``instruction``, ``state_key`` (the whole state,
hidden roles included: for trainers, never shown to players), ``admissible_actions`` (well-formed
answers to the agent's question), ``action_valid`` (after the agent answered); the multi-agent
``action_required``, ``role``, ``team``, ``signals`` (``correct_vote`` after a vote) and, at the
end, ``metrics``; ``success`` (the agent's team has won), ``winner`` (``None`` until the end);
and ``werewolf``, the agent's knowledge as values for rule-based bots
(:func:`~agentgym.envs.werewolf.observations.view`).
"""

from __future__ import annotations

import random
from typing import Any

from agentgym.env import MAX_OBSERVATION_CHARS, UnicodeText
from agentgym.envs.werewolf.actions import MAX_RESPONSE_CHARS
from agentgym.envs.werewolf.engine import Answered, Game, agent_of
from agentgym.envs.werewolf.observations import admissible_answers, instruction, view
from agentgym.envs.werewolf.record import game_record, to_html, to_text
from agentgym.envs.werewolf.rules import Rules

__all__ = ["WerewolfBase", "parse_task_id"]


def parse_task_id(task_id: Any) -> tuple[str, int]:
    """``(deal, seed)`` of a task id ``"<deal>/<seed>"``; raises ``ValueError`` (the deal itself
    is checked against the rules by :class:`~agentgym.envs.werewolf.engine.Game`)."""
    deal, _, seed = str(task_id).partition("/")
    if not seed.isdigit():
        raise ValueError(f"werewolf task_id must be '<deal>/<seed>' like 'WVSDVVWV/7', got {task_id!r}")
    return deal, int(seed)


class WerewolfBase:
    """Mixin of :class:`~.aec.WerewolfAECEnv` and :class:`~.parallel.WerewolfParallelEnv`.

    Args:
        preset: ``"arena"`` or ``"lspo"`` (see :mod:`~agentgym.envs.werewolf.rules`).
        render_mode: ``"ansi"`` (the record as text), ``"human"`` (printed), ``"html"`` (a
            self-contained HTML transcript) or ``None``.
        options: rule options of :class:`~agentgym.envs.werewolf.rules.Rules`.

    ``metadata["roles"]``: the roles the rules deal
    (:meth:`~agentgym.envs.werewolf.rules.Rules.dealt_roles`).
    """

    metadata: dict[str, Any] = {  # noqa: RUF012 (each instance has its own: the roles it deals)
        "name": "werewolf_v0",
        "render_modes": ["ansi", "human", "html"],
    }

    def __init__(self, preset: str = "arena", render_mode: str | None = None, **options: Any):
        self.rules = Rules.preset(preset, **options)
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; choose one of "
                f"{self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "roles": self.rules.dealt_roles()}
        self.possible_agents = [agent_of(seat) for seat in range(self.rules.num_players)]
        self.agents: list[str] = []
        # every seat reads and writes the same kind of text: one space of each kind serves them all
        observation_space, action_space = UnicodeText(MAX_OBSERVATION_CHARS), UnicodeText(MAX_RESPONSE_CHARS)
        self.observation_spaces = dict.fromkeys(self.possible_agents, observation_space)
        self.action_spaces = dict.fromkeys(self.possible_agents, action_space)
        self._seeds = random.Random()
        self._game: Game | None = None
        self._instructions: dict[str, str] = {}

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

    def _new_game(self, seed: int | None, options: dict[str, Any] | None) -> None:
        if seed is not None:
            self._seeds = random.Random(seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            deal, game_seed = parse_task_id(task_id)
            self._game = Game(self.rules, game_seed, deal)
        else:
            self._game = Game(self.rules, seed if seed is not None else self._seeds.getrandbits(31))
        self._instructions = {p.agent: instruction(self.rules, p.seat, p.role) for p in self._game.players}
        self.agents = list(self.possible_agents)

    def _infos(
        self, agents: list[str], answered: dict[str, Answered] | None = None
    ) -> dict[str, dict[str, Any]]:
        game = self.game
        state, task_id = game.state_key(), f"{game.deal}/{game.seed}"
        infos = {}
        for agent in agents:
            player = game.by_agent[agent]
            info: dict[str, Any] = {
                "task_id": task_id,
                "instruction": self._instructions[agent],
                "state_key": f"{agent}|{state}",
                "role": player.role,
                "team": player.team,
                "action_required": agent in game.pending,
                "admissible_actions": admissible_answers(game, agent),
                "success": game.winner == player.team,
                "winner": game.winner,
                "werewolf": view(game, agent),
            }
            if answered and agent in answered:
                info["action_valid"] = answered[agent].valid
                if answered[agent].signals:
                    info["signals"] = dict(answered[agent].signals)
            if game.over:
                info["metrics"] = game.metrics(agent)
            infos[agent] = info
        return infos

    def _final_rewards(self) -> dict[str, float]:
        """Each agent's reward at the end: +1 winners, -1 losers, 0 without a winner."""
        game = self.game
        if game.winner is None:
            return {a: 0.0 for a in self.agents}
        return {a: 1.0 if game.by_agent[a].team == game.winner else -1.0 for a in self.agents}

    def game_record(self) -> dict[str, Any]:
        """The whole game so far as JSON values (see :mod:`~agentgym.envs.werewolf.record`)."""
        return game_record(self.game)

    def render(self) -> str | None:
        """The record as text (``"ansi"``; ``"human"`` prints it) or as an HTML page
        (``"html"``); ``None`` without a render mode."""
        if self.render_mode is None or self._game is None:
            return None
        if self.render_mode == "html":
            return to_html(self.game_record())
        text = to_text(self.game_record())
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release: the game lives in this process."""
