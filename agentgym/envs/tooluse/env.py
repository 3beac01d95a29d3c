"""``agentgym/ToolUse-v0``: solve a task by calling tools that run in the task's sandbox.

The observation at reset is the task, the tools (their JSON schemas, in ``<tools>``) and the
workspace's files. Each reply does one thing (:mod:`~agentgym.envs.tooluse.protocol`):
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, answered by the tool's result in
``<tool_response>``; or ``<answer>...</answer>``, which ends the episode with reward 1 when the
task is solved, else 0. A malformed call, an unknown tool or bad arguments are answered with an
``Error: ...`` the agent can read (``action_valid=False``, no penalty). After ``max_turns``
replies without an answer the episode is truncated.

Task families (``tasks=``): ``"data"`` (questions over generated CSV files and a SQLite
database, tools ``python``, ``bash``, ``sql`` and file tools; the answer is checked with a
tolerance), ``"apps"`` (multi-step goals over calendar, contacts, email and notes, tools = the
apps' APIs; solved when the apps' end state equals the expected one and nothing else changed),
or ``"all"``. Every episode gets a clean workspace in a sandbox owned by the env (started at the
first reset, emptied and refilled at each one, replaced if it died): agent code never runs in
the caller's process, and nothing an episode does reaches the next.

``info``: ``task_id``, ``instruction``, ``task_type`` (the template), ``tool_calls`` (calls made),
``state_key`` (the task and the calls so far), ``success``; after an apps answer, ``problems``
(what differs from the expected end state).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from agentgym.env import TextEnv, coerce_action, pick_task
from agentgym.envs.tooluse.protocol import (
    Answer,
    ToolCallError,
    parse_reply,
    render_tools,
)
from agentgym.envs.tooluse.tools import (
    APP_STATE,
    MAX_OUTPUT_CHARS,
    MAX_TIMEOUT_S,
    WORKSPACE_TOOLS,
    Toolbox,
    app_tools,
)
from agentgym.sandbox import LocalSandbox, Sandbox, SandboxError, SandboxLimits

__all__ = ["ToolUseEnv"]

TASK_FAMILIES = ("data", "apps", "all")
#: The size of an episode's workspace, and of its /tmp, each (the tasks' files take < 1 MiB).
WORKSPACE_BYTES = 64 << 20
FORMAT = (
    'Call one tool per reply: <tool_call>{"name": ..., "arguments": {...}}</tool_call>. '
    "When you are done, reply <answer>...</answer>."
)


class ToolUseEnv(TextEnv):
    """Tool use over sandboxed tools (see the module documentation).

    Args:
        tasks: ``"data"``, ``"apps"`` or ``"all"``.
        split: ``"train"`` or ``"test"``.
        max_turns: replies before the episode is truncated.
        timeout_s: default wall-clock limit of one code tool call.
        max_output_chars: each tool result is cut to this many characters.
        isolate: run tools under bubblewrap (``None``: when it works here; ``False``: plain
            subprocesses, for when the env itself already runs in a sandbox).
    """

    family: ClassVar[str] = "tooluse"

    def __init__(
        self,
        *,
        tasks: str = "data",
        split: str = "train",
        max_turns: int = 12,
        timeout_s: float = 10.0,
        max_output_chars: int = 4000,
        isolate: bool | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        if tasks not in TASK_FAMILIES:
            raise ValueError(f"ToolUseEnv: tasks must be one of {TASK_FAMILIES}, got {tasks!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"ToolUseEnv: max_turns must be an int >= 1, got {max_turns!r}")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not 0 < timeout_s <= MAX_TIMEOUT_S
        ):
            raise ValueError(
                f"ToolUseEnv: timeout_s must be seconds in (0, {MAX_TIMEOUT_S}], got {timeout_s!r}"
            )
        if (
            isinstance(max_output_chars, bool)
            or not isinstance(max_output_chars, int)
            or not 100 <= max_output_chars <= MAX_OUTPUT_CHARS
        ):
            raise ValueError(
                f"ToolUseEnv: max_output_chars must be an int in [100, "
                f"{MAX_OUTPUT_CHARS}], got {max_output_chars!r}"
            )
        self.max_turns, self.timeout_s, self.max_output_chars = max_turns, timeout_s, max_output_chars
        self.isolate = isolate
        self.tasks = _load_tasks(tasks, split)
        self._by_id = {task.id: task for task in self.tasks}
        self.task: Any = self.tasks[0]
        self.sandbox: Sandbox | None = None
        self._calls: list[str] = []
        self._turns, self._done, self._success = 0, False, False
        self._problems: list[str] = []

    # -- episodes ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a task (``options={"task_id": ...}``, else one drawn with ``seed``) in a clean
        workspace."""
        super().reset(seed=seed)
        self.task = pick_task(self.tasks, self._by_id, options, self.np_random, "ToolUseEnv")
        self._calls, self._turns, self._done, self._success, self._problems = [], 0, False, False, []
        files = self._prepare()
        tools = render_tools(self._tools())
        observation = (
            f"{self.task.instruction}\n\nYou can call these tools:\n{tools}\n{FORMAT}\n"
            f"Workspace files: {', '.join(files) or '(none)'}"
        )
        return observation, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        if self._done:
            return self.episode_over(self._info())
        self._turns += 1
        try:
            reply = parse_reply(text, self._tools())
        except ToolCallError as exc:
            return self._answered(f"Error: {exc}", 0.0, valid=False)
        if isinstance(reply, Answer):
            self._done = True
            self._success = self._grade(reply.text)
            return self._answered(f"Your answer: {reply.text}", float(self._success), valid=True)
        self._calls.append(json.dumps([reply.name, reply.arguments], sort_keys=True))
        try:
            result = self._toolbox().run(reply)
        except SandboxError as exc:
            if self.sandbox is not None and self.sandbox.alive():  # the call failed, not it
                return self._answered(f"<tool_response>\nError: {exc}\n</tool_response>", 0.0, valid=True)
            # The sandbox died under the call: end, say why.
            self._done = True
            message = f"the task's sandbox failed: {exc}"
            return (
                f"Error: {message}",
                0.0,
                False,
                True,
                self._info() | {"action_valid": True, "error": message},
            )
        return self._answered(f"<tool_response>\n{result}\n</tool_response>", 0.0, valid=True)

    def _answered(
        self, observation: str, reward: float, *, valid: bool
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        truncated = not self._done and self._turns >= self.max_turns
        if truncated:
            observation += "\nNo replies left: the episode ends without an answer."
        return observation, reward, self._done, truncated, self._info() | {"action_valid": valid}

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and copying: only without a sandbox (before the first ``reset``, or after
        ``close``). An episode's state is its workspace (files, the apps' state, anything the
        agent's code left running), which lives in the sandbox, not in this process."""
        if self.sandbox is not None:
            raise TypeError(
                "ToolUseEnv cannot be pickled or copied while it holds a sandbox: the episode's "
                "workspace (files, the apps' state, processes) lives there, not in this process. "
                "Copy it before reset() or after close(); to replay a task, reset a new env with "
                "options={'task_id': ...}"
            )
        return self.__dict__.copy()

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        super().close()

    # -- tasks ---------------------------------------------------------------------------------

    def _is_app_task(self) -> bool:
        return self.task.id.startswith("apps-")

    def _tools(self) -> tuple[Any, ...]:
        return app_tools() if self._is_app_task() else WORKSPACE_TOOLS

    def _prepare(self) -> list[str]:
        """A clean workspace holding the task's files; their names."""
        sandbox = self._workspace()
        if self._is_app_task():
            sandbox.write_file(APP_STATE, json.dumps(self.task.initial, indent=1).encode())
            return [APP_STATE]
        from agentgym.envs.tooluse.data import materialize

        with tempfile.TemporaryDirectory(prefix="agentgym-tooluse-") as tmp:
            names = materialize(self.task, Path(tmp))
            for name in names:
                sandbox.write_file(name, (Path(tmp) / name).read_bytes())
        return names

    def _workspace(self) -> Sandbox:
        """The env's sandbox, emptied (a new one if it died)."""
        if self.sandbox is not None and self.sandbox.alive():
            try:
                self.sandbox.reset()
                return self.sandbox
            except SandboxError:
                pass
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = LocalSandbox(
            SandboxLimits(wall_timeout_s=float(self.timeout_s), disk_bytes=WORKSPACE_BYTES),
            bwrap=self.isolate,
        ).start()
        return self.sandbox

    def _toolbox(self) -> Toolbox:
        sandbox = self.sandbox
        if sandbox is None or not sandbox.alive():
            raise SandboxError("the workspace's sandbox is gone")
        return Toolbox(sandbox, max_output_chars=self.max_output_chars, default_timeout_s=self.timeout_s)

    def _grade(self, answer: str) -> bool:
        if not self._is_app_task():
            from agentgym.envs.tooluse.data import check_answer

            return bool(check_answer(self.task, answer))
        from agentgym.envs.tooluse.app_tasks import check

        try:
            state = json.loads(self._toolbox().sandbox.read_file(APP_STATE))
        except (OSError, ValueError, SandboxError) as exc:
            self._problems = [f"the apps' state could not be read: {exc}"]
            return False
        result = check(self.task, state, answer)
        self._problems = list(result.problems)
        return bool(result.success)

    def _info(self) -> dict[str, Any]:
        history = hashlib.sha256("\n".join(self._calls).encode()).hexdigest()[:16]
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "instruction": self.task.instruction,
            "task_type": getattr(self.task, "kind", "apps"),
            "tool_calls": len(self._calls),
            "state_key": f"{self.task.id}|{history}",
            "success": self._success,
        }
        if self._done and self._is_app_task():
            info["problems"] = list(self._problems)
        return info

    def render_text(self) -> str:
        return f"{self.task.id}: {self._turns}/{self.max_turns} replies, {len(self._calls)} tool calls"


def _load_tasks(family: str, split: str) -> list[Any]:
    tasks: list[Any] = []
    if family in ("data", "all"):
        from agentgym.envs.tooluse.data import data_tasks

        tasks += data_tasks(split)
    if family in ("apps", "all"):
        from agentgym.envs.tooluse.app_tasks import app_tasks

        tasks += app_tasks(split)
    return tasks
