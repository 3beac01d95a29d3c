"""Any agentgym env served to OpenEnv's clients, over openenv-core's own server.

    agentgym serve --protocol openenv --env agentgym/GuessNumber-v0 --port 8001

    from openenv.core import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8001").sync() as client:
        result = client.reset(seed=0)             # result.observation["text"], ["info"]
        result = client.step({"action": "4"})     # result.reward, result.done
        state = client.state()                    # {"env_id", "task_id", "step_count", ...}

(or the typed :class:`TextEnvClient`, with :class:`TextAction`). :func:`create_app` builds
openenv-core's app (``create_fastapi_app``, an ``HTTPEnvServer``) around
:class:`OpenEnvEnvironment`, an openenv ``Environment`` that wraps one agentgym env. The
protocol is openenv's:

* ``/ws`` (WebSocket; what openenv's clients speak): each connection is a session with an env of
  its own, made by its first ``reset`` and closed when the connection ends (or after
  ``idle_timeout_s`` without a message). Messages ``{"type": "reset", "data": {"seed",
  "episode_id", "options"}}``, ``{"type": "step", "data": {"action": "..."}}``, ``{"type":
  "state"}``, ``{"type": "close"}``; answers ``{"type": "observation", "data": {"observation":
  {"text", "info", "terminated", "truncated"}, "reward", "done"}}`` and ``{"type": "state",
  "data": {...TextState}}``. An error (a reset option the env refuses, a step before reset) is
  answered ``{"type": "error", "data": {"message", "code"}}`` and the session goes on; openenv's
  clients raise it as ``RuntimeError("Server error: ...")``.
* ``POST /reset``, ``POST /step``, ``GET /state``: openenv's stateless HTTP endpoints, each on a
  fresh env (``/step`` thus always answers 409: no reset); ``GET /health``, ``/schema``,
  ``/metadata``.

Nothing else is served: openenv's other routes (``/mcp`` over HTTP and WebSocket, whose
JSON-RPC ``openenv/session/create`` would take a session slot tied to no connection, and its
``/docs``, ``/redoc``, ``/openapi.json``) are answered 404, or their WebSocket handshake 403,
before openenv sees them; a ``/ws`` message of another type than the four above (openenv's
``mcp``: agentgym envs have no MCP tools) is answered ``{"type": "error", "data": {"message",
"code": "UNKNOWN_TYPE"}}`` without reaching openenv.

The env id and its kwargs are the operator's (``agentgym serve --env ID --set KEY=VALUE``);
clients choose only seeds, reset options and actions. A bad action is answered as the env
answers it (``info["action_valid"] = False``), never as a server error.

Security: **loopback only.** openenv's clients send no credentials, so this server has no token:
:func:`serve` refuses any address but a loopback one (there is no Unix socket either: openenv's
clients cannot reach one). Requests and WebSocket handshakes that carry an ``Origin`` header,
which browsers send and openenv's clients do not, are refused (403), so that a web page open in
a local browser cannot drive the server. Bounds:

* ``max_sessions`` sessions, hence session envs, at once: a session is a ``/ws`` connection and
  nothing else, and its slot is freed only once the connection has ended and its env is
  closed. After ``idle_timeout_s`` without a message the server closes the connection (code
  1000, reason ``idle``), which ends the session. (openenv's own idle reaper, off here, freed
  the slot and closed the env under a connection that went on, whose next ``reset`` made an
  env nobody closed.)
* HTTP request bodies up to :data:`MAX_BODY_BYTES`, counted as they stream in (chunked ones
  too): a longer one is answered 413 and its connection closed, the rest of it unread.
  ``POST /reset`` makes a transient env outside the sessions, at most 32 at once (openenv's
  thread pool).
* WebSocket messages up to uvicorn's 16 MiB; no step deadline (the client's
  ``message_timeout_s``, 60 s by default, gives up on a step; the env's step goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import gymnasium as gym
from fastapi import HTTPException
from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server import (
    Action,
    ConcurrencyConfig,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)
from openenv.core.env_server.types import EnvironmentMetadata, WSErrorCode, WSErrorResponse
from pydantic import Field
from starlette.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

import agentgym
from agentgym._version import __version__
from agentgym.registry import UnknownEnvError, manifest, require_single
from agentgym.server.auth import NoBrowsers, is_loopback
from agentgym.server.jsonsafe import to_jsonable
from agentgym.server.serve import ClientLimits, serve_app

__all__ = [
    "MAX_BODY_BYTES",
    "OpenEnvEnvironment",
    "TextAction",
    "TextEnvClient",
    "TextObservation",
    "TextState",
    "create_app",
    "serve",
]

#: Most bytes an HTTP request's body may take, counted as it streams in (also a chunked one,
#: which declares no length); a longer one is answered 413 and its connection closed, the rest
#: of it unread.
MAX_BODY_BYTES = 1 << 20
#: The HTTP routes served (any other is answered 404), and the WebSocket one, with the
#: message types passed on to openenv (see the module doc).
_HTTP_ROUTES = frozenset({"/reset", "/step", "/state", "/health", "/schema", "/metadata"})
_WS_ROUTE = "/ws"
_WS_MESSAGE_TYPES = ("reset", "step", "state", "close")


class TextAction(Action):
    """One action of an agentgym env."""

    action: str = Field(description="the action text, as the env's prompt asks for it")


class TextObservation(Observation):
    """What ``reset`` and ``step`` return; ``reward`` and ``done`` (``terminated or
    truncated``) are openenv's fields. ``info`` is the env's, as JSON
    (:mod:`agentgym.server.jsonsafe`)."""

    text: str = Field(description="the observation")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict")
    terminated: bool = Field(default=False, description="the episode reached an end state")
    truncated: bool = Field(default=False, description="the episode was cut short (turn limit)")


class TextState(State):
    """The session's episode: openenv's ``episode_id`` and ``step_count``, and agentgym's."""

    env_id: str = Field(description="the agentgym env id")
    task_id: str | None = Field(default=None, description="the episode's task (info['task_id'])")
    episode_return: float = Field(default=0.0, description="the sum of the episode's rewards")


class OpenEnvEnvironment(Environment[TextAction, TextObservation, TextState]):
    """One agentgym env behind openenv's ``Environment`` interface. The env is made by the
    first ``reset`` (openenv's server also makes this object for stateless requests, which need
    none) in the session's thread, where it then runs: envs bound to a thread (a browser) work."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has an env of its own

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]):
        super().__init__()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self._env: gym.Env | None = None
        self._state = TextState(env_id=env_id)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **unknown: Any,
    ) -> TextObservation:
        """Start an episode: Gymnasium's ``reset(seed=seed, options=options)`` (``options``:
        ``{"task_id": ...}`` for a given task). Other keywords raise ``ValueError`` (openenv's
        server would drop them silently if the signature did not take them)."""
        if unknown:
            raise ValueError(
                f"unknown reset argument(s) {sorted(unknown)}; accepted: seed, episode_id, options"
            )
        if self._env is None:
            self._env = agentgym.make(self.env_id, **self.env_kwargs)
        text, info = self._env.reset(seed=seed, options=options)
        self._state = TextState(
            env_id=self.env_id,
            episode_id=episode_id or uuid.uuid4().hex,
            task_id=info.get("task_id"),
        )
        return TextObservation(text=text, info=to_jsonable(info))

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        """Step the env with ``action.action``. ``timeout_s`` (openenv's HTTP field) is not
        enforced: agentgym envs bound their own calls."""
        if self._env is None:  # a 409 over HTTP; over WebSocket, an error message like any other
            raise HTTPException(409, f"{self.env_id}: step before reset; reset first")
        # Text that UTF-8 cannot carry (lone surrogates from a JSON escape) would make the
        # answer, which may quote the action, unsendable: the env gets U+FFFD instead.
        text = action.action.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        observation, reward, terminated, truncated, info = self._env.step(text)
        self._state.step_count += 1
        self._state.episode_return += float(reward)
        return TextObservation(
            text=observation,
            info=to_jsonable(info),
            reward=float(reward),
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
        )

    @property
    def state(self) -> TextState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.env_id, description=manifest(self.env_id).description, version=__version__
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class TextEnvClient(EnvClient[TextAction, TextObservation, TextState]):
    """openenv's typed client for this server: ``step`` takes a :class:`TextAction`, results
    hold :class:`TextObservation` and ``state()`` a :class:`TextState`. openenv's
    ``GenericEnvClient`` works as well, with plain dicts."""

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        observation = TextObservation(
            **payload["observation"], reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> TextState:
        return TextState(**payload)


_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[Any]]
_Send = Callable[[Any], Awaitable[None]]
_Asgi = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


class _Quiet:
    """ASGI middleware in front of openenv's app: a session that the client closed first ends
    quietly (openenv then closes the socket again, which Starlette raises as
    ``WebSocketDisconnect`` and uvicorn would log as an error), once its env is closed."""

    def __init__(self, app: _Asgi):
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        with contextlib.suppress(WebSocketDisconnect):
            await self.app(scope, receive, send)


class _Served:
    """ASGI middleware in front of openenv's app that serves only what the module doc lists:

    * HTTP: a path not in ``_HTTP_ROUTES`` is answered 404; a body is read whole, up to
      :data:`MAX_BODY_BYTES` (a longer one is answered 413 and its connection closed, the rest
      unread), before ``app`` gets it.
    * WebSocket: a path other than ``/ws`` is closed before it is accepted (uvicorn answers
      the handshake 403). On ``/ws``, a JSON object message whose ``type`` is not one of
      ``_WS_MESSAGE_TYPES`` is answered an ``UNKNOWN_TYPE`` error and not passed on; after
      ``idle_timeout_s`` without a message (``None``: never) the connection is closed (code
      1000, reason ``idle``) and ``app`` told that the client left, so that it ends the
      session and closes its env.
    """

    def __init__(self, app: _Asgi, idle_timeout_s: float | None):
        self.app = app
        self.idle_timeout_s = idle_timeout_s

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:  # lifespan
            await self.app(scope, receive, send)

    async def _http(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["path"] not in _HTTP_ROUTES:
            await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY_BYTES:
                detail = f"the request body exceeds {MAX_BODY_BYTES} bytes"
                closing = {"connection": "close"}  # uvicorn then reads no more of it
                await JSONResponse({"detail": detail}, 413, closing)(scope, receive, send)
                return
            more = message.get("more_body", False)
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Any:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _websocket(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["path"] != _WS_ROUTE:
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        closed = False

        async def receive_served() -> Any:
            nonlocal closed
            while True:
                try:
                    message = await asyncio.wait_for(receive(), self.idle_timeout_s)
                except TimeoutError:
                    closed = True
                    await send({"type": "websocket.close", "code": 1000, "reason": "idle"})
                    return {"type": "websocket.disconnect", "code": 1000}
                refusal = _refusal(message)
                if refusal is None:
                    return message
                await send({"type": "websocket.send", "text": refusal})

        async def send_served(message: Any) -> None:
            if not closed:  # openenv closes the socket again once it has ended the session
                await send(message)

        await self.app(scope, receive_served, send_served)


def _refusal(message: Mapping[str, Any]) -> str | None:
    """The error answer to a ``/ws`` message that is a JSON object of a type not served, else
    ``None`` (openenv answers anything else, also JSON it cannot parse)."""
    text = message.get("text") if message["type"] == "websocket.receive" else None
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("type") in _WS_MESSAGE_TYPES:
        return None
    error = {
        "message": f"unknown message type {value.get('type')!r}; served: {', '.join(_WS_MESSAGE_TYPES)}",
        "code": WSErrorCode.UNKNOWN_TYPE,
    }
    return WSErrorResponse(data=error).model_dump_json()


def create_app(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 600.0,
) -> Any:
    """openenv-core's app serving ``env_id`` (made with ``env_kwargs``) to openenv's clients,
    behind middleware that refuses browsers and serves only the routes and messages of the
    module doc, bounded as it says.

    One env is made and closed here, so that an unknown id
    (:class:`~agentgym.UnknownEnvError`) or bad kwargs (``TypeError``, ``ValueError``) fail now,
    not in every session. ``max_sessions``: WebSocket sessions at once (one more is refused);
    ``idle_timeout_s``: a session without a message for that long has its connection closed
    (``None``: never; else it must be > 0, or ``ValueError``).
    """
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 seconds or None, got {idle_timeout_s}")
    require_single(env_id)
    env_kwargs = dict(env_kwargs or {})
    agentgym.make(env_id, **env_kwargs).close()
    app = create_fastapi_app(
        # a partial of the class: openenv reads SUPPORTS_CONCURRENT_SESSIONS without making one
        functools.partial(OpenEnvEnvironment, env_id, env_kwargs),
        TextAction,
        TextObservation,
        # no session_timeout: openenv's reaper would free a slot under a live connection
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions),
    )
    return NoBrowsers(_Served(_Quiet(app), idle_timeout_s))


def serve(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 600.0,
    ready_file: str | None = None,
    log_level: str = "warning",
    client_limits: ClientLimits = ClientLimits(),
) -> None:
    """Serve :func:`create_app` until SIGTERM/SIGINT (blocking), with the readiness line, ready
    file, client bounds (``client_limits``) and graceful shutdown of
    :func:`agentgym.server.serve.serve_app` (``port=0`` binds a free port). A ``host`` that is
    not loopback, an unknown id and bad kwargs end the process (``SystemExit``) before anything
    is bound."""
    if not is_loopback(host):
        raise SystemExit(
            f"agentgym serve --protocol openenv: binding {host} would let other machines in, and "
            "openenv's clients send no token: bind 127.0.0.1 (or ::1)"
        )
    try:
        app = create_app(env_id, env_kwargs, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
    except (UnknownEnvError, TypeError, ValueError) as exc:
        raise SystemExit(f"agentgym serve: {exc}") from None
    serve_app(app, host, port, ready_file=ready_file, log_level=log_level, client_limits=client_limits)
