"""The :class:`Sandbox` contract shared by every backend, its results and its errors."""

from __future__ import annotations

import abc
import atexit
import errno
import os
import posixpath
import secrets
import shutil
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from agentgym.sandbox.errors import ExecError, SandboxDeadError, SandboxError, SandboxWarning
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.owner import current_owner

__all__ = [
    "HOST_DIR_PREFIX",
    "ExecError",
    "ExecResult",
    "Sandbox",
    "SandboxDeadError",
    "SandboxError",
    "SandboxProcess",
    "SandboxWarning",
    "host_dir_root",
]

HOST_DIR_PREFIX = "agentgym-sb-"
"""Per-sandbox host directories are ``<root>/agentgym-sb-<owner tag>-<id>`` (root:
:func:`host_dir_root`, owner tag: :attr:`~agentgym.sandbox.owner.Owner.tag`)."""

ROOT_ENV = "AGENTGYM_SANDBOX_ROOT"


def host_dir_root() -> Path:
    """The directory where sandboxes' host directories are made: ``$AGENTGYM_SANDBOX_ROOT``,
    else the temp directory. A process in a container that starts sibling containers (the
    harness image) points it at a directory mounted at the same path as on the Docker host, so
    that the bind-mount sources it hands to the daemon are host paths that it sees too."""
    return Path(os.environ.get(ROOT_ENV) or tempfile.gettempdir())


READ_FILE_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class ExecResult:
    """The outcome of :meth:`Sandbox.exec`.

    ``returncode`` follows the shell convention on every backend: 0-255 for an exit, ``128 + N``
    for death by signal N (137 = SIGKILL: a timeout, the output cap, or the OOM killer). It is
    ``None`` only when the status could not be read after the sandbox killed the command.
    ``stdout``/``stderr`` hold at most ``max_output_bytes`` each; ``truncated`` says a stream went
    over, and the command was then killed. ``timed_out`` says it was killed at its wall-clock
    limit. ``duration_s`` is wall-clock seconds from launch to the end of collection.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        """Exited 0, in time, with its whole output."""
        return self.returncode == 0 and not self.timed_out and not self.truncated

    def check(self) -> ExecResult:
        """``self`` if :attr:`ok`, else raise :class:`ExecError` with the cause and stderr's tail."""
        if self.ok:
            return self
        cause = (
            "timed out"
            if self.timed_out
            else "output over the cap"
            if self.truncated
            else f"exit status {self.returncode}"
        )
        tail = self.stderr[-2000:].decode(errors="replace")
        raise ExecError(f"command failed ({cause}) after {self.duration_s:.2f} s; stderr:\n{tail}")


class SandboxProcess(abc.ABC):
    """A long-running process started by :meth:`Sandbox.spawn`.

    Its stdout and stderr go, merged, to a log file (:meth:`logs`): ``log_path`` on this machine,
    or ``None`` where the file is only in the sandbox (on a remote Docker host). Exit statuses
    follow :class:`ExecResult`'s convention. Closing the sandbox kills it.
    """

    def __init__(self, log_path: Path | None) -> None:
        self.log_path = log_path

    @abc.abstractmethod
    def poll(self) -> int | None:
        """The exit status, or ``None`` while it runs."""

    @abc.abstractmethod
    def kill(self) -> None:
        """SIGKILL its whole process group. A no-op once it has exited."""

    def wait(self, timeout_s: float) -> int:
        """Block until it exits (raise :class:`TimeoutError` after ``timeout_s``); its status."""
        deadline = time.monotonic() + timeout_s
        while (status := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"process still running after {timeout_s} s")
            time.sleep(0.02)
        return status

    def logs(self, max_bytes: int = 64 << 10) -> bytes:
        """The last ``max_bytes`` of its merged stdout and stderr so far."""
        assert self.log_path is not None, "a log that is only in the sandbox is read by the subclass"
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - max_bytes))
                return f.read(max_bytes)
        except FileNotFoundError:
            return b""


class Sandbox(abc.ABC):
    """An isolated place to run commands: one container, or one bubblewrap jail on the host.

    Lifecycle: construct (nothing happens), :meth:`start` (idempotent; raises
    :class:`SandboxError` if it cannot), use, :meth:`close` (idempotent; never raises; kills every
    process started in the sandbox and removes every container, cgroup and host directory it
    created). Also a context manager (start on enter, close on exit). Sandboxes still open when the
    interpreter exits are closed by an ``atexit`` hook; after a crash, :func:`agentgym.sandbox.gc`
    removes the leftovers.

    Inside every sandbox:

    - :attr:`workdir` (``/sandbox``) is writable and the working directory of every command;
      ``/tmp`` is writable; the rest of the file system is read-only.
    - :attr:`socket_dir` (``/run/agentgym``) is shared with the host. A server that must be
      reachable from the host listens on the Unix socket :meth:`socket_path` (named by the
      caller: ``/run/agentgym/<name>.sock``) and the host connects through :meth:`endpoint`, which
      works with and without a network. ``$AGENTGYM_SOCKET_DIR`` and ``$AGENTGYM_SANDBOX_DIR``
      hold both paths.
    - Without ``limits.network`` only loopback exists.

    (The ``local`` backend without bubblewrap cannot remap paths: there both are host paths.)

    Thread safety: :meth:`exec`, :meth:`spawn`, :meth:`read_file` and :meth:`write_file` may be
    called from several threads at once; :meth:`start`, :meth:`reset` and :meth:`close` must not
    overlap with anything else on the same sandbox. Commands are argv lists, never shell strings.
    """

    backend: ClassVar[str]
    WORKDIR: ClassVar[str] = "/sandbox"
    SOCKET_DIR: ClassVar[str] = "/run/agentgym"

    def __init__(self, limits: SandboxLimits | None = None, *, session: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.session = session
        self.owner = current_owner()
        self.id = secrets.token_hex(6)
        self.workdir = self.WORKDIR
        self.socket_dir = self.SOCKET_DIR
        self.host_dir = host_dir_root() / f"{HOST_DIR_PREFIX}{self.owner.tag}-{self.id}"
        # Inside directories that are host directories too, for direct file access from here.
        self._mounts: dict[str, Path] = {}
        # (uid, gid) that files and directories made from the host get, so the sandbox's own
        # user can change them; None: this process's.
        self._file_owner: tuple[int, int] | None = None
        self._started = False
        self._closed = False

    # --- lifecycle -------------------------------------------------------------------------

    @abc.abstractmethod
    def start(self) -> Self:
        """Create the sandbox and make it ready for :meth:`exec`; returns ``self``."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether it is started, not closed, and can still run commands (cheap: no exec)."""

    def death(self) -> str | None:
        """Why the sandbox cannot run commands (closed, not started, or dead and how: a killed
        container, vanished directories), or ``None`` while it can. As cheap as :meth:`alive`."""
        if self._closed:
            return f"sandbox {self.id} is closed"
        if not self._started:
            return f"sandbox {self.id} is not started"
        return None if self.alive() else f"sandbox {self.id} is dead"

    @abc.abstractmethod
    def reset(self) -> None:
        """Kill every process in the sandbox and empty :attr:`workdir`, ``/tmp`` and
        :attr:`socket_dir`: afterwards it is as good as freshly started (used by pools)."""

    def close(self) -> None:
        """Kill everything and remove everything the sandbox created. Idempotent; never raises
        (a failed clean-up is a :class:`SandboxWarning`)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._cleanup()
        except Exception as exc:
            warnings.warn(f"cleaning up {self!r} failed: {exc}", SandboxWarning, stacklevel=2)
        finally:
            untrack(self)

    @abc.abstractmethod
    def _cleanup(self) -> None:
        """The backend's part of :meth:`close`: kill and remove what it created."""

    # --- running things --------------------------------------------------------------------

    @abc.abstractmethod
    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` in :attr:`workdir` and collect its output.

        ``timeout_s`` (default ``limits.wall_timeout_s``) and ``max_output_bytes`` (default
        ``limits.max_output_bytes``, per stream) are enforced by killing the command's process
        group; see :class:`ExecResult`. ``env`` is added to the sandbox's minimal environment.
        Processes the command leaves behind may be killed when it returns: use :meth:`spawn` for
        anything that must keep running. Raises :class:`SandboxDeadError` if the sandbox is not
        running, :class:`SandboxError` if the command cannot be launched at all; a command that
        runs and fails is an :class:`ExecResult`, not an exception.
        """

    @abc.abstractmethod
    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> SandboxProcess:
        """Start ``argv`` in the background and return at once. It runs until it exits, is
        killed, or the sandbox is reset or closed. For servers: see :meth:`socket_path`."""

    # --- reaching a server inside ----------------------------------------------------------

    def socket_path(self, name: str) -> str:
        """The path *inside* the sandbox where the server called ``name`` must listen (a Unix
        socket), e.g. ``python -m agentgym.server --uds <socket_path("envserver")>``."""
        return f"{self.socket_dir}/{name}.sock"

    def endpoint(self, name: str) -> str:
        """``"unix:<host path>"``: how the host reaches the server listening on
        :meth:`socket_path`. Turn it into an httpx client with
        :func:`agentgym.sandbox.http_client` / :func:`~agentgym.sandbox.async_http_client`."""
        self._require_started()
        return f"unix:{self._mounts[self.socket_dir] / f'{name}.sock'}"

    def wait_for_endpoint(
        self, name: str, *, timeout_s: float = 30.0, process: SandboxProcess | None = None
    ) -> str:
        """Block until something accepts connections on :meth:`socket_path`; the endpoint.

        With ``process``, fail early (with its log tail) if it exits first. Raises
        :class:`TimeoutError` after ``timeout_s``.
        """
        path = self.socket_path(name)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._listening(name):
                return self.endpoint(name)
            if process is not None and (status := process.poll()) is not None:
                tail = process.logs(4000).decode(errors="replace")
                raise SandboxError(f"process exited ({status}) before listening on {path}:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {path} after {timeout_s} s")
            time.sleep(0.01)

    def _listening(self, name: str) -> bool:
        """Whether something accepts connections on :meth:`socket_path` (one try)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.endpoint(name).removeprefix("unix:"))
            except OSError:
                return False
            return True

    # --- files -------------------------------------------------------------------------------

    def read_file(self, path: str, *, max_bytes: int = READ_FILE_MAX_BYTES) -> bytes:
        """The contents of ``path`` (absolute, or relative to :attr:`workdir`) as the sandbox
        sees it. Raises FileNotFoundError / PermissionError / IsADirectoryError like ``open``,
        and :class:`SandboxError` for files over ``max_bytes``. Files under :attr:`workdir` and
        :attr:`socket_dir` are read directly from the host, others through :meth:`exec`."""
        self._require_started()
        path = self._absolute(path)
        try:
            fd = self._open_on_host(path, os.O_RDONLY)
        except _NotOnHost:
            result = self.exec(["cat", "--", path], max_output_bytes=max_bytes, timeout_s=60)
            if result.truncated:
                raise SandboxError(f"{path} is larger than {max_bytes} bytes") from None
            _raise_for_cat(result, path)
            return result.stdout
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise SandboxError(f"{path} is larger than {max_bytes} bytes")
        return data

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` (absolute, or relative to :attr:`workdir`) with ``data``,
        creating missing parent directories. Only writable places work (:attr:`workdir`,
        ``/tmp``, :attr:`socket_dir`); elsewhere PermissionError or :class:`SandboxError`."""
        self._require_started()
        path = self._absolute(path)
        try:
            fd = self._open_on_host(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_parents=True)
        except _NotOnHost:
            script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
            result = self.exec(["sh", "-c", script, "sh", path], stdin=data, timeout_s=60)
            _raise_for_cat(result, path)
            return
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    # --- helpers for backends ----------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self._started else "new"
        return f"<{type(self).__name__} {self.id} {state}>"

    def _require_started(self) -> None:
        if self._closed:
            raise SandboxDeadError(f"sandbox {self.id} is closed")
        if not self._started:
            raise SandboxError(f"sandbox {self.id} is not started: call start() first")

    def _exec_defaults(self, timeout_s: float | None, max_output_bytes: int | None) -> tuple[float, int]:
        return (
            self.limits.wall_timeout_s if timeout_s is None else timeout_s,
            self.limits.max_output_bytes if max_output_bytes is None else max_output_bytes,
        )

    def _base_env(self) -> dict[str, str]:
        """Environment of every command (plus ``PATH`` where the backend sets one)."""
        return {
            "HOME": self.workdir,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "AGENTGYM_SANDBOX_DIR": self.workdir,
            "AGENTGYM_SOCKET_DIR": self.socket_dir,
        }

    def _make_host_dirs(self, *names: str) -> dict[str, Path]:
        """Create :attr:`host_dir` (mode 0700; its root too, if missing) with the given
        subdirectories."""
        self.host_dir.parent.mkdir(parents=True, exist_ok=True)
        self.host_dir.mkdir(mode=0o700)
        dirs = {name: self.host_dir / name for name in names}
        for d in dirs.values():
            d.mkdir()
        if len(str(dirs.get("run", self.host_dir))) > 80:
            raise SandboxError(
                f"{self.host_dir} is too long for Unix socket paths (108 bytes): "
                f"set {ROOT_ENV} (or TMPDIR) to a shorter directory"
            )
        return dirs

    def _remove_host_dir(self) -> None:
        shutil.rmtree(self.host_dir, ignore_errors=True)

    def _clear_host_dirs(self) -> None:
        for host in self._mounts.values():
            for child in host.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)

    def _absolute(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def _open_on_host(self, path: str, flags: int, *, make_parents: bool = False) -> int:
        """Open ``path`` through its host directory without following any symlink (the sandbox
        controls those directories: a symlink there must not lead the host elsewhere)."""
        for inside, host in self._mounts.items():  # noqa: B007 - host is used after the loop
            if path.startswith(inside.rstrip("/") + "/"):
                parts = path[len(inside.rstrip("/")) + 1 :].split("/")
                break
        else:
            raise _NotOnHost
        nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
        dir_fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | nofollow)
        try:
            for part in parts[:-1]:
                if make_parents:
                    try:
                        os.mkdir(part, 0o755, dir_fd=dir_fd)
                        if self._file_owner:
                            os.chown(part, *self._file_owner, dir_fd=dir_fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                try:
                    next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _NotOnHost from None  # a symlink: let the sandbox resolve it
                    raise
                os.close(dir_fd)
                dir_fd = next_fd
            try:
                fd = os.open(parts[-1], (flags & ~os.O_TRUNC) | nofollow, 0o644, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _NotOnHost from None
                if exc.errno == errno.ENOENT:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None
                raise
            if flags & os.O_WRONLY:
                if os.fstat(fd).st_nlink > 1:  # a hard link the sandbox made: could be anything
                    os.close(fd)
                    raise _NotOnHost
                if self._file_owner:
                    os.fchown(fd, *self._file_owner)
                if flags & os.O_TRUNC:
                    os.ftruncate(fd, 0)
            return fd
        finally:
            os.close(dir_fd)


class _NotOnHost(Exception):
    """The path is not (safely) reachable through a host directory: go through exec."""


def _raise_for_cat(result: ExecResult, path: str) -> None:
    if result.ok:
        return
    err = result.stderr.decode(errors="replace")
    for marker, exc_type, code in (
        ("No such file", FileNotFoundError, errno.ENOENT),
        ("Directory nonexistent", FileNotFoundError, errno.ENOENT),
        ("Not a directory", NotADirectoryError, errno.ENOTDIR),
        ("File name too long", OSError, errno.ENAMETOOLONG),
        ("No space left", OSError, errno.ENOSPC),
        ("Permission denied", PermissionError, errno.EACCES),
        ("Read-only file system", PermissionError, errno.EROFS),
        ("Is a directory", IsADirectoryError, errno.EISDIR),
        ("File exists", FileExistsError, errno.EEXIST),
    ):
        if marker in err:
            raise exc_type(code, marker, path)
    raise SandboxError(f"file access to {path} failed ({result.returncode}): {err.strip()}")


# --- every sandbox of this process is closed at exit -----------------------------------------

_live: set[Sandbox] = set()
_live_lock = threading.Lock()


def track(sandbox: Sandbox) -> None:
    """Register a started sandbox for the exit hook."""
    with _live_lock:
        _live.add(sandbox)


def untrack(sandbox: Sandbox) -> None:
    with _live_lock:
        _live.discard(sandbox)


@atexit.register
def _close_all_at_exit() -> None:
    pid = os.getpid()
    with _live_lock:
        mine = [sb for sb in _live if sb.owner.pid == pid]  # never a forked parent's
    for sb in mine:
        try:
            sb.close()
        except Exception as exc:  # close() should not raise; never let one block the others
            warnings.warn(f"closing {sb!r} at exit failed: {exc}", SandboxWarning, stacklevel=1)
