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
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentgym.sandbox.errors import SandboxError

__all__ = ["LABEL", "attached", "docker_client", "least_loaded", "reason", "shares_files", "transport_errors"]

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
        raise SandboxError(f"cannot reach the Docker daemon {url or '(default)'}: {reason(exc)}") from exc
    return client


@functools.cache
def transport_errors() -> tuple[type[Exception], ...]:
    """What a call to a daemon may raise besides the docker SDK's own errors: its transports'
    (requests' for ``unix://`` and ``tcp://``; paramiko's for ``ssh://``, such as a channel the
    SSH server refuses beyond its ``MaxSessions``) and the sockets' ``OSError``."""
    import requests

    errors: tuple[type[Exception], ...] = (requests.RequestException, OSError)
    try:
        import paramiko
    except ImportError:
        return errors
    return (*errors, paramiko.SSHException)


def reason(exc: BaseException) -> str:
    """``exc`` for an error message, with the remedy where one is known: an SSH server that
    refuses to open one more channel is at its ``MaxSessions``."""
    if type(exc).__name__ == "ChannelException":  # paramiko's, and only an ssh:// URL gets one
        return f"{exc!r}: the SSH server refused one more session (raise MaxSessions in its sshd_config)"
    return str(exc)


@functools.cache
def _client_class() -> Any:
    """docker-py's ``DockerClient``, but verifying a TLS daemon with the CA it was given
    (requests takes ``$REQUESTS_CA_BUNDLE``, often set, over a session's CA: psf/requests#3829)
    and connecting an ``ssh://`` daemon again once its connection ended (:func:`_reconnect_ssh`,
    before each request)."""
    import docker

    class APIClient(docker.APIClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # one per daemon, so that a dead host holds up no other; set first, since the SDK's
            # constructor already sends a request (the version)
            self._reconnecting = threading.Lock()
            super().__init__(*args, **kwargs)

        def get_adapter(self, url: str) -> Any:
            adapter = super().get_adapter(url)
            _reconnect_ssh(adapter, self._reconnecting)
            return adapter

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


def _reconnect_ssh(adapter: Any, lock: threading.Lock) -> None:
    """Connect an ``ssh://`` daemon's adapter again if its SSH connection has ended (a network
    that failed, an SSH server restarted): docker-py connects once and then fails every call
    with "SSH session not active". Its connection pools, bound to the old connection, go."""
    ssh = getattr(adapter, "ssh_client", None)  # None: not SSH (or the `ssh` binary's transport)
    if ssh is None or _active(ssh):
        return
    with lock:
        if not _active(ssh):
            ssh.connect(**adapter.ssh_params)
            adapter.pools.clear()


def _active(ssh: Any) -> bool:
    transport = ssh.get_transport()
    return transport is not None and transport.is_active()


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
    """An SSH channel joined to :attr:`socket` by two threads, one per direction, each passing
    on its direction's end (``shutdown`` of writing); blocking sends in one direction never
    hold up the other. :meth:`close` ends both: what the caller sent before it is passed on
    first (waiting at most ``_FLUSH_S`` for a channel that does not take it), then the channel
    is closed. The channel's stderr (the remote ``docker system dial-stdio``'s warnings) is
    not read."""

    _FLUSH_S = 1.0

    def __init__(self, channel: Any) -> None:
        channel.settimeout(None)  # an idle connection waits, as a socket's does
        self.channel = channel
        self.socket, self._theirs = socket.socketpair()
        self._closing = threading.Event()
        self._down = threading.Thread(target=self._copy_down, name="ssh channel down", daemon=True)
        self._up = threading.Thread(target=self._copy_up, name="ssh channel up", daemon=True)
        self._down.start()
        self._up.start()

    def _copy_down(self) -> None:
        """The channel's bytes to the socket, then the channel's end."""
        with contextlib.suppress(Exception):  # either side closed: paramiko's errors and OSError
            while data := self.channel.recv(_CHUNK):
                self._theirs.sendall(data)
            self._theirs.shutdown(socket.SHUT_WR)

    def _copy_up(self) -> None:
        """The socket's bytes to the channel, then the end of the caller's sending, or, once
        the caller closed, the channel."""
        with contextlib.suppress(Exception):
            while data := self._theirs.recv(_CHUNK):
                self.channel.sendall(data)
            if not self._closing.is_set():
                self.channel.shutdown_write()
                return
        self.channel.close()

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        self._up.join(self._FLUSH_S)
        self.channel.close()
        self._down.join(self._FLUSH_S)
        self._theirs.close()
