"""Envs in sandboxed env servers: ``agentgym.make(..., sandbox=...)``,
``collect(..., sandbox=...)``, ``agentgym eval sandbox=...``, ``agentgym build`` and
``agentgym sandbox gc``.

Every registered env (but the desktop, see ENVS in tests/support/sandboxes.py) plays the same
in-process, through ``sandbox="local"`` (bubblewrap) and through ``sandbox="docker"`` (the text
games' image); faults (a killed container, a killed server) give clear errors and leave the batch
running; nothing outlives a test. The docker cases skip without a daemon, except under CI
(``$CI`` set), where that is a failure.
"""

from __future__ import annotations

import gc as garbage
import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentgym
from agentgym.hosting import EnvServerPool, default_pool
from agentgym.hosting.envserver import python_in
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import collect, default_tasks
from agentgym.sandbox import (
    DockerSandbox,
    Sandbox,
    SandboxError,
    SandboxWarning,
    image_for,
)
from agentgym.sandbox import images as images_module
from agentgym.sandbox import spec as spec_module
from agentgym.sandbox.docker import docker_client
from agentgym.sandbox.spec import Backend
from agentgym.server import EnvServerUnavailable, InvalidRemoteKwargs, RemoteEnv
from agentgym.server.jsonsafe import to_jsonable

from support import ROOT
from support.episodes import FREE_TEXT, comparable, varied_action
from support.sandboxes import ENVS, connect_script, eventually, host_tcp_server, run_and_crash
from support.servers import KillingPolicy, record_made

pytestmark = pytest.mark.usefixtures("no_leftovers")

SOKOBAN = "agentgym/Sokoban-v0"
SEEDS = (0, 1, 2)
TURNS = 8
CLI = [sys.executable, "-m", "agentgym.cli"]


def play(env: Any, seed: int) -> list[Any]:
    """Everything ``env`` answers to a reset with ``seed`` and up to TURNS actions drawn from
    ``admissible_actions`` (or FREE_TEXT) by a generator seeded with ``seed``, as JSON values."""
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed)
    trace = [to_jsonable([obs, info])]
    for _ in range(TURNS):
        action = rng.choice(info.get("admissible_actions") or FREE_TEXT)
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append(to_jsonable([obs, reward, terminated, truncated, info]))
        if terminated or truncated:
            break
    return trace


def play_fresh(env_id: str, seed: int) -> list[Any]:
    """:func:`play` on a new in-process env, closed after (a browser env's Chromium with it)."""
    env = agentgym.make(env_id)
    try:
        return play(env, seed)
    finally:
        env.close()


def host_ip() -> str:
    """This host's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def server_host_pid(sb: Sandbox, docker_api: Any = None) -> int:
    """The host pid of the env server in ``sb`` (docker: of the container's init, which shares
    the server's namespaces)."""
    if docker_api is not None:
        assert isinstance(sb, DockerSandbox)
        return int(docker_api.inspect_container(sb.container_id)["State"]["Pid"])
    marker = str(sb.host_dir).encode()  # in the argv of the sandbox's bwrap processes
    for entry in Path("/proc").iterdir():
        command = cmdline(int(entry.name)) if entry.name.isdigit() else b""
        if b"agentgym.server" in command and marker not in command:
            ancestor = parent(int(entry.name))
            while ancestor > 1 and marker not in cmdline(ancestor):
                ancestor = parent(ancestor)
            if ancestor > 1:
                return int(entry.name)
    raise AssertionError(f"no env server process in {sb}")


def interfaces(pid: int) -> list[str]:
    """The network interfaces in the namespace of process ``pid``."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)


# --- same envs, wherever they run --------------------------------------------------------------


@pytest.mark.parametrize("env_id", ENVS)
def test_every_env_plays_the_same_sandboxed(env_id: str, backend: Backend) -> None:
    expected = [play_fresh(env_id, seed) for seed in SEEDS]
    env = agentgym.make(env_id, sandbox=backend)
    try:
        assert isinstance(env, RemoteEnv) and env.family == agentgym.manifest(env_id).family
        assert [play(env, seed) for seed in SEEDS] == expected
    finally:
        env.close()


# retries: a browser that stops answering under load is an infrastructure error, run again
COLLECT: dict[str, Any] = {"group_size": 2, "max_turns": 6, "concurrency": 8, "progress": False, "retries": 2}
# Every env plays the same in each backend (above); what collect adds (a pool of servers shared by
# sessions, asynchronous clients, games in flight at once) is checked on a text game and on the
# browser env (several Chromiums in one server).
COLLECTED = (SOKOBAN, "agentgym/Shop-v0")


@pytest.fixture(scope="module")
def in_process_episodes() -> dict[str, list[dict[str, Any]]]:
    """What :func:`collect` gives with :data:`COLLECT` for each of :data:`COLLECTED` in this process
    (the same for every backend: made once)."""
    return {
        env_id: [
            comparable(e) for e in collect(env_id, ScriptedPolicy(varied_action), default_tasks(4), **COLLECT)
        ]
        for env_id in COLLECTED
    }


def test_collect_gives_the_same_episodes(
    backend: Backend, in_process_episodes: dict[str, list[dict[str, Any]]]
) -> None:
    with EnvServerPool(backend, sessions_per_server=4) as servers:
        for env_id in COLLECTED:
            got = collect(env_id, ScriptedPolicy(varied_action), default_tasks(4), sandbox=servers, **COLLECT)
            assert [comparable(e) for e in got] == in_process_episodes[env_id]
            assert not any(e.error for e in got)
        assert len(servers.sandboxes()) == 0  # every env closed: every server given back


def test_make_errors_are_the_in_process_ones(backend: Backend) -> None:
    with pytest.raises(agentgym.UnknownEnvError, match="Did you mean 'agentgym/Sokoban-v0'"):
        agentgym.make("agentgym/Sokobn-v0", sandbox=backend)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['size'\]; it accepts: dim_room"):
        agentgym.make(SOKOBAN, size=3)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['size'\]; it accepts: dim_room") as info:
        agentgym.make(SOKOBAN, sandbox=backend, size=3)
    assert isinstance(info.value, InvalidRemoteKwargs) and info.value.status == 400
    with pytest.raises(ValueError, match="num_boxes"):
        agentgym.make(SOKOBAN, sandbox=backend, num_boxes=0)
    with pytest.raises(ValueError, match="unknown sandbox backend 'vm'"):
        agentgym.make(SOKOBAN, sandbox="vm")  # type: ignore[call-overload]  # deliberately bad


def test_envs_share_a_server_and_give_it_back(backend: Backend) -> None:
    with EnvServerPool(backend, sessions_per_server=2) as servers:
        a, b, c = (servers.make(env_id) for env_id in ENVS[:3])
        assert servers.sandbox_of(a) is servers.sandbox_of(b) is not servers.sandbox_of(c)
        first = servers.sandbox_of(a)
        a.close()
        b.close()
        eventually(lambda: not first.alive())  # warm=0: its last env's close closes it
        assert servers.sandboxes() == [servers.sandbox_of(c)]
        c.close()


def test_sandbox_is_closed_when_its_env_is_garbage_collected(bwrap: None) -> None:
    env = agentgym.make(SOKOBAN, sandbox="local")
    sb = default_pool("local").sandbox_of(env)
    env.reset(seed=0)
    del env
    garbage.collect()
    eventually(lambda: not sb.alive())


def test_sandboxes_are_closed_at_interpreter_exit(bwrap: None) -> None:
    code = (
        f"import agentgym\nenv = agentgym.make({SOKOBAN!r}, sandbox='local')\n"
        "from agentgym.hosting import default_pool\n"
        "print(default_pool('local').sandbox_of(env).host_dir)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True
    )
    assert not Path(proc.stdout.strip()).exists()


@pytest.mark.docker
@pytest.mark.usefixtures("client")
def test_missing_image_names_the_build_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_module, "image_for", lambda m: "agentgym/textgames:no-such-tag")
    with pytest.raises(SandboxError, match="not found: build it with `agentgym build textgames`"):
        agentgym.make(SOKOBAN, sandbox="docker")


@pytest.mark.docker
def test_stale_image_warns(current_textgames_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images_module, "_checked", set())
    monkeypatch.setattr(images_module, "source_digest", lambda: "other sources")
    with pytest.warns(SandboxWarning, match="built from other agentgym sources.*`agentgym build textgames`"):
        env = agentgym.make(SOKOBAN, sandbox="docker")
    env.close()


# --- containment ---------------------------------------------------------------------------------


def test_env_server_has_no_network(backend: Backend) -> None:
    env = agentgym.make(SOKOBAN, sandbox=backend)
    try:
        sb = default_pool(backend).sandbox_of(env)
        assert not sb.limits.network and not agentgym.manifest(SOKOBAN).resources.network
        pid = server_host_pid(sb, docker_client().api if backend == "docker" else None)
        assert interfaces(pid) == ["lo"]  # the server's own network namespace
        with host_tcp_server() as (port, peers):
            for host in ("127.0.0.1", host_ip(), "1.1.1.1"):
                out = sb.exec([python_in(sb), "-c", connect_script(host, port)]).check().stdout
                assert out.startswith(b"failed"), (host, out)
        assert peers == []
        env.reset(seed=0)  # and it serves all the same, over its Unix socket
    finally:
        env.close()


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.usefixtures("textgames_image")
def test_killed_container_fails_only_its_episodes() -> None:
    killed: list[Sandbox] = []
    before: set[str] = set()
    seen: set[str] = set()
    with EnvServerPool("docker", sessions_per_server=2, warm=1) as servers:
        made = record_made(servers)

        def kill() -> None:
            # The server of the first env made: its episode is under way (at the third generate
            # call it has played at most three of its six turns). A server that only has sessions
            # still being made would cost no episode: a failed make is retried on another server.
            before.update(s.id for s in servers.sandboxes())
            victim = servers.sandbox_of(made[0])
            assert isinstance(victim, DockerSandbox)
            docker_client().api.kill(victim.container_id)  # failure injection: `docker kill`
            # `docker kill` returns once the signal is sent: wait until the server is gone, or on
            # a loaded machine it could still answer the steps its episodes have left.
            eventually(lambda: not victim.alive())
            killed.append(victim)

        policy = KillingPolicy(at=3, kill=kill)
        episodes = collect(
            SOKOBAN,
            policy,
            default_tasks(16),
            max_turns=6,
            concurrency=4,
            progress=False,
            sandbox=servers,
            on_episode=lambda _: seen.update(s.id for s in servers.sandboxes()),
        )
        assert killed and not killed[0].alive()
        failed = [e for e in episodes if e.error]
        assert 1 <= len(failed) <= 2, [e.error for e in episodes]  # its 2 sessions at most
        for e in failed:
            assert e.error is not None and e.error.startswith(
                ("step failed: EnvServerUnavailable", "reset failed: EnvServerUnavailable")
            ), e.error
            assert f"sandbox {killed[0].id} is dead" in e.error and "docker backend" in e.error
        assert all(e.num_turns > 0 for e in episodes if not e.error)
        assert len(episodes) == 16 and seen - before  # replaced, and the batch went on


def test_killed_server_is_a_clear_error(bwrap: None) -> None:
    env = agentgym.make(SOKOBAN, sandbox="local")
    try:
        env.reset(seed=0)
        servers = default_pool("local")
        sb = servers.sandbox_of(env)
        os.kill(server_host_pid(sb), 9)
        with pytest.raises(
            EnvServerUnavailable,
            match=rf"the env server in sandbox {sb.id} "
            r"\(local backend\) exited with status",
        ):
            env.step("up")
        assert not servers.usable(env)
        other = agentgym.make(SOKOBAN, sandbox="local")  # placed on a new server
        assert servers.sandbox_of(other) is not sb
        other.reset(seed=0)
        other.close()
    finally:
        env.close()


def test_eval_in_a_sandbox(bwrap: None, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [*CLI, "eval", "sandbox=local", "tasks=4", "max_turns=3", "progress=false", f"out_dir={out}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["errors"] == 0
    assert "sandbox: local" in (out / "config.yaml").read_text()


# --- the commands ------------------------------------------------------------------------------


def agentgym_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.docker
@pytest.mark.usefixtures("textgames_image")
def test_build_command() -> None:
    images, image = docker_client().images, image_for(SOKOBAN)
    dangling = {i.id for i in images.list(filters={"dangling": True})}
    proc = agentgym_cmd("build", "textgames", "--offline-base")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"built {image} (textgames)" in proc.stdout
    assert images.get(image).labels["agentgym.base"] == "agentgym/base:bookworm"
    assert {i.id for i in images.list(filters={"dangling": True})} <= dangling
    built = images.get(image).id
    proc = agentgym_cmd("build", "textgames", "--offline-base")  # the same sources again:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert images.get(image).id == built  # every layer from the cache (the wheels are the same bytes)
    proc = agentgym_cmd("build", "no-such-family")
    assert proc.returncode == 1 and "no Dockerfile for ['no-such-family']" in proc.stdout


@pytest.fixture
def crashed_owner(backend: Backend) -> Iterator[tuple[str, str]]:
    """A process that made a sandboxed env and was SIGKILLed: (host dir, sandbox id)."""
    out = run_and_crash(
        f"import agentgym\nenv = agentgym.make({SOKOBAN!r}, sandbox={backend!r})\n"
        "from agentgym.hosting import default_pool\n"
        f"sb = default_pool({backend!r}).sandbox_of(env)\n"
        "print(sb.host_dir, sb.id)\n"
    )
    host_dir, sandbox_id = out.split()
    yield host_dir, sandbox_id


def test_gc_command_removes_a_killed_owners_sandbox(crashed_owner: tuple[str, str], backend: Backend) -> None:
    host_dir, sandbox_id = crashed_owner
    assert Path(host_dir).exists()  # left behind (with its cgroups or container) ...
    proc = agentgym_cmd("sandbox", "gc", "--older-than", "3600")
    assert proc.returncode == 0 and "removed 0 container(s), 0 host dir(s)" in proc.stdout
    proc = agentgym_cmd("sandbox", "gc")  # ... until gc
    assert proc.returncode == 0, proc.stderr
    assert not Path(host_dir).exists()
    if backend == "docker":  # (its host dir goes with the container)
        assert f"container agentgym-{sandbox_id}" in proc.stdout
    else:
        assert f"dir {host_dir}" in proc.stdout and f"-{sandbox_id}" in proc.stdout  # cgroups
