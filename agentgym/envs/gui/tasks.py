"""Generated desktop tasks and their checkers.

Every task starts from a home directory holding its files and the applications it names, and is
checked by reading what the applications left behind (files on disk, saved settings), never the
screen. Kinds:

``edit_text``   Mousepad: replace the text of a file and save it.
``new_file``    Mousepad: write a new document and save it under a given name.
``calc_paste``  Galculator and Mousepad: compute an expression with the calculator, write the
                result into a file and save it.
``setting``     Mousepad: switch a view setting on or off (saved in GSettings).
``sheet_total`` LibreOffice Calc: put a formula totalling a column under it and save.
``sheet_edit``  LibreOffice Calc: change one cell and save, leaving the others as they were.
``rename_file`` Thunar: rename a file.
``move_file``   Thunar: move a file into another folder.

Tasks are drawn from seeded generators, so ``gui_tasks()`` is the same everywhere; the split is
fixed by position (every fifth task of a kind is a test task).
"""

from __future__ import annotations

import configparser
import functools
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.envs.gui.ods import read_ods, sum_range, write_ods

__all__ = ["KINDS", "Check", "GuiTask", "check", "gui_tasks", "keyfile_value"]

KINDS = (
    "edit_text",
    "new_file",
    "calc_paste",
    "setting",
    "sheet_total",
    "sheet_edit",
    "rename_file",
    "move_file",
)
PER_KIND = 12
#: Mousepad view settings a task may switch: key -> the menu and the item that switch it.
SETTINGS = {
    "show-line-numbers": ("View", "Line Numbers"),
    "word-wrap": ("Document", "Word Wrap"),
    "auto-indent": ("Document", "Auto Indent"),
}
KEYFILE = ".config/glib-2.0/settings/keyfile"
MOUSEPAD_VIEW = "org/xfce/mousepad/preferences/view"

_NAMES = ["Dana", "Ravi", "Mei", "Omar", "Lena", "Tomas", "Aisha", "Jonas", "Priya", "Kofi"]
_PLACES = ["room 4", "the library", "the lab", "hall B", "the cafe", "office 12"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
_ITEMS = [
    "apples",
    "paper",
    "pens",
    "coffee",
    "cables",
    "tape",
    "folders",
    "batteries",
    "markers",
    "staples",
    "cups",
    "tea",
]
#: Thunar's settings: the details view (the icon view exposes no files to AT-SPI).
THUNAR_SETTINGS = (
    ".config/xfce4/xfconf/xfce-perchannel-xml/thunar.xml",
    b'<?xml version="1.0" encoding="UTF-8"?>\n<channel name="thunar" version="1.0">\n'
    b'  <property name="last-view" type="string" value="ThunarDetailsView"/>\n</channel>\n',
)
_FILES = ["notes", "todo", "draft", "memo", "plan", "agenda", "summary", "reminder"]


@dataclass(frozen=True)
class GuiTask:
    """One task: its ``apps`` (name and the file, relative to home, each opens; None for none),
    the ``files`` the home starts with, and the ``target`` its checker compares against."""

    id: str
    kind: str
    instruction: str
    apps: tuple[tuple[str, str | None], ...]
    files: dict[str, bytes] = field(compare=False, repr=False)
    target: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class Check:
    success: bool
    problems: tuple[str, ...] = ()


def _sentence(rng: random.Random) -> str:
    name, day, place = rng.choice(_NAMES), rng.choice(_DAYS), rng.choice(_PLACES)
    hour = rng.randint(8, 17)
    return rng.choice(
        [
            f"Meet {name} on {day} at {hour}:00 in {place}.",
            f"Call {name} before {day} about the {rng.choice(_ITEMS)}.",
            f"Order {rng.randint(2, 60)} {rng.choice(_ITEMS)} for {place}.",
            f"{name} brings the {rng.choice(_ITEMS)} on {day}.",
        ]
    )


def _edit_text(rng: random.Random, i: int) -> GuiTask:
    path = f"Documents/{rng.choice(_FILES)}{i}.txt"
    old, new = _sentence(rng), _sentence(rng)
    lines = [new] if rng.random() < 0.5 else [new, _sentence(rng)]
    text = "\n".join(lines)
    quoted = " / ".join(f'"{line}"' for line in lines)
    return GuiTask(
        f"edit_text-{i}",
        "edit_text",
        f"In Mousepad, replace the whole text of ~/{path} with {quoted}"
        f"{' (two lines)' if len(lines) > 1 else ''} and save the file.",
        (("mousepad", path),),
        {path: (old + "\n").encode()},
        {"path": path, "text": text},
    )


def _new_file(rng: random.Random, i: int) -> GuiTask:
    path = f"Documents/{rng.choice(_FILES)}_{rng.choice(_NAMES).lower()}{i}.txt"
    text = _sentence(rng)
    return GuiTask(
        f"new_file-{i}",
        "new_file",
        f'In Mousepad, write "{text}" in the empty document and save it as ~/{path}.',
        (("mousepad", None),),
        {"Documents/.keep": b""},
        {"path": path, "text": text},
    )


def _calc_paste(rng: random.Random, i: int) -> GuiTask:
    a, b, c = rng.randint(12, 99), rng.randint(3, 99), rng.randint(2, 250)
    op1, op2 = rng.choice("+-*"), rng.choice("+-")
    expression = f"{a} {op1} {b} {op2} {c}"
    result = eval(expression)  # noqa: S307 - our own arithmetic on generated integers
    path = "Documents/result.txt"
    return GuiTask(
        f"calc_paste-{i}",
        "calc_paste",
        f"Compute {expression.replace('*', 'x')} with the calculator (galculator), write the "
        f"result in ~/{path} (open in Mousepad) and save the file.",
        (("mousepad", path), ("galculator", None)),
        {path: b""},
        {"path": path, "text": str(result), "expression": expression},
    )


def _setting(rng: random.Random, i: int) -> GuiTask:
    keys = list(SETTINGS)
    key, on = keys[i % len(keys)], (i // len(keys)) % 2 == 0
    menu, item = SETTINGS[key]
    preset = f"[{MOUSEPAD_VIEW}]\n{key}={'false' if on else 'true'}\n"
    return GuiTask(
        f"setting-{i}",
        "setting",
        f'In Mousepad, turn {"on" if on else "off"} "{item}" (in the {menu} menu).',
        (("mousepad", None),),
        {KEYFILE: preset.encode()},
        {"key": key, "value": on},
    )


def _sheet(rng: random.Random) -> tuple[list[list[Any]], int]:
    items = rng.sample(_ITEMS, rng.randint(4, 8))
    rows: list[list[Any]] = [["Item", "Amount"]]
    rows += [[item, rng.randint(1, 400)] for item in items]
    return rows, len(items)


def _sheet_total(rng: random.Random, i: int) -> GuiTask:
    rows, n = _sheet(rng)
    path = f"Documents/{rng.choice(['budget', 'stock', 'orders', 'costs'])}{i}.ods"
    cell = f"B{n + 2}"
    total = sum(row[1] for row in rows[1:])
    return GuiTask(
        f"sheet_total-{i}",
        "sheet_total",
        f"In LibreOffice Calc, enter a formula in cell {cell} of ~/{path} that totals the "
        f"amounts above it (B2:B{n + 1}), then save the file in its format (.ods).",
        (("calc", path),),
        {path: write_ods(rows)},
        {"path": path, "cell": cell, "range": ("B2", f"B{n + 1}"), "total": total, "rows": rows},
    )


def _sheet_edit(rng: random.Random, i: int) -> GuiTask:
    rows, n = _sheet(rng)
    path = f"Documents/{rng.choice(['inventory', 'prices', 'counts', 'list'])}{i}.ods"
    row = rng.randint(1, n)
    value = rows[row][1] + rng.randint(1, 50)
    item = rows[row][0]
    return GuiTask(
        f"sheet_edit-{i}",
        "sheet_edit",
        f"In LibreOffice Calc, change the amount of {item} in ~/{path} to {value} and save "
        f"the file in its format (.ods).",
        (("calc", path),),
        {path: write_ods(rows)},
        {"path": path, "cell": f"B{row + 1}", "value": value, "rows": rows},
    )


def _folder(rng: random.Random, i: int) -> dict[str, bytes]:
    """A Documents folder of four or five text files (distinct names and contents)."""
    names = rng.sample(_FILES, rng.randint(4, 5))
    files = {f"Documents/{name}_{i}.txt": f"{_sentence(rng)}\n".encode() for name in names}
    files["Archive/.keep"] = b""
    files[THUNAR_SETTINGS[0]] = THUNAR_SETTINGS[1]
    return files


def _rename_file(rng: random.Random, i: int) -> GuiTask:
    files = _folder(rng, i)
    old = rng.choice([p for p in files if p.startswith("Documents/")])
    new = f"Documents/{rng.choice(_NAMES).lower()}_{rng.choice(_ITEMS)}_{i}.txt"
    return GuiTask(
        f"rename_file-{i}",
        "rename_file",
        f"In the file manager (Thunar), rename ~/{old} to {new.split('/')[1]}.",
        (("files", "Documents"),),
        files,
        {"moves": {old: new}, "files": _listing(files)},
    )


def _move_file(rng: random.Random, i: int) -> GuiTask:
    files = _folder(rng, i)
    old = rng.choice([p for p in files if p.startswith("Documents/")])
    new = "Archive/" + old.split("/")[1]
    return GuiTask(
        f"move_file-{i}",
        "move_file",
        f"In the file manager (Thunar), move ~/{old} into the folder ~/Archive.",
        (("files", "Documents"),),
        files,
        {"moves": {old: new}, "files": _listing(files)},
    )


def _listing(files: dict[str, bytes]) -> dict[str, str]:
    return {
        path: data.decode() for path, data in files.items() if path.startswith(("Documents/", "Archive/"))
    }


_MAKERS = {
    "edit_text": _edit_text,
    "new_file": _new_file,
    "calc_paste": _calc_paste,
    "setting": _setting,
    "sheet_total": _sheet_total,
    "sheet_edit": _sheet_edit,
    "rename_file": _rename_file,
    "move_file": _move_file,
}


@functools.lru_cache(maxsize=8)
def gui_tasks(split: str | None = None, kinds: tuple[str, ...] = KINDS) -> tuple[GuiTask, ...]:
    """The tasks of ``kinds`` (every one when ``split`` is None, else ``"train"``/``"test"``)."""
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown task kind(s) {unknown}; kinds: {', '.join(KINDS)}")
    tasks = []
    for kind in kinds:
        rng = random.Random(f"agentgym-gui-{kind}")
        for i in range(PER_KIND):
            if split is None or (i % 5 == 0) == (split == "test"):
                tasks.append(_MAKERS[kind](rng, i))
            else:
                _MAKERS[kind](rng, i)  # keep the stream aligned across splits
    return tuple(tasks)


def keyfile_value(home: Path, group: str, key: str) -> str | None:
    """A value of the GSettings keyfile under ``home`` (``None`` when unset)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string((home / KEYFILE).read_text())
    except (OSError, configparser.Error):
        return None
    return parser.get(group, key, fallback=None)


def check(task: GuiTask, home: Path) -> Check:
    """Whether the end state under ``home`` is the one ``task`` asks for, and what differs."""
    target = task.target
    if task.kind in ("edit_text", "new_file", "calc_paste"):
        path = home / target["path"]
        if not path.is_file():
            return Check(False, (f"~/{target['path']} does not exist",))
        text = path.read_bytes().decode("utf-8", errors="replace")
        got = text.strip() if task.kind == "calc_paste" else text.rstrip("\n")
        if got != target["text"]:
            return Check(False, (f"~/{target['path']} holds {got[:80]!r}, expected {target['text']!r}",))
        return Check(True)
    if task.kind == "setting":
        value = keyfile_value(home, MOUSEPAD_VIEW, target["key"])
        if value != ("true" if target["value"] else "false"):
            return Check(False, (f"{target['key']} is {value}, expected {str(target['value']).lower()}",))
        return Check(True)
    if task.kind in ("rename_file", "move_file"):
        return _check_files(task, home)
    return _check_sheet(task, home)


def _check_files(task: GuiTask, home: Path) -> Check:
    """The folders hold the start's files with the moves applied, and nothing else."""
    expected = {task.target["moves"].get(path, path): text for path, text in task.target["files"].items()}
    found: dict[str, str] = {}
    problems: list[str] = []
    for folder in ("Documents", "Archive"):
        for path in sorted((home / folder).rglob("*")) if (home / folder).is_dir() else ():
            name = str(path.relative_to(home))
            if path.is_symlink() or not path.is_file():  # a link or folder standing in for a file
                problems.append(f"~/{name} should not exist (not a plain file)")
            else:
                found[name] = path.read_bytes().decode(errors="replace")
    problems += [f"~/{p} is missing" for p in expected if p not in found]
    problems += [f"~/{p} should not exist" for p in found if p not in expected]
    problems += [f"~/{p} changed" for p in expected if p in found and found[p] != expected[p]]
    return Check(not problems, tuple(problems))


def _check_sheet(task: GuiTask, home: Path) -> Check:
    target = task.target
    try:
        cells = read_ods((home / target["path"]).read_bytes())
    except (OSError, ValueError) as exc:
        return Check(False, (f"~/{target['path']} could not be read: {exc}",))
    problems = []
    expected: dict[str, Any] = {}
    for r, row in enumerate(target["rows"]):
        for c, value in enumerate(row):
            expected[f"{'AB'[c]}{r + 1}"] = value
    if task.kind == "sheet_total":
        got = cells.get(target["cell"])
        if got is None or got.formula is None:
            problems.append(f"{target['cell']} holds no formula")
        else:
            if sum_range(got.formula) != tuple(target["range"]):
                problems.append(
                    f"{target['cell']} holds {got.formula}, not a SUM of {':'.join(target['range'])}"
                )
            if got.value is None or abs(got.value - target["total"]) > 1e-9:
                problems.append(f"{target['cell']} shows {got.value}, expected {target['total']}")
    else:
        expected[target["cell"]] = target["value"]
    for name, value in expected.items():
        got = cells.get(name)
        if isinstance(value, str):
            ok = got is not None and got.text == value
        else:
            ok = got is not None and got.value is not None and abs(got.value - value) < 1e-9
        if not ok:
            problems.append(f"{name} is {got.text if got else 'empty'!r}, expected {value!r}")
    extra = set(cells) - set(expected) - {target["cell"]}
    if extra:
        problems.append(f"cells changed that should not be: {', '.join(sorted(extra))}")
    return Check(not problems, tuple(problems))
