"""Fixtures of the policies' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgym.policies.vllm import VLLMServer

from support.vllm import MODEL


@pytest.fixture(scope="module")
def server() -> Iterator[VLLMServer]:
    """A real vLLM server (LoRA enabled) serving :data:`~support.vllm.MODEL`, shared by the tests
    of a module (test_vllm_policy.py); test_weight_sync.py and test_router.py have their own."""
    with VLLMServer(MODEL, enable_lora=True) as srv:
        yield srv
