"""Every session is its own sandbox: what an agent's tool code can reach, in every backend.

``agentgym/ToolUse-v0`` runs the agent's code; these tests are that agent, in process (the env's
own bubblewrap sandbox on this host), under ``sandbox="local"`` (the env server in bubblewrap,
each session's sandbox nested in it) and ``sandbox="docker"`` (the env server in the tooluse
image, each session's sandbox nested in the container), on this machine's daemon and on a
remote one (``docker-remote``: a second daemon reached over TCP with TLS, see ``remote_daemon``;
``docker-ssh``: the same daemon reached over SSH, see ``ssh_host``). Two sessions share one
server, as they do in a pool, and each backend's tests share that server (each test with new
sessions). Each attack must fail; the step answers the agent (``info["error"]`` unset, the
episode going on); the attacking session and the other one still answer; nothing is left running
or on disk (the ``no_leftovers`` fixture).

Regressions of the breaks found by hand at d8cc9ee: tool code read and rewrote another
session's workspace, ``setsid sleep 987 &`` survived reset, ``os.kill(os.getppid(), 9)`` and
2 GB written to the workspace killed the shared server, 2 GB went to the host disk from a
workspace, and every tool call under ``sandbox="local"`` failed (nested bubblewrap).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

import agentgym
from agentgym.envs.tooluse.env import WORKSPACE_BYTES, ToolUseEnv
from agentgym.hosting import EnvServerPool
from agentgym.sandbox import LocalSandbox, build_images, image_for
from agentgym.sandbox.local import bwrap_usable

from support import ROOT, unavailable
from support.hostile import HOSTILE, TOOLUSE_BREAKS
from support.sandboxes import (
    FORK_BOMB,
    LOOP_FOREVER,
    PRINT_1GB,
    copy_image,
    eventually,
    host_tcp_server,
    memory_bomb,
    nothing_left,
)

pytestmark = pytest.mark.usefixtures("no_leftovers")

TOOLUSE = "agentgym/ToolUse-v0"
KWARGS: dict[str, Any] = {"max_turns": 50, "timeout_s": 20}
#: Where the sessions run: in this process, or on an env server in a sandbox backend.
Placement = Literal["in-process", "local", "docker", "docker-remote", "docker-ssh"]
DOCKER = pytest.mark.docker


@pytest.fixture(
    scope="module",  # each backend's tests run together, on one pool (``servers``)
    params=[
        "in-process",
        "local",
        pytest.param("docker", marks=DOCKER),
        pytest.param("docker-remote", marks=DOCKER),
        pytest.param("docker-ssh", marks=DOCKER),
    ],
)
def backend(request: pytest.FixtureRequest) -> Placement:
    if (problem := bwrap_usable()) is not None:
        unavailable(problem)
    if request.param.startswith("docker"):
        build_images(
            ["tooluse"],
            base_image=request.getfixturevalue("base_image"),
            client=request.getfixturevalue("client"),
            stale_only=True,
        )
    return request.param


@pytest.fixture(scope="module")
def remote_tooluse(remote_daemon: str) -> str:
    """The second daemon's URL, holding the tooluse image (built by ``backend``)."""
    copy_image(image_for(TOOLUSE), remote_daemon)
    return remote_daemon


@pytest.fixture(scope="module")
def servers(backend: Placement, request: pytest.FixtureRequest) -> Iterator[EnvServerPool | None]:
    """The backend's env-server pool (None in process), shared by the module's tests: each test's
    sessions are new ones on the same server, which has served the earlier tests' attacks, as a
    pool's server serves one session after another. A session of its own keeps that server up
    between the tests; once the pool is closed, nothing of it may be left."""
    if backend == "in-process":
        yield None
        return
    hosts: list[str] = []
    if backend == "docker-remote":
        hosts = [request.getfixturevalue("remote_tooluse")]
    elif backend == "docker-ssh":
        request.getfixturevalue("remote_tooluse")
        hosts = [request.getfixturevalue("ssh_host").url]
    with (
        nothing_left(f"the {backend} pool"),
        EnvServerPool("local" if backend == "local" else "docker", docker_hosts=hosts) as pool,
    ):
        keeper = pool.make(TOOLUSE, KWARGS)
        try:
            yield pool
        finally:
            keeper.close()


@pytest.fixture
def sessions(servers: EnvServerPool | None) -> Iterator[tuple[Any, Any]]:
    """Two ToolUse sessions, reset; under a sandbox backend on one env server."""
    with contextlib.ExitStack() as stack:
        if servers is None:
            a, b = agentgym.make(TOOLUSE, **KWARGS), agentgym.make(TOOLUSE, **KWARGS)
        else:
            a, b = servers.make(TOOLUSE, KWARGS), servers.make(TOOLUSE, KWARGS)
            assert servers.sandbox_of(a) is servers.sandbox_of(b)
        stack.callback(b.close)
        stack.callback(a.close)
        a.reset(seed=0)
        b.reset(seed=1)
        yield a, b


def call(env: Any, tool: str, **arguments: Any) -> str:
    """The tool's answer; the step must be an ordinary one (no infrastructure error)."""
    action = f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"
    obs, _reward, terminated, truncated, info = env.step(action)
    assert "error" not in info and not terminated and not truncated, (obs, info)
    assert info["action_valid"], obs
    return obs


def bash(env: Any, command: str, timeout_s: int = 10) -> str:
    return call(env, "bash", command=command, timeout_s=timeout_s)


def python(env: Any, code: str, timeout_s: int = 10) -> str:
    return call(env, "python", code=code, timeout_s=timeout_s)


def answers(*envs: Any) -> None:
    for env in envs:
        assert "stdout:\nalive" in bash(env, "echo alive")


def test_each_session_runs_as_its_own_unprivileged_user(sessions: tuple[Any, Any], backend: str) -> None:
    a, b = sessions
    ids = [re.search(r"uid=(\d+)", bash(env, "id")) for env in (a, b)]
    assert all(ids) and all(m.group(1) != "0" for m in ids), ids  # type: ignore[union-attr]
    if backend != "local":  # under local, the sessions of one server share its uid
        assert ids[0].group(1) != ids[1].group(1)  # type: ignore[union-attr]


def test_host_secrets_are_out_of_reach(sessions: tuple[Any, Any]) -> None:
    a, _ = sessions
    assert "stdout:\n\nstderr" in bash(a, "cat /etc/shadow /etc/gshadow")  # empty: masked
    for path in (
        "/root/.ssh",
        "/var/run/docker.sock",
        "/run/docker.sock",
        f"{ROOT}/.git/HEAD",
        f"{ROOT}/pyproject.toml",
        f"{ROOT}/runs",
        f"{ROOT}/tests",
    ):
        assert "No such file or directory" in bash(a, f"ls -lA {path}"), path


def test_nothing_outside_the_workspace_is_writable(sessions: tuple[Any, Any]) -> None:
    a, _ = sessions
    name = f"agentgym-attack-{secrets.token_hex(4)}"
    # (the container has agentgym elsewhere: there the package folder is not found)
    read_only = [f"/etc/{name}", f"/usr/{name}", f"{Path(agentgym.__file__).parent}/{name}"]
    out = bash(a, "; ".join(f"touch {t}" for t in read_only) + f"; touch /{name} /run/{name}")
    assert out.count("Read-only file system") + out.count("No such file") == len(read_only), out
    assert not any(Path(t).exists() for t in [*read_only, f"/{name}", f"/run/{name}"])


def test_no_network_not_even_the_hosts_loopback(sessions: tuple[Any, Any]) -> None:
    a, _ = sessions
    with host_tcp_server() as (port, peers):
        out = python(
            a,
            "import socket\n"
            f"for host in ('127.0.0.1', '{_host_address()}'):\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=2).close()\n"
            "        print('connected')\n"
            "    except OSError as exc:\n"
            "        print('failed', exc)\n"
            "try:\n"
            "    print(socket.getaddrinfo('example.com', 443))\n"
            "except OSError as exc:\n"
            "    print('no dns', exc)\n",
        )
    assert "connected" not in out and "no dns" in out and peers == []


def test_bombs_end_only_their_call(sessions: tuple[Any, Any]) -> None:
    a, b = sessions
    for code, timeout_s in ((FORK_BOMB, 4), (memory_bomb(4096), 20), (LOOP_FOREVER, 2), (PRINT_1GB, 20)):
        out = python(a, code, timeout_s)
        assert "exit status: 0" not in out and "survived" not in out, out[:300]
        # A killed bomb's processes are reaped asynchronously: until they are, a new namespace
        # may be refused (EAGAIN) as an ordinary tool answer; both sessions must answer soon.
        eventually(lambda: all("stdout:\nalive" in bash(env, "echo alive") for env in (a, b)), timeout_s=30)


def test_disk_fill_stops_at_the_quota(sessions: tuple[Any, Any]) -> None:
    a, b = sessions
    quota_mib = WORKSPACE_BYTES >> 20
    for place in ("big", "/tmp/big"):
        bash(a, f"dd if=/dev/zero of={place} bs=1M count={2 * quota_mib}", timeout_s=30)
        found = re.search(r"stdout:\n(\d+)", bash(a, f"stat -c %s {place}"))
        assert found is not None
        size = int(found.group(1))
        assert 0 < size <= WORKSPACE_BYTES
    answers(a, b)
    assert "stdout:\nfreed" in bash(a, "rm big /tmp/big && echo x > small && echo freed")


def test_killing_the_parent_ends_only_the_call(sessions: tuple[Any, Any]) -> None:
    a, b = sessions
    for command in (
        "kill -9 $PPID",
        "kill -9 -1",
        "kill -9 1",
        "python3 -c 'import os; os.kill(os.getppid(), 9)'",
    ):
        bash(a, command)
        answers(a, b)


def test_processes_end_with_their_call_and_reset(sessions: tuple[Any, Any]) -> None:
    a, b = sessions
    marker = str(900_000 + secrets.randbelow(99_999))
    bash(a, f"setsid nohup sleep {marker} >/dev/null 2>&1 & disown; (sleep {marker} &) ; echo started")
    eventually(lambda: not _host_processes(f"sleep {marker}"), timeout_s=10)
    a.reset(seed=0)
    assert not _host_processes(f"sleep {marker}")
    answers(a, b)


def test_sessions_cannot_reach_each_other(sessions: tuple[Any, Any]) -> None:
    a, b = sessions
    token = secrets.token_hex(8)
    call(a, "write_file", path="secret.txt", content=token)
    bash(a, f"echo {token} > /tmp/secret2.txt")
    out = bash(
        b,
        "ls /proc | grep -c '^[0-9]'; "
        "find / -name 'secret*.txt' -not -path '/proc/*' 2>/dev/null; "
        f"grep -rl {token} /tmp /sandbox /run /var /home /opt /srv /mnt 2>/dev/null; "
        "echo end",
        timeout_s=20,
    )
    assert "secret" not in out and token not in out, out
    found = re.search(r"stdout:\n(\d+)", out)
    assert found is not None
    processes = int(found.group(1))
    assert processes <= 6, out  # its own few: no other session's, no server's
    assert token in bash(a, "cat secret.txt /tmp/secret2.txt")  # a's files are intact


def test_close_removes_the_sessions_sandboxes() -> None:
    if (problem := bwrap_usable()) is not None:
        unavailable(problem)
    env = agentgym.make(TOOLUSE)
    env.reset(seed=0)
    assert isinstance(env.unwrapped, ToolUseEnv)
    sandbox = env.unwrapped.sandbox
    assert isinstance(sandbox, LocalSandbox)  # in process, the tools run in bubblewrap
    host_dir, uid = sandbox.host_dir, sandbox.uid
    call(env, "bash", command="sleep 100 & echo")
    env.close()
    assert not host_dir.exists()
    assert str(host_dir) not in Path("/proc/self/mountinfo").read_text()
    if uid is not None:
        eventually(lambda: not _host_processes("", uid=uid))


def _host_processes(pattern: str, uid: int | None = None) -> list[str]:
    """Command lines of this host's processes that contain ``pattern`` (of ``uid``, if given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            owner = entry.stat().st_uid
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # exited, waiting for its parent to read its status
        except OSError:
            continue
        if pattern in cmdline and (uid is None or owner == uid) and "pytest" not in cmdline:
            found.append(cmdline)
    return found


def _host_address() -> str:
    """This host's first non-loopback IPv4 address (or loopback when there is none)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    return next((a for a in out.split() if ":" not in a), "127.0.0.1")


def test_hostile_actions_through_the_server(sessions: tuple[Any, Any], backend: str) -> None:
    """What no env may raise on in process, through the env server too: an action over the
    server's body limit (1 MiB) is answered as an invalid action, the env left as it was."""
    a, b = sessions
    for action in [*HOSTILE, *TOOLUSE_BREAKS, "\ud800" * 300_000]:
        obs, reward, terminated, truncated, info = a.step(action)
        assert isinstance(obs, str) and reward == 0.0 and "error" not in info, (action[:80], obs)
        if terminated or truncated:
            a.reset(seed=0)
    if backend != "in-process":
        obs, *_, info = a.step("x" * 2_000_000)
        assert "the env server takes at most 1,048,576" in obs and not info["action_valid"]
        assert info["task_id"]  # the env's own info, as it was
    answers(a, b)
