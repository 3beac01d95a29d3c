"""The policy contract: what the rollout engine asks of any generator of agent responses.

A :class:`Policy` turns :class:`GenerationRequest` s into :class:`Generation` s, many at once
(``generate`` receives every request that is ready; implementations batch them). LLM policies
read ``messages``; scripted baselines may read ``observation`` and ``info`` instead. Either way the
response is free text from which the action is extracted by the prompter
(``agentgym.prompting``), so that every policy is scored by the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Generation", "GenerationRequest", "Policy", "PolicyUnavailable", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings of one request."""

    max_tokens: int = 256
    """Upper bound on response tokens."""
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass
class GenerationRequest:
    """One call for an agent response."""

    messages: list[dict[str, str]]
    """Chat messages (``role``/``content``), system prompt first, newest observation last."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    """Sampling seed of this request; the rollout engine derives it from (task seed, group
    member, turn) so that runs are reproducible whatever the scheduling."""
    observation: str = ""
    """The newest observation, as plain text."""
    info: dict[str, Any] = field(default_factory=dict)
    """The env info that came with it (``admissible_actions``, ...). Never shown to LLMs."""
    session: str | None = None
    """The episode (or seat of a game) this request belongs to; a policy with several servers
    keeps one session's requests on one server (its prefix cache holds the conversation so far).
    The rollout engine sets it to ``Episode.episode_id``."""


@dataclass
class Generation:
    """A response and the exact token data behind it."""

    text: str
    prompt_ids: Sequence[int] = ()
    """The exact prompt tokens; ``()`` (the default) for a policy without token data."""
    response_ids: Sequence[int] = ()
    logprobs: Sequence[float] = ()
    """Natural-log probability of each response token under the raw model: log_softmax of the
    unscaled logits, whatever the temperature and top-p of the request (vLLM's default
    ``raw_logprobs``). This is what a learner's forward pass recomputes."""
    finish_reason: str | None = None
    """``"stop"`` (end of sequence or stop string) or ``"length"`` (hit ``max_tokens``)."""
    policy_version: int = 0
    """Version of the weights that produced it (incremented by each weight push)."""


@runtime_checkable
class Policy(Protocol):
    """Anything that answers generation requests.

    ``generate`` returns exactly one :class:`Generation` per request, in order. It may raise; the
    rollout engine then truncates the affected episodes with the error and goes on.

    Optional methods the harness uses when present: ``async check()``, called once before a run,
    raises :class:`PolicyUnavailable` when the policy cannot serve (its server is down, the model
    is not served there, the key is refused); ``async aclose()`` releases what the policy holds
    (connections, a server it launched).

    Optional attributes the rollout engine reads: ``max_batch_size`` and
    ``max_concurrent_batches`` (see :class:`~agentgym.rollout.RequestBatcher`), and ``inline``:
    ``True`` for a policy whose ``generate`` computes its answers without awaiting anything
    (rules, scripts, bots); the engine then asks it for each request on its own, as soon as the
    request is made, with no batching and no ``generate`` timeout (a subclass whose
    ``generate`` awaits something sets it back to ``False``); ``reads_messages``: ``False`` for a
    policy that answers from a request's ``observation`` and ``info`` alone, to which the engine
    then sends ``messages=[]`` (a rule-based player would spend more on its chat than on its
    answer).
    """

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...


class PolicyUnavailable(RuntimeError):
    """The policy cannot serve at all (not one request): raised by a policy's ``check``."""
