"""What the env server's tests share (server/, security/): the fixture envs' ``PYTHONPATH``
and :func:`start_server` (a plugin of ``tests/conftest.py``, so every test may ask for it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym.server.launch import ServerProcess

from support import FIXTURES

FIXTURE_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))}
"""The environment of a server that hosts the fixture envs (tests/fixtures)."""


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
