"""Resource limits of one sandbox, and how a registered env's manifest maps to them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentgym.registry import EnvManifest, Resources

__all__ = ["SandboxLimits", "limits_for"]

MIB = 1 << 20


@dataclass(frozen=True)
class SandboxLimits:
    """What everything running in one sandbox may use, together.

    Enforcement per backend: ``docker`` sets the container's memory (swap included), pids and CPU
    limits and ``network_mode="none"``; ``local`` uses one cgroup v1 group per controller (memory,
    pids, cpu) when ``/sys/fs/cgroup`` is writable, else per-process rlimits (weaker: see
    :mod:`agentgym.sandbox.local`), and an unshared network namespace under bubblewrap.
    """

    memory_bytes: int = 512 * MIB
    """Memory of all processes together; exceeding it gets the largest one OOM-killed."""
    pids: int = 256
    """Processes and threads alive at once; further forks fail with EAGAIN."""
    cpus: float = 1.0
    """CPU time per wall-clock second (1.0 = one core)."""
    network: bool = False
    """Whether the sandbox may reach any network. Without it only loopback exists."""
    wall_timeout_s: float = 60.0
    """Default wall-clock limit of one ``exec()``, in seconds."""
    max_output_bytes: int = 1 * MIB
    """Default cap of each of ``exec()``'s stdout and stderr, in bytes."""
    disk_bytes: int = 256 * MIB
    """Size of the work dir, and of ``/tmp``, each; writing past it fails with ENOSPC. ``local``
    mounts a tmpfs of that size on each where it may mount (root), else limits each file to it;
    ``docker`` has ``/tmp`` a tmpfs the size of ``memory_bytes`` (the work dir is a host
    directory). tmpfs pages count as the sandbox's memory."""
    nested: bool = False
    """Whether processes in the sandbox may make sandboxes of their own (bubblewrap, each as a
    uid of its own with a disk quota). ``local`` always allows it. ``docker`` then runs the
    container without Docker's seccomp profile and ``/proc`` masks, which block namespaces, and
    with the capabilities to switch uids, mount the quotas and kill what it started
    (``SYS_ADMIN``, ``SETUID``, ``SETGID``, ``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``, ``KILL``);
    the code it nests runs without any."""

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids", "cpus", "wall_timeout_s", "max_output_bytes", "disk_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")

    def with_(self, **changes: Any) -> SandboxLimits:
        """A copy with ``changes`` applied (validated like the original)."""
        return replace(self, **changes)


def limits_for(source: EnvManifest | Resources, **overrides: Any) -> SandboxLimits:
    """The limits for an env: its manifest's :class:`Resources` (``memory_mb``, also the disk
    quota as for a docker sandbox's ``/tmp``, ``pids``, ``cpus``, ``network``,
    ``nested_sandboxes``), then ``overrides`` (any :class:`SandboxLimits` field)."""
    res = source.resources if isinstance(source, EnvManifest) else source
    base = SandboxLimits(
        memory_bytes=res.memory_mb * MIB,
        pids=res.pids,
        cpus=res.cpus,
        network=res.network,
        nested=res.nested_sandboxes,
        disk_bytes=res.memory_mb * MIB,
    )
    return base.with_(**overrides) if overrides else base
