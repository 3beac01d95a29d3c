"""One tool-use task instance as an MCP server (Model Context Protocol, over stdio).

External agents that speak MCP are evaluated on the tasks through this server: it starts a
:class:`~agentgym.envs.tooluse.env.ToolUseEnv` on one task, lists the task's tools (the same
names, descriptions and JSON schemas the env shows in ``<tools>``) plus ``answer``, and runs each
call through the env, so the sandbox, the checks and the errors are the env's own. ``answer``
ends the episode; its result says whether the task is solved. A bad call comes back as a
result with ``isError`` set, in the env's words.

    python -m agentgym.envs.tooluse.mcp_server --task-id data-00042 [--split test]

The task's instruction is the server's ``instructions``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from agentgym.envs.tooluse.env import ToolUseEnv

__all__ = ["ANSWER", "create_server", "main"]

ANSWER = types.Tool(
    name="answer",
    description="Finish the task with your answer (for a task "
    "that only asks for actions, a short confirmation).",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
)


def create_server(env: ToolUseEnv) -> Server[Any]:
    """An MCP server over ``env``, which must have been reset on its task."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [
            types.Tool(name=t.name, description=t.description, input_schema=dict(t.parameters))
            for t in env._tools()
        ]
        return types.ListToolsResult(tools=[*tools, ANSWER])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "answer":
            reply = f"<answer>{arguments.get('text', '')}</answer>"
        else:
            reply = "<tool_call>" + json.dumps({"name": params.name, "arguments": arguments}) + "</tool_call>"
        observation, reward, _terminated, _, info = await anyio.to_thread.run_sync(env.step, reply)
        text = observation.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
        if params.name == "answer":
            text += f"\nsolved: {str(bool(info['success'])).lower()} (reward {reward:g})"
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=not info["action_valid"])

    return Server(
        f"agentgym-tooluse-{env.task.id}",
        instructions=env.task.instruction,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.tooluse.mcp_server",
        description="Serve one tool-use task over MCP (stdio).",
    )
    parser.add_argument("--task-id", required=True)
    parser.add_argument("--split", default="test", choices=("train", "test"))
    args = parser.parse_args(argv)
    env = ToolUseEnv(tasks="apps" if args.task_id.startswith("apps-") else "data", split=args.split)
    try:
        env.reset(options={"task_id": args.task_id})
        server = create_server(env)

        async def serve() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(serve)
    finally:
        env.close()


if __name__ == "__main__":
    main()
