"""Tool use: function calling over sandboxed tools and stateful apps.

- :mod:`~agentgym.envs.tooluse.protocol`: tool schemas (OpenAI format) and the ``<tool_call>``
  text protocol;
- :mod:`~agentgym.envs.tooluse.tools`: ``python``, ``bash``, ``sql``, file tools and the apps'
  APIs, run in the task's sandbox;
- :mod:`~agentgym.envs.tooluse.data`: data questions over generated CSV files and SQLite;
- :mod:`~agentgym.envs.tooluse.apps`, :mod:`~agentgym.envs.tooluse.app_tasks`: calendar,
  contacts, email and notes apps, and multi-step tasks checked on their end state;
- :mod:`~agentgym.envs.tooluse.env`: ``agentgym/ToolUse-v0``.
"""

from agentgym.registry import EnvManifest, FamilyPrompt, Resources
from agentgym.registry import register as _register

#: How agents of this family are told to act (every env of the family carries it).
PROMPT = FamilyPrompt(
    "You solve tasks by calling tools. The first message lists them with their JSON schemas.",
    action_tag="",
    response_format=(
        'Each reply does one thing. To call a tool, write <tool_call>{"name": "...", '
        '"arguments": {...}}</tool_call>; its result comes back in the next message. When '
        "you are done, write <answer>your answer</answer>."
    ),
    answer_template="<answer>{}</answer>",
)


def register() -> None:
    """Entry point of the ``agentgym.envs`` group: registers the tool-use envs."""
    _register(
        "agentgym/ToolUse-v0",
        "agentgym.envs.tooluse.env:ToolUseEnv",
        manifest=EnvManifest(
            description="Function calling over sandboxed code, SQL, files and stateful apps",
            family="tooluse",
            prompt=PROMPT,
            extras=("tooluse",),
            system_packages=("bubblewrap",),  # each session's tools in a sandbox of its own
            # A server hosts many sessions, each with a sandbox of its own for its tools.
            resources=Resources(memory_mb=2048, pids=2048, nested_sandboxes=True),
            # Not isolate: it turns the tools' sandbox off.
            client_kwargs={
                "tasks": None,
                "split": None,
                "max_turns": 50,
                "timeout_s": 60,
                "max_output_chars": 20_000,
            },
        ),
    )
