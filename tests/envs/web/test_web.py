"""The web shop without a browser: its pages and state (Shop, the Starlette app) and
agentgym/ShopText-v0 with the scripted expert. The browser mode is in test_web_browser.py."""

from __future__ import annotations

import random
import re

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from starlette.testclient import TestClient

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.web.base import shop_for
from agentgym.envs.web.expert import expert_action, expert_choice, play
from agentgym.envs.web.site import create_app
from agentgym.envs.web.tasks import tasks
from agentgym.envs.web.text import MAX_QUERY_CHARS, ShopTextEnv

from support.web import near_miss

HUGE = "x" * 100_000


@pytest.fixture
def env():
    env = ShopTextEnv(split="test")
    yield env
    env.close()


def sample(split, n, seed=0):
    goals = tasks(0, split)
    return random.Random(seed).sample(goals, min(n, len(goals)))


# --- the site ---------------------------------------------------------------------------------


def test_the_app_serves_pages_and_keeps_a_visitor_by_cookie():
    shop = shop_for(0)
    with TestClient(create_app(shop), follow_redirects=False) as client:
        home = client.get("/")
        assert home.status_code == 200 and "Search products" in home.text
        sid = client.cookies["sid"]
        goal = tasks(0, "test")[0]
        product = shop.catalog.product(goal.target)
        page = client.get(f"/product/{product.id}")
        assert page.status_code == 200 and product.title.replace("'", "&#39;") in page.text
        added = client.post("/cart/add", data={"product": product.id, **expert_choice(goal, product)})
        assert added.status_code == 303 and added.headers["location"] == "/cart"
        assert [line.product.id for line in shop.cart(sid)] == [product.id]
        assert "Cart (1)" in client.get("/cart").text
        assert "localStorage" in home.text and '<link rel="stylesheet"' not in home.text
        assert client.get("/nowhere").status_code == 404
        assert client.get("/product/NOPE").status_code == 404
        assert client.post("/search").status_code == 405
        shop.forget(sid)
        assert shop.cart(sid) == []


def test_search_pages_and_filters():
    shop = shop_for(0)
    page = shop.handle("GET", "/search", {"q": "shirt"}, "t-search")
    assert page.status == 200 and "Next &gt;" in page.html and "Showing 1-10 of" in page.html
    second = shop.handle("GET", "/search", {"q": "shirt", "page": "2"}, "t-search")
    assert "Showing 11-20 of" in second.html
    cheap = shop.handle("GET", "/search", {"q": "shirt", "max_price": "25"}, "t-search")
    prices = [float(p) for p in re.findall(r"<span>\$([0-9.]+)</span>", cheap.html)]
    assert prices and max(prices) <= 25
    for junk in ({"page": "-3"}, {"page": "x"}, {"min_price": "nan"}, {"sort": "bogus"}):
        assert shop.handle("GET", "/search", {"q": "shirt", **junk}, "t-search").status == 200
    shop.forget("t-search")


def test_adding_without_options_or_out_of_stock_is_refused_with_a_message():
    shop = shop_for(0)
    product = next(p for p in shop.catalog.products if p.options and 0 in p.stock.values())
    missing = shop.handle("POST", "/cart/add", {"product": product.id}, "t-add")
    assert missing.status == 400 and "Choose" in missing.html
    empty = dict(zip(product.options, next(k for k, v in product.stock.items() if v == 0)))
    sold_out = shop.handle("POST", "/cart/add", {"product": product.id, **empty}, "t-add")
    assert sold_out.status == 400 and "out of stock" in sold_out.html
    assert shop.cart("t-add") == []
    nothing = shop.handle("POST", "/checkout", {}, "t-add")
    assert nothing.location == "/checkout" and shop.orders("t-add") == []
    shop.forget("t-add")


# --- ShopText-v0 ------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["agentgym/ShopText-v0"])
def test_check_env(env_id):
    env = gym.make(env_id).unwrapped
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_the_expert_buys_the_target_of_every_sampled_test_task(env):
    for goal in sample("test", 200):
        total, info, _ = play(env, goal.id)
        assert total == 1.0 and info["success"], (goal.id, goal.instruction, info)
        assert info["purchased"][0][0] == goal.target


def test_random_clicking_scores_low(env):
    rng = random.Random(0)

    def act(obs, info):
        names = re.findall(r"\[([^\]]+)\]", obs.split("---", 1)[1])
        return (
            f"click[{rng.choice(names)}]"
            if names and rng.random() < 0.8
            else f"search[{rng.choice(['shirt', 'mug', 'red', 'organic', 'lamp'])}]"
        )

    rewards = [play(env, goal.id, act)[0] for goal in sample("test", 30, seed=1)]
    assert sum(rewards) / len(rewards) < 0.2 and max(rewards) < 1.0


def test_a_near_miss_scores_below_one(env):
    goal = next(g for g in tasks(0, "test") if g.options)
    name, wanted, other = near_miss(goal, env.shop.catalog.product(goal.target))

    def act(obs, info):  # the expert, but another value of one option
        action = expert_action(obs, info)
        if action == f"click[{wanted}]":
            return "click[Add to cart]" if f"[{other}] (selected)" in obs else f"click[{other}]"
        return action

    total, info, _ = play(env, goal.id, act)
    assert 0 < total < 1 and not info["success"]
    assert info["purchased"][0][1][name] == other


def test_bad_actions_are_answered_and_leave_the_page(env):
    obs, info = env.reset(seed=0)
    url = info["url"]
    for action, says in [
        ("buy everything", "Unknown action"),
        ("click[No such thing]", "There is no"),
        ("click[Follow us]", "leads off this shop"),
        ("search[]", "needs words"),
        (f"search[{HUGE}]", f"takes {MAX_QUERY_CHARS}"),
        (HUGE, "Unknown action"),
        ("click[\udcff]", "There is no"),
    ]:
        obs, reward, terminated, _, info = env.step(action)
        assert says in obs and info["action_valid"] is False and reward == 0
        assert not terminated and info["url"] == url


def test_choices_show_selected_and_enter_the_state_key(env):
    goal = next(g for g in tasks(0, "test") if len(g.options) == 2)
    env.reset(options={"task_id": goal.id})
    obs, *_, _info = env.step(f"search[{goal.query}]")
    product = env.shop.catalog.product(goal.target)
    while f"[{product.title}]" not in obs:
        obs, *_ = env.step("click[Next >]")
    obs, *_, before = env.step(f"click[{product.title}]")
    value = next(iter(goal.options.values()))
    obs, *_, after = env.step(f"click[{value}]")
    assert f"[{value}] (selected)" in obs and after["url"] == before["url"]
    assert after["state_key"] != before["state_key"]


def test_stop_and_truncation():
    env = ShopTextEnv(max_steps=2)
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step("stop")
        assert terminated and reward == 0 and not info["success"]
        obs, reward, terminated, truncated, info = env.step("click[Cart (0)]")
        assert "episode is over" in obs and info["action_valid"] is False
        env.reset(seed=1)
        env.step("click[Help]")
        *_, terminated, truncated, info = env.step("click[Help]")
        assert truncated and not terminated
    finally:
        env.close()


def test_a_new_episode_starts_with_an_empty_cart(env):
    goal = tasks(0, "test")[3]
    obs, info = env.reset(options={"task_id": goal.id})
    first = env.sid
    while info["url"] != "/cart":
        obs, *_, info = env.step(expert_action(obs, info))
    assert "Cart (1)" in obs and len(env.shop.cart(first)) == 1
    obs, info = env.reset(options={"task_id": goal.id})
    assert env.sid != first and "Cart (0)" in obs and env.shop.cart(first) == []


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="split"):
        ShopTextEnv(split="validation")
    with pytest.raises(ValueError, match="max_steps"):
        ShopTextEnv(max_steps=0)
    env = ShopTextEnv()
    try:
        with pytest.raises(ValueError, match="no task"):
            env.reset(options={"task_id": "nope"})
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(options={"colour": "red"})
        with pytest.raises(TypeError):
            env.step(3)
    finally:
        env.close()


def test_reset_is_deterministic_across_instances():
    a, b = ShopTextEnv(), ShopTextEnv()
    try:
        assert a.reset(seed=7)[1]["task_id"] == b.reset(seed=7)[1]["task_id"]
    finally:
        a.close()
        b.close()
