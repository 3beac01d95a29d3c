"""A pool of warm sandboxes, per :class:`~agentgym.sandbox.SandboxSpec`.

Usable from sync and async code alike. The sync methods are thread-safe; :meth:`acquire` returns
at once when a warm sandbox is ready (a pop and an ``alive()`` check: a stat for ``local``,
one inspect call for ``docker``) and otherwise starts one in the calling thread. Everything slow
(starting replacements, resetting and closing released sandboxes) happens on the pool's worker
threads. The ``a``-prefixed methods are the async twins; they never block the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Self

from agentgym.sandbox.base import Sandbox, SandboxError
from agentgym.sandbox.spec import SandboxSpec

__all__ = ["SandboxPool"]

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    """The state of one spec in the pool."""

    warm: deque[Sandbox] = field(default_factory=deque)
    starting: int = 0
    leased: int = 0
    last_used: float = field(default_factory=time.monotonic)
    active: bool = True
    """Refilled while active; a spec unused for ``idle_s`` goes inactive until acquired again."""
    last_error: BaseException | None = None


class SandboxPool:
    """Keeps ``warm`` started sandboxes ready per spec.

    Args:
        warm: sandboxes kept ready per spec (the first :meth:`acquire` of a spec starts filling).
        idle_s: a spec not acquired for this long has its warm sandboxes closed (and is refilled
            on its next acquire).
        check_interval_s: how often warm sandboxes are health-checked and dead ones replaced.
        reset: recycle released sandboxes with :meth:`Sandbox.reset` (kills their processes,
            empties their dirs). ``False`` keeps their processes (a long-running env server
            whose sessions are reset over HTTP) and only health-checks them.
        setup: called on every new sandbox after ``start()`` and after each ``reset()`` (e.g.
            spawn an env server and wait for its endpoint). A failing setup discards the sandbox.
        health_check: extra check on top of ``alive()``, at release and maintenance.
        max_workers: threads that start, reset and close sandboxes.
        session: ``session`` label of the sandboxes (docker: ``agentgym.session``).
    """

    def __init__(
        self,
        warm: int = 2,
        *,
        idle_s: float = 300.0,
        check_interval_s: float = 2.0,
        reset: bool = True,
        setup: Callable[[Sandbox], None] | None = None,
        health_check: Callable[[Sandbox], bool] | None = None,
        max_workers: int = 4,
        session: str | None = None,
    ) -> None:
        if warm < 0:
            raise ValueError("warm must be >= 0")
        self.warm, self.idle_s, self.check_interval_s = warm, idle_s, check_interval_s
        self._reset, self._setup, self._health_check = reset, setup, health_check
        self._session = session
        self._slots: dict[SandboxSpec, _Slot] = {}
        self._leases: dict[Sandbox, SandboxSpec] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers, thread_name_prefix="sandbox-pool")
        self._maintainer = threading.Thread(
            target=self._maintain, name="sandbox-pool-maintainer", daemon=True
        )
        self._maintainer.start()

    # --- sync API ------------------------------------------------------------------------------

    def acquire(self, spec: SandboxSpec) -> Sandbox:
        """A started, alive sandbox for ``spec``: a warm one if ready, else a new one started
        here. Give it back with :meth:`release`."""
        self._check_open()
        with self._lock:
            slot = self._slots.setdefault(spec, _Slot())
            slot.last_used, slot.active = time.monotonic(), True
        try:
            while True:
                with self._lock:
                    sb = slot.warm.popleft() if slot.warm else None
                if sb is None:
                    sb = self._new(spec)
                    break
                if sb.alive():
                    break
                self._workers.submit(sb.close)
        finally:
            self._refill(spec)
        with self._lock:
            slot.leased += 1
            self._leases[sb] = spec
        return sb

    def release(self, sb: Sandbox, *, healthy: bool = True) -> None:
        """Give a sandbox back. ``healthy=False`` (it misbehaved, timed out, ...) closes it;
        otherwise it is recycled in the background and becomes warm again."""
        with self._lock:
            spec = self._leases.pop(sb, None)
            if spec is None:
                raise ValueError(f"{sb!r} was not acquired from this pool")
            slot = self._slots[spec]
            slot.leased -= 1
        if self._closed.is_set() or not healthy:
            self._submit(sb.close)
            self._refill(spec)
        else:
            self._submit(self._recycle, spec, sb)

    @contextlib.contextmanager
    def lease(self, spec: SandboxSpec) -> Iterator[Sandbox]:
        """``with pool.lease(spec) as sb:`` acquire, then release (unhealthy if the body raised)."""
        sb = self.acquire(spec)
        healthy = False
        try:
            yield sb
            healthy = True
        finally:
            self.release(sb, healthy=healthy)

    def prewarm(self, spec: SandboxSpec, *, wait_s: float | None = None) -> None:
        """Start filling ``spec``'s warm sandboxes now; with ``wait_s``, block until they are
        ready (raising :class:`TimeoutError` otherwise)."""
        self._check_open()
        with self._lock:
            slot = self._slots.setdefault(spec, _Slot())
            slot.last_used, slot.active = time.monotonic(), True
        self._refill(spec)
        if wait_s is not None:
            deadline = time.monotonic() + wait_s
            while self.stats(spec)["warm"] < self.warm:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pool not warm after {wait_s} s (last error: {slot.last_error!r})")
                time.sleep(0.02)

    def stats(self, spec: SandboxSpec) -> dict[str, int]:
        """``warm``, ``starting`` and ``leased`` counts for ``spec``."""
        with self._lock:
            slot = self._slots.get(spec) or _Slot()
            return {"warm": len(slot.warm), "starting": slot.starting, "leased": slot.leased}

    def warm_sandboxes(self, spec: SandboxSpec) -> list[Sandbox]:
        """The warm sandboxes of ``spec`` right now (for inspection; do not use them)."""
        with self._lock:
            slot = self._slots.get(spec)
            return list(slot.warm) if slot else []

    def close(self) -> None:
        """Close every sandbox of the pool, leased ones included, and stop its threads."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._maintainer.join()
        self._workers.shutdown(wait=True)  # queued recycles and closes must run: they own sandboxes
        with self._lock:
            doomed = [sb for slot in self._slots.values() for sb in slot.warm] + list(self._leases)
            for slot in self._slots.values():
                slot.warm.clear()
            self._leases.clear()
        for sb in doomed:
            sb.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- async API -------------------------------------------------------------------------------

    async def aacquire(self, spec: SandboxSpec) -> Sandbox:
        """:meth:`acquire` on a worker thread."""
        return await asyncio.to_thread(self.acquire, spec)

    async def arelease(self, sb: Sandbox, *, healthy: bool = True) -> None:
        """:meth:`release` (which does not block: recycling happens in the background)."""
        self.release(sb, healthy=healthy)

    @contextlib.asynccontextmanager
    async def alease(self, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
        """``async with pool.alease(spec) as sb:``"""
        sb = await self.aacquire(spec)
        healthy = False
        try:
            yield sb
            healthy = True
        finally:
            self.release(sb, healthy=healthy)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # --- internals -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise SandboxError("the sandbox pool is closed")

    def _submit(self, fn: Callable[..., object], *args: object) -> None:
        try:
            self._workers.submit(fn, *args)
        except RuntimeError:  # workers shut down: the pool is closing, do it here
            fn(*args)

    def _new(self, spec: SandboxSpec) -> Sandbox:
        sb = spec.create(session=self._session).start()
        try:
            if self._setup is not None:
                self._setup(sb)
        except BaseException:
            sb.close()
            raise
        return sb

    def _healthy(self, sb: Sandbox) -> bool:
        try:
            return sb.alive() and (self._health_check is None or self._health_check(sb))
        except Exception:
            log.exception("health check of %r failed", sb)
            return False

    def _refill(self, spec: SandboxSpec) -> None:
        """Start as many sandboxes as ``spec`` lacks (warm + starting < target)."""
        with self._lock:
            slot = self._slots[spec]
            if self._closed.is_set() or not slot.active:
                return
            missing = self.warm - len(slot.warm) - slot.starting
            slot.starting += max(missing, 0)
        for _ in range(missing):
            self._submit(self._start_one, spec)

    def _start_one(self, spec: SandboxSpec) -> None:
        slot = self._slots[spec]
        if self._closed.is_set():
            with self._lock:
                slot.starting -= 1
            return
        try:
            sb = self._new(spec)
        except Exception as exc:
            log.warning("starting a sandbox for %s failed: %s", spec, exc)
            with self._lock:
                slot.starting -= 1
                slot.last_error = exc
            return
        self._park(spec, sb, starting=True)

    def _park(self, spec: SandboxSpec, sb: Sandbox, *, starting: bool = False) -> None:
        """Make ``sb`` warm, or close it if the spec is full, inactive or the pool closed."""
        with self._lock:
            slot = self._slots[spec]
            if starting:
                slot.starting -= 1
            keep = not self._closed.is_set() and slot.active and len(slot.warm) < self.warm
            if keep:
                slot.warm.append(sb)
        if not keep:
            sb.close()

    def _recycle(self, spec: SandboxSpec, sb: Sandbox) -> None:
        try:
            if self._reset:
                sb.reset()
                if self._setup is not None:
                    self._setup(sb)
            ok = self._healthy(sb)
        except Exception as exc:
            log.warning("recycling %r failed, replacing it: %s", sb, exc)
            ok = False
        if ok:
            self._park(spec, sb)
        else:
            sb.close()
            self._refill(spec)

    def _maintain(self) -> None:
        while not self._closed.wait(self.check_interval_s):
            now = time.monotonic()
            for spec, slot in list(self._slots.items()):
                with self._lock:
                    idle = slot.active and slot.leased == 0 and now - slot.last_used > self.idle_s
                    if idle:
                        slot.active = False
                    candidates = list(slot.warm)
                    if idle:
                        slot.warm.clear()
                if idle:
                    for sb in candidates:
                        self._submit(sb.close)
                    continue
                dead = [sb for sb in candidates if not self._healthy(sb)]
                with self._lock:  # only those still warm: others were acquired meanwhile
                    dead = [sb for sb in dead if sb in slot.warm]
                    for sb in dead:
                        slot.warm.remove(sb)
                for sb in dead:
                    self._submit(sb.close)
                if dead:
                    self._refill(spec)
