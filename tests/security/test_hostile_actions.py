"""No action string makes a ``step`` raise, on every registered env, in process (games: in
every seat that must act, through their parallel env).

A property test (hypothesis, a fixed budget of examples per env) sends arbitrary Unicode, NUL
bytes, lone surrogates, control characters, megabytes of text, deeply nested brackets and JSON,
and path tricks (``..``, absolute paths, very long names), bare and inside each family's action
syntax (``<action>``, ``<tool_call>``, ``click(...)``, ``search[...]``). Each step must return
a text observation and a finite reward, and leave ``info["error"]`` unset: that key is for
infrastructure failures, which eval keeps out of the success rate, so an agent must never be
able to set it. The env goes on (or resets) afterwards.

Regressions of the breaks found by hand (each raised before): a NUL byte in a tool's path or
code, ``write_file`` to ``.`` or through a file, a 5,000-character file name, ``<tool_call>``
followed by 100,000 ``[``, a 20 MB command.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.process import wait_until
from agentgym.registry import make_parallel

from support import unavailable
from support.hostile import HOSTILE, NUL, SURROGATE, TOOLUSE_BREAKS, tool_call

#: Every registered id; the desktop's and the browser's carry their markers (the desktop's
#: tests run one after another, see tests/conftest.py).
ENV_IDS = [
    pytest.param(
        i,
        marks={"agentgym/Desktop-v0": [pytest.mark.gui], "agentgym/Shop-v0": [pytest.mark.browser]}.get(
            i, []
        ),
    )
    for i in sorted(agentgym.list_envs())
    if "single" in agentgym.registry.manifest(i).kinds  # games: each family's own tests
]
#: Examples per env beyond the explicit ones; slow envs (a browser, a desktop) get fewer.
BUDGET = {"agentgym/Shop-v0": 8, "agentgym/Desktop-v0": 8}
DEFAULT_BUDGET = 40


def in_syntax(payload: str) -> list[str]:
    """``payload`` bare and inside the action syntax of every family."""
    quoted = json.dumps(payload)
    return [
        payload,
        f"<action>{payload}</action>",
        f"<answer>{payload}</answer>",
        tool_call("read_file", path=payload),
        tool_call("bash", command=payload),
        f"click({payload})",
        f"type({quoted})",
        f"key({quoted})",
        f"fill(e1, {quoted})",
        f"search[{payload}]",
        f"click[{payload}]",
        f"<speech>{payload}</speech>",
        f"<vote>{payload}</vote>",
    ]


actions = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec=None, categories=["Cc", "Cs", "Co", "Cn", "Zs"])),
    st.sampled_from(HOSTILE),
    st.builds(lambda p, i: in_syntax(p)[i], st.text(max_size=300), st.integers(0, len(in_syntax("")) - 1)),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=30,
    ).map(json.dumps),
)


@pytest.fixture(scope="module", params=ENV_IDS)
def env(request) -> Iterator[Any]:
    env_id = request.param
    if env_id == "agentgym/Desktop-v0":
        from agentgym.envs.gui.desktop import desktop_available

        if (missing := desktop_available()) is not None:
            unavailable(missing)
    if env_id == "agentgym/Shop-v0":
        from agentgym.envs.web.browser import chromium_path

        try:
            chromium_path()
        except RuntimeError as exc:
            unavailable(str(exc))
    env = agentgym.make(env_id)
    env.reset(seed=0)
    yield env
    env.close()


def check_step(env: Any, action: str) -> None:
    """``action`` is answered; after an episode's end the env resets."""
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs
    assert math.isfinite(reward)
    assert "error" not in info, f"an action set info['error']: {info['error']!r}"
    if terminated or truncated:
        env.reset()


def test_named_hostile_actions_are_answered(env):
    cases = HOSTILE + [a for p in HOSTILE[:12] for a in in_syntax(p)]
    if env.spec.id == "agentgym/ToolUse-v0":
        env.step(tool_call("write_file", path="f", content="a file"))
        cases += TOOLUSE_BREAKS
    for action in cases:
        check_step(env, action)


def budget(examples: int) -> settings:
    """Hypothesis's settings for ``examples`` actions: the same ones in every run, no deadline
    (a step may take long), large actions welcome."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


def test_any_action_is_answered(env):
    @budget(BUDGET.get(env.spec.id, DEFAULT_BUDGET))
    @given(action=actions)
    @example(action=NUL)
    def property(action: str) -> None:
        check_step(env, action)

    property()


#: Every registered game (multi-agent env), played through its parallel env.
GAME_IDS = sorted(i for i in agentgym.list_envs() if "parallel" in agentgym.registry.manifest(i).kinds)


def fitted(action: str, admissible: list[str]) -> str:
    """``action`` inside the tag of the first admissible answer (``<speech>...</speech>``), so
    that the question asked reads it, or bare when the answers have no tag."""
    tagged = re.fullmatch(r"<(\w+)>.*</\1>", admissible[0], re.S) if admissible else None
    return f"<{tagged[1]}>{action}</{tagged[1]}>" if tagged else action


class Game:
    """A parallel env kept between steps. Each agent that must act sends the action, bare or
    :func:`fitted` to its question, or an admissible answer, so that games go on to every kind
    of question (the choice seeded by the step)."""

    def __init__(self, env_id: str):
        self.env = make_parallel(env_id)
        self.seed, self.steps = 0, 0
        _, self.infos = self.env.reset(seed=self.seed)

    def step(self, action: str) -> None:
        """``action`` from every agent that must act is answered; after a game's end the next
        game starts."""
        rng, self.steps = random.Random(self.steps), self.steps + 1
        actions = {}
        for agent in self.env.agents:
            if self.infos[agent].get("action_required", True):
                admissible = self.infos[agent].get("admissible_actions") or []
                actions[agent] = rng.choice([action, fitted(action, admissible), *admissible[-1:]])
        observations, rewards, _, _, infos = self.env.step(actions)
        assert all(isinstance(o, str) for o in observations.values())
        assert all(math.isfinite(r) for r in rewards.values())
        errors = {a: i["error"] for a, i in infos.items() if "error" in i}
        assert not errors, f"an action set info['error']: {errors!r}"
        self.infos = {**self.infos, **infos}
        if not self.env.agents:
            self.seed += 1
            _, self.infos = self.env.reset(seed=self.seed)


@pytest.fixture(scope="module", params=GAME_IDS)
def game(request) -> Iterator[Game]:
    game = Game(request.param)
    yield game
    game.env.close()


def test_named_hostile_actions_are_answered_in_games(game):
    for action in HOSTILE + [a for p in HOSTILE[:12] for a in in_syntax(p)]:
        game.step(action)


def test_any_action_is_answered_in_games(game):
    @budget(DEFAULT_BUDGET)
    @given(action=actions)
    def property(action: str) -> None:
        game.step(action)

    property()


#: Actions aimed at the machinery under an env rather than at its task: the browser (URLs that
#: crash, hang or kill Chromium, keys that close its tab or window, script in what the shop
#: echoes back, a URL of megabytes) and the desktop (keys that kill the X server or close every
#: window, the window manager's root menu and its Exit). An env answers ``info["error"]`` only
#: when its machinery fails, and eval then retries the episode and keeps it out of the success
#: rate; if an agent could bring that about, a failing agent would look better than it is.
ENGINE_ATTACKS = {
    "agentgym/Shop-v0": [
        *(f'goto("chrome://{page}")' for page in ("crash", "kill", "hang", "gpuclean", "quit", "restart")),
        'goto("javascript:while(true){}")',
        'goto("view-source:/")',
        *(f'press("{keys}")' for keys in ("Control+W", "Control+Q", "Alt+F4", "Control+Shift+W", "F12")),
        'goto("/search?q=%3Cscript%3Ewhile(1)%7B%7D%3C/script%3E")',
        'goto("/search?q=%22%3E%3Cimg%20src%3Dx%20onerror%3D%22while(1)%7B%7D%22%3E")',
        'goto("/' + "a" * 3_000_000 + '")',
        'goto("/?' + "&".join(f"a{i}=1" for i in range(20_000)) + '")',
        'goto("/search?page=99999999999999999999&min_price=1e309")',
    ],
    "agentgym/Desktop-v0": [
        'key("ctrl+alt+BackSpace")',
        'key("ctrl+alt+Delete")',
        'key("super+e super+r alt+F2 alt+space ctrl+alt+Right")',
        # the window manager's root menu on the bare screen right of the calculator, its Exit
        # entry and the confirmation's Exit button (where openbox's default configuration has
        # them); then the same through a window's menu
        "right_click(1000, 700)",
        "click(1016, 688)",
        "click(753, 418)",
        "right_click(1000, 8)",
        'key("alt+F4 alt+F4 alt+F4 alt+F4")',
    ],
}


def running_children(pid: int) -> set[str]:
    """The names of the child processes of ``pid`` that run (not zombies)."""
    names = set()
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):
            stat = Path(f"/proc/{child}/stat").read_text()
            if stat[stat.rindex(")") + 2] != "Z":
                names.add(stat[stat.index("(") + 1 : stat.rindex(")")])
    return names


#: A desktop task whose windows leave part of the screen bare.
BARE_SCREEN_TASK = "calc_paste-1"


@pytest.mark.parametrize("env", [p for p in ENV_IDS if p.values[0] in ENGINE_ATTACKS], indirect=True)
def test_actions_aimed_at_the_engine_are_the_agents(env):
    """No action crashes, hangs or closes the browser or the desktop (its X server, buses and
    window manager) under an env: each is answered without ``info["error"]``, and the same
    browser or desktop serves the next episode (a desktop whose services stopped is replaced at
    reset)."""
    desktop = env.spec.id == "agentgym/Desktop-v0"
    options = {"task_id": BARE_SCREEN_TASK} if desktop else None

    def engine() -> Any:
        return env.unwrapped.desktop if desktop else env.unwrapped.host._browser

    env.reset(options=options)
    before = engine()
    for action in ENGINE_ATTACKS[env.spec.id]:
        check_step(env, action)
    if desktop:
        assert {"Xvfb", "dbus-daemon", "openbox"} <= running_children(before._proc.process.pid)
    env.reset(options=options)
    check_step(env, "wait()" if desktop else "scroll(down)")
    assert engine() is before
    assert before.alive() if desktop else before.is_connected()


@pytest.mark.parametrize("env", [p for p in ENV_IDS if p.values[0] == "agentgym/Shop-v0"], indirect=True)
def test_windows_an_agent_opens_are_closed(env):
    """``Shift+Enter`` or ``Control+Enter`` on a link opens a window or a tab: a renderer of
    about 30 MB each, which piled up until a sandbox's memory limit killed the env server with
    every session on it. Each is closed as it opens, said so in an observation, and the episode
    goes on in its one tab."""
    check_step(env, 'press("Tab")')  # the first link
    seen = ""
    for _ in range(10):
        for keys in ("Shift+Enter", "Control+Enter"):
            check_step(env, f'press("{keys}")')
            seen += env.step("scroll(up)")[0]
    context = env.unwrapped.context
    wait_until(lambda: len(context.pages) == 1, timeout=10, interval=0.05, expired=TimeoutError)
    assert context.pages == [env.unwrapped.page]
    assert "A window or tab that an action opened was closed" in seen
    check_step(env, 'goto("/cart")')


_CASES = [SURROGATE + "x", *TOOLUSE_BREAKS, *HOSTILE]
_turns = itertools.count()


def hostile_act(observation: str, info: dict[str, Any]) -> str:
    """A scripted agent that sends the named hostile actions, one per turn, in turn."""
    return _CASES[next(_turns) % len(_CASES)]


@pytest.mark.parametrize("sandbox", ["none", "local"])
def test_through_eval_hostile_episodes_are_agent_failures(sandbox, tmp_path):
    """The eval harness counts them as the agent's failures (no infrastructure error, in the
    success rate) and stores and reports them (a lone surrogate in an action stopped the run)."""
    from agentgym.episode import load_episodes
    from agentgym.harness.eval import compose_eval_config, run_eval
    from agentgym.sandbox.local import bwrap_usable

    if sandbox == "local" and (problem := bwrap_usable()) is not None:
        unavailable(problem)
    cfg = compose_eval_config(
        [
            f"out_dir={tmp_path / 'run'}",
            "progress=false",
            f"report={sandbox == 'none'}",
            "env=agentgym/ToolUse-v0",
            "tasks=4",
            "max_turns=6",
            "concurrency=2",
            f"sandbox={sandbox}",
            "policy=scripted",
            "policy.act=test_hostile_actions:hostile_act",
            "policy.action_tag=null",
        ]
    )
    _, summary = asyncio.run(run_eval(cfg))
    episodes = load_episodes(tmp_path / "run" / "episodes.jsonl")
    assert summary["errors"] == 0 and len(episodes) == 4, summary
    assert all(e.error is None and not e.success and len(e.turns) == 6 for e in episodes)
    assert any("\ud800" in t.action for e in episodes for t in e.turns)  # stored exactly
    if sandbox == "none":
        assert "\\ud800" in (tmp_path / "run" / "report.html").read_text()
