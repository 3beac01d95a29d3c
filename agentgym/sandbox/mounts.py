"""Size-limited tmpfs mounts: the disk quota of a local sandbox's workspace and ``/tmp``.

Mounting needs ``CAP_SYS_ADMIN`` (root on a host, or a container given it); elsewhere
:func:`mount_tmpfs` raises :class:`OSError` and the caller falls back to a per-file size limit.
A sandbox's pages on such a tmpfs are charged to the memory cgroup of the process that wrote them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

__all__ = ["mount_tmpfs", "reveal", "unmount_under"]

_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_CLONE_NEWNS = 0x00020000
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount_tmpfs(path: Path, size_bytes: int, uid: int, gid: int) -> None:
    """Mount a tmpfs of ``size_bytes`` on the directory ``path``, owned by ``uid``:``gid``, mode
    0700, without set-uid programs or device files. Writes past the size fail with ENOSPC."""
    options = f"size={size_bytes},mode=0700,uid={uid},gid={gid}".encode()
    if _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount a tmpfs on {path}: {os.strerror(err)}")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def reveal(hidden: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    """In this process only (a child about to drop root), make each directory ``path`` of
    ``hidden`` (pairs ``top, paths``, ``top`` an ancestor other users cannot pass through, such
    as root's home) reachable by any user: in a mount namespace of its own, an empty tmpfs
    (mode 0755) covers ``top`` and each ``path`` is bound back at its place."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")
    for top, paths in hidden:
        fds = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in paths]
        _check(
            _libc.mount(b"tmpfs", os.fsencode(top), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755"),
            f"mount a tmpfs on {top}",
        )
        for fd, path in zip(fds, paths):
            os.makedirs(path, exist_ok=True)
            _check(
                _libc.mount(
                    f"/proc/self/fd/{fd}".encode(), os.fsencode(path), None, _MS_BIND | _MS_REC, None
                ),
                f"bind {path}",
            )
            os.close(fd)


def unmount_under(root: Path) -> list[str]:
    """Detach every mount at or below ``root`` (deepest first); the paths unmounted."""
    prefix = os.fsencode(os.path.realpath(root))
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return []
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...)
    points = [p.decode("unicode_escape").encode("latin-1") for p in points]
    mine = sorted({p for p in points if p == prefix or p.startswith(prefix + b"/")}, key=len, reverse=True)
    done = []
    for point in mine:
        if _libc.umount2(point, _MNT_DETACH) == 0:
            done.append(os.fsdecode(point))
    return done
