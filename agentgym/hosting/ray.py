"""Env servers as Ray actors: rollouts on every machine of a Ray cluster.

A :class:`RayEnvServerPool` hands out :class:`~agentgym.server.RemoteEnv` sessions, as an
:class:`~agentgym.hosting.EnvServerPool` does, on env servers that run in Ray actors anywhere in
the cluster::

    with RayEnvServerPool("auto") as servers:          # the cluster of `ray start --head`
        episodes = agentgym.collect("agentgym/Sokoban-v0", policy, tasks, sandbox=servers)

Cluster: ``"local"`` starts a Ray instance on this machine for the pool and shuts it down on
:meth:`~RayEnvServerPool.close`; ``"auto"`` (the cluster ``ray start`` started, or
``$RAY_ADDRESS``) or an address (``"10.0.0.5:6379"``) attaches to a running cluster and leaves it
up. A process already connected to Ray (``ray.init``) keeps that connection: the pool uses it.

One actor is one env server: the app of ``agentgym serve``, served by the actor's process on a
TCP port of its node (the node's IP as Ray knows it; ``127.0.0.1`` with ``"local"``), with a
bearer token made for it alone and handed only to this pool's clients (every caller that can
reach Ray can run code on its nodes anyway). Without ``sandbox`` the server runs in the actor's
process: an actor that dies takes its envs with it. With ``sandbox="local"`` or ``"docker"``
the actor starts the server in a sandbox of that backend on its node (as
:class:`~agentgym.hosting.EnvServerPool` does; ``docker`` servers ask for the node resource
``docker``), the server requires the token, and the actor relays its TCP port to the sandbox's
socket. ``sandbox="auto"`` chooses the backend per node: ``docker`` on a node that offers the
``docker`` resource (it says so of its daemon), ``local`` (bubblewrap) on any other; its servers
are placed by CPU and memory alone. Clients reach a server directly, each server's sessions
through one shared connection pool; Ray carries nothing of an episode.

Placement: an env's servers ask Ray for its manifest's :class:`~agentgym.registry.Resources`
(``cpus``, fractional ones too, and ``memory_mb``) and for one unit of each custom resource its
system packages call for (:data:`PACKAGE_RESOURCES`: a desktop's ``xvfb`` needs ``desktop``,
Chromium ``chromium``), which a node offers with ``ray start --resources='{"desktop": 4}'``
(four desktop servers). Servers are spread over the nodes that fit (Ray's ``SPREAD``), so that
a lost node takes as few episodes as may be. A server hosts up to ``sessions_per_server``
sessions of one env id, and a new one starts when every server of the env is full; one that no
node has room for waits in Ray's queue until one has (``max_servers`` caps the servers of an
env instead: past it, the least loaded server takes one more session). Envs
registered in this process at run time (not by an installed plugin) are registered in their
servers too; their modules must import on the nodes (install them there, or ship them with
``runtime_env``).

Failure: a server that dies (its actor, its node) breaks only its sessions: their calls raise
:class:`~agentgym.server.EnvServerUnavailable`, which says what Ray knows of the death, and
``collect(..., retries=n)`` runs those episodes again on other servers. A dead server takes no
new sessions, its actor is released once its last session ends, and the pool starts
replacements on demand.

Lifetime: a server whose last session ended stays up for the pool's next sessions;
:meth:`~RayEnvServerPool.close` stops every server (its envs closed) and ends its actor.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import gymnasium as gym
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import SchedulingStrategyT

from agentgym.hosting.envserver import SERVER_SOCKET, start_server, why_gone
from agentgym.hosting.placing import PlacedServer, SessionPlacer
from agentgym.hosting.pool import SESSIONS_PER_SERVER
from agentgym.registry import EnvManifest, manifest, register
from agentgym.sandbox.base import Sandbox, SandboxProcess
from agentgym.sandbox.spec import Backend, SandboxSpec
from agentgym.server.app import ServerConfig, create_app
from agentgym.server.client import RemoteEnv
from agentgym.server.errors import EnvServerUnavailable
from agentgym.server.serve import GRACEFUL_SHUTDOWN_S, uvicorn_server

__all__ = [
    "DOCKER_RESOURCE",
    "PACKAGE_RESOURCES",
    "EnvServerActor",
    "Placement",
    "PlacementError",
    "RayEnvServerPool",
    "SandboxChoice",
    "ServerInfo",
    "ray_connection",
]

#: The custom Ray resource that an env's servers need, by a system package its manifest names:
#: one unit per server, on a node that offers it (``ray start --resources``).
PACKAGE_RESOURCES: Mapping[str, str] = {"xvfb": "desktop", "chromium": "chromium"}
#: The custom Ray resource a server in a ``docker`` sandbox needs: one unit, on a node whose
#: Docker daemon runs its containers (``ray start --resources='{"docker": N}'``).
DOCKER_RESOURCE = "docker"

SandboxChoice = Literal["local", "docker", "auto"]
"""Where a Ray pool's servers run: in a sandbox of one backend, or ``auto``, chosen per node."""

MIB = 1 << 20
#: Seconds a diagnosis waits for Ray to report a server's actor dead.
_DIAGNOSE_WAIT_S = 1.0
_POLL_S = 0.01
#: Actor threads: ``serve`` holds one for the server's life; ``ready`` and ``stop`` need others.
_ACTOR_THREADS = 4
#: How often a relaying actor checks that its sandboxed server still runs (seconds).
_WATCH_S = 0.5
_CHUNK = 1 << 16
_SPREAD: SchedulingStrategyT = "SPREAD"
#: A line of an actor's particulars in Ray's message of its death (``\tpid: 123``).
_PARTICULAR = re.compile(r"\t\w+: ")


class PlacementError(RuntimeError):
    """No node of the cluster offers what an env's servers need."""


@dataclass(frozen=True)
class Placement:
    """What one env server asks of its node: ``cpus`` (may be fractional), ``memory_mb``, and
    custom resources (``(name, units)`` pairs)."""

    cpus: float
    memory_mb: int
    custom: tuple[tuple[str, float], ...] = ()

    @classmethod
    def for_env(
        cls, source: EnvManifest | str, *, cpus: float | None = None, sandbox: SandboxChoice | None = None
    ) -> Placement:
        """The placement of an env's servers (a manifest or a registered id): ``cpus`` (default:
        the manifest's), the manifest's ``memory_mb``, one unit of each of its
        :data:`PACKAGE_RESOURCES`, and of :data:`DOCKER_RESOURCE` for ``sandbox="docker"``
        (not for ``"auto"``, which takes docker where a node offers it)."""
        m = manifest(source) if isinstance(source, str) else source
        custom = {r: 1.0 for p, r in PACKAGE_RESOURCES.items() if p in m.system_packages}
        if sandbox == "docker":
            custom[DOCKER_RESOURCE] = 1.0
        cpus = m.resources.cpus if cpus is None else cpus
        return cls(cpus, m.resources.memory_mb, tuple(sorted(custom.items())))

    def demand(self) -> dict[str, float]:
        """The Ray resources, by Ray's names (``memory`` in bytes)."""
        return {"CPU": self.cpus, "memory": float(self.memory_mb * MIB), **dict(self.custom)}

    def fits(self, offer: Mapping[str, float]) -> bool:
        """Whether ``offer`` (Ray resources by name) holds this placement."""
        return all(offer.get(name, 0.0) >= amount for name, amount in self.demand().items())

    def actor_options(self) -> dict[str, Any]:
        """The placement as options of a Ray actor."""
        return {"num_cpus": self.cpus, "memory": self.memory_mb * MIB, "resources": dict(self.custom)}

    def __str__(self) -> str:
        custom = "".join(f", {name} {units:g}" for name, units in self.custom)
        return f"CPU {self.cpus:g}, memory {self.memory_mb} MiB{custom}"


@dataclass(frozen=True)
class _Registration:
    """How this process registered an env, to repeat in a server that does not know it."""

    env_id: str
    entry_point: str
    kwargs: dict[str, Any]
    max_episode_steps: int | None
    manifest: EnvManifest

    @classmethod
    def of(cls, env_id: str) -> _Registration | None:
        spec = gym.spec(env_id)
        if not isinstance(spec.entry_point, str):
            return None
        return cls(env_id, spec.entry_point, dict(spec.kwargs), spec.max_episode_steps, manifest(env_id))

    def apply(self) -> None:
        if self.env_id not in gym.registry:
            register(
                self.env_id,
                self.entry_point,
                manifest=self.manifest,
                kwargs=self.kwargs,
                max_episode_steps=self.max_episode_steps,
            )


@dataclass(frozen=True)
class ServerInfo:
    """Where one env server serves: its ``url``, the Ray ``node_id`` (hex) of its node, the
    ``pid`` of its actor's process there and the ``sandbox`` backend it runs in (``None``: the
    actor's process)."""

    url: str
    node_id: str
    pid: int
    sandbox: Backend | None = None


class EnvServerActor:
    """An env server in the process of a Ray actor (:class:`RayEnvServerPool` makes them), or,
    with ``sandbox``, in a sandbox of that backend on the actor's node, its socket relayed.

    The constructor registers the env if need be (in the actor's process only), binds a TCP
    port of ``host`` (``None``: the node's IP) and, with ``sandbox``, starts the server of
    ``env_id``'s sandbox spec there (requiring ``token``; ``"auto"``: ``docker`` if the node
    offers :data:`DOCKER_RESOURCE`, else ``local``); :meth:`serve` serves until :meth:`stop`
    (the actor runs it in a thread of its own for the server's life: its result tells the pool
    that the server ended, or, as an error, that the actor died or why the sandboxed server
    stopped); :meth:`ready` waits until the server accepts connections.
    """

    def __init__(
        self,
        host: str | None,
        token: str,
        registration: _Registration | None,
        env_id: str = "",
        sandbox: SandboxChoice | None = None,
    ):
        if registration is not None:
            registration.apply()
        self.host = host or ray.util.get_node_ip_address()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._socket = socket.create_server((self.host, 0), family=family, backlog=4096)
        self._ended = threading.Event()
        self._stopping = threading.Event()
        self._server: Any = None
        self._sandbox: Sandbox | None = None
        self.backend: Backend | None = _node_backend() if sandbox == "auto" else sandbox
        if self.backend is None:
            # The pool that made the token is this server's only client: it may set any kwarg.
            self._server = uvicorn_server(create_app(ServerConfig(token=token, allowed_kwargs=None)))
            return
        self._sandbox = SandboxSpec.for_env(env_id, self.backend).create().start()
        try:
            self._process = start_server(self._sandbox, token=token)
        except BaseException:
            self._sandbox.close()
            self._socket.close()
            raise

    def serve(self) -> None:
        """Serve until :meth:`stop`; every env is closed (its sandbox too) before this returns."""
        try:
            if self._sandbox is not None:
                asyncio.run(_relay(self._socket, self._sandbox, self._process, self._stopping))
            else:
                self._server.run(sockets=[self._socket])
        finally:
            self._ended.set()
            self._socket.close()
            if self._sandbox is not None:
                self._sandbox.close()

    def ready(self) -> ServerInfo:
        """Wait until the server accepts connections; where it serves."""
        while self._server is not None and not self._server.started:
            if self._ended.wait(_POLL_S):
                raise RuntimeError("the env server stopped before it served")
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        port = self._socket.getsockname()[1]
        node = ray.get_runtime_context().get_node_id()
        return ServerInfo(f"http://{netloc}:{port}", node, os.getpid(), self.backend)

    def stop(self) -> None:
        """Stop serving: calls in flight finish (at most ``GRACEFUL_SHUTDOWN_S`` seconds), every
        env is closed, then :meth:`serve` returns."""
        if self._server is not None:
            self._server.should_exit = True
        self._stopping.set()


def _node_backend() -> Backend:
    """The sandbox backend of this node for ``sandbox="auto"``: ``docker`` where the node offers
    :data:`DOCKER_RESOURCE`, else ``local``."""
    node = ray.get_runtime_context().get_node_id()
    offers = [n["Resources"] for n in ray.nodes() if n["NodeID"] == node]
    return "docker" if offers and offers[0].get(DOCKER_RESOURCE, 0.0) > 0 else "local"


async def _relay(
    sock: socket.socket, sb: Sandbox, process: SandboxProcess, stopping: threading.Event
) -> None:
    """Join every connection to ``sock`` to the socket of the env server ``process`` in ``sb``,
    until ``stopping`` is set or the server stops (raising why). (A function, not a method of
    the actor: Ray makes an actor with a coroutine method an async actor.)"""
    path = sb.endpoint(SERVER_SOCKET).removeprefix("unix:")

    async def join(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            inner_reader, inner_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_copy(reader, inner_writer), _copy(inner_reader, writer))
        finally:
            writer.close()
            inner_writer.close()

    server = await asyncio.start_server(join, sock=sock)
    async with server:
        while not stopping.is_set():
            if process.poll() is not None or not sb.alive():
                raise RuntimeError(why_gone(sb, process))
            await asyncio.sleep(_WATCH_S)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until ``reader``'s end, then end ``writer``'s direction (or close it on errors)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def _why(exc: RayActorError) -> str:
    """What Ray says of an actor's death, without the actor's particulars (class, id, pid, ...)."""
    lines = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in lines if not _PARTICULAR.match(line))


@cache
def _actor_class() -> Any:
    return ray.remote(EnvServerActor)


@dataclass(eq=False)
class _Server(PlacedServer[tuple[str, Placement], ServerInfo]):
    """An env server of an env id and its placement (``started`` resolves to where it serves),
    its actor and its token."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    actor: Any = None
    serving: Any = None
    """The ``ObjectRef`` of the actor's ``serve`` call: ready once the server ended or died."""

    @property
    def env_id(self) -> str:
        return self.key[0]

    @property
    def placement(self) -> Placement:
        return self.key[1]


class _Connection:
    """This process's connection to Ray, shared by the users open in it: made by the first one
    that finds none, ended (a ``"local"`` instance shut down with it) by the last one's close.
    A connection made outside (``ray.init``) is used and left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._made = False
        self.local = False
        """Whether the connection is to a ``"local"`` instance this module started."""

    def acquire(self, cluster: str) -> None:
        with self._lock:
            if not ray.is_initialized():
                ray.init(address=cluster)
                self._made, self.local = True, cluster == "local"
            elif cluster not in ("local", "auto"):
                connected = ray.get_runtime_context().gcs_address
                if connected != cluster:
                    raise ValueError(
                        f"this process is connected to the Ray cluster at {connected}, not at "
                        f"{cluster!r} (one process talks to one cluster)"
                    )
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._made:
                self._made = self.local = False
                ray.shutdown()


ray_connection = _Connection()
"""This process's connection to Ray, shared by what runs on the cluster (env server pools, vLLM
replicas): ``acquire(cluster)`` before, ``release()`` after."""


class RayEnvServerPool(SessionPlacer[tuple[str, Placement], _Server]):
    """Env servers in Ray actors, handing out env sessions (see the module documentation).

    Args:
        cluster: ``"local"`` (a Ray instance on this machine, for the pool's life), ``"auto"``
            (the running cluster ``ray start`` made, or ``$RAY_ADDRESS``), or a cluster's
            address (``"host:port"``); the last two are left running by :meth:`close`.
        sessions_per_server: sessions one server hosts before the pool starts another.
        max_servers: servers of one env at most; past them, sessions share the least loaded
            (beyond ``sessions_per_server``). ``None``: as many as the sessions call for, each
            waiting, when no node has room for it, until one has (``startup_timeout_s``).
        cpus_per_server: CPUs each server asks of its node (fractions too; e.g. ``0.25`` where
            envs mostly wait); ``None``: the env's manifest's ``cpus``.
        startup_timeout_s: seconds a new server may take to be placed and to serve.
        runtime_env: Ray's ``runtime_env`` of the servers' actors (packages, environment
            variables, working directory).
        sandbox: ``None`` (servers in the actors' processes), ``"local"`` or ``"docker"``
            (each server in a sandbox of that backend on its actor's node, as
            :class:`~agentgym.hosting.EnvServerPool` runs them; envs registered at run time
            are not known there), or ``"auto"`` (per node: ``docker`` where the node offers
            :data:`DOCKER_RESOURCE`, else ``local``). ``"docker"`` servers need the node
            resource :data:`DOCKER_RESOURCE` and the env's image on the node.

    Thread-safe; :meth:`make` (blocking) and :meth:`amake` (async) may be mixed. Usable as a
    (sync) context manager; :meth:`close` stops every server. :meth:`make` raises
    :class:`PlacementError` if no node can host the env's servers, ``TimeoutError`` if a new
    server was not placed and serving within ``startup_timeout_s``, and
    :class:`~agentgym.server.EnvServerUnavailable` if its actor died twice while starting (a
    first death is retried on a new server); :meth:`usable` asks nothing (what Ray has told).
    """

    def __init__(
        self,
        cluster: str = "local",
        *,
        sessions_per_server: int = SESSIONS_PER_SERVER,
        max_servers: int | None = None,
        cpus_per_server: float | None = None,
        startup_timeout_s: float = 120.0,
        runtime_env: Mapping[str, Any] | None = None,
        sandbox: SandboxChoice | None = None,
    ) -> None:
        if sandbox not in (None, "local", "docker", "auto"):
            raise ValueError(f"unknown sandbox backend {sandbox!r}; choose 'local', 'docker', 'auto' or None")
        if not isinstance(cluster, str) or not cluster:
            raise ValueError(f"cluster must be 'local', 'auto' or a Ray address 'host:port', got {cluster!r}")
        super().__init__(sessions_per_server=sessions_per_server)
        if max_servers is not None and max_servers < 1:
            raise ValueError(f"max_servers must be >= 1, got {max_servers}")
        if cpus_per_server is not None and not cpus_per_server > 0:
            raise ValueError(f"cpus_per_server must be > 0, got {cpus_per_server}")
        self.max_servers = max_servers
        self.cpus_per_server = cpus_per_server
        self.startup_timeout_s = startup_timeout_s
        self.runtime_env = dict(runtime_env or {})
        self.sandbox: SandboxChoice | None = sandbox
        ray_connection.acquire(cluster)
        self._host = "127.0.0.1" if ray_connection.local else None

    # --- envs ------------------------------------------------------------------------------------

    def placement(self, env_id: str) -> Placement:
        """What each server of ``env_id`` asks of its node; ``UnknownEnvError`` for unknown ids."""
        return Placement.for_env(env_id, cpus=self.cpus_per_server, sandbox=self.sandbox)

    def server_of(self, env: RemoteEnv) -> ServerInfo:
        """Where the server that hosts ``env`` serves (``KeyError`` for envs not made here)."""
        return self._of_env[env].started.result()

    def servers(self) -> list[ServerInfo]:
        """The servers that serve now (started, not known dead), in start order."""
        return [s.started.result() for s in self._started(with_broken=False)]

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every server (its envs closed; at most ``GRACEFUL_SHUTDOWN_S`` seconds) and end
        its actor; then leave Ray as :class:`RayEnvServerPool`'s ``cluster`` says (idempotent).
        Envs still open then fail with :class:`~agentgym.server.EnvServerUnavailable`; closing
        them is still fine."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            servers = [s for group in self._servers.values() for s in group]
            self._servers.clear()
        try:
            started = [s for s in servers if s.serving is not None]
            for server in started:
                server.actor.stop.remote()
            if started:
                ray.wait(
                    [s.serving for s in started], num_returns=len(started), timeout=GRACEFUL_SHUTDOWN_S + 5
                )
            for server in servers:
                if server.actor is not None:
                    ray.kill(server.actor)
        finally:
            ray_connection.release()

    def __repr__(self) -> str:
        return f"RayEnvServerPool({len(self.servers())} servers, {'closed' if self.closed else 'open'})"

    # --- placing (the hooks of SessionPlacer) ----------------------------------------------------

    def _key(self, env_id: str) -> tuple[str, Placement]:
        return env_id, self.placement(env_id)

    def _server(self, key: tuple[str, Placement]) -> _Server:
        return _Server(key)

    def _choose(self, running: list[_Server]) -> _Server | None:
        """The least loaded server with room, or, with ``max_servers`` running, the least loaded."""
        with_room = [s for s in running if s.sessions < self.sessions_per_server]
        if with_room or (self.max_servers is not None and len(running) >= self.max_servers):
            return min(with_room or running, key=lambda s: s.sessions)
        return None

    def _launch(self, server: _Server) -> ServerInfo:
        """Place and start ``server``'s actor; where it serves once it does (blocking)."""
        self._check_placeable(server)
        server.actor = (
            _actor_class()
            .options(
                **server.placement.actor_options(),
                scheduling_strategy=_SPREAD,
                max_concurrency=_ACTOR_THREADS,
                max_restarts=0,
                runtime_env=self.runtime_env or None,
            )
            .remote(self._host, server.token, _Registration.of(server.env_id), server.env_id, self.sandbox)
        )
        try:
            server.serving = server.actor.serve.remote()
            return self._served(server)
        except BaseException:
            ray.kill(server.actor)
            raise

    def _served(self, server: _Server) -> ServerInfo:
        """Wait until ``server``'s actor serves; where it does."""
        try:
            return ray.get(server.actor.ready.remote(), timeout=self.startup_timeout_s)
        except RayActorError as exc:  # its node died, say: as for a server that died later
            raise EnvServerUnavailable(
                f"the env server actor of {server.env_id} died before it served: {_why(exc)}",
                url="",
            ) from exc
        except GetTimeoutError:
            raise TimeoutError(
                f"no env server of {server.env_id} served within {self.startup_timeout_s} s: "
                f"no node had room for one more ({server.placement}; lower cpus_per_server, "
                f"raise sessions_per_server or set max_servers) or it started too slowly"
            ) from None

    def _check_placeable(self, server: _Server) -> None:
        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        if not any(server.placement.fits(offer) for offer in nodes):
            custom = ", ".join(f'"{name}": {units:g}' for name, units in server.placement.custom)
            raise PlacementError(
                f"no node of the Ray cluster offers what a server of {server.env_id} needs "
                f"({server.placement}); add one with `ray start --address=<head> --num-cpus=N"
                + (f" --resources='{{{custom}}}'`" if custom else "`")
            )

    def _address(self, server: _Server) -> tuple[str, dict[str, Any]]:
        return server.started.result().url, {"token": server.token}

    def _runs(self, server: _Server) -> bool:
        """Whether the server's ``serve`` call has not ended, as far as Ray has told the owner."""
        return server.serving is None or not ray.wait([server.serving], timeout=0)[0]

    def _why_gone(self, server: _Server) -> str:
        """What Ray says of the server's actor."""
        where = f"the env server actor on Ray node {server.started.result().node_id}"
        if self.closed:
            return f"{where} was stopped: its pool is closed"
        try:
            ray.get(server.serving, timeout=_DIAGNOSE_WAIT_S)
        except GetTimeoutError:
            return f"{where} still runs"
        except RayActorError as exc:
            return f"{where} died: {_why(exc)}"
        except RayError as exc:  # serve raised: the sandboxed server stopped
            return f"{where} stopped serving: {getattr(exc, 'cause', exc)}"
        return f"{where} stopped serving"

    def _keeps(self, server: _Server) -> bool:
        # A live server stays up for the next sessions; a closed pool has stopped them all.
        return not server.broken or self.closed

    def _retire(self, server: _Server) -> None:
        """End the dead server's actor."""
        if server.actor is not None:
            ray.kill(server.actor)

    def _closed_error(self) -> Exception:
        return RuntimeError("the Ray env server pool is closed")
