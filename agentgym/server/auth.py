"""Who may talk to an env server: loopback and Unix sockets by default, a bearer token beyond.

A server bound to a loopback address or a Unix socket answers any local client (the socket
file's permissions and the machine's users are the boundary). A server on any other address
must have a token (``agentgym serve --token`` or ``$AGENTGYM_SERVER_TOKEN``): every request then
carries ``Authorization: Bearer <token>``, compared in constant time, and one without it is
answered 401 ``unauthorized`` before its body is read. Clients (:class:`RemoteEnv`, the
sandbox pool) send the token they are given, or ``$AGENTGYM_SERVER_TOKEN``.

Browsers are never clients: a request that carries an ``Origin`` header (browsers send one with
every cross-site request, and with every POST; agentgym's clients never do) is answered 403
``browser_request`` (:class:`NoBrowsers`), so that a web page open on the operator's machine
cannot drive a loopback server that takes no token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "TOKEN_ENV",
    "BearerAuth",
    "NoBrowsers",
    "auth_headers",
    "check_bind",
    "is_loopback",
    "server_token",
]

#: The environment variable that holds the token, on both sides.
TOKEN_ENV = "AGENTGYM_SERVER_TOKEN"

_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[Any]]
_Send = Callable[[Any], Awaitable[None]]
_Asgi = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def server_token(given: str | None = None) -> str | None:
    """``given``, else ``$AGENTGYM_SERVER_TOKEN``; ``None`` when neither is set (or empty)."""
    token = given if given is not None else os.environ.get(TOKEN_ENV)
    return token or None


def auth_headers(token: str | None) -> dict[str, str]:
    """The header that carries ``token`` (none without one)."""
    return {"authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(program: str, host: str, uds: str | os.PathLike[str] | None, token: str | None) -> None:
    """Refuse (``SystemExit`` naming ``program``) to serve on a TCP address that is not
    loopback without a token; a Unix socket (``uds`` not ``None``) needs none."""
    if uds is None and not is_loopback(host) and not token:
        raise SystemExit(
            f"{program}: binding {host} lets other machines in; give a token "
            f"(--token or ${TOKEN_ENV}) or bind 127.0.0.1 or a Unix socket"
        )


async def _answer_json(send: _Send, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    """Answer an HTTP request with ``status`` and the JSON ``body`` (and ``headers``)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` are answered
    401 ``unauthorized``, WebSocket handshakes without it are closed before they are accepted
    (uvicorn answers them 403); others go on to ``app``."""

    def __init__(self, app: _Asgi, token: str):
        if not token:
            raise ValueError("BearerAuth needs a non-empty token")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
        else:
            body = (
                b'{"error": "unauthorized", "detail": "this server needs '
                b'Authorization: Bearer <token> (agentgym serve --token)"}'
            )
            await _answer_json(send, 401, body, (b"www-authenticate", b"Bearer"))

    def _authorized(self, scope: _Scope) -> bool:
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        return hmac.compare_digest(given, self._expected)


class NoBrowsers:
    """ASGI middleware: an HTTP request with an ``Origin`` header is answered 403
    ``browser_request``, a WebSocket handshake with one is closed before it is accepted (uvicorn
    answers it 403); everything else goes on to ``app``."""

    def __init__(self, app: _Asgi):
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in ("http", "websocket") or not any(k == b"origin" for k, _ in scope["headers"]):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
        else:
            body = b'{"error": "browser_request", "detail": "browsers may not use an env server"}'
            await _answer_json(send, 403, body)
