"""Sandboxes on several Docker hosts: this machine's daemon and a second one (its own data root
and sockets, see the ``remote_daemon`` fixture) reached over TCP with TLS client certificates,
named by a Docker context, and over SSH (``ssh_host``), which agentgym treats as remote: no bind
mounts, files through exec, the env server reached over the Docker API, no network."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgym.hosting import EnvServerPool
from agentgym.hosting.envserver import server_answers, start_server
from agentgym.http import http_client
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import collect, default_tasks
from agentgym.sandbox import DockerSandbox, SandboxError, SandboxSpec, image_for
from agentgym.sandbox.daemon import docker_client, least_loaded, shares_files

from support import ROOT
from support.episodes import comparable, varied_action
from support.sandboxes import SSHHost, connect_script, copy_image, eventually, run_and_crash

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

SOKOBAN = "agentgym/Sokoban-v0"
LOCAL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


@pytest.fixture(scope="module")
def remote(remote_daemon: str, current_textgames_image: str) -> str:
    """The second daemon's Docker context, holding this checkout's text games' image."""
    copy_image(current_textgames_image, remote_daemon)
    return remote_daemon


def endpoint_of(context: str) -> str:
    """The daemon URL of a Docker context."""
    inspect = ["docker", "context", "inspect", "--format", "{{.Endpoints.docker.Host}}", context]
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()


def sandboxes_on(url: str) -> list[dict[str, Any]]:
    return docker_client(url).api.containers(all=True, filters={"label": "agentgym.sandbox=1"})


def test_which_daemons_are_remote() -> None:
    assert shares_files(None) == ("DOCKER_HOST" not in os.environ or shares_files(os.environ["DOCKER_HOST"]))
    assert shares_files("unix:///var/run/docker.sock")
    assert not shares_files("tcp://10.0.0.2:2376") and not shares_files("ssh://me@box")


def test_a_sandbox_on_a_remote_host_works_without_network_or_shared_files(remote: str) -> None:
    with DockerSandbox(image_for(SOKOBAN), host=remote) as sb:
        assert sb.remote and sandboxes_on(remote) and not any(sb.host_dir.glob("work"))
        sb.write_file("notes/a.txt", b"written from the host")
        assert sb.exec(["cat", "notes/a.txt"]).check().stdout == b"written from the host"
        assert sb.read_file("/sandbox/notes/a.txt") == b"written from the host"
        with pytest.raises(FileNotFoundError):
            sb.read_file("missing.txt")
        # a timeout kills the command's whole group (the killer, told through the Docker API)
        result = sb.exec(["sh", "-c", "sleep 60 & sleep 61"], timeout_s=1)
        assert result.timed_out and result.duration_s < 10
        assert b"sleep" not in sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline"]).stdout
        # no network: not even the daemon's port on the host's loopback
        port = int(endpoint_of(remote).rsplit(":", 1)[1])
        out = sb.exec(["python", "-c", connect_script("127.0.0.1", port)]).stdout.decode()
        assert out.startswith("failed:"), out
        # a server inside, reached through a forwarded socket on this machine
        process = start_server(sb)
        assert server_answers(sb, process)
        endpoint = sb.endpoint("envserver")
        assert endpoint.startswith(f"unix:{sb.host_dir}")
        with http_client(endpoint, trust_env=False) as http:
            assert all(http.get("/health").json()["status"] == "ok" for _ in range(20))
        process.kill()
        assert process.wait(10) == 137 and not server_answers(sb, process)
        assert process.log_path is None and b"Traceback" not in process.logs()  # the log is remote
        sb.reset()
        assert sb.exec(["ls", "-A", "/sandbox"]).stdout == b""
        name = sb.id
    assert not sandboxes_on(remote) and not sb.host_dir.exists(), name


def test_env_servers_spread_over_two_hosts_and_play_as_in_process(remote: str) -> None:
    tasks = default_tasks(4)
    options: dict[str, Any] = {"group_size": 2, "max_turns": 5, "concurrency": 8, "progress": False}
    expected = collect(SOKOBAN, ScriptedPolicy(varied_action), tasks, **options)
    with EnvServerPool("docker", sessions_per_server=2, docker_hosts=[LOCAL, remote]) as servers:
        envs = [servers.make(SOKOBAN) for _ in range(8)]
        hosts = [str(getattr(servers.sandbox_of(env), "host", None)) for env in envs]
        assert sorted(hosts) == sorted([LOCAL] * 4 + [remote] * 4), hosts  # least-loaded first
        for env in envs:
            env.close()
        got = collect(SOKOBAN, ScriptedPolicy(varied_action), tasks, sandbox=servers, **options)
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    assert not any(e.error for e in got)
    assert not sandboxes_on(remote)


def test_gc_removes_a_killed_owners_sandboxes_from_every_host(remote: str) -> None:
    out = run_and_crash(
        "from agentgym.sandbox import DockerSandbox, image_for\n"
        f"for host in ({LOCAL!r}, {remote!r}):\n"
        f"    sb = DockerSandbox(image_for({SOKOBAN!r}), host=host).start()\n"
        "    print(sb.id)\n"
    )
    ids = out.split()
    assert len(ids) == 2 and sandboxes_on(remote)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgym.cli",
            "sandbox",
            "gc",
            "--docker-host",
            LOCAL,
            "--docker-host",
            remote,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert all(f"container agentgym-{i}" in proc.stdout for i in ids), proc.stdout
    assert not sandboxes_on(remote)


def test_bad_hosts_are_clear_errors(remote: str) -> None:
    with pytest.raises(SandboxError, match=r"no Docker host answers:\ntcp://127.0.0.1:9: "):
        least_loaded(["tcp://127.0.0.1:9"])
    assert least_loaded(["tcp://127.0.0.1:9", remote]) == remote  # a dead host is passed over
    with pytest.raises(ValueError, match="Docker hosts are for the docker backend"):
        SandboxSpec("local", hosts=(remote,))
    with pytest.raises(ValueError, match="docker_hosts are for the docker backend"):
        EnvServerPool("local", docker_hosts=[remote])
    with pytest.raises(SandboxError, match=rf"image 'agentgym/nothing:0' not found on {remote}"):
        DockerSandbox("agentgym/nothing:0", host=remote).start()
    with pytest.raises(SandboxError, match="no Docker context 'agentgym-no-such-context' in "):
        docker_client("agentgym-no-such-context")
    endpoint = endpoint_of(remote)
    assert endpoint.startswith("tcp://127.0.0.1:") and not shares_files(remote)
    with pytest.raises(SandboxError, match=f"cannot reach the Docker daemon {endpoint}"):
        docker_client(endpoint)  # the same daemon without the context's client certificate
    assert not sandboxes_on(remote)


def test_an_ssh_host_runs_sandboxes_and_gc_cleans_it(remote: str, ssh_host: SSHHost) -> None:
    """``ssh://`` reaches the second daemon (its SSH server's docker CLI uses the daemon's
    context): files, stdin, timeouts and a forwarded env server work over the SSH channels, and
    ``sandbox gc --docker-host ssh://...`` removes what a killed owner left there."""
    url = ssh_host.url
    assert docker_client(url).info()["ID"] == docker_client(remote).info()["ID"] and not shares_files(url)
    with DockerSandbox(image_for(SOKOBAN), host=url) as sb:
        assert sb.remote and [c["Id"] for c in sandboxes_on(remote)] == [sb.container_id]
        sb.write_file("notes/a.txt", b"written over SSH")
        assert sb.read_file("/sandbox/notes/a.txt") == b"written over SSH"
        data = bytes(range(256)) * (6 << 12)  # 6 MiB: beyond an SSH channel's window both ways
        assert sb.exec(["cat"], stdin=data, max_output_bytes=8 << 20).check().stdout == data
        result = sb.exec(["sh", "-c", "sleep 60 & sleep 61"], timeout_s=1)
        assert result.timed_out and b"sleep" not in sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline"]).stdout
        assert server_answers(sb, start_server(sb))
        with http_client(sb.endpoint("envserver"), trust_env=False) as http:
            assert all(http.get("/health").json()["status"] == "ok" for _ in range(10))
    assert not sandboxes_on(remote)
    home = f"import os\nos.environ['HOME'] = {str(ssh_host.home)!r}\n"
    out = run_and_crash(
        home + "from agentgym.sandbox import DockerSandbox, image_for\n"
        f"print(DockerSandbox(image_for({SOKOBAN!r}), host={url!r}).start().id)\n"
    )
    assert sandboxes_on(remote)
    gc = [sys.executable, "-m", "agentgym.cli", "sandbox", "gc", "--docker-host", url]
    env = {**os.environ, "HOME": str(ssh_host.home)}
    proc = subprocess.run(gc, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 0 and f"container agentgym-{out.strip()}" in proc.stdout, proc.stderr
    assert not sandboxes_on(remote)
    # a host whose key is not known is refused, with the reason
    unknown = url.replace("127.0.0.1", "localhost")
    with pytest.raises(
        SandboxError, match=rf"cannot reach the Docker daemon {unknown}: .*not found in known_hosts"
    ):
        docker_client(unknown)


def test_a_dropped_ssh_connection_is_opened_again(remote: str, ssh_host: SSHHost) -> None:
    """The SSH connection of this process to a host ending (killed on the server's side) costs
    only the calls in flight: the next call connects again, so that a sandbox started before
    runs commands, its forwarded env server answers, and new sandboxes start."""
    url = ssh_host.url
    with DockerSandbox(image_for(SOKOBAN), host=url) as sb:
        server = start_server(sb)
        assert server_answers(sb, server)
        assert ssh_host.drop_connections() > 0
        eventually(lambda: _runs(sb), timeout_s=15)  # a call racing the drop may fail
        assert sb.exec(["echo", "again"]).check().stdout == b"again\n"
        assert server_answers(sb, server)
        with DockerSandbox(image_for(SOKOBAN), host=url) as other:
            assert other.exec(["echo", "new"]).check().stdout == b"new\n"
    assert not sandboxes_on(remote)


def _runs(sb: DockerSandbox) -> bool:
    try:
        return sb.exec(["true"]).returncode == 0
    except SandboxError:
        return False


def test_an_ssh_host_out_of_sessions_is_a_clear_error(remote: str, ssh_host: SSHHost, tmp_path: Path) -> None:
    """An SSH server at its ``MaxSessions`` (here 1) refuses the channels that a process's calls
    open beside its first: a ``SandboxError`` that says to raise it, nothing left on the host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = (ssh_host.home.parent / "sshd_config").read_text()
    config = re.sub(r"Port \d+", f"Port {port}", config).replace("MaxSessions 100", "MaxSessions 1")
    (tmp_path / "sshd_config").write_text(config)
    known = ssh_host.home / ".ssh" / "known_hosts"
    host_key = known.read_text().split()[1:3]
    known.write_text(known.read_text() + f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")])
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HOME", str(ssh_host.home))
            eventually(lambda: sshd.poll() is not None or _listens(port), timeout_s=10)
            with pytest.raises(SandboxError, match="refused one more session .raise MaxSessions"):
                with DockerSandbox(image_for(SOKOBAN), host=f"ssh://root@127.0.0.1:{port}") as sb:
                    sb.exec(["true"])
    finally:
        sshd.terminate()
        sshd.wait(10)
    assert not sandboxes_on(remote)


def _listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
