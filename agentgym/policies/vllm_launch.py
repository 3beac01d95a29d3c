"""The Hydra entry point of ``policy=vllm``: a :class:`~agentgym.policies.vllm.VLLMPolicy` on
servers given by URL, on a server launched here, or on replicas launched as Ray actors
(:mod:`agentgym.policies.vllm_ray`, which is imported, with Ray, only then)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentgym.policies.vllm import VLLMPolicy

__all__ = ["vllm_policy"]


def vllm_policy(
    base_url: str | Sequence[str] | None = None,
    model: str = "smollm2-135m",
    *,
    server: Mapping[str, Any] | None = None,
    replicas: int = 1,
    cluster: str | None = None,
    **policy_kwargs: Any,
) -> VLLMPolicy:
    """Hydra entry point: a :class:`VLLMPolicy` on ``base_url`` (one URL or a list), or, when it
    is None, on a local server launched with the
    :class:`~agentgym.policies.vllm.VLLMServer` keyword arguments ``server`` (stopped by
    ``aclose``); with ``cluster`` (a Ray cluster, see :mod:`agentgym.policies.vllm_ray`), on
    ``replicas`` servers launched as Ray actors."""
    if base_url is not None:
        return VLLMPolicy(base_url, model, **policy_kwargs)
    if cluster is not None:
        from agentgym.policies.vllm_ray import launch_replicas  # Ray loads only when used

        return launch_replicas(model, replicas, cluster, server=server, **policy_kwargs)
    if replicas != 1:
        raise ValueError(f"replicas={replicas} launches servers as Ray actors: give cluster= too")
    return VLLMPolicy.launch(model, **policy_kwargs, **dict(server or {}))
