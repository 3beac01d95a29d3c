"""The Docker daemon as the docker SDK reaches it: one client per process."""

from __future__ import annotations

import functools
from typing import Any

from agentgym.sandbox.errors import SandboxError

__all__ = ["docker_client"]


@functools.lru_cache(maxsize=1)
def docker_client() -> Any:
    """The process-wide docker SDK client (``docker.from_env``); :class:`SandboxError` with the
    reason if the SDK is missing or the daemon does not answer."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the docker backend needs the docker SDK: pip install 'agentgym[docker]'") from exc
    try:
        client = docker.from_env(timeout=120, max_pool_size=64)
        client.ping()
    except docker.errors.DockerException as exc:
        docker_client.cache_clear()
        raise SandboxError(f"cannot reach the Docker daemon: {exc}") from exc
    return client
