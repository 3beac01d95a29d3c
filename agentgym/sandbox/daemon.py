"""Docker daemons as the docker SDK reaches them: one client per daemon and process.

A daemon is named by a docker SDK URL: ``None`` for the default (``$DOCKER_HOST``, else the
local socket), ``unix:///path/docker.sock``, ``tcp://host:2376`` (TLS from ``$DOCKER_TLS_VERIFY``
and ``$DOCKER_CERT_PATH``, as the docker CLI reads them) or ``ssh://user@host``. A daemon behind
a ``unix://`` socket (or the default one, unless ``$DOCKER_HOST`` says otherwise) runs on this
machine and shares its file system with it (:func:`shares_files`); any other is *remote*.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from agentgym.sandbox.errors import SandboxError

__all__ = ["LABEL", "docker_client", "least_loaded", "shares_files"]

LABEL = "agentgym.sandbox"
"""The label (value ``"1"``) on every sandbox container."""


def docker_client(url: str | None = None) -> Any:
    """The process-wide docker SDK client of the daemon at ``url`` (see the module
    documentation); :class:`SandboxError` with the reason if the SDK is missing or the daemon
    does not answer."""
    return _client(url)


@functools.cache
def _client(url: str | None) -> Any:
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the docker backend needs the docker SDK: pip install 'agentgym[docker]'") from exc
    environment = dict(os.environ) if url is None else {**os.environ, "DOCKER_HOST": url}
    try:
        client = docker.from_env(timeout=120, max_pool_size=64, environment=environment)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot reach the Docker daemon {url or '(default)'}: {exc}") from exc
    return client


def shares_files(url: str | None) -> bool:
    """Whether the daemon at ``url`` sees this machine's files (bind mounts of host directories
    work): a ``unix://`` socket, or the default daemon unless ``$DOCKER_HOST`` names another."""
    url = url if url is not None else os.environ.get("DOCKER_HOST")
    return url is None or url.startswith("unix://")


def least_loaded(urls: Sequence[str]) -> str:
    """Of the daemons at ``urls``, the one running the fewest sandbox containers (any owner's;
    the first of equals). Daemons that do not answer are passed over; :class:`SandboxError` if
    none answers."""
    if not urls:
        raise ValueError("no Docker hosts to choose from")
    load: dict[str, int] = {}
    errors = []
    for url in urls:
        try:
            load[url] = len(docker_client(url).api.containers(filters={"label": f"{LABEL}=1"}))
        except Exception as exc:  # the SDK's errors, connection errors of its transports
            errors.append(f"{url}: {exc}")
    if not load:
        raise SandboxError("no Docker host answers:\n" + "\n".join(errors))
    return min(load, key=load.__getitem__)
