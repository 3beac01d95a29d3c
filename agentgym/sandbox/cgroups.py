"""cgroup v1 groups that hold one local sandbox's processes: memory, pids and cpu limits, and a
reliable way to kill everything in it.

Groups live at ``/sys/fs/cgroup/<controller>/<this process's group>/agentgym/<name>``: nested
under the creating process's own group, so that limits set above it (a CI job's, a container's)
still apply. For a process in the root group (CI) that is ``/sys/fs/cgroup/<ctrl>/agentgym/<name>``.
Creating groups needs write access to the hierarchy (root, or delegation); cgroup v2 is not
supported (the local backend then falls back to rlimits).
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

from agentgym.sandbox.limits import SandboxLimits

__all__ = ["CONTROLLERS", "Cgroups", "parent_dirs"]

CONTROLLERS = ("memory", "pids", "cpu")
ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


def _own_path(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    raise OSError(errno.ENOENT, f"no cgroup v1 {controller} hierarchy for this process")


def parent_dirs() -> dict[str, Path]:
    """Per controller, the directory that holds this process's sandbox groups."""
    return {c: ROOT / c / _own_path(c).lstrip("/") / "agentgym" for c in CONTROLLERS}


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class Cgroups:
    """One group per controller, all named ``name``. Create with :meth:`create`."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, limits: SandboxLimits) -> Cgroups:
        """Make the groups and write ``limits`` into them. Raises OSError (nothing left behind)
        where cgroup v1 is missing or not writable."""
        parents = parent_dirs()
        dirs = {c: parent / name for c, parent in parents.items()}
        for controller, parent in parents.items():
            # Inside another sandbox /sys/fs/cgroup may be a plain directory (or missing):
            # making directories there would make no groups.
            if not (parent.parent / "cgroup.procs").is_file():
                raise OSError(
                    errno.ENOENT, f"no writable cgroup v1 {controller} hierarchy at {parent.parent}"
                )
        group = cls({})
        try:
            for controller, d in dirs.items():
                d.mkdir(parents=True)
                group.dirs[controller] = d
            mem = dirs["memory"]
            _write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit
                _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            _write(dirs["pids"] / "pids.max", str(limits.pids))
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * CPU_PERIOD_US))))
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join every group."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> set[int]:
        """Processes in the sandbox (read from the pids group)."""
        try:
            with open(self.dirs["pids"] / "cgroup.procs") as f:
                return {int(line) for line in f if line.strip()}
        except (FileNotFoundError, KeyError):
            return set()

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in the groups until none is left (forks racing the kill are
        caught by the next round); ``False`` if some survive ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while pids := self.pids():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def remove(self) -> None:
        """Kill what is left and remove the groups (retrying while the kernel releases them)."""
        if self.pids():
            self.kill_all()
        for d in self.dirs.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    time.sleep(0.01)
        self.dirs = {}
