"""A scripted shopper that buys each task's target, in either mode, from what the agent sees.

:func:`expert_action` is a function of the observation and ``info`` only (the page text or the
accessibility snapshot, ``info["url"]``, ``info["task_id"]``, ``info["catalog_seed"]``), so it
plays a sandboxed or remote env as well as a local one: ``policy=scripted
policy.act=agentgym.envs.web.expert:expert_action``. It searches the task's query, pages through
the results to the target, chooses the asked options (and an in-stock value for any option the
task leaves open), adds it to the cart and checks out. That it reaches reward 1 on every task is
the proof that the tasks are solvable and the reward is right.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentgym.envs.web.catalog import Product, catalog
from agentgym.envs.web.tasks import Goal, generate_tasks

__all__ = ["aplay", "expert_action", "expert_choice", "play"]

_NODE = re.compile(r'^\s*- (\w+)(?: ("(?:[^"\\]|\\.)*"))?([^\n]*?)\[ref=(\w+)\](.*)$', re.MULTILINE)


@functools.lru_cache(maxsize=4)
def _goals(catalog_seed: int) -> dict[str, Goal]:
    return {goal.id: goal for goal in generate_tasks(catalog(catalog_seed))}


def expert_choice(goal: Goal, product: Product) -> dict[str, str]:
    """The option values to buy: the first in-stock combination of ``product`` that has the
    task's values (options the task leaves open take whatever is in stock)."""
    names = list(product.options)
    for values, units in product.stock.items():
        choice = dict(zip(names, values))
        if units > 0 and all(choice.get(n, "").lower() == v.lower() for n, v in goal.options.items()):
            return choice
    raise ValueError(f"task {goal.id}: {product.id} has no stock for {goal.options}")


def expert_action(observation: str, info: dict[str, Any]) -> str:
    """The expert's next action for the shop page in ``observation``."""
    seed = int(info.get("catalog_seed", 0))
    goal = _goals(seed)[info["task_id"]]
    product = catalog(seed).product(goal.target)
    url = urlsplit(info.get("url", "/"))
    if "[ref=" in observation:
        return _browser_action(observation, url, goal, product)
    return _text_action(observation, url, goal, product)


def play(
    env: Any, task_id: str, act: Any = expert_action, limit: int = 40
) -> tuple[float, dict[str, Any], str]:
    """One episode of task ``task_id`` played by ``act(observation, info)`` (default: the
    expert), at most ``limit`` steps: (return, last info, last observation)."""
    obs, info = env.reset(options={"task_id": task_id})
    total = 0.0
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(act(obs, info))
        total += reward
        if terminated or truncated:
            break
    return total, info, obs


async def aplay(
    env: Any, task_id: str, act: Any = expert_action, limit: int = 40
) -> tuple[float, dict[str, Any], str]:
    """:func:`play` through the env's async API (``areset``/``astep``)."""
    obs, info = await env.areset(options={"task_id": task_id})
    total = 0.0
    for _ in range(limit):
        obs, reward, terminated, truncated, info = await env.astep(act(obs, info))
        total += reward
        if terminated or truncated:
            break
    return total, info, obs


def _text_action(observation: str, url: Any, goal: Goal, product: Product) -> str:
    if url.path == f"/product/{product.id}":
        for value in expert_choice(goal, product).values():
            if f"[{value}] (selected)" not in observation:
                return f"click[{value}]"
        return "click[Add to cart]"
    if url.path == "/cart":
        return "click[Proceed to checkout]"
    if url.path == "/checkout":
        return "click[Place order]"
    if url.path == "/search" and parse_qs(url.query).get("q") == [goal.query]:
        if f"[{product.title}]" in observation:
            return f"click[{product.title}]"
        if "[Next >]" in observation:
            return "click[Next >]"
    return f"search[{goal.query}]"


def _browser_action(observation: str, url: Any, goal: Goal, product: Product) -> str:
    # (role, name, flags such as [checked], ref, text after the ref such as a text box's value)
    nodes = [
        (
            m.group(1),
            json.loads(m.group(2)) if m.group(2) else "",
            m.group(3),
            m.group(4),
            _yaml_text(m.group(5)),
        )
        for m in _NODE.finditer(observation)
    ]

    def ref(role: str, name: str, unchecked: bool = False) -> str | None:
        return next(
            (
                r
                for rl, n, flags, r, _ in nodes
                if rl == role and n == name and not (unchecked and "[checked]" in flags)
            ),
            None,
        )

    if url.path == f"/product/{product.id}":
        for value in expert_choice(goal, product).values():
            if (radio := ref("radio", value, unchecked=True)) is not None:
                return f"click({radio})"
        return f"click({ref('button', 'Add to cart')})"
    if url.path == "/cart":
        return f"click({ref('link', 'Proceed to checkout')})"
    if url.path == "/checkout":
        return f"click({ref('button', 'Place order')})"
    if url.path == "/search" and parse_qs(url.query).get("q") == [goal.query]:
        if (link := ref("link", product.title)) is not None:
            return f"click({link})"
        if (link := ref("link", "Next >")) is not None:
            return f"click({link})"
    box, typed = next(((r, text) for rl, _, _, r, text in nodes if rl == "searchbox"), ("", ""))
    if typed == goal.query:
        return f"click({ref('button', 'Search')})"
    return f"fill({box}, {json.dumps(goal.query)})"


def _yaml_text(tail: str) -> str:
    """The text a snapshot line gives after its ref (``: value``, quoted when YAML needs it)."""
    text = tail.strip().removeprefix(":").strip()
    if text.startswith('"'):
        try:
            return str(json.loads(text))
        except ValueError:
            pass
    return text
