"""Werewolf as a PettingZoo ``AECEnv``: one agent acts at a time.

``agent_selection`` is the first player, in seat order, who owes an answer; a player whose
answer was refused is selected again at once for their retry. The players of one round still
answer simultaneously: no answer is revealed before the round resolves. When the game ends,
every agent is terminated (a winner) or truncated (``max_days``) with their final reward, and
is removed by its ``step(None)`` as usual. Everything else is shared with the parallel env
(:mod:`.base`).

Not parallelizable (``metadata["is_parallelizable"]`` is False): PettingZoo's
``aec_to_parallel`` steps every agent in ``agents``, in order, once per parallel step, and
refuses an AEC env that selects anyone else. Here only the players who owe an answer are
selected (the werewolves at night, one speaker at a time in a debate), the dead stay in
``agents`` without ever acting, and a refused answer is retried at once, so no such cycle
exists. For parallel play use :func:`agentgym.envs.werewolf.parallel_env`, the native
``ParallelEnv``; ``parallel_to_aec`` of it gives an AEC env that does cycle through every agent
(idle ones' actions ignored).
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv

from agentgym.env import coerce_action
from agentgym.envs.werewolf.base import WerewolfBase
from agentgym.envs.werewolf.observations import observation

__all__ = ["WerewolfAECEnv"]


class WerewolfAECEnv(WerewolfBase, AECEnv):
    """Werewolf, one agent at a time. Arguments: see :class:`~.base.WerewolfBase`."""

    metadata: dict[str, Any] = {**WerewolfBase.metadata, "is_parallelizable": False}  # noqa: RUF012 (see WerewolfBase)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._new_game(seed, options)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = self._infos(self.agents)
        self.agent_selection = next(iter(self.game.pending))

    def observe(self, agent: str) -> str:
        return observation(self.game, agent)

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        game = self.game
        answered = game.answer(agent, coerce_action(action))
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        if game.over:
            self.rewards = self._final_rewards()
            self.terminations = {a: not game.truncated for a in self.agents}
            self.truncations = {a: game.truncated for a in self.agents}
        self.infos = self._infos(self.agents, {agent: answered})
        self._accumulate_rewards()
        self.agent_selection = self.agents[0] if game.over else next(iter(game.pending))
        if self.render_mode == "human":
            self.render()
