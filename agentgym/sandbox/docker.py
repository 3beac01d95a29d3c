"""The ``docker`` backend: one container per sandbox, through the docker SDK.

The container runs ``sleep infinity`` under Docker's init (which reaps zombies) with the
sandbox's memory (swap included), pids and CPU limits, ``network_mode="none"`` unless
``limits.network``, a read-only root, no capabilities, ``no-new-privileges``, and as the calling
user's uid:gid (so that the host can connect to, and delete, what the sandbox creates in the
shared directories). ``/tmp`` is a tmpfs (size: the memory limit, which it is charged to).
``/sandbox`` and ``/run/agentgym`` are bind mounts of per-sandbox host directories: Docker's
archive API cannot see inside tmpfs mounts, and a bind mount lets the host read and write files
directly and reach Unix sockets without any network.

On a remote Docker host (``host``: a daemon that does not share this machine's files, see
:func:`~agentgym.sandbox.daemon.shares_files`) nothing can be bind-mounted: ``/sandbox`` (size:
``limits.disk_bytes``) and ``/run/agentgym`` are tmpfs mounts too, files are read and written
through exec, and :meth:`DockerSandbox.endpoint` is a Unix socket on this machine forwarded
over the Docker API to the one inside (:class:`~agentgym.sandbox.forward.SocketForward`): the
container keeps no network, and no port is published.

Every container carries labels: ``agentgym.sandbox=1``, ``agentgym.owner.pid``,
``agentgym.owner.start``, ``agentgym.owner.host``, ``agentgym.created`` (unix seconds),
``agentgym.hostdir``, if given ``agentgym.session``, and ``agentgym.owner.container`` (the
container's id) for an owner that runs in a container itself. It is created with
``auto_remove``, so a container that dies removes itself; :meth:`DockerSandbox.close`
force-removes; an exit hook removes every container this process created;
:func:`remove_containers` removes leftovers.

From inside a container (the harness image, ``containers/harness``) sandboxes are sibling
containers of the same daemon, whose bind-mount sources are paths on the Docker host: the host
directories' root (:func:`~agentgym.sandbox.base.host_dir_root`, ``$AGENTGYM_SANDBOX_ROOT``) must
be a host directory mounted at the same path (``-v $D:$D -e AGENTGYM_SANDBOX_ROOT=$D``), which
:meth:`DockerSandbox.start` checks.

Docker exec has no timeout and no output cap: each command runs as
``sh -c 'echo $$ > <pid file>; exec "$@"'`` (Docker makes every exec a process-group leader),
its multiplexed output is read from the raw socket under a deadline and a byte cap, and on either
the group is killed by the container's main process (:data:`_KILLER`), told the pid file on its
stdin. The image needs ``/bin/sh``, and ``python`` for forwarded sockets.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import posixpath
import re
import secrets
import selectors
import shutil
import socket
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.sandbox.base import (
    HOST_DIR_PREFIX,
    ROOT_ENV,
    ExecResult,
    Sandbox,
    SandboxDeadError,
    SandboxError,
    SandboxProcess,
    SandboxWarning,
    track,
)
from agentgym.sandbox.capture import OutputCapture
from agentgym.sandbox.daemon import (
    LABEL,
    attached,
    docker_client,
    reason,
    shares_files,
    transport_errors,
)
from agentgym.sandbox.forward import SocketForward, frames
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.owner import Owner, current_container, current_owner, owner_alive

__all__ = ["LABEL", "DockerProcess", "DockerSandbox", "build_command", "docker_client", "remove_containers"]

_CHUNK = 1 << 16
_EXIT_POLL_S = 0.25  # how often a quiet exec is checked for having exited
_EXITED_GRACE_S = 0.5  # how long output may trail an exec's exit (a loaded daemon, a remote one)


def _errors() -> Any:
    import docker.errors

    return docker.errors


class DockerProcess(SandboxProcess):
    """A process started by :meth:`DockerSandbox.spawn` (a detached exec)."""

    def __init__(self, sandbox: DockerSandbox, exec_id: str, pid_file: str, log_file: str) -> None:
        super().__init__(sandbox._on_host(log_file))
        self._sandbox, self._exec_id, self._pid_file, self._log_file = sandbox, exec_id, pid_file, log_file
        self._status: int | None = None

    def poll(self) -> int | None:
        if self._status is None:
            try:
                info = self._sandbox._api.exec_inspect(self._exec_id)
            except _errors().NotFound:  # the container is gone, and the process with it
                self._status = 137
            else:
                if not info["Running"] and info["ExitCode"] is not None:
                    self._status = info["ExitCode"]
        return self._status

    def kill(self) -> None:
        if self.poll() is None:
            self._sandbox._kill_group(self._pid_file)

    def logs(self, max_bytes: int = 64 << 10) -> bytes:
        if not self._sandbox.remote:
            return super().logs(max_bytes)
        try:
            result = self._sandbox.exec(["tail", "-c", str(max_bytes), self._log_file], timeout_s=10)
        except SandboxError:  # the container is gone, and its log with it
            return b""
        return result.stdout if result.ok else b""


PLAIN: dict[str, list[str]] = {"security_opt": ["no-new-privileges"]}
NESTING: dict[str, list[str]] = {
    "cap_add": ["SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"],
    "security_opt": ["no-new-privileges", "seccomp=unconfined"],
}
"""What a container of :attr:`SandboxLimits.nested` gets (see there), for bubblewrap inside."""


class DockerSandbox(Sandbox):
    """A sandbox in a Docker container; see the module documentation.

    Args:
        image: image to run (``agentgym.sandbox.image_for(manifest)`` for an env's own image).
        limits: resource limits (default :class:`SandboxLimits`).
        session: value of the ``agentgym.session`` label, to find or remove a run's containers.
        user: ``"uid:gid"`` to run as (default: the calling user's). Another user may leave files
            in the host directories that this process cannot delete.
        host: the Docker daemon's URL (:mod:`agentgym.sandbox.daemon`; default: the default
            daemon). On a remote one, see the module documentation.
    """

    backend = "docker"

    def __init__(
        self,
        image: str,
        limits: SandboxLimits | None = None,
        *,
        session: str | None = None,
        user: str | None = None,
        host: str | None = None,
    ) -> None:
        super().__init__(limits, session=session)
        self.image = image
        self.user = user or f"{os.getuid()}:{os.getgid()}"
        self.host = host
        self.remote = not shares_files(host)
        """Whether the daemon is remote: no bind mounts, files through exec, forwarded sockets."""
        self.container_id: str | None = None
        self._forwards: dict[str, SocketForward] = {}
        self._forwards_lock = threading.Lock()
        self._counted = False  # in _live

    @property
    def _api(self) -> Any:
        return docker_client(self.host).api

    def labels(self) -> dict[str, str]:
        """The labels put on the container."""
        labels = {
            LABEL: "1",
            "agentgym.owner.pid": str(self.owner.pid),
            "agentgym.owner.start": str(self.owner.start),
            "agentgym.owner.host": self.owner.host,
            "agentgym.created": f"{time.time():.3f}",
            "agentgym.hostdir": str(self.host_dir),
        }
        if self.session is not None:
            labels["agentgym.session"] = self.session
        if self.owner.container is not None:
            labels["agentgym.owner.container"] = self.owner.container
        return labels

    def start(self) -> DockerSandbox:
        if self._closed:
            raise SandboxDeadError(f"sandbox {self.id} is closed")
        if self._started:
            return self
        errors = _errors()
        api = self._api
        _count(self.host, +1)
        self._counted = True
        mem = self.limits.memory_bytes
        tmpfs = {"/tmp": f"rw,nosuid,nodev,size={mem},mode=1777"}
        if self.remote:  # the host dir holds only the forwarded sockets
            self._make_host_dirs("run")
            uid, gid = self.user.split(":")
            owned = f"rw,nosuid,nodev,mode=0700,uid={uid},gid={gid}"
            tmpfs[self.WORKDIR] = f"{owned},size={self.limits.disk_bytes}"
            tmpfs[self.SOCKET_DIR] = f"{owned},size=1m"
        else:
            _require_shared_root(api, self.host_dir.parent)
            dirs = self._make_host_dirs("work", "run")
            self._mounts = {self.WORKDIR: dirs["work"], self.SOCKET_DIR: dirs["run"]}
        host_config = api.create_host_config(
            init=True,
            auto_remove=True,
            read_only=True,
            network_mode=None if self.limits.network else "none",
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=self.limits.pids,
            nano_cpus=int(self.limits.cpus * 1e9),
            tmpfs=tmpfs,
            binds={str(host): {"bind": inside, "mode": "rw"} for inside, host in self._mounts.items()},
            cap_drop=["ALL"],
            **(NESTING if self.limits.nested else PLAIN),
        )
        if self.limits.nested:  # `docker run --security-opt systempaths=unconfined`
            host_config.update(MaskedPaths=[], ReadonlyPaths=[])
        try:
            created = api.create_container(
                self.image,
                entrypoint=["sh", "-c", _KILLER],
                command=[],
                stdin_open=True,
                detach=True,  # (else the SDK sets StdinOnce: stdin would close after one kill)
                name=f"agentgym-{self.id}",
                user=self.user,
                working_dir=self.WORKDIR,
                environment=self._base_env(),
                labels=self.labels(),
                host_config=host_config,
                network_disabled=not self.limits.network,
            )
            self.container_id = created["Id"]
            api.start(self.container_id)
        except errors.ImageNotFound as exc:
            self._cleanup()
            where, command = "", build_command(self.image)
            if self.host is not None:
                where, command = f" on {self.host}", f"DOCKER_HOST={self.host} {command}"
            message = f"image {self.image!r} not found{where}: build it with `{command}` first"
            raise SandboxError(message) from exc
        except (errors.DockerException, *transport_errors()) as exc:
            self._cleanup()
            raise SandboxError(f"cannot start a container from {self.image!r}: {reason(exc)}") from exc
        except BaseException:
            self._cleanup()
            raise
        self._started = True
        track(self)
        return self

    def alive(self) -> bool:
        if not self._started or self._closed:
            return False
        try:
            return bool(self._api.inspect_container(self.container_id)["State"]["Running"])
        except _errors().NotFound:
            return False

    def death(self) -> str | None:
        if self._closed or not self._started:
            return super().death()
        try:
            state = self._api.inspect_container(self.container_id)["State"]
        except _errors().NotFound:
            return f"sandbox {self.id} is dead: its container is gone (killed or removed)"
        if state.get("Running"):
            return None
        return (
            f"sandbox {self.id} is dead: container {state.get('Status')}, exit code "
            f"{state.get('ExitCode')}, OOM-killed {state.get('OOMKilled')}"
        )

    def _dead(self) -> SandboxDeadError:
        """The error for a container that is no longer running, saying what happened to it."""
        return SandboxDeadError(self.death() or f"sandbox {self.id} is dead: its container stopped running")

    def _exec_create(
        self, cmd: Sequence[str], env: Mapping[str, str] | None, *, attach: bool, stdin: bool = False
    ) -> str:
        self._require_started()
        errors = _errors()
        try:
            return self._api.exec_create(
                self.container_id,
                list(cmd),
                stdout=attach,
                stderr=attach,
                stdin=stdin,
                environment=dict(env or {}),
                workdir=self.WORKDIR,
                user=self.user,
            )["Id"]
        except errors.NotFound:
            raise self._dead() from None
        except errors.APIError as exc:
            if exc.status_code == 409:  # "container ... is not running"
                raise self._dead() from None
            raise SandboxError(f"docker exec in sandbox {self.id} failed: {exc}") from exc
        except transport_errors() as exc:
            raise SandboxError(f"docker exec in sandbox {self.id} failed: {reason(exc)}") from exc

    def _on_host(self, inside: str) -> Path | None:
        """The host path of ``inside``, a file in :attr:`socket_dir` (None on a remote host)."""
        run = self._mounts.get(self.SOCKET_DIR)
        return None if run is None else run / posixpath.basename(inside)

    def _pid_file(self) -> str:
        return f"{self.SOCKET_DIR}/.{secrets.token_hex(6)}.pid"

    def _kill_group(self, pid_file: str, wait_s: float = 2.0) -> None:
        """SIGKILL the process group whose leader wrote ``pid_file`` (on this machine's files,
        waiting up to ``wait_s`` for it to appear).

        The container's main process does the killing (:data:`_KILLER`), told the pid file on its
        stdin through the Docker API, so it works when the group has used every pid the limit
        allows and no ``docker exec`` can start."""
        host = self._on_host(pid_file)
        if host is not None:
            deadline = time.monotonic() + wait_s
            while not (pid := _read_pid(host)) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not pid:
                return
        try:
            stream = self._api.attach_socket(self.container_id, params={"stdin": 1, "stream": 1})
        except (_errors().DockerException, *transport_errors()):
            return  # the container is gone, and the group with it (or its daemon, for now)
        with attached(stream) as sock, contextlib.suppress(OSError):
            sock.sendall(f"{pid_file}\n".encode())

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if not argv:
            raise ValueError("argv must not be empty")
        timeout_s, cap = self._exec_defaults(timeout_s, max_output_bytes)
        pid_file = self._pid_file()
        cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', pid_file, *argv]
        t0 = time.monotonic()
        exec_id = self._exec_create(cmd, env, attach=True, stdin=stdin is not None)
        capture = OutputCapture(cap)
        try:
            try:
                stream = self._api.exec_start(exec_id, socket=True)
            except _errors().APIError as exc:
                raise (self._dead() if not self.alive() else SandboxError(str(exc))) from exc
            except transport_errors() as exc:
                raise SandboxError(f"docker exec in sandbox {self.id} failed: {reason(exc)}") from exc
            # closed with a shutdown: else dockerd blocks copying output nobody reads, and stops
            # reporting the exit of every later exec in this container
            with attached(stream) as sock:
                outcome = _collect(
                    sock,
                    stdin,
                    t0 + timeout_s,
                    capture,
                    lambda: bool(self._api.exec_inspect(exec_id)["Running"]),
                )
                if outcome != "eof":  # timed out, over the cap, or children hold the output
                    self._kill_group(pid_file)
                    _drain(sock, timeout_s=2.0)
            returncode = self._exit_code(exec_id)
        finally:
            if (host := self._on_host(pid_file)) is not None:
                host.unlink(missing_ok=True)
        return ExecResult(
            returncode,
            capture.stdout,
            capture.stderr,
            outcome == "timeout",
            capture.truncated,
            time.monotonic() - t0,
        )

    def _exit_code(self, exec_id: str, wait_s: float = 2.0) -> int | None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                info = self._api.exec_inspect(exec_id)
            except _errors().NotFound:
                return None
            if not info["Running"] and info["ExitCode"] is not None:
                return int(info["ExitCode"])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> DockerProcess:
        if not argv:
            raise ValueError("argv must not be empty")
        pid_file, log_file = self._pid_file(), f"{self.SOCKET_DIR}/.{secrets.token_hex(6)}.log"
        script = 'echo $$ > "$0"; log=$1; shift; exec "$@" > "$log" 2>&1'
        exec_id = self._exec_create(["sh", "-c", script, pid_file, log_file, *argv], env, attach=False)
        self._api.exec_start(exec_id, detach=True)
        return DockerProcess(self, exec_id, pid_file, log_file)

    def endpoint(self, name: str) -> str:
        if not self.remote:
            return super().endpoint(name)
        self._require_started()
        assert self.container_id is not None
        with self._forwards_lock:
            forward = self._forwards.get(name)
            if forward is None:
                inside, local = self.socket_path(name), self.host_dir / "run" / f"{name}.sock"
                forward = SocketForward(self._api, self.container_id, inside, local, user=self.user)
                self._forwards[name] = forward.start()
        return f"unix:{forward.local}"

    def _listening(self, name: str) -> bool:
        if not self.remote:
            return super()._listening(name)
        probe = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"
        return self.exec(["python", "-c", probe, self.socket_path(name)], timeout_s=10).ok

    def reset(self) -> None:
        # Kill everything but Docker's init (pid 1), the killer it guards, and this shell; empty
        # the directories that are no host directories.
        dirs = " ".join(["/tmp", *([self.WORKDIR, self.SOCKET_DIR] if self.remote else [])])
        script = (
            'keep=" 1 $$ $(cat /proc/1/task/1/children 2>/dev/null) "; '
            'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$keep" in *" $p "*) ;; '
            '*) kill -s KILL "$p" 2>/dev/null;; esac; done; '
            f'for d in {dirs}; do rm -rf "$d"/* "$d"/.[!.]* "$d"/..?*; done 2>/dev/null; true'
        )
        self.exec(["sh", "-c", script], timeout_s=30).check()
        self._clear_host_dirs()

    def _cleanup(self) -> None:
        with self._forwards_lock:
            forwards, self._forwards = list(self._forwards.values()), {}
        for forward in forwards:
            forward.close()
        if self.container_id is not None:
            errors = _errors()
            try:
                self._api.remove_container(self.container_id, force=True)
            except errors.NotFound:
                pass
            except errors.APIError as exc:
                if exc.status_code != 409:  # 409: removal already in progress (auto_remove)
                    raise
            except transport_errors() as exc:  # its daemon cannot be reached now
                warnings.warn(
                    f"could not remove the container of sandbox {self.id} on {self.host}: "
                    f"{reason(exc)}; `agentgym sandbox gc` removes it later",
                    SandboxWarning,
                    stacklevel=2,
                )
        if self._counted:
            _count(self.host, -1)
            self._counted = False
        self._remove_host_dir()


def build_command(image: str) -> str:
    """The ``agentgym build`` command line that makes ``image`` (an agentgym image, or the
    offline base) on this machine."""
    m = re.fullmatch(r"agentgym/([\w.-]+)(?::[\w.-]+)?", image)
    if m is None:
        return "agentgym build (or docker pull)"
    return "agentgym build --offline-base" if m[1] == "base" else f"agentgym build {m[1]}"


_shared_roots: set[Path] = set()


def _require_shared_root(api: Any, root: Path) -> None:
    """In a container, raise :class:`SandboxError` (saying how to start the container) unless
    ``root`` is a bind mount of the same path on the Docker host, where sibling containers'
    bind-mount sources are looked up. Nothing to check outside containers, or in one that the
    daemon does not know (a remote daemon)."""
    container = current_container()
    if container is None or root in _shared_roots:
        return
    try:
        mounts = api.inspect_container(container)["Mounts"]
    except _errors().NotFound:
        return
    binds = [m for m in mounts if m.get("Type") == "bind" and root.is_relative_to(m["Destination"])]
    if binds:
        mount = max(binds, key=lambda m: len(Path(m["Destination"]).parts))
        if Path(mount["Source"]) / root.relative_to(mount["Destination"]) == root:
            _shared_roots.add(root)
            return
    raise SandboxError(
        f"this process runs in container {container[:12]}, where the sandboxes' host directories "
        f"({root}) are not a host directory mounted at the same path, so sibling containers "
        f"cannot share them: start it with `-v $D:$D -e {ROOT_ENV}=$D` for a host directory $D "
        "(see containers/harness/Dockerfile)"
    )


# The container's main process: reads the paths of pid files from its stdin (see _kill_group) and
# SIGKILLs each one's process group. `read` and `kill` are shell builtins, and so is the
# redirection, so it needs no new pid (a fork bomb may hold them all).
_KILLER = 'while read -r f; do read -r g < "$f" && kill -s KILL -- "-$g"; done'


def _read_pid(path: Path) -> str | None:
    try:
        pid = path.read_text().strip()
    except FileNotFoundError:
        return None
    return pid if pid.isdigit() else None


def _collect(
    sock: socket.socket,
    stdin: bytes | None,
    deadline: float,
    capture: OutputCapture,
    running: Callable[[], bool],
) -> str:
    """Send ``stdin`` and demultiplex Docker's attach stream (8-byte frame headers: stream,
    0, 0, 0, big-endian length) into ``capture``. Returns why it stopped: ``"eof"``,
    ``"timeout"``, ``"cap"``, or ``"exited"`` (the command ended while something it started
    still holds its output open: nothing came for :data:`_EXITED_GRACE_S` after it ended, what
    it wrote last may trail its exit)."""
    pending = memoryview(stdin or b"")
    buf = bytearray()
    sock.setblocking(False)
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if stdin is not None else 0)
        sel.register(sock, events)
        quiet_since = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            ready = sel.select(min(deadline - now, _EXIT_POLL_S))
            if not ready:
                now = time.monotonic()
                if exited_at is not None and now - exited_at >= _EXITED_GRACE_S:
                    return "exited"
                if exited_at is None and now - quiet_since >= _EXIT_POLL_S and not running():
                    exited_at = now
                continue
            quiet_since = time.monotonic()
            _, mask = ready[0]
            if mask & selectors.EVENT_WRITE:
                try:
                    pending = pending[sock.send(pending[:_CHUNK]) :]
                except BlockingIOError:
                    pass
                if not pending:
                    sock.shutdown(socket.SHUT_WR)
                    sel.modify(sock, selectors.EVENT_READ)
            if mask & selectors.EVENT_READ:
                try:
                    data = sock.recv(_CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    return "eof"
                buf += data
                for stream, payload in frames(buf):
                    if stream in (1, 2) and not capture.feed(stream, payload):
                        return "cap"


def _drain(sock: socket.socket, timeout_s: float) -> None:
    """Read and discard until EOF (or ``timeout_s``), so that dockerd can finish the exec."""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if sel.select(remaining):
                try:
                    if not sock.recv(_CHUNK):
                        return
                except BlockingIOError:
                    pass
                except OSError:
                    return


# --- leftovers ---------------------------------------------------------------------------------


def _owner_of(labels: Mapping[str, str]) -> Owner:
    return Owner(
        int(labels.get("agentgym.owner.pid", "0")),
        int(labels.get("agentgym.owner.start", "0")),
        labels.get("agentgym.owner.host", ""),
        labels.get("agentgym.owner.container"),
    )


def remove_containers(
    *,
    older_than_s: float = 0.0,
    only_dead_owners: bool = True,
    owner: Owner | None = None,
    session: str | None = None,
    host: str | None = None,
) -> list[str]:
    """Force-remove sandbox containers (label ``agentgym.sandbox=1``) of the daemon at ``host``
    (default: the default daemon) and their host directories.

    Selects those created at least ``older_than_s`` ago; with ``only_dead_owners``, only those
    whose owner process is gone (on this host); with ``owner`` or ``session``, only that owner's
    or session's. Returns the names of the removed containers.
    """
    client = docker_client(host)
    errors = _errors()
    filters = [f"{LABEL}=1"] + ([f"agentgym.session={session}"] if session is not None else [])
    removed = []
    now = time.time()
    for c in client.api.containers(all=True, filters={"label": filters}):
        labels = c.get("Labels") or {}
        who = _owner_of(labels)
        if owner is not None and who != owner:
            continue
        if now - float(labels.get("agentgym.created", "0")) < older_than_s:
            continue
        if only_dead_owners and owner is None and owner_alive(who):
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
        except errors.NotFound:
            pass
        except errors.APIError as exc:
            if exc.status_code != 409:
                raise
        hostdir = labels.get("agentgym.hostdir", "")
        if _on_this_host(hostdir, who):
            shutil.rmtree(hostdir, ignore_errors=True)
        removed.append(c["Names"][0].lstrip("/") if c.get("Names") else c["Id"][:12])
    return removed


def _on_this_host(hostdir: str, owner: Owner) -> bool:
    """Whether ``hostdir`` (a container's ``agentgym.hostdir`` label) names a host directory of
    ``owner``'s on this machine: the owner runs here, or in a container, whose host directories
    are paths on the Docker host (see :func:`_require_shared_root`)."""
    named = os.path.basename(hostdir).startswith(f"{HOST_DIR_PREFIX}{owner.tag}-")
    return named and (owner.host == current_owner().host or owner.container is not None)


_hook_lock = threading.Lock()
_hook_pid: int | None = None
_live: Counter[str | None] = Counter()
"""Containers this process started and has not removed, by daemon."""


def _count(host: str | None, change: int) -> None:
    """Count a container started (+1) or removed (-1) on ``host``. At exit, every container this
    process created on a daemon with a count left is removed, even ones whose sandbox object was
    lost (:mod:`agentgym.sandbox.base`'s hook then closes the tracked sandboxes' host dirs)."""
    global _hook_pid
    with _hook_lock:
        _live[host] += change
        if _hook_pid is None:
            atexit.register(_remove_mine)
            _hook_pid = os.getpid()


def _remove_mine() -> None:
    if os.getpid() != _hook_pid:  # a forked child: its parent's client and containers are not its own
        return
    for host in sorted((h for h, n in _live.items() if n > 0), key=str):
        try:
            remove_containers(owner=current_owner(), only_dead_owners=False, host=host)
        except Exception as exc:
            warnings.warn(
                f"removing this process's sandbox containers on {host or 'the default daemon'} at exit "
                f"failed: {exc}",
                SandboxWarning,
                stacklevel=1,
            )
