"""Start an env server as a child process and wait until it serves; stop it for sure.

    with ServerProcess(max_sessions=64) as server:
        env = RemoteEnv(server.url, "agentgym/Sokoban-v0")
        ...

The child runs ``[*command_prefix, python, "-m", "agentgym.server", ...]``: a sandbox puts its
own launcher in ``command_prefix`` (``["bwrap", "--unshare-all", ..., "--"]``) and must make
:attr:`ServerProcess.workdir` visible at the same path inside (the ready file, the log and a
Unix socket live there). Readiness follows :mod:`agentgym.server.serve`: the child writes
``workdir/ready.json``; the parent then checks ``GET /health``. The child is an
:class:`agentgym.process.ManagedProcess`: its whole process group is stopped by ``stop``, after
a failed start, and at interpreter exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from agentgym.http import HealthCheck
from agentgym.process import (
    LOG_TAIL_LINES,
    ManagedProcess,
    ProcessStartError,
    ProcessStartTimeout,
    wait_until,
)
from agentgym.server.auth import TOKEN_ENV, auth_headers, server_token

__all__ = ["ServerProcess", "wait_healthy"]

_POLL_S = 0.02


def _health_check(url: str, uds: str | None, token: str | None) -> HealthCheck:
    return HealthCheck(url, uds=uds, headers=auth_headers(server_token(token)))


def wait_healthy(
    url: str, timeout: float, *, uds: str | None = None, token: str | None = None
) -> dict[str, Any]:
    """Poll ``GET url/health`` until it answers 200 (returns its JSON) or ``timeout`` seconds
    pass (``TimeoutError``); ``token`` as for :class:`~agentgym.server.transport.Transport`."""

    def expired() -> TimeoutError:
        return TimeoutError(f"no healthy env server at {url} after {timeout} s")

    with _health_check(url, uds, token) as healthy:
        return wait_until(healthy, timeout=timeout, interval=_POLL_S, expired=expired).json()


class ServerProcess:
    """An env server in a child process (its own process group), stopped on exit.

    Args:
        host: address to bind; the port is always picked by the server (``--port 0``).
        use_uds: serve on a Unix socket in ``workdir`` instead of TCP (``url`` is then
            ``http://localhost`` and :attr:`uds` the socket's path).
        max_sessions, idle_timeout_s, max_body_bytes, env_allowlist, allow_entry_points:
            passed to the server (``None``: its default).
        allowed_kwargs: kwargs clients may set beyond the manifests' (``--allow-kwarg``);
            ``None``: any (``--trust-client-kwargs``).
        token: the bearer token the server requires, given to it in its environment (never
            on its command line) and used by :meth:`start`'s health check; default
            ``$AGENTGYM_SERVER_TOKEN``.
        extra_args: more command-line arguments for the server.
        command_prefix: argv put before the Python command (a sandbox launcher).
        python: the interpreter inside the sandbox (default: this one).
        env: environment variables set for the child, over a copy of this process's.
        workdir: directory for the ready file, the log and the socket; default a fresh temporary
            directory, removed by :meth:`stop` (a given one is left in place).
        startup_timeout: seconds :meth:`start` waits for the server to serve.
        stop_timeout: seconds :meth:`stop` waits after SIGTERM before SIGKILL.

    Attributes (after :meth:`start`): ``pid``, ``url``, ``uds``, ``ready`` (the ready file's
    JSON; its ``pid`` is the server's own, which differs from ``pid`` under a prefix).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        use_uds: bool = False,
        max_sessions: int | None = None,
        idle_timeout_s: float | None = None,
        max_body_bytes: int | None = None,
        env_allowlist: Iterable[str] | None = None,
        allow_entry_points: bool = False,
        allowed_kwargs: Iterable[str] | None = (),
        token: str | None = None,
        extra_args: Sequence[str] = (),
        command_prefix: Sequence[str] = (),
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ):
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.host = host
        self.use_uds = use_uds
        options: list[str] = []
        for flag, value in (
            ("--max-sessions", max_sessions),
            ("--idle-timeout", idle_timeout_s),
            ("--max-body-bytes", max_body_bytes),
        ):
            if value is not None:
                options += [flag, str(value)]
        for env_id in env_allowlist or ():
            options += ["--allow-env", env_id]
        if allow_entry_points:
            options.append("--allow-entry-points")
        if allowed_kwargs is None:
            options.append("--trust-client-kwargs")
        for name in allowed_kwargs or ():
            options += ["--allow-kwarg", name]
        self.token = server_token(token)
        self._options = options + list(extra_args)
        self.command_prefix = list(command_prefix)
        self.python = python
        self.env = dict(env or {}) | ({TOKEN_ENV: self.token} if self.token else {})
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._server: ManagedProcess | None = None
        self.ready: dict[str, Any] = {}
        self.url = ""
        self.uds: str | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The child (None before :meth:`start`)."""
        return None if self._server is None else self._server.process

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the server was not started")
        return self.process.pid

    @property
    def log_path(self) -> Path:
        """The child's stdout and stderr."""
        assert self.workdir is not None, "the server was not started"
        return self.workdir / "server.log"

    def command(self) -> list[str]:
        """The child's argv."""
        assert self.workdir is not None, "the server was not started"
        address = (
            ["--uds", str(self.workdir / "server.sock")]
            if self.use_uds
            else ["--host", self.host, "--port", "0"]
        )
        return [
            *self.command_prefix,
            self.python,
            "-m",
            "agentgym.server",
            *address,
            "--ready-file",
            str(self.workdir / "ready.json"),
            *self._options,
        ]

    def start(self) -> ServerProcess:
        """Start the child and wait until ``GET /health`` answers; raises ``RuntimeError`` (the
        child exited; the log's tail attached) or ``TimeoutError``, after cleaning up."""
        if self._server is not None:
            raise RuntimeError("the server was already started")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="agentgym-server-"))
        ready_file = self.workdir / "ready.json"
        ready_file.unlink(missing_ok=True)
        self._server = ManagedProcess(
            self.command(),
            name="the env server",
            log_path=self.log_path,
            env=self.env,
            stop_timeout=self.stop_timeout,
        ).start()
        try:
            self._wait_serving(self._server, ready_file)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_serving(self, server: ManagedProcess, ready_file: Path) -> None:
        """Wait for the ready file, then for ``GET /health``; the child's failures in this
        class's words."""
        try:
            server.wait_ready(ready_file.exists, timeout=self.startup_timeout, interval=0.01)
            self.ready = json.loads(ready_file.read_text())
            self.url, self.uds = self.ready["url"], self.ready.get("uds")
            with _health_check(self.url, self.uds, self.token) as healthy:
                server.wait_ready(healthy, timeout=max(self.startup_timeout, 1.0), interval=_POLL_S)
        except ProcessStartTimeout as exc:
            raise TimeoutError(
                f"the env server did not serve within {self.startup_timeout} s:\n{exc.log_tail}"
            ) from None
        except ProcessStartError as exc:
            raise RuntimeError(
                f"the env server exited with status {exc.returncode} before serving:\n{exc.log_tail}"
            ) from None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the child's output."""
        return "" if self._server is None else self._server.log_tail(lines)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the child's process group and reap it (no graceful shutdown; for tests of
        a server that dies)."""
        if self._server is not None:
            self._server.kill()

    def stop(self) -> int | None:
        """SIGTERM (graceful: every env is closed), SIGKILL after ``stop_timeout`` s, reap, and
        remove the temporary workdir. Idempotent; returns the exit status (``-15`` after a
        graceful SIGTERM shutdown)."""
        status = None if self._server is None else self._server.stop()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return status

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        pid = self.process.pid if self.process is not None else None
        return f"ServerProcess({self.url or 'not started'}, pid {pid}, {state})"
