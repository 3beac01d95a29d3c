"""A scripted expert for ``agentgym/Desktop-v0`` that acts only through the env's actions.

Each task kind has a plan: steps that find elements in the current observation by role, name or
content and return an action. A step that cannot act yet (the element it needs is not showing)
returns None and the expert repeats the step before it (a menu that did not open is clicked
again). The expert keeps each episode's place in its plan by ``info["episode_id"]``, so one
:func:`expert_action` serves interleaved episodes::

    agentgym eval env=agentgym/Desktop-v0 policy=scripted \\
        policy.act=agentgym.envs.gui.expert:expert_action
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.envs.gui.tasks import SETTINGS, GuiTask, gui_tasks

__all__ = ["Node", "expert_action", "parse_observation"]

_LINE = re.compile(r"^(?P<indent> *)\[(?P<id>\d+)\] (?P<rest>.*)$")
_CELL = re.compile(r"^[A-Z]{1,3}[0-9]{1,7}$")


@dataclass(frozen=True)
class Node:
    id: int
    depth: int
    role: str
    name: str
    states: tuple[str, ...]
    text: str | None


def parse_observation(observation: str) -> list[Node]:
    """The elements of an observation (the lines of :func:`~agentgym.envs.gui.observation.
    render_tree`)."""
    nodes = []
    for line in observation.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        rest, text = match["rest"], None
        if " = " in rest and rest.rstrip().endswith('"'):
            rest, _, quoted = rest.partition(") = ")
            rest += ")"
            text = json.loads(quoted)
        head, _, _box = rest.rpartition(" @(")
        role, name = head, ""
        if '"' in head:
            role, _, quoted_name = head.partition(' "')
            end = quoted_name.rindex('"')
            name = json.loads('"' + quoted_name[: end + 1])
            states = tuple(quoted_name[end + 1 :].split())
        else:
            words = head.split()
            known = {
                "focused",
                "selected",
                "checked",
                "pressed",
                "expanded",
                "editable",
                "modal",
                "active",
                "disabled",
            }
            states = tuple(w for w in words if w in known)
            role = " ".join(w for w in words if w not in known)
        nodes.append(Node(int(match["id"]), len(match["indent"]) // 2, role, name, states, text))
    return nodes


Step = Callable[[list[Node], GuiTask], "str | None"]


def _find(
    nodes: list[Node], role: str, name: str | None = None, where: Callable[[Node], bool] | None = None
) -> Node | None:
    for node in nodes:
        if node.role == role and (name is None or node.name == name) and (where is None or where(node)):
            return node
    return None


def _click(role: str, name: str | None = None, where: Callable[[Node], bool] | None = None) -> Step:
    def step(nodes: list[Node], task: GuiTask) -> str | None:
        node = _find(nodes, role, name, where)
        return f"click({node.id})" if node else None

    return step


def _act(action: str | Callable[[GuiTask], str]) -> Step:
    return lambda nodes, task: action(task) if callable(action) else action


def _editor(node: Node) -> bool:
    return node.role == "text" and "editable" in node.states and not _CELL.match(node.text or "")


def _name_box(node: Node) -> bool:
    return "editable" in node.states and bool(_CELL.match(node.text or ""))


def _galculator_result(nodes: list[Node], task: GuiTask) -> str | None:
    display = _find(
        nodes,
        "text",
        where=lambda n: "editable" not in n.states and (n.text or "").strip() == task.target["text"],
    )
    editor = _find(nodes, "text", where=_editor)
    if display is None or editor is None:
        return None
    return f"click({editor.id})"


def _dialog_open(nodes: list[Node]) -> bool:
    return _find(nodes, "file chooser") is not None


def _done_when_closed(nodes: list[Node], task: GuiTask) -> str | None:
    """``done()`` once no file dialog is open; else None, so that the click before is repeated
    (it can land on the completion popup of the dialog's name field instead of the button)."""
    return None if _dialog_open(nodes) else "done()"


def _done_when_no_dialog(nodes: list[Node], task: GuiTask) -> str | None:
    """``done()`` once no dialog is open; else None (the step before is repeated)."""
    return None if _find(nodes, "dialog") is not None else "done()"


def _archive_path(nodes: list[Node], task: GuiTask) -> str | None:
    """Type the Archive folder's path into the location bar (which shows the home's path)."""
    location = _find(nodes, "text", where=lambda n: (n.text or "").endswith("/Documents/"))
    if location is None or "focused" not in location.states:
        return None
    assert location.text is not None  # where= matched its text
    return f"type({json.dumps(location.text[: -len('Documents/')] + 'Archive/')})"


def _save_as_name(nodes: list[Node], task: GuiTask) -> str | None:
    dialog = _find(nodes, "dialog") or _find(nodes, "file chooser")
    if dialog is None:
        return None
    return f"type({json.dumps(task.target['path'])})"  # the dialog opens in the home folder


def _plan(task: GuiTask) -> list[Step]:
    target = task.target
    if task.kind == "setting":
        menu, item = SETTINGS[target["key"]]
        return [_click("menu", menu), _click("menu item", item), _act("done()")]
    if task.kind == "edit_text":
        return [
            _click("text", where=_editor),
            _act('key("ctrl+a BackSpace")'),
            _act(lambda t: f"type({json.dumps(t.target['text'])})"),
            _act('key("ctrl+s")'),
            _act("done()"),
        ]
    if task.kind == "new_file":
        return [
            _click("text", where=_editor),
            _act(lambda t: f"type({json.dumps(t.target['text'])})"),
            _act('key("ctrl+s")'),
            _save_as_name,
            _click("push button", "Save"),
            _done_when_closed,
        ]
    if task.kind == "calc_paste":
        buttons = [_click("toggle button", char) for char in target["expression"] if char != " "]
        return [
            *buttons,
            _click("toggle button", "="),
            _galculator_result,
            _act(lambda t: f"type({json.dumps(t.target['text'])})"),
            _act('key("ctrl+s")'),
            _act("done()"),
        ]
    if task.kind == "sheet_total":
        first, last = target["range"]
        return [
            _click("text", where=_name_box),
            _act(f'type("{target["cell"]}\\n")'),
            _act(f'type("=SUM({first}:{last})\\n")'),
            _act('key("ctrl+s")'),
            _act("wait()"),
            _act("done()"),
        ]
    if task.kind == "sheet_edit":
        return [
            _click("text", where=_name_box),
            _act(f'type("{target["cell"]}\\n")'),
            _act(f'type("{target["value"]}\\n")'),
            _act('key("ctrl+s")'),
            _act("wait()"),
            _act("done()"),
        ]
    if task.kind in ("rename_file", "move_file"):
        ((old, new),) = target["moves"].items()
        pick = _click("table cell", old.split("/")[1])
        if task.kind == "rename_file":
            return [
                pick,
                _act('key("F2")'),
                _act('key("ctrl+a")'),
                _act(f"type({json.dumps(new.split('/')[1])})"),
                _act('key("Return")'),
                _done_when_no_dialog,
            ]
        return [
            pick,
            _act('key("ctrl+x")'),
            _act('key("ctrl+l")'),
            _archive_path,
            _act('key("Return")'),
            _click("directory pane"),
            _act('key("ctrl+v")'),
            _act("wait()"),
            _act("done()"),
        ]
    raise ValueError(f"no plan for task kind {task.kind!r}")


_TASKS: dict[str, GuiTask] = {}
_PLACE: OrderedDict[str, int] = OrderedDict()
_MAX_EPISODES = 4096


def expert_action(observation: str, info: dict[str, Any]) -> str:
    """The expert's next action for the episode ``info`` describes (see the module docs)."""
    if not _TASKS:
        _TASKS.update({task.id: task for task in gui_tasks()})
    task = _TASKS[info["task_id"]]
    episode = str(info.get("episode_id", ""))
    place = _PLACE.pop(episode, 0)
    plan, nodes = _plan(task), parse_observation(observation)
    action = plan[place](nodes, task) if place < len(plan) else "done()"
    if action is None and place > 0:  # not possible yet: redo the step before (a menu that
        action = plan[place - 1](nodes, task)  # did not open, a click that did not land)
        place -= action is not None
    if action is None:  # the window is still loading or closing: wait, then this step again
        action, place = "wait()", place - 1
    _PLACE[episode] = place + 1
    while len(_PLACE) > _MAX_EPISODES:
        _PLACE.popitem(last=False)
    return action
