"""Run an env server: bind, serve with uvicorn, announce readiness, shut down gracefully.

Readiness contract (what a parent process, such as a sandbox launcher, relies on): once the
server accepts connections it prints one line ``agentgym serve: ready {JSON}`` to stdout and, if
a ready file was named, atomically writes the same JSON object to it (written to a temporary
name in the same directory, then renamed). The object has ``pid`` and ``url`` and either
``host``/``port`` (the port actually bound, also for ``port=0``) or ``uds`` (the socket's path).

Shutdown: SIGTERM or SIGINT stops accepting, lets calls in flight finish (at most
``GRACEFUL_SHUTDOWN_S``), closes every env, and exits; the process then ends by the signal it
got, as uvicorn arranges (exit status -15 for SIGTERM). An env call stuck in a worker thread
keeps the process from exiting: the launcher's SIGKILL (``ServerProcess.stop``) ends it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import resource
import socket
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from agentgym.files import atomic_write
from agentgym.server import limits
from agentgym.server.app import ServerConfig, create_app
from agentgym.server.auth import check_bind, server_token

__all__ = ["ClientLimits", "serve", "serve_app", "uvicorn_server"]

#: Seconds a graceful shutdown waits for calls in flight before closing the envs anyway.
GRACEFUL_SHUTDOWN_S = 10
#: Seconds an idle keep-alive connection stays open; longer than httpx's default of 5 s on the
#: client side, so that the client, not the server, closes idle connections (no reuse race).
KEEP_ALIVE_S = 75

#: Most bytes a request line and headers may take (counted with any body bytes that arrive in
#: the same reads); a request whose head runs past it is answered 400 and its connection closed.
MAX_HEAD_BYTES = 1 << 20
#: Seconds a connection refused for its client's cap stays open after its 503, reading (and
#: dropping) what the client sends, so that the client reads the answer.
REFUSED_LINGER_S = 1.0
#: A request timer that fires this close to its deadline counts as on time (the event loop may
#: run a timer up to its clock resolution early).
_TIMER_SLACK_S = 0.01


@dataclass(frozen=True)
class ClientLimits:
    """What one client may take of a server: time to send a request (past either time the
    request is answered 408, unless its answer has begun, and its connection closed), and
    connections held open at once."""

    head_s: float = limits.HEAD_TIMEOUT_S
    """Seconds for a request line and headers, from when the connection opens and, kept
    alive, from the first byte of each later request."""
    body_s: float = limits.BODY_TIMEOUT_S
    """Seconds from the end of a head to the end of its body; time in which the server is not
    reading (busy with the request before it on the connection) does not count."""
    connections: int = limits.CLIENT_CONNECTIONS
    """Connections one client address may hold open at once (TCP clients; those of a Unix
    socket are not counted); one more is answered 503 and closed. 0: no cap."""

    def __post_init__(self) -> None:
        if not (self.head_s > 0 and self.body_s > 0):
            raise ValueError(f"request timeouts must be > 0 seconds, got {self}")
        if self.connections < 0:
            raise ValueError(f"connections must be >= 0 (0: no cap), got {self.connections}")


class _Server(uvicorn.Server):
    """A uvicorn server that calls ``on_ready`` once it accepts connections and ``on_stopped``
    once it has shut down (before uvicorn raises again the signal that stopped it, which ends
    the process)."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_ready: Callable[[], None] | None,
        on_stopped: Callable[[], None] | None,
    ):
        super().__init__(config)
        self._on_ready, self._on_stopped = on_ready, on_stopped

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._on_ready is not None:
            self._on_ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets=sockets)
        finally:
            if self._on_stopped is not None:
                self._on_stopped()


def uvicorn_server(
    app: Any,
    *,
    log_level: str = "warning",
    client_limits: ClientLimits = ClientLimits(),
    on_ready: Callable[[], None] | None = None,
    on_stopped: Callable[[], None] | None = None,
) -> uvicorn.Server:
    """A uvicorn server of ``app`` as every agentgym server runs: no access log, lifespan
    events, a listen backlog of 4096, request heads bounded to :data:`MAX_HEAD_BYTES`, clients
    to ``client_limits``, idle keep-alive connections closed after :data:`KEEP_ALIVE_S`, a
    graceful shutdown of at most :data:`GRACEFUL_SHUTDOWN_S`, no ``Server``/``Date`` headers.
    It calls ``on_ready`` once it accepts connections and ``on_stopped`` once it has shut down.
    Serve with ``server.run(sockets=[sock])`` on a socket bound beforehand (so that its port is
    known)."""
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        http=_http_protocol(client_limits),
        backlog=4096,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
        date_header=False,
    )
    return _Server(config, on_ready, on_stopped)


def _http_protocol(client_limits: ClientLimits) -> type:
    """uvicorn's httptools protocol with each request bounded in size and in time, and each
    client address in connections.

    - Head size: a request line and headers past :data:`MAX_HEAD_BYTES` are answered 400 and
      the connection closed. httptools alone buffers them without bound, before the token is
      checked: a 100 MB header cost a server 12 s of CPU and 250 MB.
    - Time: :class:`ClientLimits` for the head and for the body.
    - Connections: a client address past ``client_limits.connections`` open at once is answered
      503 on the new connection, which is closed. Without it one client that opens connections
      faster than the head timeout closes them holds as many file descriptors as it likes,
      without the token.

    Past either time the request is answered 408 (unless its answer has begun) and the
    connection closed. uvicorn alone waits forever for a connection that sends nothing, or a
    byte at a time, each holding a file descriptor; and a body is often sent after its answer
    (a 401 before the body is read), which kept the connection alive for as long as it came.
    (uvicorn's h11 protocol bounds a head's size itself but not its time, and would cost 40% of
    the steps a loaded server answers per second.)"""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    head_timeout_s, body_timeout_s = client_limits.head_s, client_limits.body_s
    most_connections = client_limits.connections
    open_by_client: collections.Counter[str] = collections.Counter()
    """This server's open connections, by client address (TCP clients, when capped)."""

    def uncount(client: str) -> None:
        open_by_client[client] -= 1
        if not open_by_client[client]:
            del open_by_client[client]

    class BoundedRequest(HttpToolsProtocol):
        _head_bytes = 0
        _in_body = False
        _deadline: float | None = None
        """When the head or the body under way must be in (loop time); ``None`` between
        requests."""
        _timer: asyncio.TimerHandle | None = None
        """Fires at or before ``_deadline``. A request moves the deadline, not the timer (two
        timers made and cancelled per request cost ~4 µs); the timer, when it fires early,
        waits on for the deadline it finds."""

        _client: str | None = None
        """The client address this connection counts against (None: not counted)."""
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if most_connections and self.client is not None:  # uvicorn's (host, port) of a TCP client
                self._client = self.client[0]
                open_by_client[self._client] += 1
                if open_by_client[self._client] > most_connections:
                    self._refuse(f"This client has {most_connections} connections open to this server.")
                    return
            self._expect(head_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._client is not None:
                uncount(self._client)
                self._client = None
            self._stop_timer()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self) -> None:
            # The connection goes on under uvicorn's WebSocket protocol, which is told when it
            # ends: it uncounts the connection then.
            self._stop_timer()
            client, self._client = self._client, None
            super().handle_websocket_upgrade()
            if client is not None:
                websocket: Any = self.transport.get_protocol()
                ended = websocket.connection_lost

                def connection_lost(exc: Exception | None) -> None:
                    uncount(client)
                    ended(exc)

                websocket.connection_lost = connection_lost

        def _refuse(self, message: str) -> None:
            """Answer 503 to a connection past its client's cap, read and drop what the client
            sends meanwhile, and close after :data:`REFUSED_LINGER_S` (closed at once, with the
            client's request unread, the connection would be reset before the answer is read)."""
            self._refused = True
            self.transport.write(_closing_answer(503, message, b"retry-after: 1\r\n"))
            self.transport.write_eof()
            self.loop.call_later(REFUSED_LINGER_S, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if not self._in_body:
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self.send_400_response("Request line and headers too large.")
                    return
            super().data_received(data)

        def on_message_begin(self) -> None:  # the parser met a request's first byte
            if self._deadline is None:
                self._expect(head_timeout_s)
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_body, self._head_bytes = True, 0
            self._expect(body_timeout_s)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_body, self._deadline = False, None
            super().on_message_complete()

        def _expect(self, seconds: float) -> None:
            """The head or body under way must be in within ``seconds``."""
            self._deadline = self.loop.time() + seconds
            if self._timer is None or self._timer.when() > self._deadline:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self.loop.call_at(self._deadline, self._check)

        def _check(self) -> None:
            self._timer = None
            if self._deadline is None:
                return
            if self._in_body and self.flow.read_paused:  # the server is not reading: no delay of the client's
                self._expect(body_timeout_s)
            elif self.loop.time() < self._deadline - _TIMER_SLACK_S:
                self._timer = self.loop.call_at(self._deadline, self._check)
            elif self._in_body:
                self._time_out(f"Request body not received within {body_timeout_s:g} s.")
            else:
                self._time_out(f"Request head not received within {head_timeout_s:g} s.")

        def _stop_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._deadline = self._timer = None

        def _time_out(self, message: str) -> None:
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
                self.transport.write(_closing_answer(408, message))
            self.transport.close()

    def _closing_answer(status: int, message: str, headers: bytes = b"") -> bytes:
        """An answer of ``status`` with ``message`` as its text, that closes the connection."""
        body = message.encode()
        return (
            STATUS_LINE[status]
            + b"content-type: text/plain; charset=utf-8\r\n"
            + headers
            + b"content-length: "
            + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )

    return BoundedRequest


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    uds: str | os.PathLike[str] | None = None,
    max_sessions: int = limits.MAX_SESSIONS,
    idle_timeout_s: float = limits.IDLE_TIMEOUT_S,
    max_body_bytes: int = limits.MAX_BODY_BYTES,
    step_timeout_s: float = limits.STEP_TIMEOUT_S,
    env_allowlist: Iterable[str] | None = None,
    allow_entry_points: bool = False,
    allowed_kwargs: Iterable[str] | None = (),
    data_root: str | os.PathLike[str] | None = None,
    token: str | None = None,
    ready_file: str | os.PathLike[str] | None = None,
    log_level: str = "warning",
    client_limits: ClientLimits = ClientLimits(),
) -> None:
    """Serve env sessions until SIGTERM/SIGINT (blocking).

    Args:
        host, port: TCP address; ``port=0`` binds a free port (announced, see the module doc).
        uds: serve on this Unix domain socket instead of TCP (``host``/``port`` are ignored);
            a stale socket file there is replaced. Useful where the server runs without network
            (a bubblewrap sandbox with ``--unshare-net``) and a directory is shared.
        max_sessions, idle_timeout_s, max_body_bytes, step_timeout_s, env_allowlist,
            allow_entry_points, allowed_kwargs, data_root: see
            :class:`~agentgym.server.app.ServerConfig`.
        token: the bearer token requests must carry; default ``$AGENTGYM_SERVER_TOKEN``. A TCP
            address that is not loopback is refused without one (``SystemExit``).
        ready_file: where to write the readiness JSON.
        log_level: uvicorn's log level (access logs are off).
        client_limits: how long a client may take to send a request's head and its body, and
            how many connections it may hold open.
    """
    config = ServerConfig(
        max_sessions=max_sessions,
        idle_timeout_s=idle_timeout_s,
        max_body_bytes=max_body_bytes,
        step_timeout_s=step_timeout_s,
        env_allowlist=None if env_allowlist is None else frozenset(env_allowlist),
        allow_entry_points=allow_entry_points,
        allowed_kwargs=None if allowed_kwargs is None else frozenset(allowed_kwargs),
        data_root=None if data_root is None else Path(data_root),
        token=server_token(token),
    )
    check_bind("agentgym serve", host, uds, config.token)
    serve_app(
        create_app(config),
        host,
        port,
        uds=uds,
        ready_file=ready_file,
        log_level=log_level,
        client_limits=client_limits,
    )


def serve_app(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    uds: str | os.PathLike[str] | None = None,
    ready_file: str | os.PathLike[str] | None = None,
    log_level: str = "warning",
    client_limits: ClientLimits = ClientLimits(),
) -> None:
    """Serve any ASGI ``app`` with the readiness and shutdown contract of the module documentation
    (blocking); arguments as for :func:`serve`. The retrieval service uses it too. A Unix socket
    file is removed when the server stops, also by a signal."""
    _log_like_uvicorn(log_level)
    _open_files_up_to_the_hard_limit()
    sock = _bind_unix(Path(uds)) if uds is not None else _bind_tcp(host, port)

    def release() -> None:
        sock.close()
        if uds is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(uds)

    server = uvicorn_server(
        app,
        log_level=log_level,
        client_limits=client_limits,
        on_ready=lambda: _announce(_ready_info(sock, host, uds), ready_file),
        on_stopped=release,
    )
    try:
        server.run(sockets=[sock])
    finally:
        release()


def _open_files_up_to_the_hard_limit() -> None:
    """Raise this process's open-file limit to its hard limit (at most 2**20): a soft limit of
    1,024, common, would run out before one client's connection cap and the sessions do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _log_like_uvicorn(level: str) -> None:
    """Send the sessions' log (``agentgym.server``: broken sessions, reaping) to stderr at
    ``level``, formatted as uvicorn's own lines."""
    logger = logging.getLogger("agentgym.server")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"agentgym serve: cannot bind {host}:{port}: {exc}") from None
    return sock


def _bind_unix(path: Path) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"agentgym serve: cannot bind the Unix socket {path}: {exc}") from None
    return sock


def _ready_info(sock: socket.socket, host: str, uds: str | os.PathLike[str] | None) -> dict[str, Any]:
    if uds is not None:
        return {"pid": os.getpid(), "uds": os.fspath(uds), "url": "http://localhost"}
    port = sock.getsockname()[1]
    netloc = f"[{host}]" if ":" in host else host
    return {"pid": os.getpid(), "host": host, "port": port, "url": f"http://{netloc}:{port}"}


def _announce(info: dict[str, Any], ready_file: str | os.PathLike[str] | None) -> None:
    text = json.dumps(info)
    if ready_file is not None:
        atomic_write(ready_file, text, mode=0o600)
    print(f"agentgym serve: ready {text}", flush=True)
