"""``agentgym/Desktop-v0`` on a real desktop: Xvfb, D-Bus, AT-SPI, openbox, Mousepad, galculator,
LibreOffice Calc and Thunar, driven with xdotool.

The expert solves the tasks (every held-out one, a third of the others); checkers reject near
misses made in the real applications; the observation lists what the screenshot shows; episodes
are isolated; bad actions, a crashed or hung application and a dead desktop are answered, never
hang; the env runs under bubblewrap and in docker; no X server, application or desktop directory
outlives a test. Without the desktop packages the tests skip (fail under CI).
"""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.envs.gui import desktop as desktop_module
from agentgym.envs.gui.desktop import Desktop, desktop_available
from agentgym.envs.gui.env import DesktopEnv
from agentgym.envs.gui.expert import expert_action, parse_observation
from agentgym.envs.gui.tasks import KEYFILE, gui_tasks, keyfile_value
from agentgym.sandbox.spec import Backend

from support import per_kind, run_python, unavailable
from support.sandboxes import host_tcp_server, peers_so_far

pytestmark = pytest.mark.gui

PROGRAMS = (
    "Xvfb",
    "openbox",
    "mousepad",
    "galculator",
    "soffice.bin",
    "oosplash",
    "thunar",
    "xfconfd",
    "at-spi-bus-laun",
    "at-spi2-registr",
    "dbus-daemon",
    "xdotool",
)


def _programs() -> set[int]:
    found = subprocess.run(["ps", "-eo", "pid=,stat=,comm="], capture_output=True, text=True)
    pids = set()
    for line in found.stdout.splitlines():
        pid, stat, comm = line.split(None, 2)
        if comm.strip() in PROGRAMS and not stat.startswith("Z"):
            pids.add(int(pid))
    return pids


def _desktop_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "agentgym-desktop-*")))


@pytest.fixture(autouse=True)
def no_desktop_left() -> Iterator[None]:
    """The desktop packages are here (skip without, fail under CI); after the test no X server,
    bus, window manager or application it started runs and no desktop directory remains."""
    if (problem := desktop_available()) is not None:
        unavailable(problem)
    before, dirs = _programs(), _desktop_dirs()
    yield
    deadline = time.monotonic() + 10
    while (left := _programs() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    listing = subprocess.getoutput("ps -o pid,comm -p " + ",".join(map(str, left)))
    assert not left, f"left running: {listing}"
    assert _desktop_dirs() <= dirs, f"left behind: {_desktop_dirs() - dirs}"


@pytest.fixture
def env() -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(split="all")
    yield desktop
    desktop.close()


def play(env: Any, task_id: str, act: Any = expert_action, turns: int = 30) -> tuple[str, dict[str, Any]]:
    obs, info = env.reset(options={"task_id": task_id})
    for _ in range(turns):
        obs, _reward, terminated, truncated, info = env.step(act(obs, info))
        if terminated or truncated:
            break
    return obs, info


def node(obs: str, role: str, name: str | None = None) -> Any:
    return next(n for n in parse_observation(obs) if n.role == role and name in (None, n.name))


def test_check_env() -> None:
    env = agentgym.make("agentgym/Desktop-v0", tasks="text")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


_SAME_EPISODE = r"""
import json
from agentgym.envs.gui.env import DesktopEnv
env = DesktopEnv(tasks="move_file", split="all")
try:
    observations = [env.reset(seed=5)[0]]
    for action in ('key("ctrl+l")', 'type("/home/user/Archive/\\n")'):
        observations.append(env.step(action)[0])
    print(json.dumps({"root": str(env.desktop.root), "observations": observations}))
finally:
    env.close()
"""


def test_observations_are_the_same_in_every_process() -> None:
    """The home shows as /home/user (and typing that path reaches it), without the host's free
    disk space: two processes see the same bytes."""
    runs = [json.loads(run_python(_SAME_EPISODE).stdout.splitlines()[-1]) for _ in range(2)]
    assert runs[0]["root"] != runs[1]["root"]
    assert runs[0]["observations"] == runs[1]["observations"]
    reset, _focus, typed = runs[0]["observations"]
    assert '= "/home/user/Documents/"' in reset and '= "/home/user/Archive/"' in typed
    for obs in runs[0]["observations"]:
        assert "Free space" not in obs and os.path.basename(runs[0]["root"]) not in obs


@pytest.mark.slow  # two minutes: 32 tasks
def test_the_expert_solves_every_test_task_and_a_training_task_of_each_kind(env: DesktopEnv) -> None:
    """Every kind, every held-out task (three of each); the training tasks of a kind are made by
    the same code from the same random stream, so one of each kind stands for the rest."""
    failed = {}
    for task in [*gui_tasks("test"), *per_kind(gui_tasks("train"), lambda t: t.kind, 1)]:
        obs, info = play(env, task.id)
        if not info["success"]:
            failed[task.id] = (info.get("problems"), obs[-600:])
    assert not failed, failed


def test_checkers_reject_near_misses_made_in_the_applications(env: DesktopEnv) -> None:
    # the right text, never saved
    obs, info = env.reset(options={"task_id": "edit_text-0"})
    text = env.task.target["text"]
    for action in (f"click({node(obs, 'text').id})", 'key("ctrl+a BackSpace")', f"type({text!r})"):
        obs, *_rest, info = env.step(action)
    assert node(obs, "text").text == text
    obs, reward, terminated, _, info = env.step("done()")
    assert terminated and reward == 0 and "holds" in info["problems"][0]
    # the wrong result, saved
    obs, info = env.reset(options={"task_id": "calc_paste-0"})
    wrong = str(int(env.task.target["text"]) + 1)
    editor = next(n for n in parse_observation(obs) if n.role == "text" and "editable" in n.states)
    for action in (f"click({editor.id})", f"type({wrong!r})", 'key("ctrl+s")'):
        obs, *_rest, info = env.step(action)
    obs, reward, *_rest, info = env.step("done()")
    assert reward == 0 and wrong in info["problems"][0]
    # a sheet whose total is typed as a number, not a formula
    obs, info = env.reset(options={"task_id": "sheet_total-1"})
    target = env.task.target
    name_box = next(n for n in parse_observation(obs) if n.role == "text" and n.text == "A1")
    for action in (
        f"click({name_box.id})",
        f'type("{target["cell"]}\\n")',
        f'type("{target["total"]}\\n")',
        'key("ctrl+s")',
        "wait()",
    ):
        obs, *_rest, info = env.step(action)
    obs, reward, *_rest, info = env.step("done()")
    assert reward == 0 and "holds no formula" in info["problems"][0]


@pytest.mark.parametrize(
    "task_id, names",
    [
        (
            "edit_text-0",
            [
                ("menu", "File"),
                ("menu", "Edit"),
                ("menu", "Search"),
                ("menu", "View"),
                ("menu", "Document"),
                ("menu", "Help"),
            ],
        ),
        (
            "calc_paste-0",
            [("toggle button", str(d)) for d in range(10)]
            + [("toggle button", "="), ("toggle button", "AC"), ("menu", "Calculator")],
        ),
        (
            "sheet_edit-0",
            [
                ("menu", "File"),
                ("menu", "Sheet"),
                ("menu", "Data"),
                ("page tab", "Sheet1"),
                ("table cell", "A1"),
                ("table cell", "B2"),
            ],
        ),
        (
            "move_file-0",
            [
                ("menu", "File"),
                ("menu", "Go"),
                ("push button", "Home"),
                ("table column header", "Name"),
                ("table column header", "Size"),
            ],
        ),
    ],
)
def test_the_tree_lists_what_the_screenshot_shows(task_id: str, names: list) -> None:
    from PIL import Image, ImageStat

    env = DesktopEnv(split="all", screenshot="png")
    try:
        obs, info = env.reset(options={"task_id": task_id})
        image = Image.open(io.BytesIO(base64.b64decode(info["screenshot"].split(",", 1)[1])))
        assert image.size == (1280, 800)
        nodes = parse_observation(obs)
        for role, name in names:
            found = [n for n in nodes if n.role == role and n.name == name]
            assert found, f"no {role} {name!r} in\n{obs}"
            x, y, w, h = env._boxes[found[0].id - 1]
            assert 0 <= x and 0 <= y and x + w <= 1280 and y + h <= 800, (role, name)
            # something is drawn there (text, a border): not one flat colour
            region = image.convert("L").crop((x, y, x + w, y + h))
            assert ImageStat.Stat(region).stddev[0] > 3, (role, name)
        if task_id.startswith("sheet"):  # the cells show the file's content
            cells = {n.name: n.text for n in nodes if n.role == "table cell"}
            assert cells["A1"] == "Item" and cells["B1"] == "Amount"
    finally:
        env.close()


def test_set_of_marks_numbers_the_elements() -> None:
    from PIL import Image

    env = DesktopEnv(split="all", screenshot="som")
    try:
        _obs, info = env.reset(options={"task_id": "setting-0"})
        uri = info["screenshot"]
        assert uri.startswith("data:image/png;base64,")
        image = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB")
        x, y, _w, _h = env._boxes[2]  # a menu: its mark's red label sits at its corner
        assert image.getpixel((x + 1, y + 1)) == (230, 30, 30)
    finally:
        env.close()


def test_episodes_start_from_a_clean_desktop(env: DesktopEnv) -> None:
    obs, info = play(env, "new_file-0")
    assert info["success"] and env.desktop is not None
    path = env.desktop.home / env.task.target["path"]
    obs, info = env.reset(options={"task_id": "setting-0"})
    assert not path.exists()
    key = env.task.target["key"]
    for action in (f"click({node(obs, 'menu', 'View').id})",):
        obs, *_ = env.step(action)
    obs, *_ = env.step(f"click({node(obs, 'menu item', 'Line Numbers').id})")
    assert keyfile_value(env.desktop.home, "org/xfce/mousepad/preferences/view", key) == "true"
    obs, info = env.reset(options={"task_id": "setting-0"})
    assert keyfile_value(env.desktop.home, "org/xfce/mousepad/preferences/view", key) == "false"
    assert (env.desktop.home / KEYFILE).is_file()
    obs, info = env.reset(options={"task_id": "new_file-0"})
    assert node(obs, "text").text is None  # an empty document, not the last episode's
    assert "Untitled 1" in obs


def test_bad_actions_are_answered_and_the_episode_goes_on(env: DesktopEnv) -> None:
    obs, info = env.reset(options={"task_id": "edit_text-1"})
    count = len(parse_observation(obs))
    for action, message in [
        ("click(999)", f"no element [999] in the last observation (ids 1-{count})"),
        ("click(5000, 10)", "off the screen"),
        ("drag(10, 10, 10, -1)", "off the screen"),
        ("fly()", "unknown action"),
        ("click(", "not a call"),
        ('key("ctrl+nope+s")', "not a key name"),
        ("type('" + "x" * 100_000 + "')", "at most 2000"),
        ('key("Return exec touch pwned")', "not a key name"),  # no command through xdotool
        ("click(" + "-" * 3000 + "1)", "not a call"),
        ("\x00\udcff junk", "not a call"),
        ("", "empty action"),
    ]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert message in obs and not info["action_valid"], (action, obs[:300])
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert "[1] frame" in obs  # the desktop is still shown
    obs, *_rest, info = env.step('key("F13")')  # a real key nobody listens to
    assert info["action_valid"]
    obs, *_rest, info = env.step(f"click({node(obs, 'text').id})")
    assert info["action_valid"] and "focused" in node(obs, "text").states
    with pytest.raises(TypeError, match="actions are text"):
        env.step(3)  # type: ignore[arg-type]


def test_a_desktop_that_fails_to_start_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started: list[subprocess.Popen[bytes]] = []
    real_popen, real_chown = subprocess.Popen, desktop_module._chown

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def broken_chown(path: Path, *, recursive: bool = False) -> None:
        if path.name == "run":  # the runtime folder, made after the driver started
            raise OSError("injected: chown failed")
        real_chown(path, recursive=recursive)

    monkeypatch.setattr(desktop_module.subprocess, "Popen", popen)
    monkeypatch.setattr(desktop_module, "_chown", broken_chown)
    desktop = Desktop()
    with pytest.raises(OSError, match="injected"):
        desktop.start()  # fails after the driver started
    assert started and started[0].poll() is not None  # the driver was stopped
    assert list(tmp_path.iterdir()) == [] and desktop.root is None and not desktop.alive()


def _pids(name: str) -> list[int]:
    return [
        int(p) for p in subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
    ]


def test_a_crashed_application_is_reported(env: DesktopEnv) -> None:
    env.reset(options={"task_id": "calc_paste-0"})
    before = set(_pids("galculator"))
    assert before
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    obs, *_rest = env.step("wait()")
    assert "Not running (closed or crashed): galculator." in obs
    assert "Mousepad" in obs  # the other application is still there
    obs, reward, terminated, _, _info = env.step("done()")
    assert terminated and reward == 0
    obs, _info = env.reset(options={"task_id": "calc_paste-0"})  # the next episode has both
    assert "Not running" not in obs and "galculator" in obs


def test_a_hung_application_does_not_hang_the_env(env: DesktopEnv) -> None:
    obs, info = env.reset(options={"task_id": "calc_paste-1"})
    pids = _pids("galculator")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        obs, *_rest, info = env.step("wait()")
        assert time.monotonic() - started < 20
        assert "Mousepad" in obs and info["action_valid"]
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    obs, info = env.reset(options={"task_id": "edit_text-0"})  # the hung app is stopped
    assert not set(pids) & set(_pids("galculator"))


def test_a_dead_desktop_ends_the_episode_and_the_next_reset_starts_a_new_one(env: DesktopEnv) -> None:
    obs, info = env.reset(options={"task_id": "edit_text-0"})
    old = env.desktop
    assert old is not None and old._proc is not None
    os.killpg(old._proc.pid, signal.SIGKILL)
    obs, _reward, terminated, truncated, info = env.step("wait()")
    assert truncated and not terminated and "desktop failed" in info["error"]
    assert obs.startswith("Error:")
    obs, info = env.reset(options={"task_id": "edit_text-0"})
    assert env.desktop is not old and "Mousepad" in obs


def test_a_desktop_whose_window_manager_stopped_is_replaced_at_reset(env: DesktopEnv) -> None:
    """An episode that brought down a service of the desktop (here the window manager) does not
    hand that desktop to the next episode."""
    env.reset(options={"task_id": "edit_text-0"})
    old = env.desktop
    assert old is not None and old._proc is not None
    (openbox,) = [pid for pid in _pids("openbox") if os.getpgid(pid) == old._proc.pid]
    os.kill(openbox, signal.SIGKILL)
    obs, _info = env.reset(options={"task_id": "edit_text-0"})
    assert env.desktop is not old and "Mousepad" in obs


def test_bad_arguments_raise() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tasks": "paint"}, "tasks must be"),
        ({"split": "dev"}, "split must be"),
        ({"max_turns": 0}, "max_turns"),
        ({"screenshot": "jpeg"}, "screenshot must be"),
        ({"settle_s": -1}, "settle_s must be"),
        ({"width": 1024, "height": 768}, "at least 1280x800"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            DesktopEnv(**kwargs)
    env = DesktopEnv()
    try:
        with pytest.raises(ValueError, match="no task 'nope'"):
            env.reset(options={"task_id": "nope"})
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(options={"level": 3})
    finally:
        env.close()


def test_turns_run_out() -> None:
    env = DesktopEnv(max_turns=2, split="all")
    try:
        env.reset(options={"task_id": "setting-0"})
        *_rest, truncated, _info = env.step("wait()")
        assert not truncated
        obs, _reward, terminated, truncated, _info = env.step("wait()")
        assert truncated and not terminated and "No actions left" in obs
    finally:
        env.close()


def test_applications_reach_no_port_of_this_host(env: DesktopEnv) -> None:
    """Text an agent types can make an application connect (a spreadsheet's WEBSERVICE fetches
    its URL): the desktop's network namespace has nowhere to connect to."""
    env.reset(options={"task_id": "sheet_edit-1"})  # LibreOffice Calc, a cell selected
    with host_tcp_server() as (port, peers):
        _obs, *_rest, info = env.step(f'type("=WEBSERVICE(\\"http://127.0.0.1:{port}/\\")\\n")')
        env.step("wait()")
        reached = peers_so_far(port, peers)
    assert info["action_valid"] and reached == ["127.0.0.2"]


def test_without_a_network_namespace_the_desktop_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(command, 1, b"", b"unshare: Operation not permitted")

    desktop_module._drop_root()  # cached before the failure is injected
    monkeypatch.setattr(desktop_module.subprocess, "run", fails)
    monkeypatch.setattr(desktop_module.socket, "if_nameindex", lambda: [(1, "lo"), (2, "eth0")])
    with pytest.warns(UserWarning, match="the desktop shares this host's network"):
        assert desktop_module._private_network.__wrapped__() == []


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_desktop_runs_in_a_sandbox(backend: Backend, request: pytest.FixtureRequest) -> None:
    if backend == "local":
        from agentgym.sandbox.local import bwrap_usable

        if (problem := bwrap_usable()) is not None:
            unavailable(problem)
    else:
        request.getfixturevalue("gui_image")
    env = agentgym.make("agentgym/Desktop-v0", sandbox=backend, split="all")
    try:
        for task_id in ("new_file-0", "calc_paste-0", "sheet_total-0", "rename_file-0"):
            _obs, info = play(env, task_id)
            assert info["success"], (backend, task_id, info)
    finally:
        env.close()


@pytest.fixture(scope="session")
def gui_image(request: pytest.FixtureRequest) -> str:
    """The desktop's image, built (from the offline base) if it runs other sources."""
    from agentgym.sandbox import build_images, image_for

    build_images(
        ["gui"],
        base_image=request.getfixturevalue("base_image"),
        client=request.getfixturevalue("client"),
        stale_only=True,
    )
    return image_for("agentgym/Desktop-v0")
