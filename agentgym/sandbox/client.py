"""httpx clients for :meth:`Sandbox.endpoint` strings.

An endpoint is ``"unix:/host/path/8000.sock"`` (what every sandbox returns) or a plain
``"http://host:port"`` URL (a server outside any sandbox, e.g. ``agentgym serve``). Either way::

    with http_client(sb.endpoint(8000)) as client:
        client.get("/health")

Requests use paths relative to the endpoint; over a Unix socket the ``Host`` header is
``sandbox``. Plain HTTP never uses TLS, so those clients skip loading the certificate store
(~25 ms per client).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["async_http_client", "http_client", "parse_endpoint"]

UDS_BASE_URL = "http://sandbox"


def parse_endpoint(endpoint: str) -> tuple[str, str | None]:
    """``(base_url, unix socket path or None)`` for an endpoint string."""
    if endpoint.startswith("unix:"):
        return UDS_BASE_URL, endpoint.removeprefix("unix:")
    if endpoint.startswith(("http://", "https://")):
        return endpoint, None
    raise ValueError(f"not an endpoint (unix:/path or http(s)://host:port): {endpoint!r}")


def http_client(endpoint: str, **kwargs: Any) -> httpx.Client:
    """A keep-alive ``httpx.Client`` for ``endpoint``; ``kwargs`` go to ``httpx.Client``."""
    base_url, uds = parse_endpoint(endpoint)
    if base_url.startswith("http://"):
        kwargs.setdefault("transport", httpx.HTTPTransport(uds=uds, verify=False))
    return httpx.Client(base_url=base_url, **kwargs)


def async_http_client(endpoint: str, **kwargs: Any) -> httpx.AsyncClient:
    """A keep-alive ``httpx.AsyncClient`` for ``endpoint``; ``kwargs`` go to ``httpx.AsyncClient``."""
    base_url, uds = parse_endpoint(endpoint)
    if base_url.startswith("http://"):
        kwargs.setdefault("transport", httpx.AsyncHTTPTransport(uds=uds, verify=False))
    return httpx.AsyncClient(base_url=base_url, **kwargs)
