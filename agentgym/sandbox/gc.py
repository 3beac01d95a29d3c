"""``agentgym sandbox gc``: remove what crashed processes' sandboxes left behind.

A process that exits normally cleans up after itself (``close()`` and exit hooks). One that is
SIGKILLed leaves containers (labelled ``agentgym.sandbox=1``), host directories
(``<root>/agentgym-sb-<pid>-<start>-<id>``, root: :func:`~agentgym.sandbox.base.host_dir_root`)
and cgroups (``.../agentgym/<pid>-<start>-<id>``); bubblewrap's processes die with their parent.
Every one of them names its owner, so :func:`gc` can leave those of live processes alone. An
owner in a container (the harness image) is named by its container too: what a killed or
stopped harness container left is removed by ``agentgym sandbox gc`` on the Docker host, what a
running one uses is not.
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentgym.sandbox.base import HOST_DIR_PREFIX, SandboxError, host_dir_root
from agentgym.sandbox.cgroups import Cgroups, parent_dirs
from agentgym.sandbox.docker import remove_containers
from agentgym.sandbox.mounts import unmount_under
from agentgym.sandbox.owner import Owner, owner_alive

__all__ = ["GcReport", "gc"]


@dataclass
class GcReport:
    """What :func:`gc` removed, and which parts it could not look at (with the reason)."""

    containers: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            (
                f"removed {len(self.containers)} container(s), {len(self.dirs)} host dir(s), "
                f"{len(self.cgroups)} cgroup(s)"
            )
        ]
        lines += [f"  container {c}" for c in self.containers]
        lines += [f"  dir {d}" for d in self.dirs]
        lines += [f"  cgroup {g}" for g in self.cgroups]
        lines += [f"  skipped {s}" for s in self.skipped]
        return "\n".join(lines)


def _doomed(owner: Owner | None, age_s: float, older_than_s: float, only_dead_owners: bool) -> bool:
    if owner is None or age_s < older_than_s:
        return False
    return not (only_dead_owners and owner_alive(owner))


def gc(
    *,
    older_than_s: float = 0.0,
    only_dead_owners: bool = True,
    docker: bool = True,
    local: bool = True,
    docker_hosts: Sequence[str | None] = (None,),
) -> GcReport:
    """Remove leftover sandboxes: containers, host directories and cgroups.

    Args:
        older_than_s: only things created at least this many seconds ago.
        only_dead_owners: only things whose creating process is gone (the safe default). With
            ``False``, live processes' sandboxes go too: run it from a fresh process only.
        docker: look at containers (a daemon that does not answer is skipped, and said so in the
            report).
        local: look at host directories (under :func:`~agentgym.sandbox.base.host_dir_root`)
            and cgroups.
        docker_hosts: the daemons to look at (:mod:`agentgym.sandbox.daemon`; ``None``: the
            default one).
    """
    report = GcReport()
    for host in docker_hosts if docker else ():
        try:
            report.containers += remove_containers(
                older_than_s=older_than_s, only_dead_owners=only_dead_owners, host=host
            )
        except SandboxError as exc:
            report.skipped.append(f"docker: {exc}")
    if local:
        now = time.time()
        for path in sorted(host_dir_root().glob(f"{HOST_DIR_PREFIX}*")):
            owner = Owner.from_tag(path.name[len(HOST_DIR_PREFIX) :])
            if path.is_dir() and _doomed(owner, now - path.stat().st_mtime, older_than_s, only_dead_owners):
                unmount_under(path)  # its workspace and /tmp quotas
                shutil.rmtree(path, ignore_errors=True)
                report.dirs.append(str(path))
        try:
            parents = parent_dirs()
        except OSError as exc:
            report.skipped.append(f"cgroups: {exc}")
            return report
        groups: dict[str, dict[str, Path]] = defaultdict(dict)
        for controller, parent in parents.items():
            if parent.is_dir():
                for d in parent.iterdir():
                    if d.is_dir():
                        groups[d.name][controller] = d
        for name, dirs in sorted(groups.items()):
            age = now - min(d.stat().st_mtime for d in dirs.values())
            if _doomed(Owner.from_tag(name), age, older_than_s, only_dead_owners):
                try:
                    Cgroups(dirs).remove()
                except OSError as exc:
                    report.skipped.append(f"cgroup {name}: {exc}")
                else:
                    report.cgroups.append(name)
    return report
