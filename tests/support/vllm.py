"""What the policy tests share (policies/test_vllm_policy.py, policies/test_openai_policy.py): the
model served and chats to send. The vLLM server is a fixture of tests/policies/conftest.py."""

from __future__ import annotations

MODEL = "smollm2-135m"
"""The embedded model, which the vLLM server serves."""
CHATS = [
    [
        {"role": "system", "content": "You are a helpful agent. Answer with <action>...</action>."},
        {"role": "user", "content": "You are in a kitchen. There is a fridge and a table."},
    ],
    [{"role": "user", "content": "Name three colours of the rainbow."}],
]
