"""What the tests share: paths, the worker id, how a missing system dependency ends a test, a
fresh interpreter, and a few tasks of each kind.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so a test module imports these
with ``from support import ...``; test modules never import each other. The fixtures that
several directories use live in this package's modules (:mod:`support.sandboxes`,
:mod:`support.servers`), loaded as plugins by ``tests/conftest.py``; its plain helpers
(:mod:`support.contract`, :mod:`support.episodes`, :mod:`support.hostile`,
:mod:`support.learning`, :mod:`support.vllm`, :mod:`support.web`) are imported by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

TESTS = Path(__file__).resolve().parent.parent
"""The ``tests`` directory."""
ROOT = TESTS.parent
"""The repository's root."""
FIXTURES = TESTS / "fixtures"
"""Fixture envs and plugins (``tests/fixtures``)."""

WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's xdist worker id (``gw0``, ...), ``None`` when the suite runs in one process."""

T = TypeVar("T")


def unavailable(reason: str) -> NoReturn:
    """Skip a test whose system dependency (Docker, bubblewrap, Chromium) is missing; under CI
    (``$CI`` set), where everything must run, fail it instead."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but: {reason}")
    pytest.skip(reason)


def run_python(
    code: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv; return the finished process."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def per_kind(items: Iterable[T], kind: Callable[[T], Hashable], n: int) -> list[T]:
    """The first ``n`` of ``items`` of each kind, in their order: for an end-to-end test that
    plays a few tasks of every kind instead of a sample."""
    counts: Counter[Hashable] = Counter()
    chosen = []
    for item in items:
        key = kind(item)
        if counts[key] < n:
            counts[key] += 1
            chosen.append(item)
    return chosen
