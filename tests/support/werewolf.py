"""What the Werewolf tests that run a model share (envs/werewolf/test_werewolf.py,
trainers/test_multiagent_train.py)."""

from __future__ import annotations

SHORTEST_GAME = {"preset": "lspo", "num_players": 5, "werewolves": 1, "debate_turns": 1, "max_days": 1}
"""Werewolf-v0's ``env_kwargs`` for the shortest game that deals every role: five seats, one
werewolf, one day with one debate turn (a model in every seat plays it in under a minute)."""
