"""Seeded random streams and task splits that are the same in every process and on every
platform: procedurally generated tasks are a pure function of their seed. (Across Python
versions, :mod:`random` guarantees the seeding and ``random()``; it keeps the right to change
how other methods, such as ``shuffle``, use the stream.)

Both derive from a *key*: a namespace naming the generator (by convention a dotted name such as
``"agentgym.web.catalog"``; part of the key, so that families sharing a seed draw unrelated
values) followed by seeds and stream names, joined with ``"/"`` (so keep ``"/"`` out of the
parts). :class:`random.Random` hashes the key string with SHA-512 and :func:`split_of` with
SHA-256; neither uses ``hash()``, so ``PYTHONHASHSEED`` changes nothing.

* :func:`rng`: an independent :class:`random.Random` per key. Draw each part of a generated
  world from its own stream, so that changing how one part is drawn leaves the others alone.
* :func:`split_of`: which split a task belongs to, decided by its key alone, so a task never
  changes split when tasks are added, removed or reordered.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["SPLITS", "check_split", "rng", "split_of"]

#: The splits of a task family: tasks to train on, and held-out tasks to test on.
SPLITS: tuple[str, str] = ("train", "test")


def rng(namespace: str, *key: int | str) -> random.Random:
    """The random stream seeded by ``"/".join((namespace, *key))``: the same key gives the same
    draws, different keys unrelated ones. ``rng("agentgym.web.catalog", 3, "products")`` is
    ``random.Random("agentgym.web.catalog/3/products")``."""
    return random.Random("/".join((namespace, *map(str, key))))


def split_of(namespace: str, key: int | str, splits: tuple[str, str] = SPLITS) -> str:
    """The split of the task ``key`` of ``namespace``: the held-out ``splits[1]`` when the first
    byte of the SHA-256 of ``f"{namespace}/{key}"`` is a multiple of 5 (52 of the 256 values:
    about one task in five), else ``splits[0]``."""
    digest = hashlib.sha256(f"{namespace}/{key}".encode()).digest()
    return splits[1] if digest[0] % 5 == 0 else splits[0]


def check_split(split: str, splits: tuple[str, ...] = SPLITS) -> None:
    """Raise ``ValueError`` naming the choices unless ``split`` is one of ``splits``."""
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(splits)}")
