"""Werewolf as a PettingZoo ``ParallelEnv``: every player of a round answers in one step.

``step(actions)`` reads the actions of the players who owe an answer (``info["action_required"]``)
and ignores the others'; a player who owes an answer and sends none answers ``""`` (refused, so
the game never waits on a missing action). A refused player answers again in the next step,
alone if the others were accepted. Observations, rewards and infos cover every agent in
``agents`` (the dead included, see :mod:`.base`); ``agents`` empties when the game ends.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import ParallelEnv

from agentgym.env import coerce_action
from agentgym.envs.werewolf.base import WerewolfBase
from agentgym.envs.werewolf.observations import observation

__all__ = ["WerewolfParallelEnv"]


class WerewolfParallelEnv(WerewolfBase, ParallelEnv):
    """Werewolf, a round at a time. Arguments: see :class:`~.base.WerewolfBase`."""

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        self._new_game(seed, options)
        return ({a: observation(self.game, a) for a in self.agents}, self._infos(self.agents))

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        unknown = sorted(set(actions) - set(self.possible_agents))
        if unknown:
            raise ValueError(f"actions for unknown agents {unknown}; agents are {self.possible_agents}")
        game, agents = self.game, list(self.agents)
        answered = {
            agent: game.answer(agent, coerce_action(actions.get(agent, ""))) for agent in list(game.pending)
        }
        observations = {a: observation(game, a) for a in agents}
        rewards = {a: 0.0 for a in agents}
        if game.over:
            rewards = self._final_rewards()
            self.agents = []
        terminations = {a: game.over and not game.truncated for a in agents}
        truncations = {a: game.truncated for a in agents}
        infos = self._infos(agents, answered)
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos
