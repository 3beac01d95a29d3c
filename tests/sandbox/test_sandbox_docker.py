"""The docker sandbox backend with real containers: exec, limits, containment, endpoints,
faults (a container killed mid-use), crash leftovers and gc, the pool, and image builds.

Needs a Docker daemon and the offline base image (built here if missing, ~50 s). Without a
daemon these tests skip, except under CI (``$CI`` set), where that is a failure.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentgym
from agentgym.sandbox import (
    DockerSandbox,
    SandboxDeadError,
    SandboxError,
    SandboxLimits,
    SandboxPool,
    SandboxSpec,
    build_images,
    gc,
    http_client,
)

from support.sandboxes import (
    CPU_TIME_OF_1S_BUSY,
    FORK_BOMB,
    LOOP_FOREVER,
    PRINT_1GB,
    UDS_HTTP_SERVER,
    connect_script,
    eventually,
    host_tcp_server,
    memory_bomb,
    run_and_crash,
    while_running,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

SMALL = SandboxLimits(memory_bytes=64 << 20, pids=32, cpus=1.0, wall_timeout_s=20)


@pytest.fixture
def sb(base_image: str) -> Iterator[DockerSandbox]:
    with DockerSandbox(base_image, SMALL, session="pytest") as sandbox:
        yield sandbox


@pytest.fixture
def bystander(base_image: str) -> Iterator[DockerSandbox]:
    with DockerSandbox(base_image) as sandbox:
        yield sandbox


# --- basics ----------------------------------------------------------------------------------------


def test_container_settings_and_labels(sb: DockerSandbox, client: Any) -> None:
    attrs = client.api.inspect_container(sb.container_id)
    labels, host = attrs["Config"]["Labels"], attrs["HostConfig"]
    assert labels["agentgym.sandbox"] == "1" and labels["agentgym.session"] == "pytest"
    assert labels["agentgym.owner.pid"] == str(os.getpid())
    assert abs(float(labels["agentgym.created"]) - time.time()) < 120
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["AutoRemove"]
    assert host["Memory"] == 64 << 20 and host["PidsLimit"] == 32 and host["NanoCpus"] == 10**9
    assert host["CapDrop"] == ["ALL"] and attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"


def test_exec_basics(sb: DockerSandbox) -> None:
    code = (
        "import os, sys; print(os.getcwd(), os.getuid()); print(sys.stdin.read().upper());"
        "print(os.environ['X'], file=sys.stderr); sys.exit(3)"
    )
    r = sb.exec(["python3", "-c", code], stdin=b"hi", env={"X": "from env"})
    assert (r.returncode, r.timed_out, r.truncated) == (3, False, False)
    assert r.stdout.split() == [b"/sandbox", str(os.getuid()).encode(), b"HI"]
    assert r.stderr == b"from env\n"
    big = bytes(range(256)) * 4096  # 1 MiB through stdin and back
    assert sb.exec(["cat"], stdin=big, max_output_bytes=2 << 20).check().stdout == big
    assert sb.exec(["no-such-command"]).returncode == 127


def test_timeout_kills_the_command_group(sb: DockerSandbox) -> None:
    r = sb.exec(["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
    assert r.timed_out and r.returncode == 137 and 0.5 <= r.duration_s < 5
    ps = sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]).check().stdout
    assert b"sleep 30" not in ps  # the background child went too
    assert sb.exec(["echo", "next"]).check().stdout == b"next\n"


def test_exec_returns_when_the_command_exits_even_if_children_hold_the_output(sb: DockerSandbox) -> None:
    r = sb.exec(["sh", "-c", "sleep 30 & echo started"], timeout_s=20)
    assert r.ok and r.stdout == b"started\n" and r.duration_s < 5


def test_output_cap_cuts_1gb_of_stdout(sb: DockerSandbox, bystander: DockerSandbox) -> None:
    r, _ = while_running(
        bystander, lambda: sb.exec(["python3", "-c", PRINT_1GB], max_output_bytes=1 << 20, timeout_s=60)
    )
    assert r.truncated and not r.timed_out and r.returncode == 137
    assert r.stdout == b"x" * (1 << 20) and r.duration_s < 10
    assert sb.exec(["echo", "after"]).check().stdout == b"after\n"


def test_files(sb: DockerSandbox, tmp_path: Path) -> None:
    sb.write_file("a/b.txt", b"work")  # bind mount: written from the host
    sb.write_file("/tmp/x/y.bin", bytes(range(256)))  # tmpfs: written through exec
    assert sb.exec(["cat", "/sandbox/a/b.txt", "/tmp/x/y.bin"]).check().stdout == b"work" + bytes(range(256))
    sb.exec(["sh", "-c", "echo inside > /sandbox/made.txt; echo t > /tmp/t.txt"]).check()
    assert sb.read_file("made.txt") == b"inside\n" and sb.read_file("/tmp/t.txt") == b"t\n"
    assert b"bookworm" in sb.read_file("/etc/os-release")
    with pytest.raises(FileNotFoundError):
        sb.read_file("/tmp/missing")
    with pytest.raises(PermissionError):
        sb.write_file("/etc/evil", b"x")  # read-only root
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    sb.exec(["ln", "-s", str(secret), "link"]).check()
    with pytest.raises(FileNotFoundError):
        sb.read_file("link")  # resolved inside the container, where the host path does not exist


def test_reset_kills_processes_and_empties_dirs(sb: DockerSandbox) -> None:
    proc = sb.spawn(["sleep", "300"])
    sb.write_file("f", b"x")
    sb.write_file("/tmp/g", b"y")
    sb.reset()
    eventually(lambda: proc.poll() is not None)
    assert sb.alive()
    assert sb.exec(["sh", "-c", "ls -A /sandbox /tmp"]).check().stdout.split() == [b"/sandbox:", b"/tmp:"]


# --- reaching servers inside ------------------------------------------------------------------------


def test_spawned_server_is_reachable_without_network(sb: DockerSandbox) -> None:
    proc = sb.spawn(["python3", "-c", UDS_HTTP_SERVER, sb.socket_path("web")])
    endpoint = sb.wait_for_endpoint("web", process=proc, timeout_s=30)
    with http_client(endpoint) as client:
        assert client.get("/x").text.startswith("hello /x from pid")
        assert client.get("/y").status_code == 200  # keep-alive
    proc.kill()
    assert proc.wait(10) == 137


def test_env_server_in_its_image(textgames_image: str) -> None:
    with DockerSandbox(textgames_image) as sb:
        proc = sb.spawn(["python", "-m", "agentgym.server", "--uds", sb.socket_path("web")])
        with http_client(sb.wait_for_endpoint("web", process=proc, timeout_s=60)) as client:
            health = client.get("/health").json()
    assert health["status"] == "ok" and health["version"] == agentgym.__version__


def test_build_images_labels(textgames_image: str, client: Any) -> None:
    labels = client.images.get(textgames_image).labels
    assert labels["agentgym.image"] == "textgames" and labels["agentgym.version"] == agentgym.__version__
    with pytest.raises(SandboxError, match="no Dockerfile"):
        build_images(["no-such-family"], client=client)


def test_stale_only_leaves_current_images_alone(textgames_image: str, client: Any) -> None:
    before = client.images.get(textgames_image).id
    logged: list[str] = []
    assert build_images(["textgames"], client=client, stale_only=True, log=logged.append) == {
        "textgames": textgames_image
    }
    assert logged == [] and client.images.get(textgames_image).id == before


# --- containment ------------------------------------------------------------------------------------


def test_host_files_are_invisible(sb: DockerSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    r = sb.exec(["sh", "-c", f"cat {secret}; touch /usr/x /etc/x"])
    assert b"host secret" not in r.stdout and b"No such file" in r.stderr
    assert r.stderr.count(b"Read-only file system") == 2


def test_no_network_unless_asked(base_image: str, client: Any) -> None:
    with (
        host_tcp_server() as (port, peers),
        DockerSandbox(base_image) as offline,
        DockerSandbox(base_image, SandboxLimits(network=True)) as online,
    ):
        gateway = client.api.inspect_container(online.container_id)["NetworkSettings"]["Gateway"]
        assert gateway  # the host, as seen from the default bridge
        for host in ("127.0.0.1", gateway, "1.1.1.1"):
            out = offline.exec(["python3", "-c", connect_script(host, port)]).check().stdout
            assert out.startswith(b"failed"), (host, out)
        assert peers == []
        out = online.exec(["python3", "-c", connect_script(gateway, port)]).check().stdout
        assert out == b"connected\n"
        eventually(lambda: len(peers) == 1)  # accepted in the background


def test_fork_bomb_hits_the_pids_limit(sb: DockerSandbox, bystander: DockerSandbox) -> None:
    r, times = while_running(bystander, lambda: sb.exec(["python3", "-c", FORK_BOMB], timeout_s=3))
    assert r.timed_out and r.returncode == 137 and len(times) > 0
    assert sb.alive() and sb.exec(["echo", "ok"]).check().stdout == b"ok\n"


def test_memory_bomb_is_oom_killed(sb: DockerSandbox, bystander: DockerSandbox) -> None:
    r, _ = while_running(bystander, lambda: sb.exec(["python3", "-c", memory_bomb(640)]))
    assert r.returncode == 137 and b"survived" not in r.stdout and not r.timed_out
    assert sb.alive() and sb.exec(["echo", "ok"]).check().ok


def test_infinite_loop_hits_the_wall_timeout(sb: DockerSandbox, bystander: DockerSandbox) -> None:
    r, _ = while_running(bystander, lambda: sb.exec(["python3", "-c", LOOP_FOREVER], timeout_s=1))
    assert r.timed_out and r.returncode == 137 and r.duration_s < 5


def test_cpu_quota_holds(base_image: str) -> None:
    with DockerSandbox(base_image, SandboxLimits(cpus=0.25)) as sb:
        cpu_s = float(sb.exec(["python3", "-c", CPU_TIME_OF_1S_BUSY]).check().stdout)
    assert cpu_s < 0.5, f"used {cpu_s:.2f} CPU-s in 1 s of wall time at a 0.25 CPU quota"


# --- faults -----------------------------------------------------------------------------------------


def test_container_killed_mid_use(sb: DockerSandbox, client: Any) -> None:
    proc = sb.spawn(["sleep", "300"])
    client.api.kill(sb.container_id)  # failure injection: `docker kill`
    eventually(lambda: not sb.alive())
    with pytest.raises(SandboxDeadError, match="dead"):
        sb.exec(["echo", "hi"])
    assert proc.poll() == 137
    sb.close()  # still fine


def test_pool_replaces_killed_sandboxes(base_image: str, client: Any) -> None:
    spec = SandboxSpec("docker", base_image, SMALL)
    with SandboxPool(warm=2, check_interval_s=0.2, session="pytest-pool") as pool:
        pool.prewarm(spec, wait_s=120)
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            sb = pool.acquire(spec)
            times.append(time.perf_counter() - t0)
            sb.write_file("dirty", b"x")
            pool.release(sb)
            pool.prewarm(spec, wait_s=120)
        print(
            f"\ndocker pool warm acquire: p50 {statistics.median(times) * 1e3:.1f} ms, "
            f"max {max(times) * 1e3:.1f} ms"
        )
        sb = pool.acquire(spec)
        assert isinstance(sb, DockerSandbox)
        assert sb.exec(["ls", "-A"]).check().stdout == b""  # recycled: reset
        client.api.kill(sb.container_id)  # killed while leased
        with pytest.raises(SandboxDeadError):
            sb.exec(["true"])
        pool.release(sb, healthy=False)
        victim = pool.warm_sandboxes(spec)[0]
        assert isinstance(victim, DockerSandbox)
        client.api.kill(victim.container_id)  # killed while warm
        eventually(lambda: victim not in pool.warm_sandboxes(spec))
        pool.prewarm(spec, wait_s=120)
        for _ in range(3):
            with pool.lease(spec) as sb:
                assert sb.exec(["echo", "ok"]).check().ok
        assert all(s.alive() for s in pool.warm_sandboxes(spec))


def test_pool_reaps_idle(base_image: str) -> None:
    spec = SandboxSpec("docker", base_image)
    with SandboxPool(warm=1, idle_s=0.5, check_interval_s=0.1) as pool:
        pool.prewarm(spec, wait_s=120)
        eventually(lambda: pool.stats(spec)["warm"] == 0)


# --- crash leftovers ----------------------------------------------------------------------------------


def test_gc_removes_containers_of_a_killed_owner(base_image: str, client: Any) -> None:
    out = run_and_crash(
        "from agentgym.sandbox import DockerSandbox\n"
        f"sb = DockerSandbox({base_image!r}, session='crashed').start()\n"
        "print(sb.container_id, sb.host_dir)\n"
    )
    container_id, host_dir = out.split()
    assert client.api.inspect_container(container_id)["State"]["Running"]  # left behind ...
    assert gc(local=False, older_than_s=3600).containers == []  # (too young)
    report = gc(local=False)
    assert len(report.containers) == 1 and not Path(host_dir).exists()  # ... until gc
    assert not client.api.containers(all=True, filters={"label": "agentgym.session=crashed"})


def test_gc_spares_live_owners(sb: DockerSandbox) -> None:
    assert gc(local=False).containers == [] and sb.alive()


def test_exit_hook_removes_forgotten_containers(base_image: str, client: Any) -> None:
    code = (
        "from agentgym.sandbox import DockerSandbox\n"
        f"sb = DockerSandbox({base_image!r}, session='forgotten').start()\n"
        "print(sb.container_id)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
    assert not client.api.containers(all=True, filters={"label": "agentgym.session=forgotten"})


def test_missing_image_is_a_clear_error() -> None:
    with pytest.raises(SandboxError, match="not found: build it"):
        DockerSandbox("agentgym/no-such-image:0").start()
