"""Who owns a sandbox: the creating process, identified by pid *and* start time, and by the
Docker container it runs in, if any.

Every name and label a sandbox leaves on the host (temp dirs, cgroups, container labels) carries
its owner, so that :func:`agentgym.sandbox.gc` can tell leftovers of a crashed process from the
sandboxes of a live one. The start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22)
guards against pid reuse.

A process inside a container (the harness image, ``containers/harness``) has pids of its own pid
namespace, which mean nothing to a process outside it: its sandboxes name the container as well,
and from outside that container the owner counts as alive exactly while the container runs
(asked of the Docker daemon). Inside the container, its pid and start time decide as usual.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from dataclasses import dataclass

from agentgym.sandbox.daemon import docker_client
from agentgym.sandbox.errors import SandboxError

__all__ = ["Owner", "current_container", "current_owner", "owner_alive"]

# The container's /etc/hostname is a bind mount of <docker root>/containers/<id>/hostname.
_HOSTNAME_MOUNT = re.compile(rb"/containers/([0-9a-f]{64})/hostname /etc/hostname ")
_CONTAINER_TAG_CHARS = 12  # the short id Docker prints, in temp-dir and cgroup names


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ")".
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


@functools.cache
def current_container() -> str | None:
    """The full id of the Docker container this process runs in (from the mount of its
    ``/etc/hostname``), or ``None`` outside one."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            m = _HOSTNAME_MOUNT.search(f.read())
    except OSError:
        return None
    return m[1].decode() if m else None


@dataclass(frozen=True, slots=True)
class Owner:
    """A process: ``pid``, ``start`` (ticks since boot, 0 when unknown), ``host`` name and the
    ``container`` it runs in (its full id, or a prefix of it; ``None`` outside containers)."""

    pid: int
    start: int
    host: str
    container: str | None = None

    @property
    def tag(self) -> str:
        """``"<pid>-<start>"``, or ``"c<short container id>-<pid>-<start>"`` in a container: the
        owner part of temp-dir and cgroup names."""
        own = f"{self.pid}-{self.start}"
        return f"c{self.container[:_CONTAINER_TAG_CHARS]}-{own}" if self.container else own

    @classmethod
    def from_tag(cls, tag: str) -> Owner | None:
        """Parse the start of a name made with :attr:`tag` (on this host); ``None`` if malformed."""
        m = re.match(r"(?:c([0-9a-f]+)-)?(\d+)-(\d+)(?:-|$)", tag)
        return cls(int(m[2]), int(m[3]), socket.gethostname(), m[1]) if m else None

    def in_this_container(self) -> bool:
        """Whether the owner runs in the container (or outside any) that this process does."""
        here = current_container()
        if self.container is None or here is None:
            return self.container is None and here is None
        return here.startswith(self.container)


def current_owner() -> Owner:
    """This process (computed anew on every call, so a forked child is its own owner)."""
    pid = os.getpid()
    return Owner(pid, _start_ticks(pid) or 0, socket.gethostname(), current_container())


def _container_running(container: str) -> bool:
    """Whether the Docker daemon runs ``container``; ``True`` when it cannot be asked."""
    try:
        api = docker_client().api
    except SandboxError:  # no docker SDK, or no daemon
        return True
    import docker.errors

    try:
        return bool(api.inspect_container(container)["State"]["Running"])
    except docker.errors.NotFound:
        return False
    except docker.errors.DockerException:
        return True


def owner_alive(owner: Owner) -> bool:
    """Whether the owner process still runs. An owner in another container is alive while that
    container runs. Owners on another host, and host processes seen from inside a container,
    count as alive: their liveness cannot be checked from here, and removing a live sandbox is
    worse than leaking one."""
    if not owner.in_this_container():
        return owner.container is None or _container_running(owner.container)
    if owner.host != socket.gethostname():
        return True
    start = _start_ticks(owner.pid)
    return start is not None and (owner.start == 0 or start == owner.start)
