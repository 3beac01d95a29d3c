"""Docker daemons as the docker SDK reaches them: one client per daemon and process.

A daemon is named by a docker SDK URL or a Docker context:

- ``None``: the default (``$DOCKER_HOST``, else the local socket);
- ``unix:///path/docker.sock``, ``tcp://host:2376`` (TLS from ``$DOCKER_TLS_VERIFY`` and
  ``$DOCKER_CERT_PATH``, as the docker CLI reads them, for every such URL) or
  ``ssh://user@host[:port]`` (the docker SDK's SSH client, paramiko: keys, ``~/.ssh/config``'s
  ``IdentityFile`` and ``~/.ssh/known_hosts`` as ssh reads them; an unknown host key is refused;
  the remote user's docker CLI must reach the daemon, ``docker system dial-stdio``);
- the name of a Docker context (``docker context create box2 --docker
  host=tcp://box2:2376,ca=ca.pem,cert=cert.pem,key=key.pem``): its endpoint with its own TLS
  files, so that each host has its own certificates. The contexts are read from the docker
  CLI's store (``$DOCKER_CONFIG``, else ``~/.docker``).

A daemon behind a ``unix://`` socket (or the default one, unless ``$DOCKER_HOST`` says
otherwise) runs on this machine and shares its file system with it (:func:`shares_files`); any
other is *remote*.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import select
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentgym.sandbox.errors import SandboxError

__all__ = ["LABEL", "attached", "docker_client", "least_loaded", "shares_files"]

LABEL = "agentgym.sandbox"
"""The label (value ``"1"``) on every sandbox container."""

_CHUNK = 1 << 16


def docker_client(url: str | None = None) -> Any:
    """The process-wide docker SDK client of the daemon at ``url`` (see the module
    documentation); :class:`SandboxError` with the reason if the SDK is missing or the daemon
    does not answer."""
    return _client(url)


@functools.cache
def _client(url: str | None) -> Any:
    try:
        client_class = _client_class()
    except ImportError as exc:
        raise SandboxError("the docker backend needs the docker SDK: pip install 'agentgym[docker]'") from exc
    try:
        if url is not None and "://" not in url:
            base_url, tls = _context(url)
            client = client_class(base_url=base_url, tls=tls, timeout=120, max_pool_size=64)
        else:
            environment = dict(os.environ) if url is None else {**os.environ, "DOCKER_HOST": url}
            client = client_class.from_env(timeout=120, max_pool_size=64, environment=environment)
        client.ping()
    except SandboxError:
        raise
    except Exception as exc:  # the SDK's errors, its transports' (requests, SSH, sockets)
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


@contextlib.contextmanager
def attached(stream: Any) -> Iterator[socket.socket]:
    """The socket of an attached stream (``exec_start(..., socket=True)``, ``attach_socket``),
    shut down and closed with the stream at the end (shut down, since the SDK's response still
    holds it: otherwise dockerd blocks copying output nobody reads).

    ``unix://`` and ``tcp://`` daemons' streams are sockets. An ``ssh://`` daemon's is an SSH
    channel, which is never ready to write and never raises ``BlockingIOError``: it is joined by
    a thread to one end of a socket pair (:class:`_ChannelJoin`), and that end is what this
    gives."""
    sock = getattr(stream, "_sock", stream)
    if not isinstance(sock, socket.socket):
        join = _ChannelJoin(sock)
        try:
            yield join.socket
        finally:
            join.close()
        return
    try:
        yield sock
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        stream.close()


class _ChannelJoin:
    """An SSH channel joined to :attr:`socket` by a thread that copies both ways and passes on
    each direction's end (``shutdown`` of writing). :meth:`close` ends it, what was sent before
    it still passed on to the channel."""

    _FLUSH_S = 1.0

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.socket, self._theirs = socket.socketpair()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._copy, name="ssh channel", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        channel, sock = self.channel, self._theirs
        watched = [channel, sock]
        try:
            while watched:
                for ready in select.select(watched, [], [])[0]:
                    other = sock if ready is channel else channel
                    if data := ready.recv(_CHUNK):
                        other.sendall(data)
                    elif ready is sock and self._closing.is_set():
                        return
                    else:
                        watched.remove(ready)
                        other.shutdown(socket.SHUT_WR)
        except (OSError, ValueError, EOFError):  # a side closed (ValueError: select on a closed one)
            pass
        finally:
            sock.close()
            channel.close()

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        self._thread.join(self._FLUSH_S)  # it passes on what is left, then closes the channel
        self.channel.close()
