"""Weight pushes: make a policy generate with the learner's current weights.

* An :class:`~agentgym.policies.hf.HFPolicy` built on the learner's own model (``module=``)
  already sees every update: only the version moves.
* A vLLM-served policy gets a LoRA learner's adapter by hot-load (``/v1/load_lora_adapter``,
  about 0.1 s), or a full fine-tune's weights by an in-place reload (``/collective_rpc
  reload_weights``, a few seconds on CPU), from a fresh folder under ``directory`` per push
  (the server's prefix cache is keyed by path).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agentgym.trainers.learner import Learner

__all__ = ["ADAPTER_NAME", "push_weights"]

#: Name of the learner's adapter on a vLLM server.
ADAPTER_NAME = "agentgym-policy"


async def push_weights(learner: Learner, policy: Any, directory: str | Path, keep: int = 2) -> None:
    """Push ``learner``'s weights to ``policy`` and set its version to the learner's step.

    Folders of older pushes beyond the newest ``keep`` are deleted.
    """
    if getattr(policy, "model", None) is learner.model:
        policy.policy_version = learner.step
        return
    if not hasattr(policy, "load_lora"):
        raise TypeError(
            f"cannot push weights to {type(policy).__name__}: it neither shares the "
            "learner's model nor serves through vLLM"
        )
    directory = Path(directory)
    lora = learner.config.lora_rank > 0
    kind = "adapter" if lora else "weights"
    path = directory / f"{kind}-{learner.step:06d}"
    learner.model.save_pretrained(path)
    if lora:
        await policy.load_lora(ADAPTER_NAME, path)
    else:
        await policy.reload_weights(path)
    policy.policy_version = learner.step
    for old in sorted(directory.glob(f"{kind}-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
