"""HFPolicy on the real embedded model: token data, raw logprobs, seeding, stops, rollouts."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.harness.eval import compose_eval_config  # noqa: E402
from agentgym.policies.hf import HFPolicy  # noqa: E402
from agentgym.policies.models import encode_chat  # noqa: E402
from agentgym.policy import Generation, GenerationRequest, SamplingParams  # noqa: E402
from agentgym.rollout import collect, default_tasks  # noqa: E402

# Prompts of very different lengths, so that batches carry real left padding.
PROMPTS = [
    "hi",
    "What is 2+2?",
    "Write a long story about a dragon who loves pancakes, the sea and old lighthouses. "
    "Give every character a name, and describe the weather in detail.",
    "Name a colour.",
]
OPEN = "Write a poem about anything you like."


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _request(text: str, seed: int | None = None, **sampling) -> GenerationRequest:
    return GenerationRequest(messages=_chat(text), sampling=SamplingParams(**sampling), seed=seed)


def _generate(policy: HFPolicy, requests: list[GenerationRequest]) -> list[Generation]:
    return asyncio.run(policy.generate(requests))


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy(seed=0)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_logprobs_are_raw_model_logprobs(policy, temperature, top_p):
    # The repeated prompt shares its prefill with its twin (as a group's members do).
    requests = [
        _request(p, seed=i, max_tokens=12, temperature=temperature, top_p=top_p)
        for i, p in enumerate(PROMPTS + PROMPTS[:1])
    ]
    for request, gen in zip(requests, _generate(policy, requests)):
        assert gen.prompt_ids == encode_chat(policy.tokenizer, request.messages)
        assert len(gen.logprobs) == len(gen.response_ids) > 0
        fresh = policy.logprobs_of(gen.prompt_ids, gen.response_ids)
        assert max(abs(a - b) for a, b in zip(fresh, gen.logprobs)) < 1e-4
        assert all(lp <= 0 for lp in gen.logprobs)


def test_token_data_and_finish_reasons(policy):
    eos = set(policy.eos_ids.tolist())
    done, cut = _generate(
        policy,
        [_request("hi", max_tokens=48, temperature=0), _request(PROMPTS[2], max_tokens=5, temperature=0)],
    )
    assert done.finish_reason == "stop" and done.response_ids[-1] in eos
    assert len(done.response_ids) < 48 and done.text.strip()
    assert done.text == policy.tokenizer.decode(done.response_ids, skip_special_tokens=True)
    assert cut.finish_reason == "length" and len(cut.response_ids) == len(cut.logprobs) == 5
    assert not eos & set(cut.response_ids)
    assert cut.text == policy.tokenizer.decode(cut.response_ids, skip_special_tokens=True)
    assert done.policy_version == cut.policy_version == policy.policy_version == 0


def test_greedy_output_does_not_depend_on_batch(policy):
    target = _request(PROMPTS[1], max_tokens=16, temperature=0)
    alone = _generate(policy, [target])[0]
    others = [_request(p, max_tokens=8, temperature=0.9, seed=3) for p in PROMPTS]
    batched = _generate(policy, [others[2], target, others[0]])[1]
    assert batched.response_ids == alone.response_ids and batched.text == alone.text


def test_the_common_prompt_prefix_runs_once(policy):
    """Prompts that start alike (here the chat template's default system prompt) share one
    forward pass over their common prefix; each still gets what it gets alone."""
    requests = [_request(p, max_tokens=6, temperature=0) for p in PROMPTS[:2]]
    alone = [_generate(policy, [r])[0] for r in requests]
    prompts = [g.prompt_ids for g in alone]
    shared = next(i for i, (a, b) in enumerate(zip(*prompts)) if a != b)
    assert shared >= 16  # long enough to be computed once
    fed: list[int] = []
    hook = policy.model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _o: fed.append(args[0].numel())
    )
    try:
        batched = _generate(policy, requests)
    finally:
        hook.remove()
    longest_rest = max(len(p) - shared for p in prompts)
    assert fed[:2] == [shared, 2 * longest_rest]  # the prefix once, then each rest (left-padded)
    for a, b in zip(alone, batched):
        assert a.response_ids == b.response_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_seeded_sample_depends_only_on_its_seed(policy):
    sample = {"max_tokens": 16, "temperature": 1.0}
    alone = _generate(policy, [_request(OPEN, seed=7, **sample)])[0]
    batch = _generate(
        policy,
        [
            _request(PROMPTS[2], seed=1, **sample),
            _request(OPEN, seed=7, **sample),
            _request(OPEN, seed=8, **sample),
        ],
    )
    assert batch[1].response_ids == alone.response_ids
    assert batch[2].response_ids != alone.response_ids


def test_stop_string_truncates(policy):
    full = _generate(policy, [_request(PROMPTS[2], max_tokens=24, temperature=0)])[0]
    stop = full.text.split()[4]
    cut = _generate(
        policy, [_request(PROMPTS[2], max_tokens=24, temperature=0, stop=("no such text", stop))]
    )[0]
    assert cut.finish_reason == "stop"
    decode = policy.tokenizer.decode
    assert cut.text == decode(cut.response_ids, skip_special_tokens=True)  # stop string kept
    assert stop in cut.text and stop not in decode(cut.response_ids[:-1], skip_special_tokens=True)
    assert full.text.startswith(cut.text) and len(cut.response_ids) < len(full.response_ids)
    assert cut.response_ids == full.response_ids[: len(cut.response_ids)]
    assert cut.logprobs == pytest.approx(full.logprobs[: len(cut.logprobs)], abs=1e-5)


def test_rollout_end_to_end(policy):
    episodes = collect(
        "agentgym/Household-v0",
        policy,
        default_tasks(4),
        group_size=2,
        max_turns=3,
        sampling=SamplingParams(max_tokens=24),
        progress=False,
    )
    assert len(episodes) == 8
    for episode in episodes:
        assert episode.error is None and episode.turns
        for turn in episode.turns:
            assert turn.prompt_ids and turn.response_ids
            assert len(turn.response_ids) == len(turn.response_logprobs)
            assert turn.finish_reason in ("stop", "length")


def test_rollout_reproducible_at_fixed_seed(policy):
    def run(concurrency: int):
        episodes = collect(
            "agentgym/Household-v0",
            policy,
            default_tasks(1, seed=5),
            group_size=2,
            max_turns=2,
            concurrency=concurrency,
            sampling=SamplingParams(max_tokens=8),
            progress=False,
        )
        return [[(t.action, t.response_ids) for t in e.turns] for e in episodes]

    first = run(1)
    assert first == run(1)
    assert first == run(2)  # batched with its group-mate: same samples


def test_cancel_stops_the_decode_loop(policy):
    async def cancelled():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(policy.generate([_request(OPEN, max_tokens=400)]), 0.5)

    start = time.perf_counter()
    asyncio.run(cancelled())  # returns once the worker thread has ended
    assert time.perf_counter() - start < 8
    assert _generate(policy, [_request("hi", max_tokens=2)])[0].response_ids


def test_bad_input(policy, tmp_path):
    missing = tmp_path / "no-model"
    with pytest.raises(OSError, match="no-model"):
        HFPolicy(str(missing))
    with pytest.raises(ValueError, match="max_batch_size"):
        HFPolicy(max_batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        HFPolicy(dtype="int8")
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"max_tokens": 0}):
        with pytest.raises(ValueError, match="sampling"):
            _generate(policy, [_request("hi", **bad)])


def test_hydra_config_and_close():
    from hydra.utils import instantiate

    cfg = compose_eval_config(["policy=hf", "seed=3"])
    hf = instantiate(cfg.policy)
    assert isinstance(hf, HFPolicy)
    assert hf.max_batch_size == 16 and hf.max_concurrent_batches == 1
    assert hf.device.type in ("cpu", "cuda")
    asyncio.run(hf.aclose())
    with pytest.raises(RuntimeError, match="closed"):
        _generate(hf, [_request("hi", max_tokens=2)])
    with pytest.raises(RuntimeError, match="closed"):
        hf.logprobs_of([1, 2], [3])
