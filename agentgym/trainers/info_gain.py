"""IGPO's scorer: how likely the current policy finds the ground-truth answer after each turn.

For an episode with turns 1..T and ground truth a, the context before turn 1 and after each turn
t < T is the chat the policy would see next (the same prompter, so the same history window).
Placing the answer where the policy would write it (``template``, e.g.
``<answer>{}</answer>`` right after the assistant header), the score is

    v_t = mean over a's tokens of log pi(a_j | context_t, template prefix, a_<j)

by teacher forcing, with no gradient. Only the answer's own tokens are averaged (not the template
around it); they are located by character offsets, so tokenization is that of the whole string.

Batching: an episode's contexts mostly grow by appending (the next turn's response and
observation), so each is a token prefix of the next until the prompter's history window drops a
turn. Such a chain runs through the model once, as its longest context (left-padded beside the
other chains of a micro-batch bounded by a token budget, with the prefix that every chain of the
micro-batch starts with run once); its keys and values are then repeated for every context of the
chain (a chain is cut where those copies would pass the token budget), and only the answer goes
through the model again, attending to its context's part of the cache.
:func:`naive_answer_scores` is the one-sequence-at-a-time reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentgym.episode import Episode
from agentgym.policies.batching import budget_batches, prefill
from agentgym.policies.models import encode_chat

__all__ = ["answer_scores", "naive_answer_scores", "scoring_sequences"]


def _contexts(prompter: Any, episode: Episode) -> list[list[dict[str, str]]]:
    """Chats before turn 1 and after turns 1..T-1 (the last turn's score is never used)."""
    system = prompter.system(episode.instruction)
    past: list[tuple[str, str]] = []
    chats = []
    for turn in episode.turns:
        chats.append(prompter.messages(system, past, turn.observation))
        past.append((turn.observation, turn.response_text))
    return chats


def _answer_ids(tokenizer: Any, template: str, answer: str) -> tuple[list[int], int, int]:
    """Token ids of ``template`` filled with ``answer`` and the [start, end) token span that
    covers the answer's characters."""
    prefix = template.index("{}")
    text = template.format(answer)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    lo, hi = prefix, prefix + len(answer)
    span = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if s < hi and e > lo]
    if not span:
        raise ValueError(f"the answer {answer!r} has no tokens in {text!r}")
    return list(enc["input_ids"]), span[0], span[-1] + 1


@dataclass
class _Chain:
    """Contexts of one episode, each a token prefix of the next."""

    context: list[int]
    """The longest context's prompt ids."""
    members: list[tuple[int, int]]
    """(index among the batch's contexts, prompt length) of every context of the chain."""
    answer: tuple[list[int], int, int]
    """The filled template's ids and the answer's [start, end) span in them."""


def _chains(
    tokenizer: Any, prompter: Any, episodes: Sequence[Episode], answers: Sequence[str], template: str
) -> list[_Chain]:
    """The contexts of ``episodes``, in order, as chains: a context joins the chain before it
    when that chain's longest context is a token prefix of it (checked, not assumed)."""
    if len(answers) != len(episodes):
        raise ValueError(f"one answer per episode: {len(answers)} answers, {len(episodes)} episodes")
    chains: list[_Chain] = []
    index = 0
    for episode, answer in zip(episodes, answers):
        filled, chain = _answer_ids(tokenizer, template, answer), None
        for chat in _contexts(prompter, episode):
            prompt = encode_chat(tokenizer, chat)
            if chain is not None and prompt[: len(chain.context)] == chain.context:
                chain.context = prompt
                chain.members.append((index, len(prompt)))
            else:
                chain = _Chain(prompt, [(index, len(prompt))], filled)
                chains.append(chain)
            index += 1
    return chains


def _within(chain: _Chain, budget: int) -> list[_Chain]:
    """``chain`` cut into chains of at most ``budget`` // its length contexts (one at least):
    the answer pass repeats a chain's cache for each of its contexts, and so stays within the
    token budget."""
    size = max(1, budget // (len(chain.context) + len(chain.answer[0])))
    parts = [chain.members[i : i + size] for i in range(0, len(chain.members), size)]
    return [_Chain(chain.context[: part[-1][1]], part, chain.answer) for part in parts]


def scoring_sequences(
    tokenizer: Any,
    prompter: Any,
    episodes: Sequence[Episode],
    answers: Sequence[str],
    template: str = "<answer>{}</answer>",
) -> list[tuple[list[int], int, int]]:
    """For every episode and context, (token ids, span start, span end) with the span indexing
    the answer's tokens inside the ids."""
    out = []
    for chain in _chains(tokenizer, prompter, episodes, answers, template):
        filled, start, end = chain.answer
        for _, length in chain.members:
            out.append((chain.context[:length] + filled, length + start, length + end))
    return out


def _to_rows(episodes: Sequence[Episode], flat: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Flat per-context scores -> (per-row scores v_t after turn t, initial v_0 per episode).
    The last turn's row repeats the previous context's score: IGPO replaces its reward with the
    outcome, so that value never enters an advantage."""
    rows, initial, k = [], [], 0
    for episode in episodes:
        n = episode.num_turns
        values = flat[k : k + n]
        k += n
        if n:
            initial.append(values[0])
            rows.extend(values[1:] + values[-1:])
        else:
            initial.append(0.0)
    return np.asarray(rows, dtype=np.float64), np.asarray(initial, dtype=np.float64)


@torch.no_grad()
def answer_scores(
    model: Any,
    tokenizer: Any,
    prompter: Any,
    episodes: Sequence[Episode],
    answers: Sequence[str],
    *,
    template: str = "<answer>{}</answer>",
    token_budget: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """IGPO scores for a batch: (per-row v_t after each turn, per-episode v_0), as
    :func:`agentgym.trainers.credit.igpo` takes them. Batched; see the module docstring."""
    chains = [
        part
        for chain in _chains(tokenizer, prompter, episodes, answers, template)
        for part in _within(chain, token_budget)
    ]
    device = next(model.parameters()).device
    scores = [0.0] * sum(len(c.members) for c in chains)
    lengths = [len(c.context) + len(c.answer[0]) for c in chains]
    for indices in budget_batches(lengths, token_budget, rows=[len(c.members) for c in chains]):
        batch = [chains[i] for i in indices]
        # The longest contexts but their last token, which the answer pass runs (its logits
        # predict the template's first token).
        _, cache, mask, positions = prefill(
            model, [c.context[:-1] for c in batch], tokenizer.pad_token_id, device
        )
        width = positions.shape[1]
        shared = mask.shape[1] - width  # the cache: the shared prefix, then the left-padded rest
        # (chain in the batch, context's index among all, context's length) of each answer row
        rows = [(k, index, length) for k, chain in enumerate(batch) for index, length in chain.members]
        tail = 1 + max(len(c.answer[0]) for c in batch)
        inputs = torch.full((len(rows), tail), tokenizer.pad_token_id, dtype=torch.long)
        seen = torch.zeros((len(rows), shared + width + tail), dtype=torch.long)
        span = torch.zeros((len(rows), tail - 1), dtype=torch.bool)  # the answer's own predictions
        for row, (k, _, length) in enumerate(rows):
            context, (filled, start, end) = batch[k].context, batch[k].answer
            inputs[row, : 1 + len(filled)] = torch.tensor([context[length - 1], *filled])
            cached, rest = length - 1, len(context) - 1 - shared  # this context's cached part
            seen[row, : min(shared, cached)] = 1
            rest_start = shared + width - rest
            seen[row, rest_start : rest_start + max(0, cached - shared)] = 1
            seen[row, shared + width : shared + width + 1 + len(filled)] = 1
            span[row, start:end] = True
        cache.batch_select_indices(torch.tensor([k for k, _, _ in rows], device=device))
        before = torch.tensor([length - 1 for _, _, length in rows])
        logits = (
            model(
                input_ids=inputs.to(device),
                attention_mask=seen.to(device),
                position_ids=(before[:, None] + torch.arange(tail)).to(device),
                past_key_values=cache,
                use_cache=True,
            )
            .logits[:, :-1]
            .float()
        )
        # Column j of the answer pass predicts the filled template's token j.
        logprobs = torch.log_softmax(logits, -1).gather(-1, inputs[:, 1:, None].to(device)).squeeze(-1)
        span = span.to(device)
        means = (logprobs.where(span, 0.0).sum(-1) / span.sum(-1)).tolist()
        for (_, index, _), value in zip(rows, means):
            scores[index] = value
    return _to_rows(episodes, scores)


@torch.no_grad()
def naive_answer_scores(
    model: Any,
    tokenizer: Any,
    prompter: Any,
    episodes: Sequence[Episode],
    answers: Sequence[str],
    *,
    template: str = "<answer>{}</answer>",
) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one unpadded forward pass per context."""
    device = next(model.parameters()).device
    flat = []
    for seq, start, end in scoring_sequences(tokenizer, prompter, episodes, answers, template):
        ids = torch.tensor([seq], device=device)
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        picked = logprobs.gather(-1, ids[0, 1:, None]).squeeze(-1)
        flat.append(picked[start - 1 : end - 1].mean().item())
    return _to_rows(episodes, flat)
