"""Several servers behind one policy: least-loaded routing, session affinity and failover.

A :class:`Router` holds one :class:`Server` per base URL of a policy and decides where each call
goes:

- A request goes to the server in rotation with the fewest requests in flight (ties: the one
  that has answered fewest), except that the requests of one session (an episode, or a seat of
  a game: ``GenerationRequest.session``) stay on the server the first one went to while that
  server is in rotation, so that its prefix cache holds the conversation so far.
- A call that fails on a server for a reason of the server's (no connection, a dropped one, a
  5xx or 429 answer after the policy's retries, no answer in time, an answer that is not what
  was asked) takes that server out of rotation and is sent again, unchanged, to another: a
  completion is re-requested with the same seed, so its result is the same wherever the
  servers run the same model. A 4xx answer is the request's own fault and is raised at once.
- A server out of rotation is probed (the policy's ``readmit``) once ``cooldown`` seconds have
  passed since it failed, in the background of the next call, and is back in rotation when the
  probe passes; sessions that moved away stay where they went.
- While no server is in rotation, calls still go to those out of it (the one out longest first).
  A call is sent to each server at most once; when every server has failed it, the policy's
  error is raised naming each failure.
- A lone server is never taken out of rotation (there is no other to go to): each call is sent
  to it, and its failure raised as it is.

Calls run with their server set in a context variable (:func:`current_server`), so that a
policy's one-call helper can find the server it is to use.

This module imports only the core (:mod:`agentgym.http`, :mod:`agentgym.policy`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from agentgym.http import PerLoop, RetryBudget, async_http_client, parse_endpoint
from agentgym.policy import PolicyUnavailable

__all__ = ["Router", "Server", "Unreachable", "base_urls", "current_server", "server_fault"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Sessions remembered at most; the least recently used are forgotten beyond (their next request
#: goes to the least-loaded server).
MAX_SESSIONS = 100_000

_current: ContextVar[Server | None] = ContextVar("agentgym_policy_server", default=None)


class Unreachable(PolicyUnavailable):
    """A server did not answer a check: no connection, no answer in time, or a 5xx answer."""


def base_urls(base_url: str | Sequence[str]) -> tuple[str, ...]:
    """The servers of a policy's ``base_url`` (one URL or a list of them), without trailing
    slashes. Raises ``ValueError`` for an empty list, a repeated URL, or an entry that is not an
    ``http(s)://`` or ``unix:`` endpoint."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls:
        raise ValueError("base_url lists no server")
    for url in urls:
        if not isinstance(url, str):
            raise ValueError(f"base_url entries must be URLs (strings), got {url!r}")
        parse_endpoint(url)
    stripped = tuple(url.rstrip("/") for url in urls)
    repeated = sorted({url for url in stripped if stripped.count(url) > 1})
    if repeated:
        raise ValueError(f"base_url lists a server more than once: {', '.join(repeated)}")
    return stripped


def server_fault(exc: BaseException) -> bool:
    """Whether a call that failed with ``exc`` failed because of its server: always, unless an
    HTTP answer among the exception's causes and contexts (where
    :func:`~agentgym.http.request_with_retries` leaves it) is a 4xx other than 429, which
    another server would give too."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.HTTPStatusError):
            status = seen.response.status_code
            return status == 429 or status >= 500
        seen = seen.__cause__ or seen.__context__
    return True


def current_server() -> Server | None:
    """The server of the routed call running in this task, if any."""
    return _current.get()


@dataclass(eq=False)
class Server:
    """One server of a :class:`Router`: its HTTP client and what the router knows of it."""

    url: str
    client: PerLoop[httpx.AsyncClient]
    """Its keep-alive client, one per event loop."""
    budget: RetryBudget = field(default_factory=RetryBudget)
    """What the calls to it share (for policies that pass one to ``request_with_retries``)."""
    healthy: bool = True
    """Whether it is in rotation."""
    in_flight: int = 0
    served: int = 0
    """Calls it answered."""
    failures: int = 0
    """Calls, checks and probes it failed for a reason of its own (a lone server counts none)."""
    error: str | None = None
    """Why it was last taken out (None while in rotation)."""
    out_since: float = 0.0
    """``time.monotonic()`` of its latest failure."""
    probe: asyncio.Task[None] | None = None

    def snapshot(self) -> dict[str, Any]:
        """``url``, ``healthy``, ``in_flight``, ``served``, ``failures`` and ``error``."""
        return {
            "url": self.url,
            "healthy": self.healthy,
            "in_flight": self.in_flight,
            "served": self.served,
            "failures": self.failures,
            "error": self.error,
        }


class Router:
    """Routes a policy's calls among its servers (see the module docstring).

    Args:
        urls: the servers' base URLs (see :func:`base_urls`).
        client: makes the HTTP client of a URL (called once per server and event loop).
        error: the policy's request error: a call that fails with it (and :func:`server_fault`)
            takes its server out of rotation; the error of a call that every server failed.
        readmit: probes a server out of rotation (and brings it up to date): a server is back
            in rotation when it returns, and stays out when it raises.
        cooldown: seconds from a server's failure to its next probe.
    """

    def __init__(
        self,
        urls: Sequence[str],
        client: Callable[[str], httpx.AsyncClient],
        *,
        error: type[Exception],
        readmit: Callable[[Server], Awaitable[Any]],
        cooldown: float = 10.0,
    ):
        if cooldown < 0:
            raise ValueError(f"cooldown must be >= 0 seconds, got {cooldown}")
        self.servers = tuple(Server(url, PerLoop(functools.partial(client, url))) for url in urls)
        self.error = error
        self.readmit = readmit
        self.cooldown = cooldown
        self._sessions: OrderedDict[str, Server] = OrderedDict()

    @classmethod
    def over_http(
        cls,
        urls: Sequence[str],
        *,
        timeout: float | None,
        api_key: str | None = None,
        error: type[Exception],
        readmit: Callable[[Server], Awaitable[Any]],
        cooldown: float = 10.0,
    ) -> Router:
        """A router of OpenAI-compatible servers, each reached with one
        :func:`~agentgym.http.async_http_client` per event loop: ``timeout`` seconds per call,
        ``Authorization: Bearer <api_key>`` when a key is given, and no bound on connections
        (the policy bounds its calls in flight)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return cls(
            urls,
            lambda url: async_http_client(
                url,
                timeout=timeout,
                headers=headers,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            ),
            error=error,
            readmit=readmit,
            cooldown=cooldown,
        )

    def snapshot(self) -> list[dict[str, Any]]:
        """Each server's :meth:`Server.snapshot`, with ``sessions``: how many sessions it
        holds."""
        held = {id(s): 0 for s in self.servers}
        for server in self._sessions.values():
            held[id(server)] += 1
        return [{**s.snapshot(), "sessions": held[id(s)]} for s in self.servers]

    def current(self) -> Server:
        """The server of the routed call running in this task; outside one, the server a call
        without a session would go to now."""
        server = _current.get()
        if server is not None and server in self.servers:
            return server
        picked = self._pick(None, ())
        assert picked is not None  # nothing tried yet: there is always one
        return picked

    async def run(self, session: str | None, call: Callable[[Server], Awaitable[T]]) -> T:
        """``call(server)`` on the server ``session`` goes to, and on the others in turn while it
        fails for a reason of the server's (each server at most once); the first answer is
        returned. When every server failed it, the failure is raised as it is (one server) or
        as the router's ``error`` naming each (several)."""
        tried: list[Server] = []
        failures: list[Exception] = []
        while (server := self._pick(session, tried)) is not None:
            tried.append(server)
            server.in_flight += 1
            try:
                result = await self._on(server, call)
            except self.error as exc:
                if not server_fault(exc):
                    raise
                self._take_out(server, exc)
                failures.append(exc)
                continue
            finally:
                server.in_flight -= 1
            server.served += 1
            return result
        raise self._failed(failures)

    async def broadcast(self, call: Callable[[Server], Awaitable[Any]]) -> None:
        """``call(server)`` on every server in rotation at once (on every server when none is):
        for what each server must have, such as new weights. A server that fails it for a reason
        of its own is taken out of rotation (its ``readmit`` brings it up to date); the call
        fails when any server refused it (a 4xx answer: raised as it is), or when no server
        took it (as :meth:`run` fails)."""
        targets = [s for s in self.servers if s.healthy] or list(self.servers)
        outcomes = await asyncio.gather(*(self._on(s, call) for s in targets), return_exceptions=True)
        failures: list[Exception] = []
        for server, outcome in zip(targets, outcomes, strict=True):
            if isinstance(outcome, self.error) and server_fault(outcome):
                self._take_out(server, outcome)
                failures.append(outcome)
        refused = [o for o in outcomes if isinstance(o, BaseException) and o not in failures]
        if refused:
            raise refused[0]
        if len(failures) == len(targets):
            raise self._failed(failures)

    async def check(self, check: Callable[[Server], Awaitable[T]]) -> list[tuple[Server, T]]:
        """``check(server)`` on every server at once; ``(server, result)`` of those that passed,
        in order. A server that is :class:`Unreachable` is taken out of rotation, with a
        ``UserWarning``, when another passes; any other
        :class:`~agentgym.policy.PolicyUnavailable` is raised (the first in the order of the
        servers), and so is the failure when no server answers (one server: as it is)."""
        outcomes = await asyncio.gather(*(self._on(s, check) for s in self.servers), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Unreachable):
                raise outcome
        down = [(s, o) for s, o in zip(self.servers, outcomes, strict=True) if isinstance(o, Unreachable)]
        if len(down) == len(self.servers):
            if len(down) == 1:
                raise down[0][1]
            raise PolicyUnavailable("no server answers: " + "; ".join(str(o) for _, o in down))
        for server, failure in down:
            warnings.warn(
                f"{server.url} is taken out of rotation and probed again every "
                f"{self.cooldown:g} s: {failure}",
                stacklevel=2,
            )
            self._take_out(server, failure)
        return [
            (s, o) for s, o in zip(self.servers, outcomes, strict=True) if not isinstance(o, BaseException)
        ]

    async def aclose(self) -> None:
        """Stop the probes and close the clients of the running loop (idempotent)."""
        loop = asyncio.get_running_loop()
        for server in self.servers:
            if server.probe is not None and server.probe.get_loop() is loop:
                server.probe.cancel()
            client = server.client.pop()
            if client is not None:
                await client.aclose()

    # ---------------------------------------------------------------------------------- inside

    async def _on(self, server: Server, call: Callable[[Server], Awaitable[T]]) -> T:
        token = _current.set(server)
        try:
            return await call(server)
        finally:
            _current.reset(token)

    def _pick(self, session: str | None, tried: Sequence[Server]) -> Server | None:
        """Where the next call of ``session`` goes, among the servers not ``tried``; None when
        every server was."""
        self._start_due_probes()
        pinned = None if session is None else self._sessions.get(session)
        if session is not None and pinned is not None and pinned.healthy and pinned not in tried:
            self._sessions.move_to_end(session)
            return pinned
        healthy = [s for s in self.servers if s.healthy and s not in tried]
        if healthy:
            server = min(healthy, key=lambda s: (s.in_flight, s.served))
            if session is not None:
                self._sessions[session] = server
                self._sessions.move_to_end(session)
                if len(self._sessions) > MAX_SESSIONS:
                    self._sessions.popitem(last=False)
            return server
        return min((s for s in self.servers if s not in tried), key=lambda s: s.out_since, default=None)

    def _take_out(self, server: Server, failure: BaseException) -> None:
        if len(self.servers) == 1:  # there is no other to go to
            return
        if server.healthy:
            log.warning("policy server %s is out of rotation: %s", server.url, failure)
        server.healthy, server.error = False, str(failure)
        server.failures += 1
        server.out_since = time.monotonic()

    def _start_due_probes(self) -> None:
        now, loop = time.monotonic(), asyncio.get_running_loop()
        for server in self.servers:
            if server.healthy or now - server.out_since < self.cooldown:
                continue
            probing = server.probe is not None and server.probe.get_loop() is loop and not server.probe.done()
            if not probing:
                server.probe = loop.create_task(self._probe(server))

    async def _probe(self, server: Server) -> None:
        try:
            await self._on(server, self.readmit)
        except Exception as exc:
            self._take_out(server, exc)
        else:
            log.warning("policy server %s is back in rotation", server.url)
            server.healthy, server.error = True, None

    def _failed(self, failures: Sequence[Exception]) -> Exception:
        """The error of a call that every server failed."""
        if len(failures) == 1:
            return failures[0]
        return self.error("every server failed: " + "; ".join(str(f) for f in failures))
