"""What a client of the OpenEnv server (``agentgym serve --protocol openenv``) may ask of it:
the server in a child process (or in a thread, with a short idle time), real openenv and
WebSocket clients.

Regressions of what an audit found: openenv's ``/mcp`` gave a session slot to a JSON-RPC call
tied to no connection (one keep-alive connection took all 4,096 in 8.7 s), chunked bodies were
read without bound, and openenv's idle reaper freed a slot under a live connection, whose next
``reset`` made an env nobody closed (with ToolUse-v0, sandbox dirs and mounts until the server
stopped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client
from openenv.core import GenericEnvClient

from agentgym.envs.textgames.guess_number import GuessNumberEnv
from agentgym.integrations.openenv import MAX_BODY_BYTES, create_app
from agentgym.process import wait_until

from support.servers import OPENENV_ENV, serving_in_thread


def test_only_the_documented_routes_are_served_and_mcp_takes_no_session(openenv_server: str) -> None:
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
    with httpx.Client(base_url=openenv_server) as http:
        for _ in range(10):  # openenv gave each a session slot (of 2), tied to no connection
            assert http.post("/mcp", json=create).status_code == 404
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert http.get(path).status_code == 404
        assert http.get("/schema").json()["action"]["title"] == "TextAction"
        assert http.get("/metadata").json()["name"] == OPENENV_ENV
    ws_url = openenv_server.replace("http", "ws")
    with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
        websockets.sync.client.connect(f"{ws_url}/mcp")
    with (
        websockets.sync.client.connect(f"{ws_url}/ws") as ws,
        GenericEnvClient(base_url=openenv_server).sync() as b,
    ):
        for method in ("openenv/session/create", "tools/list"):
            ws.send(json.dumps({"type": "mcp", "data": create | {"method": method}}))
            error = json.loads(ws.recv(timeout=10))["data"]
            assert error["code"] == "UNKNOWN_TYPE" and "unknown message type 'mcp'" in error["message"]
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))  # both slots are free
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        assert b.reset(seed=0).observation["text"].startswith("Guess a number")


def test_an_oversized_body_is_refused_as_it_streams_and_the_server_goes_on(openenv_server: str) -> None:
    sent: list[int] = []

    def chunked() -> Iterator[bytes]:  # 64 MiB with no Content-Length
        for _ in range(256):
            sent.append(256 << 10)
            yield b"x" * (256 << 10)

    response = httpx.post(f"{openenv_server}/reset", content=chunked(), timeout=30)
    assert response.status_code == 413 and str(MAX_BODY_BYTES) in response.json()["detail"]
    assert sum(sent) < 32 << 20  # the server stopped reading
    action = {"action": {"action": "x" * (MAX_BODY_BYTES - 100)}}  # within the limit: a 409
    assert httpx.post(f"{openenv_server}/step", json=action).status_code == 409
    with GenericEnvClient(base_url=openenv_server).sync() as client:
        assert client.reset(seed=0).observation["text"].startswith("Guess a number")


def test_an_idle_session_ends_with_its_connection_and_max_sessions_bounds_the_live_envs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[GuessNumberEnv] = []
    closed: list[GuessNumberEnv] = []
    live: list[int] = []  # live envs, whenever one is made
    init = GuessNumberEnv.__init__

    def tracked(self: GuessNumberEnv, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)
        live.append(len(made) - len(closed))

    monkeypatch.setattr(GuessNumberEnv, "__init__", tracked)
    monkeypatch.setattr(GuessNumberEnv, "close", lambda self: closed.append(self), raising=False)

    def talk(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
        ws.send(json.dumps(message))
        return dict(json.loads(ws.recv(timeout=10)))

    def closed_for_idleness(ws: Any) -> bool:
        with pytest.raises(websockets.exceptions.ConnectionClosedOK):
            ws.recv(timeout=10)  # the server closes it: no message arrives first
        return ws.close_code == 1000 and ws.close_reason == "idle"

    with serving_in_thread(create_app(OPENENV_ENV, max_sessions=2, idle_timeout_s=1.0)) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        with websockets.sync.client.connect(ws_url) as a, websockets.sync.client.connect(ws_url) as b:
            for ws in (a, b):
                assert talk(ws, {"type": "reset", "data": {}})["type"] == "observation"
            for _ in range(3):  # a talks on past the timeout, b is silent
                time.sleep(0.5)
                assert talk(a, {"type": "state"})["type"] == "state"
            assert closed_for_idleness(b)
            wait_until(lambda: len(closed) == 2, timeout=10, interval=0.01, expired=TimeoutError)
            with websockets.sync.client.connect(ws_url) as c, websockets.sync.client.connect(ws_url) as d:
                assert talk(c, {"type": "reset", "data": {}})["type"] == "observation"  # b's slot
                assert json.loads(d.recv(timeout=10))["data"]["code"] == "CAPACITY_REACHED"
                assert closed_for_idleness(a)
        wait_until(lambda: len(closed) == len(made), timeout=10, interval=0.01, expired=TimeoutError)
    assert len(made) == 4 and max(live) <= 2 and {id(e) for e in made} == {id(e) for e in closed}
