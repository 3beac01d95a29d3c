"""The local sandbox backend (real bubblewrap, real cgroups), the pool, limits, gc, clients.

Containment tests run misbehaving code and check that it is stopped with a clear result while
the host and a second sandbox keep working. Every test checks that it leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import agentgym
from agentgym.sandbox import (
    ExecError,
    LocalSandbox,
    SandboxDeadError,
    SandboxError,
    SandboxLimits,
    SandboxPool,
    SandboxSpec,
    SandboxWarning,
    async_http_client,
    gc,
    http_client,
    image_for,
    limits_for,
)
from agentgym.sandbox import cgroups as cgroups_module
from agentgym.sandbox import local as local_module
from agentgym.sandbox.local import _python_paths, bwrap_usable
from agentgym.sandbox.mounts import unmount_under

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

pytestmark = pytest.mark.usefixtures("no_leftovers")

needs_bwrap = pytest.mark.skipif(bwrap_usable() is not None, reason=f"{bwrap_usable()}")
SMALL = SandboxLimits(memory_bytes=64 << 20, pids=32, cpus=1.0, wall_timeout_s=20)


@pytest.fixture
def sb():
    with LocalSandbox(SMALL) as sandbox:
        yield sandbox


@pytest.fixture
def bystander():
    with LocalSandbox() as sandbox:
        yield sandbox


# --- basics --------------------------------------------------------------------------------------


@needs_bwrap
def test_exec_runs_isolated_in_the_work_dir(sb: LocalSandbox) -> None:
    assert sb.isolated
    code = (
        "import os, sys; print(os.getcwd()); print(os.environ['HOME']);"
        "print(sys.stdin.read().upper()); sys.exit(3)"
    )
    r = sb.exec(["python3", "-c", code], stdin=b"hi")
    assert r.returncode == 3 and not r.timed_out and not r.truncated
    assert r.stdout.split() == [b"/sandbox", b"/sandbox", b"HI"]
    assert r.duration_s > 0
    with pytest.raises(ExecError, match="exit status 3"):
        r.check()
    r = sb.exec(["sh", "-c", 'echo "$X" >&2'], env={"X": "from env"}).check()
    assert r.stderr == b"from env\n" and r.ok


@needs_bwrap
def test_agentgym_is_importable_inside(sb: LocalSandbox) -> None:
    code = "import agentgym; e = agentgym.make('agentgym/Sokoban-v0'); print(len(e.reset(seed=0)[0]))"
    assert int(sb.exec([sys.executable, "-c", code], timeout_s=60).check().stdout) > 0


def test_timeout_kills_the_command(sb: LocalSandbox) -> None:
    t0 = time.monotonic()
    r = sb.exec(["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
    assert r.timed_out and r.returncode == 137 and not r.ok
    assert 0.5 <= r.duration_s < 5 and time.monotonic() - t0 < 5
    assert sb.exec(["echo", "next"]).check().stdout == b"next\n"


def test_output_cap_cuts_1gb_of_stdout(sb: LocalSandbox, bystander: LocalSandbox) -> None:
    r, _ = while_running(
        bystander, lambda: sb.exec(["python3", "-c", PRINT_1GB], max_output_bytes=1 << 20, timeout_s=60)
    )
    assert r.truncated and not r.timed_out and r.returncode == 137
    assert r.stdout == b"x" * (1 << 20)
    assert r.duration_s < 10  # killed at the cap, not after writing a gigabyte


def test_files(sb: LocalSandbox, tmp_path: Path) -> None:
    sb.write_file("a/b/c.txt", b"one")  # relative to the work dir; parents are created
    sb.write_file("/tmp/t.bin", bytes(range(256)))
    assert sb.read_file("/sandbox/a/b/c.txt") == b"one"
    assert sb.read_file("/tmp/t.bin") == bytes(range(256))
    assert sb.exec(["cat", "a/b/c.txt", "/tmp/t.bin"]).check().stdout == b"one" + bytes(range(256))
    sb.exec(["sh", "-c", "echo made inside > made.txt"]).check()
    assert sb.read_file("made.txt") == b"made inside\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")
    with pytest.raises(SandboxError, match="larger than"):
        sb.read_file("a/b/c.txt", max_bytes=2)
    if sb.isolated:
        assert b"Debian" in sb.read_file("/etc/os-release")  # via exec: the sandbox's view
        with pytest.raises(PermissionError):
            sb.write_file("/usr/evil", b"x")
        # A symlink made inside must not lead the host's file access out of the sandbox.
        secret = tmp_path / "secret"
        secret.write_text("host secret")
        sb.exec(["ln", "-s", str(secret), "link"]).check()
        with pytest.raises(FileNotFoundError):
            sb.read_file("link")
        sb.exec(["ln", "-s", str(tmp_path), "dirlink"]).check()
        with pytest.raises(OSError):
            sb.write_file("dirlink/planted", b"x")
        assert not (tmp_path / "planted").exists()


def test_spawned_server_is_reachable_through_endpoint(sb: LocalSandbox) -> None:
    proc = sb.spawn(["python3", "-c", UDS_HTTP_SERVER, sb.socket_path("web")])
    endpoint = sb.wait_for_endpoint("web", process=proc, timeout_s=30)
    assert endpoint.startswith("unix:/") and endpoint.endswith("/web.sock")
    with http_client(endpoint) as client:
        assert client.get("/sync").text.startswith("hello /sync from pid")

    async def over_async() -> str:
        async with async_http_client(endpoint) as client:
            return (await client.get("/async")).text

    assert asyncio.run(over_async()).startswith("hello /async")
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(5) == 137


def test_spawn_reports_a_process_that_dies_early(sb: LocalSandbox) -> None:
    proc = sb.spawn(["python3", "-c", "print('bad config'); raise SystemExit(2)"])
    with pytest.raises(SandboxError, match="bad config"):
        sb.wait_for_endpoint("web", process=proc, timeout_s=30)
    assert proc.wait(5) == 2 and b"bad config" in proc.logs()


@needs_bwrap
def test_env_server_in_a_local_sandbox(sb: LocalSandbox) -> None:
    proc = sb.spawn([sys.executable, "-m", "agentgym.server", "--uds", sb.socket_path("web")])
    with http_client(sb.wait_for_endpoint("web", process=proc, timeout_s=60)) as client:
        assert client.get("/health").json()["status"] == "ok"


def test_reset_kills_processes_and_empties_dirs(sb: LocalSandbox) -> None:
    proc = sb.spawn(["sleep", "300"])
    sb.write_file("f", b"x")
    sb.write_file("/tmp/g", b"y")
    sb.reset()
    assert proc.poll() is not None
    listing = sb.exec(["sh", "-c", "ls -A /sandbox /tmp"]).check().stdout.split()
    # A checkout under /tmp (a CI clone) is bound read-only inside /tmp: its mount point stays.
    bound = {p.split("/")[2].encode() for p in _python_paths() if p.startswith("/tmp/")}
    assert [name for name in listing if name not in bound] == [b"/sandbox:", b"/tmp:"]


def test_close_is_final_idempotent_and_complete() -> None:
    sb = LocalSandbox().start()
    proc = sb.spawn(["sleep", "300"])
    host_dir = sb.host_dir
    sb.close()
    sb.close()
    assert not host_dir.exists() and proc.poll() is not None and not sb.alive()
    with pytest.raises(SandboxDeadError):
        sb.exec(["true"])
    with pytest.raises(SandboxDeadError):
        sb.start()


def test_not_started_and_vanished() -> None:
    sb = LocalSandbox()
    with pytest.raises(SandboxError, match="not started"):
        sb.exec(["true"])
    with sb:
        unmount_under(sb.host_dir)  # failure injection: its directories vanish
        shutil.rmtree(sb.host_dir)
        assert not sb.alive()
        with pytest.raises(SandboxDeadError, match="vanished"):
            sb.exec(["true"])


# --- containment ----------------------------------------------------------------------------------


@needs_bwrap
def test_host_files_outside_are_invisible(sb: LocalSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    r = sb.exec(["sh", "-c", f"cat {secret}; ls {tmp_path}; touch /usr/x /etc/x"])
    assert b"host secret" not in r.stdout and r.returncode != 0
    assert r.stderr.count(b"No such file") == 2 and r.stderr.count(b"Read-only file system") == 2
    assert b"root:" not in sb.exec(["cat", "/etc/shadow"]).stdout  # not world-readable: masked
    with pytest.raises(FileNotFoundError):
        sb.read_file(str(secret))


@needs_bwrap
def test_no_network_unless_asked() -> None:
    with (
        host_tcp_server() as (port, peers),
        LocalSandbox() as offline,
        LocalSandbox(SandboxLimits(network=True)) as online,
    ):
        for host in ("127.0.0.1", "1.1.1.1"):
            out = offline.exec(["python3", "-c", connect_script(host, port)]).check().stdout
            assert out.startswith(b"failed"), out
        assert peers == []
        out = online.exec(["python3", "-c", connect_script("127.0.0.1", port)]).check().stdout
        assert out == b"connected\n"
        eventually(lambda: len(peers) == 1)  # accepted in the background


@needs_bwrap
def test_fork_bomb_hits_the_pids_limit(sb: LocalSandbox, bystander: LocalSandbox) -> None:
    r, times = while_running(bystander, lambda: sb.exec(["python3", "-c", FORK_BOMB], timeout_s=3))
    # killed at its time limit, or earlier by the sandbox's memory limit (its forks add up)
    assert r.returncode == 137 and not r.truncated
    assert len(times) > 0
    assert sb.exec(["echo", "ok"]).check().stdout == b"ok\n"  # the sandbox itself recovers
    cgroups = sb._cgroups
    assert cgroups is not None
    eventually(lambda: cgroups.pids() == set())  # the kernel reaps the killed namespace


@needs_bwrap
def test_memory_bomb_is_oom_killed(sb: LocalSandbox, bystander: LocalSandbox) -> None:
    r, _ = while_running(bystander, lambda: sb.exec(["python3", "-c", memory_bomb(640)]))
    assert r.returncode == 137 and b"survived" not in r.stdout and not r.timed_out
    assert sb.exec(["echo", "ok"]).check().ok


def test_infinite_loop_hits_the_wall_timeout(sb: LocalSandbox, bystander: LocalSandbox) -> None:
    r, _ = while_running(bystander, lambda: sb.exec(["python3", "-c", LOOP_FOREVER], timeout_s=1))
    assert r.timed_out and r.returncode == 137 and r.duration_s < 5


@needs_bwrap
def test_cpu_quota_holds() -> None:
    with LocalSandbox(SandboxLimits(cpus=0.25)) as sb:
        cpu_s = float(sb.exec(["python3", "-c", CPU_TIME_OF_1S_BUSY]).check().stdout)
    assert cpu_s < 0.5, f"used {cpu_s:.2f} CPU-s in 1 s of wall time at a 0.25 CPU quota"


# --- weaker modes warn -------------------------------------------------------------------------------


def test_without_bubblewrap_it_warns_and_still_limits(tmp_path: Path) -> None:
    with pytest.warns(SandboxWarning, match="WITHOUT ISOLATION"):
        sb = LocalSandbox(SMALL, bwrap=False).start()
    with sb:
        assert not sb.isolated
        r = sb.exec(["sh", "-c", 'pwd; echo "$AGENTGYM_SOCKET_DIR"']).check()
        assert r.stdout.decode().split() == [sb.workdir, sb.socket_dir]
        assert sb.exec(["sleep", "30"], timeout_s=0.3).timed_out
        proc = sb.spawn(["python3", "-c", UDS_HTTP_SERVER, sb.socket_path("1")])
        with http_client(sb.wait_for_endpoint("1", process=proc)) as client:
            assert client.get("/").status_code == 200


def test_without_cgroups_rlimits_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", "/sys/fs/cgroup")  # failure injection

    monkeypatch.setattr(cgroups_module.Cgroups, "create", classmethod(unavailable))
    with pytest.warns(SandboxWarning, match="cgroups unavailable"):
        sb = LocalSandbox(SMALL).start()
    with sb:
        r = sb.exec(["python3", "-c", memory_bomb(640)])
        assert not r.ok and b"MemoryError" in r.stderr


def test_unusable_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Failure injection: bwrap as it fails inside a Docker container.
    monkeypatch.setattr(local_module, "bwrap_usable", lambda: "Creating new namespace failed")
    with pytest.raises(SandboxError, match="bubblewrap required but unusable: Creating new"):
        LocalSandbox(bwrap=True).start()
    with (
        pytest.warns(SandboxWarning, match="WITHOUT ISOLATION: Creating new namespace failed"),
        LocalSandbox() as sb,
    ):
        assert not sb.isolated and sb.exec(["true"]).ok


# --- limits and specs from the registry -------------------------------------------------------------


def test_limits_and_spec_from_the_manifest() -> None:
    m = agentgym.manifest("agentgym/Sokoban-v0")
    limits = limits_for(m, wall_timeout_s=5)
    assert limits.memory_bytes == m.resources.memory_mb << 20 and limits.pids == m.resources.pids
    assert limits.network is m.resources.network and limits.wall_timeout_s == 5
    spec = SandboxSpec.for_env("agentgym/Sokoban-v0")
    assert spec.image == image_for(m) == f"agentgym/textgames:{agentgym.__version__}"
    assert SandboxSpec.for_env(m, backend="local").image is None
    with pytest.raises(ValueError, match="must be > 0"):
        SandboxLimits(pids=0)


# --- pool --------------------------------------------------------------------------------------------


def test_pool_warm_acquire_recycle_and_replace() -> None:
    spec = SandboxSpec("local", limits=SMALL)
    with SandboxPool(warm=2, check_interval_s=0.1) as pool:
        pool.prewarm(spec, wait_s=30)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            sb = pool.acquire(spec)
            times.append(time.perf_counter() - t0)
            sb.write_file("dirty", b"x")
            pool.release(sb)
            pool.prewarm(spec, wait_s=30)
        print(
            f"\nlocal pool warm acquire: p50 {statistics.median(times) * 1e3:.2f} ms, "
            f"max {max(times) * 1e3:.2f} ms"
        )
        sb = pool.acquire(spec)
        with pytest.raises(FileNotFoundError):
            sb.read_file("dirty")  # recycled sandboxes are reset
        pool.release(sb, healthy=False)  # closed and replaced
        eventually(lambda: not sb.alive())
        pool.prewarm(spec, wait_s=30)
        victim = pool.warm_sandboxes(spec)[0]
        unmount_under(victim.host_dir)  # failure injection: a warm sandbox dies
        shutil.rmtree(victim.host_dir)
        eventually(lambda: victim not in pool.warm_sandboxes(spec))
        pool.prewarm(spec, wait_s=30)
        assert pool.stats(spec) == {"warm": 2, "starting": 0, "leased": 0}


def test_pool_reaps_idle_specs_and_is_async_friendly() -> None:
    spec = SandboxSpec("local")

    async def use(pool: SandboxPool) -> bytes:
        async with pool.alease(spec) as sb:
            return (await asyncio.to_thread(sb.exec, ["echo", "async"])).stdout

    with SandboxPool(warm=1, idle_s=0.5, check_interval_s=0.1) as pool:
        assert asyncio.run(use(pool)) == b"async\n"
        pool.prewarm(spec, wait_s=30)
        eventually(lambda: pool.stats(spec) == {"warm": 0, "starting": 0, "leased": 0})
        with pool.lease(spec) as sb:  # a new acquire revives the spec
            assert sb.alive()
    with pytest.raises(SandboxError, match="closed"):
        pool.acquire(spec)


def test_pool_close_closes_leased_sandboxes() -> None:
    pool = SandboxPool(warm=0)
    sb = pool.acquire(SandboxSpec("local"))
    pool.close()
    assert not sb.alive()


# --- cleanup after crashes --------------------------------------------------------------------------


def test_gc_removes_what_a_killed_process_left() -> None:
    out = run_and_crash(
        "from agentgym.sandbox import LocalSandbox\n"
        "sb = LocalSandbox().start()\n"
        "sb.spawn(['sleep', '300'])\n"
        "print(sb.host_dir, sb._cgroups is not None)\n"
    )
    host_dir, has_cgroups = out.split()
    assert Path(host_dir).exists()  # left behind ...
    report = gc(docker=False)
    assert host_dir in report.dirs  # ... until gc
    assert not Path(host_dir).exists()
    assert (len(report.cgroups) == 1) == (has_cgroups == "True")
    assert gc(docker=False).dirs == []


def test_gc_spares_live_owners() -> None:
    with LocalSandbox() as sb:
        report = gc(docker=False)
        assert str(sb.host_dir) not in report.dirs and sb.alive()


def test_exit_hook_closes_forgotten_sandboxes() -> None:
    code = (
        "from agentgym.sandbox import LocalSandbox\n"
        "sb = LocalSandbox().start(); sb.spawn(['sleep', '300']); print(sb.host_dir)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert not Path(out.strip()).exists()


def test_unix_socket_paths_fit(sb: LocalSandbox) -> None:
    path = sb.endpoint("a-long-socket-name-12345").removeprefix("unix:")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)  # would raise if the path were too long for sun_path


def test_no_warnings_in_the_normal_case() -> None:
    if (why := bwrap_usable()) is not None:
        pytest.skip(why)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SandboxWarning)
        with LocalSandbox() as sb:
            assert sb.exec(["true"]).ok
