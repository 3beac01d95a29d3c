"""Sandboxes: where env servers and agent-written code run, isolated from the host.

- :class:`Sandbox`: the contract (start, exec, spawn, files, endpoint, close); backends
  :class:`LocalSandbox` (bubblewrap, no daemon) and :class:`DockerSandbox`.
- :class:`SandboxLimits` (and :func:`limits_for` a registered env), :class:`SandboxSpec`,
  :func:`create_sandbox`, :func:`image_for`.
- :class:`SandboxPool`: warm sandboxes, recycled and health-checked.
- :func:`http_client` / :func:`async_http_client`: httpx clients for :meth:`Sandbox.endpoint`.
- :func:`gc` (``agentgym sandbox gc``) and :func:`build_images` (``agentgym build``).
- Docker daemons by URL (:mod:`agentgym.sandbox.daemon`): ``SandboxSpec(hosts=...)`` spreads
  sandboxes over several; on a remote one a server's socket is forwarded over the Docker API
  (:mod:`agentgym.sandbox.forward`).

Env servers placed in sandboxes (``agentgym.make(env_id, sandbox=...)``) are one layer up, in
:mod:`agentgym.hosting`.

Reaching a server inside: it listens on the Unix socket ``sb.socket_path(name)`` (inside path),
the host connects to ``sb.endpoint(name)`` (``"unix:<host path>"``)::

    with LocalSandbox() as sb:
        proc = sb.spawn(["python", "-m", "agentgym.server", "--uds", sb.socket_path("web")])
        with http_client(sb.wait_for_endpoint("web", process=proc)) as client:
            client.get("/health")
"""

from agentgym.sandbox.base import (
    ExecError,
    ExecResult,
    Sandbox,
    SandboxDeadError,
    SandboxError,
    SandboxProcess,
    SandboxWarning,
)
from agentgym.sandbox.client import async_http_client, http_client, parse_endpoint
from agentgym.sandbox.docker import DockerSandbox, remove_containers
from agentgym.sandbox.gc import GcReport, gc
from agentgym.sandbox.images import (
    DEFAULT_BASE_IMAGE,
    OFFLINE_BASE_IMAGE,
    build_base_image,
    build_images,
    family_packages,
    image_families,
)
from agentgym.sandbox.limits import SandboxLimits, limits_for
from agentgym.sandbox.local import LocalSandbox
from agentgym.sandbox.pool import SandboxPool
from agentgym.sandbox.spec import SandboxSpec, create_sandbox, image_for

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "OFFLINE_BASE_IMAGE",
    "DockerSandbox",
    "ExecError",
    "ExecResult",
    "GcReport",
    "LocalSandbox",
    "Sandbox",
    "SandboxDeadError",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxProcess",
    "SandboxSpec",
    "SandboxWarning",
    "async_http_client",
    "build_base_image",
    "build_images",
    "create_sandbox",
    "family_packages",
    "gc",
    "http_client",
    "image_families",
    "image_for",
    "limits_for",
    "parse_endpoint",
    "remove_containers",
]
