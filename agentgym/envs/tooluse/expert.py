"""A scripted solver for every tool-use task, acting only through the tools.

:func:`expert_action` is a function of the observation and ``info`` (``task_id``, and
``tool_calls``: how many calls were made), so it plays a sandboxed or remote env too: it makes the
task's expert calls in order (the SQL or Python that computes a data answer from the files; the
app API calls that reach the expected end state), then answers: a data task with the last line
the last call printed, an apps task with its expected answer (or "done"). That it solves every
task proves the tasks solvable through the tools and the checks right.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentgym.envs.tooluse.app_tasks import AppTask
    from agentgym.envs.tooluse.data import DataTask

__all__ = ["expert_action"]


@functools.cache
def _tasks() -> dict[str, DataTask | AppTask]:
    from agentgym.envs.tooluse.app_tasks import app_tasks
    from agentgym.envs.tooluse.data import data_tasks

    tasks: dict[str, DataTask | AppTask] = {}
    for split in ("train", "test"):
        tasks.update({t.id: t for t in data_tasks(split)})
        tasks.update({t.id: t for t in app_tasks(split)})
    return tasks


def expert_action(observation: str, info: dict[str, Any]) -> str:
    """The expert's next reply."""
    task = _tasks()[info["task_id"]]
    made = int(info.get("tool_calls", 0))
    if made < len(task.expert_calls):
        name, arguments = task.expert_calls[made]
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
    if task.id.startswith("apps-"):
        return f"<answer>{task.answer or 'done'}</answer>"
    return f"<answer>{_printed(observation)}</answer>"


def _printed(observation: str) -> str:
    """The last non-empty line a tool printed: the stdout of code, the rows of SQL."""
    body = observation.split("<tool_response>\n", 1)[-1].rsplit("\n</tool_response>", 1)[0]
    if "\nstdout:\n" in body:
        body = body.split("\nstdout:\n", 1)[1].rsplit("\nstderr:\n", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    return lines[-1] if lines else ""
