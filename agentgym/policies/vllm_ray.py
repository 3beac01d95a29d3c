"""vLLM servers as Ray actors: replicas of one model across a Ray cluster, one policy over them.

:func:`launch_replicas` starts ``replicas`` actors, each running a :class:`VLLMServer` on its
node (one GPU each where the node has GPUs, else ``cpus_per_replica`` CPUs and vLLM's CPU build),
spread over the nodes (Ray's ``SPREAD``), and returns a :class:`VLLMPolicy` over their URLs: the
least-loaded replica takes each request, one episode's turns stay on one replica, and a replica
that fails is taken out of rotation (:class:`~agentgym.policies.router.Router`)::

    policy = launch_replicas("Qwen/Qwen2.5-1.5B-Instruct", 4, "auto")   # on `ray start` nodes
    ...
    await policy.aclose()                                              # stops every replica

From the command line: ``agentgym eval policy=vllm policy.replicas=4 policy.cluster=auto ...``.

Each server listens on its node's IP (``127.0.0.1`` with ``cluster="local"``) and requires a
bearer token made here for these replicas alone (passed as ``$VLLM_API_KEY``, never on a
command line); vLLM checks it on its ``/v1`` routes, so ``/health`` and ``/tokenize`` stay open.
The driver must reach the nodes on the servers' ports (free ports of each node). The replicas
serve the base model: weight pushes (``generator=vllm`` training) need a server of their own.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import SchedulingStrategyT

from agentgym.hosting.ray import ray_connection
from agentgym.policies.vllm import VLLMPolicy, VLLMServer

__all__ = ["VLLMReplica", "VLLMReplicas", "launch_replicas"]

_SPREAD: SchedulingStrategyT = "SPREAD"


class VLLMReplica:
    """One :class:`VLLMServer` in a Ray actor's process, on the actor's node (started by the
    constructor, blocking until it serves)."""

    def __init__(self, model: str, api_key: str, local: bool, server: Mapping[str, Any]):
        env = {**dict(server.get("env") or {}), "VLLM_API_KEY": api_key}
        host = "127.0.0.1" if local else ray.util.get_node_ip_address()
        self.server = VLLMServer(model, **{**server, "env": env, "host": host}).start()

    def url(self) -> str:
        """Where the server serves (``http://HOST:PORT``)."""
        return self.server.base_url

    def stop(self) -> None:
        """Stop the server (its whole process group)."""
        self.server.stop()


class VLLMReplicas:
    """``replicas`` :class:`VLLMReplica` actors on the Ray cluster ``cluster`` (see the module
    documentation): :attr:`urls` once they all serve; :meth:`stop` (idempotent) stops them and
    leaves Ray as :class:`~agentgym.hosting.ray.RayEnvServerPool` does.

    Raises ``ValueError`` for ``replicas < 1``, and what a replica raised (a server that would
    not start, with its log tail) after stopping the others.
    """

    def __init__(
        self,
        model: str,
        replicas: int,
        cluster: str,
        *,
        gpus_per_replica: float | None = None,
        cpus_per_replica: float = 1.0,
        server: Mapping[str, Any] | None = None,
    ):
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.api_key = secrets.token_urlsafe(32)
        ray_connection.acquire(cluster)
        self._stopped = False
        gpus = gpus_per_replica
        if gpus is None:  # one GPU per replica where the cluster has GPUs
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0.0) >= 1 else 0.0
        actor: Any = ray.remote(VLLMReplica)  # (Ray's types do not follow the actor's methods)
        placed = actor.options(
            num_cpus=cpus_per_replica, num_gpus=gpus, scheduling_strategy=_SPREAD, max_restarts=0
        )
        arguments = (model, self.api_key, ray_connection.local, dict(server or {}))
        self.actors: list[Any] = [placed.remote(*arguments) for _ in range(replicas)]
        try:
            self.urls: list[str] = ray.get([a.url.remote() for a in self.actors])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            ray.wait([a.stop.remote() for a in self.actors], num_returns=len(self.actors), timeout=60)
            for a in self.actors:
                ray.kill(a)
        finally:
            ray_connection.release()


def launch_replicas(
    model: str, replicas: int, cluster: str, *, server: Mapping[str, Any] | None = None, **options: Any
) -> VLLMPolicy:
    """A :class:`VLLMPolicy` over ``replicas`` new :class:`VLLMReplicas` of ``model`` on the Ray
    cluster ``cluster``; its ``aclose`` stops them. ``server``: their :class:`VLLMServer`
    keyword arguments; ``options``: ``gpus_per_replica`` and ``cpus_per_replica`` (see
    :class:`VLLMReplicas`), the rest the policy's."""
    placement = {k: options.pop(k) for k in ("gpus_per_replica", "cpus_per_replica") if k in options}
    launched = VLLMReplicas(model, replicas, cluster, server=server, **placement)
    try:
        policy = VLLMPolicy(launched.urls, model, served_model=model, api_key=launched.api_key, **options)
    except BaseException:
        launched.stop()
        raise
    policy.server = launched
    return policy
