"""Who may use an env server, and what a client may ask of it (the threat model's network
clients): real server processes on 127.0.0.1, real httpx clients.

Regression of the break where any client ran code on the host: ``POST /sessions
{"env_id": "agentgym/ToolUse-v0", "kwargs": {"isolate": false}}`` turned the tools' sandbox off,
and ``SearchQA-v0`` with ``questions="/etc/shadow"`` opened host files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from agentgym.server.auth import TOKEN_ENV, BearerAuth, is_loopback
from agentgym.server.client import RemoteEnv
from agentgym.server.errors import RemoteEnvError, RequestRejected
from agentgym.server.launch import ServerProcess
from agentgym.server.serve import MAX_HEAD_BYTES
from agentgym.server.sessions import MAX_QUEUED

from support.sandboxes import eventually
from support.servers import FIXTURE_ENV, error_detail

SOKOBAN, TOOLUSE, SEARCH = "agentgym/Sokoban-v0", "agentgym/ToolUse-v0", "agentgym/SearchQA-v0"
TOKEN = "s3cret-token-for-this-test"


def sessions(server: ServerProcess, **headers: str) -> int:
    answer = httpx.get(f"{server.url}/health", headers=headers, trust_env=False)
    assert answer.status_code == 200, answer.text
    return answer.json()["sessions"]


def test_a_non_loopback_bind_without_a_token_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgym.server",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--ready-file",
            str(tmp_path / "ready.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode != 0 and "give a token" in proc.stderr, proc.stderr
    assert not (tmp_path / "ready.json").exists()  # it never served
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("")


def test_requests_without_the_token_are_refused(start_server, monkeypatch):
    server = start_server(token=TOKEN)
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        for headers in (
            {},
            {"authorization": "Bearer wrong"},
            {"authorization": TOKEN},
            {"authorization": f"Bearer {TOKEN}x"},
        ):
            for response in (
                c.get("/health", headers=headers),
                c.get("/envs", headers=headers),
                c.post("/sessions", json={"env_id": SOKOBAN}, headers=headers),
            ):
                assert response.status_code == 401, response.text
                assert response.json()["error"] == "unauthorized"
    assert sessions(server, authorization=f"Bearer {TOKEN}") == 0  # nothing was made

    with pytest.raises(RequestRejected, match="401 unauthorized"):
        RemoteEnv(server.url, SOKOBAN, token="wrong")
    env = RemoteEnv(server.url, SOKOBAN, token=TOKEN)
    try:
        assert env.reset(seed=0)[0]
    finally:
        env.close()
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # clients read the token from the environment too
    env = RemoteEnv(server.url, SOKOBAN)
    try:
        assert env.reset(seed=1)[0]
    finally:
        env.close()
    assert sessions(server, authorization=f"Bearer {TOKEN}") == 0


@pytest.mark.parametrize("head", ["header", "url"])
def test_a_request_head_past_its_bound_is_refused_before_the_token(start_server, head):
    """A request line or header longer than ``MAX_HEAD_BYTES``, sent without the token, is
    answered 400 and its connection closed as soon as the bound is passed; the server serves on.
    (Unbounded, a 100 MB header cost 12 s of CPU and 250 MB before the 401.)"""
    server = start_server(token=TOKEN)
    chunk, url = b"a" * 65536, httpx.URL(server.url)
    with socket.create_connection((url.host, url.port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Junk: " if head == "header" else b"GET /")
        answer = b""
        with contextlib.suppress(OSError):  # the server closes while the client still sends
            for _ in range(4 * MAX_HEAD_BYTES // len(chunk)):
                s.sendall(chunk)
        with contextlib.suppress(OSError):
            while data := s.recv(65536):
                answer += data
    assert answer.startswith(b"HTTP/1.1 400") and b"too large" in answer, answer[:200]
    assert sessions(server, Authorization=f"Bearer {TOKEN}") == 0


def _answer(sock: socket.socket) -> bytes:
    """One HTTP answer read from ``sock``: its head and ``content-length`` bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"<closed>"
        assert not data.endswith(b"<closed>"), data
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":")[1] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")
        )
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _closed(sock: socket.socket) -> bool:
    with contextlib.suppress(ConnectionResetError):
        return sock.recv(1) == b""
    return True


def test_a_connection_that_never_finishes_its_request_head_is_closed(start_server):
    """A connection has ``--head-timeout`` seconds to send a request's line and headers, from
    when it opens and, kept alive, from the first byte of each later request. One that sends
    nothing, or its head a byte at a time, is answered 408 and closed, without the token; a
    kept-alive connection idle between requests is not (it has the keep-alive time); the
    server serves on. (uvicorn alone waited forever, each such connection holding one of the
    server's file descriptors.)"""
    server = start_server(token=TOKEN, extra_args=["--head-timeout", "1"])
    url, auth = httpx.URL(server.url), f"Bearer {TOKEN}".encode()
    request = b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n\r\n"
    silent = [socket.create_connection((url.host, url.port), timeout=30) for _ in range(8)]
    trickle = socket.create_connection((url.host, url.port), timeout=30)
    for byte in request:  # a byte each 0.2 s, until answered: the whole head would take 15 s
        if select.select([trickle], [], [], 0.2)[0]:
            break
        trickle.send(bytes([byte]))
    kept = socket.create_connection((url.host, url.port), timeout=30)
    kept.sendall(request)
    assert _answer(kept).startswith(b"HTTP/1.1 200")
    time.sleep(2)  # idle past the head timeout, within the keep-alive time
    kept.sendall(request + request[:10])  # then a head begun in the same packet, never finished
    assert _answer(kept).startswith(b"HTTP/1.1 200")
    for sock in (*silent, trickle, kept):
        with sock:
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 408") and b"not received within 1 s" in answer, answer
            assert _closed(sock)
    assert sessions(server, Authorization=f"Bearer {TOKEN}") == 0


def test_a_client_holds_at_most_its_connections(start_server):
    """``--max-client-connections``: one client address holds at most that many connections at
    once; one more is answered 503 and closed, before the token is checked, while other clients
    are served, and a connection closed frees its place. (Without the cap, one client that
    opened connections faster than the head timeout closed them held as many of the server's
    file descriptors as it liked.)"""
    server = start_server(token=TOKEN, extra_args=["--max-client-connections", "4"])
    url = httpx.URL(server.url)
    request = f"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()

    def connect(source: str = "127.0.0.1") -> socket.socket:
        return socket.create_connection((url.host, url.port), timeout=30, source_address=(source, 0))

    def served(sock: socket.socket) -> bool:
        sock.sendall(request)
        return _answer(sock).startswith(b"HTTP/1.1 200")

    websocket = b"GET /sessions HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    websocket += b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    for _ in range(5):  # handshakes (without the token) give their places back too
        with connect() as sock:
            sock.sendall(websocket)
            assert _answer(sock).startswith(b"HTTP/1.1 403")
    held = [connect() for _ in range(4)]
    assert all(served(sock) for sock in held)  # each accepted, and kept alive
    with connect() as extra:
        extra.sendall(request)  # sent before the answer is read: still answered, not reset
        answer = _answer(extra)
        assert answer.startswith(b"HTTP/1.1 503") and b"has 4 connections open" in answer, answer
        assert b"retry-after: 1" in answer.lower() and _closed(extra)
    with connect("127.0.0.2") as other:  # another client
        assert served(other)
    held.pop().close()

    def place_freed() -> bool:  # the server sees the close a moment later
        with connect() as sock, contextlib.suppress(AssertionError, OSError):  # refused meanwhile
            return served(sock)
        return False

    eventually(place_freed)
    for sock in held:
        sock.close()


def test_a_request_that_never_finishes_its_body_is_closed(start_server):
    """A request has ``--body-timeout`` seconds from the end of its head to the end of its body:
    one that stops sending (with the token), and one refused 401 before its body is read that
    goes on sending a byte at a time (without it), are closed, the first answered 408; the
    server serves on. (uvicorn alone kept both connections for as long as they were open.)"""
    server = start_server(token=TOKEN, extra_args=["--body-timeout", "1"])
    url = httpx.URL(server.url)
    head = b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    stalled, trickle = (socket.create_connection((url.host, url.port), timeout=30) for _ in range(2))
    stalled.sendall(head + f"Authorization: Bearer {TOKEN}\r\n\r\n{{".encode())
    trickle.sendall(head + b"\r\n")
    assert _answer(trickle).startswith(b"HTTP/1.1 401")
    for _ in range(99):  # a byte each 0.2 s, until closed: the whole body would take 20 s
        if select.select([trickle], [], [], 0.2)[0]:
            break
        trickle.send(b" ")
    with stalled, trickle:
        answer = _answer(stalled)
        assert answer.startswith(b"HTTP/1.1 408") and b"body not received within 1 s" in answer, answer
        assert _closed(stalled)
        rest = b""
        with contextlib.suppress(ConnectionResetError):
            while data := trickle.recv(65536):
                rest += data
        assert rest == b"" or rest.startswith(b"HTTP/1.1 408"), rest  # then closed
    assert sessions(server, Authorization=f"Bearer {TOKEN}") == 0


def test_websocket_handshakes_without_the_token_are_refused():
    """The token guards WebSocket handshakes as it guards HTTP requests (the env server has no
    WebSocket route; an app that :class:`BearerAuth` wraps may)."""

    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(await ws.receive_text())

    app = BearerAuth(Starlette(routes=[WebSocketRoute("/ws", echo)]), TOKEN)
    with TestClient(app) as client:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            with (
                pytest.raises(WebSocketDisconnect) as refused,
                client.websocket_connect("/ws", headers=headers),
            ):
                pass
            assert refused.value.code == 1008
        with client.websocket_connect("/ws", headers={"authorization": f"Bearer {TOKEN}"}) as ws:
            ws.send_text("hello")
            assert ws.receive_text() == "hello"


def test_requests_from_browsers_are_refused(start_server):
    """A web page open on the operator's machine cannot drive a loopback server that takes no
    token: what a browser sends (an ``Origin`` header, with any body type) is answered 403
    before anything is made."""
    server = start_server()
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        for origin in ("http://evil.example", "null", server.url):
            for response in (
                c.post(
                    "/sessions",
                    content=json.dumps({"env_id": SOKOBAN}),
                    headers={"origin": origin, "content-type": "text/plain"},
                ),
                c.get("/envs", headers={"origin": origin}),
            ):
                assert response.status_code == 403, response.text
                assert response.json()["error"] == "browser_request"
    assert sessions(server) == 0
    env = RemoteEnv(server.url, SOKOBAN)  # agentgym's clients send no Origin
    try:
        assert env.reset(seed=0)[0]
    finally:
        env.close()


@pytest.mark.parametrize(
    "env_id, kwargs, named",
    [
        (TOOLUSE, {"isolate": False}, "isolate"),  # turns the tools' sandbox off
        (SEARCH, {"questions": "/etc/shadow"}, "questions"),  # a host path
        (SEARCH, {"index": "/root"}, "index"),
        (SEARCH, {"retriever": "http://127.0.0.1:1"}, "retriever"),  # a URL the server would call
        (TOOLUSE, {"timeout_s": 86_400}, "timeout_s"),  # past the ceiling (60 s)
        (TOOLUSE, {"max_output_chars": float("inf")}, "max_output_chars"),
        (SOKOBAN, {"dim_room": [12, 30]}, "dim_room"),  # any number past the ceiling
        (SOKOBAN, {"disable_env_checker": False}, "disable_env_checker"),
        (SOKOBAN, {"dim_room": [[[[[[[[13]]]]]]]]}, "dim_room"),  # numbers anywhere in the value
    ],
)
def test_client_kwargs_that_weaken_isolation_or_name_host_paths_are_refused(
    start_server, env_id, kwargs, named
):
    server = start_server()
    body = json.dumps({"env_id": env_id, "kwargs": kwargs})  # Infinity, as Python's json allows
    answer = httpx.post(f"{server.url}/sessions", content=body, trust_env=False)
    assert answer.status_code == 403, answer.text
    body = answer.json()
    assert body["error"] == "kwarg_not_allowed" and body["kwarg"] == named
    assert f"--allow-kwarg {named}" in body["detail"]
    assert sessions(server) == 0 and httpx.get(f"{server.url}/envs").status_code == 200


def test_the_operator_may_allow_a_kwarg(start_server):
    server = start_server(allowed_kwargs=["dim_room"])
    env = RemoteEnv(server.url, SOKOBAN, {"dim_room": [14, 14], "num_boxes": 2})
    try:
        observation, _ = env.reset(seed=0)
        assert len(observation.splitlines()) >= 14
        with pytest.raises(RequestRejected, match="ceiling for clients, 6"):
            RemoteEnv(server.url, SOKOBAN, {"num_boxes": 7})  # still under its ceiling
    finally:
        env.close()
    assert sessions(server) == 0


def test_hung_up_clients_are_one_log_line_and_sigterm_exits_143():
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", "serve", "--port", "0", "--log-level", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline().split("ready ", 1)[1])
        for _ in range(3):  # a body cut short: the client hung up mid-request
            with socket.create_connection(("127.0.0.1", info["port"])) as sock:
                sock.sendall(b'POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"env_id": ')
        assert httpx.get(f"{info['url']}/health", trust_env=False).json()["sessions"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.count("hung up during POST /sessions") == 3, stderr


def test_kwargs_nested_as_deep_as_json_allows_are_answered(start_server):
    server = start_server()
    for depth in (500, 900, 5000):  # under and over what the JSON parser takes
        body = '{{"env_id": "{}", "kwargs": {{"dim_room": {}13{}}}}}'.format(
            SOKOBAN, "[" * depth, "]" * depth
        )
        answer = httpx.post(f"{server.url}/sessions", content=body, trust_env=False)
        assert answer.status_code in (400, 403), answer.text  # never a 500
    assert sessions(server) == 0


def test_client_host_paths_resolve_inside_the_data_root_only(start_server, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "qa.jsonl").write_text(
        json.dumps({"id": "q1", "question": "Who wrote Nemo?", "answer": "Verne"}) + "\n"
    )
    (root / "passages.jsonl").write_text(
        json.dumps({"id": "p1", "title": "Nemo", "text": "Nemo was written by Verne."}) + "\n"
    )
    (root / "escape.jsonl").symlink_to("/etc/passwd")
    allowed = ["questions", "corpus"]
    closed = start_server(allowed_kwargs=allowed)  # allowed, but no data root: still refused
    answer = httpx.post(
        f"{closed.url}/sessions",
        trust_env=False,
        json={"env_id": SEARCH, "kwargs": {"questions": "qa.jsonl", "corpus": "passages.jsonl"}},
    )
    assert answer.status_code == 403 and "--data-root" in answer.json()["detail"]

    server = start_server(allowed_kwargs=allowed, extra_args=["--data-root", str(root)])
    for path in (
        "/etc/passwd",
        "../data/../../etc/passwd",
        "escape.jsonl",
        "qa.jsonl\x00",
        str(root / "qa.jsonl"),
    ):  # absolute even when inside
        answer = httpx.post(
            f"{server.url}/sessions",
            trust_env=False,
            json={"env_id": SEARCH, "kwargs": {"questions": path, "corpus": "passages.jsonl"}},
        )
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["kwarg"] == "questions" and "data root" in answer.json()["detail"]
    env = RemoteEnv(server.url, SEARCH, {"questions": "qa.jsonl", "corpus": "passages.jsonl"})
    try:
        observation, _info = env.reset(seed=0)
        assert "Who wrote Nemo?" in observation
    finally:
        env.close()
    assert sessions(server) == 0


def test_a_step_past_the_deadline_ends_its_session_only(start_server):
    server = start_server(allow_entry_points=True, extra_args=["--step-timeout", "1"], env=FIXTURE_ENV)
    slow, other = (RemoteEnv(server.url, "probe_env:ThreadedProbeEnv") for _ in range(2))
    try:
        slow.reset(seed=0)
        other.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="504 step_timeout.*deadline of 1 s") as info:
            slow.step("sleep:30")
        assert info.value.status == 504
        assert other.step("hi")[0] == "echo hi"  # the other session never waited
        with pytest.raises(RemoteEnvError, match="session_broken"):
            slow.step("hi")
    finally:
        slow.close()
        other.close()
    assert sessions(server) == 0


def test_actions_outside_the_space_are_refused_and_the_session_goes_on(start_server):
    """A client's actions reach an env only if its spaces take them: a game's non-text actions
    and a plain Gymnasium env's values outside its space answer 422, a game's step with no live
    agent (before its first reset, after its end) 409, and each session plays on as before."""
    server = start_server(allow_entry_points=True, env=FIXTURE_ENV)
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        sid = c.post("/sessions", json={"env_id": "agentgym/Signaling-v0"}).json()["session_id"]
        step = f"/sessions/{sid}/step"
        error_detail(c.post(step, json={"actions": {}}), 409, "reset_needed")
        answer = c.post(f"/sessions/{sid}/reset", json={"seed": 0}).json()
        for bad in ([1, 2], None, 3, True, {"card": 1}):
            detail = error_detail(
                c.post(step, json={"actions": {answer["agents"][0]: bad}}), 422, "invalid_request"
            )
            assert "actions are text" in detail
        for _ in range(100):  # to the game's end, with admissible answers
            infos = answer["infos"]
            actions = {
                a: infos[a]["admissible_actions"][0] for a in answer["agents"] if infos[a]["action_required"]
            }
            answer = c.post(step, json={"actions": actions}).json()
            if not answer["agents"]:
                break
        assert answer["agents"] == [] and any(answer["terminations"].values())
        error_detail(c.post(step, json={"actions": {}}), 409, "reset_needed")
        assert c.post(f"/sessions/{sid}/reset", json={"seed": 1}).json()["agents"]

        for env_id, bad, good in (
            ("CartPole-v1", ["left", 99, -1, 1.5, None, {"a": 1}, [0]], 1),
            ("Pendulum-v1", ["x", [5.0], [0.1, 0.2], None], [0.5]),
        ):
            sid = c.post("/sessions", json={"env_id": env_id}).json()["session_id"]
            step = f"/sessions/{sid}/step"
            assert c.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
            for action in bad:
                assert "is not in the action space" in error_detail(
                    c.post(step, json={"action": action}), 422, "invalid_request"
                )
            assert c.post(step, json={"action": good}).status_code == 200
            assert c.delete(f"/sessions/{sid}").json()["closed"] is True
        assert c.get("/health").json()["status"] == "ok"


async def test_a_busy_session_takes_a_few_requests_and_refuses_the_rest(start_server):
    """Requests wait on a busy session up to ``MAX_QUEUED`` in all (each holds its body); the
    others are answered 429 ``session_busy`` at once, and the session goes on."""
    server = start_server(allow_entry_points=True, env=FIXTURE_ENV)
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, limits=limits, timeout=30) as c:
        created = await c.post("/sessions", json={"env_id": "probe_env:ThreadedProbeEnv"})
        sid = created.json()["session_id"]
        step = f"/sessions/{sid}/step"
        assert (await c.post(f"/sessions/{sid}/reset", json={"seed": 0})).status_code == 200
        sleeper = asyncio.create_task(c.post(step, json={"action": "sleep:3"}))
        await asyncio.sleep(0.5)  # it holds the session
        answers = await asyncio.gather(*(c.post(step, json={"action": "hi"}) for _ in range(2 * MAX_QUEUED)))
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] * (MAX_QUEUED - 1) + [429] * (MAX_QUEUED + 1)
        assert "send its calls one at a time" in error_detail(
            next(a for a in answers if a.status_code == 429), 429, "session_busy"
        )
        assert (await sleeper).json()["observation"] == "echo sleep:3"
        assert (await c.post(step, json={"action": "again"})).json()["observation"] == "echo again"
        assert (await c.delete(f"/sessions/{sid}")).json()["closed"] is True
