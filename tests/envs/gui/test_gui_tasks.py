"""The GUI env's parts that need no desktop: the action language, the tree as text, OpenDocument
files, the generated tasks and their checkers (on files written here, near misses included)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from agentgym.envs.gui.actions import ActionError, parse_action, xdotool_commands
from agentgym.envs.gui.expert import parse_observation
from agentgym.envs.gui.observation import render_tree
from agentgym.envs.gui.ods import cell_name, read_ods, sum_range, write_ods
from agentgym.envs.gui.tasks import KEYFILE, KINDS, check, gui_tasks


@pytest.mark.parametrize(
    "text, verb, args",
    [
        ("click(3)", "click", (3,)),
        ("  click(640, 400) ", "click", (640, 400)),
        ("double_click(7)", "double_click", (7,)),
        ("right_click(1, 2)", "right_click", (1, 2)),
        ("drag(1, 2, 3, 4)", "drag", (1, 2, 3, 4)),
        ('type("a\\nb")', "type", ("a\nb",)),
        ("key('ctrl+shift+s')", "key", ("ctrl+shift+s",)),
        ('key("ctrl+a BackSpace")', "key", ("ctrl+a BackSpace",)),
        ("scroll(0, -3)", "scroll", (0, -3)),
        ("wait()", "wait", ()),
        ("done()", "done", ()),
    ],
)
def test_actions_parse(text: str, verb: str, args: tuple) -> None:
    action = parse_action(text)
    assert (action.verb, action.args) == (verb, args)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("click", "not a call"),
        ("click(3", "not a call"),
        ("os.system('x')", "not a call"),
        ("__import__('os')", "unknown action"),
        ("explode(1)", "unknown action"),
        ("click(1, 2, 3)", r"click takes click\(id\) or click\(x, y\); got 3"),
        ("click('3')", "must be an integer"),
        ("click(True)", "must be an integer"),
        ("click(1.5)", "must be an integer"),
        ("type(3)", "must be a string"),
        ("type(x)", "literal"),
        ("click(id=3)", "not a call"),
        ('key("ctrl+")', "not a key name"),
        ('key("ctrl+shift+")', "not a key name"),
        ('key("a;rm -rf")', "not a key name"),
        ('key("")', "no key"),
        ("type('" + "x" * 3000 + "')", "at most"),
        ("\x00\xff" * 10, "not a call"),
        # xdotool's key runs the rest of its arguments as a new command from a command name on
        ('key("Return exec touch pwned")', "not a key name"),
        ('key("Return EXEC sh")', "not a key name"),
        ('key("ctrl+sleep")', "not a key name"),
        ('key("' + "a " * 21 + '")', "at most 20"),
        # deep or huge sources are refused, never a RecursionError or MemoryError out of step()
        ("a" + ".a" * 100_000, "characters; at most"),
        ("click(" + "-" * 3000 + "1)", "not a call|literal"),
        ("click(1)" + "(1)" * 3000, "not a call"),
        ("type(" + "(" * 3000 + "'x'" + ")" * 3000 + ")", "not a call|literal"),
        # NUL and lone surrogates cannot reach xdotool's argv (they raised out of step())
        ('type("a\\x00b")', "cannot be typed"),
        ('type("\\ud800")', "cannot be typed"),
        ('key("\\x1b")', "cannot be typed"),
    ],
)
def test_bad_actions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        parse_action(text)


def test_actions_become_xdotool_commands() -> None:
    assert xdotool_commands(parse_action("click(5)"), (10, 20)) == [
        ["mousemove", "10", "20", "click", "--delay", "0", "1"]
    ]
    # xdotool drops newlines: each line is typed, Return pressed between (a run of them by one
    # xdotool: 1,999 newlines took 51 s as one command each)
    assert xdotool_commands(parse_action('type("ab\\n\\ncd")'), None) == [
        ["type", "--delay", "8", "--", "ab"],
        ["key", "--repeat", "2", "--delay", "8", "Return"],
        ["type", "--delay", "8", "--", "cd"],
    ]
    returns = xdotool_commands(parse_action('type("' + "\\n" * 1999 + '")'), None)
    assert [c[2] for c in returns] == ["250"] * 7 + ["249"]  # each well inside the timeout
    # "-x" is text, not an option of xdotool
    assert xdotool_commands(parse_action('type("-x")'), None)[0][-2:] == ["--", "-x"]
    assert xdotool_commands(parse_action("scroll(-2, 3)"), None) == [
        ["click", "--repeat", "3", "--delay", "10", "5"],
        ["click", "--repeat", "2", "--delay", "10", "6"],
    ]
    assert xdotool_commands(parse_action("done()"), None) == []
    # a long line goes in chunks, each well inside the driver's timeout for one command
    text = "".join(chr(97 + i % 26) for i in range(1200))
    chunks = xdotool_commands(parse_action(f'type("{text}")'), None)
    assert len(chunks) == 5 and "".join(c[-1] for c in chunks) == text


def test_the_tree_renders_with_ids_and_parses_back() -> None:
    nodes = [
        {
            "depth": 0,
            "role": "frame",
            "name": "notes.txt - Mousepad",
            "states": ["active"],
            "box": [0, 0, 800, 600],
            "app": "mousepad",
        },
        {"depth": 1, "role": "menu", "name": "File", "states": [], "box": [1, 20, 39, 25], "app": "mousepad"},
        {
            "depth": 1,
            "role": "text",
            "name": "",
            "states": ["focused", "editable"],
            "box": [2, 48, 798, 550],
            "app": "mousepad",
            "text": 'say "hi"\nbye = yes',
        },
    ]
    text, boxes = render_tree(nodes)
    assert text.splitlines() == [
        '[1] frame "notes.txt - Mousepad" active @(0,0 800x600)',
        '  [2] menu "File" @(1,20 39x25)',
        '  [3] text focused editable @(2,48 798x550) = "say \\"hi\\"\\nbye = yes"',
    ]
    assert boxes[2] == (2, 48, 798, 550)
    parsed = parse_observation("Task: x\nActive window: y\n" + text)
    assert [(n.id, n.role, n.name, n.states, n.text) for n in parsed] == [
        (1, "frame", "notes.txt - Mousepad", ("active",), None),
        (2, "menu", "File", (), None),
        (3, "text", "", ("focused", "editable"), 'say "hi"\nbye = yes'),
    ]


def test_ods_round_trip_and_cell_names() -> None:
    data = write_ods([["Item", "Amount"], ["tea & cups", 12], [None, 3.5]])
    cells = read_ods(data)
    assert cells["A1"].text == "Item" and cells["A2"].text == "tea & cups"
    assert cells["B2"].value == 12 and cells["B3"].value == 3.5 and "A3" not in cells
    assert [cell_name(0, 0), cell_name(9, 25), cell_name(0, 26), cell_name(1, 701)] == [
        "A1",
        "Z10",
        "AA1",
        "ZZ2",
    ]
    assert sum_range("of:=SUM([.B2:.B6])") == ("B2", "B6")
    assert sum_range("of:=B2+B3") is None
    assert sum_range("of:=SUM([.$B$2:.B$6])") == ("B2", "B6")  # absolute references
    assert sum_range("of:=0*SUM([.B2:.B6])+21") is None  # a SUM, but not the value of the cell
    assert sum_range("of:=SUM([.B2:.B6])*2") is None
    with pytest.raises(ValueError, match="not an OpenDocument"):
        read_ods(b"plain text")


def test_tasks_are_many_deterministic_and_split() -> None:
    every = gui_tasks()
    assert len(every) >= 50 and {t.kind for t in every} == set(KINDS)
    assert len({t.id for t in every}) == len(every)
    train, test = gui_tasks("train"), gui_tasks("test")
    assert {t.id for t in train} | {t.id for t in test} == {t.id for t in every}
    assert not {t.id for t in train} & {t.id for t in test}
    assert all(any(t.kind == kind for t in test) for kind in KINDS)
    assert [t.instruction for t in gui_tasks.__wrapped__()] == [t.instruction for t in every]
    with pytest.raises(ValueError, match="split"):
        gui_tasks("dev")
    with pytest.raises(ValueError, match="unknown task kind"):
        gui_tasks(None, ("paint",))


def _home(tmp_path: Path, task) -> Path:
    for relative, data in task.files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(data)
    return tmp_path


def _task(task_id: str):
    return next(t for t in gui_tasks() if t.id == task_id)


def test_text_checkers_accept_the_goal_and_reject_near_misses(tmp_path: Path) -> None:
    task = _task("edit_text-0")
    home = _home(tmp_path, task)
    path = home / task.target["path"]
    assert not check(task, home).success  # unsaved: the file still holds the old text
    path.write_text(task.target["text"] + "\n")
    assert check(task, home).success
    path.write_text(task.target["text"].rstrip(".") + "\n")  # one character short
    result = check(task, home)
    assert not result.success and "expected" in result.problems[0]
    new = _task("new_file-0")
    assert "does not exist" in check(new, _home(tmp_path, new)).problems[0]
    paste = _task("calc_paste-0")
    (tmp_path / paste.target["path"]).write_text(str(int(paste.target["text"]) + 1))
    assert not check(paste, tmp_path).success
    (tmp_path / paste.target["path"]).write_text(paste.target["text"] + "\n")
    assert check(paste, tmp_path).success


def test_the_setting_checker_reads_the_gsettings_keyfile(tmp_path: Path) -> None:
    task = _task("setting-0")
    home = _home(tmp_path, task)
    assert not check(task, home).success  # the preset is the opposite
    key, value = task.target["key"], "true" if task.target["value"] else "false"
    (home / KEYFILE).write_text(f"[org/xfce/mousepad/preferences/view]\n{key}={value}\n")
    assert check(task, home).success


def test_sheet_checkers_want_the_formula_the_value_and_nothing_else(tmp_path: Path) -> None:
    task = _task("sheet_total-0")
    home = _home(tmp_path, task)
    rows = [list(r) for r in task.target["rows"]]
    path = home / task.target["path"]
    assert "holds no formula" in check(task, home).problems[0]

    def saved(rows: list, formula: str | None, value: float) -> None:
        data = write_ods([*rows, [None, value]])
        if formula is not None:  # what LibreOffice writes for a formula cell
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                content = archive.read("content.xml").replace(
                    b'office:value="%d"><text:p>%d<' % (value, value),
                    b'table:formula="%s" office:value="%d"><text:p>%d<' % (formula.encode(), value, value),
                )
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as archive:
                archive.writestr("content.xml", content)
            data = out.getvalue()
        path.write_bytes(data)

    first, last = task.target["range"]
    total = task.target["total"]
    saved(rows, f"of:=SUM([.{first}:.{last}])", total)
    assert check(task, home).success
    saved(rows, None, total)  # the number typed in, not a formula
    assert not check(task, home).success
    saved(rows, f"of:=SUM([.B3:.{last}])", total - rows[1][1])  # the wrong range
    assert not check(task, home).success
    changed = [list(r) for r in rows]
    changed[1][1] += 1  # a collateral change to the data
    saved(changed, f"of:=SUM([.{first}:.{last}])", total + 1)
    problems = check(task, home).problems
    assert any("B2" in p for p in problems)
    edit = _task("sheet_edit-0")
    home = _home(tmp_path / "edit", edit)
    assert not check(edit, home).success
    rows = [list(r) for r in edit.target["rows"]]
    row = int(edit.target["cell"][1:]) - 1
    rows[row][1] = edit.target["value"]
    (home / edit.target["path"]).write_bytes(write_ods(rows))
    assert check(edit, home).success
    (home / edit.target["path"]).write_bytes(write_ods([*rows, ["extra", 1]]))
    assert "should not be" in check(edit, home).problems[-1]


def test_file_checkers_want_the_moves_and_plain_files_only(tmp_path: Path) -> None:
    for task_id in ("rename_file-0", "move_file-0"):
        task = _task(task_id)
        home = _home(tmp_path / task_id, task)
        ((old, new),) = task.target["moves"].items()
        assert "missing" in " ".join(check(task, home).problems)  # nothing done yet
        (home / new).parent.mkdir(exist_ok=True)
        (home / old).rename(home / new)
        assert check(task, home).success
        (home / new).rename(home / "elsewhere.txt")  # moved out of the folders, a link left
        (home / new).symlink_to(home / "elsewhere.txt")
        assert "not a plain file" in " ".join(check(task, home).problems)
        (home / new).unlink()
        (home / "elsewhere.txt").rename(home / new)
        (home / "Documents" / "New Folder").mkdir()  # an extra folder
        assert "New Folder should not exist" in " ".join(check(task, home).problems)
