"""What the tests of sandboxes and of what runs in them share (sandbox/, hosting/, harness/,
envs/, security/): programs that misbehave, helpers, and the fixtures (a plugin of
``tests/conftest.py``, so every test may ask for them by name):

- :func:`no_leftovers`: nothing a test made in a sandbox outlives it. Not autouse: the modules
  that start sandboxes ask for it with ``pytestmark = pytest.mark.usefixtures("no_leftovers")``.
- :func:`client`, :func:`base_image`, :func:`textgames_image`: the Docker daemon and images.
- :func:`bwrap`, :func:`current_textgames_image`, :func:`backend`: each sandbox backend, ready.
- :func:`remote_daemon`: a second Docker daemon as a remote host; :func:`copy_image` into it.
- :func:`ssh_host`: the same daemon reached over SSH.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psutil
import pytest

import agentgym
from agentgym.sandbox import (
    OFFLINE_BASE_IMAGE,
    Sandbox,
    SandboxError,
    build_base_image,
    build_images,
    image_for,
)
from agentgym.sandbox.base import HOST_DIR_PREFIX
from agentgym.sandbox.cgroups import parent_dirs
from agentgym.sandbox.docker import docker_client
from agentgym.sandbox.local import bwrap_usable
from agentgym.sandbox.owner import Owner, owner_alive

from support import ROOT, WORKER, unavailable

#: Every single-agent env (games run in the process that plays them) but the desktop, whose
#: observations carry live window geometry (a layout can take a frame longer):
#: tests/envs/gui/test_gui.py plays it under both backends, checking outcomes, not traces.
#: hosting/test_sandboxed_envs.py plays these under each backend.
ENVS = sorted(
    e
    for e in agentgym.list_envs()
    if e != "agentgym/Desktop-v0" and "single" in agentgym.registry.manifest(e).kinds
)

T = TypeVar("T")

# --- what misbehaving code does (each a python3 -c program) ------------------------------------

FORK_BOMB = textwrap.dedent("""
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
""")


def memory_bomb(mib: int) -> str:
    """Touch ``mib`` MiB, one MiB at a time."""
    return f"chunks = [b'x' * (1 << 20) for _ in range({mib})]\nprint('survived')"


PRINT_1GB = "import sys\nfor _ in range(1024): sys.stdout.buffer.write(b'x' * (1 << 20))"
LOOP_FOREVER = "while True: pass"
CPU_TIME_OF_1S_BUSY = textwrap.dedent("""
    import time
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    print(time.process_time())
""")


def connect_script(host: str, port: int) -> str:
    """Prints ``connected`` or the error of a TCP connect to host:port."""
    return textwrap.dedent(f"""
        import socket
        try:
            socket.create_connection(({host!r}, {port}), timeout=3).close()
            print("connected")
        except OSError as exc:
            print("failed:", exc)
    """)


# An HTTP server on a Unix socket, standard library only (the base image has no agentgym).
UDS_HTTP_SERVER = textwrap.dedent("""
    import http.server, os, socketserver, sys

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"hello {self.path} from pid {os.getpid()}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    Server(sys.argv[1], Handler).serve_forever()
""")


@contextlib.contextmanager
def host_tcp_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on 0.0.0.0 (all host interfaces); yields (port, peers that connected).

    Connections are accepted by a background thread, so a client can finish before its peer is
    listed: wait for one with :func:`eventually`.
    """
    peers: list[str] = []
    srv = socket.create_server(("0.0.0.0", 0))
    srv.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except (TimeoutError, OSError):
                continue
            peers.append(addr[0])
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1], peers
    finally:
        stop.set()
        thread.join()
        srv.close()


def peers_so_far(port: int, peers: list[str]) -> list[str]:
    """The peers of :func:`host_tcp_server` ``(port, peers)`` up to now, then ``"127.0.0.2"``:
    a connection from that address is accepted after anything queued before it, and told apart
    from it."""
    socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)).close()
    eventually(lambda: "127.0.0.2" in peers)
    return list(peers)


def eventually(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    """Wait until ``condition()`` holds (pool work happens in the background)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not true after {timeout_s} s: {condition}"
        time.sleep(0.02)


def keeps_answering(sb: Sandbox, stop: threading.Event) -> list[float]:
    """Run ``echo`` in ``sb`` until ``stop``; the round-trip times (raises if one fails)."""
    times = []
    while not stop.is_set():
        t0 = time.monotonic()
        sb.exec(["echo", "alive"], timeout_s=30).check()
        times.append(time.monotonic() - t0)
    return times


def while_running(sb_bystander: Sandbox, action: Callable[[], T]) -> tuple[T, list[float]]:
    """Do ``action`` while ``sb_bystander`` keeps answering; (its result, bystander latencies)."""
    stop = threading.Event()
    result: dict[str, list[float]] = {}
    errors: list[BaseException] = []

    def bystander() -> None:
        try:
            result["times"] = keeps_answering(sb_bystander, stop)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=bystander)
    thread.start()
    try:
        out = action()
    finally:
        stop.set()
        thread.join()
    if errors:
        raise AssertionError(f"the other sandbox stopped answering: {errors[0]!r}")
    subprocess.run(["true"], check=True)  # and the host still runs things
    return out, result["times"]


def run_and_crash(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter that then SIGKILLs itself (no cleanup at all);
    returns what it printed."""
    program = code + "\nimport os, signal, sys\nsys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    return proc.stdout


# --- nothing may outlive a test ------------------------------------------------------------------
#
# What this process's tests make lies under its temp dir (a worker's own when the suite runs on
# several, see tests/conftest.py), so host dirs, sandbox processes and containers are told apart by
# path. cgroups are named by owner: a live owner must be this process or one of its children;
# a dead owner's groups are counted by the sandbox group's tests, where every owner is killed.


def _ours(path: str) -> bool:
    return path.startswith(os.path.join(tempfile.gettempdir(), ""))


def _host_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob(f"{HOST_DIR_PREFIX}*")}


def _cgroups(with_dead_owners: bool) -> set[str]:
    try:
        parents = parent_dirs()
    except OSError:
        return set()
    mine = descendants(os.getpid()) | {os.getpid()}
    found = set()
    for controller, parent in parents.items():
        for group in parent.iterdir() if parent.is_dir() else ():
            owner = Owner.from_tag(group.name)
            if (
                group.is_dir()
                and owner is not None
                and (owner.pid in mine or (with_dead_owners and not owner_alive(owner)))
            ):
                found.add(f"{controller}/{group.name}")
    return found


_SESSION_DAEMONS: set[int] = set()
"""The pids of the daemons that session fixtures start (:func:`remote_daemon`, :func:`ssh_host`):
children of this process that outlive the test that first asked for them, by design."""


def _sandbox_processes() -> set[int]:
    """bwrap processes (their command lines name the sandbox's host dir) and our children (but
    the session fixtures' daemons)."""
    me, found = os.getpid(), set()
    ours = os.path.join(tempfile.gettempdir(), HOST_DIR_PREFIX).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ours in cmdline or (ppid == me and int(entry.name) not in _SESSION_DAEMONS):
            found.add(int(entry.name))
    return found


def _containers() -> set[str]:
    try:
        client = docker_client()
    except Exception:
        return set()
    return {
        c["Id"]
        for c in client.api.containers(all=True, filters={"label": "agentgym.sandbox=1"})
        if _ours((c.get("Labels") or {}).get("agentgym.hostdir", ""))
    }


def descendants(root: int) -> set[int]:
    """The pids of the live descendants of process ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _snapshot(with_dead_owners: bool) -> dict[str, set]:
    return {
        "host dirs": _host_dirs(),
        "cgroups": _cgroups(with_dead_owners),
        "processes": _sandbox_processes(),
        "containers": _containers(),
    }


def _leftovers(before: dict[str, set], with_dead_owners: bool) -> dict[str, set]:
    now = _snapshot(with_dead_owners)
    return {k: v - before[k] for k, v in now.items() if v - before[k]}


def _serial_group(node: pytest.Item) -> str | None:
    """The group that tests/conftest.py put ``node`` in (its ``xdist_group`` marker)."""
    marker = node.get_closest_marker("xdist_group")
    return marker.args[0] if marker is not None and marker.args else None


@contextlib.contextmanager
def nothing_left(what: str, with_dead_owners: bool = False) -> Iterator[None]:
    """Fails if ``what`` (the code inside) leaves a sandbox host dir, cgroup, process or
    container behind; cgroups of dead owners count too if ``with_dead_owners``."""
    before = _snapshot(with_dead_owners)
    yield
    deadline = time.monotonic() + 10  # auto-removal of killed containers is asynchronous
    while (left := _leftovers(before, with_dead_owners)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"{what} left behind: {left}"


@pytest.fixture
def no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: no sandbox host dir, cgroup, process or container that it created."""
    with nothing_left("the test", WORKER is None or _serial_group(request.node) == "sandbox"):
        yield


# --- the backends ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def client() -> Any:
    """The Docker daemon's client (skip without a daemon, fail under CI)."""
    try:
        return docker_client()
    except SandboxError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def base_image(client: Any) -> str:
    """The offline base image (bookworm + python3), built once if missing."""
    try:
        return build_base_image(OFFLINE_BASE_IMAGE, client=client)
    except SandboxError as exc:
        unavailable(f"cannot build {OFFLINE_BASE_IMAGE}: {exc}")
        raise


@pytest.fixture(scope="session")
def textgames_image(client: Any, base_image: str) -> str:
    """The text games' env-server image, built here if missing or stale (or waited for while
    another process builds it: CI starts the builds beside the tests)."""
    build_images(["textgames"], base_image=base_image, client=client, stale_only=True)
    return image_for("agentgym/Sokoban-v0")


@pytest.fixture
def bwrap() -> None:
    """Bubblewrap works here (skip without it, fail under CI)."""
    if (problem := bwrap_usable()) is not None:
        unavailable(problem)


@pytest.fixture(scope="session")
def current_textgames_image(request: pytest.FixtureRequest) -> str:
    """The text games' image, and every other family's that ENVS need, rebuilt if it runs other
    sources than this checkout's (its envs would then play differently)."""
    image = request.getfixturevalue("textgames_image")
    families = sorted({image_for(e).split("/", 1)[1].split(":")[0] for e in ENVS})
    build_images(families, base_image=request.getfixturevalue("base_image"), stale_only=True)
    return image


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend; ``docker`` with an up-to-date text games' image."""
    request.getfixturevalue("bwrap" if request.param == "local" else "current_textgames_image")
    return request.param


# --- a second Docker daemon, as a remote host ------------------------------------------------------


@pytest.fixture(scope="session")
def remote_daemon(client: Any) -> Iterator[str]:
    """A second Docker daemon on this machine (its own data root, sockets and bridge), as a
    remote Docker host that requires TLS with client certificates (made here, with ``openssl``):
    the name of a Docker context (``docker context create``) of its endpoint,
    ``tcp://127.0.0.1:<port>`` on loopback, with its certificates. agentgym treats it as remote
    (no shared files). Needs root, ``dockerd``, ``ip`` and ``openssl``; skip without them, fail
    under CI. Stopped, with everything it held and its context, at the end of the session.

    Its bridge is one made here: ``dockerd --bridge=none`` would delete the first daemon's
    ``docker0``, whose builds then fail."""
    dockerd, ip, openssl = shutil.which("dockerd"), shutil.which("ip"), shutil.which("openssl")
    if dockerd is None or ip is None or openssl is None or os.geteuid() != 0:
        unavailable("a second Docker daemon needs dockerd, ip, openssl and root")
    root = Path(tempfile.mkdtemp(prefix="dockerd-", dir="/tmp"))
    certs = _certificates(root / "certs", openssl)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url, bridge = f"tcp://127.0.0.1:{port}", f"agtest{os.getpid() % 100000}"
    context = f"agentgym-test-{os.getpid()}"
    subprocess.run([ip, "link", "add", bridge, "type", "bridge"], check=True)
    subprocess.run([ip, "addr", "add", f"10.213.{os.getpid() % 250}.1/24", "dev", bridge], check=True)
    log = (root / "log").open("wb")
    daemon = subprocess.Popen(
        [
            dockerd,
            f"--data-root={root / 'data'}",
            f"--exec-root={root / 'exec'}",
            f"--pidfile={root / 'pid'}",
            f"--host=unix://{root / 'sock'}",
            f"--host={url}",
            "--tlsverify",
            f"--tlscacert={certs / 'ca.pem'}",
            f"--tlscert={certs / 'server-cert.pem'}",
            f"--tlskey={certs / 'server-key.pem'}",
            f"--bridge={bridge}",
            "--iptables=false",  # sandboxes have no network: no rules of its own
            "--ip-masq=false",
            "--shutdown-timeout=2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _SESSION_DAEMONS.add(daemon.pid)
    endpoint = f"host={url},ca={certs / 'ca.pem'},cert={certs / 'cert.pem'},key={certs / 'key.pem'}"
    try:
        subprocess.run(
            ["docker", "context", "create", context, "--docker", endpoint], check=True, capture_output=True
        )
        eventually(lambda: _answers(context) or daemon.poll() is not None, timeout_s=60)
        assert daemon.poll() is None, (root / "log").read_text()[-3000:]
        yield context
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        subprocess.run(["docker", "context", "rm", "--force", context], check=False, capture_output=True)
        subprocess.run([ip, "link", "delete", bridge], check=False)
        shutil.rmtree(root, ignore_errors=True)


class SSHHost(NamedTuple):
    """A Docker host reached over SSH: its docker SDK ``url`` and the ``home`` whose ``.ssh``
    (``config`` with the client key, ``known_hosts``) lets a client in (``HOME=home``)."""

    url: str
    home: Path
    pid: int
    """The SSH server's process: each connection is served by processes under it."""

    def drop_connections(self) -> int:
        """End every open connection from the server's side, as a failing network or a
        restarted SSH server does: kill the processes that serve them. How many there were."""
        serving = psutil.Process(self.pid).children(recursive=True)
        for process in serving:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(serving, timeout=10)
        return len(serving)


@pytest.fixture(scope="session")
def ssh_host(remote_daemon: str) -> Iterator[SSHHost]:
    """The second Docker daemon (:func:`remote_daemon`) behind an SSH server on loopback, as
    ``ssh://root@127.0.0.1:<port>``: ``sshd`` with a host key and one authorized client key made
    here and ``MaxSessions 100`` (as the README asks of an SSH Docker host), whose sessions'
    docker CLI (``docker system dial-stdio``) uses the daemon's context.
    This process's client is made (and kept: :func:`~agentgym.sandbox.daemon.docker_client`)
    with ``HOME`` set to the host's ``home``; other processes need ``HOME=home`` too. Needs
    root, ``sshd`` and ``ssh-keygen``; skip without them, fail under CI. Stopped at the end of
    the session."""
    sshd, keygen = Path("/usr/sbin/sshd"), shutil.which("ssh-keygen")
    if not sshd.is_file() or keygen is None or os.geteuid() != 0:
        unavailable("an SSH Docker host needs sshd (openssh-server), ssh-keygen and root")
    root = Path(tempfile.mkdtemp(prefix="sshd-", dir="/tmp"))
    for key in ("host", "client"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\nPidFile none\n"
        f"AuthorizedKeysFile {root / 'client.pub'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nMaxSessions 100\nSetEnv DOCKER_CONTEXT={remote_daemon}\n"
    )
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {root / 'client'}\n")
    host_key = " ".join((root / "host.pub").read_text().split()[:2])
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    log = (root / "log").open("wb")
    daemon = subprocess.Popen(
        [str(sshd), "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=subprocess.STDOUT
    )
    _SESSION_DAEMONS.add(daemon.pid)
    url = f"ssh://root@127.0.0.1:{port}"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HOME", str(home))
            eventually(lambda: _answers(url) or daemon.poll() is not None, timeout_s=30)
        assert daemon.poll() is None, (root / "log").read_text()[-3000:]
        yield SSHHost(url, home, daemon.pid)
    finally:
        daemon.terminate()
        daemon.wait(10)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _certificates(folder: Path, openssl: str) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it, as
    ``dockerd --tlsverify`` and a Docker context take them: ``folder``."""
    folder.mkdir(parents=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True)

    days = ("-days", "2")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", *days, "-subj", "/CN=agentgym test CA",
        "-keyout", "ca-key.pem", "-out", "ca.pem")  # fmt: skip
    for name, subject, extensions in (
        ("server-", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("", "/CN=agentgym test client", "extendedKeyUsage=clientAuth\n"),
    ):
        (folder / f"{name}ext.cnf").write_text(extensions)
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}key.pem",
            "-out", f"{name}csr.pem")  # fmt: skip
        run("x509", "-req", "-in", f"{name}csr.pem", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", *days, "-extfile", f"{name}ext.cnf", "-out", f"{name}cert.pem")  # fmt: skip
    return folder


def _answers(url: str) -> bool:
    try:
        docker_client(url)
    except SandboxError:
        return False
    return True


def copy_image(image: str, url: str) -> str:
    """``image`` of the default daemon, loaded into the daemon at ``url`` (a URL or a Docker
    context) unless it has it (the same id)."""
    target = docker_client(url)
    wanted = docker_client().images.get(image).id
    with contextlib.suppress(Exception):
        if target.images.get(image).id == wanted:
            return image
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    subprocess.run(
        ["docker", "--host" if "://" in url else "--context", url, "load", "--quiet"],
        stdin=save.stdout,
        check=True,
        capture_output=True,
    )
    assert save.wait() == 0
    return image
