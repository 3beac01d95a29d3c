"""The tools of a running tool-use task over MCP: a real MCP client (the ``mcp`` package) starts
the server over stdio, lists its tools, calls them and answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentgym.envs.tooluse.app_tasks import app_tasks
from agentgym.envs.tooluse.data import DATABASE, data_tasks
from agentgym.envs.tooluse.env import ToolUseEnv
from agentgym.envs.tooluse.expert import _printed
from agentgym.envs.tooluse.tools import MAX_ARGUMENT_CHARS

# no process or dir may outlive a test
pytestmark = pytest.mark.usefixtures("no_leftovers")


MODULE = "agentgym.envs.tooluse.mcp_server"
#: The task id of the README's command: a train task (the server finds it in any split).
README_TASK = "data-00042"


def server(task_id: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", MODULE, "--task-id", task_id])


def running_servers() -> set[int]:
    """The pids of this process's children that run the MCP server (zombies excluded)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):  # not a process, or gone meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid() and state != "Z" and MODULE.encode() in cmdline:
            pids.add(int(entry.name))
    return pids


async def test_the_readme_task_serves_and_tool_errors_are_errors():
    task = next(t for t in data_tasks("train") if t.id == README_TASK)
    async with stdio_client(server(README_TASK)) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.instructions == task.instruction
        assert len(running_servers()) == 1

        result = await session.call_tool(
            "sql", {"query": "SELECT COUNT(*) AS n FROM sqlite_master", "database": DATABASE}
        )
        assert not result.is_error and result.content[0].text.startswith("n\n")
        result = await session.call_tool("sql", {"query": "SELEC * FROM nowhere", "database": DATABASE})
        assert result.is_error
        assert result.content[0].text == 'Error: sqlite3.OperationalError: near "SELEC": syntax error'
        result = await session.call_tool("read_file", {"path": "../../etc/passwd"})
        assert result.is_error
        assert (
            result.content[0].text
            == "Error: '../../etc/passwd' is outside the workspace; use a relative path."
        )
        result = await session.call_tool("python", {"code": "raise SystemExit(3)"})
        assert not result.is_error and result.content[0].text.startswith("exit status: 3")  # code ran
        for bad in ({}, {"text": 42}, {"text": "4", "more": 1}, {"text": "x" * (MAX_ARGUMENT_CHARS + 1)}):
            result = await session.call_tool("answer", bad)  # refused, and the episode goes on
            assert result.is_error and result.content[0].text.startswith('Error: answer takes {"text"')
        result = await session.call_tool("sql", {"query": "SELECT 1 AS one", "database": DATABASE})
        assert not result.is_error and result.content[0].text.startswith("one\n")
    deadline = time.monotonic() + 10
    while running_servers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running_servers(), "the MCP server outlived its client"


@pytest.mark.parametrize(
    "args, message",
    [
        ([README_TASK, "--split", "test"], "task 'data-00042' is in the 'train' split, not 'test'"),
        (["data-99999"], "no tool-use task 'data-99999' in any split (the ids: data-00000 to data-00599 and"),
    ],
)
def test_a_task_not_there_is_a_clear_error(args: list[str], message: str):
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--task-id", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


async def test_an_mcp_client_lists_and_calls_the_tools_of_a_data_task():
    task = data_tasks("test")[0]
    async with stdio_client(server(task.id)) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.instructions == task.instruction
        listed = {t.name: t for t in (await session.list_tools()).tools}
        env = ToolUseEnv(tasks="data")
        try:
            expected = {t.name: t.parameters for t in env._tools()}
        finally:
            env.close()
        assert set(listed) == {*expected, "answer"}
        assert all(listed[name].input_schema == schema for name, schema in expected.items())

        result = await session.call_tool("python", {"code": "print(6 * 7)"})
        assert not result.is_error and "42" in result.content[0].text
        result = await session.call_tool("python", {"code": 3})
        assert result.is_error and "is not of type 'string'" in result.content[0].text
        result = await session.call_tool("nope", {})
        assert result.is_error and "Unknown tool 'nope'" in result.content[0].text

        name, arguments = task.expert_calls[0]
        result = await session.call_tool(name, arguments)
        answer = _printed(f"<tool_response>\n{result.content[0].text}\n</tool_response>")
        result = await session.call_tool("answer", {"text": answer})
        assert not result.is_error and result.content[0].text.endswith("solved: true (reward 1)")


async def test_an_app_task_over_mcp_changes_the_apps_state():
    task = next(t for t in app_tasks("test") if t.answer is None)
    async with stdio_client(server(task.id)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"calendar_list_events", "email_send", "answer"} <= names and "python" not in names
        for name, arguments in task.expert_calls:
            assert not (await session.call_tool(name, arguments)).is_error
        result = await session.call_tool("answer", {"text": "done"})
        assert result.content[0].text.endswith("solved: true (reward 1)")
