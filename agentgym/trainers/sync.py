"""Weight pushes: make a policy generate with the learner's current weights.

* An :class:`~agentgym.policies.hf.HFPolicy` built on the learner's own model (``module=``)
  already sees every update: only the version moves.
* An :class:`~agentgym.policies.hf.HFPolicy` on a copy of the learner's model (asynchronous
  training: it generates while the learner updates) gets the trainable parameters copied in
  between two of its batches (:meth:`~agentgym.policies.hf.HFPolicy.load_weights`).
* A vLLM-served policy gets a LoRA learner's adapter by hot-load under a new name per version
  (``/v1/load_lora_adapter``, about 0.1 s; requests already running finish on the adapter they
  named), or a full fine-tune's weights by an in-place reload once the running requests are done
  (``/collective_rpc reload_weights``, a few seconds on CPU), from a fresh folder under
  ``directory`` per push (the server's prefix cache is keyed by path).

The version of a push is the learner's ``step`` (optimizer steps taken), and every generation
carries the version of the weights that produced it (``Generation.policy_version``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agentgym.trainers.learner import Learner

__all__ = ["ADAPTER_NAME", "push_weights"]

#: Name of the learner's adapter on a vLLM server; push k loads it as ``f"{ADAPTER_NAME}-{k}"``.
ADAPTER_NAME = "agentgym-policy"


async def push_weights(learner: Learner, policy: Any, directory: str | Path, keep: int = 2) -> None:
    """Push ``learner``'s weights to ``policy`` and set its version to the learner's step.

    A policy whose version is already the learner's step has those weights and gets nothing
    (policies start at version 0 with the weights a fresh learner has). Folders of older pushes
    beyond the newest ``keep`` are deleted: keep as many as there may be versions that
    requests still running were sent to.
    """
    if getattr(policy, "model", None) is learner.model:
        policy.policy_version = learner.step
        return
    if getattr(policy, "policy_version", None) == learner.step:
        return
    if hasattr(policy, "load_weights"):
        params = {n: p.detach() for n, p in learner.model.named_parameters() if p.requires_grad}
        await policy.load_weights(params, learner.step)
        return
    if not hasattr(policy, "swap_lora"):
        raise TypeError(
            f"cannot push weights to {type(policy).__name__}: it neither shares the "
            "learner's model, nor takes weights in-process, nor serves through vLLM"
        )
    directory = Path(directory)
    lora = learner.config.lora_rank > 0
    kind = "adapter" if lora else "weights"
    path = directory / f"{kind}-{learner.step:06d}"
    learner.save_pretrained(path)
    if lora:
        await policy.swap_lora(f"{ADAPTER_NAME}-{learner.step}", path, learner.step)
    else:
        await policy.reload_weights(path, learner.step)
    for old in sorted(directory.glob(f"{kind}-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
