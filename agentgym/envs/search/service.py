"""The retriever as an HTTP service, and its client.

    python -m agentgym.envs.search.service INDEX_DIR [--host 127.0.0.1] [--port 8100 | --uds PATH]
        [--retrieval bm25|dense|hybrid] [--encoder MODEL_DIR] [--search auto|exact|faiss]
        [--token TOKEN]

It serves every retrieval the index has (:mod:`~agentgym.envs.search.retrieval`): BM25 always;
dense and hybrid when the index has a dense part, whose queries it embeds with ``--encoder``
(default: the encoder the index was built with). ``--retrieval`` (default ``bm25``) is the one a
request gets when it names none.

API (JSON):

- ``POST /retrieve`` ``{"queries": ["...", ...], "k": 10, "retrieval": "hybrid"}`` ->
  ``{"results": [[{"id", "title", "text", "score"}, ...], ...]}``, one ranked list per query,
  exactly what the retriever's ``search`` returns in-process (``retrieval`` is optional).
  A bad request (wrong types, a query over ``MAX_QUERY_CHARS``, more than ``MAX_BATCH`` queries,
  ``k`` over :data:`MAX_TOPK`, more than :data:`MAX_HITS` passages asked for in all, an unknown
  retrieval or one the index lacks) gets 400 ``{"error": "..."}``; a body over
  ``MAX_BODY_BYTES`` (declared or streamed) gets 413.
- ``POST /search-r1/retrieve``: the same search in the API of Search-R1's retrieval server
  (``search_r1/search/retrieval_server.py``), so its and verl-agent's training code can use this
  service (``retriever.url=http://HOST:PORT/search-r1/retrieve``). The request is
  ``{"queries": ["...", ...], "topk": N, "return_scores": bool}`` (Search-R1), or
  ``{"query": "...", ...}`` for one query (verl-agent), either with an optional ``retrieval``
  (ours, as for ``/retrieve``); ``topk`` defaults to
  :data:`SEARCH_R1_TOPK` and is at most :data:`MAX_TOPK`, ``return_scores`` to false. The
  answer is ``{"result": [[ITEM, ...], ...]}``, one ranked list per query, the same passages in
  the same order as ``/retrieve``; an ITEM is the document ``{"id", "contents"}`` with
  ``contents`` in the wiki dumps' form (the title in double quotes on the first line, the text
  after it), wrapped as ``{"document": DOCUMENT, "score": S}`` when ``return_scores`` is true.
  Unlike Search-R1's server, it refuses with 400 what that one would take or fail on: an empty
  ``queries`` list, a ``topk`` under 1 (Search-R1 reads 0 as its default) or over
  :data:`MAX_TOPK`, a key other than these, and the limits of ``/retrieve``.
- ``GET /health`` -> ``{"passages": N, "retrievals": [...], "default": "bm25"}``.

Clients are kept as the env server keeps them (:mod:`agentgym.server.auth`): a request from a
browser (an ``Origin`` header) is answered 403; with a token (``--token`` or
``$AGENTGYM_SERVER_TOKEN``, needed to bind an address that is not loopback) every request
carries ``Authorization: Bearer <token>`` or is answered 401; request heads and bodies are
bounded in size and time (:func:`agentgym.server.serve.serve_app`). Searches, and the
encoding of their answers, run in worker threads, off the event loop.

Readiness and shutdown follow the env server (``agentgym.server.serve``): one ``agentgym serve:
ready {...}`` line on stdout once it accepts connections; SIGTERM/SIGINT stop it. In a sandbox,
serve on ``--uds $AGENTGYM_SOCKET_DIR/<name>.sock`` and connect with
``RetrieverClient(sb.endpoint(name))``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import httpx

from agentgym.envs.search.dense import SEARCHES, DenseIndex
from agentgym.envs.search.index import BM25Index, Hit, Retriever, check_queries
from agentgym.envs.search.retrieval import RETRIEVALS, HybridRetriever, check_retrieval
from agentgym.http import http_client
from agentgym.server.auth import TOKEN_ENV, auth_headers, check_bind, server_token

__all__ = [
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_HITS",
    "MAX_TOPK",
    "SEARCH_R1_TOPK",
    "RetrieverClient",
    "create_app",
    "load_retrievers",
    "main",
]

MAX_BATCH = 1024
MAX_BODY_BYTES = 8 << 20
MAX_TOPK = 1000
"""Most passages one query may ask for (``k``, ``topk``)."""
MAX_HITS = 32768
"""Most passages one request may ask for in all (queries times ``k``): 32 per query of a full
batch. An answer is then tens of MB at most."""
SEARCH_R1_TOPK = 3
"""Passages per query when a Search-R1 request gives no ``topk`` (its server's ``--topk``)."""
_SEARCH_R1_KEYS = frozenset({"queries", "query", "topk", "return_scores", "retrieval"})


def _check_size(queries: list[str], k: int) -> None:
    """``ValueError`` for a request past :data:`MAX_BATCH`, :data:`MAX_TOPK` or
    :data:`MAX_HITS`."""
    if len(queries) > MAX_BATCH:
        raise ValueError(f"{len(queries)} queries in one request; the limit is {MAX_BATCH}")
    if k > MAX_TOPK:
        raise ValueError(f"k is {k}; the limit is {MAX_TOPK} passages per query")
    if len(queries) * k > MAX_HITS:
        raise ValueError(
            f"{len(queries)} queries of {k} passages ask for {len(queries) * k}; the limit is "
            f"{MAX_HITS} per request: ask for fewer, or split the batch"
        )


def _search_r1_request(payload: dict[str, Any]) -> tuple[list[str], int, bool]:
    """(queries, topk, return_scores) of a ``/search-r1/retrieve`` request; ``ValueError`` or
    ``TypeError`` saying what is wrong."""
    if unknown := sorted(set(payload) - _SEARCH_R1_KEYS):
        raise ValueError(f"unknown keys {unknown}; a request has {sorted(_SEARCH_R1_KEYS)}")
    if ("queries" in payload) == ("query" in payload):
        raise ValueError('give either "queries" (a list of strings) or "query" (one string)')
    if "query" in payload:
        if not isinstance(payload["query"], str):
            raise TypeError(f"query must be a string, got {type(payload['query']).__name__}")
        queries = [payload["query"]]
    else:
        queries = payload["queries"]
        if isinstance(queries, list) and not queries:
            raise ValueError("queries is empty; give at least one query")
    topk = payload.get("topk")
    topk = SEARCH_R1_TOPK if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be an int from 1 to {MAX_TOPK}, got {topk!r}")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise TypeError(f"return_scores must be true or false, got {return_scores!r}")
    check_queries(queries, topk)
    return queries, topk, return_scores


def _search_r1_item(hit: Hit, with_score: bool) -> dict[str, Any]:
    """``hit`` as a wiki-dump document (``{"id", "contents"}``), with its score if asked."""
    # the title must stay the first line: readers split contents at the first newline
    title = " ".join(hit.title.splitlines())
    document = {"id": hit.id, "contents": f'"{title}"\n{hit.text}'}
    return {"document": document, "score": hit.score} if with_score else document


def _pick(retrievers: Mapping[str, Retriever], default: str, payload: dict[str, Any]) -> Retriever:
    """The retriever a request asks for (``retrieval``, else ``default``); ``ValueError`` for
    one that is unknown or not served."""
    name = payload.get("retrieval")
    name = default if name is None else check_retrieval(name)
    if name not in retrievers:
        raise ValueError(
            f"retrieval {name!r} needs the index's dense part, which it lacks (serving: "
            f"{', '.join(retrievers)}); build it with `agentgym index CORPUS DIR --retrieval dense`"
        )
    return retrievers[name]


def create_app(
    retrievers: Mapping[str, Retriever], num_passages: int, default: str = "bm25", *, token: str | None = None
) -> Any:
    """A Starlette app serving ``retrievers`` (by retrieval name; a request that names none gets
    ``default``), refusing browsers, and requests without ``token`` when one is given."""
    _pick(retrievers, default, {})  # refuses a default that is not served
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from agentgym.server.auth import BearerAuth, NoBrowsers
    from agentgym.server.bodies import read_object
    from agentgym.server.errors import ApiError

    async def answer(request: Request, parse: Callable[[dict[str, Any]], Callable[[], Any]]) -> Response:
        """``parse`` the request's JSON object into the search that answers it, then run that,
        and the encoding of its answer, in a worker thread; a bad request is answered
        ``{"error": "..."}``."""
        try:
            search = parse(await read_object(request, MAX_BODY_BYTES))
        except ApiError as exc:
            return JSONResponse({"error": exc.detail}, status_code=400 if exc.status == 422 else exc.status)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except ClientDisconnect:  # nobody reads an answer
            return Response(status_code=400)
        return await run_in_threadpool(lambda: JSONResponse(search()))

    def retrieve(payload: dict[str, Any]) -> Callable[[], Any]:
        queries, k = payload.get("queries"), payload.get("k", 10)
        check_queries(queries, k)
        assert queries is not None  # check_queries raised otherwise
        _check_size(queries, k)
        retriever = _pick(retrievers, default, payload)
        return lambda: {"results": [[asdict(h) for h in hits] for hits in retriever.search(queries, k)]}

    def retrieve_search_r1(payload: dict[str, Any]) -> Callable[[], Any]:
        queries, topk, with_scores = _search_r1_request(payload)
        _check_size(queries, topk)
        retriever = _pick(retrievers, default, payload)
        return lambda: {
            "result": [
                [_search_r1_item(h, with_scores) for h in hits] for hits in retriever.search(queries, topk)
            ]
        }

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"passages": num_passages, "retrievals": list(retrievers), "default": default})

    app: Any = Starlette(
        routes=[
            Route(path, functools.partial(answer, parse=parse), methods=["POST"])
            for path, parse in (("/retrieve", retrieve), ("/search-r1/retrieve", retrieve_search_r1))
        ]
        + [Route("/health", health, methods=["GET"])]
    )
    return NoBrowsers(BearerAuth(app, token) if token else app)


class RetrieverClient:
    """A :class:`~agentgym.envs.search.index.Retriever` backed by the service at ``endpoint``
    (``http://host:port`` or ``unix:/path.sock``, as :meth:`Sandbox.endpoint` returns), asking
    for ``retrieval`` (``None``: the service's default).

    Raises ``ValueError`` for a request the service refuses (its message), ``ConnectionError``
    naming the endpoint when it cannot be reached. A copy or a pickle is a new client of the
    same service (with a connection pool of its own)."""

    def __init__(
        self,
        endpoint: str,
        *,
        retrieval: str | None = None,
        timeout_s: float = 30.0,
        token: str | None = None,
    ):
        self.endpoint, self.retrieval, self.timeout_s = endpoint, retrieval, timeout_s
        if retrieval is not None:
            check_retrieval(retrieval)
        self._token = token
        headers = auth_headers(server_token(token))
        self._client = http_client(endpoint, timeout=timeout_s, trust_env=False, headers=headers)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_client, (self.endpoint, self.retrieval, self.timeout_s, self._token))

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        check_queries(queries, k)
        try:
            request: dict[str, Any] = {"queries": list(queries), "k": k}
            if self.retrieval is not None:
                request["retrieval"] = self.retrieval
            response = self._client.post("/retrieve", json=request)
        except httpx.TransportError as exc:
            raise ConnectionError(f"retrieval service {self.endpoint} unreachable: {exc}") from exc
        if response.status_code in (400, 401, 413):
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


def _client(endpoint: str, retrieval: str | None, timeout_s: float, token: str | None) -> RetrieverClient:
    """Unpickles a :class:`RetrieverClient`."""
    return RetrieverClient(endpoint, retrieval=retrieval, timeout_s=timeout_s, token=token)


def load_retrievers(
    index_dir: str, *, encoder: str | None = None, search: str = "auto"
) -> tuple[dict[str, Retriever], int]:
    """The retrievals of the index in ``index_dir`` (BM25; dense and hybrid when it has a dense
    part) by name, and its passage count."""
    bm25 = BM25Index.load(index_dir)
    retrievers: dict[str, Retriever] = {"bm25": bm25}
    if DenseIndex.exists(index_dir):
        dense = DenseIndex.load(bm25, encoder=encoder, search=search)
        retrievers |= {"dense": dense, "hybrid": HybridRetriever(bm25, dense)}
    elif encoder is not None:
        raise ValueError(f"--encoder: index {index_dir} has no dense part to query")
    return retrievers, len(bm25)


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym.server.serve import serve_app

    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.search.service", description="Serve a search index over HTTP."
    )
    parser.add_argument("index", help="index directory (from `agentgym index`)")
    parser.add_argument("--retrieval", choices=RETRIEVALS, default="bm25", help="for requests that name none")
    parser.add_argument("--encoder", default=None, help="model folder (default: the index's encoder)")
    parser.add_argument("--search", choices=SEARCHES, default="auto", help="dense search")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0 picks a free port")
    parser.add_argument("--uds", metavar="PATH", default=None, help="serve on this Unix socket")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token every request must carry (default ${TOKEN_ENV}; needed to bind a "
        "non-loopback address)",
    )
    parser.add_argument("--ready-file", metavar="PATH", default=None)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    token = server_token(args.token)
    check_bind("retrieval service", args.host, args.uds, token)
    try:
        retrievers, passages = load_retrievers(args.index, encoder=args.encoder, search=args.search)
        app = create_app(retrievers, passages, args.retrieval, token=token)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        raise SystemExit(f"retrieval service: {exc}") from None
    serve_app(
        app,
        args.host,
        args.port,
        uds=args.uds,
        ready_file=args.ready_file,
        log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
