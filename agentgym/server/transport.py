"""HTTP to one env server, for the clients: keep-alive httpx clients and clear errors.

Every failure surfaces as an :class:`~agentgym.server.errors.EnvServerError` that names the
server's URL, never as a bare httpx exception: no connection or a dropped one is
:class:`~agentgym.server.errors.EnvServerUnavailable`, no answer in time is
:class:`~agentgym.server.errors.EnvServerTimeout`, an error answer is the
:class:`~agentgym.server.errors.EnvServerHTTPError` subclass of its code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from agentgym.http import PerLoop, async_http_client, http_client
from agentgym.server.auth import auth_headers, server_token
from agentgym.server.errors import (
    EnvServerError,
    EnvServerTimeout,
    EnvServerUnavailable,
    error_from_response,
)
from agentgym.server.jsonsafe import dumps

__all__ = ["Transport"]

_HEADERS = {"content-type": "application/json"}


class Transport:
    """Requests to the server at ``url`` through a sync and an async httpx client.

    Args:
        url: the server's base URL, ``http://host:port``.
        timeout: seconds to wait for an answer (``None``: forever); also bounds sending.
        connect_timeout: seconds to wait for a connection.
        uds: connect through this Unix domain socket instead of TCP (``url``'s host is then
            only the ``Host`` header).
        client, async_client: share these httpx clients (and their connection pools) instead of
            making one of each; shared clients are not closed by :meth:`close`.
        diagnose: called (blocking) when the server cannot be reached; what it returns (why
            the server is gone, e.g. its sandbox died) is added to the
            :class:`~agentgym.server.errors.EnvServerUnavailable` message.
        token: the server's bearer token (:mod:`~agentgym.server.auth`); default
            ``$AGENTGYM_SERVER_TOKEN``, if set.

    Clients are made on first use. Proxy settings in the environment are ignored: the server is
    local or addressed directly. An async client made here belongs to the event loop it was made
    on; used from another loop it is replaced.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = 120.0,
        connect_timeout: float = 5.0,
        uds: str | None = None,
        client: httpx.Client | None = None,
        async_client: httpx.AsyncClient | None = None,
        diagnose: Callable[[], str | None] | None = None,
        token: str | None = None,
    ):
        self.url = url.rstrip("/")
        self._auth = auth_headers(server_token(token))
        self._json_headers = _HEADERS | self._auth
        self.diagnose = diagnose
        self.timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.uds = uds
        self._client = client
        self._owns_client = client is None
        self._shared_async_client = async_client
        # A client of another (likely finished) loop cannot be closed from this one.
        self._async_clients = PerLoop(
            lambda: async_http_client(self.url, uds=self.uds, timeout=self.timeout, trust_env=False)
        )

    def _sync(self) -> httpx.Client:
        if self._client is None:
            self._client = http_client(self.url, uds=self.uds, timeout=self.timeout, trust_env=False)
        return self._client

    def _async(self) -> httpx.AsyncClient:
        if self._shared_async_client is not None:
            return self._shared_async_client
        return self._async_clients.get()

    def endpoint(self, path: str) -> httpx.URL:
        """The absolute URL of ``path`` (pass it instead of ``path`` to skip the URL parsing on
        every request)."""
        return httpx.URL(self.url + path)

    def request(
        self, method: str, path: str | httpx.URL, payload: Any = None, *, timeout: float | None = None
    ) -> Any:
        """The JSON answer of ``method path`` with body ``payload``; raises EnvServerError."""
        url = path if isinstance(path, httpx.URL) else self.endpoint(path)
        try:
            response = self._sync().request(method, url, **self._options(payload, timeout))
        except httpx.HTTPError as exc:
            raise self._failure(exc, method, url, timeout) from None
        return self._answer(response)

    async def arequest(
        self, method: str, path: str | httpx.URL, payload: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Async :meth:`request`."""
        url = path if isinstance(path, httpx.URL) else self.endpoint(path)
        try:
            response = await self._async().request(method, url, **self._options(payload, timeout))
        except httpx.HTTPError as exc:
            raise self._failure(exc, method, url, timeout) from None
        return self._answer(response)

    def _options(self, payload: Any, timeout: float | None) -> dict[str, Any]:
        options: dict[str, Any] = {"headers": self._auth} if self._auth else {}
        if payload is not None:
            options |= {"content": dumps(payload), "headers": self._json_headers}
        if timeout is not None:
            options["timeout"] = timeout
        return options

    def _answer(self, response: httpx.Response) -> Any:
        try:
            payload = json.loads(response.content) if response.content else None
        except ValueError:
            payload = None
        if response.is_success:
            if payload is None:
                raise EnvServerError(
                    f"env server {self.url} answered {response.status_code} "
                    f"without JSON: {response.text[:200]!r}",
                    url=self.url,
                )
            return payload
        raise error_from_response(self.url, response.status_code, payload, response.text)

    def _failure(
        self, exc: httpx.HTTPError, method: str, url: httpx.URL, timeout: float | None
    ) -> EnvServerError:
        what = f"{method} {url}"
        if isinstance(exc, httpx.TimeoutException):
            seconds = (
                timeout
                if timeout is not None
                else {
                    httpx.ConnectTimeout: self.timeout.connect,
                    httpx.WriteTimeout: self.timeout.write,
                    httpx.PoolTimeout: self.timeout.pool,
                }.get(type(exc), self.timeout.read)
            )
            return EnvServerTimeout(
                f"{what}: no answer within {seconds} s ({type(exc).__name__})", url=self.url, seconds=seconds
            )
        if isinstance(exc, httpx.TransportError):
            where = f"{self.url} (socket {self.uds})" if self.uds else self.url
            why = self.diagnose() if self.diagnose is not None else None
            return EnvServerUnavailable(
                f"env server {where} is gone or unreachable: {what} failed with "
                f"{type(exc).__name__}: {exc or 'connection lost'}" + (f"; {why}" if why else ""),
                url=self.url,
            )
        return EnvServerError(f"{what} failed: {type(exc).__name__}: {exc}", url=self.url)

    def close(self) -> None:
        """Close the clients this transport made (idempotent). An async client still bound to
        a running loop is closed by a task on that loop."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None
        client, loop = self._async_clients.take()
        if client is not None and loop is not None and loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(client.aclose()))

    async def aclose(self) -> None:
        """Close the clients this transport made (idempotent)."""
        client = self._async_clients.pop()
        if client is not None:
            await client.aclose()
        self.close()
