"""Env servers as Ray actors (:mod:`agentgym.hosting.ray`), on a Ray cluster of two simulated nodes
(``ray.cluster_utils.Cluster``: a head with 2 CPUs and ``{"docker": 4}``, a node with 1 CPU and
``{"desktop": 1}``),
one for the whole module since a Ray start takes seconds.

Rollouts through the actors give the in-process episodes; an env that needs ``desktop`` lands
on the node that offers it, one that needs what no node offers is a clear error; a node removed
mid-run costs retries, never episodes (the run store holds each unit once); nothing outlives a
test (no actor process, every resource free again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import pytest

import agentgym
from agentgym import registry
from agentgym.episode import load_episodes
from agentgym.harness.eval import compose_eval_config, run_eval
from agentgym.harness.store import RunStore, read_episodes, unit_key
from agentgym.hosting import EnvServerPool
from agentgym.policies.scripted import RandomPolicy, ScriptedPolicy
from agentgym.rollout import collect, default_tasks
from agentgym.sandbox.spec import Backend
from agentgym.server import InvalidRemoteKwargs
from agentgym.server.jsonsafe import to_jsonable
from agentgym.trainers.loop import TrainConfig, train

from support import TESTS, run_python
from support.episodes import comparable, varied_action
from support.sandboxes import eventually
from support.servers import KillingPolicy, record_made

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'agentgym[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from agentgym.hosting.ray import Placement, PlacementError, RayEnvServerPool  # noqa: E402

SOKOBAN, GUESS = "agentgym/Sokoban-v0", "agentgym/GuessNumber-v0"
PROBE = "fixtures.probe_env:ProbeEnv"
#: How the servers' processes import the fixture envs (``fixtures.probe_env``).
FIXTURES_ON_PATH = {"env_vars": {"PYTHONPATH": str(TESTS)}}
#: Actor processes are titled ``ray::<class>`` by Ray.
ACTOR_TITLE = b"ray::EnvServerActor"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The module's cluster, this process connected to it."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"docker": 4}})
    cluster.add_node(num_cpus=1, resources={"desktop": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def actor_processes() -> list[int]:
    """The pids of the env server actors' processes on this machine."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(ACTOR_TITLE):
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids


def resources_free() -> bool:
    """Whether no actor holds a CPU, memory or a custom resource of the cluster."""
    total, free = ray.cluster_resources(), ray.available_resources()
    return all(free.get(k, 0.0) == v for k, v in total.items() if not k.startswith(("node:", "object_store")))


@pytest.fixture
def pools(cluster: Cluster) -> Iterator[Callable[..., RayEnvServerPool]]:
    """Make pools on the module's cluster; each is closed afterwards, and nothing is left."""
    made: list[RayEnvServerPool] = []

    def make(**options: Any) -> RayEnvServerPool:
        made.append(RayEnvServerPool(cluster.address, **{"cpus_per_server": 0.5, **options}))
        return made[-1]

    yield make
    for pool in made:
        pool.close()
    eventually(lambda: not actor_processes(), timeout_s=30)
    eventually(resources_free, timeout_s=30)
    assert ray.is_initialized()  # the pools attached: they leave the connection as they found it


@pytest.fixture
def registered() -> Iterator[Callable[..., str]]:
    """Register fixture envs (the probe env) for one test; the registry is left as it was."""
    ids: list[str] = []
    manifests = dict(registry._manifests)

    def register(env_id: str, **manifest: Any) -> str:
        agentgym.register(env_id, PROBE, manifest=agentgym.EnvManifest(**manifest))
        ids.append(env_id)
        return env_id

    yield register
    for env_id in ids:
        del gym.registry[env_id]
    registry._manifests = manifests


# --- the same episodes -------------------------------------------------------------------------


def test_collect_through_ray_gives_the_local_episodes(pools: Callable[..., RayEnvServerPool]) -> None:
    options: dict[str, Any] = {"group_size": 2, "max_turns": 6, "concurrency": 8, "progress": False}
    tasks = default_tasks(4)
    servers = pools(sessions_per_server=2, cpus_per_server=0.25)
    for env_id in (SOKOBAN, GUESS):
        expected = collect(env_id, ScriptedPolicy(varied_action), tasks, **options)
        got = collect(env_id, ScriptedPolicy(varied_action), tasks, sandbox=servers, **options)
        assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    placed = servers.servers()
    assert len(placed) == 8  # 8 sessions at once, 2 a server, for each env
    assert len({s.node_id for s in placed}) == 2  # spread over both nodes
    assert all(s.url.startswith(f"http://{ray.util.get_node_ip_address()}:") for s in placed)


def test_eval_and_collect_on_the_cluster_give_the_local_results(cluster: Cluster, tmp_path: Path) -> None:
    """``agentgym eval cluster=<address>`` and ``collect(cluster=...)``: the in-process results,
    the pool each made stopped at its end."""
    run = ["env=agentgym/Sokoban-v0", "policy=random", "tasks=4", "group_size=2", "max_turns=6"]
    runs = {}
    for name, extra in (("local", []), ("ray", [f"cluster={cluster.address}", "sandbox_sessions=4"])):
        quiet = [f"out_dir={tmp_path / name}", "progress=false", "report=false"]
        cfg = compose_eval_config([*run, *extra, *quiet])
        out, summary = asyncio.run(run_eval(cfg))
        assert summary["errors"] == 0
        runs[name] = sorted((comparable(e) for e in load_episodes(out / "episodes.jsonl")), key=repr)
    assert runs["ray"] == runs["local"] and len(runs["ray"]) == 8
    options: dict[str, Any] = {"group_size": 2, "max_turns": 6, "progress": False}
    expected = collect(GUESS, ScriptedPolicy(varied_action), default_tasks(3), **options)
    got = collect(GUESS, ScriptedPolicy(varied_action), default_tasks(3), cluster=cluster.address, **options)
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    eventually(lambda: not actor_processes(), timeout_s=30)
    eventually(resources_free, timeout_s=30)
    with EnvServerPool("local") as pool, pytest.raises(ValueError, match="sandbox= is a backend name"):
        collect(GUESS, ScriptedPolicy(varied_action), default_tasks(1), sandbox=pool, cluster="auto")


def test_sessions_share_a_server_that_needs_its_token(pools: Callable[..., RayEnvServerPool]) -> None:
    servers = pools(sessions_per_server=2)
    a, b, c = (servers.make(SOKOBAN) for _ in range(3))
    assert servers.server_of(a) == servers.server_of(b) != servers.server_of(c)
    assert to_jsonable(a.reset(seed=0)) == to_jsonable(agentgym.make(SOKOBAN).reset(seed=0))
    refused = httpx.get(f"{servers.server_of(a).url}/health", trust_env=False)
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    with pytest.raises(InvalidRemoteKwargs, match=r"unknown argument\(s\) \['size'\]"):
        servers.make(SOKOBAN, {"size": 3})
    for env in (a, b, c):
        env.close()
    assert len(servers.servers()) == 2  # kept up for the next sessions, until close


# --- placement -----------------------------------------------------------------------------------


def test_env_that_needs_a_desktop_lands_on_the_desktop_node(
    cluster: Cluster, pools: Callable[..., RayEnvServerPool], registered: Callable[..., str]
) -> None:
    desktop_env = registered("test/RayDesktopProbe-v0", system_packages=("xvfb", "openbox"))
    assert Placement.for_env(desktop_env) == Placement(1.0, 512, (("desktop", 1.0),))
    desktop_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "desktop" in n["Resources"])
    servers = pools(sessions_per_server=1, max_servers=1, runtime_env=FIXTURES_ON_PATH)
    envs = [servers.make(desktop_env) for _ in range(3)]
    # one server, on the node that offers the desktop; past max_servers it takes every session
    assert {servers.server_of(env).node_id for env in envs} == {desktop_node}
    assert len(servers.servers()) == 1
    obs, _ = envs[0].reset(seed=3)
    assert envs[0].step("hello")[0] == "echo hello" and obs.startswith("start ")
    # without max_servers, a second server waits for a desktop that never frees up
    waiting = pools(sessions_per_server=1, startup_timeout_s=2, runtime_env=FIXTURES_ON_PATH)
    with pytest.raises(
        TimeoutError, match=r"no node had room for one more \(CPU 0.5, memory 512 MiB, desktop 1"
    ):
        waiting.make(desktop_env)
    assert waiting.servers() == []
    for env in envs:
        env.close()


def test_env_that_needs_what_no_node_offers_is_a_clear_error(
    pools: Callable[..., RayEnvServerPool], registered: Callable[..., str]
) -> None:
    browser_env = registered("test/RayBrowserProbe-v0", system_packages=("chromium",))
    servers = pools()
    with pytest.raises(
        PlacementError, match=r"""chromium 1\); add one with .*--resources='\{"chromium": 1\}'"""
    ):
        servers.make(browser_env)
    assert servers.servers() == []


def test_bad_arguments_are_clear_errors(cluster: Cluster, pools: Callable[..., RayEnvServerPool]) -> None:
    with pytest.raises(ValueError, match="cluster must be 'local', 'auto' or a Ray address"):
        RayEnvServerPool("")
    with pytest.raises(ValueError, match="sessions_per_server must be >= 1, got 0"):
        RayEnvServerPool(cluster.address, sessions_per_server=0)
    with pytest.raises(ValueError, match="max_servers must be >= 1, got 0"):
        RayEnvServerPool(cluster.address, max_servers=0)
    with pytest.raises(ValueError, match="cpus_per_server must be > 0, got 0"):
        RayEnvServerPool(cluster.address, cpus_per_server=0)
    with pytest.raises(
        ValueError, match=f"connected to the Ray cluster at {cluster.address}, not at '10.9.9.9:1'"
    ):
        RayEnvServerPool("10.9.9.9:1")
    with pytest.raises(ValueError, match="unknown sandbox backend 'podman'; choose 'local', 'docker'"):
        RayEnvServerPool(cluster.address, sandbox="podman")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sandbox=auto chooses a backend per node of a cluster"):
        collect(SOKOBAN, RandomPolicy(), default_tasks(1), sandbox="auto")
    servers = pools()
    with pytest.raises(agentgym.UnknownEnvError, match="Did you mean 'agentgym/Sokoban-v0'"):
        servers.make("agentgym/Sokobn-v0")
    servers.close()
    with pytest.raises(RuntimeError, match="the Ray env server pool is closed"):
        servers.make(SOKOBAN)


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_removed_node_costs_retries_not_episodes(
    cluster: Cluster, pools: Callable[..., RayEnvServerPool], tmp_path: Path
) -> None:
    spare = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    options: dict[str, Any] = {"max_turns": 8, "concurrency": 8, "progress": False}
    tasks = default_tasks(24)
    expected = collect(SOKOBAN, RandomPolicy(), tasks, **options)
    servers = pools(sessions_per_server=2)
    made = record_made(servers)
    lost: list[str] = []

    def remove_spare() -> bool:
        """Remove the spare node once it serves an episode under way (a made env's)."""
        hosts = {servers.server_of(env) for env in made if not env.session.closed}
        lost.extend(s.url for s in hosts if s.node_id == spare.node_id)
        if lost:
            cluster.remove_node(spare)
        return bool(lost)

    store = RunStore.open(tmp_path / "run", {"env": SOKOBAN})
    got = collect(
        SOKOBAN,
        KillingPolicy(at=6, kill=remove_spare),
        tasks,
        sandbox=servers,
        retries=3,
        on_episode=lambda episode: store.append([episode]),
        **options,
    )
    assert lost and all(s.url not in lost for s in servers.servers())  # replaced
    retried = [e for e in got if e.failed_attempts]
    assert retried, "the node's removal failed no episode"
    attempts = [a for e in retried for a in e.failed_attempts]
    for attempt in attempts:
        assert "EnvServerUnavailable" in attempt and "the env server actor " in attempt, attempt
    assert any("The actor died because its node has died" in a for a in attempts), attempts
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    stored, torn = read_episodes(store.episodes_path)
    keys = [unit_key(episode) for _, episode in stored]
    assert torn == 0 and len(keys) == len(set(keys)) == len(tasks)  # none lost, none twice
    resumed = RunStore.open(tmp_path / "run", {"env": SOKOBAN}).resumed
    assert resumed is not None and (resumed.kept, resumed.retried) == (len(tasks), 0)


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_servers_in_sandboxes_on_their_nodes_give_the_local_episodes(
    cluster: Cluster, backend: Backend, request: pytest.FixtureRequest
) -> None:
    """``collect(cluster=..., sandbox=...)``: each server runs in a sandbox on its node, which
    the actor relays to; the in-process episodes; nothing left (sandboxes closed with the pool)."""
    request.getfixturevalue("no_leftovers")
    request.getfixturevalue("bwrap" if backend == "local" else "current_textgames_image")
    options: dict[str, Any] = {"group_size": 2, "max_turns": 6, "progress": False}
    expected = collect(SOKOBAN, ScriptedPolicy(varied_action), default_tasks(2), **options)
    with RayEnvServerPool(cluster.address, sandbox=backend, cpus_per_server=0.5) as servers:
        env = servers.make(SOKOBAN)
        refused = httpx.get(f"{servers.server_of(env).url}/health", trust_env=False)
        assert refused.status_code == 401  # the sandboxed server checks the pool's token itself
        assert Placement.for_env(SOKOBAN, sandbox="docker").custom == (("docker", 1.0),)
        sandboxed = [p for p in Path("/proc").glob("[0-9]*/cmdline") if _serves_in_a_sandbox(p)]
        assert sandboxed, "no env server runs in a sandbox"
        env.close()
        got = collect(SOKOBAN, ScriptedPolicy(varied_action), default_tasks(2), sandbox=servers, **options)
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    eventually(lambda: not actor_processes(), timeout_s=30)


@pytest.mark.docker
def test_auto_sandbox_takes_each_nodes_backend(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    """``sandbox="auto"``: a server on the head, which offers ``docker``, runs in a docker
    sandbox; one on the node without it, in a local (bubblewrap) one; both serve the same env."""
    for fixture in ("no_leftovers", "bwrap", "current_textgames_image"):
        request.getfixturevalue(fixture)
    assert Placement.for_env(SOKOBAN, sandbox="auto").custom == ()  # placed by CPU and memory
    assert cluster.head_node is not None
    head = cluster.head_node.node_id
    with (
        RayEnvServerPool(cluster.address, sandbox="auto", cpus_per_server=2) as on_head,
        RayEnvServerPool(cluster.address, sandbox="auto", cpus_per_server=1) as elsewhere,
    ):
        docker_env = on_head.make(SOKOBAN)  # only the head has 2 CPUs
        local_env = elsewhere.make(SOKOBAN)  # the head's are taken now: the other node
        docker_server, local_server = on_head.server_of(docker_env), elsewhere.server_of(local_env)
        assert (docker_server.node_id, docker_server.sandbox) == (head, "docker")
        assert local_server.node_id != head and local_server.sandbox == "local"
        assert docker_env.reset(seed=3)[0] == local_env.reset(seed=3)[0]
        assert docker_env.step("up")[0] == local_env.step("up")[0]
    eventually(lambda: not actor_processes(), timeout_s=30)
    eventually(resources_free, timeout_s=30)


@pytest.mark.slow
def test_train_on_the_cluster_in_sandboxes_gives_the_in_process_run(
    cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``agentgym train cluster=... sandbox=local``: the envs on sandboxed servers across the
    cluster, the same step (rewards, advantages, loss, gradient norm) as in this process."""
    request.getfixturevalue("bwrap")
    config = {
        **{"env": SOKOBAN, "env_kwargs": {"dim_room": [5, 5]}, "steps": 1, "max_turns": 2},
        **{"tasks_per_step": 2, "group_size": 2, "eval_tasks": 2, "progress": False},
        **{"sampling": {"max_tokens": 6}, "learner": {"lr": 1e-4, "lora_rank": 4, "seed": 0}},
    }
    same = ("mean_return", "turns", "advantage_std", "update/loss", "update/grad_norm", "eval_outcomes")
    here = train(TrainConfig.from_dict({**config, "out_dir": str(tmp_path / "here")}))
    there = train(
        TrainConfig.from_dict(
            {**config, "cluster": cluster.address, "sandbox": "local", "out_dir": str(tmp_path / "there")}
        )
    )
    assert [{k: r[k] for k in same} for r in there] == [{k: r[k] for k in same} for r in here]
    assert ray.is_initialized()  # the run attached to the cluster and left it up
    eventually(lambda: not actor_processes(), timeout_s=30)
    eventually(resources_free, timeout_s=30)


def _serves_in_a_sandbox(cmdline: Path) -> bool:
    """Whether the process of ``cmdline`` is an env server on a sandbox's socket."""
    try:
        return b"agentgym.server\0--uds\0/run/agentgym/envserver.sock" in cmdline.read_bytes()
    except OSError:
        return False


# --- a Ray instance of the pool's own ------------------------------------------------------------


@pytest.mark.slow
def test_local_cluster_lives_as_long_as_its_pool() -> None:
    code = """
import ray
from agentgym.hosting.ray import RayEnvServerPool
with RayEnvServerPool("local", sessions_per_server=4) as servers:
    env = servers.make("agentgym/Sokoban-v0")
    print(servers.server_of(env).url, env.reset(seed=0)[1]["task_id"], ray.is_initialized())
print(ray.is_initialized())
"""
    out = run_python(code, timeout=180).stdout.split()
    assert out[0].startswith("http://127.0.0.1:")  # one machine: loopback
    assert out[2:] == ["True", "False"]  # the pool's instance ended with it
