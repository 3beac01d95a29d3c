"""An agentgym env served to OpenEnv's clients (agentgym.integrations.openenv), through
`agentgym serve --protocol openenv` in a child process, driven by openenv-core's own clients."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import websockets.sync.client
from openenv.core import GenericEnvClient

from agentgym.cli import main
from agentgym.envs.textgames.guess_number import GuessNumberEnv
from agentgym.integrations.openenv import MAX_BODY_BYTES, TextAction, TextEnvClient, TextState, create_app
from agentgym.process import ManagedProcess, wait_until

GUESS = "agentgym/GuessNumber-v0"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of `agentgym serve --protocol openenv` for GuessNumber; afterwards it must have
    stopped on SIGTERM as the CLI does (143), logging no error."""
    workdir = tmp_path_factory.mktemp("openenv")
    ready = workdir / "ready.json"
    argv = [sys.executable, "-m", "agentgym.cli", "serve", "--protocol", "openenv", "--env", GUESS]
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


def test_generic_client_plays_an_episode(server: str) -> None:
    with GenericEnvClient(base_url=server).sync() as client:
        result = client.reset(seed=0, options={"task_id": "5"})
        assert result.observation["text"] == "Guess a number from 1 to 8. Guesses left: 5."
        assert result.observation["info"]["task_id"] == "5" and result.done is False
        result = client.step({"action": "4"})
        assert result.observation["text"].startswith("4 is too low.") and result.reward == 0.0
        for junk in ("not a number", "\ud800", "x" * 100_000):  # answered by the env
            result = client.step({"action": junk})
            assert result.observation["info"]["action_valid"] is False and result.done is False
            assert result.observation["text"].startswith("That is not a guess")
        result = client.step({"action": "5"})
        assert result.reward == 1.0 and result.done and result.observation["terminated"]
        state = client.state()
    assert state["step_count"] == 5 and state["episode_return"] == 1.0
    assert state["env_id"] == GUESS and state["task_id"] == "5" and state["episode_id"]


def test_typed_client_wins_and_sessions_are_apart(server: str) -> None:
    with TextEnvClient(base_url=server).sync() as a, TextEnvClient(base_url=server).sync() as b:
        assert a.reset(options={"task_id": "3"}).observation.text.startswith("Guess a number")
        b.reset(options={"task_id": "6"}, episode_id="mine")
        result = a.step(TextAction(action="3"))
        assert result.observation.text == "3 is right! You found the secret number."
        assert result.reward == 1.0 and result.done and result.observation.terminated
        assert result.observation.info["success"] is True
        assert b.step(TextAction(action="3")).observation.text.startswith("3 is too low.")
        state = a.state()
        assert isinstance(state, TextState) and state.episode_return == 1.0 and state.step_count == 1
        assert b.state().episode_id == "mine"


def test_bad_requests_are_errors_and_the_session_goes_on(server: str) -> None:
    with GenericEnvClient(base_url=server).sync() as client:
        with pytest.raises(RuntimeError, match=r"409: .*step before reset"):
            client.step({"action": "1"})
        with pytest.raises(RuntimeError, match="unknown reset argument.*'task_id'.*accepted: seed"):
            client.reset(task_id="5")
        with pytest.raises(RuntimeError, match="task_id must be a number from 1 to 8"):
            client.reset(options={"task_id": "99"})
        with pytest.raises(RuntimeError, match="Invalid message"):
            client.step({"text": "1"})  # not a TextAction
        assert client.reset(options={"task_id": "2"}).observation["info"]["task_id"] == "2"
    assert httpx.post(f"{server}/step", json={"action": {"action": "1"}}).status_code == 409


def test_browsers_are_refused(server: str) -> None:
    assert httpx.get(f"{server}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{server}/health", headers={"Origin": "https://example.com"}).status_code == 403
    with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
        url = server.replace("http", "ws") + "/ws"
        websockets.sync.client.connect(url, additional_headers={"Origin": "https://example.com"})


def test_only_the_documented_routes_are_served_and_mcp_takes_no_session(server: str) -> None:
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
    with httpx.Client(base_url=server) as http:
        for _ in range(10):  # openenv gave each a session slot (of 2), tied to no connection
            assert http.post("/mcp", json=create).status_code == 404
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert http.get(path).status_code == 404
        assert http.get("/schema").json()["action"]["title"] == "TextAction"
        assert http.get("/metadata").json()["name"] == GUESS
    ws_url = server.replace("http", "ws")
    with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
        websockets.sync.client.connect(f"{ws_url}/mcp")
    with websockets.sync.client.connect(f"{ws_url}/ws") as ws, GenericEnvClient(base_url=server).sync() as b:
        for method in ("openenv/session/create", "tools/list"):
            ws.send(json.dumps({"type": "mcp", "data": create | {"method": method}}))
            error = json.loads(ws.recv(timeout=10))["data"]
            assert error["code"] == "UNKNOWN_TYPE" and "unknown message type 'mcp'" in error["message"]
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))  # both slots are free
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        assert b.reset(seed=0).observation["text"].startswith("Guess a number")


def test_an_oversized_body_is_refused_as_it_streams_and_the_server_goes_on(server: str) -> None:
    sent: list[int] = []

    def chunked() -> Iterator[bytes]:  # 64 MiB with no Content-Length
        for _ in range(256):
            sent.append(256 << 10)
            yield b"x" * (256 << 10)

    response = httpx.post(f"{server}/reset", content=chunked(), timeout=30)
    assert response.status_code == 413 and str(MAX_BODY_BYTES) in response.json()["detail"]
    assert sum(sent) < 32 << 20  # the server stopped reading
    action = {"action": {"action": "x" * (MAX_BODY_BYTES - 100)}}  # within the limit: a 409
    assert httpx.post(f"{server}/step", json=action).status_code == 409
    with GenericEnvClient(base_url=server).sync() as client:
        assert client.reset(seed=0).observation["text"].startswith("Guess a number")


@contextlib.contextmanager
def _serving(app: Any) -> Iterator[str]:
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


def test_each_session_env_is_closed_when_its_connection_ends_or_the_server_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[GuessNumberEnv] = []
    monkeypatch.setattr(GuessNumberEnv, "close", lambda self: closed.append(self), raising=False)
    app = create_app(GUESS)  # makes and closes one env, to check the id and kwargs
    with _serving(app) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            client.reset(seed=0)
        wait_until(lambda: len(closed) == 2, timeout=10, interval=0.01, expired=TimeoutError)
        open_client = GenericEnvClient(base_url=url).sync()
        open_client.reset(seed=1)
    assert len(closed) == 3
    open_client.close()


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

    with _serving(create_app(GUESS, max_sessions=2, idle_timeout_s=1.0)) as url:
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


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--host", "0.0.0.0"], "binding 0.0.0.0 would let other machines in"),
        (["--host", "10.1.2.3", "--token", "t"], "--token go with --protocol agentgym"),
        (["--uds", "/tmp/agentgym-openenv.sock"], "--uds go with --protocol agentgym"),
        (["--env", "agentgym/GuessNumbr-v0"], "Did you mean 'agentgym/GuessNumber-v0'"),
        (["--set", "highest=9"], "unknown argument.*highest"),
        (["--set", "high=1"], "high must be an int in"),
        (["--max-sessions", "0"], "max_concurrent_envs"),
        (["--idle-timeout", "0"], "idle_timeout_s must be > 0"),
    ],
)
def test_cli_refuses_before_binding(args: list[str], error: str) -> None:
    env = [] if "--env" in args else ["--env", GUESS]
    with pytest.raises(SystemExit, match=error):
        main(["serve", "--protocol", "openenv", *env, *args, "--port", "0"])


def test_cli_protocol_options_stay_apart(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="name the env with --env"):
        main(["serve", "--protocol", "openenv"])
    with pytest.raises(SystemExit, match="--env and --set go with --protocol openenv"):
        main(["serve", "--env", GUESS, "--ready-file", str(tmp_path / "ready.json")])
    assert not (tmp_path / "ready.json").exists()
