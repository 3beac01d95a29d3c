"""Answer scoring for QA: SQuAD-style normalization, exact match and word-level F1.

``normalize_answer`` lowercases, drops punctuation and the articles *a*, *an*, *the*, and
collapses whitespace (the normalization of the SQuAD evaluation script that Search-R1, FlashRAG
and IGPO all use). Both scores take the best over several gold answers.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["exact_match", "normalize_answer", "word_f1"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation and articles, collapse whitespace. Unicode is NFKC-folded
    first, so full-width letters and digits compare equal to ASCII ones.

    >>> normalize_answer("  The  Amber-Loom! ")
    'amberloom'
    """
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 if the normalized prediction equals some normalized gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def word_f1(prediction: str, golds: Iterable[str]) -> float:
    """Best word-level F1 between the normalized prediction and any gold answer (0.0 when
    either side is empty after normalization)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            precision, recall = common / len(pred), common / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best
