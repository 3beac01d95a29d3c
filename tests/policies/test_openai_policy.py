"""OpenAIPolicy's keys, failures and request body, and ScriptedPolicy from config.

A small real HTTP server (``http.server`` in a thread) stands in for an API only for failure
injection: a refused key, 429 answers, concurrency limits. OpenAIPolicy against a real vLLM
server is tested in test_vllm_policy.py, on that module's server.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentgym.harness.eval import compose_eval_config
from agentgym.policies.openai import OpenAIPolicy, OpenAIRequestError
from agentgym.policies.scripted import ScriptedPolicy, first_admissible
from agentgym.policy import GenerationRequest, PolicyUnavailable
from agentgym.rollout import acollect, default_tasks

from support.vllm import CHATS, chat_request

KEY_ENV = "AGENTGYM_TEST_API_KEY"
KEY = "sk-test-0123456789abcdef-do-not-leak"
GUESS = "agentgym/GuessNumber-v0"


def _dead_url() -> str:
    """The URL of a local port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class StubAPI:
    """A real local HTTP server speaking a sliver of the OpenAI API, for failure injection.

    The n-th request gets the n-th status of ``statuses`` (the last one repeats), after
    ``delay`` seconds. 200 answers ``GET /v1/models`` with ``models`` and ``POST
    /v1/chat/completions`` with the reply "<action>4</action>"; other codes an error body that
    echoes the Authorization header, as a careless server might. Every request is recorded as
    ``(method, path, headers, body)``; ``peak`` is the most requests handled at once.
    """

    def __init__(
        self, statuses: Sequence[int] = (200,), *, delay: float = 0.0, models: Sequence[str] = ("stub-model",)
    ):
        self.statuses = list(statuses)
        self.delay = delay
        self.models = list(models)
        self.requests: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self.peak = 0
        self._active = 0
        self._lock = threading.Lock()

    def __enter__(self) -> StubAPI:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub._handle(self)

            def do_POST(self) -> None:
                stub._handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, method: str, status: int, headers: dict[str, str]) -> dict[str, Any]:
        if status != 200:
            return {"error": {"message": f"injected {status}, got {headers.get('Authorization', 'no key')}"}}
        if method == "GET":
            return {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        return {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "<action>4</action>"},
                }
            ]
        }

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else {}
        headers = dict(handler.headers.items())
        with self._lock:
            self.requests.append((handler.command, handler.path, headers, body))
            status = self.statuses[min(len(self.requests), len(self.statuses)) - 1]
            self._active += 1
            self.peak = max(self.peak, self._active)
        time.sleep(self.delay)
        with self._lock:
            self._active -= 1
        payload = json.dumps(self._answer(handler.command, status, headers)).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


@pytest.fixture
def stub() -> Iterator[StubAPI]:
    with StubAPI() as api:
        yield api


# --- OpenAIPolicy: keys, failures, the request body (stub API) ----------------------------------


async def test_key_is_sent_as_bearer_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with StubAPI([401]) as api:
        policy = OpenAIPolicy(api.url, "stub-model", api_key_env=KEY_ENV, backoff=0.01)
        with pytest.raises(PolicyUnavailable) as refused:
            await policy.check()
        with pytest.raises(OpenAIRequestError) as failed:
            await policy.generate([chat_request()])
        await policy.aclose()
    assert [r[2].get("Authorization") for r in api.requests] == [f"Bearer {KEY}"] * 2
    assert len(api.requests) == 2  # a 401 is not retried
    message = str(refused.value)
    assert f"{api.url}/models" in message and "HTTP 401" in message
    assert f"${KEY_ENV} was sent and refused" in message
    assert f"POST {api.url}/chat/completions failed: HTTP 401" in str(failed.value)
    for shown in (message, str(failed.value), repr(policy), repr(vars(policy))):
        assert KEY not in shown
    assert "Bearer ***" in message  # the echoed key is masked


async def test_unset_key_sends_no_header_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with StubAPI([200, 401]) as api:
        policy = OpenAIPolicy(api.url, "stub-model", api_key_env=KEY_ENV)
        await policy.check()  # a local server that wants no key
        with pytest.raises(PolicyUnavailable, match=rf"no key was sent: \${KEY_ENV} is not set"):
            await policy.check()
        await policy.aclose()
    assert all("Authorization" not in r[2] for r in api.requests)


async def test_nothing_listening_fails_check_fast() -> None:
    url = _dead_url()
    policy = OpenAIPolicy(url, "stub-model", max_retries=5, backoff=1.0)
    start = time.perf_counter()
    with pytest.raises(PolicyUnavailable) as error:
        await policy.check()
    assert time.perf_counter() - start < 2
    assert f"cannot reach {url}/models" in str(error.value)
    assert "ConnectionRefusedError" in str(error.value)
    await policy.aclose()


async def test_retries_429_and_sends_the_request_fields() -> None:
    with StubAPI([429, 503, 200]) as api:
        policy = OpenAIPolicy(api.url, "stub-model", api_key_env=None, backoff=0.01, extra_body={"top_k": 5})
        [generation] = await policy.generate(
            [chat_request(seed=7, max_tokens=9, temperature=0.3, top_p=0.9, stop=("</action>",))]
        )
        [unseeded] = await policy.generate([chat_request()])
        await policy.aclose()
    assert [r[:2] for r in api.requests] == [("POST", "/v1/chat/completions")] * 4
    assert api.requests[2][3] == {
        "model": "stub-model",
        "messages": CHATS[1],
        "max_tokens": 9,
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": ["</action>"],
        "seed": 7,
        "top_k": 5,
    }
    assert "seed" not in api.requests[3][3] and "stop" not in api.requests[3][3]
    assert (generation.text, generation.finish_reason) == ("<action>4</action>", "stop")
    assert generation.response_ids == generation.logprobs == generation.prompt_ids == []
    assert unseeded.text == generation.text


async def test_persistent_5xx_raises_after_retries() -> None:
    with StubAPI([500]) as api:
        policy = OpenAIPolicy(api.url, "stub-model", max_retries=2, backoff=0.01)
        with pytest.raises(OpenAIRequestError, match="failed after 3 attempts: HTTP 500"):
            await policy.generate([chat_request()])
        await policy.aclose()
    assert len(api.requests) == 3


async def test_max_concurrency_bounds_requests_in_flight() -> None:
    with StubAPI(delay=0.2) as api:
        policy = OpenAIPolicy(api.url, "stub-model", max_concurrency=2)
        generations = await policy.generate([chat_request(seed=i) for i in range(6)])
        await policy.aclose()
    assert len(generations) == len(api.requests) == 6 and api.peak == 2


def test_config_selects_openai_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = compose_eval_config(
        ["policy=openai", "policy.model=m", f"policy.api_key_env={KEY_ENV}", "+policy.extra_body.top_k=20"]
    )
    assert KEY not in OmegaConf.to_yaml(cfg)
    policy = instantiate(cfg.policy)
    assert isinstance(policy, OpenAIPolicy) and policy.max_batch_size == 1
    assert policy.base_url == "https://api.openai.com/v1" and policy.extra_body == {"top_k": 20}
    assert type(policy.extra_body["top_k"]) is int and KEY not in repr(policy)


# --- ScriptedPolicy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "act", ["agentgym.policies.scripted:first_admissible", "agentgym.policies.scripted.first_admissible"]
)
async def test_scripted_act_from_string(act: str) -> None:
    policy = ScriptedPolicy(act, action_tag="move")
    assert policy.act is first_admissible
    [generation] = await policy.generate(
        [GenerationRequest(messages=[], observation="o", info={"admissible_actions": ["left", "right"]})]
    )
    assert generation.text == "<move>left</move>" and generation.finish_reason == "stop"


def test_first_admissible_needs_admissible_actions() -> None:
    with pytest.raises(ValueError, match=r"first_admissible needs .*admissible_actions"):
        first_admissible("no list here", {})


@pytest.mark.parametrize(
    "act, message",
    [
        ("no_such_module_xyz:act", "does not import: ModuleNotFoundError"),
        ("agentgym.policies.scripted:no_such_act", "does not import: AttributeError"),
        ("agentgym.policies.scripted:__name__", "is not callable"),
        ("first_admissible", "is not 'module:function'"),
    ],
)
def test_bad_act_string_fails_at_construction(act: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        ScriptedPolicy(act)
    assert repr(act) in str(error.value)


async def test_scripted_config_plays_first_admissible() -> None:
    policy = instantiate(compose_eval_config(["policy=scripted"]).policy)
    assert policy.act is first_admissible
    episodes = await acollect(GUESS, policy, default_tasks(2), max_turns=2, progress=False)
    assert [e.error for e in episodes] == [None, None]
    turns = [t for e in episodes for t in e.turns]
    assert len(turns) == 4 and all(t.action == "1" and t.action_valid for t in turns)
    tagged = compose_eval_config(["policy=scripted", "prompt.action_tag=act"]).policy
    assert instantiate(tagged).action_tag == "act"  # follows the prompt's tag
