"""The env server's HTTP API: a Starlette app over a
:class:`~agentgym.server.sessions.SessionStore`.

========================================  =====================================================
request                                   answer
========================================  =====================================================
``GET /health``                           ``{"status": "ok", "sessions", "max_sessions",
                                          "idle_timeout_s", "closed_envs", "reaped", "pid",
                                          "uptime_s", "version"}``
``GET /envs``                             ``{"envs": [{"id", "kind", "family", "description"}]}``
``POST /sessions``                        ``{"session_id", "env_id", "kind", "max_body_bytes",
                                          ...spaces}``
``{env_id, kwargs?, kind?}``              (see :func:`_describe`)
``POST /sessions/{id}/reset``             single: ``{"observation", "info"}``; parallel:
``{seed?, options?}``                     ``{"observations", "infos", "agents"}``
``POST /sessions/{id}/step``              ``{"observation", "reward", "terminated",
``{action}`` or ``{actions: {agent: a}}`` "truncated", "info"}``; parallel: ``{"observations",
                                          "rewards", "terminations", "truncations", "infos",
                                          "agents"}``
``DELETE /sessions/{id}``                 ``{"session_id", "closed": true}``
========================================  =====================================================

With a token (:mod:`~agentgym.server.auth`) every request needs ``Authorization: Bearer
<token>``; without it the answer is 401 ``unauthorized``.

Errors are JSON ``{"error": code, "detail": text}`` with the statuses of
:data:`agentgym.server.errors.STATUS`; the server keeps serving after any of them. Values are
encoded by :mod:`agentgym.server.jsonsafe` (numpy scalars and arrays, tuples, sets, ... become
JSON; anything else its ``str``). Agent names of parallel envs are JSON object keys, so they
travel as strings; ``possible_agents`` keeps their JSON type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from agentgym._version import __version__
from agentgym.server import limits
from agentgym.server.auth import BearerAuth, NoBrowsers
from agentgym.server.bodies import (
    CreateBody,
    ParallelStepBody,
    ResetBody,
    StepBody,
    parse_body,
    read_object,
)
from agentgym.server.errors import ApiError
from agentgym.server.hostable import check_client_kwargs, hostable_envs, make_env
from agentgym.server.jsonsafe import dumps
from agentgym.server.sessions import Session, SessionStore
from agentgym.server.spaces import describe_space

__all__ = ["ServerConfig", "create_app"]

log = logging.getLogger("agentgym.server")


@dataclass(frozen=True)
class ServerConfig:
    """Limits and policy of one server.

    Attributes:
        max_sessions: sessions open at once; one more answers 503 ``too_many_sessions``.
        idle_timeout_s: seconds without a call after which a session is closed.
        max_body_bytes: largest request body; a larger one answers 413 ``body_too_large``.
        step_timeout_s: the longest a reset or step may run; past it the answer is 504
            ``step_timeout`` and the session is closed (the env's own limits, such as ToolUse's
            per-call timeout, are meant to end calls well before).
        env_allowlist: env ids (or entry points) sessions may name; ``None`` allows every
            registered id. Others answer 403 ``env_not_allowed``.
        allow_entry_points: accept ``"module:factory"`` env ids (runs code the client names).
        allowed_kwargs: constructor kwargs clients may set beyond those the env's manifest
            declares safe for clients, with no ceiling (see :mod:`~agentgym.server.hostable`);
            ``None``: every kwarg (a server whose only client is its operator).
        data_root: the directory inside which clients' host paths (an env's ``path_kwargs``
            the operator allowed) are resolved; ``None``: clients name no host path.
        token: the bearer token every request must carry (:mod:`~agentgym.server.auth`);
            ``None``: none (:func:`~agentgym.server.serve.serve` then binds loopback or a Unix
            socket only).
    """

    max_sessions: int = limits.MAX_SESSIONS
    idle_timeout_s: float = limits.IDLE_TIMEOUT_S
    max_body_bytes: int = limits.MAX_BODY_BYTES
    step_timeout_s: float = limits.STEP_TIMEOUT_S
    env_allowlist: frozenset[str] | None = None
    allow_entry_points: bool = False
    allowed_kwargs: frozenset[str] | None = frozenset()
    data_root: Path | None = None
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (
            self.max_sessions < 1
            or not self.idle_timeout_s > 0
            or self.max_body_bytes < 1
            or not self.step_timeout_s > 0
        ):
            raise ValueError(
                f"max_sessions and max_body_bytes must be >= 1 and idle_timeout_s "
                f"and step_timeout_s > 0, got {self.max_sessions}, "
                f"{self.max_body_bytes}, {self.idle_timeout_s}, {self.step_timeout_s}"
            )


def _json(payload: Any, status: int = 200) -> Response:
    return Response(dumps(payload), status_code=status, media_type="application/json")


class _Api:
    """The endpoints, over one store."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.store = SessionStore(config.max_sessions, config.idle_timeout_s, config.step_timeout_s)
        self.started = time.monotonic()

    async def health(self, request: Request) -> Response:
        store = self.store
        return _json(
            {
                "status": "ok",
                "sessions": len(store),
                "max_sessions": store.max_sessions,
                "idle_timeout_s": store.idle_timeout_s,
                "closed_envs": store.closed_envs,
                "reaped": store.reaped,
                "pid": os.getpid(),
                "uptime_s": time.monotonic() - self.started,
                "version": __version__,
            }
        )

    async def envs(self, request: Request) -> Response:
        return _json({"envs": hostable_envs(self.config.env_allowlist)})

    async def create(self, request: Request) -> Response:
        body = parse_body(CreateBody, await read_object(request, self.config.max_body_bytes))
        env_id, kwargs, kind = body.env_id, body.kwargs or {}, body.kind
        allowlist = self.config.env_allowlist
        if allowlist is not None and env_id not in allowlist:
            raise ApiError("env_not_allowed", f"this server hosts only {sorted(allowlist)}")
        kwargs = check_client_kwargs(env_id, kwargs, self.config.allowed_kwargs, self.config.data_root)
        allow_entry_points = self.config.allow_entry_points
        session = await self.store.create(
            lambda: make_env(env_id, kwargs, kind, allow_entry_points=allow_entry_points), env_id
        )
        return _json(_describe(session) | {"max_body_bytes": self.config.max_body_bytes})

    async def reset(self, request: Request) -> Response:
        session = self.store.get(request.path_params["session_id"])
        with session.admitted():
            body = parse_body(ResetBody, await read_object(request, self.config.max_body_bytes))
            result = await session.reset(body.seed, body.options)
        if session.kind == "single":
            observation, info = result
            return _json({"observation": observation, "info": info})
        observations, infos = result
        return _json({"observations": observations, "infos": infos, "agents": _agents(session)})

    async def step(self, request: Request) -> Response:
        session = self.store.get(request.path_params["session_id"])
        with session.admitted():
            return await self._step(session, request)

    async def _step(self, session: Session, request: Request) -> Response:
        body = await read_object(request, self.config.max_body_bytes)
        session.check_usable()
        if session.kind == "single":
            action = _action(session.env.action_space, parse_body(StepBody, body).action, "action")
            obs, reward, terminated, truncated, info = await session.step(action)
            return _json(
                {
                    "observation": obs,
                    "reward": reward,
                    "terminated": terminated,
                    "truncated": truncated,
                    "info": info,
                }
            )
        actions = _agent_actions(session, parse_body(ParallelStepBody, body).actions)
        obs, rewards, terminations, truncations, infos = await session.step(actions)
        return _json(
            {
                "observations": obs,
                "rewards": rewards,
                "terminations": terminations,
                "truncations": truncations,
                "infos": infos,
                "agents": _agents(session),
            }
        )

    async def delete(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        await self.store.delete(session_id)
        return _json({"session_id": session_id, "closed": True})


def _describe(session: Session) -> dict[str, Any]:
    """The create answer: ``session_id``, ``env_id``, ``kind``, ``metadata``; single sessions add
    ``observation_space``, ``action_space`` (see :func:`~agentgym.server.spaces.describe_space`),
    ``family`` and ``step_in_thread``; parallel sessions add ``possible_agents``,
    ``observation_spaces`` and ``action_spaces`` (by agent)."""
    env = session.env
    answer: dict[str, Any] = {
        "session_id": session.id,
        "env_id": session.env_id,
        "kind": session.kind,
        "metadata": dict(env.metadata),
    }
    if session.kind == "single":
        answer |= {
            "observation_space": describe_space(env.observation_space),
            "action_space": describe_space(env.action_space),
            "family": getattr(session.core, "family", "misc"),
            "step_in_thread": not session.inline,
        }
    else:
        agents = list(env.possible_agents)
        answer |= {
            "possible_agents": agents,
            "observation_spaces": {str(a): describe_space(env.observation_space(a)) for a in agents},
            "action_spaces": {str(a): describe_space(env.action_space(a)) for a in agents},
        }
    return answer


def _agents(session: Session) -> list[Any]:
    return list(session.env.agents) if session.env is not None else []


def _agent_actions(session: Session, actions: dict[str, Any]) -> dict[Any, Any]:
    """``actions`` keyed by the env's own agent objects (JSON keys are strings), each one
    :func:`_action` of its agent's space. 409 ``reset_needed`` while no agent is live (before the
    first reset, after the game's end); 422 for unknown or finished agents."""
    live = {str(a): a for a in _agents(session)}
    if not live:
        raise ApiError("reset_needed", "no agent is live: reset the session (a game starts with its reset)")
    unknown = sorted(set(actions) - set(live))
    if unknown:
        raise ApiError(
            "invalid_request",
            f"actions for agents that are not live: {unknown}; live agents: {sorted(live)}",
            field="actions",
        )
    return {
        live[name]: _action(session.env.action_space(live[name]), action, f"actions.{name}")
        for name, action in actions.items()
    }


def _action(space: spaces.Space[Any], action: Any, field: str) -> Any:
    """``action`` as the env takes it, else 422 ``invalid_request``: for a text space any string
    (the env itself answers a bad one, as an invalid action), for any other space a member of it
    (a ``Box``'s as an array of its dtype). An env never sees a value its space refuses."""
    if isinstance(space, spaces.Text):
        if isinstance(action, str):
            return action
        raise ApiError("invalid_request", f"field {field!r} must be a string (actions are text)", field=field)
    if isinstance(space, spaces.Box):
        with contextlib.suppress(ValueError, TypeError, OverflowError):
            action = np.asarray(action, dtype=space.dtype)
    try:
        inside = space.contains(action)
    except Exception:  # a space's own check failing on a value it never expected
        inside = False
    if not inside:
        shown = repr(action)
        shown = shown if len(shown) <= 80 else f"{shown[:80]}..."
        raise ApiError(
            "invalid_request", f"field {field!r}: {shown} is not in the action space {space}", field=field
        )
    return action


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _json(exc.payload(), exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = "method_not_allowed" if exc.status_code == 405 else "not_found"
    return _json(
        {"error": code, "detail": f"{request.method} {request.url.path}: {exc.detail}"}, exc.status_code
    )


async def _disconnected(request: Request, exc: Exception) -> Response:
    """A client that hung up while sending its request: one log line (nobody reads an answer)."""
    log.info(
        "client %s hung up during %s %s",
        request.client.host if request.client else "?",
        request.method,
        request.url.path,
    )
    return Response(status_code=400)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return _json(
        {
            "error": "internal_error",
            "detail": f"{type(exc).__name__}: {exc}",
            "exception_type": type(exc).__name__,
        },
        500,
    )


def create_app(config: ServerConfig | None = None) -> Starlette:
    """The ASGI app. Its lifespan runs the idle reaper and, at shutdown, closes every env."""
    api = _Api(config or ServerConfig())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        reaper = asyncio.create_task(api.store.reap_forever())
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await api.store.close_all()

    app = Starlette(
        routes=[
            Route("/health", api.health, methods=["GET"]),
            Route("/envs", api.envs, methods=["GET"]),
            Route("/sessions", api.create, methods=["POST"]),
            Route("/sessions/{session_id}/reset", api.reset, methods=["POST"]),
            Route("/sessions/{session_id}/step", api.step, methods=["POST"]),
            Route("/sessions/{session_id}", api.delete, methods=["DELETE"]),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _disconnected,
            Exception: _internal_error,
        },
        middleware=[
            Middleware(NoBrowsers),
            *([Middleware(BearerAuth, token=api.config.token)] if api.config.token else []),
        ],
        lifespan=lifespan,
    )
    return app
