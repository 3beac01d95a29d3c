"""Docker daemons as the docker SDK reaches them: one client per daemon and process.

A daemon is named by a docker SDK URL or a Docker context:

- ``None``: the default (``$DOCKER_HOST``, else the local socket);
- ``unix:///path/docker.sock``, ``tcp://host:2376`` (TLS from ``$DOCKER_TLS_VERIFY`` and
  ``$DOCKER_CERT_PATH``, as the docker CLI reads them, for every such URL) or ``ssh://user@host``;
- the name of a Docker context (``docker context create box2 --docker
  host=tcp://box2:2376,ca=ca.pem,cert=cert.pem,key=key.pem``): its endpoint with its own TLS
  files, so that each host has its own certificates. The contexts are read from the docker
  CLI's store (``$DOCKER_CONFIG``, else ``~/.docker``).

A daemon behind a ``unix://`` socket (or the default one, unless ``$DOCKER_HOST`` says
otherwise) runs on this machine and shares its file system with it (:func:`shares_files`); any
other is *remote*.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
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
    client_class = _client_class()
    try:
        if url is not None and "://" not in url:
            base_url, tls = _context(url)
            client = client_class(base_url=base_url, tls=tls, timeout=120, max_pool_size=64)
        else:
            environment = dict(os.environ) if url is None else {**os.environ, "DOCKER_HOST": url}
            client = client_class.from_env(timeout=120, max_pool_size=64, environment=environment)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot reach the Docker daemon {url or '(default)'}: {exc}") from exc
    return client


@functools.cache
def _client_class() -> Any:
    """docker-py's ``DockerClient``, but verifying a TLS daemon with the CA it was given:
    requests takes ``$REQUESTS_CA_BUNDLE`` (often set) over a session's CA (psf/requests#3829)."""
    import docker

    class APIClient(docker.APIClient):
        def merge_environment_settings(
            self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
        ) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    class DockerClient(docker.DockerClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # as docker-py's, with the class above
            self.api = APIClient(*args, **kwargs)

    return DockerClient


def _context(name: str) -> tuple[str, Any]:
    """The endpoint URL and TLS configuration (or None) of the Docker context ``name``, from the
    docker CLI's store (docker-py's own reader finds it only beside a ``config.json``)."""
    from docker.tls import TLSConfig

    store = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "contexts"
    key = hashlib.sha256(name.encode()).hexdigest()
    try:
        endpoint = json.loads((store / "meta" / key / "meta.json").read_text())["Endpoints"]["docker"]
    except (OSError, ValueError, KeyError) as exc:
        raise SandboxError(f"no Docker context {name!r} in {store} (see `docker context ls`): {exc}") from exc
    files = store / "tls" / key / "docker"
    if not files.is_dir():
        return endpoint["Host"], None
    ca, cert, client_key = (files / f"{n}.pem" for n in ("ca", "cert", "key"))
    tls = TLSConfig(
        client_cert=(str(cert), str(client_key)) if cert.is_file() else None,
        ca_cert=str(ca) if ca.is_file() else None,
        verify=not endpoint.get("SkipTLSVerify", False),
    )
    return endpoint["Host"], tls


def shares_files(url: str | None) -> bool:
    """Whether the daemon at ``url`` sees this machine's files (bind mounts of host directories
    work): a ``unix://`` socket, or the default daemon unless ``$DOCKER_HOST`` names another (a
    context's endpoint counts as its URL)."""
    url = url if url is not None else os.environ.get("DOCKER_HOST")
    if url is not None and "://" not in url:
        url = _context(url)[0]
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
