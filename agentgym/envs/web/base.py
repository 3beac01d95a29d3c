"""What the two shop envs share: tasks, the shop, the purchase's reward and the ``info`` keys.

An episode is one shopping task (:class:`~agentgym.envs.web.tasks.Goal`) and one visitor of the
shop (a fresh session id). It ends (``terminated``) when the visitor places an order, with the
reward for what the order holds (:func:`~agentgym.envs.web.tasks.grade` by the rule ``reward``
names), or when the agent stops (``stop``, reward 0); after ``max_steps`` actions it is
truncated with reward 0. Because both modes act on the same
:class:`~agentgym.envs.web.site.shop.Shop` and grade the order the shop recorded, the same
purchase earns the same reward in both.

``info``: the standard keys (``task_id``, ``instruction``, ``state_key``, ``action_valid``,
``success``: reward 1.0, which under ``"webshop"`` some near misses reach), ``task_type`` (the
target's department), ``url`` (the page's path and query), ``catalog_seed``, and after the order
``purchased`` (``[[product id, {option: value}], ...]``) and ``reward_parts`` (``r_type``,
attribute/option matches, ``price_ok``).
"""

from __future__ import annotations

import functools
import secrets
from typing import Any, ClassVar

from agentgym.env import TextEnv, pick_task
from agentgym.envs.web.catalog import catalog
from agentgym.envs.web.site.shop import Shop
from agentgym.envs.web.tasks import REWARDS, SPLITS, Goal, Score, grade, tasks

__all__ = ["ShopEnvBase", "shop_for"]


@functools.lru_cache(maxsize=4)
def shop_for(catalog_seed: int) -> Shop:
    """The process's shop over the catalog of ``catalog_seed`` (one per process, shared by
    every env and the browser mode's web server; visitors keep episodes apart)."""
    return Shop(catalog(catalog_seed))


class ShopEnvBase(TextEnv):
    """Task selection, reward and ``info`` of the shop envs; subclasses drive the pages.

    Args:
        split: ``"train"`` or ``"test"`` tasks.
        catalog_seed: which generated catalog (and its tasks).
        max_steps: actions before the episode is truncated.
        reward: how an order is graded, one of :data:`~agentgym.envs.web.tasks.REWARDS`:
            ``"strict"`` (1.0 only for a purchase that fulfils the task) or ``"webshop"``
            (WebShop's published rule, fuzzy; see :mod:`~agentgym.envs.web.tasks`).
    """

    family: ClassVar[str] = "web"

    def __init__(
        self,
        *,
        split: str = "train",
        catalog_seed: int = 0,
        max_steps: int = 30,
        reward: str = "strict",
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        if split not in SPLITS:
            raise ValueError(f"{type(self).__name__}: split must be one of {SPLITS}, got {split!r}")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"{type(self).__name__}: max_steps must be an int >= 1, got {max_steps!r}")
        if reward not in REWARDS:
            raise ValueError(f"{type(self).__name__}: reward must be one of {REWARDS}, got {reward!r}")
        self.reward = reward
        self.split, self.catalog_seed, self.max_steps = split, catalog_seed, max_steps
        self.shop = shop_for(catalog_seed)
        self.tasks = tasks(catalog_seed, split)
        self._by_id = {goal.id: goal for goal in self.tasks}
        self.goal: Goal = self.tasks[0]
        self.sid = ""
        self._steps, self._done = 0, False
        self._score: Score | None = None

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """Pick the task (``options={"task_id": ...}``, else drawn with ``seed``) and a fresh
        visitor; forget the previous one."""
        self.goal = pick_task(
            self.tasks, self._by_id, options, self.np_random, f"{type(self).__name__} ({self.split} split)"
        )
        self._forget()
        self.sid = secrets.token_hex(16)
        self._steps, self._done, self._score = 0, False, None

    def _forget(self) -> None:
        if self.sid:
            self.shop.forget(self.sid)
            self.sid = ""

    def _after_action(self) -> tuple[float, bool, bool]:
        """Count the step; grade the order if one was placed. ``(reward, terminated, truncated)``."""
        self._steps += 1
        orders = self.shop.orders(self.sid)
        if orders:
            lines = [(line.product.id, line.options) for line in orders[0].lines]
            self._score = grade(self.goal, self.shop.catalog, lines, self.reward)
            self._done = True
            return self._score.reward, True, False
        return 0.0, False, self._steps >= self.max_steps

    def _stop(self) -> tuple[float, bool, bool]:
        self._steps += 1
        self._done = True
        return 0.0, True, False

    def close(self) -> None:
        self._forget()
        super().close()

    def _cart_key(self) -> str:
        return ";".join(
            f"{line.product.id}{sorted(line.options.items())}" for line in self.shop.cart(self.sid)
        )

    def _where(self) -> tuple[str, str]:
        """``(url, state_key)`` of the current page: the path and query, and a key that also
        holds what the page does not show (the cart, chosen options)."""
        raise NotImplementedError

    def _info(self) -> dict[str, Any]:
        url, state_key = self._where()
        info: dict[str, Any] = {
            "task_id": self.goal.id,
            "instruction": self.goal.instruction,
            "task_type": self.goal.category[0],
            "state_key": state_key,
            "success": self._score is not None and self._score.reward == 1.0,
            "url": url,
            "catalog_seed": self.catalog_seed,
        }
        if self._score is not None:
            order = self.shop.orders(self.sid)[0]
            info["purchased"] = [[line.product.id, dict(line.options)] for line in order.lines]
            info["reward_parts"] = {
                "r_type": self._score.r_type,
                "attributes_matched": self._score.attributes_matched,
                "options_matched": self._score.options_matched,
                "price_ok": self._score.price_ok,
            }
        return info

    def _episode_over(self) -> tuple[str, float, bool, bool, dict[str, Any]] | None:
        """The answer to a step after the end, or ``None`` while the episode runs."""
        if not self._done:
            return None
        return self.episode_over(self._info())
