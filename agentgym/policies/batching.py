"""Packing token sequences into model batches, shared by generation, training and scoring.

Sequences are left-padded, so that every sequence ends at the last position: the LM head then
runs only on the last positions (``logits_to_keep``), and the positions that matter line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["budget_batches", "left_pad", "prefix_cached", "shared_prefix_length"]

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


def budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices split greedily, longest first, so that longest length x rows <= ``budget`` tokens
    per batch; a sequence longer than the budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
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
