"""Environment discovery: the ``agentgym.envs`` entry-point group, manifests, and ``make``.

A package publishes environments by declaring, in its ``pyproject.toml``::

    [project.entry-points."agentgym.envs"]
    mygames = "mygames.register:register"     # a function, or a module that has register()

``import agentgym`` loads every entry point of the group and calls its ``register()``, which calls
:func:`register` with *string* entry points (``"mygames.maze:MazeEnv"``), so that the env's module
and its heavy dependencies are imported only by ``make``. A plugin that fails to load produces a
:class:`PluginWarning` naming it; ``import agentgym`` itself never fails because of a plugin.

Ids live in Gymnasium's registry, so ``gymnasium.make("agentgym/Sokoban-v0")`` works once
``agentgym`` is imported (or without importing it: ``gymnasium.make("agentgym:agentgym/Sokoban-v0")``).
Each id also carries an :class:`EnvManifest` that the CLI, the sandboxes and the harness read.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import warnings
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any, Iterator

import gymnasium as gym

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvManifest",
    "PluginWarning",
    "Resources",
    "UnknownEnvError",
    "list_envs",
    "load_plugins",
    "make",
    "manifest",
    "register",
]

ENTRY_POINT_GROUP = "agentgym.envs"


class PluginWarning(UserWarning):
    """A plugin of the ``agentgym.envs`` entry-point group failed to load."""


class UnknownEnvError(gym.error.UnregisteredEnv):
    """``make`` was given an id that no loaded package registered."""


@dataclass(frozen=True)
class Resources:
    """What one instance of the env needs from its sandbox."""

    cpus: float = 1.0
    memory_mb: int = 512
    pids: int = 256
    network: bool = False
    """Whether the env needs network access inside its sandbox."""


@dataclass(frozen=True)
class EnvManifest:
    """Facts about a registered env that are needed before (or without) constructing it."""

    description: str = ""
    family: str = "misc"
    """Env family (``textgames``, ``web``, ``gui``, ``tooluse``, ``search``, ``werewolf``, ...)."""
    extras: tuple[str, ...] = ()
    """agentgym extras the env needs installed, e.g. ``("web",)``."""
    image: str | None = None
    """Container image that serves the env; ``None`` means the base image."""
    resources: Resources = field(default_factory=Resources)
    plugin: str = ""
    """Name of the entry point that registered the id (filled in by the registry)."""


_manifests: dict[str, EnvManifest] = {}
_loaded: set[tuple[str, str]] = set()
_current_plugin: str = ""


def register(
    id: str,
    entry_point: str,
    *,
    manifest: EnvManifest | None = None,
    kwargs: dict[str, Any] | None = None,
    **spec_kwargs: Any,
) -> None:
    """Register ``id`` in Gymnasium's registry together with its manifest.

    Args:
        id: Gymnasium id, ``"namespace/Name-vN"``.
        entry_point: ``"package.module:Class"``. A string, so that nothing is imported until
            ``make``; a callable is refused because it would force the import now.
        manifest: facts about the env; ``plugin`` is filled in with the registering entry point.
        kwargs: default constructor kwargs, overridable at ``make``.
        spec_kwargs: passed to :func:`gymnasium.register` (``max_episode_steps``, ...).
    """
    if not isinstance(entry_point, str) or ":" not in entry_point:
        raise TypeError(
            f"register({id!r}): entry_point must be a 'module:Class' string so that the env's "
            f"dependencies are imported lazily, got {entry_point!r}"
        )
    gym.register(id=id, entry_point=entry_point, kwargs=kwargs or {}, **spec_kwargs)
    base = manifest or EnvManifest()
    _manifests[id] = EnvManifest(
        description=base.description,
        family=base.family,
        extras=tuple(base.extras),
        image=base.image,
        resources=base.resources,
        plugin=base.plugin or _current_plugin,
    )


@contextlib.contextmanager
def _as_plugin(name: str) -> Iterator[None]:
    global _current_plugin
    previous, _current_plugin = _current_plugin, name
    try:
        yield
    finally:
        _current_plugin = previous


def _load_entry_point(ep: EntryPoint) -> None:
    target = ep.load()
    if isinstance(target, ModuleType):
        target = getattr(target, "register", None)
    if not callable(target):
        raise TypeError(f"{ep.value} is neither a register() function nor a module with one")
    with _as_plugin(ep.name):
        target()


def load_plugins() -> list[str]:
    """Load every not-yet-loaded entry point of the ``agentgym.envs`` group.

    Called by ``import agentgym``; call again after installing a plugin in a running process.
    Returns the names of the plugins that failed (each also produces a :class:`PluginWarning`).
    """
    failed = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in _loaded:
            continue
        _loaded.add((ep.name, ep.value))
        try:
            _load_entry_point(ep)
        except Exception as exc:  # a broken plugin must never break agentgym
            failed.append(ep.name)
            warnings.warn(
                f"agentgym plugin {ep.name!r} ({ep.value}) failed to load and was skipped: "
                f"{type(exc).__name__}: {exc}",
                PluginWarning,
                stacklevel=2,
            )
    return failed


def list_envs() -> dict[str, EnvManifest]:
    """Every id registered through agentgym, sorted, with its manifest."""
    return {env_id: _manifests[env_id] for env_id in sorted(_manifests)}


def _unknown(env_id: str) -> UnknownEnvError:
    known = list(gym.registry)
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(env_id.lower(), list(lowered), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(lowered[c]) for c in close)}?" if close else ""
    return UnknownEnvError(
        f"No environment {env_id!r} is registered.{hint} `agentgym list` shows every id; "
        "a plugin's ids appear once its package is installed."
    )


def manifest(env_id: str) -> EnvManifest:
    """The manifest of ``env_id`` (an empty one for plain Gymnasium ids)."""
    if env_id not in gym.registry:
        raise _unknown(env_id)
    return _manifests.get(env_id, EnvManifest())


def _check_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Raise a TypeError naming the accepted kwargs when ``kwargs`` has unknown names."""
    spec = gym.spec(env_id)
    if not isinstance(spec.entry_point, str):
        return
    module_name, _, attr = spec.entry_point.partition(":")
    creator = getattr(importlib.import_module(module_name), attr)
    params = inspect.signature(creator).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        accepted = ", ".join(n for n in params if n != "self")
        raise TypeError(f"{env_id} got unknown argument(s) {unknown}; it accepts: {accepted}")


# Keyword arguments that gymnasium.make consumes itself rather than passing to the env.
_MAKE_ONLY = frozenset(
    {"max_episode_steps", "autoreset", "apply_api_compatibility", "disable_env_checker", "render_mode"}
)


def make(env_id: str, *, sandbox: Any = None, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with agentgym's errors: unknown ids suggest close ones, unknown kwargs
    name the accepted ones (a ``TypeError``). Value errors (a negative size, ...) come from the
    env itself.

    With ``sandbox`` (``"local"``, ``"docker"``, or an
    :class:`~agentgym.sandbox.envs.EnvServerPool`) the env runs in an env server inside a
    sandbox with the limits of the env's manifest, and the result is a
    :class:`~agentgym.server.RemoteEnv` with the same observations, rewards and infos (as JSON
    values). Its ``close()`` (or its garbage collection) gives the sandbox back: a backend name
    uses a process-wide pool that closes a sandbox with its last env; interpreter exit closes
    every sandbox. Unknown kwargs raise :class:`~agentgym.server.InvalidRemoteKwargs` (a
    ``TypeError``) with the server's message; a missing image says which ``agentgym build`` to
    run (:class:`~agentgym.sandbox.SandboxError`).
    """
    if env_id not in gym.registry:
        raise _unknown(env_id)
    if sandbox is not None:
        from agentgym.sandbox.envs import make_sandboxed  # sandboxes load only when used

        return make_sandboxed(env_id, sandbox, kwargs)
    _check_kwargs(env_id, {k: v for k, v in kwargs.items() if k not in _MAKE_ONLY})
    return gym.make(env_id, **kwargs)

