"""Statistics of evaluated episodes: success rates with intervals, pass@k, failure categories,
token counts and latency. Pure functions of :class:`~agentgym.episode.Episode` lists, shared by
``summary.json`` and the reports.

Infrastructure errors (``Episode.error``) are counted apart and never as agent failures: every
rate below is over *scored* episodes, those without an error.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentgym.episode import Episode

__all__ = ["FAILURE_CATEGORIES", "breakdown", "failure_category", "pass_at_k", "summarize", "wilson_interval"]

FAILURE_CATEGORIES = ("success", "failed", "max_turns", "invalid_format", "infra_error")
"""What became of an episode (:func:`failure_category`), in the order reports show them."""


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (``(0, 1)`` when ``n == 0``)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def failure_category(episode: Episode) -> str:
    """One of :data:`FAILURE_CATEGORIES`:

    - ``infra_error``: the episode ended with an infrastructure error (not the agent's fault);
    - ``success``: the task was solved;
    - ``invalid_format``: at least half of the agent's responses had no parsable action;
    - ``max_turns``: truncated (the turn limit, or the env's own) before the task was done;
    - ``failed``: the env ended the episode without success (a wrong answer, a lost game).
    """
    if episode.error is not None:
        return "infra_error"
    if episode.success:
        return "success"
    if episode.turns and 2 * sum(not t.action for t in episode.turns) >= len(episode.turns):
        return "invalid_format"
    return "max_turns" if episode.truncated else "failed"


def pass_at_k(episodes: Sequence[Episode], k: int) -> float | None:
    """Unbiased pass@k (Chen et al., 2021) averaged over the groups (``group_id``) of scored
    episodes that have at least ``k`` of them: ``1 - C(n - c, k) / C(n, k)`` for a group of
    ``n`` episodes with ``c`` successes. ``None`` when no group is that large."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for e in episodes:
        if e.error is None:
            groups[e.group_id].append(e.success)
    values = [
        1.0 - math.comb(len(s) - sum(s), k) / math.comb(len(s), k) for s in groups.values() if len(s) >= k
    ]
    return sum(values) / len(values) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ks(group_size: int) -> list[int]:
    """1, 2, 4, ... up to ``group_size``, and ``group_size`` itself."""
    ks = [k for k in (2**i for i in range(group_size.bit_length())) if k <= group_size]
    return sorted({*ks, group_size}) if group_size >= 1 else []


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """The statistics of ``episodes`` as JSON-safe values.

    Keys: ``episodes``, ``scored`` (without infrastructure error), ``errors`` (with one),
    ``retried`` (episodes that needed more than one attempt), ``success_rate`` and
    ``success_ci95`` (95% Wilson interval), ``pass_at_k`` (``{k: value}`` for k = 1, 2, 4, ...
    up to the largest group), ``mean_return``, ``mean_turns``, ``invalid_action_rate`` (of
    turns), ``response_tokens`` (total) and ``mean_response_tokens`` (per scored episode),
    ``categories`` (episodes per :func:`failure_category`), ``latency`` (mean seconds:
    ``generate`` and ``step`` per turn, ``episode`` wall time) and ``error_examples`` (up to
    five distinct error texts). Means are ``None`` when there is nothing to average.
    """
    scored = [e for e in episodes if e.error is None]
    n, wins = len(scored), sum(e.success for e in scored)
    low, high = wilson_interval(wins, n)
    sizes: dict[str, int] = defaultdict(int)
    for e in scored:
        sizes[e.group_id] += 1
    categories = dict.fromkeys(FAILURE_CATEGORIES, 0)
    for e in episodes:
        categories[failure_category(e)] += 1
    turns = [t for e in scored for t in e.turns]
    return {
        "episodes": len(episodes),
        "scored": n,
        "errors": len(episodes) - n,
        "retried": sum(bool(e.failed_attempts) for e in episodes),
        "success_rate": wins / n if n else None,
        "success_ci95": [low, high],
        "pass_at_k": {str(k): pass_at_k(scored, k) for k in _ks(max(sizes.values(), default=0))},
        "mean_return": _mean([e.outcome for e in scored]),
        "mean_turns": _mean([e.num_turns for e in scored]),
        "invalid_action_rate": _mean([1.0 - t.action_valid for t in turns]),
        "response_tokens": sum(len(t.response_ids) for e in episodes for t in e.turns),
        "mean_response_tokens": _mean([sum(len(t.response_ids) for t in e.turns) for e in scored]),
        "categories": categories,
        "latency": {
            "generate": _mean([t.timings["generate"] for t in turns if "generate" in t.timings]),
            "step": _mean([t.timings["step"] for t in turns if "step" in t.timings]),
            "episode": _mean([e.wall_time for e in scored]),
        },
        "error_examples": sorted({e.error for e in episodes if e.error})[:5],
    }


def breakdown(episodes: Iterable[Episode], key: Callable[[Episode], str]) -> dict[str, dict[str, Any]]:
    """:func:`summarize` of the episodes grouped by ``key(episode)``, keys in sorted order."""
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[key(e)].append(e)
    return {name: summarize(groups[name]) for name in sorted(groups)}
