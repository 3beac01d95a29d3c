"""Sessions: one env each, their calls, their limits, and their end.

A :class:`Session` serializes the calls made to its env (one at a time, in arrival order) and
runs them without blocking the event loop, as the env asks:

* a :class:`~agentgym.env.TextEnv` that implements its async twins natively (browser, remote) is
  awaited through them, as the rollout engine does, with its wrappers applied around them
  (:func:`~agentgym.asyncenv.async_twins`: ``make``'s order enforcing and passive checker are
  bypassed);
* any other env, and a native one inside a wrapper that is only synchronous (``TimeLimit`` from
  ``max_episode_steps``, a plugin's own), is called through all of its wrappers, directly on the
  event loop when
  its core says ``step_in_thread = False`` (pure-Python envs that step in microseconds, where a
  thread hop would cost more than the step) and in the session's own worker thread otherwise.
  Envs that do not say (plain Gymnasium envs, PettingZoo envs) run in a thread.

A session that steps in a thread has a worker thread of its own (made at its first call, ended
with the session): a session blocked in a long call (a tool that runs for a minute) holds only
itself, never a shared pool that other sessions' steps wait for. Envs are made in asyncio's
default pool.

Failures: ``TypeError``/``ValueError`` from ``reset`` (bad seed or options) answer 400
``invalid_argument`` and leave the session usable, as does Gymnasium's ``ResetNeeded`` (409
``reset_needed``). Any other exception from ``reset`` or ``step`` answers 500 ``env_error`` and
*breaks* the session: its env is closed at once, since its state is unknown, and later calls
answer 409 ``session_broken`` with the original error until the client deletes the session (or
the reaper does). This is the rollout engine's rule: a failed env is never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agentgym.asyncenv import async_twins
from agentgym.env import TextEnv
from agentgym.server.errors import ApiError
from agentgym.server.hostable import Kind

__all__ = ["Session", "SessionStore"]

log = logging.getLogger("agentgym.server")

#: Seconds ``close`` waits for a call in flight before closing the env under it.
CLOSE_WAIT_S = 10.0

#: Requests one session may have in the server at once (reading their bodies, waiting for the
#: session or running); more are answered 429 ``session_busy``. A client steps a session one
#: call at a time; each waiting request holds its decoded body.
MAX_QUEUED = 8


class Session:
    """One env and the lock that serializes the calls to it; ``on_env_closed`` is called once,
    when the env has been closed. A reset or step that runs past ``deadline_s`` is answered
    ``step_timeout`` and breaks the session (its env is closed once the call returns); an env
    that steps inline on the event loop cannot be cut short."""

    def __init__(
        self,
        env_id: str,
        kind: Kind,
        env: Any,
        on_env_closed: Callable[[], None],
        deadline_s: float | None = None,
    ):
        self.deadline_s = deadline_s
        self.id = uuid.uuid4().hex
        self._worker: ThreadPoolExecutor | None = None
        self.env_id = env_id
        self.kind = kind
        self.env = env
        core = env.unwrapped
        self.core = core
        native = isinstance(core, TextEnv) and (
            type(core).areset is not TextEnv.areset or type(core).astep is not TextEnv.astep
        )
        self._twins = async_twins(env) if native else None
        self.inline = not getattr(core, "step_in_thread", True)
        self.broken: str | None = None
        self.closed = False
        self.last_used = time.monotonic()
        self.pending = 0  # requests admitted (see admitted()); the reaper spares busy sessions
        self._on_env_closed = on_env_closed
        self._lock = asyncio.Lock()
        self._closing: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self.pending > 0

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """One request of this session in the server, from before its body is read until it is
        answered: it counts in ``pending``, or is refused with 429 ``session_busy`` when
        :data:`MAX_QUEUED` are in already."""
        if self.pending >= MAX_QUEUED:
            raise ApiError(
                "session_busy",
                f"session {self.id} already has {self.pending} requests in the server "
                f"(at most {MAX_QUEUED}): send its calls one at a time",
            )
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1
            self.last_used = time.monotonic()

    async def reset(self, seed: int | None, options: dict[str, Any] | None) -> Any:
        """The env's ``reset(seed=seed, options=options)`` result."""
        return await self._call("reset", seed=seed, options=options)

    async def step(self, action: Any) -> Any:
        """The env's ``step(action)`` result."""
        return await self._call("step", action)

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.inline:
            return fn(*args, **kwargs)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="agentgym-session")
        return await asyncio.get_running_loop().run_in_executor(
            self._worker, functools.partial(fn, *args, **kwargs)
        )

    async def _invoke(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._twins is not None:
            return await getattr(self._twins, f"a{method}")(*args, **kwargs)
        return await self._run(getattr(self.env, method), *args, **kwargs)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async with self._lock:
            self.check_usable()
            deadline = asyncio.timeout(None if self.inline else self.deadline_s)
            try:
                async with deadline:
                    return await self._invoke(method, *args, **kwargs)
            except TimeoutError as exc:
                if not deadline.expired():  # the env's own TimeoutError: the env failed
                    raise await self._break(method, exc) from exc
                self.broken = f"{method} ran past the server's deadline of {self.deadline_s:g} s"
                log.warning("session %s (%s) broken: %s", self.id, self.env_id, self.broken)
                # its worker is still in the call: close the env after it, without waiting
                self._closing = asyncio.get_running_loop().create_task(self._close_env())
                raise ApiError(
                    "step_timeout", f"{self.env_id}: {self.broken}; the session is closed"
                ) from None
            except gym.error.ResetNeeded as exc:
                raise ApiError("reset_needed", str(exc)) from None
            except Exception as exc:
                if method == "reset" and isinstance(exc, (TypeError, ValueError)):
                    raise ApiError(
                        "invalid_argument", f"reset: {exc}", exception_type=type(exc).__name__
                    ) from None
                raise await self._break(method, exc) from exc

    def check_usable(self) -> None:
        """409 ``session_broken`` for a broken session, 404 ``unknown_session`` for a closed one."""
        if self.broken is not None:
            raise ApiError(
                "session_broken",
                f"session {self.id} is broken: {self.broken}; delete it and create a new one",
            )
        if self.closed:
            raise ApiError("unknown_session", f"session {self.id} was closed")

    async def _break(self, method: str, exc: Exception) -> ApiError:
        """Mark the session broken and close its env; returns the ``env_error`` answer."""
        self.broken = f"{method} raised {type(exc).__name__}: {exc}"
        log.warning("session %s (%s) broken: %s", self.id, self.env_id, self.broken)
        await self._close_env()
        return ApiError("env_error", f"{self.env_id} {self.broken}", exception_type=type(exc).__name__)

    async def close(self) -> None:
        """Close the env (once), after the call in flight, waiting for it at most
        ``CLOSE_WAIT_S``."""
        if self.closed:
            return
        self.closed = True
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self._lock.acquire()
        except TimeoutError:
            log.warning("session %s: closing its env under a call that is still running", self.id)
            await self._close_env()
            return
        try:
            await self._close_env()
        finally:
            self._lock.release()

    async def _close_env(self) -> None:
        if self.env is None:
            return
        env, self.env, self.core = self.env, None, None
        try:
            await self._run(env.close)
        except Exception as exc:  # the session ends either way
            log.warning("session %s: %s.close() raised %s: %s", self.id, self.env_id, type(exc).__name__, exc)
        finally:
            if self._worker is not None:  # its thread ends after any call still running
                self._worker.shutdown(wait=False)
            self._on_env_closed()


class SessionStore:
    """The sessions of one server, within ``max_sessions``, closed when idle ``idle_timeout_s``;
    each call of theirs gets ``deadline_s`` (see :class:`Session`).

    ``closed_envs`` counts the envs closed so far (deleted, reaped, broken, or at shutdown).
    """

    def __init__(self, max_sessions: int, idle_timeout_s: float, deadline_s: float | None = None):
        self.deadline_s = deadline_s
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.sessions: dict[str, Session] = {}
        self.closed_envs = 0
        self.reaped = 0
        self._creating = 0

    def __len__(self) -> int:
        return len(self.sessions)

    async def create(self, make: Callable[[], tuple[Any, Kind]], env_id: str) -> Session:
        """A new session around the env that ``make`` (blocking; run in a worker thread) returns,
        or ``too_many_sessions`` when ``max_sessions`` are open or being made."""
        if len(self.sessions) + self._creating >= self.max_sessions:
            raise ApiError(
                "too_many_sessions",
                f"this server already hosts {len(self.sessions)} "
                f"sessions (max_sessions={self.max_sessions}); delete some or use "
                "another server",
                max_sessions=self.max_sessions,
            )
        self._creating += 1
        try:
            env, kind = await asyncio.to_thread(make)
        finally:
            self._creating -= 1
        session = Session(env_id, kind, env, self._count_close, self.deadline_s)
        self.sessions[session.id] = session
        return session

    def _count_close(self) -> None:
        self.closed_envs += 1

    def get(self, session_id: str) -> Session:
        """The session, marked used now (so that the reaper spares it while its request's body
        is still being read); ``unknown_session`` if there is none."""
        try:
            session = self.sessions[session_id]
        except KeyError:
            raise ApiError(
                "unknown_session",
                f"no session {session_id!r}: it was never created, "
                "was deleted, or was closed after idling "
                f"{self.idle_timeout_s:g} s (idle_timeout_s)",
            ) from None
        session.last_used = time.monotonic()
        return session

    async def delete(self, session_id: str) -> None:
        session = self.get(session_id)
        del self.sessions[session_id]
        await session.close()

    async def reap_idle(self) -> int:
        """Close the sessions idle longer than ``idle_timeout_s``; returns how many."""
        deadline = time.monotonic() - self.idle_timeout_s
        idle = [s for s in self.sessions.values() if not s.busy and s.last_used < deadline]
        for session in idle:
            del self.sessions[session.id]
        await asyncio.gather(*(s.close() for s in idle))
        self.reaped += len(idle)
        return len(idle)

    async def reap_forever(self) -> None:
        """Run :meth:`reap_idle` every quarter of ``idle_timeout_s`` (at most every 30 s)."""
        interval = min(max(self.idle_timeout_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            try:
                reaped = await self.reap_idle()
            except Exception:  # the reaper must outlive any one env's failure
                log.exception("reaping idle sessions failed")
                continue
            if reaped:
                log.info("closed %d idle session(s); %d open", reaped, len(self.sessions))

    async def close_all(self) -> None:
        """Close every session (at shutdown)."""
        sessions, self.sessions = list(self.sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions))
