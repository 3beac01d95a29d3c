"""Guess the number: find a secret whole number with higher/lower feedback.

The smallest multi-turn task with something to learn: a guess is valid or not, feedback narrows
the range, and the best play (bisection) finds a secret among ``n`` numbers in
``ceil(log2(n + 1))`` guesses while guessing at random does not. Small models play it from the
start, so it is the task on which the learning tests show credit assignment at work (GEM keeps a
game like it for the same reason).

A guess is one whole number, answered with "higher", "lower" or a win; anything else is an
invalid action that still uses up a guess. Every observation says which numbers are still
possible, so the observation alone is the state (no history needed). The state key is that
range plus the guesses left, so episodes of one task that narrowed the range alike share
GiGPO anchor states.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from agentgym.env import TextEnv, coerce_action, normalize_action

__all__ = ["GuessNumberEnv"]

_NUMBER = re.compile(r"[+-]?\d{1,12}")


class GuessNumberEnv(TextEnv):
    """Find the secret number in ``1..high`` within ``max_guesses`` guesses.

    The secret is ``info["task_id"]`` (its decimal string): ``reset(options={"task_id": "5"})``
    plays secret 5, ``reset(seed=s)`` draws it from ``self.np_random``. Reward is 1.0 on the
    guess that hits it (which terminates with ``info["success"] = True``), 0.0 otherwise; the
    episode is truncated when the guesses are used up. ``admissible_actions`` lists every number
    in range (consistent with the feedback or not: using the feedback is the agent's job), and
    ``ground_truth`` is the secret (for IGPO's information-gain rewards; never shown).

    Args:
        high: the largest possible secret, from 2 to 1000.
        max_guesses: guesses per episode, at least 1.
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    family: ClassVar[str] = "textgames"
    step_in_thread: ClassVar[bool] = False  # a step takes microseconds

    def __init__(self, *, high: int = 8, max_guesses: int = 4, render_mode: str | None = None):
        super().__init__(render_mode)
        for name, value, lowest, highest in (("high", high, 2, 1000), ("max_guesses", max_guesses, 1, 10**6)):
            if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
                raise ValueError(
                    f"GuessNumberEnv: {name} must be an int in [{lowest}, {highest}], got {value!r}"
                )
        self.high, self.max_guesses = high, max_guesses
        self.instruction = (
            f"I picked a secret whole number from 1 to {high}. Find it in at most "
            f"{max_guesses} guesses: reply with one number. After a wrong guess I "
            f"say whether the secret is higher or lower."
        )
        self._secret = 0
        self._low, self._high, self._guesses = 1, high, 0
        self._success = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a game. ``options`` may hold ``task_id`` (the secret as a string, or ``None``
        to draw one); any other option raises ``ValueError``."""
        super().reset(seed=seed)
        unknown = sorted(set(options or {}) - {"task_id"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; GuessNumberEnv accepts: task_id")
        task_id = (options or {}).get("task_id")
        if task_id is None:
            self._secret = int(self.np_random.integers(1, self.high + 1))
        else:
            secret = str(task_id).strip()
            if not secret.isdigit() or not 1 <= int(secret) <= self.high:
                raise ValueError(
                    f"GuessNumberEnv: task_id must be a number from 1 to {self.high}, got {task_id!r}"
                )
            self._secret = int(secret)
        self._low, self._high, self._guesses, self._success = 1, self.high, 0, False
        return f"{self._range()} {self._left()}", self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = normalize_action(coerce_action(action))
        if self._success or self._guesses >= self.max_guesses:
            return self.episode_over(self._info(), terminated=self._success)
        self._guesses += 1
        guess = int(text) if _NUMBER.fullmatch(text) else None
        valid = guess is not None and 1 <= guess <= self.high
        if guess is None or not valid:
            message = f"That is not a guess: reply with one whole number from 1 to {self.high}."
        elif guess == self._secret:
            self._success = True
            message = f"{guess} is right! You found the secret number."
        elif guess < self._secret:
            self._low = max(self._low, guess + 1)
            message = f"{guess} is too low."
        else:
            self._high = min(self._high, guess - 1)
            message = f"{guess} is too high."
        truncated = not self._success and self._guesses >= self.max_guesses
        observation = message if self._success else f"{message} {self._range()} {self._left()}"
        info = self._info() | {"action_valid": valid}
        return observation, float(self._success), self._success, truncated, info

    def render_text(self) -> str:
        return (
            f"secret {self._secret}; consistent range {self._low}..{self._high}; "
            f"{self._guesses}/{self.max_guesses} guesses used"
        )

    def _range(self) -> str:
        if self._low == self._high:
            return f"The secret number is {self._low}."
        return f"Guess a number from {self._low} to {self._high}."

    def _left(self) -> str:
        left = self.max_guesses - self._guesses
        return "Out of guesses." if left == 0 else f"Guesses left: {left}."

    def _info(self) -> dict[str, Any]:
        return {
            "task_id": str(self._secret),
            "instruction": self.instruction,
            "state_key": f"guess/{self.high}/{self._secret}|{self._low}-{self._high}|"
            f"{self.max_guesses - self._guesses}",
            "admissible_actions": [str(n) for n in range(1, self.high + 1)],
            "success": self._success,
            "ground_truth": str(self._secret),
        }
