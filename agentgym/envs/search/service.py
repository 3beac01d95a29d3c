"""The retriever as an HTTP service, and its client.

    python -m agentgym.envs.search.service INDEX_DIR [--host 127.0.0.1] [--port 8100 | --uds PATH]

API (JSON):

- ``POST /retrieve`` ``{"queries": ["...", ...], "k": 10}`` -> ``{"results": [[{"id", "title",
  "text", "score"}, ...], ...]}``, one ranked list per query, exactly what
  :meth:`BM25Index.search <agentgym.envs.search.index.BM25Index.search>` returns in-process.
  A bad request (wrong types, a query over ``MAX_QUERY_CHARS``, more than ``MAX_BATCH`` queries)
  gets 400 ``{"error": "..."}``; a body over ``MAX_BODY_BYTES`` gets 413.
- ``GET /health`` -> ``{"passages": N}``.

Readiness and shutdown follow the env server (``agentgym.server.serve``): one ``agentgym serve:
ready {...}`` line on stdout once it accepts connections; SIGTERM/SIGINT stop it. In a sandbox,
serve on ``--uds $AGENTGYM_SOCKET_DIR/<name>.sock`` and connect with
``RetrieverClient(sb.endpoint(name))``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import httpx

from agentgym.envs.search.index import BM25Index, Hit, Retriever, check_queries
from agentgym.http import http_client

__all__ = ["MAX_BATCH", "MAX_BODY_BYTES", "RetrieverClient", "create_app", "main"]

MAX_BATCH = 1024
MAX_BODY_BYTES = 8 << 20


def create_app(retriever: Retriever, num_passages: int) -> Any:
    """A Starlette app serving ``retriever`` (searches run in worker threads)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    async def retrieve(request: Request) -> JSONResponse:
        if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            return error(413, f"request body over {MAX_BODY_BYTES} bytes")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return error(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise TypeError('the body must be a JSON object {"queries": [...], "k": N}')
            queries, k = payload.get("queries"), payload.get("k", 10)
            check_queries(queries, k)
            assert queries is not None  # check_queries raised otherwise
            if len(queries) > MAX_BATCH:
                raise ValueError(f"{len(queries)} queries in one request; the limit is {MAX_BATCH}")
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
            return error(400, str(exc))
        results = await run_in_threadpool(retriever.search, queries, k)
        return JSONResponse({"results": [[asdict(h) for h in hits] for hits in results]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"passages": num_passages})

    return Starlette(
        routes=[Route("/retrieve", retrieve, methods=["POST"]), Route("/health", health, methods=["GET"])]
    )


class RetrieverClient:
    """A :class:`~agentgym.envs.search.index.Retriever` backed by the service at ``endpoint``
    (``http://host:port`` or ``unix:/path.sock``, as :meth:`Sandbox.endpoint` returns).

    Raises ``ValueError`` for a request the service refuses (its message), ``ConnectionError``
    naming the endpoint when it cannot be reached."""

    def __init__(self, endpoint: str, *, timeout_s: float = 30.0):
        self.endpoint = endpoint
        self._client = http_client(endpoint, timeout=timeout_s, trust_env=False)

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        check_queries(queries, k)
        try:
            response = self._client.post("/retrieve", json={"queries": list(queries), "k": k})
        except httpx.TransportError as exc:
            raise ConnectionError(f"retrieval service {self.endpoint} unreachable: {exc}") from exc
        if response.status_code in (400, 413):
            raise ValueError(
                f"retrieval service refused the request: {response.json().get('error', response.text)}"
            )
        response.raise_for_status()
        return [[Hit(**h) for h in hits] for hits in response.json()["results"]]

    def health(self) -> dict[str, Any]:
        return self._client.get("/health").raise_for_status().json()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RetrieverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym.server.serve import serve_app

    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.search.service", description="Serve a BM25 index over HTTP."
    )
    parser.add_argument("index", help="index directory (from `agentgym index`)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0 picks a free port")
    parser.add_argument("--uds", metavar="PATH", default=None, help="serve on this Unix socket")
    parser.add_argument("--ready-file", metavar="PATH", default=None)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    try:
        index = BM25Index.load(args.index)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"retrieval service: {exc}") from None
    serve_app(
        create_app(index, len(index)),
        args.host,
        args.port,
        uds=args.uds,
        ready_file=args.ready_file,
        log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
