"""What the web shop's tests share (envs/web/test_web.py, envs/web/test_web_browser.py)."""

from __future__ import annotations

from agentgym.envs.web.expert import expert_choice


def near_miss(goal, product):
    """(option name, wanted value, other in-stock value): the task's last option, changed."""
    name = [n for n in product.options if n in goal.options][-1]
    wanted = goal.options[name]
    other = next(
        v
        for v in product.options[name]
        if v.lower() != wanted.lower() and product.in_stock(expert_choice(goal, product) | {name: v})
    )
    return name, wanted, other
