"""Long-lived child processes (servers, drivers) that agentgym starts and must never leave running.

    with ManagedProcess(argv, log_path=log, name="the retrieval service") as service:
        service.wait_ready("http://127.0.0.1:8100", timeout=30)   # GET /health answers 200
        ...
    # the whole process group is gone here

:class:`ManagedProcess` runs a command in a new session, so the child leads its own process
group and everything it starts (that does not start a session of its own) belongs to it; its
output is appended to a log file. :meth:`~ManagedProcess.wait_ready` waits until a callable says
the process is ready, or its HTTP ``/health`` answers 200; if the process exits first or the
time runs out, it raises :class:`ProcessStartError` (the message ends with the log's last
lines) after stopping the group. :meth:`~ManagedProcess.stop` stops the whole group: SIGTERM,
then SIGKILL for what is left after a grace period; it runs on leaving a ``with`` block and at
interpreter exit for every process still running.

This module is a leaf of the core: it imports nothing from agentgym but :mod:`agentgym.http`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

from agentgym.http import HealthCheck

if TYPE_CHECKING:
    import httpx

__all__ = [
    "LOG_TAIL_LINES",
    "ManagedProcess",
    "ProcessStartError",
    "ProcessStartTimeout",
    "group_alive",
    "wait_until",
]

#: Lines of log that a :class:`ProcessStartError` ends with.
LOG_TAIL_LINES = 40
_GROUP_POLL_S = 0.05

T = TypeVar("T")


class ProcessStartError(RuntimeError):
    """A managed process exited, or was not ready in time, while it started; it was stopped.
    The message ends with the last lines of its log.

    Attributes: ``returncode`` (the exit status; ``None`` for a timeout) and ``log_tail``
    (those lines)."""

    def __init__(self, message: str, *, returncode: int | None, log_tail: str):
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail


class ProcessStartTimeout(ProcessStartError, TimeoutError):
    """A managed process was not ready within its timeout (it was stopped)."""


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: signal 0 also counts zombies, which is the safe side
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # the process ended while we looked
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _deadline(timeout: float, expired: Callable[[], BaseException]) -> Callable[[], None]:
    """A check that raises ``expired()`` once ``timeout`` seconds have passed from now."""
    end = time.monotonic() + timeout

    def check() -> None:
        if time.monotonic() >= end:
            raise expired()

    return check


def wait_until(
    ready: Callable[[], T | None], *, timeout: float, interval: float, expired: Callable[[], BaseException]
) -> T:
    """The first truthy result of ``ready()``, tried every ``interval`` seconds; raises
    ``expired()`` (e.g. a ``TimeoutError``) once ``timeout`` seconds have passed without one."""
    check = _deadline(timeout, expired)
    while not (result := ready()):
        check()
        time.sleep(interval)
    return result


class ManagedProcess:
    """A child process in its own process group, with its output in a log file, that is stopped
    for sure: by :meth:`stop`, on leaving a ``with`` block (entering it calls :meth:`start`),
    after a failed :meth:`wait_ready`, and at interpreter exit.

    Args:
        argv: the command.
        log_path: file the child's output is appended to (its folder is made).
        name: what messages call the process (default: ``argv[0]``).
        env: variables set for the child, over a copy of this process's environment.
        cwd: the child's working directory (default: this process's).
        pipe_stdio: give the child pipes as stdin and stdout (``process.stdin`` and
            ``process.stdout``, for a line protocol); only stderr then goes to the log. By
            default stdin is ``/dev/null`` and stdout and stderr go to the log.
        stop_timeout: seconds :meth:`stop` waits after SIGTERM before SIGKILL.

    Attributes: ``process`` (the ``subprocess.Popen``, after :meth:`start`).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: str | os.PathLike[str],
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        pipe_stdio: bool = False,
        stop_timeout: float = 10.0,
    ):
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.name = name or self.argv[0]
        self.env = dict(env or {})
        self.cwd = cwd
        self.pipe_stdio = pipe_stdio
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group's id."""
        if self.process is None:
            raise RuntimeError(f"{self.name} was not started")
        return self.process.pid

    @property
    def running(self) -> bool:
        """Whether any process of the group is still running (not a zombie)."""
        return self.process is not None and group_alive(self.process.pid)

    def start(self) -> Self:
        """Spawn the command in a new session and return at once (see :meth:`wait_ready`); it
        is registered to be stopped at interpreter exit. A process is started once."""
        if self.process is not None:
            raise RuntimeError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            stdio: dict[str, Any] = (
                {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
                if self.pipe_stdio
                else {"stdin": subprocess.DEVNULL, "stdout": log}
            )
            self.process = subprocess.Popen(
                self.argv,
                stderr=log,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,
                **stdio,
            )
        atexit.register(self.stop)
        return self

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the log (read from its last ``200 * lines`` bytes; ``""``
        when there is no log)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 200 * lines))
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _failure(
        self, what: str, error: type[ProcessStartError], returncode: int | None
    ) -> ProcessStartError:
        tail = self.log_tail()
        return error(
            f"{self.name} {what}; log {self.log_path}, last lines:\n{tail}",
            returncode=returncode,
            log_tail=tail,
        )

    def _check_running(self) -> None:
        """Raise :class:`ProcessStartError` if the child has exited."""
        assert self.process is not None, f"{self.name} was not started"
        if self.process.poll() is not None:
            code = self.process.returncode
            raise self._failure(f"exited with code {code}", ProcessStartError, code)

    def _timed_out(self, timeout: float) -> Callable[[], ProcessStartError]:
        return lambda: self._failure(f"was not ready after {timeout} s", ProcessStartTimeout, None)

    @overload
    def wait_ready(self, ready: str, *, timeout: float, interval: float = ...) -> httpx.Response: ...

    @overload
    def wait_ready(self, ready: Callable[[], T], *, timeout: float, interval: float = ...) -> T: ...

    def wait_ready(self, ready: Callable[[], Any] | str, *, timeout: float, interval: float = 0.1) -> Any:
        """Block until the process is ready and return what said so: the first truthy result
        of ``ready()``, tried every ``interval`` seconds, or, when ``ready`` is an endpoint
        string (as :func:`agentgym.http.http_client` takes), the 200 answer of its
        ``GET /health`` (through a :class:`~agentgym.http.HealthCheck`).

        Raises :class:`ProcessStartError` if the child exits first, and
        :class:`ProcessStartTimeout` once ``timeout`` seconds have passed; on any failure,
        an interruption included, the process group is stopped before the error propagates.
        """
        with contextlib.ExitStack() as stack:
            probe = stack.enter_context(HealthCheck(ready)) if isinstance(ready, str) else ready

            def running_and_ready() -> Any:
                self._check_running()
                return probe()

            try:
                return wait_until(
                    running_and_ready, timeout=timeout, interval=interval, expired=self._timed_out(timeout)
                )
            except BaseException:
                self.stop()
                raise

    @overload
    async def await_ready(self, ready: str, *, timeout: float, interval: float = ...) -> httpx.Response: ...

    @overload
    async def await_ready(self, ready: Callable[[], T], *, timeout: float, interval: float = ...) -> T: ...

    async def await_ready(
        self, ready: Callable[[], Any] | str, *, timeout: float, interval: float = 0.1
    ) -> Any:
        """:meth:`wait_ready` without blocking the event loop (each ``ready()`` runs in a
        worker thread); cancelling it stops the process too."""
        with contextlib.ExitStack() as stack:
            probe = stack.enter_context(HealthCheck(ready)) if isinstance(ready, str) else ready
            expired = _deadline(timeout, self._timed_out(timeout))
            try:
                while True:
                    self._check_running()
                    if result := await asyncio.to_thread(probe):
                        return result
                    expired()
                    await asyncio.sleep(interval)
            except BaseException:
                await asyncio.to_thread(self.stop)
                raise

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process group (nothing if it is gone, or if no member may be
        signalled: say a set-user-ID helper it started)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _gone_within(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child to exit and the group to empty."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        while group_alive(self.process.pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(_GROUP_POLL_S)
        return True

    def _end(self, signals: Sequence[int], grace: float) -> int | None:
        atexit.unregister(self.stop)
        if self.process is None:
            return None
        for sig in signals:
            if not self.running:
                break
            self.signal(sig)
            if self._gone_within(grace):
                break
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # a pipe whose other end is gone may fail to flush
                    pass
        return self.process.returncode

    def stop(self, grace: float | None = None) -> int | None:
        """Stop the process group: SIGTERM, then SIGKILL for what is left after ``grace``
        seconds (default ``stop_timeout``); reap the child and close its pipes. Returns once no
        member of the group runs (or ``grace`` more seconds passed after SIGKILL). Idempotent;
        returns the child's exit status (``-15`` after it exited on SIGTERM; ``None`` if it was
        never started)."""
        return self._end((signal.SIGTERM, signal.SIGKILL), self.stop_timeout if grace is None else grace)

    def kill(self) -> int | None:
        """:meth:`stop` without the graceful part: SIGKILL the process group at once."""
        return self._end((signal.SIGKILL,), self.stop_timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        pid = None if self.process is None else self.process.pid
        return f"ManagedProcess({self.name!r}, pid {pid}, {'running' if self.running else 'stopped'})"
