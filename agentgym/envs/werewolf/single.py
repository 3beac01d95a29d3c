"""``agentgym/Werewolf-v0``: one seat of a Werewolf game as a Gymnasium env.

The agent plays ``seat``; every other seat is played by its policy in ``others`` (rule-based
bots by default), inside ``reset`` and ``step``: each call returns when the agent has a question
to answer or the game is over. If the agent dies, the step that killed them plays the game to
its end, so an episode always ends with the team's result: reward +1 for a win, -1 for a loss,
0 for a game stopped undecided (truncated). ``terminated`` means the game has a winner.

Actions are whole responses with the structured part each question asks for (see
:mod:`~agentgym.envs.werewolf.actions`); to collect episodes with an LLM, pass
``prompter=agentgym.multiagent.default_prompter("werewolf")`` to ``agentgym.rollout.collect``
so that the env receives the whole response.

``info`` is the seat's info of the parallel env (see :mod:`~agentgym.envs.werewolf.base`):
``task_id`` (``"<deal>/<seed>"``, replayed by ``reset(options={"task_id": ...})`` whatever the
seed), ``instruction``, ``state_key``, ``admissible_actions``, ``success``, and
``action_valid`` after a step.

``reset(seed=s)`` plays the game of seed ``s``, unless the agent dies before their first question
(a villager killed on the first night): then it goes on to the next game drawn from ``s``, so
that every episode has at least one decision. A ``task_id`` is played as it is; if the agent is
dead at reset, the first ``step`` (whatever its action) plays the game to its end.

``reset``/``step`` run the other seats' policies in an event loop of their own
(``asyncio.run``); inside a running event loop, await ``areset``/``astep`` instead.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any, ClassVar

from agentgym.env import TextEnv, UnicodeText, coerce_action
from agentgym.envs.werewolf.actions import MAX_RESPONSE_CHARS
from agentgym.envs.werewolf.bots import BotPolicy
from agentgym.envs.werewolf.engine import LETTERS, draw_deal
from agentgym.envs.werewolf.parallel import WerewolfParallelEnv
from agentgym.envs.werewolf.record import to_text
from agentgym.episode import Episode
from agentgym.multiagent import Batchers, Seat, default_prompter, step_parallel
from agentgym.policy import Policy, SamplingParams

__all__ = ["WerewolfEnv"]


class WerewolfEnv(TextEnv):
    """One seat of Werewolf against other policies.

    Args:
        seat: the agent's seat, ``"player_1"`` .. ``"player_N"``.
        role: deal the agent this role (``"werewolf"``, ``"seer"``, ``"doctor"``,
            ``"villager"``); ``None`` leaves it to the deal.
        others: the other seats' policy: one for all, or ``{seat: policy}`` for some (the rest
            are bots); default: :class:`~agentgym.envs.werewolf.bots.BotPolicy` everywhere.
        prompter: builds the other seats' prompts (for model policies); default
            :func:`agentgym.multiagent.default_prompter`.
        sampling: the other seats' decoding settings.
        preset, options: the rules (see :class:`~agentgym.envs.werewolf.rules.Rules`).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    family: ClassVar[str] = "werewolf"
    interruptible: ClassVar[bool] = True
    """Its async twins await the other seats' policies, so a rollout may time them out."""

    def __init__(
        self,
        *,
        seat: str = "player_1",
        role: str | None = None,
        others: Policy | Mapping[str, Policy] | None = None,
        prompter: Any = None,
        sampling: SamplingParams | None = None,
        preset: str = "arena",
        render_mode: str | None = None,
        **options: Any,
    ):
        super().__init__(render_mode)
        self.game_env = WerewolfParallelEnv(preset, **options)
        self.rules = self.game_env.rules
        agents = self.game_env.possible_agents
        if seat not in agents:
            raise ValueError(f"seat must be one of {agents[0]} .. {agents[-1]}, got {seat!r}")
        dealt = self.game_env.metadata["roles"]
        if role is not None and role not in dealt:
            raise ValueError(f"role must be a role of the game, one of {dealt}, got {role!r}")
        self.seat, self.role = seat, role
        self.others = self._policies(others, [a for a in agents if a != seat])
        self.prompter = prompter or default_prompter(self.family)
        self.sampling = sampling or SamplingParams()
        self.action_space = UnicodeText(MAX_RESPONSE_CHARS)
        self._batchers = Batchers()
        self._seats: dict[str, Seat] = {}
        self._observations: dict[str, Any] = {}
        self._infos: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _policies(others: Policy | Mapping[str, Policy] | None, seats: list[str]) -> dict[str, Policy]:
        if not isinstance(others, Mapping):
            policy = others or BotPolicy()
            return {a: policy for a in seats}
        unknown = sorted(set(others) - set(seats))
        if unknown:
            raise ValueError(f"others names {unknown}, which are not other seats: {seats}")
        bot = BotPolicy()
        return {a: others.get(a, bot) for a in seats}

    # ------------------------------------------------------------------ Gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return asyncio.run(self.areset(seed=seed, options=options))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return asyncio.run(self.astep(action))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a game. ``options`` may hold ``task_id`` (``"<deal>/<seed>"``); any other
        option raises ``ValueError``."""
        super().reset(seed=seed)
        unknown = sorted(set(options or {}) - {"task_id"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; Werewolf-v0 accepts: task_id")
        task_id = (options or {}).get("task_id")
        game_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        while True:
            self._start(task_id or f"{self._deal(game_seed)}/{game_seed}")
            await self._play_others(until_dead=True)
            if task_id is not None or self._infos[self.seat]["action_required"]:
                break
            game_seed = int(self.np_random.integers(2**31))  # dead before a first question
        return self._observations[self.seat], dict(self._infos[self.seat])

    async def astep(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = coerce_action(action)
        game = self.game_env.game
        if game.over:
            return self.episode_over(self._infos[self.seat], terminated=not game.truncated)
        observations, rewards, *_, infos = await step_parallel(
            self.game_env, self._seats, self._observations, self._infos, {self.seat: action}
        )
        valid = infos[self.seat].get("action_valid", False)  # absent: dead, nothing asked
        self._observations, self._infos = observations, infos
        reward = rewards[self.seat] + await self._play_others()
        info = dict(self._infos[self.seat]) | {"action_valid": valid}
        return (self._observations[self.seat], reward, game.over and not game.truncated, game.truncated, info)

    def _start(self, task_id: str) -> None:
        observations, infos = self.game_env.reset(options={"task_id": task_id})
        me = self.game_env.game.by_agent[self.seat]
        if self.role is not None and me.role != self.role:
            raise ValueError(
                f"task_id {task_id!r} deals {self.seat} a {me.role}, but this env plays a {self.role}"
            )
        self._seats = {
            agent: self._seat(agent, index)
            for index, agent in enumerate(self.game_env.possible_agents)
            if agent != self.seat
        }
        for agent, seat in self._seats.items():
            seat.start(infos[agent])
        self._observations, self._infos = observations, infos

    def render_text(self) -> str:
        return to_text(self.game_record())

    def game_record(self) -> dict[str, Any]:
        """The whole game so far, for people (see :mod:`~agentgym.envs.werewolf.record`)."""
        return self.game_env.game_record()

    # ------------------------------------------------------------------ the other seats

    async def _play_others(self, until_dead: bool = False) -> float:
        """Step the game with the other seats until the agent must answer, the game ends, or
        (with ``until_dead``) the agent is dead; return the agent's rewards meanwhile."""
        reward = 0.0
        env = self.game_env
        me = env.game.by_agent[self.seat]
        while (
            env.agents and not self._infos[self.seat]["action_required"] and not (until_dead and not me.alive)
        ):
            observations, rewards, *_, infos = await step_parallel(
                env, self._seats, self._observations, self._infos
            )
            self._observations, self._infos = observations, infos
            reward += rewards.get(self.seat, 0.0)
        return reward

    def _seat(self, agent: str, index: int) -> Seat:
        game = self.game_env.game
        policy = self.others[agent]
        episode = Episode(
            episode_id=f"{agent}#{game.seed}",
            env_id="agentgym/Werewolf-v0",
            task_id="",
            group_id="",
            seed=game.seed,
            agent=agent,
        )
        return Seat(episode, self._batchers.of(policy), self.prompter, self.sampling, index)

    def _deal(self, game_seed: int) -> str:
        """The deal of the game of ``game_seed``, with the agent's seat given ``role`` (swapped
        with the first seat that has it) when one is asked for."""
        deal = list(draw_deal(self.rules, random.Random(game_seed)))
        seat = self.game_env.possible_agents.index(self.seat)
        if self.role is not None and deal[seat] != LETTERS[self.role]:
            other = deal.index(LETTERS[self.role])
            deal[seat], deal[other] = deal[other], deal[seat]
        return "".join(deal)
