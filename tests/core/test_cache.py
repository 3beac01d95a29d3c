"""The cache directory and host locks (agentgym/cache.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym.cache import cache_dir, host_lock

HOLD = """
import sys, time
from agentgym.cache import host_lock
with host_lock("test"):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
    print(time.monotonic(), flush=True)
"""


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("AGENTGYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "agentgym"


@contextlib.contextmanager
def holder(seconds: float) -> Iterator[subprocess.Popen[str]]:
    """A process that holds the lock ``test`` for ``seconds``, once it has taken it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_host_lock_makes_another_process_wait(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    with holder(1.0) as proc:
        with host_lock("test"):
            acquired = time.monotonic()
            with host_lock("test"):  # re-entrant in this process
                pass
        assert proc.stdout is not None
        released = float(proc.stdout.readline())
    assert acquired >= released
    assert (tmp_path / "locks" / "test.lock").is_file()


def test_a_lock_is_released_when_its_holder_is_killed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    with holder(300) as proc:
        proc.kill()  # failure injection: no clean-up runs
        proc.wait(timeout=30)
        with host_lock("test"):  # the kernel dropped the dead holder's lock
            pass
