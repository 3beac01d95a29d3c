"""One tool-use task instance as an MCP server (Model Context Protocol, over stdio).

External agents that speak MCP are evaluated on the tasks through this server: it starts a
:class:`~agentgym.envs.tooluse.env.ToolUseEnv` on one task, lists the task's tools (the same
names, descriptions and JSON schemas the env shows in ``<tools>``) plus ``answer``, and runs each
call through the env, so the sandbox, the checks and the errors are the env's own. ``answer``
ends the episode; its result says whether the task is solved.

A call the env answers with an error comes back with ``isError`` set, its text in the env's
words: bad arguments or an unknown tool, a tool that could not do its work (``Error: ...``: an
SQL error, a path outside the workspace, a missing file, an app's refusal), a call after the
answer. Code that runs and exits with a non-zero status is a result, not an error (its text
gives the status and both streams), as it is for the env.

    python -m agentgym.envs.tooluse.mcp_server --task-id data-00042

Task ids are unique across the splits, so the task is found in whichever holds it; ``--split``
only checks that it is there. The task's instruction is the server's ``instructions``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from agentgym.envs.tooluse.env import ToolUseEnv
from agentgym.envs.tooluse.tools import MAX_ARGUMENT_CHARS
from agentgym.seeding import SPLITS

__all__ = ["ANSWER", "create_server", "find_task", "main"]

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


def find_task(task_id: str, split: str | None = None) -> tuple[str, str]:
    """The task family (``"data"`` or ``"apps"``) and the split of the task ``task_id``.

    Raises ``ValueError`` for an id of no task (naming the ids there are), or one not in ``split``
    when that is given (naming the split that holds it).
    """
    from agentgym.envs.tooluse.app_tasks import app_tasks
    from agentgym.envs.tooluse.data import data_tasks

    families: dict[str, Callable[[str], Sequence[Any]]] = {"data": data_tasks, "apps": app_tasks}
    family = "apps" if task_id.startswith("apps-") else "data"
    found = next((s for s in SPLITS if any(task.id == task_id for task in families[family](s))), None)
    if found is None:
        ranges = []
        for tasks in families.values():
            ids = sorted(task.id for s in SPLITS for task in tasks(s))
            ranges.append(f"{ids[0]} to {ids[-1]}")
        raise ValueError(f"no tool-use task {task_id!r} in any split (the ids: {' and '.join(ranges)})")
    if split is not None and split != found:
        raise ValueError(f"task {task_id!r} is in the {found!r} split, not {split!r}")
    return family, found


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
            text = arguments.get("text")
            if set(arguments) != {"text"} or not isinstance(text, str) or len(text) > MAX_ARGUMENT_CHARS:
                problem = f'answer takes {{"text": a string of at most {MAX_ARGUMENT_CHARS:,} characters}}'
                return types.CallToolResult(
                    content=[types.TextContent(text=f"Error: {problem}")], is_error=True
                )
            reply = f"<answer>{text}</answer>"
        else:
            reply = "<tool_call>" + json.dumps({"name": params.name, "arguments": arguments}) + "</tool_call>"
        observation, reward, _terminated, _, info = await anyio.to_thread.run_sync(env.step, reply)
        text = observation.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
        if params.name == "answer":
            text += f"\nsolved: {str(bool(info['success'])).lower()} (reward {reward:g})"
        # The env's tools answer "Error: ..." when they could not do their work.
        failed = not info["action_valid"] or "error" in info or text.startswith("Error: ")
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=failed)

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
    parser.add_argument("--task-id", required=True, help="data-NNNNN or apps-NNNNN, of any split")
    parser.add_argument("--split", choices=SPLITS, help="fail unless the task is in this split")
    args = parser.parse_args(argv)
    try:
        family, split = find_task(args.task_id, args.split)
    except ValueError as exc:
        parser.error(str(exc))
    env = ToolUseEnv(tasks=family, split=split)
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
