"""The ``docker`` backend: one container per sandbox, through the docker SDK.

The container runs ``sleep infinity`` under Docker's init (which reaps zombies) with the
sandbox's memory (swap included), pids and CPU limits, ``network_mode="none"`` unless
``limits.network``, a read-only root, no capabilities, ``no-new-privileges``, and as the calling
user's uid:gid (so that the host can connect to, and delete, what the sandbox creates in the
shared directories). ``/tmp`` is a tmpfs (size: the memory limit, which it is charged to).
``/sandbox`` and ``/run/agentgym`` are bind mounts of per-sandbox host directories: Docker's
archive API cannot see inside tmpfs mounts, and a bind mount lets the host read and write files
directly and reach Unix sockets without any network.

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
the group is killed with a second exec. The image needs ``/bin/sh`` and ``sleep``.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import secrets
import selectors
import shutil
import socket
import struct
import threading
import time
import warnings
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
from agentgym.sandbox.daemon import docker_client
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.owner import Owner, current_container, current_owner, owner_alive

__all__ = ["LABEL", "DockerProcess", "DockerSandbox", "build_command", "docker_client", "remove_containers"]

LABEL = "agentgym.sandbox"
_CHUNK = 1 << 16
_EXIT_POLL_S = 0.25  # how often a quiet exec is checked for having exited


def _errors() -> Any:
    import docker.errors

    return docker.errors


class DockerProcess(SandboxProcess):
    """A process started by :meth:`DockerSandbox.spawn` (a detached exec)."""

    def __init__(self, sandbox: DockerSandbox, exec_id: str, pid_file: Path, log_path: Path) -> None:
        super().__init__(log_path)
        self._sandbox, self._exec_id, self._pid_file = sandbox, exec_id, pid_file
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
        client: a docker SDK client (default :func:`docker_client`).
    """

    backend = "docker"
    KILL_FIFO = ".kill"  # in the socket dir: process groups for the container's killer

    def __init__(
        self,
        image: str,
        limits: SandboxLimits | None = None,
        *,
        session: str | None = None,
        user: str | None = None,
        client: Any = None,
    ) -> None:
        super().__init__(limits, session=session)
        self.image = image
        self.user = user or f"{os.getuid()}:{os.getgid()}"
        self._client = client
        self.container_id: str | None = None

    @property
    def _api(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client.api

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
        _register_exit_hook()
        _require_shared_root(api, self.host_dir.parent)
        dirs = self._make_host_dirs("work", "run")
        self._mounts = {self.WORKDIR: dirs["work"], self.SOCKET_DIR: dirs["run"]}
        os.mkfifo(dirs["run"] / self.KILL_FIFO, 0o600)
        mem = self.limits.memory_bytes
        host_config = api.create_host_config(
            init=True,
            auto_remove=True,
            read_only=True,
            network_mode=None if self.limits.network else "none",
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=self.limits.pids,
            nano_cpus=int(self.limits.cpus * 1e9),
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={mem},mode=1777"},
            binds={str(host): {"bind": inside, "mode": "rw"} for inside, host in self._mounts.items()},
            cap_drop=["ALL"],
            **(NESTING if self.limits.nested else PLAIN),
        )
        if self.limits.nested:  # `docker run --security-opt systempaths=unconfined`
            host_config.update(MaskedPaths=[], ReadonlyPaths=[])
        try:
            created = api.create_container(
                self.image,
                entrypoint=["sh", "-c", _KILLER, f"{self.SOCKET_DIR}/{self.KILL_FIFO}"],
                command=[],
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
            raise SandboxError(
                f"image {self.image!r} not found: build it with `{build_command(self.image)}` first"
            ) from exc
        except errors.DockerException as exc:
            self._cleanup()
            raise SandboxError(f"cannot start a container from {self.image!r}: {exc}") from exc
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

    def _pid_file(self) -> tuple[str, Path]:
        name = f".{secrets.token_hex(6)}.pid"
        return f"{self.SOCKET_DIR}/{name}", self._mounts[self.SOCKET_DIR] / name

    def _kill_group(self, pid_file: Path, wait_s: float = 2.0) -> None:
        """SIGKILL the process group whose leader wrote ``pid_file`` (waiting for it to appear).

        The container's main process does the killing (:data:`_KILLER`), so it works when the
        group has used every pid the limit allows and no ``docker exec`` can start; an exec is
        the fallback if the killer does not answer."""
        deadline = time.monotonic() + wait_s
        while not (pid := _read_pid(pid_file)) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not pid:
            return
        if _write_fifo(
            self._mounts[self.SOCKET_DIR] / self.KILL_FIFO,
            f"{pid}\n".encode(),
            deadline=time.monotonic() + 1.0,
        ):
            return
        try:
            exec_id = self._exec_create(["sh", "-c", 'kill -s KILL -- "-$1"', "sh", pid], None, attach=False)
            self._api.exec_start(exec_id, detach=True)  # the caller drains the output meanwhile
        except SandboxDeadError:
            pass  # the container is gone, and the group with it

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
        pid_inside, pid_host = self._pid_file()
        cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', pid_inside, *argv]
        t0 = time.monotonic()
        exec_id = self._exec_create(cmd, env, attach=True, stdin=stdin is not None)
        capture = OutputCapture(cap)
        try:
            try:
                stream = self._api.exec_start(exec_id, socket=True)
            except _errors().APIError as exc:
                raise (self._dead() if not self.alive() else SandboxError(str(exc))) from exc
            sock: socket.socket = getattr(stream, "_sock", stream)
            try:
                outcome = _collect(
                    sock,
                    stdin,
                    t0 + timeout_s,
                    capture,
                    lambda: bool(self._api.exec_inspect(exec_id)["Running"]),
                )
                if outcome != "eof":  # timed out, over the cap, or children hold the output
                    self._kill_group(pid_host)
                    _drain(sock, timeout_s=2.0)
            finally:
                # shutdown() ends the connection even though the SDK's response object still
                # holds the fd; otherwise dockerd blocks copying output nobody reads, and stops
                # reporting the exit of every later exec in this container.
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
                stream.close()
            returncode = self._exit_code(exec_id)
        finally:
            pid_host.unlink(missing_ok=True)
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
        pid_inside, pid_host = self._pid_file()
        log_name = f".{secrets.token_hex(6)}.log"
        script = 'echo $$ > "$0"; log=$1; shift; exec "$@" > "$log" 2>&1'
        cmd = ["sh", "-c", script, pid_inside, f"{self.SOCKET_DIR}/{log_name}", *argv]
        exec_id = self._exec_create(cmd, env, attach=False)
        self._api.exec_start(exec_id, detach=True)
        return DockerProcess(self, exec_id, pid_host, self._mounts[self.SOCKET_DIR] / log_name)

    def reset(self) -> None:
        # Kill everything but Docker's init (pid 1), the `sleep` it guards, and this shell.
        script = (
            'keep=" 1 $$ $(cat /proc/1/task/1/children 2>/dev/null) "; '
            'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$keep" in *" $p "*) ;; '
            '*) kill -s KILL "$p" 2>/dev/null;; esac; done; '
            "rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null; true"
        )
        self.exec(["sh", "-c", script], timeout_s=30).check()
        self._clear_host_dirs()

    def _cleanup(self) -> None:
        if self.container_id is not None:
            errors = _errors()
            try:
                self._api.remove_container(self.container_id, force=True)
            except errors.NotFound:
                pass
            except errors.APIError as exc:
                if exc.status_code != 409:  # 409: removal already in progress (auto_remove)
                    raise
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


# The container's main process: reads process-group ids from a FIFO and SIGKILLs each group.
# `read` and `kill` are shell builtins, so it needs no new pid (a fork bomb may hold them all).
_KILLER = 'while :; do while read -r g; do kill -s KILL -- "-$g"; done < "$0"; done'


def _write_fifo(path: Path, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the FIFO at ``path`` once a reader has it open; False at ``deadline``."""
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: the reader is between two opens
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                return False
            time.sleep(0.005)
            continue
        try:
            return os.write(fd, data) == len(data)
        except OSError:
            return False
        finally:
            os.close(fd)


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
    still holds its output open)."""
    pending = memoryview(stdin or b"")
    buf = bytearray()
    sock.setblocking(False)
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
                if time.monotonic() - quiet_since >= _EXIT_POLL_S and not running():
                    return "exited"
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
                while len(buf) >= 8:
                    stream, size = buf[0], struct.unpack(">I", buf[4:8])[0]
                    if len(buf) < 8 + size:
                        break
                    payload = bytes(buf[8 : 8 + size])
                    del buf[: 8 + size]
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
    client: Any = None,
) -> list[str]:
    """Force-remove sandbox containers (label ``agentgym.sandbox=1``) and their host directories.

    Selects those created at least ``older_than_s`` ago; with ``only_dead_owners``, only those
    whose owner process is gone (on this host); with ``owner`` or ``session``, only that owner's
    or session's. Returns the names of the removed containers.
    """
    client = client or docker_client()
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


def _register_exit_hook() -> None:
    """At exit, remove every container this process created, even ones whose sandbox object was
    lost (:mod:`agentgym.sandbox.base`'s hook then closes the tracked sandboxes' host dirs)."""
    global _hook_pid
    with _hook_lock:
        if _hook_pid is None:
            atexit.register(_remove_mine)
            _hook_pid = os.getpid()


def _remove_mine() -> None:
    if os.getpid() != _hook_pid:  # a forked child: its parent's client and containers are not its own
        return
    try:
        remove_containers(owner=current_owner(), only_dead_owners=False)
    except Exception as exc:
        warnings.warn(
            f"removing this process's sandbox containers at exit failed: {exc}", SandboxWarning, stacklevel=1
        )
