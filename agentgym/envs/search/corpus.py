"""Passages and questions from the files people already have, and back.

Passages: JSONL, one object per line, with an id (``id``, ``_id`` or ``docid``), a ``title``
(optional) and a ``text``. FlashRAG's and Search-R1's wiki dumps carry ``contents`` instead:
the title (often in double quotes) on the first line and the text after it; that is split
apart.

Questions: JSONL, a JSON list, or Parquet (with pyarrow), one record per question with
``question`` and gold answers in ``golden_answers`` (FlashRAG, Search-R1), ``answers`` or
``answer`` (a string or a list); an id in ``id``, ``_id`` or ``qid`` (else ``"<file stem>-<n>"``).
A Search-R1 record whose gold answers sit in ``reward_model.ground_truth.target`` works too.

Every error names the file (and line) it comes from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentgym.envs.search.world import Passage, Question

__all__ = ["read_passages", "read_questions", "write_jsonl"]

_ID_KEYS = ("id", "_id", "docid", "qid")


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, record) of a JSONL file, a JSON list, or a Parquet file."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(f"reading {path} needs pyarrow (`pip install pyarrow`)") from None
        yield from enumerate(pq.read_table(path).to_pylist(), 1)
        return
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
        yield from enumerate(data, 1)
        return
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None


def _get(record: Any, keys: Iterable[str], where: str, what: str) -> Any:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for key in keys:
        if record.get(key) is not None:
            return record[key]
    raise ValueError(f"{where}: no {what} (looked for {', '.join(keys)}); keys present: {sorted(record)}")


def read_passages(path: str | os.PathLike[str]) -> Iterator[Passage]:
    """Stream the passages of a JSONL corpus (see the module documentation)."""
    path = Path(path)
    for n, record in _records(path):
        where = f"{path}:{n}"
        pid = str(_get(record, _ID_KEYS[:3], where, "passage id"))
        if "text" in record or "contents" not in record:
            title, text = record.get("title") or "", _get(record, ("text",), where, "text")
        else:
            title, _, text = str(record["contents"]).partition("\n")
            title = title.strip().strip('"')
        yield Passage(pid, str(title), str(text))


def _answers(record: dict[str, Any], where: str) -> tuple[str, ...]:
    truth = (
        (record.get("reward_model") or {}).get("ground_truth")
        if isinstance(record.get("reward_model"), dict)
        else None
    )
    if isinstance(truth, dict) and truth.get("target") is not None:
        value: Any = truth["target"]
    else:
        value = _get(record, ("golden_answers", "answers", "answer"), where, "gold answers")
    if isinstance(value, str):
        value = [value]
    answers = tuple(str(a) for a in value if str(a).strip())
    if not answers:
        raise ValueError(f"{where}: the gold answers are empty")
    return answers


def read_questions(path: str | os.PathLike[str], split: str = "test") -> list[Question]:
    """The questions of a QA file (see the module documentation), all labelled ``split``.
    Duplicate ids raise ``ValueError``."""
    path = Path(path)
    questions, seen = [], set()
    for n, record in _records(path):
        where = f"{path}:{n}"
        text = str(_get(record, ("question",), where, "question")).strip()
        qid = next((str(record[k]) for k in _ID_KEYS if record.get(k) is not None), f"{path.stem}-{n}")
        if qid in seen:
            raise ValueError(f"{where}: duplicate question id {qid!r}")
        seen.add(qid)
        supporting = tuple(str(s) for s in record.get("supporting") or ())
        questions.append(
            Question(
                id=qid,
                question=text,
                answers=_answers(record, where),
                type=str(record.get("type") or ""),
                hops=len(supporting),
                supporting=supporting,
                hop_queries=tuple(str(q) for q in record.get("hop_queries") or ()),
                split=split,
                hop_paraphrases=tuple(str(q) for q in record.get("hop_paraphrases") or ()),
            )
        )
    if not questions:
        raise ValueError(f"{path}: no questions")
    return questions


def write_jsonl(records: Iterable[Passage | Question], path: str | os.PathLike[str]) -> int:
    """Write passages or questions as JSONL (the format the readers take); the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            row = asdict(record)
            if isinstance(record, Question):
                row["golden_answers"] = list(row.pop("answers"))
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
