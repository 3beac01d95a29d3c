"""Packing token sequences into model batches, shared by generation, training and scoring.

Sequences are left-padded, so that every sequence ends at the last position: the LM head then
runs only on the last positions (``logits_to_keep``), and the positions that matter line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["budget_batches", "left_pad", "prefill", "prefix_cached", "shared_prefix_length"]

MIN_SHARED_PREFIX = 16
"""Shortest common prefix (tokens) worth a forward pass of its own."""


def left_pad(
    sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, position ids), each (rows, longest), sequences right-aligned.

    Position ids count real tokens only, so a padded sequence sees the positions it would alone.
    """
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def budget_batches(lengths: Sequence[int], budget: int, rows: Sequence[int] | None = None) -> list[list[int]]:
    """Indices split greedily, longest first, so that longest length x rows <= ``budget`` tokens
    per batch, item ``i`` counting as ``rows[i]`` rows (one each by default); an item over the
    budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    weight = [1] * len(lengths) if rows is None else rows
    batches: list[list[int]] = []
    count = 0
    for i in order:
        if batches and lengths[batches[-1][0]] * (count + weight[i]) <= budget:
            batches[-1].append(i)
            count += weight[i]
        else:
            batches.append([i])
            count = weight[i]
    return batches


def shared_prefix_length(sequences: Sequence[Sequence[int]], minimum: int = MIN_SHARED_PREFIX) -> int:
    """Length of the token prefix that every one of several ``sequences`` starts with, less
    than the shortest (each keeps a token to run after it); 0 when under ``minimum`` tokens or
    for a single sequence. Run once, its keys and values serve every sequence."""
    if len(sequences) < 2:
        return 0
    first, length = sequences[0], min(len(s) for s in sequences) - 1
    for seq in sequences[1:]:
        length = next((i for i in range(length) if seq[i] != first[i]), length)
    return length if length >= minimum else 0


def prefix_cached(
    model: Any, sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cache, ids, mask, positions) to run ``sequences`` through ``model`` with the prefix they
    all start with (:func:`shared_prefix_length`) computed once: ``cache`` holds its keys and
    values, run for one row and repeated for every sequence (``None`` when there is none worth
    it); ``ids`` are the rest of each sequence, left-padded after it (the padding sits between
    the prefix and the rest); ``mask`` covers prefix and rest, (rows, shared + longest rest);
    ``positions`` are those of the rest, counting real tokens only. Pass all four to the next
    forward pass; a gradient flows back through the shared keys and values."""
    shared, cache = shared_prefix_length(sequences), None
    if shared:
        prefix = torch.tensor([list(sequences[0][:shared])], device=device)
        cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(len(sequences))
        sequences = [s[shared:] for s in sequences]
    ids, mask, positions = left_pad(sequences, pad_id, device)
    return cache, ids, torch.cat([mask.new_ones(len(sequences), shared), mask], dim=-1), positions + shared


def prefill(
    model: Any, sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Run ``sequences`` through ``model`` (their shared prefix once, :func:`prefix_cached`) and
    keep the cache: (next-token logits of each sequence (rows, vocab), the KV cache, its
    attention mask (rows, cached length), the position ids of the rest (rows, longest rest))."""
    cache, ids, mask, positions = prefix_cached(model, sequences, pad_id, device)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1], out.past_key_values, mask, positions
