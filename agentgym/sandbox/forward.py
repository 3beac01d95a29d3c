"""A Unix socket inside a container, reached through a Unix socket on this machine over the
Docker API (as ``kubectl port-forward`` does over Kubernetes'): how the host reaches a server in
a sandbox on a remote Docker host, whose container has no network and shares no directory with
this machine.

Every connection accepted on the local socket becomes one attached ``docker exec`` of
:data:`RELAY` (the image's ``python``) in the container: it connects to the inside socket and
copies bytes both ways, the exec's stdin carrying what the client sends and its stdout what the
server answers. The connection's traffic goes wherever the Docker API goes (TLS or SSH to a
remote daemon); nothing is published on any network. The client closing its side closes the
relay's stdin, which half-closes the inside connection (not over TLS, which cannot half-close:
there the connection lasts until the server or the client closes it); the server closing its
side ends the exec, which closes the local connection.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgym.sandbox.daemon import attached

__all__ = ["RELAY", "SocketForward", "frames"]

_CHUNK = 1 << 16

RELAY = r"""
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def up():
    while data := os.read(0, 65536):
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := s.recv(65536):
    os.write(1, data)
"""
"""The program (``python -c RELAY <inside socket>``) that joins the exec's stdio to the socket."""


def frames(buf: bytearray) -> Iterator[tuple[int, bytes]]:
    """Pop the complete frames of Docker's multiplexed attach stream from the front of ``buf``:
    ``(stream, payload)`` with stream 1 for stdout and 2 for stderr (each frame: 8 bytes of
    header, stream, 0, 0, 0 and the big-endian length, then the payload)."""
    while len(buf) >= 8:
        size = struct.unpack(">I", buf[4:8])[0]
        if len(buf) < 8 + size:
            return
        stream, payload = buf[0], bytes(buf[8 : 8 + size])
        del buf[: 8 + size]
        yield stream, payload


class SocketForward:
    """Forwards connections to the Unix socket ``local`` (made here, mode 0600) to the socket
    ``inside`` of the container ``container_id``, through ``api`` (a docker SDK ``APIClient``).

    :meth:`start` listens and serves from a thread; :meth:`close` (idempotent) stops listening,
    ends every forwarded connection and removes ``local``. One thread per open connection.
    """

    def __init__(self, api: Any, container_id: str, inside: str, local: Path, *, user: str | None = None):
        self.api, self.container_id, self.inside, self.local = api, container_id, inside, local
        self.user = user
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> SocketForward:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.local.unlink(missing_ok=True)
        listener.bind(str(self.local))
        self.local.chmod(0o600)
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, name=f"forward {self.inside}", daemon=True).start()
        return self

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            listener, connections = self._listener, list(self._open)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            listener.close()
        for conn in connections:
            _close(conn)
        self.local.unlink(missing_ok=True)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            exec_id = self.api.exec_create(
                self.container_id,
                ["python", "-c", RELAY, self.inside],
                stdin=True,
                stdout=True,
                stderr=False,
                user=self.user or "",
            )["Id"]
            stream = self.api.exec_start(exec_id, socket=True)
        except Exception:  # the container is gone or the daemon does not answer: drop the client
            _close(client)
            return
        with attached(stream) as remote:
            with self._lock:
                if self._closed:
                    _close(client)
                    return
                self._open |= {client, remote}
            try:
                _pump(client, remote)
            except (OSError, ValueError):  # ValueError: select on a socket that close() closed
                pass
            finally:
                _close(client)
                with self._lock:
                    self._open -= {client, remote}


def _pump(client: socket.socket, remote: socket.socket) -> None:
    """Copy ``client``'s bytes to the exec's stdin and the exec's stdout frames to ``client``,
    until either side ends, in one thread: a TLS socket (a daemon reached over TLS) must not be
    read and written from two threads at once, and it cannot be half-closed without ending TLS,
    so only a plain one passes on the client's end of sending (a TLS one goes on until the
    server or the client closes)."""
    tls = remote if isinstance(remote, ssl.SSLSocket) else None
    watched, buf = [client, remote], bytearray()
    while True:
        # what TLS decrypted already is read first: select sees only the bytes still to come
        ready = [remote] if tls is not None and tls.pending() else select.select(watched, [], [])[0]
        if remote in ready:
            data = remote.recv(_CHUNK)
            if not data:
                return
            buf += data
            for kind, payload in frames(buf):
                if kind == 1:
                    client.sendall(payload)
        if client in ready:
            if data := client.recv(_CHUNK):
                remote.sendall(data)
            else:
                watched.remove(client)
                if tls is None:
                    remote.shutdown(socket.SHUT_WR)  # the relay's stdin ends


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
