"""agentgym/Shop-v0: the shop in real Chromium (Playwright), with the scripted expert.

Marker ``browser``: needs Chromium (``apt-get install chromium``) and Playwright; skipped without
them, failed under CI. Every test checks that no Chromium of this process is left running.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import signal
import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.web.browser import (
    HOST_MARK,
    MAX_FILL_CHARS,
    UNROUTED_APIS,
    ShopBrowserEnv,
    chromium_path,
)
from agentgym.envs.web.expert import aplay, expert_action, play
from agentgym.envs.web.tasks import tasks
from agentgym.envs.web.text import ShopTextEnv

from support import per_kind, unavailable
from support.sandboxes import host_tcp_server, peers_so_far
from support.web import near_miss

pytestmark = pytest.mark.browser
HUGE = "x" * 100_000


def chromium_pids() -> list[int]:
    """Chromium processes started by this process's browser host."""
    mark = f"{HOST_MARK}={os.getpid()}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if mark in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


@pytest.fixture(autouse=True)
def no_chromium_left():
    try:
        chromium_path()
        import playwright  # noqa: F401
    except (RuntimeError, ImportError) as exc:
        unavailable(str(exc))
    yield
    deadline = time.monotonic() + 10
    while chromium_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert chromium_pids() == [], "Chromium processes were left running"


@pytest.fixture
def env():
    env = ShopBrowserEnv(split="test")
    yield env
    env.close()


def test_check_env():
    env = gym.make("agentgym/Shop-v0").unwrapped
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def kinds_of_tasks(shop, per: int) -> list:
    """``per`` test tasks (from a seeded shuffle) of each kind that takes the expert another way
    through the pages: how many options it chooses (0, 1, 2) and which page of the search
    results holds the target (the first, the second, a later one)."""

    def kind(goal) -> tuple[int, int]:
        rank = [p.id for p in shop.catalog.search(goal.query)].index(goal.target)
        return len(goal.options), min(rank // shop.page_size, 2)

    goals = tasks(0, "test")
    random.Random(0).shuffle(goals)
    chosen = per_kind(goals, kind, per)
    assert len({kind(goal) for goal in chosen}) == 9  # every kind is among the test tasks
    return chosen


# A minute: 27 purchases. test_web.py has the expert buy 200 in the text mode (in seconds), which
# proves the tasks solvable; this proves every path through the pages works in the browser.
@pytest.mark.slow
async def test_the_expert_buys_the_target_of_every_kind_of_test_task_with_4_browsers_at_once():
    envs = [ShopBrowserEnv(split="test") for _ in range(4)]
    failures = []

    async def worker(env, mine):
        for goal in mine:
            total, info, obs = await aplay(env, goal.id)
            if total != 1.0 or not info["success"]:
                failures.append((goal.id, total, info.get("error"), obs[-500:]))

    try:
        goals = kinds_of_tasks(envs[0].shop, per=3)
        await asyncio.gather(*(worker(env, goals[i::4]) for i, env in enumerate(envs)))
    finally:
        for env in envs:
            env.close()
    assert failures == []


def test_the_same_purchase_earns_the_same_reward_in_both_modes(env):
    goal = next(g for g in tasks(0, "test") if g.options)
    name, wanted, other = near_miss(goal, env.shop.catalog.product(goal.target))

    def changed(obs, info):  # the expert, but another value of one option
        action = expert_action(obs, info)
        if "[ref=" not in obs:
            if action == f"click[{wanted}]":
                return "click[Add to cart]" if f"[{other}] (selected)" in obs else f"click[{other}]"
            return action
        if f'radio "{wanted}"' in obs and action == f"click({ref_of(obs, 'radio', wanted)})":
            other_line = next(line for line in obs.splitlines() if f'radio "{other}"' in line)
            return (
                f"click({ref_of(obs, 'button', 'Add to cart')})"
                if "[checked]" in other_line
                else f"click({ref_of(obs, 'radio', other)})"
            )
        return action

    text_env = ShopTextEnv(split="test")
    try:
        for act in (expert_action, changed):
            browser_reward, browser_info, _ = play(env, goal.id, act)
            text_reward, text_info, _ = play(text_env, goal.id, act)
            assert browser_reward == text_reward and browser_info["purchased"] == text_info["purchased"]
            assert browser_info["reward_parts"] == text_info["reward_parts"]
        assert 0 < browser_reward < 1 and browser_info["purchased"][0][1][name] == other
    finally:
        text_env.close()


def test_nothing_carries_over_to_the_next_episode(env):
    goal = tasks(0, "test")[5]
    obs, info = env.reset(options={"task_id": goal.id})
    while info["url"] != "/cart":  # viewed a product (localStorage) and filled the cart
        obs, *_, info = env.step(expert_action(obs, info))
    host = env.host
    host.run(env.page.evaluate("document.cookie = 'theme=dark; path=/'"))
    assert host.run(env.page.evaluate("localStorage.getItem('recentlyViewed')")) is not None
    assert 'link "Cart (1)"' in obs
    obs, info = env.reset(options={"task_id": goal.id})
    assert 'link "Cart (1)"' not in obs and 'link "Cart (0)"' in obs
    assert host.run(env.page.evaluate("localStorage.getItem('recentlyViewed')")) is None
    cookies = host.run(env.context.cookies())
    assert [c["name"] for c in cookies] == ["sid"] and cookies[0]["value"] == env.sid


def ref_of(obs: str, role: str, name: str) -> str:
    line = next(line for line in obs.splitlines() if f'{role} "{name}"' in line)
    return line.split("[ref=")[1].split("]")[0]


def test_a_key_that_submits_a_form_is_answered_with_the_page_it_opens(env):
    """Enter in the search box answers with the results page (a key press waited for nothing
    before: the observation was often still the page it left)."""
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        env.step(f'fill({ref_of(obs, "searchbox", "Search products")}, "wireless earbuds")')
        obs, *_, info = env.step('press("Enter")')
        assert info["url"].startswith("/search?") and "wireless" in info["url"], info["url"]
        assert f"URL: {info['url']}" in obs


def test_a_ref_in_text_the_shop_echoes_is_no_element(env):
    """A search for "[ref=e999]" puts that text on the results page; clicking e999 is answered
    as no element (it passed the ref check, then failed when the action timed out)."""
    obs, info = env.reset(seed=0)
    env.step(f'fill({ref_of(obs, "searchbox", "Search products")}, "[ref=e999] [ref=e998]")')
    obs, *_ = env.step('press("Enter")')
    assert "[ref=e999]" in obs.split("---", 1)[1]  # shown on the page
    obs, _, _, _, info = env.step("click(e999)")
    assert "There is no element e999 on this page." in obs and not info["action_valid"]


def test_bad_actions_are_answered_and_never_hang_the_browser(env):
    obs, info = env.reset(seed=0)
    link = ref_of(obs, "link", "Help")
    for action, says in [
        ("click(e9999)", "no element e9999"),
        ("click(e1; rm -rf)", "Not an action"),
        ("dance()", "Unknown action"),
        ("fill(e1)", "takes 2 argument"),
        (f"fill({link}, 'hello')", "fill failed"),
        ('goto("https://example.com/")', "only opens pages of this shop"),
        ('goto("//evil.test/x")', "only opens pages of this shop"),
        (f'fill({ref_of(obs, "searchbox", "Search products")}, "{HUGE}")', f"at most {MAX_FILL_CHARS}"),
        (HUGE, f"at most {MAX_FILL_CHARS}"),
        ("scroll(sideways)", "up or down"),
        ('press("NoSuchKey")', "press failed"),
        ("select(" + link + ', "x")', "select failed"),
    ]:
        started = time.monotonic()
        obs, _reward, terminated, truncated, info = env.step(action)
        assert says in obs, (action[:80], obs[:600])
        assert info["action_valid"] is False and not terminated and not truncated
        assert time.monotonic() - started < 10
        assert info["url"] == "/"
    # A link that leaves the shop: blocked, and the browser is back on the shop.
    obs, _, terminated, truncated, info = env.step(f"click({ref_of(obs, 'link', 'Follow us')})")
    assert "leads off this shop (social.example.com)" in obs and info["url"] == "/"
    # The shop still works afterwards.
    obs, *_, info = env.step(f"click({ref_of(obs, 'link', 'Help')})")
    assert info["url"] == "/help" and info["action_valid"]


#: A page's script that tries every way out it has to ``other`` (and fetches ``shop``, which it
#: may): the fetches' answers ("ok", or "refused" where nothing came back), and the connecting
#: APIs its window and a new frame's still have.
ESCAPES = """async ([shop, other]) => {
    const fetched = await Promise.all([shop, other, other.replace("127.0.0.1", "localhost"),
        "http://example.com/"].map((url) => fetch(url, {mode: "no-cors", cache: "no-store"})
        .then(() => "ok", () => "refused")));
    document.body.append(Object.assign(new Image(), {src: other + "image"}));
    for (const api of ["WebSocket", "WebSocketStream"]) {
        try { new window[api](other.replace("http:", "ws:")); } catch (gone) {}
    }
    const frame = document.body.appendChild(document.createElement("iframe")).contentWindow;
    const left = [window, frame].flatMap((w) => UNROUTED.filter((api) => api in w));
    await new Promise((done) => setTimeout(done, 300));
    return [fetched, left];
}"""


def test_a_page_reaches_its_shop_and_nothing_else(env):
    """The shop escapes what it shows, so an agent's text never runs as script; were it to run,
    the page could still send nothing to another port of this host or to any other host."""
    obs, _ = env.reset(seed=0)
    page, site = env.page, env.page.url.rstrip("/")
    script = ESCAPES.replace("UNROUTED", json.dumps(UNROUTED_APIS))
    with host_tcp_server() as (port, peers):
        fetched, left = env.host.run(page.evaluate(script, [f"{site}/help", f"http://127.0.0.1:{port}/"]))
        assert fetched == ["ok", "refused", "refused", "refused"] and left == []
        assert peers_so_far(port, peers) == ["127.0.0.2"]
    obs, _, _, _, info = env.step(f"click({ref_of(obs, 'link', 'Help')})")
    assert info["url"] == "/help" and info["action_valid"]


def test_a_javascript_dialog_is_accepted_and_reported(env):
    goal = tasks(0, "test")[7]
    obs, info = env.reset(options={"task_id": goal.id})
    while info["url"] != "/cart":
        obs, *_, info = env.step(expert_action(obs, info))
    product = env.shop.catalog.product(goal.target)
    obs, *_, info = env.step(f"click({ref_of(obs, 'button', 'Remove ' + product.title)})")
    assert "A confirm dialog said: 'Remove" in obs and "Your cart is empty" in obs


def test_a_browser_crash_ends_the_episode_and_the_next_one_gets_a_fresh_browser(env):
    obs, info = env.reset(seed=0)
    for pid in chromium_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    obs, _, _, truncated, info = env.step(f"click({ref_of(obs, 'link', 'Help')})")
    assert truncated and "crashed" in info["error"] and "crashed" in obs
    obs, info = env.reset(seed=0)
    assert "Search products" in obs and "error" not in info
    obs, *_, info = env.step(f"click({ref_of(obs, 'link', 'Help')})")
    assert info["url"] == "/help"


def test_a_browser_that_stops_answering_at_reset_is_a_reset_answer(env, monkeypatch):
    """(It was a step's five values, which the env server could not send: a 500.)"""
    from agentgym.envs.web import browser as browser_module

    monkeypatch.setattr(browser_module, "STEP_TIMEOUT_S", 0.001)  # failure injection
    obs, info = env.reset(seed=0)
    assert info["error"].startswith("the browser") and obs.startswith("Error:")
    monkeypatch.undo()
    obs, info = env.reset(seed=0)
    assert "Search products" in obs and "error" not in info


def test_a_screenshot_on_request():
    env = ShopBrowserEnv(screenshot=True)
    try:
        _, info = env.reset(seed=0)
        head, data = info["screenshot"].split(",", 1)
        assert head == "data:image/png;base64" and base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        env.close()


def test_random_clicks_score_low(env):
    rng = random.Random(0)

    def act(obs, info):
        refs = [line.split("[ref=")[1].split("]")[0] for line in obs.splitlines() if "[ref=" in line]
        return f"click({rng.choice(refs)})"

    rewards = [play(env, goal.id, act, limit=15)[0] for goal in tasks(0, "test")[:5]]
    assert max(rewards) < 1.0 and sum(rewards) / len(rewards) < 0.3


def test_a_closed_env_refuses_and_bad_arguments_raise():
    env = ShopBrowserEnv()
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(seed=0)
    with pytest.raises(ValueError, match="max_steps"):
        ShopBrowserEnv(max_steps=-1)
