"""What the env server's tests share (server/, security/, hosting/): the fixture envs'
``PYTHONPATH``, :func:`start_server` (a plugin of ``tests/conftest.py``, so every test may ask for
it), and for killing servers mid-run :class:`KillingPolicy` and :func:`record_made`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from agentgym.hosting import ServerPool
from agentgym.policies.scripted import RandomPolicy
from agentgym.policy import Generation, GenerationRequest
from agentgym.server.client import RemoteEnv
from agentgym.server.launch import ServerProcess

from support import FIXTURES

FIXTURE_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))}
"""The environment of a server that hosts the fixture envs (tests/fixtures)."""


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
