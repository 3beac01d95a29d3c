"""Tests of the generated search world: determinism, uniqueness, splits, that every hop's fact is
stated in its supporting passage, and that each hop's gold query finds that passage with BM25."""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

import pytest

from agentgym.envs.search.world import (
    SPLITS,
    Passage,
    Question,
    World,
    generate_world,
    iter_passages,
)

YEAR = re.compile(r"\b\d{4}\b")


@pytest.fixture(scope="module")
def by_id(world: World) -> dict[str, Passage]:
    return {p.id: p for p in world.passages}


def entity_titles(world: World) -> set[str]:
    """Titles of entity passages (names have no digits; news titles are dated)."""
    return {p.title for p in world.passages if not re.search(r"\d", p.title)}


def sides(q: Question) -> list[tuple[str, ...]]:
    """A question's hops per start entity: one chain for a bridge, two for a comparison (a
    3-hop comparison bridges its first option)."""
    if q.type == "bridge":
        return [q.supporting]
    cut = {2: 1, 3: 2, 4: 2}[q.hops]
    return [q.supporting[:cut], q.supporting[cut:]]


def test_same_seed_same_world_other_seed_other_names(world: World) -> None:
    assert generate_world(0) == world
    names = entity_titles(world)
    other = {p.title for p in generate_world(1).passages}
    assert len(names & other) < 0.05 * len(names)


def test_sizes_and_unique_ids_and_titles(world: World) -> None:
    assert 3000 <= len(world.passages) <= 5000
    assert len(world.questions) >= 1500
    for items in (
        [p.id for p in world.passages],
        [p.title for p in world.passages],
        [q.id for q in world.questions],
        [q.question for q in world.questions],
    ):
        assert len(set(items)) == len(items)


def test_splits_are_disjoint_and_each_has_every_hop_count_and_type(world: World) -> None:
    splits = {name: world.split(name) for name in SPLITS}
    assert sum(map(len, splits.values())) == len(world.questions)
    assert 0.75 < len(splits["train"]) / len(world.questions) < 0.85
    for name, questions in splits.items():
        assert {q.split for q in questions} == {name}
        kinds = Counter((q.type, q.hops) for q in questions)
        assert {h for t, h in kinds if t == "bridge"} == {1, 2, 3, 4}
        assert {h for t, h in kinds if t == "comparison"} == {2, 3, 4}
    starts = {name: {side[0] for q in qs for side in sides(q)} for name, qs in splits.items()}
    assert not starts["train"] & starts["test"]
    assert not starts["train"] & starts["dev"]


def test_bad_split_names_the_valid_ones(world: World) -> None:
    with pytest.raises(ValueError, match="train, dev, test"):
        world.split("bogus")


def test_questions_are_well_formed(world: World, by_id: dict[str, Passage]) -> None:
    for q in world.questions:
        assert q.type in ("bridge", "comparison") and 1 <= q.hops <= 4
        assert len(q.supporting) == len(q.hop_queries) == q.hops
        assert all(s in by_id for s in q.supporting)
        assert q.answers and all(q.answers)
        # Each hop's query names the entity whose passage it needs; the first hops name the
        # entities the question starts from.
        for s, query in zip(q.supporting, q.hop_queries, strict=True):
            assert query.startswith(by_id[s].title + " ")
        for side in sides(q):
            assert by_id[side[0]].title in q.question


def test_every_bridge_fact_is_stated(world: World, by_id: dict[str, Passage]) -> None:
    for q in world.questions:
        for side in sides(q):
            for a, b in pairwise(side):  # each link names the next hop's entity
                assert by_id[b].title in by_id[a].text, q
        if q.type == "bridge":
            last = by_id[q.supporting[-1]]
            assert q.answers[0] in last.text or q.answers[0] == last.title, q
            assert q.answers[0].lower() not in q.question.lower(), q


def test_every_comparison_is_decided_by_stated_years(world: World, by_id: dict[str, Passage]) -> None:
    entities = entity_titles(world)
    for p in world.passages:  # an entity passage states one year, its own (none for a country)
        if p.title in entities:
            assert len(YEAR.findall(p.text)) <= 1, p
    comparisons = [q for q in world.questions if q.type == "comparison"]
    for q in comparisons:
        a, b = (by_id[side[-1]] for side in sides(q))
        (ya,), (yb,) = YEAR.findall(a.text), YEAR.findall(b.text)
        assert ya != yb
        later = any(word in q.question for word in ("later", "younger", "more recent"))
        winner = a if (int(ya) > int(yb)) == later else b
        assert q.answers[0] == winner.title, q
    assert Counter(
        q.answers[0] == by_id[q.supporting[0]].title for q in comparisons if q.hops == 2
    ).keys() == {True, False}


def test_aliases_are_safe(world: World) -> None:
    titles = {p.title for p in world.passages}
    for q in world.questions:
        for alias in q.answers[1:]:
            assert q.answers[0] == "The " + alias and alias not in titles


def test_iter_passages_streams_exactly_n_unique_passages(world: World) -> None:
    passages = list(iter_passages(0, 5000))
    assert len(passages) == 5000
    assert len({p.id for p in passages}) == 5000
    assert passages[: len(world.passages)] == world.passages
    assert list(iter_passages(0, 0)) == []
    with pytest.raises(ValueError):
        iter_passages(0, -1)


def test_small_worlds_and_bad_sizes() -> None:
    small = generate_world(3, num_entities=100)
    assert small.passages and small.questions
    with pytest.raises(ValueError):
        generate_world(0, num_entities=10)


def test_hop_queries_find_supporting_passages_with_bm25(world: World) -> None:
    bm25s = pytest.importorskip("bm25s")
    texts = [p.title + " " + p.text for p in world.passages]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    hops = [(q.hop_queries[i], q.supporting[i]) for q in world.questions for i in range(q.hops)]
    docs, _ = retriever.retrieve(
        bm25s.tokenize([query for query, _ in hops], stopwords="en", show_progress=False),
        k=10,
        show_progress=False,
    )
    ids = [p.id for p in world.passages]
    found = sum(gold in {ids[d] for d in row} for (_, gold), row in zip(hops, docs, strict=True))
    assert found / len(hops) >= 0.95
