"""In-process generation with transformers: batched, seeded, with the exact token data.

:class:`HFPolicy` runs each batch of requests through its own decode loop (left-padded prefill,
then one token per step with a KV cache) instead of ``model.generate``, so that it controls what
training needs:

- sampling is per row: each request draws its uniforms from its own ``torch.Generator`` seeded by
  ``request.seed`` and samples by inverse CDF in vocabulary order, so that its sample does not
  depend on its batch-mates;
- ``logprobs`` are those of the raw model (log-softmax of the unscaled logits, whatever the
  temperature and top-p), as vLLM returns them and as a learner's forward pass recomputes them;
- rows finish independently (EOS, stop string, ``max_tokens``) and leave the batch at once.

``text`` is always the decoding of ``response_ids`` (special tokens skipped): a stop string stays
in it, as with vLLM's ``include_stop_str_in_output``, so that an action tag used as a stop string
still parses.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from agentgym.policies.batching import prefill
from agentgym.policies.models import encode_chat, load_tokenizer, resolve_model
from agentgym.policy import Generation, GenerationRequest, SamplingParams

__all__ = ["HFPolicy"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class HFPolicy:
    """A causal LM from transformers, generating in a worker thread, one batch at a time.

    Args:
        model: an embedded model name (see :func:`~agentgym.policies.models.resolve_model`), a
            local folder or a hub id.
        device: ``"auto"`` (CUDA when available, else CPU) or any torch device string.
        dtype: weight dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        max_batch_size: most requests per ``generate`` call the rollout engine sends.
        seed: seeds the generator of requests that carry no ``seed`` of their own; ``None``
            seeds it from the OS.
        module: an already loaded model to generate with instead of loading ``model`` (which
            then only names the tokenizer). A learner passes its own model here, so that its
            updates are seen by the next generation without any copy, or a copy of it that
            receives its weights through :meth:`load_weights` (so that it generates while the
            learner updates); ``dtype`` and ``device`` are then the module's own.
    """

    max_concurrent_batches = 1
    """One model, one batch at a time: the rollout engine queues the rest."""

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        device: str = "auto",
        dtype: str = "float32",
        max_batch_size: int = 16,
        seed: int | None = None,
        module: Any = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        _check_local_path(model)
        if module is not None:
            device = str(next(module.parameters()).device)
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        )
        self.max_batch_size = max_batch_size
        self.policy_version = 0
        """Version of the current weights; whoever replaces them increments it."""
        self.tokenizer: Any = load_tokenizer(model)
        # transformers wraps .to with functools.wraps, whose type leaves ``self`` unbound.
        self.model: Any = (
            module
            if module is not None
            else AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=_DTYPES[dtype])
            .to(self.device)
            .eval()
        )
        self.eos_ids = torch.tensor(sorted(_eos_ids(self.tokenizer, self.model)), device=self.device)
        self.context_length: int = self.model.config.max_position_embeddings
        """Most tokens (prompt + response) one sequence may hold."""
        self._rng = torch.Generator()
        if seed is None:
            self._rng.seed()
        else:
            self._rng.manual_seed(seed)
        self._lock = threading.Lock()  # the model runs one batch at a time, whoever calls

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One :class:`Generation` per request, in order, computed in a worker thread.

        Raises ``ValueError`` for invalid sampling settings or a prompt that fills the context.
        Cancelling the call stops the decode loop at its next step.
        """
        if not requests:
            return []
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._generate_batch, requests, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise

    async def load_weights(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``tensors`` into this model's parameters of the same names and set
        :attr:`policy_version` to ``version``: a weight push to a policy that generates with its
        own copy of a learner's model. It waits for the batch running, which finishes on the old
        weights; every generation after carries ``version``. A name the model lacks raises
        ``KeyError`` (nothing is copied)."""
        await asyncio.to_thread(self._load_weights, dict(tensors), version)

    def _load_weights(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        with self._lock, torch.no_grad():
            self._check_open()
            params = dict(self.model.named_parameters())
            unknown = sorted(set(tensors) - set(params))
            if unknown:
                raise KeyError(f"the policy's model has no parameter {unknown[0]!r} ({len(unknown)} unknown)")
            for name, value in tensors.items():
                params[name].copy_(value)
            self.policy_version = version

    def logprobs_of(self, prompt_ids: list[int], response_ids: list[int]) -> list[float]:
        """Raw-model log-probability (natural log) of each response token after ``prompt_ids``,
        from one fresh forward pass over the unpadded sequence."""
        if not response_ids:
            return []
        ids = torch.tensor([prompt_ids + response_ids], device=self.device)
        with self._lock, torch.inference_mode():
            self._check_open()
            logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=len(response_ids) + 1).logits[
                0, :-1
            ]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logprobs.gather(-1, ids[0, -len(response_ids) :, None]).squeeze(-1).tolist()

    async def aclose(self) -> None:
        """Free the model (after the running batch, if any); the policy cannot generate
        afterwards."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._lock:
            self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _check_open(self) -> None:
        if self.model is None:
            raise RuntimeError("HFPolicy is closed")

    def _generate_batch(self, requests: list[GenerationRequest], cancel: threading.Event) -> list[Generation]:
        # Everything under the lock: the model, the tokenizer and the policy's generator.
        with self._lock, torch.inference_mode():
            self._check_open()
            prompts = [encode_chat(self.tokenizer, r.messages) for r in requests]
            budgets = [self._budget(r.sampling, len(p)) for r, p in zip(requests, prompts)]
            training = self.model.training
            self.model.eval()  # a learner's shared model may be in train mode (dropout)
            try:
                tokens, logprobs, lengths, stopped = self._decode(
                    prompts,
                    [r.sampling for r in requests],
                    budgets,
                    self._uniforms(requests, budgets),
                    cancel,
                )
            finally:
                self.model.train(training)
            return [
                Generation(
                    text=self._text(tokens[row][:n]),
                    prompt_ids=prompts[row],
                    response_ids=tokens[row][:n],
                    logprobs=logprobs[row][:n],
                    finish_reason="stop" if stopped[row] else "length",
                    policy_version=self.policy_version,
                )
                for row, n in enumerate(lengths)
            ]

    def _uniforms(self, requests: list[GenerationRequest], budgets: list[int]) -> torch.Tensor:
        """(rows, longest budget) fp64 draws in [0, 1): one per response token, from the
        request's own seed, or from the policy's generator for requests without one."""
        uniforms = torch.zeros(len(requests), max(budgets), dtype=torch.float64)
        for row, (request, budget) in enumerate(zip(requests, budgets)):
            generator = self._rng if request.seed is None else torch.Generator().manual_seed(request.seed)
            uniforms[row, :budget] = torch.rand(budget, generator=generator, dtype=torch.float64)
        return uniforms

    def _budget(self, sampling: SamplingParams, prompt_length: int) -> int:
        """Most response tokens for this request: ``max_tokens`` within the context."""
        if sampling.max_tokens < 1 or sampling.temperature < 0 or not 0 < sampling.top_p <= 1:
            raise ValueError(
                f"invalid sampling settings {sampling}: need max_tokens >= 1, "
                "temperature >= 0 and 0 < top_p <= 1"
            )
        if prompt_length >= self.context_length:
            raise ValueError(f"prompt of {prompt_length} tokens fills the context of {self.context_length}")
        return min(sampling.max_tokens, self.context_length - prompt_length)

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """Forward pass over the prompts, each distinct prompt once (a group's members often
        share theirs), and their common prefix once (the system prompt and demonstrations that
        every prompt of a run starts with): its KV cache is computed for one row and repeated,
        then the rest of each prompt runs left-padded after it (the padding sits between the
        prefix and the rest, masked out; positions count real tokens only).

        Returns, per row: the next-token logits (rows, vocab), the KV cache, the attention mask
        (rows, cached length) and the position of the next token (rows,).
        """
        distinct, index = _unique(prompts)
        logits, cache, mask, positions = prefill(
            self.model, distinct, self.tokenizer.pad_token_id, self.device
        )
        if len(distinct) < len(prompts):
            rows = torch.tensor(index, device=self.device)
            cache.batch_select_indices(rows)
            logits, mask, positions = logits[rows], mask[rows], positions[rows]
        return logits, cache, mask, positions[:, -1] + 1

    def _decode(
        self,
        prompts: list[list[int]],
        sampling: list[SamplingParams],
        budgets: list[int],
        uniforms: torch.Tensor,
        cancel: threading.Event,
    ) -> tuple[list[list[int]], list[list[float]], list[int], list[bool]]:
        """The decode loop over one batch.

        Returns, per row: response ids, their raw logprobs (both padded to the longest budget),
        the response length, and whether it stopped (EOS, or a stop string in the decoded
        response; otherwise it hit its budget).
        """
        device, rows = self.device, len(prompts)
        temperature = torch.tensor([s.temperature for s in sampling], device=device)
        top_p = torch.tensor([s.top_p for s in sampling], device=device)
        budget = torch.tensor(budgets, device=device)
        uniforms = uniforms.to(device)
        stops = [s.stop for s in sampling]

        tokens = torch.zeros(rows, max(budgets), dtype=torch.long, device=device)
        logprobs = torch.zeros(rows, max(budgets), device=device)
        lengths = torch.zeros(rows, dtype=torch.long, device=device)
        stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        live = torch.arange(rows, device=device)  # batch row -> request row

        logits, cache, mask, next_position = self._prefill(prompts)
        for step in range(max(budgets)):
            if cancel.is_set():
                raise asyncio.CancelledError()
            token, logprob = _sample(logits.float(), temperature[live], top_p[live], uniforms[live, step])
            tokens[live, step], logprobs[live, step], lengths[live] = token, logprob, step + 1
            ended = torch.isin(token, self.eos_ids)
            for i, row in enumerate(live.tolist() if any(stops) else ()):
                if stops[row] and not ended[i]:
                    ended[i] = _has_stop(self._text(tokens[row, : step + 1].tolist()), stops[row])
            stopped[live] = ended
            done = ended | (step + 1 >= budget[live])
            if bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                live, mask, next_position, token = (live[keep], mask[keep], next_position[keep], token[keep])
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
            logits = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
            next_position = next_position + 1
        return tokens.tolist(), logprobs.tolist(), lengths.tolist(), stopped.tolist()


def _unique(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(distinct prompts in first-seen order, index of each prompt among them)."""
    first: dict[tuple[int, ...], int] = {}
    index = [first.setdefault(tuple(p), len(first)) for p in prompts]
    return [list(p) for p in first], index


def _check_local_path(model: str) -> None:
    """Fail clearly on a local path that does not exist (transformers would take it for a bad
    hub id)."""
    path = Path(model).expanduser()
    if (path.is_absolute() or model.startswith((".", "~"))) and not path.is_dir():
        raise FileNotFoundError(f"no model folder at {model!r}")


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    """Token ids that end a response: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def _sample(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, uniform: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its raw-model logprob.

    ``logits`` (rows, vocab) fp32; ``temperature`` (0 = greedy), ``top_p`` and ``uniform`` (in
    [0, 1), the row's own random draw) have shape (rows,). A row's token depends only on its own
    logits and settings.
    """
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    token = logits.argmax(dim=-1)
    sampled = temperature > 0
    if bool(sampled.any()):
        scaled = logits / torch.where(sampled, temperature, 1.0)[:, None]
        probs = torch.softmax(scaled, dim=-1)
        truncated = top_p < 1
        if bool(truncated.any()):
            probs = torch.where(truncated[:, None], _top_p_filter(probs, top_p), probs)
        # Inverse CDF in vocabulary order; fp64 so that u * total stays below the last step.
        cdf = probs.double().cumsum(dim=-1)
        drawn = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True).squeeze(-1)
        token = torch.where(sampled, drawn.clamp(max=logits.shape[-1] - 1), token)
    return token, raw_logprobs.gather(-1, token[:, None]).squeeze(-1)


def _top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """``probs`` with zeros outside each row's nucleus: the most probable tokens whose mass
    reaches ``top_p`` (ties at the boundary kept). Not renormalized."""
    ordered = probs.sort(dim=-1, descending=True).values
    before = (ordered.cumsum(dim=-1) < top_p[:, None]).sum(dim=-1, keepdim=True)
    threshold = ordered.gather(-1, before.clamp(max=probs.shape[-1] - 1))
    return torch.where(probs >= threshold, probs, 0.0)


def _has_stop(text: str, stops: tuple[str, ...]) -> bool:
    return any(stop and stop in text for stop in stops)
