"""What the servers' tests share (server/, security/, hosting/, integrations/): the fixture
envs' ``PYTHONPATH``, :func:`start_server` and :func:`openenv_server` (fixtures: this module is a
plugin of ``tests/conftest.py``, so every test may ask for them), :func:`serving_in_thread`, and
for killing servers mid-run :class:`KillingPolicy` and :func:`record_made`."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from agentgym.hosting import ServerPool
from agentgym.policies.scripted import RandomPolicy
from agentgym.policy import Generation, GenerationRequest
from agentgym.process import ManagedProcess, wait_until
from agentgym.server.client import RemoteEnv
from agentgym.server.launch import ServerProcess

from support import FIXTURES

FIXTURE_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))}
"""The environment of a server that hosts the fixture envs (tests/fixtures)."""
OPENENV_ENV = "agentgym/GuessNumber-v0"
"""The env :func:`openenv_server` serves."""


def error_detail(response: httpx.Response, status: int, code: str) -> str:
    """The ``detail`` of an env server's error answer, after checking its status and code."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code, body
    return body["detail"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_gone(server: ServerProcess) -> None:
    """``server`` stopped: its process ended and its temp dir is gone."""
    assert server.process is not None and server.process.returncode is not None
    assert not alive(server.pid), f"server process {server.pid} is still running"
    assert server.workdir is not None and not server.workdir.exists(), "temp dir left behind"


@pytest.fixture
def start_server() -> Iterator[Any]:
    """Start ServerProcesses for one test; each is stopped, and checked gone, afterwards."""
    started: list[ServerProcess] = []

    def start(**options: Any) -> ServerProcess:
        server = ServerProcess(**options)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
        assert_gone(server)


class KillingPolicy(RandomPolicy):
    """A random policy (its choices a function of each request's seed) that, from its
    ``at``-th generate call on, calls ``kill`` until it returns anything but ``False``."""

    inline = False  # its generate awaits

    def __init__(self, at: int, kill: Callable[[], bool | None]):
        super().__init__()
        self.at, self.kill, self.calls, self.killed = at, kill, 0, False

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.calls += 1
        if self.calls >= self.at and not self.killed:
            self.killed = self.kill() is not False
        return await super().generate(requests)


def record_made(pool: ServerPool) -> list[RemoteEnv]:
    """The envs that ``pool`` makes from now on, in order (a list this call returns and the
    pool's ``amake`` appends to): a test kills the server of one whose episode is under way,
    since a server that only has sessions being made costs no episode (a failed make is retried
    on another server)."""
    made: list[RemoteEnv] = []
    amake = pool.amake

    async def recording(*args: Any, **kwargs: Any) -> RemoteEnv:
        env = await amake(*args, **kwargs)
        made.append(env)
        return env

    pool.amake = recording  # type: ignore[method-assign]
    return made


@pytest.fixture(scope="module")
def openenv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of `agentgym serve --protocol openenv` for :data:`OPENENV_ENV` (5 guesses, at
    most 2 sessions), one per test module; afterwards it must have stopped on SIGTERM as the CLI
    does (143), logging no error."""
    workdir = tmp_path_factory.mktemp("openenv")
    ready = workdir / "ready.json"
    argv = [sys.executable, "-m", "agentgym.cli", "serve", "--protocol", "openenv", "--env", OPENENV_ENV]
    argv += ["--set", "max_guesses=5", "--port", "0", "--ready-file", str(ready), "--max-sessions", "2"]

    def announced() -> dict[str, Any]:
        return json.loads(ready.read_text()) if ready.exists() else {}  # written atomically

    with ManagedProcess(argv, log_path=workdir / "server.log", name="the openenv server") as process:
        info = process.wait_ready(announced, timeout=60)
        process.wait_ready(info["url"], timeout=30)  # GET /health
        yield info["url"]
        assert process.stop() == 143, process.log_tail()
    log = process.log_tail()
    assert "Traceback" not in log and "ERROR" not in log, log


@contextlib.contextmanager
def serving_in_thread(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread, on a free loopback port, until the block ends;
    the URL."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=30, interval=0.01, expired=TimeoutError)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()
