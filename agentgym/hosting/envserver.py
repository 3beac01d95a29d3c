"""An env server inside a sandbox: start it, check it, and say why it stopped answering.

The server (``python -m agentgym.server``) listens on the sandbox's Unix socket for
:data:`SERVER_SOCKET` (``/run/agentgym/envserver.sock`` inside), which the host reaches through
:meth:`~agentgym.sandbox.Sandbox.endpoint` whether or not the sandbox has a network. ``local``
sandboxes run this interpreter (the host's Python, virtual environment and agentgym are visible
inside, read-only); ``docker`` ones the image's ``python``, with the agentgym that
``agentgym build`` baked in (rebuild the image after changing an env's code).
"""

from __future__ import annotations

import signal
import sys
import time

import httpx

from agentgym.http import http_client
from agentgym.sandbox.base import Sandbox, SandboxError, SandboxProcess
from agentgym.server.auth import TOKEN_ENV

__all__ = ["SERVER_SOCKET", "python_in", "server_answers", "server_command", "start_server", "why_gone"]

SERVER_SOCKET = "envserver"
"""The name of the sandbox socket the server listens on (see :meth:`Sandbox.socket_path`)."""


def python_in(sb: Sandbox) -> str:
    """The Python interpreter, with agentgym installed, inside ``sb``."""
    return sys.executable if sb.backend == "local" else "python"


def server_command(sb: Sandbox) -> list[str]:
    """The argv that serves env sessions on ``sb``'s socket :data:`SERVER_SOCKET`. Only the
    process that made ``sb`` reaches that socket, so the server takes any kwargs from it."""
    return [
        python_in(sb),
        "-m",
        "agentgym.server",
        "--uds",
        sb.socket_path(SERVER_SOCKET),
        "--trust-client-kwargs",
    ]


def start_server(sb: Sandbox, *, timeout_s: float = 120.0, token: str | None = None) -> SandboxProcess:
    """Spawn the env server in ``sb`` and wait (at most ``timeout_s`` seconds) until it accepts
    connections; the server's process. With ``token``, every request must carry it (for a
    socket that others reach through a relay). Raises :class:`SandboxError` (it exited first;
    its log attached) or ``TimeoutError``, after killing it."""
    process = sb.spawn(server_command(sb), env=None if token is None else {TOKEN_ENV: token})
    try:
        sb.wait_for_endpoint(SERVER_SOCKET, timeout_s=timeout_s, process=process)
    except BaseException:
        process.kill()
        raise
    return process


def server_answers(sb: Sandbox, process: SandboxProcess, *, timeout_s: float = 5.0) -> bool:
    """Whether the server ``process`` in ``sb`` runs and ``GET /health`` answers 200 within
    ``timeout_s`` seconds."""
    if process.poll() is not None:
        return False
    try:
        with http_client(sb.endpoint(SERVER_SOCKET), timeout=timeout_s, trust_env=False) as client:
            return client.get("/health").status_code == 200
    except (httpx.HTTPError, SandboxError):
        return False


def _status(status: int) -> str:
    if status > 128:
        try:
            return f"{status} (killed by {signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return str(status)


def why_gone(sb: Sandbox, process: SandboxProcess, *, wait_s: float = 1.0) -> str:
    """Why the server ``process`` in ``sb`` stopped answering: the sandbox died (and how), or the
    server exited (its status and log tail). Waits up to ``wait_s`` seconds for either to show
    (a killed container or process is reported a moment after its connections drop)."""
    deadline = time.monotonic() + wait_s
    while True:
        death = sb.death()
        if death is not None:
            return f"{death} ({sb.backend} backend)"
        status = process.poll()
        if status is not None:
            tail = process.logs(2000).decode(errors="replace").strip()
            return (
                f"the env server in sandbox {sb.id} ({sb.backend} backend) exited with status "
                f"{_status(status)}" + (f"; its log ends:\n{tail}" if tail else "")
            )
        if time.monotonic() > deadline:
            return f"sandbox {sb.id} ({sb.backend} backend) and its env server still run"
        time.sleep(0.02)
