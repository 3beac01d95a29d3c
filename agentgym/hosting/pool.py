"""Env servers in sandboxes, handing out sessions: ``agentgym.make(env_id, sandbox=...)``.

An :class:`EnvServerPool` keeps env servers in sandboxes of one backend and hands out
:class:`~agentgym.server.RemoteEnv` sessions on them::

    with EnvServerPool("docker", warm=1) as servers:
        env = servers.make("agentgym/Sokoban-v0", {"num_boxes": 2})
        obs, info = env.reset(seed=0)
        env.close()

Placement: every env id maps to a :class:`~agentgym.sandbox.SandboxSpec` (its manifest's limits
and, for ``docker``, its image), so envs of one family share servers. A server (one sandbox) hosts
up to ``sessions_per_server`` sessions; a new server is started (or taken warm from the pool)
only when every server of the spec is full. The default of :data:`SESSIONS_PER_SERVER` was
chosen by measurement (``benchmarks/sandbox.py``, README "Sandboxes and the env server"): one
server serves many sessions at the same per-step latency, while every extra sandbox costs a
Python process (about 55 MB resident) and a start (0.4 s local, 0.6 s docker); one dead sandbox
takes down at most that many episodes. A server steps its envs on one core: long runs of
CPU-heavy envs on many cores may want fewer sessions per server.

Lifetime (no leaks): a sandbox is leased from a :class:`~agentgym.sandbox.SandboxPool` while it
hosts sessions. An env's ``close()``/``aclose()``, or its garbage collection, ends its session;
when a server's last session ends, its sandbox goes back to the pool, which keeps it warm (server
running) if it has room (``warm``), else closes it. At interpreter exit the sandboxes' own exit
hooks close every sandbox (and remove every container); :meth:`EnvServerPool.close` closes all
of its sandboxes at once. A server found dead (a call could not reach it) takes no new sessions,
its errors say why (:func:`~agentgym.hosting.envserver.why_gone`), and its sandbox is closed,
not recycled, once its last session ends; the pool starts replacements on demand.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentgym.hosting.envserver import SERVER_SOCKET, server_answers, start_server, why_gone
from agentgym.hosting.placing import PlacedServer, SessionPlacer
from agentgym.http import parse_endpoint
from agentgym.sandbox.base import Sandbox, SandboxError, SandboxProcess
from agentgym.sandbox.images import warn_if_stale
from agentgym.sandbox.pool import SandboxPool
from agentgym.sandbox.spec import Backend, SandboxSpec
from agentgym.server.client import RemoteEnv

__all__ = ["SESSIONS_PER_SERVER", "EnvServerPool", "ServerPool", "default_pool", "make_sandboxed"]

SESSIONS_PER_SERVER = 16
"""Default sessions one sandboxed env server hosts (see the module documentation)."""


class ServerPool(Protocol):
    """Env servers handing out env sessions: what ``collect(..., sandbox=...)`` and
    ``agentgym.make(env_id, sandbox=...)`` take (:class:`EnvServerPool`, and
    :class:`~agentgym.hosting.ray.RayEnvServerPool` across a Ray cluster)."""

    def make(
        self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, timeout: float | None = 120.0
    ) -> RemoteEnv:
        """A new env session on a server for ``env_id``."""

    async def amake(
        self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, timeout: float | None = 120.0
    ) -> RemoteEnv:
        """Async :meth:`make`."""

    def usable(self, env: RemoteEnv) -> bool:
        """Whether ``env``'s server still runs (a dead one takes no new sessions)."""

    def close(self) -> None:
        """Stop every server of the pool."""

    async def aclose(self) -> None:
        """Async :meth:`close`."""


_Server = PlacedServer[SandboxSpec, Sandbox]
"""An env server in a sandbox leased for its spec (``started`` resolves to the sandbox)."""


class EnvServerPool(SessionPlacer[SandboxSpec, _Server]):
    """Env servers in sandboxes of ``backend``, handing out env sessions.

    Args:
        backend: ``"local"`` (bubblewrap) or ``"docker"`` (the env's image,
            :func:`~agentgym.sandbox.image_for`; build it with ``agentgym build <family>``; an
            image built from other sources than this process runs gives a
            :class:`~agentgym.sandbox.SandboxWarning`).
        sessions_per_server: sessions one server (one sandbox) hosts at most.
        warm: sandboxes per spec kept started, server running, beyond those in use.
        idle_s: seconds after which unused warm sandboxes are closed.
        startup_timeout_s: seconds a new server may take to accept connections.
        session: ``agentgym.session`` label of the containers (docker).
        docker_hosts: Docker daemons to spread the sandboxes over (docker; URLs, see
            :mod:`agentgym.sandbox.daemon`): each new one goes to the least-loaded. On a remote
            daemon the server is reached over the Docker API
            (:class:`~agentgym.sandbox.forward.SocketForward`). Default: the default daemon.

    Thread-safe; :meth:`make` (blocking) and :meth:`amake` (async) may be mixed. Usable as a
    (sync) context manager; :meth:`close` closes every sandbox, in use or warm. :meth:`make`
    raises :class:`~agentgym.sandbox.SandboxError` if no sandbox can start; :meth:`usable` is
    cheap (no request; docker: two inspect calls).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        sessions_per_server: int = SESSIONS_PER_SERVER,
        warm: int = 0,
        idle_s: float = 300.0,
        startup_timeout_s: float = 120.0,
        session: str | None = None,
        docker_hosts: Sequence[str] = (),
    ) -> None:
        if backend not in ("local", "docker"):
            raise ValueError(f"unknown sandbox backend {backend!r}; choose 'local' or 'docker'")
        if docker_hosts and backend != "docker":
            raise ValueError(f"docker_hosts are for the docker backend, not {backend!r}")
        super().__init__(sessions_per_server=sessions_per_server)
        self.backend: Backend = backend
        self.docker_hosts = tuple(docker_hosts)
        self.startup_timeout_s = startup_timeout_s
        self._processes: weakref.WeakKeyDictionary[Sandbox, SandboxProcess]
        self._processes = weakref.WeakKeyDictionary()
        # reset=False: a released sandbox keeps its server (whose sessions were deleted).
        self._sandboxes = SandboxPool(
            warm, idle_s=idle_s, reset=False, setup=self._setup, health_check=self._healthy, session=session
        )

    # --- envs ------------------------------------------------------------------------------------

    def spec(self, env_id: str) -> SandboxSpec:
        """The sandbox spec that serves ``env_id``; ``UnknownEnvError`` for unknown ids."""
        return SandboxSpec.for_env(env_id, self.backend, hosts=self.docker_hosts)

    def sandbox_of(self, env: RemoteEnv) -> Sandbox:
        """The sandbox whose server hosts ``env`` (``KeyError`` for envs not made here)."""
        return self._of_env[env].started.result()

    def server_process(self, env: RemoteEnv) -> SandboxProcess:
        """The env server process that hosts ``env``."""
        return self._processes[self.sandbox_of(env)]

    def sandboxes(self) -> list[Sandbox]:
        """The sandboxes hosting sessions now (started ones only)."""
        return [s.started.result() for s in self._started(with_broken=True)]

    def prewarm(self, env_id: str, *, wait_s: float | None = None) -> None:
        """Start ``warm`` servers for ``env_id`` now; with ``wait_s``, wait until they serve."""
        self._sandboxes.prewarm(self.spec(env_id), wait_s=wait_s)

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every sandbox of the pool (idempotent). Envs still open then fail with
        :class:`~agentgym.server.EnvServerUnavailable`; closing them is still fine."""
        with self._lock:
            self.closed = True
        self._sandboxes.close()

    def __repr__(self) -> str:
        return (
            f"EnvServerPool({self.backend!r}, {len(self.sandboxes())} servers, "
            f"{'closed' if self.closed else 'open'})"
        )

    # --- the sandboxes' servers ------------------------------------------------------------------

    def _setup(self, sb: Sandbox) -> None:
        process = start_server(sb, timeout_s=self.startup_timeout_s)
        with self._lock:
            self._processes[sb] = process

    def _healthy(self, sb: Sandbox) -> bool:
        process = self._processes.get(sb)
        return process is not None and server_answers(sb, process)

    # --- placing (the hooks of SessionPlacer) ----------------------------------------------------

    def _key(self, env_id: str) -> SandboxSpec:
        return self.spec(env_id)

    def _server(self, key: SandboxSpec) -> _Server:
        return _Server(key)

    def _launch(self, server: _Server) -> Sandbox:
        """Acquire the sandbox of a new server (blocking: it may start one)."""
        if server.key.image is not None:
            warn_if_stale(server.key.image)
        return self._sandboxes.acquire(server.key)

    def _address(self, server: _Server) -> tuple[str, dict[str, Any]]:
        url, uds = parse_endpoint(server.started.result().endpoint(SERVER_SOCKET))
        return url, {"uds": uds}

    def _runs(self, server: _Server) -> bool:
        sb = server.started.result()
        return sb.alive() and self._processes[sb].poll() is None

    def _why_gone(self, server: _Server) -> str:
        sb = server.started.result()
        return why_gone(sb, self._processes[sb])

    def _retire(self, server: _Server) -> None:
        """Give the server's sandbox back to the sandbox pool (once leased)."""
        server.started.add_done_callback(lambda _: self._give_back(server))

    def _give_back(self, server: _Server) -> None:
        if server.started.exception() is not None:
            return
        with self._lock:  # once closed, the sandbox pool has closed (and forgotten) its leases
            if not self.closed:
                self._sandboxes.release(server.started.result(), healthy=not server.broken)

    def _closed_error(self) -> Exception:
        return SandboxError("the env server pool is closed")


_defaults: dict[str, EnvServerPool] = {}
_defaults_lock = threading.Lock()


def default_pool(backend: Backend) -> EnvServerPool:
    """The process-wide pool behind ``agentgym.make(env_id, sandbox=backend)``. It keeps no warm
    sandboxes: a sandbox lives while it hosts envs, and the close of its last env closes it."""
    with _defaults_lock:
        pool = _defaults.get(backend)
        if pool is None or pool.closed:
            pool = _defaults[backend] = EnvServerPool(backend)
        return pool


def make_sandboxed(env_id: str, sandbox: Backend | ServerPool, kwargs: Mapping[str, Any]) -> RemoteEnv:
    """``agentgym.make(env_id, sandbox=..., **kwargs)``: a session on a server of ``sandbox``
    (a :class:`ServerPool`, or a backend name for its :func:`default_pool`)."""
    pool = default_pool(sandbox) if isinstance(sandbox, str) else sandbox
    return pool.make(env_id, kwargs)
