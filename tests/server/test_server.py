"""The env server and its clients, end to end: real uvicorn server processes on localhost, real
httpx clients. Fixture envs (tests/fixtures/probe_env.py, parallel_env.py) are served through
``--allow-entry-points`` or registered by a stand-in sandbox launcher. ``start_server`` is a
fixture of tests/support/servers.py."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

import agentgym
from agentgym.server.client import RemoteEnv, RemoteParallelEnv
from agentgym.server.errors import (
    EnvServerFull,
    EnvServerTimeout,
    EnvServerUnavailable,
    RemoteEnvError,
    RequestRejected,
    UnknownRemoteEnv,
)
from agentgym.server.jsonsafe import dumps, to_jsonable
from agentgym.server.launch import ServerProcess, wait_healthy
from agentgym.server.main import main as server_main

from fixtures.parallel_env import CounterParallelEnv
from support import FIXTURES
from support.servers import FIXTURE_ENV, alive, assert_gone, error_detail

SOKOBAN, HOUSEHOLD = "agentgym/Sokoban-v0", "agentgym/Household-v0"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """One server for the tests that do not stop or limit it; it hosts the fixture envs."""
    with ServerProcess(allow_entry_points=True, env=FIXTURE_ENV) as server:
        yield server
    assert_gone(server)


def _health(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", trust_env=False).json()


def _wait_until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _play(env: Any, seed: int, turns: int = 12) -> list[Any]:
    """Observations, rewards, flags and (JSON-converted) infos of a fixed action sequence."""
    obs, info = env.reset(seed=seed)
    out: list[Any] = [obs, to_jsonable(info)]
    for t in range(turns):
        actions = info["admissible_actions"]
        obs, reward, terminated, truncated, info = env.step(actions[(7 * t + seed) % len(actions)])
        out.append((obs, float(reward), bool(terminated), bool(truncated), to_jsonable(info)))
        if terminated or truncated:
            break
    return out


async def _aplay(env: RemoteEnv, seed: int, turns: int = 12) -> list[Any]:
    obs, info = await env.areset(seed=seed)
    out: list[Any] = [obs, to_jsonable(info)]
    for t in range(turns):
        actions = info["admissible_actions"]
        obs, reward, terminated, truncated, info = await env.astep(actions[(7 * t + seed) % len(actions)])
        out.append((obs, float(reward), bool(terminated), bool(truncated), to_jsonable(info)))
        if terminated or truncated:
            break
    return out


# ---------------------------------------------------------------- same env, in process or remote


@pytest.mark.parametrize("env_id", [SOKOBAN, HOUSEHOLD])
def test_remote_env_equals_in_process(server, env_id):
    local = agentgym.make(env_id)
    expected = [_play(local, seed) for seed in (0, 1, 2)]
    remote = RemoteEnv(server.url, env_id)
    try:
        assert [_play(remote, seed) for seed in (0, 1, 2)] == expected
        assert remote.family == "textgames"
    finally:
        remote.close()

    async def play_async() -> list[Any]:
        env = await RemoteEnv.acreate(server.url, env_id)
        try:
            return [await _aplay(env, seed) for seed in (0, 1, 2)]
        finally:
            await env.aclose()  # in the loop that made its connections

    assert asyncio.run(play_async()) == expected


def test_remote_env_kwargs_travel(server):
    kwargs = {"dim_room": [8, 8], "num_boxes": 2, "max_steps": 3}
    local, remote = agentgym.make(SOKOBAN, **kwargs), RemoteEnv(server.url, SOKOBAN, kwargs)
    try:
        assert _play(remote, 5) == _play(local, 5)
        assert _play(remote, 5)[-1][3] is True  # truncated after max_steps=3
    finally:
        remote.close()


def test_lazy_remote_env_creates_its_session_on_first_use(server):
    before = _health(server)["sessions"]
    env = RemoteEnv(server.url, SOKOBAN, {"dim_room": [7, 9]}, lazy=True)
    assert env.session.id is None and _health(server)["sessions"] == before
    with pytest.raises(RequestRejected, match="reset") as info:
        env.step("up")  # creates the session, whose env wants a reset first
    assert info.value.code == "reset_needed" and _health(server)["sessions"] == before + 1
    assert "#########" in env.reset(seed=0)[0]  # 9 columns
    assert env.observation_space.max_length == 1 << 20 and env.family == "textgames"
    env.close()
    assert _health(server)["sessions"] == before


@pytest.mark.parametrize("env_id", [SOKOBAN, HOUSEHOLD])
def test_check_env_on_remote_env(server, env_id):
    env = RemoteEnv(server.url, env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any checker warning is a failure
            check_env(env, skip_render_check=True)  # RemoteEnv does not render
    finally:
        env.close()


async def test_200_sessions_step_concurrently(server):
    before = _health(server)["sessions"]
    envs = await asyncio.gather(*(RemoteEnv.acreate(server.url, SOKOBAN) for _ in range(200)))
    assert _health(server)["sessions"] == before + 200
    try:
        results = await asyncio.gather(*(_aplay(env, seed, turns=8) for seed, env in enumerate(envs)))
    finally:
        await asyncio.gather(*(env.aclose() for env in envs))
    local = agentgym.make(SOKOBAN)
    for seed in (0, 57, 199):
        assert results[seed] == _play(local, seed, turns=8)
    assert _health(server)["sessions"] == before


async def test_one_session_serializes_its_calls_and_blocks_no_other(server):
    slow = await RemoteEnv.acreate(server.url, "probe_env:ThreadedProbeEnv")
    fast = await RemoteEnv.acreate(server.url, SOKOBAN)
    try:
        await slow.areset(seed=0)
        await fast.areset(seed=0)
        start = time.monotonic()
        # Two calls to one session at once (its client allows it): the second waits its turn.
        first = asyncio.create_task(slow.astep("sleep:0.4"))
        second = asyncio.create_task(slow.astep("sleep:0.4"))
        await asyncio.sleep(0.05)
        for _ in range(20):
            await fast.astep("up")
        assert not second.done()  # other sessions went on meanwhile: no blocked event loop
        assert [(await first)[0], (await second)[0]] == ["echo sleep:0.4"] * 2
        assert time.monotonic() - start >= 0.8  # one after the other
    finally:
        await slow.aclose()
        await fast.aclose()


# ------------------------------------------------------------------------------------ bad input


async def test_sessions_in_long_calls_hold_no_other_session(server):
    """Each threaded session steps on a worker of its own: eight sessions sleeping in their
    steps (more than asyncio's default pool has threads on 2 cores) leave a ninth free."""
    envs = [await RemoteEnv.acreate(server.url, "probe_env:ThreadedProbeEnv") for _ in range(9)]
    try:
        for env in envs:
            await env.areset(seed=0)
        sleepers = [asyncio.create_task(env.astep("sleep:3")) for env in envs[:8]]
        await asyncio.sleep(0.2)  # all eight are in their steps
        for _ in range(5):
            assert (await envs[8].astep("hi"))[0] == "echo hi"
        assert not any(task.done() for task in sleepers)  # it did not wait for a free thread
        assert [(await task)[0] for task in sleepers] == ["echo sleep:3"] * 8
    finally:
        for env in envs:
            await env.aclose()


def test_bad_requests_get_4xx_and_the_server_keeps_serving(server):
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        error_detail(c.post("/sessions", content=b'{"env_id": '), 400, "malformed_json")
        error_detail(c.post("/sessions", content=b"\xff\xfe\x00"), 400, "malformed_json")
        error_detail(c.post("/sessions", content=b"[" * 100_000), 400, "malformed_json")
        error_detail(c.post("/sessions", json=["agentgym/Sokoban-v0"]), 422, "invalid_request")
        assert "'env_id'" in error_detail(c.post("/sessions", json={}), 422, "invalid_request")
        error_detail(c.post("/sessions", json={"env_id": 3}), 422, "invalid_request")
        error_detail(c.post("/sessions", json={"env_id": SOKOBAN, "kwargs": [1]}), 422, "invalid_request")
        error_detail(c.post("/sessions", json={"env_id": SOKOBAN, "kind": "aec"}), 422, "invalid_request")
        detail = error_detail(c.post("/sessions", json={"env_id": "agentgym/Sokobn-v0"}), 404, "unknown_env")
        assert "Did you mean 'agentgym/Sokoban-v0'" in detail
        detail = error_detail(
            c.post("/sessions", json={"env_id": SOKOBAN, "kwargs": {"size": 3}}), 403, "kwarg_not_allowed"
        )
        assert "may not set 'size'" in detail and "dim_room" in detail
        assert "ceiling for clients, 6" in error_detail(
            c.post("/sessions", json={"env_id": SOKOBAN, "kwargs": {"num_boxes": 99}}),
            403,
            "kwarg_not_allowed",
        )
        assert "num_boxes" in error_detail(
            c.post("/sessions", json={"env_id": SOKOBAN, "kwargs": {"num_boxes": 0}}), 400, "invalid_kwargs"
        )
        for response in (
            c.post("/sessions/nope/reset", json={}),
            c.post("/sessions/nope/step", json={"action": "up"}),
            c.delete("/sessions/nope"),
        ):
            error_detail(response, 404, "unknown_session")
        error_detail(c.get("/no/such/route"), 404, "not_found")
        error_detail(c.put("/health"), 405, "method_not_allowed")

        sid = c.post("/sessions", json={"env_id": SOKOBAN}).json()["session_id"]
        error_detail(c.post(f"/sessions/{sid}/step", json={"action": "up"}), 409, "reset_needed")
        error_detail(c.post(f"/sessions/{sid}/reset", json={"seed": "one"}), 422, "invalid_request")
        error_detail(c.post(f"/sessions/{sid}/reset", json={"seed": True}), 422, "invalid_request")
        assert "non-negative" in error_detail(
            c.post(f"/sessions/{sid}/reset", json={"seed": -1}), 422, "invalid_request"
        )
        error_detail(c.post(f"/sessions/{sid}/reset", json={"options": [1]}), 422, "invalid_request")
        assert "unknown reset option" in error_detail(
            c.post(f"/sessions/{sid}/reset", json={"options": {"level": 1}}), 400, "invalid_argument"
        )
        assert c.post(f"/sessions/{sid}/reset", json={"seed": 1}).status_code == 200
        error_detail(c.post(f"/sessions/{sid}/step", json={}), 422, "invalid_request")
        error_detail(c.post(f"/sessions/{sid}/step", json={"action": 3}), 422, "invalid_request")
        huge = b'{"action": "' + b"x" * (2 << 20) + b'"}'
        error_detail(c.post(f"/sessions/{sid}/step", content=huge), 413, "body_too_large")
        chunks = iter([huge[i : i + 65536] for i in range(0, len(huge), 65536)])
        error_detail(c.post(f"/sessions/{sid}/step", content=chunks), 413, "body_too_large")  # chunked

        # ... and the session and the server work as before.
        step = c.post(f"/sessions/{sid}/step", json={"action": "up"})
        assert step.status_code == 200 and step.json()["info"]["action_valid"] is True
        assert c.delete(f"/sessions/{sid}").json() == {"session_id": sid, "closed": True}
        assert c.get("/health").json()["status"] == "ok"
        ids = {e["id"]: e["kind"] for e in c.get("/envs").json()["envs"]}
        assert ids[SOKOBAN] == ids[HOUSEHOLD] == "single"


def test_client_errors_are_clear(server):
    with pytest.raises(UnknownRemoteEnv, match="Did you mean 'agentgym/Sokoban-v0'") as info:
        RemoteEnv(server.url, "agentgym/Sokobn-v0")
    assert isinstance(info.value, agentgym.UnknownEnvError) and info.value.status == 404
    with pytest.raises(RequestRejected, match="may not set 'size'.*dim_room") as info:
        RemoteEnv(server.url, SOKOBAN, {"size": 3})
    assert isinstance(info.value, ValueError) and info.value.code == "kwarg_not_allowed"
    env = RemoteEnv(server.url, SOKOBAN)
    with pytest.raises(TypeError, match="actions are text"):
        env.step(3)
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EnvServerUnavailable, match=f"env server {url} is gone or unreachable"):
        RemoteEnv(url, SOKOBAN)


def test_timeout_names_url_and_seconds(server):
    env = RemoteEnv(server.url, "probe_env:ThreadedProbeEnv", timeout=0.3)
    try:
        env.reset(seed=0)
        start = time.monotonic()
        with pytest.raises(EnvServerTimeout, match=r"no answer within 0\.3 s") as info:
            env.step("sleep:1.5")
        assert time.monotonic() - start < 1.2
        assert isinstance(info.value, TimeoutError) and info.value.url == server.url
        assert info.value.seconds == 0.3
    finally:
        env.close()  # waits for the step in flight, then deletes


def test_env_exception_breaks_the_session(server, tmp_path):
    log = tmp_path / "closed.txt"
    env = RemoteEnv(server.url, "probe_env:ProbeEnv", {"close_log": str(log)})
    env.reset(seed=0)
    assert env.step("hello")[0] == "echo hello"
    with pytest.raises(RemoteEnvError, match="RuntimeError.*boom") as info:
        env.step("boom")
    assert info.value.status == 500 and info.value.exception_type == "RuntimeError"
    assert log.read_text() == "ProbeEnv closed after 2 steps\n"  # closed at once
    with pytest.raises(RemoteEnvError, match="broken.*boom") as info:
        env.step("hello")
    assert info.value.status == 409 and info.value.code == "session_broken"
    with pytest.raises(RemoteEnvError, match="broken"):
        env.reset()
    env.close()
    assert log.read_text().count("closed") == 1

    other = RemoteEnv(server.url, "probe_env:ProbeEnv")  # bad reset options: 400, still usable
    with pytest.raises(RequestRejected, match="option 'bad' is refused") as info:
        other.reset(options={"bad": 1})
    assert info.value.code == "invalid_argument"
    assert other.reset(seed=1)[0].startswith("start ")
    other.close()
    assert _health(server)["status"] == "ok"


def test_infos_are_made_json_safe(server):
    env = RemoteEnv(server.url, "probe_env:ProbeEnv")
    try:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("numpy")
    finally:
        env.close()
    assert (obs, reward, terminated, truncated) == ("echo numpy", 0.25, False, False)
    assert {k: v for k, v in info.items() if k not in ("object", "nan")} == {
        "action_valid": True,
        "success": False,
        "int": 3,
        "float": 0.5,
        "bool": True,
        "array": [[0, 1], [2, 3]],
        "tuple": [1, "a"],
        "set": [1, 2, 3],
        "bytes": "hi",
        "tuple_key": {"(0, 1)": "x"},
    }
    assert info["object"].startswith("<object object at") and np.isnan(info["nan"])


def test_jsonsafe_rules():
    cycle: list[Any] = [1]
    cycle.append(cycle)
    value = {
        "i": np.int32(2),
        "a": np.array([1.5]),
        "s": frozenset({"b", "a"}),
        "c": cycle,
        np.int64(7): "numpy key",
        ("t",): "tuple key",
        "u": "\ud800 ü",
        "b": b"\xff",
        "f": float("inf"),
    }
    expected = {
        "i": 2,
        "a": [1.5],
        "s": ["a", "b"],
        "c": [1, "<cycle>"],
        7: "numpy key",
        "('t',)": "tuple key",
        "u": "\ud800 ü",
        "b": "\ufffd",
        "f": float("inf"),
    }
    assert to_jsonable(value) == expected
    assert json.loads(dumps(value)) == {str(k): v for k, v in expected.items()}
    assert dumps({"x": (1, 2)}) == b'{"x":[1,2]}'


# --------------------------------------------------------------------------------------- limits


def test_too_many_sessions_and_allowlist(start_server):
    server = start_server(max_sessions=3, env_allowlist=[SOKOBAN, HOUSEHOLD])
    envs = [RemoteEnv(server.url, SOKOBAN) for _ in range(3)]
    with pytest.raises(EnvServerFull, match="max_sessions=3") as info:
        RemoteEnv(server.url, HOUSEHOLD)
    assert info.value.status == 503
    envs.pop().close()
    envs.append(RemoteEnv(server.url, HOUSEHOLD))  # room again
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        error_detail(c.post("/sessions", json={"env_id": "CartPole-v1"}), 403, "env_not_allowed")
        assert {e["id"] for e in c.get("/envs").json()["envs"]} == {SOKOBAN, HOUSEHOLD}
    for env in envs:
        env.reset(seed=0)
        env.close()


async def _open_sessions(url: str, count: int) -> list[str]:
    """Create ``count`` Sokoban sessions and reset each; their ids."""
    limits = httpx.Limits(max_connections=8)  # httpx's pool gets slow with many connections
    async with httpx.AsyncClient(base_url=url, trust_env=False, limits=limits) as client:
        slots = asyncio.Semaphore(8)

        async def one(seed: int) -> str:
            async with slots:
                answer = await client.post("/sessions", json={"env_id": SOKOBAN})
                session_id = answer.json()["session_id"]
                await client.post(f"/sessions/{session_id}/reset", json={"seed": seed})
                return session_id

        return await asyncio.gather(*(one(seed) for seed in range(count)))


def test_abandoned_sessions_are_reaped_and_memory_returns(start_server):
    server = start_server(idle_timeout_s=6.0)
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        # This server does not take entry points.
        error_detail(c.post("/sessions", json={"env_id": "probe_env:ProbeEnv"}), 403, "env_not_allowed")
        for session_id in asyncio.run(_open_sessions(server.url, 50)):  # warm-up
            c.delete(f"/sessions/{session_id}")
    baseline = _rss_mb(server.pid)

    asyncio.run(_open_sessions(server.url, 1000))
    peak, peak_rss = _health(server), _rss_mb(server.pid)
    # Under load, opening 1000 sessions can outlast the idle timeout: the first ones are reaped
    # while the last open. Every one was open at some point: open now or reaped already.
    peak_sessions = peak["sessions"]
    _wait_until(lambda: _health(server)["sessions"] == 0, 30)
    health = _health(server)
    after = _rss_mb(server.pid)
    print(
        f"\nRSS: baseline {baseline:.1f} MB, {peak_sessions} sessions open {peak_rss:.1f} MB, "
        f"all reaped {after:.1f} MB"
    )
    assert peak_sessions + peak["reaped"] == 1000 and peak_sessions > 0
    assert health["reaped"] == 1000 and health["closed_envs"] == 1050
    # Python's allocator keeps some freed memory (about 14 of the 36 MB here); a leak keeps all.
    assert after < baseline + 24, (baseline, peak_rss, after)


# --------------------------------------------------------------------------------------- faults


def test_killed_server_is_reported_quickly(start_server):
    server = start_server()
    env = RemoteEnv(server.url, SOKOBAN)
    env.reset(seed=0)
    env.step("up")
    server.kill()
    start = time.monotonic()
    with pytest.raises(EnvServerUnavailable, match=f"env server {server.url} is gone") as info:
        env.step("up")
    assert time.monotonic() - start < 2.0
    assert isinstance(info.value, ConnectionError) and info.value.url == server.url
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no httpx chain

    async def astep() -> None:
        with pytest.raises(EnvServerUnavailable, match="is gone"):
            await env.astep("up")

    asyncio.run(astep())
    env.close()  # tolerant of the server being gone
    env.close()


def test_killed_server_mid_request_is_reported(start_server):
    server = start_server(allow_entry_points=True, env=FIXTURE_ENV)
    env = RemoteEnv(server.url, "probe_env:ThreadedProbeEnv")
    env.reset(seed=0)

    async def step_while_killed() -> None:
        step = asyncio.create_task(env.astep("sleep:30"))
        await asyncio.sleep(0.5)
        server.kill()
        with pytest.raises(EnvServerUnavailable, match="is gone"):
            await asyncio.wait_for(step, 5)

    asyncio.run(step_while_killed())
    env.close()


def test_sigterm_closes_every_env(start_server, tmp_path):
    log = tmp_path / "closed.txt"
    server = start_server(allow_entry_points=True, env=FIXTURE_ENV)
    envs = [
        RemoteEnv(server.url, f"probe_env:{cls}", {"close_log": str(log)})
        for cls in ["ProbeEnv"] * 4 + ["ThreadedProbeEnv"] * 2
    ]
    for env in envs:
        env.reset(seed=0)
        env.step("x")
    assert server.stop() == -signal.SIGTERM
    assert sorted(log.read_text().splitlines()) == (
        ["ProbeEnv closed after 1 steps"] * 4 + ["ThreadedProbeEnv closed after 1 steps"] * 2
    )
    for env in envs:
        env.close()


# ---------------------------------------------------------------------------------- multi-agent


def _parallel_trajectory(env: Any, seed: int) -> list[Any]:
    observations, infos = env.reset(seed=seed)
    out: list[Any] = [observations, to_jsonable(infos), list(env.agents)]
    t = 0
    while env.agents:
        t += 1
        actions = {agent: "ab"[: 1 + (t + len(agent)) % 2] * t for agent in env.agents}
        step = env.step(actions)
        out.append([step[0], step[1], step[2], step[3], to_jsonable(step[4]), list(env.agents)])
    return out


def test_parallel_env_through_server_equals_in_process(start_server):
    server = start_server(
        command_prefix=[sys.executable, str(FIXTURES / "register_and_serve.py")],
        env=FIXTURE_ENV,
        allowed_kwargs=["max_cycles"],
    )  # no manifest declares it
    env_id = "test/Counter-parallel-v0"
    remote = RemoteParallelEnv(server.url, env_id, {"max_cycles": 6})
    try:
        local = CounterParallelEnv(max_cycles=6)
        for seed in (0, 1):
            assert _parallel_trajectory(remote, seed) == _parallel_trajectory(local, seed)
        assert remote.possible_agents == ["alice", "bob"]
        assert remote.action_space("bob").max_length == 8
        assert remote.metadata["name"] == "counter_parallel_v0"
        parallel_api_test(remote, num_cycles=10)
    finally:
        remote.close()

    async def async_run() -> list[Any]:
        env = await RemoteParallelEnv.acreate(server.url, env_id, {"max_cycles": 6})
        observations, _ = await env.areset(seed=0)
        step = await env.astep({agent: "a" for agent in env.agents})
        await env.aclose()
        return [observations, step[0], step[1]]

    local = CounterParallelEnv(max_cycles=6)
    observations, _ = local.reset(seed=0)
    assert asyncio.run(async_run()) == [observations, *local.step({"alice": "a", "bob": "a"})[:2]]

    with pytest.raises(UnknownRemoteEnv, match="No environment 'test/Counter-parallel-v0'"):
        RemoteEnv(server.url, env_id)  # a parallel env is no Gymnasium env
    with pytest.raises(UnknownRemoteEnv, match="ask for kind 'single'"):
        RemoteParallelEnv(server.url, SOKOBAN)
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        assert {"id": env_id, "kind": "parallel", "family": "misc", "description": ""} in c.get(
            "/envs"
        ).json()["envs"]
        sid = c.post("/sessions", json={"env_id": env_id}).json()["session_id"]
        c.post(f"/sessions/{sid}/reset", json={"seed": 0})
        assert "carol" in error_detail(
            c.post(f"/sessions/{sid}/step", json={"actions": {"carol": "a"}}), 422, "invalid_request"
        )
        error_detail(c.post(f"/sessions/{sid}/step", json={"action": "a"}), 422, "invalid_request")


# ------------------------------------------------------------------------- CLI, ready file, UDS


def test_cli_serve_writes_ready_file_and_starts_fast(tmp_path):
    ready = tmp_path / "ready.json"
    start = time.monotonic()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgym.cli",
            "serve",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--max-sessions",
            "7",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        while not ready.exists():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() - start < 30
            time.sleep(0.01)
        info = json.loads(ready.read_text())
        health = wait_healthy(info["url"], 30)
        elapsed = time.monotonic() - start
        print(f"\nagentgym serve: process start to /health answering in {elapsed:.2f} s")
        assert info["port"] > 0 and info["url"] == f"http://127.0.0.1:{info['port']}"
        assert health["pid"] == info["pid"] == process.pid and health["max_sessions"] == 7
        assert elapsed < 15
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=15)[0].decode()
    assert output.startswith("agentgym serve: ready {")
    assert not alive(process.pid)


def test_unix_socket_server(tmp_path):
    """A server on a Unix socket plays as the env in-process, and removes its socket file when
    SIGTERM stops it (uvicorn ends the process by raising the signal again)."""
    with ServerProcess(use_uds=True, workdir=tmp_path) as server:
        assert server.uds is not None and Path(server.uds).is_socket()
        env = RemoteEnv(server.url, SOKOBAN, uds=server.uds)
        try:
            assert _play(env, 3) == _play(agentgym.make(SOKOBAN), 3)
        finally:
            env.close()
        assert server.stop() == -signal.SIGTERM
    assert not alive(server.pid) and not Path(server.uds).exists()


@pytest.mark.parametrize("flag", ["--head-timeout", "--body-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "ten"])
def test_a_request_timeout_that_is_not_seconds_is_refused(flag, value, capsys):
    with pytest.raises(SystemExit) as refused:
        server_main([flag, value, "--port", "0"])
    assert refused.value.code == 2
    assert f"seconds must be a number > 0, got {value!r}" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "1.5", "many"])
def test_a_connection_cap_that_is_not_a_count_is_refused(value, capsys):
    with pytest.raises(SystemExit) as refused:
        server_main(["--max-client-connections", value, "--port", "0"])
    assert refused.value.code == 2
    assert f"a count must be a whole number >= 0, got {value!r}" in capsys.readouterr().err


def test_server_that_cannot_start_reports_why(start_server):
    with pytest.raises(
        RuntimeError,
        match="(?s)exited with status 1 before serving.*max_sessions and max_body_bytes must be >= 1",
    ):
        start_server(max_sessions=0)
