"""The tools of a tool-use task, run in the task's sandbox (never in the caller's process).

:data:`WORKSPACE_TOOLS` are ``python``, ``bash``, ``sql`` (SQLite on a database file of the
workspace), ``list_files``, ``read_file`` and ``write_file``; :func:`app_tools` are the APIs of the
stateful apps (:mod:`~agentgym.envs.tooluse.apps`), whose state is the workspace file
:data:`APP_STATE`. :class:`Toolbox` runs a :class:`~agentgym.envs.tooluse.protocol.ToolCall` in a
started :class:`~agentgym.sandbox.Sandbox` and returns the text the agent reads: exit status,
stdout and stderr for code, rows for SQL, file contents, or an ``Error: ...`` line. Code runs
with a wall-clock limit (``timeout_s``, at most :data:`MAX_TIMEOUT_S`) and capped output; paths
are relative to the workspace and may not leave it.
"""

from __future__ import annotations

import json
import posixpath
import sysconfig
from collections.abc import Iterator
from typing import Any

from agentgym.envs.tooluse.protocol import Tool, ToolCall, format_output
from agentgym.sandbox import Sandbox, SandboxError

__all__ = ["APP_STATE", "MAX_OUTPUT_CHARS", "MAX_TIMEOUT_S", "WORKSPACE_TOOLS", "Toolbox", "app_tools"]

#: The workspace file holding the apps' state.
APP_STATE = "apps.json"
#: The longest ``timeout_s`` a code tool (or the env's default) accepts, in seconds.
MAX_TIMEOUT_S = 60
#: The most characters of a tool result the env may be set to show.
MAX_OUTPUT_CHARS = 100_000
#: Rows an SQL query shows at most.
MAX_ROWS = 200
#: The most characters of a call's arguments, but ``write_file``'s content: code, commands and
#: queries travel as one command-line argument, which Linux caps at 128 KiB.
MAX_ARGUMENT_CHARS = 100_000
#: The longest path and file name (in UTF-8 bytes) a file tool takes, Linux's limits.
MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255

_TIMEOUT = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_TIMEOUT_S,
    "description": "wall-clock limit in seconds (default 10)",
}
_PATH = {"type": "string", "description": "a path relative to the workspace"}

WORKSPACE_TOOLS: tuple[Tool, ...] = (
    Tool(
        "python",
        "Run Python 3 code in the workspace (the current directory); returns the exit "
        "status, stdout and stderr. Only files persist between calls.",
        {
            "type": "object",
            "properties": {"code": {"type": "string"}, "timeout_s": _TIMEOUT},
            "required": ["code"],
            "additionalProperties": False,
        },
    ),
    Tool(
        "bash",
        "Run a bash command in the workspace; returns the exit status, stdout and stderr.",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout_s": _TIMEOUT},
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
    Tool(
        "sql",
        f"Run one SQL statement on a SQLite database file of the workspace; returns the "
        f"column names and up to {MAX_ROWS} rows, tab-separated.",
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "database": _PATH},
            "required": ["query", "database"],
            "additionalProperties": False,
        },
    ),
    Tool(
        "list_files",
        "List the files under a directory of the workspace, with their sizes.",
        {"type": "object", "properties": {"path": _PATH}, "additionalProperties": False},
    ),
    Tool(
        "read_file",
        "Read a text file of the workspace.",
        {
            "type": "object",
            "properties": {"path": _PATH},
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    Tool(
        "write_file",
        "Create or replace a file of the workspace with the given text.",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    ),
)

# Run inside the sandbox by the sql and list_files tools (argv: database, query / path).
#: ``python3 -I -S -c _RUN_CODE CODE`` runs CODE as ``python3 -c CODE`` would (in ``__main__``,
#: ``sys.argv == ["-c"]``, ``exit()`` defined), with site-packages on the path but without running
#: their ``.pth`` files: an editable install's import hook costs ~12 ms of every call.
_SITE_PACKAGES = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
_RUN_CODE = (
    "import site, sys; site.setquit(); "
    f"sys.path.extend({_SITE_PACKAGES!r}); "
    "exec(compile(sys.argv.pop(1), '<string>', 'exec'))"
)
_SQL = """
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=rw", uri=True)
cur = con.execute(sys.argv[2])
con.commit()
if cur.description is None:
    print(f"ok ({cur.rowcount} rows changed)")
else:
    print("\\t".join(d[0] for d in cur.description))
    rows = cur.fetchmany(MAX_ROWS + 1)
    for row in rows[:MAX_ROWS]:
        print("\\t".join("NULL" if v is None else str(v) for v in row))
    if len(rows) > MAX_ROWS:
        print("[more rows not shown: add LIMIT or aggregate]")
""".replace("MAX_ROWS", str(MAX_ROWS))
_LIST = """
import os, sys
for root, dirs, files in os.walk(sys.argv[1]):
    dirs.sort()
    for name in sorted(files):
        path = os.path.join(root, name)
        print(f"{os.path.relpath(path, '.')}\\t{os.path.getsize(path)} bytes")
"""


def app_tools() -> tuple[Tool, ...]:
    """The apps' APIs as tools."""
    from agentgym.envs.tooluse.apps import APIS

    return tuple(Tool(api.name, api.description, api.parameters) for api in APIS.values())


class Toolbox:
    """Runs tool calls in ``sandbox`` (started; its workdir is the workspace).

    Args:
        sandbox: where everything runs.
        max_output_chars: each result is cut to this many characters.
        default_timeout_s: the wall-clock limit of a code tool called without ``timeout_s``.
    """

    def __init__(self, sandbox: Sandbox, *, max_output_chars: int = 4000, default_timeout_s: float = 10.0):
        self.sandbox, self.max_output_chars = sandbox, max_output_chars
        self.default_timeout_s = default_timeout_s

    def run(self, call: ToolCall) -> str:
        """The text result of ``call`` (already checked against the tool's schema). Whatever
        the arguments hold, the answer is text for the agent (``Error: ...`` when the call
        could not run); only a failure of the sandbox itself raises (:class:`SandboxError`)."""
        problem = _argument_problem(call)
        if problem is not None:
            return f"Error: {problem}"
        args = call.arguments
        timeout = float(args.get("timeout_s", self.default_timeout_s))
        if call.name == "python":
            return self._exec(["python3", "-I", "-S", "-c", _RUN_CODE, args["code"]], timeout)
        if call.name == "bash":
            return self._exec(["bash", "-c", args["command"]], timeout)
        if call.name in ("sql", "list_files", "read_file", "write_file"):
            key = "database" if call.name == "sql" else "path"
            path = _inside(args.get(key, "."))
            if path is None:
                return f"Error: {args.get(key)!r} is outside the workspace; use a relative path."
            if call.name == "sql":
                return self._exec(["python3", "-c", _SQL, path, args["query"]], timeout, plain=True)
            if call.name == "list_files":
                return self._exec(["python3", "-c", _LIST, path], timeout, plain=True)
            if call.name == "read_file":
                return self._read(path)
            try:
                self.sandbox.write_file(path, args["content"].encode())
            except OSError as exc:  # a directory, a path through a file, a read-only place
                return f"Error: cannot write {path}: {exc.strerror or type(exc).__name__}"
            return f"wrote {len(args['content'])} characters to {path}"
        return self._app(call.name, args)

    def _exec(self, argv: list[str], timeout_s: float, plain: bool = False) -> str:
        """Run ``argv``; code tools show status and both streams, ``plain`` ones their output
        (or the error's last line)."""
        result = self.sandbox.exec(argv, timeout_s=timeout_s, max_output_bytes=4 * self.max_output_chars)
        notes = []
        if result.timed_out:
            notes.append(f"killed after {timeout_s:g} s (timeout)")
        elif result.truncated:
            notes.append("killed: its output went over the limit")
        if plain and result.returncode == 0 and not notes:
            return format_output(result.stdout, self.max_output_chars)
        if plain:
            lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
            return "Error: " + (notes[0] if notes else (lines[-1] if lines else "failed"))
        text = (
            f"exit status: {result.returncode}"
            + "".join(f" ({n})" for n in notes)
            + "\nstdout:\n"
            + result.stdout.decode("utf-8", "replace")
            + "\nstderr:\n"
            + result.stderr.decode("utf-8", "replace")
        )
        return format_output(text, self.max_output_chars)

    def _read(self, path: str) -> str:
        try:
            data = self.sandbox.read_file(path, max_bytes=4 * self.max_output_chars)
        except OSError as exc:
            return f"Error: cannot read {path}: {exc.strerror or type(exc).__name__}"
        except SandboxError as exc:  # over the size limit, or the sandbox could not read it
            return f"Error: cannot read {path}: {exc}"
        return format_output(data, self.max_output_chars)

    def _app(self, name: str, args: dict[str, Any]) -> str:
        # apps.py is stdlib-only and run as a script (isolated mode): no import of agentgym,
        # so a call costs a bare interpreter start. The sandbox sees it at the same path.
        from agentgym.envs.tooluse import apps

        result = self.sandbox.exec(
            ["python3", "-I", apps.__file__, "call", name, json.dumps(args), "--state", APP_STATE],
            timeout_s=30,
            max_output_bytes=4 * self.max_output_chars,
        )
        if result.returncode == 0:
            return format_output(result.stdout, self.max_output_chars)
        return "Error: " + format_output(result.stderr, self.max_output_chars).strip()


def _argument_problem(call: ToolCall) -> str | None:
    """Why ``call``'s arguments cannot reach a process or a file name, if they cannot: a NUL
    character or a lone surrogate in any string, too much text, a path over Linux's limits."""
    strings = list(_strings(call.arguments))
    for text in strings:
        if "\x00" in text:
            return "arguments may not contain NUL characters (\\u0000)."
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "arguments must be valid Unicode text (a lone surrogate is not)."
    size = sum(len(t) for t in strings) - (len(call.arguments["content"]) if call.name == "write_file" else 0)
    if size > MAX_ARGUMENT_CHARS:
        return (
            f"the arguments of {call.name} have {size:,} characters; the limit is "
            f"{MAX_ARGUMENT_CHARS:,} (write long text to a file with write_file)."
        )
    for key in ("path", "database"):
        path = call.arguments.get(key)
        if isinstance(path, str) and (
            len(path.encode()) > MAX_PATH_BYTES
            or any(len(part.encode()) > MAX_NAME_BYTES for part in path.split("/"))
        ):
            return f"the path is too long: at most {MAX_PATH_BYTES} bytes, and {MAX_NAME_BYTES} per name."
    return None


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included, walked without recursion (an agent's value
    may nest as deep as the JSON parser allows)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def _inside(path: str) -> str | None:
    """``path`` normalized, if it is relative and stays in the workspace."""
    if path.startswith("/"):
        return None
    norm = posixpath.normpath(path)
    return None if norm == ".." or norm.startswith("../") else norm
