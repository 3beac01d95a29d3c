"""The paraphrased hop queries of the generated world: each names its entity and shares no other
word with the passage it should find, and they are drawn apart from the rest of the world (what
each retrieval finds with them is `benchmarks/retrieval.py dense`'s paraphrase column)."""

from __future__ import annotations

import dataclasses

from agentgym.envs.search import world as world_module
from agentgym.envs.search.index import tokenize
from agentgym.envs.search.world import Passage, Question, World, generate_world


def test_paraphrases_name_the_entity_and_share_no_other_word_with_its_passage(world: World) -> None:
    by_id = {p.id: p for p in world.passages}
    hops = [(para, by_id[s]) for q in world.questions for para, s in zip(q.hop_paraphrases, q.supporting)]
    assert len(hops) == sum(q.hops for q in world.questions)
    paras = tokenize([para for para, _ in hops], return_ids=False)
    titles = tokenize([p.title for _, p in hops], return_ids=False)
    texts = tokenize([p.text for _, p in hops], return_ids=False)
    for (para, passage), words, name, text in zip(hops, paras, titles, texts, strict=True):
        assert passage.title in para, para
        assert not (set(words) - set(name)) & set(text), (para, passage.text)
    assert len({para for para, _ in hops}) > 0.5 * len(hops)


def _without_paraphrases(world: World) -> tuple[list[Passage], list[Question]]:
    return world.passages, [dataclasses.replace(q, hop_paraphrases=()) for q in world.questions]


def test_paraphrases_are_drawn_apart_from_the_rest_of_the_world(monkeypatch) -> None:
    """With one template per fact instead of three, only the paraphrases change."""
    full = generate_world(3, num_entities=100)
    for key, rel in world_module._RELS.items():
        fewer_templates = dataclasses.replace(rel, paraphrases=rel.paraphrases[:1])
        monkeypatch.setitem(world_module._RELS, key, fewer_templates)
    fewer = generate_world(3, num_entities=100)
    assert _without_paraphrases(fewer) == _without_paraphrases(full)
    assert [q.hop_paraphrases for q in fewer.questions] != [q.hop_paraphrases for q in full.questions]
