"""Function calling as text: tool schemas in the OpenAI format, and the ``<tool_call>`` protocol.

A tool is a name, a description and a JSON Schema of its arguments (:class:`Tool`;
:meth:`Tool.schema` is the ``{"type": "function", "function": {...}}`` object that OpenAI's API
and Qwen-style chat templates take). An agent's reply does one of two things:

- ``<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>``: call a tool
  (``arguments`` may also be a JSON *string* holding the object, as some models write it);
- ``<answer>...</answer>``: end the episode with an answer.

:func:`parse_reply` turns a reply into a :class:`ToolCall` or an :class:`Answer`, or raises
:class:`ToolCallError` whose message says what is wrong in words an agent can act on (invalid
JSON with its position, no name, both tags, neither, unknown tool, an argument of the wrong
type, a missing or unexpected argument). Tool output reaches the agent through
:func:`format_output`: decoded as UTF-8 (bad bytes replaced), cut to a size, the cut said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

__all__ = ["Answer", "Tool", "ToolCall", "ToolCallError", "format_output", "parse_reply", "render_tools"]

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Tool:
    """A callable tool: ``parameters`` is a JSON Schema object (``type: object``)."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON Schema of type object")
        jsonschema.Draft202012Validator.check_schema(dict(self.parameters))

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling form of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def problems(self, arguments: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``arguments`` for this tool, one line each (empty when valid)."""
        validator = jsonschema.Draft202012Validator(dict(self.parameters))
        lines = []
        for error in sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in error.path)
            lines.append(f"argument {where!r}: {error.message}" if where else error.message)
        return lines


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    text: str


class ToolCallError(ValueError):
    """A reply that is neither a valid tool call nor an answer; the message is for the agent."""


def parse_reply(text: str, tools: Sequence[Tool]) -> ToolCall | Answer:
    """The one action in ``text``: a tool call checked against ``tools``, or an answer."""
    calls, answers = _TOOL_CALL.findall(text), _ANSWER.findall(text)
    if calls and answers:
        raise ToolCallError("Do one thing per reply: a <tool_call> or an <answer>, not both.")
    if len(calls) > 1:
        raise ToolCallError(f"Make one tool call per reply (found {len(calls)}).")
    if answers:
        return Answer(answers[-1].strip())
    if not calls:
        raise ToolCallError(
            'No action found. Call a tool with <tool_call>{"name": ..., '
            '"arguments": {...}}</tool_call>, or finish with <answer>...</answer>.'
        )
    call = _decode(calls[0])
    by_name = {tool.name: tool for tool in tools}
    if call.name not in by_name:
        raise ToolCallError(f"Unknown tool {call.name!r}. The tools are: {', '.join(by_name)}.")
    problems = by_name[call.name].problems(call.arguments)
    if problems:
        raise ToolCallError(f"Bad arguments for {call.name}: " + "; ".join(problems))
    return call


def _decode(body: str) -> ToolCall:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ToolCallError(
            f"The tool call is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:
        raise ToolCallError("The tool call nests arrays or objects too deeply.") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError(
            'A tool call is a JSON object with a "name" (a string) and "arguments" (an object).'
        )
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models encode the arguments object as a string
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        raise ToolCallError(f'The "arguments" of {data["name"]!r} must be a JSON object.')
    return ToolCall(data["name"], arguments)


def render_tools(tools: Sequence[Tool]) -> str:
    """The tools as the observation lists them: one JSON schema per line in ``<tools>``, as
    Qwen-style chat templates write them."""
    lines = "\n".join(json.dumps(tool.schema(), ensure_ascii=False) for tool in tools)
    return f"<tools>\n{lines}\n</tools>"


def format_output(data: bytes | str, max_chars: int) -> str:
    """``data`` as text for the agent: UTF-8 with bad bytes replaced, at most ``max_chars``
    characters, and a line saying how much was cut."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[... {len(text) - max_chars} more characters cut]"
