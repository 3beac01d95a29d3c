"""IGPO's scorer: how likely the current policy finds the ground-truth answer after each turn.

For an episode with turns 1..T and ground truth a, the context before turn 1 and after each turn
t < T is the chat the policy would see next (the same prompter, so the same history window).
Placing the answer where the policy would write it (``template``, e.g.
``<answer>{}</answer>`` right after the assistant header), the score is

    v_t = mean over a's tokens of log pi(a_j | context_t, template prefix, a_<j)

by teacher forcing, with no gradient. Only the answer's own tokens are averaged (not the template
around it); they are located by character offsets, so tokenization is that of the whole string.

Batching: every (episode, context) sequence of the batch goes through the model in micro-batches
bounded by a token budget, left-padded so that the answers end aligned and the LM head runs only
on the last positions. :func:`naive_answer_scores` is the one-sequence-at-a-time reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentgym.episode import Episode
from agentgym.policies.batching import budget_batches, left_pad
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


def scoring_sequences(
    tokenizer: Any,
    prompter: Any,
    episodes: Sequence[Episode],
    answers: Sequence[str],
    template: str = "<answer>{}</answer>",
) -> list[tuple[list[int], int, int]]:
    """For every episode and context, (token ids, span start, span end) with the span indexing
    the answer's tokens inside the ids."""
    if len(answers) != len(episodes):
        raise ValueError(f"one answer per episode: {len(answers)} answers, {len(episodes)} episodes")
    out = []
    for episode, answer in zip(episodes, answers):
        ans_ids, start, end = _answer_ids(tokenizer, template, answer)
        for chat in _contexts(prompter, episode):
            prompt = encode_chat(tokenizer, chat)
            out.append((prompt + ans_ids, len(prompt) + start, len(prompt) + end))
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
    sequences = scoring_sequences(tokenizer, prompter, episodes, answers, template)
    device = next(model.parameters()).device
    scores = [0.0] * len(sequences)
    for indices in budget_batches([len(seq) for seq, _, _ in sequences], token_budget):
        tail = max(len(sequences[i][0]) - sequences[i][1] for i in indices)  # span start to end
        ids, mask, positions = left_pad([sequences[i][0] for i in indices], tokenizer.pad_token_id, device)
        logits = (
            model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=False,
                logits_to_keep=tail + 1,
            )
            .logits[:, :-1]
            .float()
        )
        logprobs = torch.log_softmax(logits, -1).gather(-1, ids[:, -tail:, None]).squeeze(-1)
        for row, i in enumerate(indices):
            seq, start, end = sequences[i]
            # Column c of the kept window holds the token at position width - tail + c.
            first = start - (len(seq) - tail)
            scores[i] = logprobs[row, first : first + end - start].mean().item()
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
