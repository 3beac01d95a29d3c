"""Packing token sequences into model batches, shared by generation, training and scoring.

Sequences are left-padded, so that every sequence ends at the last position: the LM head then
runs only on the last positions (``logits_to_keep``), and the positions that matter line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "PrefixTree",
    "budget_batches",
    "common_prefix_length",
    "left_pad",
    "pack_tree",
    "prefill",
    "prefix_cached",
    "shared_prefix_length",
]

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


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` start with in common."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def shared_prefix_length(sequences: Sequence[Sequence[int]], minimum: int = MIN_SHARED_PREFIX) -> int:
    """Length of the token prefix that every one of several ``sequences`` starts with, less
    than the shortest (each keeps a token to run after it); 0 when under ``minimum`` tokens or
    for a single sequence. Run once, its keys and values serve every sequence."""
    if len(sequences) < 2:
        return 0
    first, length = sequences[0], min(len(s) for s in sequences) - 1
    for seq in sequences[1:]:
        length = min(length, common_prefix_length(first, seq))
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


@dataclass(frozen=True)
class PrefixTree:
    """Sequences packed as their prefix tree into one row: each node is a distinct prefix's last
    token, run once however many sequences start with that prefix, and attends to its ancestors
    and itself only. One forward pass over ``ids`` with ``mask`` and ``positions`` gives every
    node the outputs it has in each of its sequences run alone (to float tolerance)."""

    ids: torch.Tensor
    """(1, nodes) the token of each node, depth-first: a node comes after its ancestors."""
    positions: torch.Tensor
    """(1, nodes) the depth of each node: its position in every sequence through it."""
    mask: torch.Tensor
    """(1, 1, nodes, nodes) bool: whether node i may attend to node j (j is i or an ancestor)."""
    slots: torch.Tensor
    """(sequences, longest) the node of each sequence's token, in the order given; 0 past the end."""


def pack_tree(sequences: Sequence[Sequence[int]], device: torch.device | str) -> PrefixTree:
    """The prefix tree of ``sequences`` (at least one, none empty): :class:`PrefixTree`.

    In lexicographic order, a sequence shares with the tree what it shares with the sequence
    before it (``lcp``) and adds the rest as new nodes; the node of its token ``j`` is the one made
    by the last sequence up to it whose new nodes start at or before ``j``."""
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    lengths = np.array([len(sequences[i]) for i in order])
    width = int(lengths.max())
    tokens = np.full((len(order), width), -1, dtype=np.int64)
    for row, i in enumerate(order):
        tokens[row, : lengths[row]] = sequences[i]
    depth = np.arange(width)
    same = np.cumprod(tokens[1:] == tokens[:-1], axis=1).sum(1)
    lcp = np.concatenate([[0], np.minimum(same, np.minimum(lengths[1:], lengths[:-1]))])
    new = lengths - lcp
    first = np.concatenate([[0], np.cumsum(new)[:-1]])  # the first new node of each sequence
    rows = np.arange(len(order))
    maker = np.maximum.accumulate(np.where(lcp[:, None] <= depth, rows[:, None], -1), axis=0)
    slots = first[maker] + depth - lcp[maker]
    valid = depth < lengths[:, None]
    nodes = int(new.sum())
    node_ids, node_depth, owner = (np.zeros(nodes, dtype=np.int64) for _ in range(3))
    node_ids[slots[valid]] = tokens[valid]
    node_depth[slots[valid]] = np.broadcast_to(depth, slots.shape)[valid]
    owner[slots[valid]] = np.broadcast_to(rows[:, None], slots.shape)[valid]
    # a node's ancestors are its owner's (any sequence through it) nodes up to its depth
    path = slots[owner]
    up_to = depth <= node_depth[:, None]
    mask = np.zeros((nodes, nodes), dtype=bool)
    mask[np.broadcast_to(np.arange(nodes)[:, None], path.shape)[up_to], path[up_to]] = True
    given = np.zeros_like(slots)
    given[order] = np.where(valid, slots, 0)
    return PrefixTree(
        ids=torch.from_numpy(node_ids)[None].to(device),
        positions=torch.from_numpy(node_depth)[None].to(device),
        mask=torch.from_numpy(mask)[None, None].to(device),
        slots=torch.from_numpy(given).to(device),
    )
