"""ManagedProcess with real child processes (small ``python -c`` servers): a healthy start, a
failed start that shows the log, stopping a whole process group (a grandchild that ignores
SIGTERM included), and nothing left running after a failed start, a cancelled wait or the
interpreter's exit."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentgym.process import ManagedProcess, ProcessStartError, ProcessStartTimeout, group_alive

#: A process that serves ``GET /health`` (200) on the port given as its argument.
HEALTH_SERVER = textwrap.dedent("""
    import http.server, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        def log_message(self, *args):
            pass
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
""")

#: A process that starts a grandchild ignoring SIGTERM (which writes its pid to argv[1] once it
#: ignores it), waits for it, then prints argv[2] to stderr and exits with status argv[3]
#: (``-``: sleeps instead).
PARENT_OF_STUBBORN = textwrap.dedent("""
    import os, subprocess, sys, time
    pidfile, message, status = sys.argv[1:4]
    subprocess.Popen([sys.executable, "-c",
        "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
        "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(120)", pidfile])
    while not os.path.exists(pidfile):
        time.sleep(0.01)
    print(message, file=sys.stderr, flush=True)
    if status == "-":
        time.sleep(120)
    sys.exit(int(status))
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: orphans may wait for a busy init to reap them)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stubborn(
    tmp_path: Path, status: str = "-", message: str = "parent ready", **options: object
) -> tuple[ManagedProcess, Path]:
    pidfile = tmp_path / "grandchild.pid"
    process = ManagedProcess(
        [sys.executable, "-c", PARENT_OF_STUBBORN, str(pidfile), message, status],
        log_path=tmp_path / "log" / "out.log",
        name="stubborn",
        **options,  # type: ignore[arg-type]
    )
    return process, pidfile


def test_healthy_start_over_http_and_stop(tmp_path: Path) -> None:
    port = _free_port()
    with ManagedProcess(
        [sys.executable, "-c", HEALTH_SERVER, str(port)],
        log_path=tmp_path / "server.log",
        name="health server",
    ) as server:
        answer = server.wait_ready(f"http://127.0.0.1:{port}", timeout=30, interval=0.02)
        assert answer.status_code == 200 and answer.text == "ok"
        assert server.running and server.process is not None and server.process.poll() is None
        assert "serving" in server.log_tail()
        pid = server.pid
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session and group
    assert server.process.returncode == -signal.SIGTERM
    assert not server.running and not _running(pid)
    assert server.stop() == -signal.SIGTERM  # idempotent


def test_ready_callable_and_child_environment(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    code = (
        "import os, pathlib, time; time.sleep(0.2); pathlib.Path(os.environ['FLAG']).touch(); time.sleep(120)"
    )
    with ManagedProcess(
        [sys.executable, "-c", code], log_path=tmp_path / "x.log", env={"FLAG": str(flag)}, cwd=tmp_path
    ) as process:
        assert process.wait_ready(flag.exists, timeout=30, interval=0.02) is True
        assert os.readlink(f"/proc/{process.pid}/cwd") == str(tmp_path)
    assert not process.running


def test_start_failure_shows_the_log_tail_and_leaves_nothing(tmp_path: Path) -> None:
    process, pidfile = _stubborn(tmp_path, status="3", message="fatal: no such model 'xyz'", stop_timeout=0.5)
    process.start()
    with pytest.raises(ProcessStartError) as error:
        process.wait_ready(lambda: False, timeout=60, interval=0.02)
    message = str(error.value)
    assert message.startswith("stubborn exited with code 3; log ")
    assert str(tmp_path / "log" / "out.log") in message
    assert "fatal: no such model 'xyz'" in message.split("last lines:")[1]
    assert error.value.returncode == 3 and "no such model" in error.value.log_tail
    assert not isinstance(error.value, TimeoutError)
    grandchild = int(pidfile.read_text())
    assert not _running(grandchild) and not process.running  # the group went with it
    assert process.process is not None and process.process.returncode == 3


def test_start_timeout_stops_the_group(tmp_path: Path) -> None:
    process, pidfile = _stubborn(tmp_path, stop_timeout=0.5)
    process.start()
    start = time.monotonic()
    with pytest.raises(ProcessStartTimeout) as error:
        process.wait_ready(lambda: False, timeout=1.5, interval=0.05)
    assert 1.5 <= time.monotonic() - start < 15
    assert isinstance(error.value, TimeoutError) and error.value.returncode is None
    assert "stubborn was not ready after 1.5 s" in str(error.value)
    assert "parent ready" in error.value.log_tail
    assert not _running(int(pidfile.read_text())) and not process.running


def test_stop_kills_the_whole_group_including_a_grandchild(tmp_path: Path) -> None:
    process, pidfile = _stubborn(tmp_path, stop_timeout=0.5)
    process.start().wait_ready(pidfile.exists, timeout=30, interval=0.02)
    grandchild = int(pidfile.read_text())
    assert os.getpgid(grandchild) == process.pid
    assert group_alive(process.pid)
    start = time.monotonic()
    assert process.stop() == -signal.SIGTERM  # the leader goes on SIGTERM ...
    assert not _running(grandchild)  # ... the grandchild that ignores it on SIGKILL
    assert time.monotonic() - start < 10
    assert not group_alive(process.pid)


def test_kill_skips_the_grace(tmp_path: Path) -> None:
    process, pidfile = _stubborn(tmp_path)  # stop_timeout 10 s: kill must not wait for it
    process.start().wait_ready(pidfile.exists, timeout=30, interval=0.02)
    start = time.monotonic()
    assert process.kill() == -signal.SIGKILL
    assert time.monotonic() - start < 5 and not _running(int(pidfile.read_text()))


async def test_cancelled_wait_stops_the_process(tmp_path: Path) -> None:
    process, pidfile = _stubborn(tmp_path, stop_timeout=0.5)
    process.start()
    waiting = asyncio.create_task(process.await_ready(lambda: False, timeout=60, interval=0.05))
    while not pidfile.exists():
        await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not process.running and not _running(int(pidfile.read_text()))


async def test_await_ready_over_http(tmp_path: Path) -> None:
    port = _free_port()
    server = ManagedProcess(
        [sys.executable, "-c", HEALTH_SERVER, str(port)], log_path=tmp_path / "server.log"
    )
    try:
        answer = await server.start().await_ready(f"http://127.0.0.1:{port}", timeout=30, interval=0.02)
        assert answer.status_code == 200
    finally:
        await asyncio.to_thread(server.stop)
    assert not server.running


def test_started_once_and_nothing_to_stop_before(tmp_path: Path) -> None:
    process = ManagedProcess([sys.executable, "-c", "pass"], log_path=tmp_path / "x.log")
    assert process.stop() is None and not process.running and process.log_tail() == ""
    with pytest.raises(RuntimeError, match="was not started"):
        _ = process.pid
    process.start()
    with pytest.raises(RuntimeError, match="already started"):
        process.start()
    assert process.process is not None and process.process.wait() == 0
    assert process.stop() == 0  # it had exited: nothing to signal


def test_interpreter_exit_stops_what_is_still_running(tmp_path: Path) -> None:
    """A program that starts a process group and exits without stopping it (as after an
    uncaught error) leaves nothing running: the atexit hook stops the group."""
    pidfile = tmp_path / "grandchild.pid"
    program = textwrap.dedent(f"""
        import os, sys
        from agentgym.process import ManagedProcess
        pidfile = {str(pidfile)!r}
        process = ManagedProcess([sys.executable, "-c", {PARENT_OF_STUBBORN!r}, pidfile, "up",
                                  "-"], log_path={str(tmp_path / "out.log")!r}, stop_timeout=0.5)
        process.start().wait_ready(lambda: os.path.exists(pidfile), timeout=30, interval=0.02)
        print(process.pid, flush=True)
        raise SystemExit("failure injection: exit without stopping it")
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "failure injection" in done.stderr, done.stderr
    leader, grandchild = int(done.stdout.split()[0]), int(pidfile.read_text())
    assert not _running(leader) and not _running(grandchild)
    assert not group_alive(leader)
