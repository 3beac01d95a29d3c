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

from agentgym.env import extract_tag, match_action

__all__ = ["FAMILY_PROMPTS", "FamilyPrompt", "Prompter"]

_FORMAT = (
    "Think briefly if you need to, then give exactly one action inside "
    "<{tag}></{tag}>, for example <{tag}>{example}</{tag}>."
)


@dataclass(frozen=True)
class FamilyPrompt:
    """How agents of one env family are told to act."""

    role: str
    """The role description that opens the system message."""
    example: str = "look"
    """An example action, shown in the answer-format line."""
    action_tag: str = "action"
    """The tag actions are written in; ``""``: the whole response is the action, the env parses
    its own format (explained by ``response_format``)."""
    response_format: str = ""
    """The answer-format line for ``action_tag=""`` families."""
    answer_template: str | None = None
    """Where a final answer goes in a response (``{}`` marks it; IGPO scores the ground truth
    there); ``None``: the action format."""


FAMILY_PROMPTS: dict[str, FamilyPrompt] = {
    "textgames": FamilyPrompt("You are an expert player of text games. Each turn you see the "
                              "game's answer to your last action."),
    "search": FamilyPrompt(
        "You answer questions by searching a collection of documents.",
        action_tag="",
        response_format=(
            "Each reply does one thing. To search, write <search>your query</search>; the top "
            "documents come back in the next message. When you know the answer, write "
            "<answer>the answer</answer> with a few words only."),
        answer_template="<answer>{}</answer>"),
    "web": FamilyPrompt(
        "You shop on a web site for exactly what the instruction asks for, then check out. "
        "Each turn you see the current page. In the text shop, act with search[words] or "
        "click[the name of a bracketed element]. In the browser, elements carry refs such as "
        "[ref=e12]: act with click(e12), fill(e4, \"text\"), select(e7, \"option\"), "
        "press(\"Enter\"), back() or goto(\"/cart\"); stop() gives up.",
        example="click[Add to cart]"),
    "tooluse": FamilyPrompt(
        "You solve tasks by calling tools. The first message lists them with their JSON schemas.",
        action_tag="",
        response_format=(
            'Each reply does one thing. To call a tool, write <tool_call>{"name": "...", '
            '"arguments": {...}}</tool_call>; its result comes back in the next message. When '
            "you are done, write <answer>your answer</answer>."),
        answer_template="<answer>{}</answer>"),
    "gui": FamilyPrompt(
        "You operate desktop applications to do what the task asks. Each turn you see the "
        "accessibility tree of the open windows: numbered elements with role, name, states, "
        "screen box @(x,y wxh) and text. Act with click(id) or click(x, y), double_click, "
        "right_click, drag(x1, y1, x2, y2), type(\"text\"), key(\"ctrl+s\"), scroll(dx, dy) "
        "or wait(); when the task is finished (files saved), done().",
        example="click(7)"),
    "misc": FamilyPrompt("You are an agent that solves tasks step by step in a text environment."),
}


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
            raise ValueError(f"examples must be (observation, response) pairs of strings, "
                             f"got {self.examples!r:.120}")
        object.__setattr__(self, "examples", examples)
        if self.action_tag is None:
            object.__setattr__(self, "action_tag", self._family.action_tag)

    @property
    def _family(self) -> FamilyPrompt:
        return FAMILY_PROMPTS.get(self.family, FAMILY_PROMPTS["misc"])

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
            form = (_FORMAT.format(tag=self.action_tag, example=family.example) if self.action_tag
                    else family.response_format)
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
        kept = past if self.history is None else past[max(0, len(past) - self.history):]
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
