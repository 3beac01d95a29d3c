"""Dense and hybrid retrieval: the encoder (all-MiniLM-L6-v2, the real model), the dense index
(build, memory-mapped load, exact and FAISS search, int8), reciprocal rank fusion, the service and
the env in every retrieval, and what each refuses.

The fast tests share one dense index of a few passages (``dense_index``, conftest.py); the recall
test on the generated world is slow the first time on a machine (it embeds the world's passages
into the agentgym cache)."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import requests
from starlette.testclient import TestClient

import agentgym
from agentgym.envs.search.corpus import write_jsonl
from agentgym.envs.search.dense import DenseIndex
from agentgym.envs.search.encoder import DEFAULT_ENCODER, Encoder, load_encoder, require, resolve_encoder
from agentgym.envs.search.index import MAX_QUERY_CHARS, BM25Index
from agentgym.envs.search.retrieval import RETRIEVALS, RRF_K, HybridRetriever, fuse, open_retriever
from agentgym.envs.search.service import MAX_BODY_BYTES, RetrieverClient, create_app
from agentgym.envs.search.world import Passage
from agentgym.process import ManagedProcess

from support import FIXTURES

QUESTIONS = str(FIXTURES / "search" / "questions.jsonl")
QUERIES = ["Who first climbed Mount Kestrin?", "where can I hear classical music", "a seaside port"]
TEN_MB_QUERY = "lake " * (2 << 20)


def _model_copy(tmp_path: Path, name: str, **files: str) -> Path:
    """A folder named ``name`` holding the default encoder's files (linked), with ``files``
    (relative path -> content) written over them."""
    source, folder = resolve_encoder(), tmp_path / name
    for f in source.rglob("*"):
        if f.is_file():
            (folder / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (folder / f.relative_to(source)).symlink_to(f)
    for rel, content in files.items():
        (folder / rel).unlink(missing_ok=True)
        (folder / rel).write_text(content)
    return folder


@pytest.fixture(scope="module")
def other_encoder(tmp_path_factory) -> Path:
    """The default encoder's weights with CLS pooling: the same dimensions, other vectors."""
    pooling = {"word_embedding_dimension": 384, "pooling_mode_cls_token": True}
    return _model_copy(
        tmp_path_factory.mktemp("encoders"), "minilm-cls", **{"1_Pooling/config.json": json.dumps(pooling)}
    )


@pytest.fixture
def bm25_only(dense_index, tmp_path) -> BM25Index:
    """A copy of the shared index without its dense part."""
    path = tmp_path / "bm25"
    shutil.copytree(dense_index.passages.path, path, ignore=shutil.ignore_patterns("dense"))
    return BM25Index.load(path)


# --- the encoder ------------------------------------------------------------------------------


def test_embeddings_are_deterministic_unit_vectors():
    encoder = load_encoder()
    texts = ["Who first climbed Mount Kestrin?", "a lake", "Who first climbed Mount Kestrin?"]
    first, again = encoder.encode_queries(texts), encoder.encode_queries(texts)
    assert first.dtype == np.float32 and first.shape == (3, 384) and encoder.dim == 384
    np.testing.assert_array_equal(first, again)  # same texts, same batches: the same bits
    np.testing.assert_allclose(first[0], first[2], atol=1e-6)
    np.testing.assert_allclose(encoder.encode_queries(texts[:1])[0], first[0], atol=1e-5)  # other batch
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)
    assert (encoder.pooling, encoder.max_tokens, encoder.query_prefix, encoder.passage_prefix) == (
        "mean",
        256,
        "",
        "",
    )
    np.testing.assert_array_equal(encoder.encode_passages(texts[:1])[0], encoder.encode_queries(texts[:1])[0])


def test_embeddings_are_those_of_sentence_transformers(dense_passages):
    """The reference implementation of the model (its pooling and normalization) gives the
    same vectors."""
    st = pytest.importorskip("sentence_transformers")
    texts = [f"{p.title} {p.text}" for p in dense_passages]
    reference = st.SentenceTransformer(str(resolve_encoder()), device="cpu").encode(texts)
    np.testing.assert_allclose(load_encoder().encode_passages(texts), reference, atol=1e-5)


def test_the_embedded_encoder_is_extracted_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    folder = resolve_encoder()
    assert folder == tmp_path / "models" / DEFAULT_ENCODER and (folder / "model.safetensors").is_file()
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert resolve_encoder(DEFAULT_ENCODER) == folder and (folder / "config.json").stat().st_mtime_ns == stamp
    # the package missing (another name for it here): the error says what to install
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "empty"))
    monkeypatch.setitem(
        sys.modules["agentgym.envs.search.encoder"]._EMBEDDED, DEFAULT_ENCODER, ("no_such_pkg", "model.zip")
    )
    with pytest.raises(ImportError, match=r"no-such-pkg.*pip install 'agentgym\[dense\]'"):
        resolve_encoder()
    with pytest.raises(ImportError, match=r"needs no_such_module: pip install 'agentgym\[dense\]'"):
        require("no_such_module")


def test_missing_dependencies_name_the_extra(monkeypatch, bm25_only):
    """Without torch, transformers or faiss (hidden here), dense retrieval says what to install."""
    for module in ("transformers", "faiss"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=r"needs transformers: pip install 'agentgym\[dense\]'"):
        Encoder()
    with pytest.raises(ImportError, match=r"needs faiss: pip install 'agentgym\[dense\]'"):
        DenseIndex.build(bm25_only, faiss=True)
    assert not DenseIndex.exists(bm25_only.path)


def test_an_encoder_is_a_local_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no encoder at .*nope"):
        resolve_encoder(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no encoder at intfloat/e5-base-v2"):
        resolve_encoder("intfloat/e5-base-v2")  # a hub id: never fetched


def test_prefixes_come_from_the_folder(tmp_path):
    """An E5-named folder gets E5's prefixes; a sentence-transformers config's prompts win."""
    e5 = Encoder(_model_copy(tmp_path, "e5-small-v2"))
    assert (e5.query_prefix, e5.passage_prefix) == ("query: ", "passage: ")
    plain = load_encoder()
    np.testing.assert_allclose(e5.encode_queries(["lake"]), plain.encode_queries(["query: lake"]), atol=1e-6)
    np.testing.assert_allclose(
        e5.encode_passages(["lake"]), plain.encode_passages(["passage: lake"]), atol=1e-6
    )
    prompts = {"prompts": {"query": "Q: ", "document": "D: "}}
    custom = Encoder(
        _model_copy(tmp_path, "custom", **{"config_sentence_transformers.json": json.dumps(prompts)})
    )
    assert (custom.query_prefix, custom.passage_prefix) == ("Q: ", "D: ")


# --- the dense index --------------------------------------------------------------------------


def test_build_and_memory_mapped_load_give_identical_results(dense_index):
    root = dense_index.path
    meta = json.loads((root / "meta.json").read_text())
    assert meta["dtype"] == "float16" and meta["passages"] == 8 == len(dense_index)
    assert meta["encoder"]["name"] == DEFAULT_ENCODER and meta["encoder"]["dim"] == 384
    stored = np.load(root / "embeddings.npy", mmap_mode="r")
    assert stored.dtype == np.float16 and stored.shape == (8, 384)
    assert sorted(f.name for f in root.iterdir()) == ["embeddings.npy", "meta.json"]  # no FAISS: small

    loaded = DenseIndex.load(BM25Index.load(dense_index.passages.path))
    assert isinstance(loaded._embeddings, np.memmap)
    assert loaded.search(QUERIES, k=3) == dense_index.search(QUERIES, k=3)
    hits = dense_index.search(QUERIES, k=3)
    assert [h[0].id for h in hits] == ["d3", "d7", "d5"]  # d7: not a word in common with its query
    assert all([h.score for h in q] == sorted((h.score for h in q), reverse=True) for q in hits)
    assert len(dense_index.search(["lake"], k=50)[0]) == 8  # every passage has a cosine

    data = pickle.dumps(dense_index)
    again = pickle.loads(data)
    assert len(data) < 1000 and again is not dense_index and again.search(QUERIES, k=3) == hits
    assert copy.deepcopy(dense_index) is dense_index  # read-only: copies share it


@pytest.fixture(scope="module")
def clustered(tmp_path_factory) -> tuple[BM25Index, np.ndarray]:
    """A BM25 index of 3,000 generated passages, without a dense part, and unit vectors for them
    in 30 tight clusters, every tenth a copy of the one before (near and equal scores abound)."""
    from agentgym.envs.search.world import iter_passages

    index = BM25Index.build(iter_passages(0, 3000), tmp_path_factory.mktemp("clustered") / "index")
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((30, 384))
    vectors = centers[rng.integers(0, 30, size=3000)] + 0.05 * rng.standard_normal((3000, 384))
    vectors[10::10] = vectors[9::10][: len(vectors[10::10])]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return index, vectors.astype(np.float32)


def _brute_force(index: DenseIndex, queries: np.ndarray, k: int) -> list[tuple[list[int], np.ndarray]]:
    """The k best passages by float64 products with the stored vectors, ties to the lower index."""
    stored = np.load(index.path / "embeddings.npy").astype(np.float64)
    if (index.path / "scales.npy").is_file():
        stored *= np.load(index.path / "scales.npy")[:, None]
    out = []
    for query in queries.astype(np.float64):
        products = stored @ query
        best = np.lexsort((np.arange(len(products)), -products))[:k]
        out.append((best.tolist(), products[best]))
    return out


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_exact_search_is_the_brute_force_ranking(clustered, tmp_path, dtype):
    bm25, vectors = clustered
    shutil.copytree(bm25.path, tmp_path / "index")
    index = DenseIndex.build(BM25Index.load(tmp_path / "index"), vectors=vectors, dtype=dtype, faiss=True)
    exact = DenseIndex.load(index.passages, search="exact")
    rng = np.random.default_rng(1)
    queries = vectors[rng.integers(0, 3000, size=40)] + 0.02 * rng.standard_normal((40, 384)).astype(
        np.float32
    )
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = _brute_force(exact, queries, 10)
    for (indices, scores), (best, products) in zip(exact.rank_vectors(queries, 10), truth):
        assert indices.tolist() == best
        np.testing.assert_allclose(scores, products, rtol=0, atol=1e-12)
    # FAISS visiting every cluster proposes every passage: it finds what exact search finds
    everywhere = DenseIndex.load(index.passages, search="faiss", nprobe=10_000)
    for (fi, fs), (ei, es) in zip(everywhere.rank_vectors(queries, 10), exact.rank_vectors(queries, 10)):
        assert fi.tolist() == ei.tolist() and np.array_equal(fs, es)
    found = index.rank_vectors(queries, 10)  # default nprobe: approximate
    recall = np.mean([len(set(f[0].tolist()) & set(best)) / 10 for f, (best, _) in zip(found, truth)])
    assert recall >= 0.9
    (indices, scores), *_ = exact.rank_vectors(vectors[9:10], 2)  # a passage and its copy
    assert indices.tolist() == [9, 10] and scores[0] == scores[1]


def test_concurrent_searches_give_what_one_at_a_time_gives(dense_index):
    """As the service's worker threads search (a fast tokenizer refuses concurrent calls)."""
    from concurrent.futures import ThreadPoolExecutor

    hybrid = HybridRetriever(dense_index.passages, dense_index)
    queries = [f"{q} {n}" for n in range(8) for q in QUERIES]
    alone = [hybrid.search([q], k=3) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda q: hybrid.search([q], k=3), queries)) == alone


def test_ties_go_to_the_lower_passage_index(tmp_path):
    same = [
        Passage("a", "Lake", "cold water"),
        Passage("b", "Lake", "cold water"),
        Passage("c", "Road", "dust"),
    ]
    index = DenseIndex.build(BM25Index.build(same, tmp_path / "index"))
    (hits,) = index.search(["a cold lake"], k=2)
    assert [h.id for h in hits] == ["a", "b"] and hits[0].score == hits[1].score


def test_int8_and_faiss(bm25_only, dense_index):
    index = DenseIndex.build(bm25_only, dtype="int8", faiss=True)
    root = index.path
    assert {"scales.npy", "faiss.index"} <= {f.name for f in root.iterdir()}
    assert np.load(root / "embeddings.npy", mmap_mode="r").dtype == np.int8
    assert index._faiss is not None  # search="auto" uses the FAISS index when there is one
    assert DenseIndex.load(bm25_only, search="exact")._faiss is None
    # int8 ranks as float16 does, with scores about 1e-2 off
    for int8, half in zip(index.search(QUERIES, k=1), dense_index.search(QUERIES, k=1)):
        assert int8[0].id == half[0].id and int8[0].score == pytest.approx(half[0].score, abs=2e-2)
    with pytest.raises(FileNotFoundError, match="no FAISS index"):
        DenseIndex.load(dense_index.passages, search="faiss")


def test_bad_builds_and_loads_are_refused(dense_index, bm25_only):
    with pytest.raises(FileExistsError, match="overwrite"):
        DenseIndex.build(dense_index.passages)
    with pytest.raises(ValueError, match="dtype must be one of"):
        DenseIndex.build(bm25_only, dtype="bfloat16")
    with pytest.raises(ValueError, match="batch_size must be"):
        DenseIndex.build(bm25_only, batch_size=0)
    with pytest.raises(ValueError, match=r"vectors must be \(8, 384\)"):
        DenseIndex.build(bm25_only, vectors=np.zeros((3, 384), dtype=np.float32))
    not_unit = np.ones((8, 384), dtype=np.float32)
    with pytest.raises(ValueError, match="row 0 has norm 19.6"):
        DenseIndex.build(bm25_only, vectors=not_unit)
    assert not DenseIndex.exists(bm25_only.path)  # nothing half-built
    with pytest.raises(ValueError, match="search must be one of"):
        DenseIndex.load(dense_index.passages, search="fast")
    with pytest.raises(ValueError, match="nprobe must be"):
        DenseIndex.load(dense_index.passages, nprobe=0)


def test_an_index_built_with_another_encoder_is_refused(dense_index, other_encoder):
    with pytest.raises(ValueError, match=f"built with the encoder '{DEFAULT_ENCODER}'.*embeds differently"):
        DenseIndex.load(dense_index.passages, encoder=str(other_encoder))
    with pytest.raises(FileNotFoundError, match="no encoder at"):
        DenseIndex.load(dense_index.passages, encoder="/nowhere/e5")


# --- fusion -----------------------------------------------------------------------------------


def _ranking(*indices: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array(indices, dtype=np.int64), np.zeros(len(indices))


def test_reciprocal_rank_fusion_by_hand():
    assert RRF_K == 60
    # BM25 ranks passages 3, 1, 2; dense ranks 1, 4. Passage 1: 1/62 + 1/61; 3: 1/61; 4: 1/62; 2: 1/63.
    indices, scores = fuse([_ranking(3, 1, 2), _ranking(1, 4)], k=3)
    assert indices.tolist() == [1, 3, 4]
    assert scores.tolist() == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62])
    indices, _ = fuse([_ranking(3, 1, 2), _ranking(1, 4)], k=10)
    assert indices.tolist() == [1, 3, 4, 2]
    indices, scores = fuse([_ranking(6, 5), _ranking(5, 6)], k=2)  # a tie: the lower index first
    assert indices.tolist() == [5, 6] and scores[0] == scores[1] == 1 / 61 + 1 / 62
    indices, scores = fuse([_ranking(2, 0), _ranking()], k=5, constant=0)
    assert indices.tolist() == [2, 0] and scores.tolist() == [1.0, 0.5]
    assert fuse([_ranking(), _ranking()], k=3)[0].size == 0


def test_hybrid_search_fuses_bm25_and_dense(dense_index):
    bm25 = dense_index.passages
    hybrid = HybridRetriever(bm25, dense_index)
    for query, hits in zip(QUERIES, hybrid.search(QUERIES, k=4)):
        lists = [bm25.rank([query], 100)[0], dense_index.rank([query], 100)[0]]
        assert hits == bm25.hits(*fuse(lists, 4))
    (music,) = hybrid.search(["where can I hear classical music"], k=3)  # BM25 finds nothing
    assert bm25.search(["where can I hear classical music"], k=3) == [[]]
    assert [h.id for h in music] == [
        h.id for h in dense_index.search(["where can I hear classical music"], 3)[0]
    ]
    assert pickle.loads(pickle.dumps(hybrid)).search(QUERIES, k=4) == hybrid.search(QUERIES, k=4)


# --- bad inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", RETRIEVALS)
def test_bad_queries_are_refused_in_every_retrieval(dense_index, retrieval):
    retriever = open_retriever(dense_index.passages.path, retrieval)
    assert retriever.search(["", "   "], k=3) == [[], []]  # nothing to search for: no passage
    with pytest.raises(ValueError, match=f"the limit is {MAX_QUERY_CHARS}"):
        retriever.search([TEN_MB_QUERY])
    with pytest.raises(TypeError, match="list of strings"):
        retriever.search("lake")
    with pytest.raises(ValueError, match="k must be"):
        retriever.search(["lake"], k=0)


def test_unknown_retrievals_and_missing_dense_parts_are_named(dense_index, bm25_only):
    with pytest.raises(ValueError, match="unknown retrieval 'sparse'; choose one of bm25, dense, hybrid"):
        open_retriever(dense_index.passages.path, "sparse")
    for retrieval in ("dense", "hybrid"):
        with pytest.raises(FileNotFoundError, match=r"has no dense part .*--retrieval dense"):
            open_retriever(bm25_only.path, retrieval)


# --- the command ------------------------------------------------------------------------------


def test_index_command_builds_every_retrieval(dense_passages, tmp_path):
    from agentgym.cli import main

    corpus = tmp_path / "passages.jsonl"
    write_jsonl(dense_passages[:4], corpus)
    out = tmp_path / "idx"
    assert main(["index", str(corpus), str(out), "--retrieval", "hybrid", "--dtype", "int8"]) == 0
    assert DenseIndex.exists(out) and (out / "dense" / "scales.npy").is_file()
    (hits,) = open_retriever(out, "hybrid").search(["Mount Kestrin first climbed"], k=2)
    assert hits[0].id == "d3"
    bad = ["index", str(corpus), str(tmp_path / "idx2"), "--retrieval", "dense"]
    assert main([*bad, "--encoder", str(tmp_path / "nope")]) == 2
    assert main([*bad[:3], "--encoder", str(tmp_path / "nope")]) == 2  # --encoder without dense
    assert not (tmp_path / "idx2").exists()


# --- the service ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(dense_index, tmp_path_factory) -> Iterator[str]:
    """The real service (a subprocess) over the shared dense index, hybrid by default; its URL."""
    tmp = tmp_path_factory.mktemp("dense_service")
    ready = tmp / "ready.json"
    argv = [sys.executable, "-m", "agentgym.envs.search.service", str(dense_index.passages.path)]
    argv += ["--port", "0", "--retrieval", "hybrid", "--ready-file", str(ready)]
    with ManagedProcess(argv, log_path=tmp / "service.log", name="the retrieval service") as process:
        process.wait_ready(ready.exists, timeout=120)
        yield json.loads(ready.read_text())["url"]


def _same(a, b) -> bool:
    """The same passages in the same order, scores equal up to float rounding (each side
    embeds the queries in its own process)."""
    return [[h.id for h in q] for q in a] == [[h.id for h in q] for q in b] and all(
        x.score == pytest.approx(y.score, abs=1e-6) for qa, qb in zip(a, b) for x, y in zip(qa, qb)
    )


def test_the_service_answers_in_every_retrieval(service, dense_index):
    path = dense_index.passages.path
    queries = [*QUERIES, ""]
    with RetrieverClient(service) as default:
        assert default.health() == {"passages": 8, "retrievals": list(RETRIEVALS), "default": "hybrid"}
        assert _same(default.search(queries, k=3), open_retriever(path, "hybrid").search(queries, k=3))
    for retrieval in RETRIEVALS:
        with RetrieverClient(service, retrieval=retrieval) as client:
            assert _same(client.search(queries, k=3), open_retriever(path, retrieval).search(queries, k=3))
    # the Search-R1 endpoint takes the retrieval too, and gives the same passages
    answer = requests.post(
        service + "/search-r1/retrieve",
        json={"queries": QUERIES, "topk": 3, "return_scores": True, "retrieval": "dense"},
    ).json()
    assert [[item["document"]["id"] for item in result] for result in answer["result"]] == [
        [h.id for h in hits] for hits in dense_index.search(QUERIES, k=3)
    ]


@pytest.mark.parametrize(
    "path, payload, message",
    [
        ("/retrieve", {"queries": ["lake"], "retrieval": "sparse"}, "unknown retrieval 'sparse'"),
        ("/retrieve", {"queries": ["lake"], "retrieval": 3}, "unknown retrieval 3"),
        ("/retrieve", {"queries": ["x" * (MAX_QUERY_CHARS + 1)], "retrieval": "dense"}, "the limit is"),
        ("/search-r1/retrieve", {"queries": ["lake"], "retrieval": "sparse"}, "unknown retrieval"),
        ("/search-r1/retrieve", {"queries": [], "retrieval": "dense"}, "queries is empty"),
    ],
)
def test_the_service_refuses_bad_requests(service, path, payload, message):
    response = httpx.post(service + path, json=payload)
    assert response.status_code == 400 and message in response.json()["error"]


def test_the_service_refuses_a_10_mb_query(service):
    body = json.dumps({"queries": [TEN_MB_QUERY], "retrieval": "dense"}).encode()
    assert len(body) > MAX_BODY_BYTES
    response = httpx.post(service + "/retrieve", content=body)
    assert response.status_code == 413 and f"the limit is {MAX_BODY_BYTES}" in response.json()["error"]


def test_a_service_without_a_dense_part_says_so(bm25_only):
    from agentgym.envs.search.service import main

    with TestClient(create_app({"bm25": bm25_only}, len(bm25_only))) as client:
        response = client.post("/retrieve", json={"queries": ["lake"], "retrieval": "hybrid"})
        assert response.status_code == 400 and "needs the index's dense part" in response.json()["error"]
        assert client.get("/health").json()["retrievals"] == ["bm25"]
    with pytest.raises(SystemExit, match="needs the index's dense part"):
        main([str(bm25_only.path), "--retrieval", "dense"])
    with pytest.raises(SystemExit, match="no dense part to query"):
        main([str(bm25_only.path), "--encoder", "/some/model"])


# --- the env ----------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", ["dense", "hybrid"])
def test_the_env_searches_with_dense_and_hybrid(dense_index, retrieval):
    index = str(dense_index.passages.path)
    env = agentgym.make("agentgym/SearchQA-v0", questions=QUESTIONS, index=index, retrieval=retrieval)
    env.reset(options={"task_id": "nq_2"})
    obs, *_ = env.step("<search>who reached the summit of Mount Kestrin first</search>")
    assert obs.startswith("<information>Doc 1 (Title: Mount Kestrin)")
    again = pickle.loads(pickle.dumps(env))
    assert type(again.unwrapped.retriever) is type(env.unwrapped.retriever)
    assert (
        again.step("<search>classical music</search>")[0] == env.step("<search>classical music</search>")[0]
    )
    obs, reward, terminated, *_ = env.step("<answer>Ada Wren</answer>")
    assert terminated and reward == 1.0
    env.close()


def test_the_env_over_a_service_asks_for_its_retrieval(service):
    env = agentgym.make("agentgym/SearchQA-v0", questions=QUESTIONS, retriever=service, retrieval="dense")
    env.reset(options={"task_id": "nq_1"})
    obs, *_ = env.step("<search>where can I hear classical music</search>")
    assert "(Title: Ellis Orchestra)" in obs.splitlines()[0]
    again = pickle.loads(pickle.dumps(env))
    assert (
        again.unwrapped.retriever.retrieval == "dense"
        and again.unwrapped.retriever is not env.unwrapped.retriever
    )
    again.close()
    env.close()


def test_the_env_caches_a_corpus_dense_part_per_encoder(dense_passages, tmp_path, monkeypatch, other_encoder):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "passages.jsonl"
    write_jsonl(dense_passages, corpus)
    kwargs = {"questions": QUESTIONS, "corpus": str(corpus)}
    agentgym.make("agentgym/SearchQA-v0", retrieval="hybrid", **kwargs)
    (meta,) = (tmp_path / "cache" / "search").glob("corpus-*/dense/meta.json")
    stamp = meta.stat().st_mtime_ns
    env = agentgym.make("agentgym/SearchQA-v0", retrieval="dense", **kwargs)  # built once, shared
    assert meta.stat().st_mtime_ns == stamp and isinstance(env.unwrapped.retriever, DenseIndex)
    env = agentgym.make("agentgym/SearchQA-v0", retrieval="dense", encoder=str(other_encoder), **kwargs)
    assert env.unwrapped.retriever.encoder.pooling == "cls"
    assert len(list((tmp_path / "cache" / "search").glob("corpus-*/dense/meta.json"))) == 2


def test_bad_env_kwargs_are_refused(dense_index, bm25_only):
    index = str(dense_index.passages.path)
    with pytest.raises(ValueError, match="unknown retrieval 'sparse'"):
        agentgym.make("agentgym/SearchQA-v0", questions=QUESTIONS, index=index, retrieval="sparse")
    with pytest.raises(ValueError, match="encoder= is for retrieval='dense' or 'hybrid'"):
        agentgym.make("agentgym/SearchQA-v0", questions=QUESTIONS, index=index, encoder="/x")
    with pytest.raises(ValueError, match="a retrieval service has its own"):
        agentgym.make(
            "agentgym/SearchQA-v0", questions=QUESTIONS, retriever="http://x", retrieval="dense", encoder="/x"
        )
    with pytest.raises(FileNotFoundError, match="has no dense part"):
        agentgym.make(
            "agentgym/SearchQA-v0", questions=QUESTIONS, index=str(bm25_only.path), retrieval="dense"
        )


def test_clients_may_choose_the_retrieval_but_not_the_encoder():
    from agentgym.server.hostable import check_client_kwargs

    assert check_client_kwargs("agentgym/SearchQA-v0", {"retrieval": "hybrid"}, frozenset()) == {
        "retrieval": "hybrid"
    }
    with pytest.raises(Exception, match="may not set 'encoder'"):
        check_client_kwargs("agentgym/SearchQA-v0", {"encoder": "/models/e5"}, frozenset())


# --- the generated world ----------------------------------------------------------------------


@pytest.mark.slow
def test_recall_on_the_generated_world(world, world_dense_index):
    """recall@5 of each hop's supporting passage, queried with its gold hop query (a fixed
    sample of 1 in 10), in every retrieval: measured 100%, 99.8% and 100% (benchmarks/retrieval.py)."""
    bm25 = world_dense_index.passages
    pairs = [(q.hop_queries[i], q.supporting[i]) for q in world.questions for i in range(q.hops)][::10]
    floors = {"bm25": 0.99, "dense": 0.98, "hybrid": 0.99}
    for name, retriever in (
        ("bm25", bm25),
        ("dense", world_dense_index),
        ("hybrid", HybridRetriever(bm25, world_dense_index)),
    ):
        results = retriever.search([query for query, _ in pairs], k=5)
        recall = np.mean([doc in {h.id for h in hits} for (_, doc), hits in zip(pairs, results)])
        assert recall >= floors[name], f"{name} recall@5 {recall:.3f}"


@pytest.mark.slow
def test_an_episode_on_the_generated_world_with_hybrid_retrieval(world, world_dense_index):
    env = agentgym.make("agentgym/SearchQA-v0", split="dev", retrieval="hybrid")
    question = next(q for q in world.split("dev") if q.hops == 2 and q.type == "bridge")
    env.reset(options={"task_id": question.id})
    for hop_query in question.hop_queries:
        *_, info = env.step(f"<search>{hop_query}</search>")
    assert info["supporting_found"] == 1.0
    env.close()
