"""The ``local`` backend: a bubblewrap jail on this host, needing no daemon.

Every :meth:`~LocalSandbox.exec` and :meth:`~LocalSandbox.spawn` is its own ``bwrap``
invocation (15-30 ms on a 2-core CI machine, most of it creating and tearing down the
network namespace) with ``--unshare-all --die-with-parent --new-session --cap-drop ALL``:
fresh pid, ipc, uts, cgroup and (without ``limits.network``) network namespaces. The file system
is the host's, read-only, reduced to ``/usr`` (with the ``/bin``, ``/lib*`` links), ``/etc``
(minus every entry that is not world-readable, such as ``/etc/shadow``), the Python installation
and virtual environment that run agentgym, and the agentgym package folder (so an editable
install works inside); ``/proc`` and ``/dev`` are private. Three per-sandbox host directories
are bound read-write: ``/sandbox`` (work dir), ``/tmp`` and ``/run/agentgym`` (sockets). They are
what the calls of one sandbox share; a process's pid and network namespaces are its own, so a
server is reached through a Unix socket in ``/run/agentgym``, which works across namespaces and
from the host (:meth:`~agentgym.sandbox.Sandbox.endpoint`).

Who runs the commands: for a root caller (CI, the tooluse image) a uid of the sandbox's own
(:attr:`LocalSandbox.uid`, named ``sandbox`` in its ``/etc/passwd``), with no capabilities and
no supplementary groups, so sandboxes cannot signal or read each other or their host even by
uid; bubblewrap then runs unprivileged, in a user namespace, and nested sandboxes work. Other
callers: their own uid, in a user namespace. The work dir and ``/tmp`` are tmpfs mounts of
``limits.disk_bytes`` each where the caller may mount (root), else each file written is limited
to that size (``RLIMIT_FSIZE``).

When a command returns, its namespace dies with it: nothing it left running survives. Time and
output limits kill the ``bwrap`` process, which takes the namespace down.

Limits: one cgroup v1 group per controller (:mod:`agentgym.sandbox.cgroups`) shared by every
process of the sandbox. Where cgroups cannot be created: per-process rlimits (``RLIMIT_AS`` for
memory, ``RLIMIT_NPROC`` for pids, which Linux does not enforce for root, and ``RLIMIT_CPU`` for
``exec``) and a :class:`~agentgym.sandbox.SandboxWarning`.

Without a working bubblewrap (not installed; or inside a Docker container, whose seccomp profile
blocks namespaces): plain subprocesses in the host directories with the same limits, no file
system or network isolation, and a loud :class:`~agentgym.sandbox.SandboxWarning`.
"""

from __future__ import annotations

import functools
import math
import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from agentgym.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxDeadError,
    SandboxError,
    SandboxProcess,
    SandboxWarning,
    track,
)
from agentgym.sandbox.capture import STDERR, STDOUT, OutputCapture, shell_status
from agentgym.sandbox.cgroups import Cgroups
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.mounts import mount_tmpfs, reveal, unmount_under

__all__ = ["LocalProcess", "LocalSandbox", "bwrap_usable"]

_CHUNK = 1 << 16
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def bwrap_usable() -> str | None:
    """Why bubblewrap cannot be used here, or ``None`` if it can (checked once per process)."""
    return _bwrap_mode()[0]


def _own_uids_usable() -> bool:
    """Whether each bubblewrap sandbox runs as a uid of its own (see :func:`_bwrap_mode`)."""
    return _bwrap_mode()[1]


@functools.lru_cache(maxsize=1)
def _bwrap_mode() -> tuple[str | None, bool]:
    """Why bubblewrap is unusable (or ``None``), and whether each sandbox can run as a uid of its
    own: this process is root, may switch uids, the kernel lets that uid make namespaces
    (bubblewrap without set-uid) and it can see Python. Root's own sandboxes are the fallback:
    bubblewrap run as root needs ``CAP_SETFCAP`` to map uid 0, which containers lack."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed", False
    if os.geteuid() == 0:
        argv = [
            exe,
            "--unshare-all",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            *_system_binds(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *_python_binds(()),
            "--",
            sys.executable,
            "-c",
            "",
        ]
        try:
            root_probe = subprocess.run(
                argv, capture_output=True, timeout=30, check=False, preexec_fn=_preexec((), (), UID_BASE)
            )  # noqa: PLW1509
            if root_probe.returncode == 0:
                return None, True
        except (OSError, subprocess.SubprocessError):
            pass
    probe = subprocess.run(
        [exe, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip()}", False
    return None, False


@functools.lru_cache(maxsize=1)
def _etc_masks() -> tuple[tuple[str, bool], ...]:
    """Entries of /etc that are not world-readable (path, is_dir): hidden inside the jail, which
    runs as the calling user (root in CI) and would otherwise read /etc/shadow."""
    masks: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk("/etc"):
        for name in list(dirnames):
            st = os.lstat(os.path.join(dirpath, name))
            if not st.st_mode & stat.S_IROTH or not st.st_mode & stat.S_IXOTH:
                masks.append((os.path.join(dirpath, name), True))
                dirnames.remove(name)
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IROTH:
                masks.append((os.path.join(dirpath, name), False))
    return tuple(masks)


def _python_paths() -> list[str]:
    """The Python installation, the virtual environment and the agentgym package (from an
    editable install, its folder only: never the checkout with its ``.git`` and runs)."""
    paths = {
        sys.base_prefix,
        sys.base_exec_prefix,
        sys.prefix,
        sys.exec_prefix,
        str(Path(__file__).resolve().parents[1]),
    }
    return sorted(paths | {os.path.realpath(p) for p in paths})


#: Sandboxes of a root process run as a uid of their own, drawn from this range (2^30 uids).
UID_BASE = 1 << 30


def _system_binds() -> list[str]:
    """The host's system directories, read-only (secrets under /etc masked)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/etc", "/etc"]
    if os.path.isdir("/var/cache/fontconfig"):  # else every Chromium rebuilds the font cache
        args += ["--ro-bind", "/var/cache/fontconfig", "/var/cache/fontconfig"]
    for path, is_dir in _etc_masks():
        args += ["--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return args


def _python_binds(extra_ro: Sequence[str]) -> list[str]:
    """Python, the venv, the agentgym sources and ``extra_ro``, read-only at the same paths.
    They must come after the writable mounts: a project under /tmp shows through the
    sandbox's own /tmp only if it is bound on top of it."""
    args: list[str] = []
    kept: list[str] = []
    for path in sorted({*_python_paths(), *extra_ro}):
        if path.startswith("/usr/") or any(path.startswith(k.rstrip("/") + "/") for k in kept):
            continue  # already visible through an enclosing bind
        if os.path.exists(path):
            kept.append(path)
            args += ["--ro-bind", path, path]
    return args


@functools.lru_cache(maxsize=1)
def _hidden_python_paths() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Python paths that other users cannot reach (an interpreter in root's home), grouped by
    the highest ancestor they cannot pass through: :func:`~agentgym.sandbox.mounts.reveal`
    makes them reachable for a sandbox's own uid."""
    hidden: dict[str, list[str]] = {}
    for path in _python_paths():
        parts = Path(path).parts
        for i in range(2, len(parts)):
            top = str(Path(*parts[:i]))
            if not os.stat(top).st_mode & stat.S_IXOTH:
                hidden.setdefault(top, []).append(path)
                break
    return tuple((top, tuple(paths)) for top, paths in hidden.items())


def _preexec(
    procs_files: Sequence[str], rlimits: Sequence[tuple[int, int]], uid: int | None
) -> Callable[[], None]:
    """Runs in the child between fork and exec: join the sandbox's cgroups, set rlimits, make
    the OOM killer pick it before anything outside the sandbox, and become ``uid`` (also as
    gid, with no supplementary groups; Python revealed to it first). Only system calls, no
    imports or locks: safe even though pools start sandboxes from threads."""
    hidden = _hidden_python_paths() if uid is not None else ()

    def enter() -> None:
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for which, value in rlimits:
            resource.setrlimit(which, (value, value))
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            try:
                os.write(fd, b"1000")
            finally:
                os.close(fd)
        except OSError:
            pass
        if uid is not None:
            if hidden:
                reveal(hidden)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return enter


class LocalProcess(SandboxProcess):
    """A process started by :meth:`LocalSandbox.spawn`."""

    def __init__(self, popen: subprocess.Popen[bytes], log_path: Path) -> None:
        super().__init__(log_path)
        self._popen = popen

    def poll(self) -> int | None:
        status = self._popen.poll()
        return None if status is None else shell_status(status)

    def kill(self) -> None:
        _kill_group(self._popen)


def _kill_group(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group the sandbox started (``bwrap``, whose death takes its namespace
    down) and reap it."""
    if popen.poll() is None:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    popen.wait()


class LocalSandbox(Sandbox):
    """A sandbox on this host; see the module documentation for what it isolates.

    Args:
        limits: resource limits (default :class:`SandboxLimits`).
        session: free-form label (kept on the object for the caller).
        bwrap: ``None`` uses bubblewrap when it works here and warns when it does not; ``True``
            requires it (:class:`SandboxError` at :meth:`start` otherwise); ``False`` never
            uses it (still warns: no isolation).
        ro_binds: more host paths to make visible, read-only, at the same place inside.
    """

    backend = "local"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        session: str | None = None,
        bwrap: bool | None = None,
        ro_binds: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        super().__init__(limits, session=session)
        self._want_bwrap = bwrap
        self._ro_binds = [os.fspath(p) for p in ro_binds]
        self._bwrap_prefix: list[str] | None = None
        self._cgroups: Cgroups | None = None
        self._processes: set[subprocess.Popen[bytes]] = set()  # execs in flight and spawns
        self._lock = threading.Lock()
        self.uid: int | None = None
        """The uid the sandbox's processes run as (``None``: this process's own)."""
        self._fsize_limit = False

    @property
    def isolated(self) -> bool:
        """Whether commands run under bubblewrap (after :meth:`start`)."""
        return self._bwrap_prefix is not None

    def start(self) -> LocalSandbox:
        if self._closed:
            raise SandboxDeadError(f"sandbox {self.id} is closed")
        if self._started:
            return self
        problem = bwrap_usable() if self._want_bwrap is not False else "disabled (bwrap=False)"
        if problem and self._want_bwrap:
            raise SandboxError(f"bubblewrap required but unusable: {problem}")
        dirs = self._make_host_dirs("work", "tmp", "run", "logs")
        try:
            try:
                self._cgroups = Cgroups.create(f"{self.owner.tag}-{self.id}", self.limits)
            except OSError as exc:
                warnings.warn(
                    f"cgroups unavailable ({exc}): sandbox limits are per-process "
                    "rlimits; the pids limit does not hold for root",
                    SandboxWarning,
                    stacklevel=2,
                )
            if not problem and _own_uids_usable():
                self.uid = UID_BASE + int(self.id, 16) % UID_BASE
                self._file_owner = (self.uid, self.uid)
                os.chmod(self.host_dir, 0o711)  # the uid must pass through to bind its dirs
                os.chown(dirs["run"], self.uid, self.uid)
            self._make_quota(dirs["work"], dirs["tmp"])
            if problem:
                warnings.warn(
                    f"LocalSandbox WITHOUT ISOLATION: {problem}. Commands run as plain "
                    "subprocesses that can read and write the host's files and reach "
                    "the network. Install bubblewrap or use the docker backend.",
                    SandboxWarning,
                    stacklevel=2,
                )
                self.workdir, self.socket_dir = str(dirs["work"]), str(dirs["run"])
                self._mounts = {str(dirs[n]): dirs[n] for n in ("work", "tmp", "run")}
            else:
                self._mounts = {self.WORKDIR: dirs["work"], "/tmp": dirs["tmp"], self.SOCKET_DIR: dirs["run"]}
                self._bwrap_prefix = self._bwrap_command()
        except BaseException:
            self._cleanup()
            raise
        self._started = True
        track(self)
        return self

    def _make_quota(self, *dirs: Path) -> None:
        """A tmpfs of ``limits.disk_bytes`` on each of ``dirs``, else (where this process may
        not mount) a per-file size limit and a warning."""
        owner = self._file_owner or (os.getuid(), os.getgid())
        try:
            for d in dirs:
                mount_tmpfs(d, self.limits.disk_bytes, *owner)
        except OSError as exc:
            unmount_under(self.host_dir)
            self._fsize_limit = True
            if self._file_owner:
                for d in dirs:
                    os.chown(d, *self._file_owner)
            warnings.warn(
                f"no disk quota ({exc}): each file a sandboxed process writes is limited "
                f"to {self.limits.disk_bytes} bytes instead",
                SandboxWarning,
                stacklevel=3,
            )

    def _bwrap_command(self) -> list[str]:
        exe = shutil.which("bwrap")
        assert exe is not None
        args = [
            exe,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
        ]
        if self.limits.network:
            args.append("--share-net")
        args += [*_system_binds(), "--proc", "/proc", "--dev", "/dev"]
        if self.uid is not None:
            args += self._user_entries()
        for inside, host in self._mounts.items():
            args += ["--bind", str(host), inside]
        args += _python_binds(self._ro_binds)
        return [*args, "--chdir", self.WORKDIR, "--"]

    def _user_entries(self) -> list[str]:
        """``/etc/passwd`` and ``/etc/group`` with the sandbox's uid as user ``sandbox`` (home
        :attr:`workdir`): programs that look their user up (D-Bus, ``whoami``) find it."""
        args = []
        for name, line in (
            ("passwd", f"sandbox:x:{self.uid}:{self.uid}::{self.WORKDIR}:/bin/sh"),
            ("group", f"sandbox:x:{self.uid}:"),
        ):
            path = self.host_dir / name
            path.write_text(Path(f"/etc/{name}").read_text() + line + "\n")
            args += ["--ro-bind", str(path), f"/etc/{name}"]
        return args

    def alive(self) -> bool:
        return self._started and not self._closed and self.host_dir.is_dir()

    def death(self) -> str | None:
        reason = super().death()
        if reason is not None and self._started and not self._closed:
            return f"{reason}: {self.host_dir} vanished"
        return reason

    def _require_alive(self) -> None:
        self._require_started()
        if (reason := self.death()) is not None:
            raise SandboxDeadError(reason)

    def _popen(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        *,
        stdin: int,
        stdout: int | IO[bytes],
        stderr: int,
        cpu_s: float | None,
    ) -> subprocess.Popen[bytes]:
        if not argv:
            raise ValueError("argv must not be empty")
        rlimits: list[tuple[int, int]] = []
        if self._fsize_limit:
            rlimits.append((resource.RLIMIT_FSIZE, self.limits.disk_bytes))
        if self._cgroups is None:
            rlimits += [
                (resource.RLIMIT_AS, self.limits.memory_bytes),
                (resource.RLIMIT_NPROC, self.limits.pids),
            ]
        if cpu_s is not None:
            # Backstop for anything that escapes the wall-clock kill (outside bubblewrap a
            # command can setsid() out of its process group).
            rlimits.append((resource.RLIMIT_CPU, math.ceil(cpu_s) + 1))
        full_env = {**self._base_env(), **(env or {})}
        if not self.isolated:
            full_env["TMPDIR"] = str(self.host_dir / "tmp")
        full_env.setdefault("PATH", f"{os.path.dirname(sys.executable)}:{_SYSTEM_PATH}")
        cmd = [*(self._bwrap_prefix or []), *argv]
        try:
            popen = subprocess.Popen(
                cmd,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=full_env,
                cwd=self.host_dir / "work",
                start_new_session=True,
                close_fds=True,
                preexec_fn=_preexec(
                    self._cgroups.procs_files if self._cgroups else (),  # noqa: PLW1509
                    rlimits,
                    self.uid,
                ),
            )
        except OSError as exc:
            raise SandboxError(f"cannot launch {argv[0]!r} in sandbox {self.id}: {exc}") from exc
        with self._lock:
            self._processes.add(popen)
        return popen

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        self._require_alive()
        timeout_s, cap = self._exec_defaults(timeout_s, max_output_bytes)
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        popen = self._popen(
            argv,
            env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cpu_s=timeout_s * self.limits.cpus,
        )
        capture = OutputCapture(cap)
        try:
            stopped = _pump(popen, stdin, deadline, capture)
            if not stopped:
                try:
                    popen.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    stopped = True
            timed_out = stopped and not capture.truncated
            if stopped or not self.isolated:  # outside bwrap, leftovers of its group go too
                try:
                    os.killpg(popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            popen.wait()
        finally:
            for pipe in (popen.stdin, popen.stdout, popen.stderr):
                if pipe is not None:
                    pipe.close()
            with self._lock:
                self._processes.discard(popen)
        assert popen.returncode is not None
        return ExecResult(
            shell_status(popen.returncode),
            capture.stdout,
            capture.stderr,
            timed_out,
            capture.truncated,
            time.monotonic() - t0,
        )

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LocalProcess:
        self._require_alive()
        log_path = self.host_dir / "logs" / f"{os.urandom(4).hex()}.log"
        with open(log_path, "wb") as log:
            popen = self._popen(
                argv, env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cpu_s=None
            )
        return LocalProcess(popen, log_path)

    def _kill_everything(self) -> None:
        with self._lock:
            processes = list(self._processes)
            self._processes.clear()
        for popen in processes:
            _kill_group(popen)
        if self._cgroups is not None:
            self._cgroups.kill_all()

    def reset(self) -> None:
        self._require_alive()
        self._kill_everything()
        self._clear_host_dirs()
        for log in (self.host_dir / "logs").iterdir():
            log.unlink(missing_ok=True)

    def _cleanup(self) -> None:
        self._kill_everything()
        if self._cgroups is not None:
            self._cgroups.remove()
            self._cgroups = None
        unmount_under(self.host_dir)
        self._remove_host_dir()


def _pump(
    popen: subprocess.Popen[bytes], stdin: bytes | None, deadline: float, capture: OutputCapture
) -> bool:
    """Feed ``stdin`` and collect stdout/stderr until both close; ``True`` if stopped early
    (deadline passed, or a stream went over the cap)."""
    assert popen.stdout is not None and popen.stderr is not None
    pending = memoryview(stdin or b"")
    with selectors.DefaultSelector() as sel:
        sel.register(popen.stdout, selectors.EVENT_READ, STDOUT)
        sel.register(popen.stderr, selectors.EVENT_READ, STDERR)
        if popen.stdin is not None:
            os.set_blocking(popen.stdin.fileno(), False)
            sel.register(popen.stdin, selectors.EVENT_WRITE)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for key, _ in sel.select(remaining):
                if key.fileobj is popen.stdin:
                    try:
                        pending = pending[os.write(key.fd, pending[:_CHUNK]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(popen.stdin)
                        popen.stdin.close()
                    continue
                data = os.read(key.fd, _CHUNK)
                if not data:
                    sel.unregister(key.fileobj)
                elif not capture.feed(key.data, data):
                    return True
    return False
