"""Start an env server as a child process and wait until it serves; stop it for sure.

    with ServerProcess(max_sessions=64) as server:
        env = RemoteEnv(server.url, "agentgym/Sokoban-v0")
        ...

The child runs ``[*command_prefix, python, "-m", "agentgym.server", ...]``: a sandbox puts its
own launcher in ``command_prefix`` (``["bwrap", "--unshare-all", ..., "--"]``) and must make
:attr:`ServerProcess.workdir` visible at the same path inside (the ready file, the log and a
Unix socket live there). Readiness follows :mod:`agentgym.server.serve`: the child writes
``workdir/ready.json``; the parent then checks ``GET /health``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from agentgym.server.auth import TOKEN_ENV, auth_headers, server_token

__all__ = ["ServerProcess", "wait_healthy"]


def wait_healthy(url: str, timeout: float, *, uds: str | None = None,
                 token: str | None = None) -> dict[str, Any]:
    """Poll ``GET url/health`` until it answers 200 (returns its JSON) or ``timeout`` seconds
    pass (``TimeoutError``); ``token`` as for :class:`~agentgym.server.transport.Transport`."""
    transport = httpx.HTTPTransport(uds=uds) if uds else None
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, transport=transport, trust_env=False, timeout=2.0,
                      headers=auth_headers(server_token(token))) as client:
        while True:
            try:
                response = client.get("/health")
                if response.status_code == 200:
                    return response.json()
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no healthy env server at {url} after {timeout} s")
            time.sleep(0.02)


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

    def __init__(self, *, host: str = "127.0.0.1", use_uds: bool = False,
                 max_sessions: int | None = None, idle_timeout_s: float | None = None,
                 max_body_bytes: int | None = None, env_allowlist: Iterable[str] | None = None,
                 allow_entry_points: bool = False, allowed_kwargs: Iterable[str] | None = (),
                 token: str | None = None, extra_args: Sequence[str] = (),
                 command_prefix: Sequence[str] = (), python: str = sys.executable,
                 env: Mapping[str, str] | None = None,
                 workdir: str | os.PathLike[str] | None = None,
                 startup_timeout: float = 60.0, stop_timeout: float = 15.0):
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.host = host
        self.use_uds = use_uds
        options: list[str] = []
        for flag, value in (("--max-sessions", max_sessions), ("--idle-timeout", idle_timeout_s),
                            ("--max-body-bytes", max_body_bytes)):
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
        self.process: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self.url = ""
        self.uds: str | None = None

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
        address = (["--uds", str(self.workdir / "server.sock")] if self.use_uds
                   else ["--host", self.host, "--port", "0"])
        return [*self.command_prefix, self.python, "-m", "agentgym.server", *address,
                "--ready-file", str(self.workdir / "ready.json"), *self._options]

    def start(self) -> ServerProcess:
        """Start the child and wait until ``GET /health`` answers; raises ``RuntimeError`` (the
        child exited; the log's tail attached) or ``TimeoutError``, after cleaning up."""
        if self.process is not None:
            raise RuntimeError("the server was already started")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="agentgym-server-"))
        ready_file = self.workdir / "ready.json"
        ready_file.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **self.env}, start_new_session=True)
        try:
            self.ready = self._wait_ready_file(ready_file)
            self.url, self.uds = self.ready["url"], self.ready.get("uds")
            wait_healthy(self.url, max(self.startup_timeout, 1.0), uds=self.uds,
                         token=self.token)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready_file(self, ready_file: Path) -> dict[str, Any]:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while not ready_file.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"the env server exited with status {self.process.returncode} "
                                   f"before serving:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the env server did not serve within {self.startup_timeout} s:"
                                   f"\n{self.log_tail()}")
            time.sleep(0.01)
        return json.loads(ready_file.read_text())

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the child's output."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except (AssertionError, FileNotFoundError):
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the child's process group and reap it (no graceful shutdown; for tests of
        a server that dies)."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> int | None:
        """SIGTERM (graceful: every env is closed), SIGKILL after ``stop_timeout`` s, reap, and
        remove the temporary workdir. Idempotent; returns the exit status (``-15`` after a
        graceful SIGTERM shutdown)."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return None if self.process is None else self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        pid = self.process.pid if self.process is not None else None
        return f"ServerProcess({self.url or 'not started'}, pid {pid}, {state})"
