"""The tool-calling text protocol: schemas, parsing and argument checks, output capping."""

from __future__ import annotations

import json

import pytest

from agentgym.envs.tooluse.protocol import (
    Answer,
    Tool,
    ToolCall,
    ToolCallError,
    format_output,
    parse_reply,
    render_tools,
)

PYTHON = Tool(
    "python",
    "Run Python code in the task's sandbox.",
    {
        "type": "object",
        "properties": {"code": {"type": "string"}, "timeout_s": {"type": "integer", "minimum": 1}},
        "required": ["code"],
        "additionalProperties": False,
    },
)
TOOLS = [
    PYTHON,
    Tool(
        "sql",
        "Query the task's SQLite database.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
]


def call(payload: object) -> str:
    return f"I will run it.\n<tool_call>{json.dumps(payload)}</tool_call>"


def test_a_valid_call_and_an_answer():
    assert parse_reply(call({"name": "python", "arguments": {"code": "print(1)"}}), TOOLS) == ToolCall(
        "python", {"code": "print(1)"}
    )
    assert parse_reply(
        call({"name": "sql", "arguments": json.dumps({"query": "SELECT 1"})}), TOOLS
    ) == ToolCall("sql", {"query": "SELECT 1"})  # arguments as a JSON string
    assert parse_reply("so <answer> 42 </answer>", TOOLS) == Answer("42")


@pytest.mark.parametrize(
    "reply, says",
    [
        ("<tool_call>{'name': 'python'}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "python", "arguments": {"code": "x"</tool_call>', "not valid JSON"),
        (call(["python"]), '"name" (a string)'),
        (call({"arguments": {}}), '"name" (a string)'),
        (call({"name": "python", "arguments": [1]}), "must be a JSON object"),
        (call({"name": "python", "arguments": "not json"}), "must be a JSON object"),
        (call({"name": "shell", "arguments": {}}), "Unknown tool 'shell'. The tools are: python, sql"),
        (call({"name": "python", "arguments": {}}), "'code' is a required property"),
        (call({"name": "python", "arguments": {"code": 3}}), "argument 'code': 3 is not of type 'string'"),
        (call({"name": "python", "arguments": {"code": "x", "timeout_s": 0}}), "argument 'timeout_s'"),
        (call({"name": "python", "arguments": {"code": "x", "cwd": "/"}}), "'cwd' was unexpected"),
        ("just text", "No action found"),
        (call({"name": "sql", "arguments": {"query": "x"}}) * 2, "one tool call per reply"),
        (call({"name": "sql", "arguments": {"query": "x"}}) + "<answer>1</answer>", "not both"),
    ],
)
def test_bad_calls_explain_themselves(reply, says):
    with pytest.raises(ToolCallError) as info:
        parse_reply(reply, TOOLS)
    assert says in str(info.value)


def test_schemas_are_in_the_openai_format_and_checked():
    schema = PYTHON.schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "python"
    assert schema["function"]["parameters"]["required"] == ["code"]
    rendered = render_tools(TOOLS)
    assert rendered.startswith("<tools>\n") and json.loads(rendered.splitlines()[1]) == schema
    with pytest.raises(ValueError, match="type object"):
        Tool("bad", "no", {"type": "string"})
    with pytest.raises(Exception, match="is not valid"):
        Tool("bad", "no", {"type": "object", "properties": {"x": {"type": "strng"}}})


def test_output_is_decoded_and_capped():
    assert format_output(b"ok \xff\xfe", 100) == "ok \ufffd\ufffd"
    capped = format_output("x" * 1000, 100)
    assert capped.startswith("x" * 100) and capped.endswith("[... 900 more characters cut]")
