"""The cycle collector while rollouts run: :func:`rollout_collector`.

A rollout keeps everything its episodes record (turns, infos, token data) until it returns, so
the heap grows mostly by long-lived objects. CPython's generational collector walks each of them
once in every generation it passes through (a young collection, then a middle one) and then in
every full collection, each of which walks every tracked object of the process, and it frees
none of them. Collecting 200 Werewolf games with bots, full collections took 0.7-1 ms a game of
13-15 one game at a time, 1.4-2 ms with 64 games at once; the young and middle collections
0.4-0.7 ms, about 40% of it the middle ones walking again what the young ones had kept.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_COLLECTION_EVERY", "GENERATIONAL", "rollout_collector"]

FULL_COLLECTION_EVERY = 1000
"""The oldest generation's threshold inside :func:`rollout_collector`: collections between two
full ones (with CPython 3.11's default young threshold, at most one full collection per about
700,000 net allocations of tracked objects, where CPython's defaults allow one per 70,000;
CPython also waits until the objects added to the oldest generation since the last full
collection are a quarter of those it walked then)."""

GENERATIONAL = sys.version_info < (3, 14)
"""Whether this Python's collector is the generational one that :func:`rollout_collector` sets
(CPython 3.11-3.13's; 3.14's incremental collector reads the thresholds otherwise)."""

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, int, int] = (0, 0, 0)
_set: tuple[int, int, int] | None = None


@contextmanager
def rollout_collector() -> Iterator[None]:
    """Run the block with the cycle collector set for a heap that grows by long-lived objects:
    ``gc``'s thresholds ``(young, middle, oldest)`` become
    ``(young, 0, max(FULL_COLLECTION_EVERY, max(middle, 1) * oldest))``.

    A middle threshold of 0 makes every collection one of the two younger generations, so what
    survives a collection goes straight to the oldest generation: an object the rollout keeps is
    walked once before it gets there, not twice. Collections come as often as without the block
    (every ``young`` net allocations), so a reference cycle that is garbage by the next collection
    is freed as soon; one that was still alive at a collection waits in the oldest generation for
    the next full collection, which comes every :data:`FULL_COLLECTION_EVERY` collections at most
    (or as rarely as the thresholds before the block had them, where that is rarer). That bounds
    how much cyclic garbage can wait.

    Blocks may overlap, in any threads: the thresholds are set when the first begins and set back
    when the last ends, to what they were before the first, unless they no longer are the ones the
    first set (someone else's choice, made meanwhile, stays). With the collector stopped by its
    young threshold (0), or where it is not :data:`GENERATIONAL`, the block runs unchanged.
    """
    global _holders, _saved, _set
    with _lock:
        if _holders == 0:
            _saved, _set = gc.get_threshold(), None
            young, middle, oldest = _saved
            if GENERATIONAL and young > 0:
                _set = (young, 0, max(FULL_COLLECTION_EVERY, max(middle, 1) * oldest))
                gc.set_threshold(*_set)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _set is not None and gc.get_threshold() == _set:
                gc.set_threshold(*_saved)
