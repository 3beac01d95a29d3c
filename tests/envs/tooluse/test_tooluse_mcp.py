"""The tools of a running tool-use task over MCP: a real MCP client (the ``mcp`` package) starts
the server over stdio, lists its tools, calls them and answers."""

from __future__ import annotations

import sys

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentgym.envs.tooluse.app_tasks import app_tasks
from agentgym.envs.tooluse.data import data_tasks
from agentgym.envs.tooluse.env import ToolUseEnv
from agentgym.envs.tooluse.expert import _printed

# no process or dir may outlive a test
pytestmark = pytest.mark.usefixtures("no_leftovers")


def server(task_id: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentgym.envs.tooluse.mcp_server", "--task-id", task_id]
    )


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
