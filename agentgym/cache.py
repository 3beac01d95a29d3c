"""Where agentgym keeps what it makes once and reuses (converted model weights, search indexes),
and host-wide locks for work that two processes must not do at once (building images).

:func:`cache_dir` is ``$AGENTGYM_CACHE``, else ``$XDG_CACHE_HOME/agentgym``, else
``~/.cache/agentgym``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_dir", "host_lock"]


def cache_dir() -> Path:
    """``$AGENTGYM_CACHE``, else ``$XDG_CACHE_HOME/agentgym``, else ``~/.cache/agentgym``."""
    if os.environ.get("AGENTGYM_CACHE"):
        return Path(os.environ["AGENTGYM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentgym"


_held: dict[str, tuple[int, int]] = {}  # lock name -> (file descriptor, depth) in this process
_guard = threading.RLock()


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold the lock ``name`` of this host (``flock`` on ``cache_dir()/locks/<name>.lock``):
    blocks while another process holds it. Re-entrant in the thread that holds it; other
    threads of the process wait (one in-process lock serves every name)."""
    with _guard:
        fd, depth = _held.get(name, (-1, 0))
        if depth == 0:
            path = cache_dir() / "locks" / f"{name}.lock"
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(fd, fcntl.LOCK_EX)
        _held[name] = (fd, depth + 1)
        try:
            yield
        finally:
            fd, depth = _held.pop(name)
            if depth > 1:
                _held[name] = (fd, depth - 1)
            else:
                os.close(fd)  # releases the flock
