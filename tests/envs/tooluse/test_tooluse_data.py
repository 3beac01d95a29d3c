"""Data questions of the tool-use env: files and answers are deterministic, the expert's SQL and
Python (a computation independent of the generator's) reach every answer, and the checker is
lenient about form but not about content."""

from __future__ import annotations

import csv
import random
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agentgym.envs.tooluse.data import (
    DATABASE,
    FILES,
    KINDS,
    DataTask,
    check_answer,
    data_task_split,
    data_tasks,
    generate_data_tasks,
    materialize,
)


@pytest.fixture(scope="module")
def tasks() -> list[DataTask]:
    return [*data_tasks("train"), *data_tasks("test")]


def sample(tasks: list[DataTask], n: int = 100) -> list[DataTask]:
    chosen = random.Random(1).sample(tasks, n)
    assert {t.kind for t in chosen} == set(KINDS)
    return chosen


def run_expert(task: DataTask, workspace: Path) -> str:
    """What the expert answers: the last line its last call printed (for SQL, the last row)."""
    out = ""
    for name, arguments in task.expert_calls:
        if name == "sql":
            con = sqlite3.connect(workspace / arguments["database"])
            try:
                rows = con.execute(arguments["query"]).fetchall()
            finally:
                con.close()
            out = "\t".join(str(v) for v in rows[-1]) if rows else ""
        else:
            assert name == "python"
            proc = subprocess.run(
                [sys.executable, "-I", "-c", arguments["code"]],
                check=False,
                cwd=workspace,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert proc.returncode == 0, (task.id, proc.stderr)
            out = proc.stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_generation_is_deterministic_and_balanced(tasks):
    assert generate_data_tasks(num_tasks=50) == generate_data_tasks(num_tasks=50)
    assert generate_data_tasks(seed=1, num_tasks=50) != generate_data_tasks(num_tasks=50)
    assert len(tasks) == 600 and len({t.id for t in tasks}) == 600
    assert len({t.seed for t in tasks}) == 600
    counts = [sum(t.kind == kind for t in tasks) for kind in KINDS]
    assert len(KINDS) >= 10 and max(counts) - min(counts) <= 1
    assert {t.answer_type for t in tasks} == {"number", "name", "list", "ordered_list"}
    with pytest.raises(ValueError):
        generate_data_tasks(num_tasks=-1)


def test_files_are_byte_identical_each_time(tmp_path, tasks):
    for task in tasks[:5]:
        a, b = tmp_path / f"{task.id}-a", tmp_path / f"{task.id}-b"
        assert materialize(task, a) == materialize(task, b) == list(FILES)
        for name in FILES:
            assert (a / name).read_bytes() == (b / name).read_bytes(), (task.id, name)
    other = tmp_path / "other"
    materialize(tasks[5], other)
    first = tmp_path / f"{tasks[0].id}-a"
    assert (other / "sales.csv").read_bytes() != (first / "sales.csv").read_bytes()


def test_files_have_their_shape(tmp_path, tasks):
    materialize(tasks[0], tmp_path)
    with open(tmp_path / "sales.csv", newline="") as f:
        sales = list(csv.DictReader(f))
    assert list(sales[0]) == ["date", "region", "product", "units", "unit_price"]
    assert 200 <= len(sales) <= 2000
    assert [r["date"] for r in sales] == sorted(r["date"] for r in sales)
    with open(tmp_path / "employees.csv", newline="") as f:
        people = list(csv.DictReader(f))
    names = {p["name"] for p in people}
    assert len(names) == len(people) and sum(not p["manager"] for p in people) == 1
    assert all(p["manager"] in names for p in people if p["manager"])
    con = sqlite3.connect(tmp_path / DATABASE)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"customers", "products", "orders", "order_items"}
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert con.execute("PRAGMA foreign_key_list(order_items)").fetchall()
    finally:
        con.close()


def test_the_expert_reaches_every_sampled_answer(tmp_path, tasks):
    for task in sample(tasks):
        workspace = tmp_path / task.id
        materialize(task, workspace)
        printed = run_expert(task, workspace)
        assert check_answer(task, printed), (task.id, task.kind, task.answer, printed)


def test_instructions_name_their_file_and_format(tasks):
    for task in tasks:
        assert any(name in task.instruction for name in FILES), task.instruction
        assert "Answer with" in task.instruction
        assert task.expert_calls and all(name in ("sql", "python") for name, _ in task.expert_calls)


def test_splits_are_disjoint_and_cover_everything(tasks):
    train, test = data_tasks("train"), data_tasks("test")
    assert not {t.id for t in train} & {t.id for t in test}
    assert not {t.seed for t in train} & {t.seed for t in test}
    assert len(train) + len(test) == 600 and 100 <= len(test) <= 150
    assert {t.kind for t in test} == set(KINDS)
    assert data_task_split(tasks, "test") == test
    with pytest.raises(ValueError):
        data_task_split(tasks, "validation")


def task(answer: str, answer_type: str, tolerance: float = 0.0) -> DataTask:
    return DataTask("data-test", "?", 0, "test", answer, answer_type, tolerance, ())


@pytest.mark.parametrize(
    "text",
    [
        "1234.50",
        "1,234.50",
        "$1234.5",
        "about 1234.50",
        "The total is $1,234.50.",
        "1234.49",
        "1234.51",
        " 1234.5 ",
    ],
)
def test_numbers_are_read_leniently(text):
    assert check_answer(task("1234.50", "number", 0.01), text)


@pytest.mark.parametrize("text", ["1234.52", "1234.48", "1235", "12345.0", "none", "", "-1234.50"])
def test_numbers_off_by_more_than_the_tolerance_fail(text):
    assert not check_answer(task("1234.50", "number", 0.01), text)


def test_signs_and_counts():
    pct = task("-12.34", "number", 0.01)
    assert check_answer(pct, "-12.34%") and check_answer(pct, "\u221212.34")
    assert check_answer(pct, "-$12.34") and not check_answer(pct, "12.34")
    count = task("42", "number")
    assert check_answer(count, "42") and check_answer(count, "42.0")
    assert check_answer(count, "42 rows")
    assert not check_answer(count, "41") and not check_answer(count, "43")
    assert check_answer(task("1234567", "number"), "1,234,567")


def test_names_ignore_case_spacing_and_punctuation():
    name = task("USB-C Hub", "name")
    assert check_answer(name, "usb-c hub") and check_answer(name, "  USBC  Hub. ")
    assert check_answer(name, "**USB-C Hub**")
    assert not check_answer(name, "USB Hub") and not check_answer(name, "USB-C Hub Pro")


def test_lists_compare_as_sets():
    gold = task("Alice Abbott, Bruno Barros, Carmen Castillo", "list")
    for text in (
        "Carmen Castillo, Alice Abbott, Bruno Barros",
        "alice abbott; bruno barros and carmen castillo",
        "Alice Abbott, Bruno Barros, and Carmen Castillo.",
        "- Bruno Barros\n- Alice Abbott\n- Carmen Castillo",
    ):
        assert check_answer(gold, text), text
    assert not check_answer(gold, "Alice Abbott, Bruno Barros")
    assert not check_answer(gold, "Alice Abbott, Bruno Barros, Carmen Castillo, Diana Dalton")
    assert not check_answer(gold, "Alice Abbott, Bruno Barros, Carmen Costa")


def test_ordered_lists_compare_in_order():
    gold = task("Office Chair, Webcam, Keyboard", "ordered_list")
    assert check_answer(gold, "office chair, webcam, keyboard")
    assert check_answer(gold, "1. Office Chair\n2. Webcam\n3. Keyboard")
    assert check_answer(gold, "Office Chair, Webcam and Keyboard")
    assert not check_answer(gold, "Webcam, Office Chair, Keyboard")
    assert not check_answer(gold, "Office Chair, Webcam")
    assert not check_answer(gold, "Office Chair, Webcam, Keyboard, Headset")


def test_generated_answers_reject_near_misses(tasks):
    """For each real task: the answer passes; a nudged number, a dropped or reordered item, or
    another name of the same kind fails."""
    names = sorted({t.answer for t in tasks if t.answer_type == "name"})
    for t in tasks:
        assert check_answer(t, t.answer), t.id
        if t.answer_type == "number":
            step = max(t.tolerance * 2, 1)
            assert not check_answer(t, str(float(t.answer) + step))
            assert not check_answer(t, str(float(t.answer) - step))
        elif t.answer_type == "name":
            assert not check_answer(t, next(n for n in names if n != t.answer))
        else:
            items = t.answer.split(", ")
            assert not check_answer(t, ", ".join(items[1:]))
            if t.answer_type == "ordered_list":
                assert not check_answer(t, ", ".join(items[::-1]))
    money = next(t for t in tasks if t.tolerance == 0.01)
    assert not check_answer(money, f"{float(money.answer) + 0.02:.2f}")
    assert check_answer(replace(money, answer="10.00"), "10.01")
