"""Who owns a sandbox: the creating process, identified by pid *and* start time.

Every name and label a sandbox leaves on the host (temp dirs, cgroups, container labels) carries
its owner, so that :func:`agentgym.sandbox.gc` can tell leftovers of a crashed process from the
sandboxes of a live one. The start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22)
guards against pid reuse.
"""

from __future__ import annotations

import os
import re
import socket

__all__ = ["Owner", "current_owner", "owner_alive"]


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ")".
    return int(stat[stat.rindex(b")") + 2:].split()[19])


class Owner:
    """A process: ``pid``, ``start`` (ticks since boot, 0 when unknown) and ``host`` name."""

    __slots__ = ("host", "pid", "start")

    def __init__(self, pid: int, start: int, host: str) -> None:
        self.pid, self.start, self.host = pid, start, host

    @property
    def tag(self) -> str:
        """``"<pid>-<start>"``: the owner part of temp-dir and cgroup names."""
        return f"{self.pid}-{self.start}"

    @classmethod
    def from_tag(cls, tag: str) -> Owner | None:
        """Parse the start of a name made with :attr:`tag` (on this host); ``None`` if malformed."""
        m = re.match(r"(\d+)-(\d+)(?:-|$)", tag)
        return cls(int(m[1]), int(m[2]), socket.gethostname()) if m else None


def current_owner() -> Owner:
    """This process (computed anew on every call, so a forked child is its own owner)."""
    pid = os.getpid()
    return Owner(pid, _start_ticks(pid) or 0, socket.gethostname())


def owner_alive(owner: Owner) -> bool:
    """Whether the owner process still runs. Owners on another host count as alive: their
    liveness cannot be checked from here, and removing a live sandbox is worse than leaking one."""
    if owner.host != socket.gethostname():
        return True
    start = _start_ticks(owner.pid)
    return start is not None and (owner.start == 0 or start == owner.start)
