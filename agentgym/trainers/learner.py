"""The learner: a causal LM updated with the PPO-clip loss on turn-level advantages.

One :meth:`Learner.update` takes a batch of episodes and one advantage per turn (from
``trainers.credit``), builds one training row per turn (its exact prompt ids + response ids, loss
only on the response), and makes ``ppo_epochs`` passes of optimizer steps over ``mini_batches``
mini-batches. Each mini-batch is split into micro-batches by a token budget and gradients are
accumulated so that the loss equals the loss of the whole mini-batch at once.

With ``value_head=True`` a scalar head on the backbone's last hidden state is PPO's critic: the
value of a turn is read at its last prompt token, trained with the clipped value loss on the
rows' value targets (turn-level GAE, ``credit.gae``), sharing the backbone with the policy.

Fine-tuning is full or LoRA (peft). The KL reference is a frozen copy of the initial weights
(full fine-tune) or the base model with the adapter disabled (LoRA). Checkpoints hold the weights
(or adapter), optimizer, scheduler, every RNG state and the step, and resume exactly.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np
import torch

from agentgym.episode import Episode
from agentgym.files import atomic_path
from agentgym.policies.batching import left_pad
from agentgym.policies.models import resolve_model
from agentgym.trainers.losses import Aggregation, KLEstimator, policy_loss, value_loss

__all__ = ["Learner", "LearnerConfig", "TrainingRow", "rows_from_episodes"]


@dataclass
class LearnerConfig:
    """Learner settings (``learner.*`` of ``agentgym train``); defaults follow ALGORITHMS.md
    where it gives them. A structured config: no ``Literal`` or tuple fields (Hydra could not
    type-check or override them), the choices are checked here instead."""

    model: str = "smollm2-135m"
    """The model to train: an embedded name (smollm2-135m), a local folder or a hub id."""
    lora_rank: int = 0
    """0: full fine-tune; > 0: LoRA of this rank on ``lora_targets``."""
    lora_alpha: int = 16
    """LoRA's scaling numerator (the update is scaled by lora_alpha / lora_rank)."""
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """The modules that get LoRA adapters."""
    lr: float = 1e-6
    """Learning rate of the policy (the backbone)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear warm-up of the learning rate over this many optimizer steps, then constant."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    micro_batch_tokens: int = 4096
    """Token budget of one forward/backward: distinct prompts x their padded length + rows x
    the padded response length (a prompt shared by several rows is run once)."""
    mini_batches: int = 1
    """Optimizer steps per epoch over the batch."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    clip_low: float = 0.2
    """PPO clip range below 1 of the probability ratio."""
    clip_high: float = 0.2
    """PPO clip range above 1 of the probability ratio (clip-higher when above clip_low)."""
    dual_clip: float | None = 3.0
    """Dual-clip bound of the ratio for negative advantages; null: none."""
    aggregation: str = "token-mean"
    """How token losses add up to the loss: one of ``Aggregation`` (trainers.losses):
    token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the initial policy; 0: none (no reference model)."""
    kl_estimator: str = "low_var_kl"
    """The KL estimator: k1, k2, k3 or low_var_kl."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus."""
    old_logprobs: str = "recompute"
    """``"recompute"``: the behaviour log-probs are this model's before the update (verl's
    default); when the update is a single optimizer step (``ppo_epochs == mini_batches == 1``)
    they are the detached log-probs of that step's own forward pass, which are the same values,
    so no extra pass is run. ``"generator"``: those the generator returned are used."""
    value_head: bool = False
    """Add PPO's critic: a linear value head on the last hidden state (``estimator=ppo`` turns
    it on)."""
    vf_coef: float = 0.5
    """Weight of the value loss (mean over rows) beside the policy loss."""
    value_lr: float = 1e-5
    """Learning rate of the value head (verl's critic default); the shared backbone uses
    ``lr``."""
    value_clip: float | None = 0.2
    """Clip range of the value loss around the old values; ``None``: plain MSE."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when available), cpu, cuda, cuda:1, ..."""
    seed: int = 0
    """Seed of the initialization (value head, LoRA) and of every random number generator."""

    def __post_init__(self) -> None:
        self.lora_targets = list(self.lora_targets)
        for name, choices in (
            ("aggregation", get_args(Aggregation)),
            ("kl_estimator", get_args(KLEstimator)),
            ("old_logprobs", ("recompute", "generator")),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"learner.{name} must be one of {list(choices)}, got {getattr(self, name)!r}"
                )


@dataclass
class TrainingRow:
    """One turn as a training sequence. ``value_target``/``old_value`` are set (by the training
    loop, from :func:`~agentgym.trainers.credit.gae`) only when the learner has a value head."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    generator_logprobs: list[float]
    value_target: float | None = None
    old_value: float | None = None

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def rows_from_episodes(
    episodes: Sequence[Episode], advantages: np.ndarray, *, keep_empty: bool = False
) -> list[TrainingRow]:
    """One row per turn in TurnTable order; turns without response tokens are dropped (they
    carry no loss) unless ``keep_empty``. ``advantages`` has one value per turn."""
    turns = [t for ep in episodes for t in ep.turns]
    advantages = np.asarray(advantages, dtype=np.float64)
    if advantages.shape != (len(turns),):
        raise ValueError(f"expected one advantage per turn ({len(turns)}), got shape {advantages.shape}")
    if not np.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf; refusing to update")
    return [
        TrainingRow(t.prompt_ids, t.response_ids, float(a), t.response_logprobs)
        for t, a in zip(turns, advantages)
        if t.response_ids or keep_empty
    ]


def _micro_batches(rows: Sequence[TrainingRow], budget: int) -> list[list[int]]:
    """Row indices split so that each micro-batch's cost, distinct prompt prefixes x the longest
    prefix + rows x the longest suffix (see :meth:`Learner._forward`), is at most ``budget``
    tokens; a row over the budget goes alone. Rows that share a prompt are kept together, so
    that their prompt is run once; rows without a prefix (one-token prompts) go apart from
    rows with one."""
    if any(not r.prompt_ids for r in rows):
        raise ValueError(
            "a training row needs a prompt: its first response token is predicted "
            "from the prompt's last token"
        )
    order = sorted(range(len(rows)), key=lambda i: (-len(rows[i].prompt_ids), rows[i].prompt_ids))
    batches: list[list[int]] = []
    prefixes = longest_prefix = longest_suffix = 0
    for i in order:
        prefix, suffix = len(rows[i].prompt_ids) - 1, len(rows[i].response_ids) + 1
        if batches:
            last = rows[batches[-1][-1]].prompt_ids
            new_prefix = int(last[:-1] != rows[i].prompt_ids[:-1])
            cost = (prefixes + new_prefix) * longest_prefix + (len(batches[-1]) + 1) * max(
                longest_suffix, suffix
            )
            if cost <= budget and (prefix > 0) == (longest_prefix > 0):
                batches[-1].append(i)
                prefixes += new_prefix
                longest_suffix = max(longest_suffix, suffix)
                continue
        batches.append([i])
        prefixes, longest_prefix, longest_suffix = 1, prefix, suffix
    return batches


class Learner:
    """Holds the trainable model, its optimizer and reference, and updates them."""

    def __init__(self, config: LearnerConfig):
        from transformers import AutoModelForCausalLM

        self.config = config
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
        )
        _seed_everything(config.seed)
        # Any: with LoRA the model becomes a PEFT model (and transformers' ``.to`` is typed
        # through functools.wraps, which mypy does not bind as a method).
        model: Any = AutoModelForCausalLM.from_pretrained(resolve_model(config.model), dtype=torch.float32)
        model = model.to(self.device)
        self.reference = None
        if config.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(
                model,
                LoraConfig(
                    r=config.lora_rank,
                    lora_alpha=config.lora_alpha,
                    lora_dropout=0.0,
                    target_modules=list(config.lora_targets),
                ),
            )
        elif config.kl_coef:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.model = model
        self.model.train()
        self.value_head: torch.nn.Linear | None = None
        if config.value_head:
            self.value_head = torch.nn.Linear(model.config.hidden_size, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)  # V = 0 until trained
            torch.nn.init.zeros_(self.value_head.bias)
        self.autocast = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        groups: list[dict[str, Any]] = [{"params": [p for p in self.model.parameters() if p.requires_grad]}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": config.value_lr})
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
        warmup = max(config.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.step = 0
        """Optimizer steps taken."""

    # --- forward passes -----------------------------------------------------------------------

    def _modules(self) -> list[torch.nn.Module]:
        return [self.model] + ([self.value_head] if self.value_head is not None else [])

    def _forward(
        self,
        rows: list[TrainingRow],
        model: Any | None = None,
        *,
        entropy: bool = False,
        values: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(response logprobs, mask, entropy, values): [rows, longest response] tensors and,
        with ``values``, the value head's [rows] output at each row's last prompt token.

        Rows that share a prompt share its forward pass: each distinct prefix (the prompt less
        its last token) runs once, its keys and values are copied to every row that has it, and
        the suffixes (last prompt token + response) run on top. A group of GRPO members has one
        first prompt, so this runs it once instead of ``group_size`` times; the gradient flows
        through the shared keys and values, so the result is that of whole sequences.

        Suffixes are left-padded, so every response ends at the last position and the LM head
        runs only on the last ``longest + 1`` positions. Outputs are right-aligned: row i's
        response occupies the last ``len(response_i)`` columns.
        """
        model = model or self.model
        lengths = torch.tensor([len(r.response_ids) for r in rows], device=self.device)
        longest = int(lengths.max())
        suffix_ids, suffix_mask, _ = left_pad(
            [r.prompt_ids[-1:] + r.response_ids for r in rows], 0, self.device
        )
        distinct: dict[tuple[int, ...], int] = {}
        which = torch.tensor(
            [distinct.setdefault(tuple(r.prompt_ids[:-1]), len(distinct)) for r in rows], device=self.device
        )
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            cache, attention = None, suffix_mask
            if any(distinct):  # _micro_batches never mixes empty and non-empty prefixes
                prefix_ids, prefix_mask, prefix_positions = left_pad(list(distinct), 0, self.device)
                cache = model(
                    input_ids=prefix_ids,
                    attention_mask=prefix_mask,
                    position_ids=prefix_positions,
                    use_cache=True,
                    logits_to_keep=1,
                ).past_key_values
                for layer in cache.layers:
                    layer.keys = layer.keys.index_select(0, which)
                    layer.values = layer.values.index_select(0, which)
                attention = torch.cat([prefix_mask.index_select(0, which), suffix_mask], dim=1)
            positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, -suffix_ids.shape[1] :]
            out = model(
                input_ids=suffix_ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=False,
                logits_to_keep=longest + 1,
                output_hidden_states=values,
            )
            value = None
            if values:
                last_prompt = suffix_ids.shape[1] - 1 - lengths
                hidden = out.hidden_states[-1][torch.arange(len(rows)), last_prompt]
                assert self.value_head is not None, "values=True needs the value head"
                value = self.value_head(hidden).squeeze(-1).float()
        logits = out.logits
        # logits[:, t] predicts token t + 1: the last `longest` targets are predicted by [:-1].
        logprobs_all = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        logprobs = logprobs_all.gather(-1, suffix_ids[:, -longest:, None]).squeeze(-1)
        mask = torch.arange(longest, device=self.device)[None, :] >= (longest - lengths)[:, None]
        ent = -(logprobs_all.exp() * logprobs_all).sum(-1) if entropy else None
        return logprobs * mask, mask, ent, value

    @torch.no_grad()
    def logprobs(self, rows: list[TrainingRow]) -> list[list[float]]:
        """Current-model log-probabilities of each row's response tokens (no gradient)."""
        out: list[list[float]] = [[] for _ in rows]
        for indices in _micro_batches(rows, self.config.micro_batch_tokens):
            lp = self._forward([rows[i] for i in indices])[0]
            for j, i in enumerate(indices):
                out[i] = lp[j, lp.shape[1] - len(rows[i].response_ids) :].tolist()
        return out

    @torch.no_grad()
    def values(self, rows: list[TrainingRow]) -> np.ndarray:
        """The critic's V of each row (at its last prompt token); needs ``value_head``."""
        if self.value_head is None:
            raise ValueError("this learner has no value head (LearnerConfig.value_head=False)")
        out = np.zeros(len(rows), dtype=np.float64)
        for indices in _micro_batches(rows, self.config.micro_batch_tokens):
            value = self._forward([rows[i] for i in indices], values=True)[3]
            assert value is not None  # values=True returns them
            out[indices] = value.cpu().numpy()
        return out

    @torch.no_grad()
    def _reference_logprobs(self, batch: list[TrainingRow]) -> torch.Tensor:
        if self.reference is not None:
            return self._forward(batch, self.reference)[0]
        with self.model.disable_adapter():
            return self._forward(batch)[0]

    # --- the update ---------------------------------------------------------------------------

    def update(self, rows: list[TrainingRow]) -> dict[str, float]:
        """PPO epochs over ``rows``; returns metrics averaged over optimizer steps."""
        cfg = self.config
        if not rows:
            return {"skipped_empty_batch": 1.0}
        if self.value_head is not None and any(r.value_target is None or r.old_value is None for r in rows):
            raise ValueError(
                "a learner with a value head needs value_target and old_value on every row (from credit.gae)"
            )
        single_step = cfg.ppo_epochs == 1 and cfg.mini_batches == 1
        old: Sequence[list[float] | None]
        if cfg.old_logprobs == "generator":
            generated = [r.generator_logprobs for r in rows]
            if any(len(lp) != len(r.response_ids) for r, lp in zip(rows, generated)):
                raise ValueError("a row's generator logprobs do not match its response length")
            old = generated
        else:
            old = [None] * len(rows) if single_step else self.logprobs(rows)
        use_kl = cfg.kl_coef > 0
        history: list[dict[str, float]] = []
        rng = random.Random(cfg.seed + self.step)
        for _ in range(cfg.ppo_epochs):
            order = list(range(len(rows)))
            rng.shuffle(order)
            size = math.ceil(len(order) / cfg.mini_batches)
            for start in range(0, len(order), size):
                chosen = order[start : start + size]
                history.append(
                    self._optimizer_step([rows[i] for i in chosen], [old[i] for i in chosen], use_kl)
                )
        return {k: float(np.mean([h[k] for h in history])) for k in history[0]}

    def _optimizer_step(
        self, rows: list[TrainingRow], old_logprobs: list[list[float] | None], use_kl: bool
    ) -> dict[str, float]:
        """One optimizer step on ``rows``; an old log-prob entry of ``None`` means "this model's
        current values" (taken detached from the step's own forward pass)."""
        cfg = self.config
        # Checked against their Literal types in LearnerConfig.__post_init__.
        aggregation = cast(Aggregation, cfg.aggregation)
        kl_estimator = cast(KLEstimator, cfg.kl_estimator)
        total_tokens = sum(len(r.response_ids) for r in rows)
        sums: dict[str, float] = {
            "loss": 0.0,
            "pg_loss": 0.0,
            "pg_clipfrac": 0.0,
            "approx_kl": 0.0,
            "entropy": 0.0,
            "kl": 0.0,
        }
        if self.value_head is not None:
            sums["vf_loss"] = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        for indices in _micro_batches(rows, cfg.micro_batch_tokens):
            batch = [rows[i] for i in indices]
            logp, mask, entropy, value = self._forward(
                batch, entropy=True, values=self.value_head is not None
            )
            old = logp.detach().clone()
            for j, i in enumerate(indices):
                if old_logprobs[i] is not None:
                    old[j, old.shape[1] - len(rows[i].response_ids) :] = torch.tensor(old_logprobs[i])
            adv = torch.tensor([r.advantage for r in batch], device=self.device)
            ref = self._reference_logprobs(batch) if use_kl else None
            out = policy_loss(
                logp,
                old,
                adv,
                mask,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                dual_clip=cfg.dual_clip,
                aggregation=aggregation,
                ref_logp=ref,
                kl_coef=cfg.kl_coef,
                kl_estimator=kl_estimator,
                entropy=entropy,
                entropy_coeff=cfg.entropy_coeff,
            )
            # Weight each micro-batch by its share, so accumulation equals the whole mini-batch.
            share = (
                int(mask.sum()) / total_tokens if cfg.aggregation == "token-mean" else len(batch) / len(rows)
            )
            loss = out.loss * share
            if value is not None:
                targets = torch.tensor([[r.value_target] for r in batch], device=self.device)
                old_v = torch.tensor([[r.old_value] for r in batch], device=self.device)
                vf = value_loss(
                    value[:, None],
                    old_v,
                    targets,
                    torch.ones_like(old_v, dtype=torch.bool),
                    clip=cfg.value_clip,
                )
                rows_share = len(batch) / len(rows)  # the value loss is a mean over rows
                loss = loss + cfg.vf_coef * vf * rows_share
                sums["vf_loss"] += rows_share * vf.item()
            loss.backward()
            sums["loss"] += share * out.loss.item()
            sums["pg_loss"] += share * out.pg_loss.item()
            sums["pg_clipfrac"] += share * out.pg_clipfrac.item()
            sums["approx_kl"] += share * out.approx_kl.item()
            sums["entropy"] += share * (out.entropy.item() if out.entropy is not None else 0.0)
            sums["kl"] += share * (out.kl.item() if out.kl is not None else 0.0)
        params = [p for m in self._modules() for p in m.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"non-finite gradient norm ({grad_norm}); update skipped")
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return {
            **sums,
            "grad_norm": float(grad_norm),
            "lr": float(self.scheduler.get_last_lr()[0]),
            "tokens": float(total_tokens),
        }

    # --- checkpoints --------------------------------------------------------------------------

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The weights that training changes: the adapter's under LoRA, else all of them."""
        if self.config.lora_rank > 0:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(self.model)
        else:
            state = self.model.state_dict()
        if self.value_head is not None:
            state = {**state, **{f"value_head.{k}": v for k, v in self.value_head.state_dict().items()}}
        return state

    def save_checkpoint(self, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write everything needed to resume exactly to ``path/learner.pt`` (atomically)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {
            "config": asdict(self.config),
            "weights": self.trainable_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "rng": _rng_state(),
            "extra": extra or {},
        }
        with atomic_path(path / "learner.pt") as tmp:
            torch.save(state, tmp)
        return path / "learner.pt"

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Restore a checkpoint written by :meth:`save_checkpoint`; returns its ``extra``."""
        state = torch.load(Path(path) / "learner.pt", map_location=self.device, weights_only=False)
        weights = dict(state["weights"])
        if self.value_head is not None:
            self.value_head.load_state_dict(
                {
                    k[len("value_head.") :]: weights.pop(k)
                    for k in list(weights)
                    if k.startswith("value_head.")
                }
            )
        if self.config.lora_rank > 0:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, weights)
        else:
            self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        _set_rng_state(state["rng"])
        return state["extra"]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
