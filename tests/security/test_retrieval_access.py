"""Who may use the search family's retrieval service, and what one request may ask of it: the
real service (a subprocess) over the generated world's BM25 index, real httpx clients.

Regressions of what an audit found: the service took no token and bound any address, answered
browsers, let one request ask for every passage of the corpus for each of 1,024 queries (a
963 MB answer, 70 s of CPU, 4.7 GB of memory), and buffered chunked bodies without bound.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import httpx
import pytest

from agentgym.envs.search.index import BM25Index
from agentgym.envs.search.service import MAX_BODY_BYTES, MAX_HITS, MAX_TOPK, RetrieverClient, main
from agentgym.envs.search.world import generate_world
from agentgym.process import ManagedProcess
from agentgym.server.auth import TOKEN_ENV

TOKEN = "s3cret-token-for-the-service"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[str]:
    """The service with a token, over the generated world's BM25 index; its base URL."""
    tmp = tmp_path_factory.mktemp("retrieval_access")
    index = BM25Index.build(generate_world(0).passages, tmp / "index")
    ready = tmp / "ready.json"
    argv = [sys.executable, "-m", "agentgym.envs.search.service", str(index.path), "--port", "0"]
    with ManagedProcess(
        [*argv, "--token", TOKEN, "--ready-file", str(ready)],
        log_path=tmp / "service.log",
        name="the retrieval service",
    ) as process:
        process.wait_ready(ready.exists, timeout=60)
        yield json.loads(ready.read_text())["url"]


def test_a_non_loopback_bind_without_a_token_is_refused(monkeypatch, tmp_path):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(SystemExit, match="binding 0.0.0.0 lets other machines in; give a token"):
        main([str(tmp_path / "no-index"), "--host", "0.0.0.0", "--port", "0"])


def test_requests_without_the_token_or_from_browsers_are_refused(service):
    query = {"queries": ["fire"], "k": 3}
    for headers in ({}, {"authorization": "Bearer wrong"}):
        for response in (
            httpx.post(f"{service}/retrieve", json=query, headers=headers),
            httpx.post(f"{service}/search-r1/retrieve", json={"query": "fire"}, headers=headers),
            httpx.get(f"{service}/health", headers=headers),
        ):
            assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    browser = {**AUTH, "origin": "http://evil.example", "content-type": "text/plain"}
    response = httpx.post(f"{service}/retrieve", content=json.dumps(query), headers=browser)
    assert response.status_code == 403 and response.json()["error"] == "browser_request"
    with RetrieverClient(service, token="wrong") as client, pytest.raises(ValueError, match="unauthorized"):
        client.search(["fire"], 3)
    with RetrieverClient(service, token=TOKEN) as client:
        assert len(client.search(["fire"], 3)[0]) == 3


@pytest.mark.parametrize(
    "path, payload, message",
    [
        ("/retrieve", {"queries": ["fire"], "k": MAX_TOPK + 1}, f"the limit is {MAX_TOPK} passages"),
        ("/retrieve", {"queries": ["fire"], "k": 10**30}, f"the limit is {MAX_TOPK} passages"),
        ("/retrieve", {"queries": ["fire"] * 1024, "k": 33}, f"the limit is {MAX_HITS} per request"),
        ("/search-r1/retrieve", {"queries": ["fire"] * 1024, "topk": 33}, f"the limit is {MAX_HITS}"),
    ],
)
def test_a_request_for_too_many_passages_is_refused(service, path, payload, message):
    response = httpx.post(service + path, json=payload, headers=AUTH)
    assert response.status_code == 400 and message in response.json()["error"], response.text


def test_the_most_a_request_may_ask_for_is_answered(service):
    full = {"queries": ["fire"] * 1024, "k": MAX_HITS // 1024}
    results = httpx.post(f"{service}/retrieve", json=full, headers=AUTH, timeout=120).json()["results"]
    assert [len(hits) for hits in results] == [MAX_HITS // 1024] * 1024


def test_bodies_past_the_limit_or_nested_without_end_are_refused(service):
    def chunks() -> Iterator[bytes]:  # no Content-Length: only counting the stream can stop it
        yield b'{"queries": ["'
        for _ in range(4 * MAX_BODY_BYTES // 65536):
            yield b"a" * 65536

    response = httpx.post(f"{service}/retrieve", content=chunks(), headers=AUTH)
    assert response.status_code == 413 and f"limit of {MAX_BODY_BYTES} bytes" in response.json()["error"]
    response = httpx.post(f"{service}/retrieve", content=b"[" * 100_000, headers=AUTH)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]
    assert httpx.get(f"{service}/health", headers=AUTH).json()["passages"] > 0
