"""``agentgym/SearchQA-v0``: answer a question by searching a passage collection over turns.

Every reply of the agent does one thing, in the format of Search-R1:

- ``<search>query</search>``: the observation lists the top ``top_k`` passages for the query
  (``Doc 1 (Title: ...) text``, inside ``<information>...</information>``);
- ``<answer>...</answer>``: ends the episode; the reward is the answer's word F1 (``reward="f1"``,
  default) or exact match (``"em"``) against the gold answers, after SQuAD normalization.

A reply with neither tag, both, an empty tag, or a query over
:data:`~agentgym.envs.search.index.MAX_QUERY_CHARS` characters is invalid: the observation says
why, ``info["action_valid"]`` is False, and the reward is ``-format_penalty``. After ``max_turns``
replies without an answer the episode is truncated with reward 0.

Data: by default the generated world (:mod:`~agentgym.envs.search.world`, ``world_seed``) and
its ``split``; its index is built once into ``$AGENTGYM_CACHE/search/`` (named by the
passages' digest) and shared. Your own
data: ``questions=QA.jsonl`` plus ``index=DIR`` (from ``agentgym index``), ``corpus=PASSAGES.jsonl``
(indexed once into the cache), or ``retriever=URL`` (a running retrieval service).

Retrieval: ``retrieval="bm25"`` (the default), ``"dense"`` or ``"hybrid"``
(:mod:`~agentgym.envs.search.retrieval`). Dense and hybrid need the index's dense part: built
once into the cache for the world and ``corpus=``, by ``agentgym index --retrieval dense`` for
``index=``; ``encoder=`` names the model folder that embeds (default: the embedded
all-MiniLM-L6-v2; the one the index was built with for ``index=``). With ``retriever=URL`` the
service retrieves, as ``retrieval`` asks (default: as the service was started).

``info`` carries ``ground_truth`` (the canonical gold answer, for IGPO), ``task_type``
(``bridge-2hop``, ...), ``supporting_found`` (the fraction of the question's supporting
passages retrieved so far, when known) and, after an answer, ``em`` and ``f1``. The
``state_key`` is the question id and the sorted titles retrieved so far, so episodes that found
the same passages share a GiGPO anchor state (and similar retrievals similar keys).
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path
from typing import Any, ClassVar

from agentgym.cache import cache_dir, host_lock
from agentgym.env import TextEnv, coerce_action, extract_tag, pick_task
from agentgym.envs.search.dense import DenseIndex
from agentgym.envs.search.encoder import DEFAULT_ENCODER, resolve_encoder
from agentgym.envs.search.index import MAX_QUERY_CHARS, BM25Index, Hit, Retriever
from agentgym.envs.search.retrieval import check_retrieval, open_retriever
from agentgym.envs.search.rewards import exact_match, word_f1
from agentgym.envs.search.world import Question, generate_world

__all__ = ["SearchQAEnv", "cached_index"]

INSTRUCTION = "Answer the question. Search the documents as often as you need first."


@functools.lru_cache(maxsize=8)
def _world(seed: int) -> Any:
    return generate_world(seed)


@functools.lru_cache(maxsize=8)
def _open(path: str, retrieval: str, encoder: str | None) -> Retriever:
    return open_retriever(path, retrieval, encoder=encoder)


def cached_index(name: str, passages: Any, retrieval: str = "bm25", encoder: str | None = None) -> Retriever:
    """The ``retrieval`` of the index called ``name`` in the cache, built from ``passages()`` (a
    callable returning an iterable) the first time, its dense part (when ``retrieval`` needs
    one) the first time it is needed, embedded with ``encoder`` (an index of its own for an
    encoder other than the default); concurrent processes build each once (a host lock)."""
    check_retrieval(retrieval)
    if encoder == DEFAULT_ENCODER:
        encoder = None
    if encoder is not None and retrieval != "bm25":
        name = f"{name}-{_file_key(resolve_encoder(encoder))}"
    path = cache_dir() / "search" / name
    with host_lock(f"search-{name}"):
        if not (path / "index.json").exists():
            BM25Index.build(passages(), path, overwrite=True)
        if retrieval != "bm25" and not DenseIndex.exists(path):
            bm25 = _open(str(path), "bm25", None)
            assert isinstance(bm25, BM25Index)
            DenseIndex.build(bm25, encoder=encoder, progress=sys.stderr.isatty(), overwrite=True)
    return _open(str(path), retrieval, encoder)


def _passages_digest(passages: list[Any]) -> str:
    """Names the index of a generated world by its content, so a changed generator never
    reads a stale index."""
    digest = hashlib.sha256()
    for p in passages:
        digest.update(f"{p.id}\0{p.title}\0{p.text}\0".encode())
    return digest.hexdigest()[:16]


def _file_key(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]


class SearchQAEnv(TextEnv):
    """Multi-hop QA by search; see the module documentation. Copies and pickles share the
    read-only index (see BM25Index); a retrieval service's client is made anew.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"`` of the generated world (with ``questions``:
            only a label).
        world_seed: which generated world.
        questions: a QA file (JSONL/JSON/Parquet; :func:`~agentgym.envs.search.corpus.read_questions`).
        index, corpus, retriever: where passages come from with ``questions`` (exactly one).
        retrieval: ``"bm25"``, ``"dense"`` or ``"hybrid"`` (``None``: ``"bm25"``, or the
            service's default with ``retriever``).
        encoder: the model folder that embeds queries and passages for dense and hybrid
            retrieval (``None``: the default, or for ``index`` the one it was built with).
        top_k: passages shown per search.
        max_turns: replies before the episode is truncated.
        reward: ``"f1"`` or ``"em"``.
        format_penalty: subtracted for an invalid reply (>= 0).
        max_passage_chars: each shown passage is cut to this many characters.
    """

    family: ClassVar[str] = "search"

    def __init__(
        self,
        *,
        split: str = "train",
        world_seed: int = 0,
        questions: str | None = None,
        index: str | None = None,
        corpus: str | None = None,
        retriever: str | None = None,
        retrieval: str | None = None,
        encoder: str | None = None,
        top_k: int = 3,
        max_turns: int = 6,
        reward: str = "f1",
        format_penalty: float = 0.1,
        max_passage_chars: int = 600,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        for name, value in (
            ("top_k", top_k),
            ("max_turns", max_turns),
            ("max_passage_chars", max_passage_chars),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SearchQAEnv: {name} must be an int >= 1, got {value!r}")
        if reward not in ("f1", "em"):
            raise ValueError(f"SearchQAEnv: reward must be 'f1' or 'em', got {reward!r}")
        if not format_penalty >= 0:
            raise ValueError(f"SearchQAEnv: format_penalty must be >= 0, got {format_penalty!r}")
        self.top_k, self.max_turns, self.reward_kind = top_k, max_turns, reward
        self.format_penalty, self.max_passage_chars = float(format_penalty), max_passage_chars
        if retrieval is not None:
            check_retrieval(retrieval)
        if encoder is not None and retrieval not in ("dense", "hybrid"):
            raise ValueError("SearchQAEnv: encoder= is for retrieval='dense' or 'hybrid'")
        if encoder is not None and retriever is not None:
            raise ValueError("SearchQAEnv: encoder= is for local data; a retrieval service has its own")
        self.questions, self.retriever = self._data(
            split, world_seed, questions, index, corpus, retriever, retrieval, encoder
        )
        self._by_id = {q.id: q for q in self.questions}
        self._question: Question = self.questions[0]
        self._turns, self._done = 0, False
        self._titles: set[str] = set()  # of the passages retrieved so far
        self._found: set[str] = set()  # their ids
        self._answer_scores: dict[str, float] = {}

    @staticmethod
    def _data(
        split: str,
        world_seed: int,
        questions: str | None,
        index: str | None,
        corpus: str | None,
        retriever: str | None,
        retrieval: str | None,
        encoder: str | None,
    ) -> tuple[list[Question], Retriever]:
        local = retrieval or "bm25"
        sources = {
            k: v for k, v in (("index", index), ("corpus", corpus), ("retriever", retriever)) if v is not None
        }
        if questions is None:
            if sources:
                raise ValueError(f"SearchQAEnv: {sorted(sources)} need questions=QA_FILE too")
            world = _world(world_seed)
            name = f"world-{world_seed}-{_passages_digest(world.passages)}"
            return world.split(split), cached_index(name, lambda: world.passages, local, encoder)
        if len(sources) != 1:
            raise ValueError(
                "SearchQAEnv: with questions=..., give exactly one of index=DIR, "
                f"corpus=PASSAGES.jsonl, retriever=URL (got {sorted(sources) or 'none'})"
            )
        from agentgym.envs.search.corpus import read_passages, read_questions

        qs = read_questions(questions, split)
        if index is not None:
            return qs, _open(str(Path(index)), local, encoder)
        if corpus is not None:
            path = Path(corpus)
            if not path.is_file():
                raise FileNotFoundError(f"SearchQAEnv: no corpus file {path}")
            name = f"corpus-{_file_key(path)}"
            return qs, cached_index(name, lambda: read_passages(path), local, encoder)
        from agentgym.envs.search.service import RetrieverClient

        return qs, RetrieverClient(str(retriever), retrieval=retrieval)

    def close(self) -> None:
        """Close a retrieval service's client (an index is shared, and stays open)."""
        from agentgym.envs.search.service import RetrieverClient

        if isinstance(self.retriever, RetrieverClient):
            self.retriever.close()
        super().close()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on a question: ``options={"task_id": question id}``, else one drawn with
        ``seed``. Unknown options and ids raise ``ValueError``."""
        super().reset(seed=seed)
        self._question = pick_task(
            self.questions, self._by_id, options, self.np_random, "SearchQAEnv", "question"
        )
        self._turns, self._done, self._titles, self._found = 0, False, set(), set()
        self._answer_scores = {}
        return f"Question: {self._question.question}", self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        if self._done:
            return self.episode_over(self._info())
        self._turns += 1
        query, answer = extract_tag(text, "search"), extract_tag(text, "answer")
        problem = self._problem(query, answer)
        if problem is not None:
            observation, reward, valid = problem, -self.format_penalty, False
        elif answer is not None:
            golds = self._question.answers
            self._answer_scores = {"em": exact_match(answer, golds), "f1": word_f1(answer, golds)}
            self._done = True
            observation = f"Your answer: {answer}"
            reward, valid = self._answer_scores[self.reward_kind], True
        else:
            assert query is not None
            observation, reward, valid = self._search(query), 0.0, True
        truncated = not self._done and self._turns >= self.max_turns
        if truncated:
            observation += "\nNo replies left: the episode ends without an answer."
        info = self._info() | {"action_valid": valid}
        return observation, reward, self._done, truncated, info

    def _problem(self, query: str | None, answer: str | None) -> str | None:
        """Why a reply is invalid, or ``None``."""
        if query is not None and answer is not None:
            return "Do one thing per reply: either <search>...</search> or <answer>...</answer>, not both."
        if query is None and answer is None:
            return (
                "No action found. Write <search>your query</search> to search, or "
                "<answer>the answer</answer> to answer."
            )
        if answer is not None:
            return None if answer else "The answer is empty: write <answer>the answer</answer>."
        assert query is not None
        if not query:
            return "The query is empty: write <search>some words</search>."
        if len(query) > MAX_QUERY_CHARS:
            return (
                f"The query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}. "
                "Search with a few words."
            )
        return None

    def _search(self, query: str) -> str:
        hits: list[Hit] = self.retriever.search([query], self.top_k)[0]
        if not hits:
            return "<information>No documents match this query.</information>"
        self._titles.update(h.title for h in hits)
        self._found.update(h.id for h in hits)
        docs = [f"Doc {i} (Title: {h.title}) {self._cut(h.text)}" for i, h in enumerate(hits, 1)]
        return "<information>" + "\n".join(docs) + "</information>"

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.max_passage_chars else text[: self.max_passage_chars] + "..."

    def render_text(self) -> str:
        return (
            f"{self._question.id}: {self._question.question} -> {self._question.answers[0]}; "
            f"{self._turns}/{self.max_turns} replies; retrieved {sorted(self._titles)}"
        )

    def _info(self) -> dict[str, Any]:
        q = self._question
        info: dict[str, Any] = {
            "task_id": q.id,
            "instruction": INSTRUCTION,
            "state_key": f"{q.id}|" + " ; ".join(sorted(self._titles)),
            "success": self._answer_scores.get("em") == 1.0,
            "ground_truth": q.answers[0],
            "task_type": f"{q.type or 'qa'}-{q.hops}hop" if q.hops else (q.type or "qa"),
        }
        if q.supporting:
            info["supporting_found"] = len(self._found & set(q.supporting)) / len(q.supporting)
        return info | self._answer_scores
