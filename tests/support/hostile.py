"""Actions that broke envs (security/test_hostile_actions.py sends them to every env in process,
security/test_isolation.py through the env server)."""

from __future__ import annotations

import json
from typing import Any

NUL, SURROGATE = "\x00", "\ud800"
HOSTILE = [
    "",
    NUL,
    SURROGATE,
    "\udfff\ud800x",
    "\x1b[2J\x07\x08\r",
    "\u202e\ufeff\u200b",
    "x" * 10_000_000,
    "[" * 100_000,
    "{" * 100_000,
    '{"a":' * 50_000,
    "(" * 100_000,
    "<action>" * 10_000,
    "../../../../etc/shadow",
    "/etc/shadow",
    "~/.ssh/id_rsa",
    "a" * 5_000,
    "a/" * 3_000,
    "\n".join(["up"] * 10_000),
    "%s%n%x" * 100,
    "'; DROP TABLE x; --",
    "$(id)`id`",
]


def tool_call(tool: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


#: The breaks of ToolUse-v0, which raised on d8cc9ee.
TOOLUSE_BREAKS = [
    tool_call("write_file", path=f"a{NUL}b", content="x"),
    tool_call("read_file", path=f"{NUL}"),
    tool_call("python", code=f"print(1){NUL}"),
    tool_call("bash", command=f"echo {NUL}"),
    tool_call("write_file", path=".", content="x"),
    tool_call("write_file", path="f/inside", content="x"),  # after f is written as a file
    tool_call("write_file", path="a" * 5_000, content="x"),
    tool_call("read_file", path="a" * 5_000),
    tool_call("bash", command="echo " + "x" * 20_000_000),
    tool_call("python", code="#" * 3_000_000),
    tool_call("sql", database="a" * 300, query="select 1"),
    tool_call("list_files", path=("d" * 255 + "/") * 20),
    "<tool_call>" + "[" * 100_000,
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    tool_call("add_contact", name=NUL * 10, email="x" * 1_000_000),
    tool_call("bash", command="ln -s /nonexistent/dir/file dangling"),
    tool_call("write_file", path="dangling", content="x"),  # through a dangling symlink
    tool_call("read_file", path="dangling"),
]
