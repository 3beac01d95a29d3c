"""The retrieval service's Search-R1 API (``POST /search-r1/retrieve``), spoken to as Search-R1's
and verl-agent's training code speak to their own retrieval servers."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests

from agentgym.envs.search.index import MAX_QUERY_CHARS, BM25Index
from agentgym.envs.search.service import MAX_BATCH, MAX_BODY_BYTES, MAX_TOPK, RetrieverClient
from agentgym.process import ManagedProcess

PATH = "/search-r1/retrieve"


@pytest.fixture(scope="module")
def service(world, tmp_path_factory) -> Iterator[str]:
    """The real service (a subprocess) over the generated world's index; its base URL."""
    tmp = tmp_path_factory.mktemp("search_r1")
    index = BM25Index.build(world.passages, tmp / "index")
    ready = tmp / "ready.json"
    argv = [sys.executable, "-m", "agentgym.envs.search.service", str(index.path), "--port", "0"]
    with ManagedProcess(
        [*argv, "--ready-file", str(ready)], log_path=tmp / "service.log", name="the retrieval service"
    ) as process:
        process.wait_ready(ready.exists, timeout=60)
        yield json.loads(ready.read_text())["url"]


def search_r1_batch_search(search_url: str, queries: list[str], topk: int) -> dict[str, Any]:
    """What Search-R1's ``LLMGenerationManager._batch_search`` sends, and how
    (search_r1/llm_agent/generation.py)."""
    return requests.post(search_url, json={"queries": queries, "topk": topk, "return_scores": True}).json()


def search_r1_passages2string(retrieval_result: list[dict[str, Any]]) -> str:
    """How its ``_passages2string`` reads one query's answer: the title is the first line of
    ``document.contents``."""
    text = ""
    for n, item in enumerate(retrieval_result, 1):
        title, _, body = item["document"]["contents"].partition("\n")
        text += f"Doc {n}(Title: {title}) {body}\n"
    return text


def test_search_r1_reads_the_same_ranking_as_ours(service, world):
    queries = [q for question in world.questions[:40] for q in question.hop_queries] + ["the", ""]
    with RetrieverClient(service) as ours:
        for topk in (1, 3, 7):
            answer = search_r1_batch_search(service + PATH, queries, topk)
            assert set(answer) == {"result"} and len(answer["result"]) == len(queries)
            for hits, result in zip(ours.search(queries, k=topk), answer["result"], strict=True):
                assert [item["document"]["id"] for item in result] == [hit.id for hit in hits]
                assert [item["score"] for item in result] == [hit.score for hit in hits]
                assert search_r1_passages2string(result) == "".join(
                    f'Doc {n}(Title: "{hit.title}") {hit.text}\n' for n, hit in enumerate(hits, 1)
                )
            full = [len(hits) for hits in answer["result"][:-2]]
            assert max(full) == topk and all(n <= topk for n in full)
            assert answer["result"][-2:] == [[], []]  # no indexed word: no passage


def test_scores_only_when_asked_and_topk_defaults_to_3(service, world):
    query = world.questions[0].hop_queries[0]
    with_scores = requests.post(service + PATH, json={"queries": [query], "return_scores": True}).json()
    plain = requests.post(service + PATH, json={"queries": [query], "topk": None}).json()
    assert len(plain["result"][0]) == 3
    assert plain["result"][0] == [item["document"] for item in with_scores["result"][0]]
    assert all(set(doc) == {"id", "contents"} for doc in plain["result"][0])


def test_verl_agent_single_query(service, world):
    """verl-agent's search tool posts one ``query`` per request and reads ``result[0]``."""
    query = world.questions[1].hop_queries[0]
    with requests.Session() as session:
        answer = session.post(
            service + PATH,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            json={"query": query, "topk": 5, "return_scores": True},
            timeout=30,
        )
    answer.raise_for_status()
    batch = search_r1_batch_search(service + PATH, [query], 5)
    assert answer.json() == batch and len(batch["result"][0]) == 5


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"queries": [], "topk": 3}, "queries is empty"),
        ({"queries": ["lake", 7], "topk": 3}, "query 1 is a int"),
        ({"queries": "lake", "topk": 3}, "must be a list of strings"),
        ({"query": ["lake"]}, "query must be a string"),
        ({"queries": ["lake"], "query": "lake"}, "either"),
        ({"topk": 3}, "either"),
        ({"queries": ["lake"], "topk": 0}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "topk": -2}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "topk": MAX_TOPK + 1}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "topk": 10**30}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "topk": "3"}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "topk": True}, f"from 1 to {MAX_TOPK}"),
        ({"queries": ["lake"], "return_scores": "yes"}, "return_scores must be true or false"),
        ({"queries": ["lake"], "k": 5}, "unknown keys ['k']"),
        ({"queries": ["x" * (MAX_QUERY_CHARS + 1)]}, f"the limit is {MAX_QUERY_CHARS}"),
        ({"queries": ["lake"] * (MAX_BATCH + 1)}, f"the limit is {MAX_BATCH}"),
        ([["lake"]], "must be a JSON object"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(service, payload, message):
    response = httpx.post(service + PATH, json=payload)
    assert response.status_code == 400 and message in response.json()["error"]


def test_bodies_that_are_not_json_or_too_big(service):
    response = httpx.post(service + PATH, content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]
    body = json.dumps({"queries": ["lake " * 800] * 2_600}).encode()  # 10 MB
    assert len(body) > MAX_BODY_BYTES
    response = httpx.post(service + PATH, content=body)
    assert response.status_code == 413 and f"the limit is {MAX_BODY_BYTES}" in response.json()["error"]
    assert httpx.get(service + PATH).status_code == 405
