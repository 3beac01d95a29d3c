"""Shared helpers and fixtures of the sandbox tests (test_sandbox.py, test_sandbox_docker.py).

No tests here. The test modules import the fixtures they use by name.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import WORKER, serial_group

from agentgym.sandbox import Sandbox
from agentgym.sandbox.base import HOST_DIR_PREFIX
from agentgym.sandbox.cgroups import parent_dirs
from agentgym.sandbox.owner import Owner, owner_alive

ROOT = Path(__file__).resolve().parent.parent

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
    """A TCP server on 0.0.0.0 (all host interfaces); yields (port, peers that connected)."""
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


def while_running(sb_bystander: Sandbox, action: Callable[[], object]) -> tuple[object, list[float]]:
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
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)
    assert proc.returncode == -9, proc.stderr
    return proc.stdout


# --- nothing may outlive a test ------------------------------------------------------------------
#
# What this process's tests make lies under its temp dir (a worker's own when the suite runs on
# several, see conftest.py), so host dirs, sandbox processes and containers are told apart by
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
            if group.is_dir() and owner is not None and (
                    owner.pid in mine or (with_dead_owners and not owner_alive(owner))):
                found.add(f"{controller}/{group.name}")
    return found


def _sandbox_processes() -> set[int]:
    """bwrap processes (their command lines name the sandbox's host dir) and our children."""
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
        if ours in cmdline or ppid == me:
            found.add(int(entry.name))
    return found


def _containers() -> set[str]:
    from agentgym.sandbox.docker import docker_client

    try:
        client = docker_client()
    except Exception:
        return set()
    return {c["Id"] for c in client.api.containers(all=True, filters={"label": "agentgym.sandbox=1"})
            if _ours((c.get("Labels") or {}).get("agentgym.hostdir", ""))}


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
    return {"host dirs": _host_dirs(), "cgroups": _cgroups(with_dead_owners),
            "processes": _sandbox_processes(), "containers": _containers()}


def _leftovers(before: dict[str, set], with_dead_owners: bool) -> dict[str, set]:
    now = _snapshot(with_dead_owners)
    return {k: v - before[k] for k, v in now.items() if v - before[k]}


@pytest.fixture(autouse=True)
def no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: no sandbox host dir, cgroup, process or container that it created."""
    dead_owners = WORKER is None or serial_group(request.node) == "sandbox"
    before = _snapshot(dead_owners)
    yield
    deadline = time.monotonic() + 10  # auto-removal of killed containers is asynchronous
    while (left := _leftovers(before, dead_owners)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"the test left behind: {left}"
