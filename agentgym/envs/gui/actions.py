"""The action language of ``agentgym/Desktop-v0`` and its translation to xdotool commands.

An action is one call with literal arguments, parsed with :mod:`ast` (never evaluated)::

    click(12)            click(640, 400)       double_click(12)      right_click(640, 400)
    drag(100, 200, 300, 200)                   type("Hello\\nworld")  key("ctrl+s")
    key("ctrl+a BackSpace")                    scroll(0, 3)          wait()        done()

Element ids come from the last observation; coordinates are screen pixels. ``key`` takes xdotool
key names (``ctrl+s``, ``Return``, ``F2``), several separated by spaces, pressed in turn.
``scroll(dx, dy)`` turns the wheel at the pointer (positive ``dy``: down, positive ``dx``: right).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTIONS", "Action", "ActionError", "parse_action", "xdotool_commands"]

#: verb -> the argument shapes it accepts ("id": an element id, "xy": two coordinates).
ACTIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    "click": (("id",), ("x", "y")),
    "double_click": (("id",), ("x", "y")),
    "right_click": (("id",), ("x", "y")),
    "drag": (("x1", "y1", "x2", "y2"),),
    "type": (("text",),),
    "key": (("keys",),),
    "scroll": (("dx", "dy"),),
    "wait": ((),),
    "done": ((),),
}
#: Longest text ``type`` accepts, in characters.
MAX_TYPE_CHARS = 2000
#: Longest action text parsed (a ``type`` of MAX_TYPE_CHARS written with escapes fits).
MAX_ACTION_CHARS = 16_000
#: Most key combos one ``key`` action presses.
MAX_KEY_COMBOS = 20
#: Characters (or Returns) one xdotool command types (at 8 ms each: 2 s, well inside the
#: driver's timeout for one command).
TYPE_CHUNK = 250
MODIFIERS = frozenset(("ctrl", "control", "shift", "alt", "super", "meta"))
_KEY = re.compile(r"^[A-Za-z0-9_]+$")
#: xdotool's command names: ``xdotool key`` stops at the first argument that names a command
#: (in any case) and runs the rest as that command, so no key part may be one of them.
XDOTOOL_COMMANDS = frozenset(
    (
        "getactivewindow getwindowfocus getwindowname getwindowclassname getwindowpid "
        "getwindowgeometry getdisplaygeometry search selectwindow help version behave "
        "behave_screen_edge click getmouselocation key keydown keyup mousedown mousemove "
        "mousemove_relative mouseup set_window type windowactivate windowfocus windowkill "
        "windowclose windowquit windowmap windowminimize windowmove windowraise windowreparent "
        "windowsize windowstate windowunmap set_num_desktops get_num_desktops set_desktop "
        "get_desktop set_desktop_for_window get_desktop_for_window get_desktop_viewport "
        "set_desktop_viewport exec sleep"
    ).split()
)


#: What ``type``/``key`` refuse: control characters but newline and tab, lone surrogates.
_UNTYPABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


class ActionError(ValueError):
    """An action the env cannot run; the message is shown to the agent."""


@dataclass(frozen=True)
class Action:
    verb: str
    args: tuple[Any, ...]


def parse_action(text: str) -> Action:
    """Parse one action (see the module documentation); :class:`ActionError` says what is wrong."""
    source = text.strip()
    if not source:
        raise ActionError("empty action")
    if len(source) > MAX_ACTION_CHARS:
        raise ActionError(
            f"an action of {len(source)} characters; at most {MAX_ACTION_CHARS} "
            f"(and type() takes at most {MAX_TYPE_CHARS} characters of text)"
        )
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ActionError(f'not a call like click(3) or type("text"): {source[:80]!r}') from exc
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name) or tree.keywords:
        raise ActionError(f'not a call like click(3) or type("text"): {source[:80]!r}')
    verb = tree.func.id
    if verb not in ACTIONS:
        raise ActionError(f"unknown action {verb!r}; actions: {', '.join(ACTIONS)}")
    try:
        args = tuple(ast.literal_eval(arg) for arg in tree.args)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise ActionError(f"{verb}: arguments must be literal numbers or strings") from exc
    shapes = ACTIONS[verb]
    shape = next((s for s in shapes if len(s) == len(args)), None)
    if shape is None:
        wanted = " or ".join(f"{verb}({', '.join(s)})" for s in shapes)
        raise ActionError(f"{verb} takes {wanted}; got {len(args)} argument(s)")
    for name, value in zip(shape, args, strict=True):
        if name in ("text", "keys"):
            if not isinstance(value, str):
                raise ActionError(f"{verb}: {name} must be a string, got {value!r:.40}")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ActionError(f"{verb}: {name} must be an integer, got {value!r:.40}")
    if verb == "type" and len(args[0]) > MAX_TYPE_CHARS:
        raise ActionError(f"type: text of {len(args[0])} characters; at most {MAX_TYPE_CHARS}")
    if verb in ("type", "key") and (bad := _UNTYPABLE.search(args[0])):
        raise ActionError(
            f"{verb}: {bad.group()!r} cannot be typed (control characters other "
            "than newline and tab, and lone surrogates, have no key)"
        )
    if verb == "key":
        _check_keys(args[0])
    return Action(verb, args)


def _check_keys(keys: str) -> None:
    combos = keys.split()
    if not combos:
        raise ActionError('key: no key given, e.g. key("ctrl+s")')
    if len(combos) > MAX_KEY_COMBOS:
        raise ActionError(f"key: {len(combos)} keys; at most {MAX_KEY_COMBOS} in one action")
    for combo in combos:
        parts = combo.split("+")
        if not all(_KEY.match(p) and p.lower() not in XDOTOOL_COMMANDS for p in parts) or not all(
            p.lower() in MODIFIERS for p in parts[:-1]
        ):
            raise ActionError(f"key: {combo!r} is not a key name like Return, F2 or ctrl+shift+s")


def xdotool_commands(action: Action, point: tuple[int, int] | None) -> list[list[str]]:
    """The xdotool argument lists that perform ``action``; ``point`` is where a click goes (the
    env resolves ids and checks coordinates). ``type`` types line by line with Return between
    (xdotool drops newlines); ``wait``/``done`` need no command."""
    verb, args = action.verb, action.args
    if verb in ("click", "double_click", "right_click"):
        assert point is not None
        x, y = point
        # xdotool waits --delay (default 100 ms) after a click even when there is no next one
        click = {
            "click": ["click", "--delay", "0", "1"],
            "double_click": ["click", "--repeat", "2", "--delay", "80", "1"],
            "right_click": ["click", "--delay", "0", "3"],
        }[verb]
        return [["mousemove", str(x), str(y), *click]]
    if verb == "drag":
        x1, y1, x2, y2 = (str(v) for v in args)
        return [
            [
                "mousemove",
                x1,
                y1,
                "mousedown",
                "1",
                "sleep",
                "0.05",
                "mousemove",
                str((int(x1) + int(x2)) // 2),
                str((int(y1) + int(y2)) // 2),
                "sleep",
                "0.05",
                "mousemove",
                x2,
                y2,
                "sleep",
                "0.05",
                "mouseup",
                "1",
            ]
        ]
    if verb == "type":
        commands: list[list[str]] = []
        for i, line in enumerate(args[0].split("\n")):
            if (
                i
                and commands
                and commands[-1][:2] == ["key", "--repeat"]
                and int(commands[-1][2]) < TYPE_CHUNK
            ):  # one xdotool for a run of Returns
                commands[-1][2] = str(int(commands[-1][2]) + 1)
            elif i:
                commands.append(["key", "--repeat", "1", "--delay", "8", "Return"])
            commands += [
                ["type", "--delay", "8", "--", line[k : k + TYPE_CHUNK]]
                for k in range(0, len(line), TYPE_CHUNK)
            ]
        return commands
    if verb == "key":
        combos = args[0].split()
        return [["key", "--delay", "30" if len(combos) > 1 else "0", *combos]]
    if verb == "scroll":
        dx, dy = args
        commands = []
        if dy:
            commands.append(
                ["click", "--repeat", str(min(abs(dy), 50)), "--delay", "10", "5" if dy > 0 else "4"]
            )
        if dx:
            commands.append(
                ["click", "--repeat", str(min(abs(dx), 50)), "--delay", "10", "7" if dx > 0 else "6"]
            )
        return commands
    return []
