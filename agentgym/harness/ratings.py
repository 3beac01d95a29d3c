"""Elo ratings of the players of an eval run's games (the policy, its bots, league members).

A *game result* ``(a, b, s)`` is one game between players ``a`` and ``b`` in which ``a`` scored
``s`` in [0, 1] (``b`` scored ``1 - s``). :func:`game_results` reads them from stored games:
``a`` is the game's ``tags["player"]`` (a league member playing another, ``league_pairs``) or
else the evaluated policy (:data:`POLICY`), ``b`` the game's ``tags["opponent"]``, and

    s = (1 + p - o) / 2

where ``p`` and ``o`` are the shares of the policy's and of the opponent's seats that won
(``Episode.success``): a win against a loser is 1, a loss to a winner 0, and both sides winning
(a cooperative game such as Signaling) or losing is a draw, 0.5.

:func:`elo` processes the results one by one, in the order given (:func:`game_results` sorts them
by entry, task seed and game index, whatever order they finished in). Every player starts at
``initial`` (1000); a result ``(a, b, s)`` moves both ratings::

    E_a = 1 / (1 + 10 ** ((R_b - R_a) / 400))      the expected score of a
    R_a <- R_a + K * (s - E_a)
    R_b <- R_b - K * (s - E_a)                      (b's expected score is 1 - E_a)

with ``K = 32``: a player 400 points above another is expected to score 10 times as much. In an
eval run the policy's opponents (the league's members, the bots) compare with each other through
their results against it, and, with ``league_pairs``, the members through their own games too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentgym.episode import Episode
from agentgym.harness.store import entry_of, unit_key

__all__ = ["INITIAL", "POLICY", "K", "elo", "game_results", "rating_table"]

POLICY = "policy"
"""The player name of the evaluated policy."""
K = 32.0
"""Elo's K: the most one game moves a rating."""
INITIAL = 1000.0
"""Every player's rating before its first game."""


def elo(
    results: Iterable[tuple[str, str, float]], k: float = K, initial: float = INITIAL
) -> dict[str, float]:
    """The ratings after the game results ``(a, b, s)``, in their order (see the module's
    equations); players in order of first appearance. ``ValueError`` for a score outside [0, 1]
    or a player against itself."""
    ratings: dict[str, float] = {}
    for a, b, s in results:
        if not 0.0 <= s <= 1.0:
            raise ValueError(f"a game's score must be in [0, 1], got {s} ({a} against {b})")
        if a == b:
            raise ValueError(f"{a} cannot play against itself")
        ra, rb = ratings.setdefault(a, initial), ratings.setdefault(b, initial)
        change = k * (s - 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0)))
        ratings[a], ratings[b] = ra + change, rb - change
    return ratings


def game_results(
    episodes: Iterable[Episode], is_policy: Callable[[Episode], bool]
) -> list[tuple[str, str, float]]:
    """One result ``(player, opponent, s)`` per complete game among ``episodes`` whose episodes
    carry ``tags["opponent"]`` (``player``: ``tags["player"]``, else :data:`POLICY`;
    ``is_policy(e)``: whether the player played ``e``'s seat); games with an infrastructure
    error, or without a seat on either side, are left out."""
    games: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        if "opponent" in e.tags:
            games[unit_key(e)].append(e)

    def order(game: list[Episode]) -> tuple[str, int, int]:  # entry, seed, index in the group
        e = game[0]
        return entry_of(e), -1 if e.seed is None else e.seed, int(e.episode_id.rpartition("#")[2])

    results = []
    for game in sorted(games.values(), key=order):
        mine = [e.success for e in game if is_policy(e)]
        theirs = [e.success for e in game if not is_policy(e)]
        if any(e.error is not None for e in game) or not mine or not theirs:
            continue
        score = (1.0 + sum(mine) / len(mine) - sum(theirs) / len(theirs)) / 2.0
        results.append((game[0].tags.get("player", POLICY), game[0].tags["opponent"], score))
    return results


def rating_table(results: Sequence[tuple[str, str, float]]) -> list[dict[str, Any]]:
    """Every player of ``results``, best :func:`elo` rating first: ``player``, ``rating``,
    ``games`` and ``score`` (its mean score per game)."""
    ratings = elo(results)
    scores: dict[str, list[float]] = defaultdict(list)
    for a, b, s in results:
        scores[a].append(s)
        scores[b].append(1.0 - s)
    return sorted(
        (
            {"player": p, "rating": r, "games": len(scores[p]), "score": sum(scores[p]) / len(scores[p])}
            for p, r in ratings.items()
        ),
        key=lambda row: -row["rating"],
    )
