"""``agentgym/Desktop-v0``: operate real desktop applications through their accessibility tree.

A desktop (Xvfb, D-Bus with the AT-SPI bus, openbox; see :mod:`~agentgym.envs.gui.desktop`) is
started at the first reset and kept: every reset stops the applications, rebuilds the home
directory with the task's files and settings, and launches the task's applications (Mousepad,
galculator, LibreOffice Calc, Thunar). The observation is the task, the active window's title and
the visible accessibility tree with element ids (:mod:`~agentgym.envs.gui.observation`), the same
for a task and seed in every process: the home directory shows as ``/home/user`` (paths typed
with it reach the real one) and the host's free disk space is left out (see
:mod:`~agentgym.envs.gui.desktop`). Actions are the calls of :mod:`~agentgym.envs.gui.actions`,
run with xdotool. ``done()`` ends the episode: the task's checker reads the files and settings
the applications left (reward 1 when solved, else 0). A bad action (unknown id, a point off the
screen, a malformed call) is answered in the observation with ``action_valid=False``. After
``max_turns`` actions the episode is truncated.

``info``: ``task_id``, ``instruction``, ``task_type`` (the kind), ``state_key`` (the visible tree
without its ids), ``action_valid``, ``success``, ``turn`` (actions taken), ``episode_id`` (this
env and a number drawn at each reset from its seed, so that a scripted policy can tell
interleaved episodes apart); after ``done()``, ``problems`` (what the checker found); with
``screenshot="png"`` the screen as a ``data:image/png`` URI in ``info["screenshot"]``, with
``"som"`` the same picture with numbered element boxes (set of marks). An application that dies
or a desktop that fails is reported in the observation; a dead desktop truncates the episode
with ``info["error"]`` and is replaced at the next reset.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from agentgym.env import TextEnv, coerce_action, pick_task
from agentgym.envs.gui.actions import ActionError, parse_action, xdotool_commands
from agentgym.envs.gui.desktop import Desktop, DesktopError
from agentgym.envs.gui.observation import data_uri, render_tree, set_of_marks
from agentgym.envs.gui.tasks import KEYFILE, KINDS, GuiTask, check, gui_tasks

__all__ = ["APPS", "DesktopEnv"]


@dataclass(frozen=True)
class App:
    """How to start an application: ``argv`` (``{file}`` is replaced by the file's path, or the
    argument dropped), the name AT-SPI gives it, and where its window goes when it shares the
    screen (x, y, width, height)."""

    argv: tuple[str, ...]
    atspi: str
    shared_box: tuple[int, int, int, int]


APPS = {
    "mousepad": App(("mousepad", "--disable-server", "{file}"), "mousepad", (0, 0, 760, 800)),
    "galculator": App(("galculator",), "galculator", (770, 0, 500, 560)),
    "files": App(("thunar", "{file}"), "thunar", (0, 0, 1280, 800)),
    "calc": App(
        ("soffice", "--calc", "--norestore", "--nologo", "--nolockcheck", "{file}"),
        "soffice",
        (0, 0, 1280, 800),
    ),
}
#: Settings every episode starts with (GSettings keyfile): accessibility on, no session restore.
PRESET = (
    "[org/gnome/desktop/interface]\ntoolkit-accessibility=true\n"
    "[org/xfce/mousepad/preferences/file]\nsession-restore='never'\n"
    "[org/xfce/mousepad/preferences/window]\nremember-size=false\nremember-position=false\n"
    "remember-state=false\n"
)
#: What the window manager adds around a window (border, title bar), in pixels.
FRAME = (2, 25)
TASK_SETS = {
    "all": KINDS,
    "text": ("edit_text", "new_file", "setting"),
    "files": ("rename_file", "move_file"),
    "calculator": ("calc_paste",),
    "spreadsheet": ("sheet_total", "sheet_edit"),
}
SCREENSHOTS = (None, "png", "som")
#: Longest wait for a new episode's windows to stop changing, in seconds.
SETTLE_LIMIT_S = 3.0
_INSTANCES = itertools.count(1)
_IDS = re.compile(r"^\s*\[\d+\] ", re.MULTILINE)


class DesktopEnv(TextEnv):
    """Desktop applications through accessibility trees (see the module documentation).

    Args:
        tasks: ``"all"``, ``"text"`` (Mousepad), ``"calculator"``, ``"spreadsheet"`` (Calc),
            ``"files"`` (Thunar), or
            one task kind of :data:`~agentgym.envs.gui.tasks.KINDS`.
        split: ``"train"``, ``"test"`` or ``"all"``.
        max_turns: actions before the episode is truncated.
        screenshot: ``None``, ``"png"`` or ``"som"`` (see the module documentation).
        settle_s: pause after an action before the tree is read, for the applications to
            redraw.
        width, height: the screen, in pixels (at least 1280x800, for which the windows are placed).
    """

    family: ClassVar[str] = "gui"

    def __init__(
        self,
        *,
        tasks: str = "all",
        split: str = "train",
        max_turns: int = 20,
        screenshot: str | None = None,
        settle_s: float = 0.1,
        width: int = 1280,
        height: int = 800,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        kinds = TASK_SETS.get(tasks, (tasks,) if tasks in KINDS else None)
        if kinds is None:
            raise ValueError(
                f"DesktopEnv: tasks must be one of {sorted(TASK_SETS)} or a kind of {KINDS}, got {tasks!r}"
            )
        if split not in ("train", "test", "all"):
            raise ValueError(f"DesktopEnv: split must be 'train', 'test' or 'all', got {split!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"DesktopEnv: max_turns must be an int >= 1, got {max_turns!r}")
        if screenshot not in SCREENSHOTS:
            raise ValueError(f"DesktopEnv: screenshot must be one of {SCREENSHOTS}, got {screenshot!r}")
        if isinstance(settle_s, bool) or not isinstance(settle_s, (int, float)) or not 0 <= settle_s <= 10:
            raise ValueError(f"DesktopEnv: settle_s must be seconds in [0, 10], got {settle_s!r}")
        if (
            not all(isinstance(v, int) and not isinstance(v, bool) for v in (width, height))
            or width < 1280
            or height < 800
        ):
            raise ValueError(
                f"DesktopEnv: the applications' windows are laid out for a screen of "
                f"at least 1280x800, got {width!r}x{height!r}"
            )
        self.tasks = gui_tasks(None if split == "all" else split, kinds)
        self._by_id = {task.id: task for task in self.tasks}
        self.max_turns, self.screenshot, self.settle_s = max_turns, screenshot, settle_s
        self.width, self.height = width, height
        self.desktop: Desktop | None = None
        self.task: GuiTask = self.tasks[0]
        self._boxes: list[tuple[int, int, int, int]] = []
        self._observation = ""
        self._turns, self._done, self._success = 0, False, False
        self._problems: tuple[str, ...] = ()
        self._episode_id = ""
        self._instance = f"{os.getpid():x}.{next(_INSTANCES)}"

    # -- episodes ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a task (``options={"task_id": ...}``, else one drawn with ``seed``) on a clean
        desktop: the task's files and the applications it names, nothing else."""
        super().reset(seed=seed)
        self.task = pick_task(self.tasks, self._by_id, options, self.np_random, "DesktopEnv")
        self._turns, self._done, self._success, self._problems = 0, False, False, ()
        self._episode_id = f"{self._instance}-{int(self.np_random.integers(1 << 32)):08x}"
        desktop = self._desktop()
        files = {KEYFILE: PRESET.encode()}
        for rel_path, data in self.task.files.items():
            files[rel_path] = files.get(rel_path, b"") + data
        desktop.reset_home(files)
        shared = len(self.task.apps) > 1
        for name, path in self.task.apps:
            app = APPS[name]
            if path is None:
                argv = [a for a in app.argv if a != "{file}"]
            else:
                file = str(desktop.home / path)
                argv = [file if a == "{file}" else a for a in app.argv]
            x, y, w, h = app.shared_box if shared else (0, 0, self.width, self.height)
            desktop.launch(argv, app.atspi, (x, y, w - FRAME[0], h - FRAME[1]))
        if shared:  # the first application (the one that saves) gets the keyboard
            self._focus(APPS[self.task.apps[0][0]].atspi)
        observation, info = self._observe("", settled=True)
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        if self._done:
            return self.episode_over(self._info())
        self._turns += 1
        try:
            parsed = parse_action(text)
            if parsed.verb == "done":
                return self._finish()
            point = self._point(parsed) if "click" in parsed.verb else None
            if parsed.verb == "drag":
                for x, y in (parsed.args[:2], parsed.args[2:]):
                    self._check_point(int(x), int(y))
        except ActionError as exc:
            return self._answer(f"Invalid action: {exc}", valid=False)
        try:
            desktop = self._desktop(start=False)
            if parsed.verb == "type":
                parsed = replace(parsed, args=(desktop.real(parsed.args[0]),))
            for command in xdotool_commands(parsed, point):
                desktop.xdotool(*command)
            time.sleep(1.0 if parsed.verb == "wait" else self.settle_s)
        except DesktopError as exc:
            if exc.fatal:
                return self._broken(exc)
            return self._answer(f"The action failed: {exc}", valid=False)
        return self._answer("", valid=True)

    def _answer(self, note: str, *, valid: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            observation, info = self._observe(note)
        except DesktopError as exc:
            return self._broken(exc)
        truncated = self._turns >= self.max_turns
        if truncated:
            observation += "\nNo actions left: the episode ends unfinished."
        return observation, 0.0, False, truncated, info | {"action_valid": valid}

    def _finish(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._done = True
        assert self.desktop is not None
        result = check(self.task, self.desktop.home)
        self._success, self._problems = result.success, result.problems
        verdict = (
            "The task is done." if result.success else "The task is not done: " + "; ".join(result.problems)
        )
        return (verdict, float(result.success), True, False, self._info() | {"action_valid": True})

    def _broken(self, exc: DesktopError) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._done = True
        message = f"the desktop failed: {exc}"
        return f"Error: {message}", 0.0, False, True, self._info() | {"action_valid": True, "error": message}

    def __getstate__(self) -> dict[str, Any]:
        """Never pickled or copied: an episode's state is a live desktop, not data of this process."""
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied: an episode's state is a live desktop; "
            "to replay a task, reset a new env with options={'task_id': ...}"
        )

    def close(self) -> None:
        if self.desktop is not None:
            self.desktop.close()
            self.desktop = None
        super().close()

    # -- the desktop ---------------------------------------------------------------------------

    def _desktop(self, start: bool = True) -> Desktop:
        """The env's desktop with no application running (a new one if it died)."""
        desktop = self.desktop
        if desktop is not None and desktop.alive():
            if not start:
                return desktop
            try:
                desktop.close_apps()
                return desktop
            except DesktopError:
                pass
        if not start:
            raise DesktopError("the desktop is gone", fatal=True)
        if desktop is not None:
            desktop.close()
        self.desktop = Desktop(self.width, self.height).start()
        return self.desktop

    def _focus(self, atspi_name: str) -> None:
        nodes = self._desktop(start=False).tree()["nodes"]
        frame = next((n for n in nodes if n["app"] == atspi_name and n["depth"] == 0), None)
        if frame is not None:
            x, y, w, _h = frame["box"]
            self._desktop(start=False).xdotool("mousemove", x + w // 2, y + 8, "click", "1")

    def _observe(self, note: str, settled: bool = False) -> tuple[str, dict[str, Any]]:
        """The observation and info of the desktop now; ``settled``: once two reads of the tree
        agree (freshly placed windows lay out their contents a moment later)."""
        desktop = self._desktop(start=False)
        tree = desktop.tree()
        deadline = time.monotonic() + SETTLE_LIMIT_S
        while settled and time.monotonic() < deadline:
            time.sleep(0.05)
            again = desktop.tree()
            if again == tree:
                break
            tree = again
        text, self._boxes = render_tree(tree["nodes"])
        running = {n["app"] for n in tree["nodes"]}
        gone = [name for name, _ in self.task.apps if APPS[name].atspi not in running]
        parts = [f"Task: {self.task.instruction}"]
        if note:
            parts.append(note)
        if gone:
            parts.append(f"Not running (closed or crashed): {', '.join(gone)}.")
        parts.append(f"Active window: {tree['focused'] or '(none)'}")
        parts.append(text or "(no windows)")
        self._observation = "\n".join(parts)
        info = self._info()
        tree_key = hashlib.sha256(_IDS.sub("", text).encode()).hexdigest()[:16]
        info["state_key"] = f"{self.task.id}|{tree_key}"
        if self.screenshot is not None:
            png = desktop.screenshot()
            info["screenshot"] = data_uri(png) if self.screenshot == "png" else set_of_marks(png, self._boxes)
        return self._observation, info

    def _point(self, action: Any) -> tuple[int, int]:
        if len(action.args) == 1:
            ident = action.args[0]
            if not 1 <= ident <= len(self._boxes):
                raise ActionError(f"no element [{ident}] in the last observation (ids 1-{len(self._boxes)})")
            x, y, w, h = self._boxes[ident - 1]
            if w <= 0 or h <= 0:
                raise ActionError(f"element [{ident}] has no area on the screen")
            return self._check_point(x + w // 2, y + h // 2)
        return self._check_point(*action.args)

    def _check_point(self, x: int, y: int) -> tuple[int, int]:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise ActionError(f"({x}, {y}) is off the screen ({self.width}x{self.height})")
        return x, y

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "instruction": self.task.instruction,
            "task_type": self.task.kind,
            "success": self._success,
            "episode_id": self._episode_id,
            "turn": self._turns,
        }
        if self._done:
            info["problems"] = list(self._problems)
        return info

    def render_text(self) -> str:
        return self._observation
