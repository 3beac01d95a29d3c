"""What the policy tests share (policies/test_vllm_policy.py, policies/test_openai_policy.py): the
model served and chats to send. The vLLM server is a fixture of tests/policies/conftest.py."""

from __future__ import annotations

from typing import Any

from agentgym.policy import GenerationRequest, SamplingParams

MODEL = "smollm2-135m"
"""The embedded model, which the vLLM server serves."""
CHATS = [
    [
        {"role": "system", "content": "You are a helpful agent. Answer with <action>...</action>."},
        {"role": "user", "content": "You are in a kitchen. There is a fridge and a table."},
    ],
    [{"role": "user", "content": "Name three colours of the rainbow."}],
]


def chat_request(seed: int | None = None, **sampling: Any) -> GenerationRequest:
    """A request for ``CHATS[1]`` with ``sampling`` (:class:`SamplingParams` fields)."""
    return GenerationRequest(messages=CHATS[1], seed=seed, sampling=SamplingParams(**sampling))
