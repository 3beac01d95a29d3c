"""From env text to chat messages, and from a model's response back to an env action.

The chat has the shape that multi-turn agents are trained on::

    system:    how to act + the task (instruction)
    user/assistant: demonstration turns (``examples``), if any
    user:      observation 1            ┐ the last ``history`` turns
    assistant: response 1               ┘ (all of them when ``history`` is None)
    user:      current observation (+ admissible actions when the env lists them)

An action is the content of the last ``<action>...</action>`` in a response (the tag is
configurable; a family may instead hand the whole response to the env, which then parses its own
format, as the search family's ``<search>``/``<answer>`` does). With ``bare_actions=True`` a
response without the tag that is, as a whole, one of the env's admissible actions (compared by
:func:`~agentgym.env.match_action`) is accepted too: small models often answer "go to bed 1" and
nothing else. Any other response has a broken format: the turn is marked invalid and the env
receives an empty action, which every env answers as invalid, so that the episode clock still
advances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentgym.env import extract_tag, match_action
from agentgym.registry import FamilyPrompt, family_prompt

__all__ = ["FamilyPrompt", "Prompter", "PrompterProtocol"]


class PrompterProtocol(Protocol):
    """What the rollout engines ask of a prompter (:class:`Prompter`, or a wrapper such as
    :class:`agentgym.multiagent.WholeResponse`): the system message of a task, the chat of a
    turn, and the action in a response (``None``: a broken format)."""

    def system(self, instruction: str) -> str: ...

    def messages(
        self,
        system: str,
        past: Sequence[tuple[str, str]],
        observation: str,
        admissible: Sequence[str] | None = None,
    ) -> list[dict[str, str]]: ...

    def parse(self, response: str, admissible: Sequence[str] | None = None) -> str | None: ...


_FORMAT = (
    "Think briefly if you need to, then give exactly one action inside "
    "<{tag}></{tag}>, for example <{tag}>{example}</{tag}>."
)


@dataclass(frozen=True)
class Prompter:
    """Builds chat messages for one env family and extracts actions from responses."""

    family: str = "misc"
    history: int | None = 2
    """Past turns kept in the prompt (verl-agent uses 2); ``None`` keeps all of them."""
    action_tag: str | None = None
    """The tag actions are written in; ``None``: the family's (``action`` for most; ``""`` hands
    the whole response to the env)."""
    show_admissible: bool = True
    """Append the env's ``admissible_actions`` (when given) to the current observation."""
    system_prompt: str | None = None
    """Replaces the family's role description and the answer-format line when set (the task
    still follows it): say how to format the action yourself."""
    bare_actions: bool = False
    """Also accept an untagged response that is exactly one admissible action."""
    examples: tuple[tuple[str, str], ...] = ()
    """Demonstration turns, (observation, response) pairs shown after the system message in
    every prompt (few-shot prompting: a small model copies their answer format)."""

    def __post_init__(self) -> None:
        if self.history is not None and self.history < 0:
            raise ValueError(f"history must be >= 0 or None, got {self.history}")
        examples = tuple(tuple(pair) for pair in self.examples)
        if not all(len(pair) == 2 and all(isinstance(x, str) for x in pair) for pair in examples):
            raise ValueError(
                f"examples must be (observation, response) pairs of strings, got {self.examples!r:.120}"
            )
        object.__setattr__(self, "examples", examples)
        if self.action_tag is None:
            object.__setattr__(self, "action_tag", self._family.action_tag)

    @property
    def _family(self) -> FamilyPrompt:
        return family_prompt(self.family)

    @property
    def answer_template(self) -> str:
        """Where a final answer goes in a response, ``{}`` marking it (what IGPO scores)."""
        if self._family.answer_template is not None and self.action_tag == self._family.action_tag:
            return self._family.answer_template
        return "{}" if self.bare_actions else self.format_action("{}")

    def system(self, instruction: str) -> str:
        if self.system_prompt is not None:
            text = self.system_prompt
        else:
            family = self._family
            form = (
                _FORMAT.format(tag=self.action_tag, example=family.example)
                if self.action_tag
                else family.response_format
            )
            text = f"{family.role}\n{form}"
        return text + (f"\n\nYour task: {instruction}" if instruction else "")

    def user(self, observation: str, admissible: Sequence[str] | None = None) -> str:
        if self.show_admissible and admissible:
            return f"{observation}\n\nAvailable actions: {', '.join(admissible)}"
        return observation

    def messages(
        self,
        system: str,
        past: Sequence[tuple[str, str]],
        observation: str,
        admissible: Sequence[str] | None = None,
    ) -> list[dict[str, str]]:
        """Chat for the next decision. ``system`` is :meth:`system` of the episode's instruction
        (computed once per episode); ``past`` holds (observation, response) of earlier turns,
        oldest first, of which only the last ``history`` are kept."""
        kept = past if self.history is None else past[max(0, len(past) - self.history) :]
        messages = [{"role": "system", "content": system}]
        for obs, response in (*self.examples, *kept):
            messages += [{"role": "user", "content": obs}, {"role": "assistant", "content": response}]
        messages.append({"role": "user", "content": self.user(observation, admissible)})
        return messages

    def parse(self, response: str, admissible: Sequence[str] | None = None) -> str | None:
        """The action in ``response``, or ``None`` when the format is broken. ``admissible``
        (the env's ``admissible_actions``) is consulted only with ``bare_actions``. With
        ``action_tag=""`` the action is the whole response."""
        if not self.action_tag:
            return response
        action = extract_tag(response, self.action_tag)
        if action is None and self.bare_actions and admissible:
            action = match_action(response, admissible)
        return action

    def format_action(self, action: str) -> str:
        """A response that carries ``action`` in this prompter's format (for scripted policies)."""
        return f"<{self.action_tag}>{action}</{self.action_tag}>" if self.action_tag else action
