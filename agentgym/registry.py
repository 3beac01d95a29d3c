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

Multi-agent envs (PettingZoo) have no registry of their own, so they live here:
:func:`register_multiagent` names an ``AECEnv`` and/or a ``ParallelEnv`` factory (string entry
points again), :func:`make_aec` and :func:`make_parallel` make them. One id may be both a
Gymnasium env (say, a single-seat wrapper of a game) and a multi-agent env; the manifest's
``kinds`` says which ways an id can be made.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import gymnasium as gym

__all__ = [
    "DEFAULT_PROMPT",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "EnvManifest",
    "FamilyPrompt",
    "PluginWarning",
    "Resources",
    "UnknownEnvError",
    "family_prompt",
    "list_envs",
    "load_entry_point",
    "load_plugins",
    "make",
    "make_aec",
    "make_parallel",
    "manifest",
    "register",
    "register_multiagent",
    "require_single",
]

ENTRY_POINT_GROUP = "agentgym.envs"

#: The ways an id can be made: ``"single"`` (a Gymnasium env, :func:`make`), ``"aec"`` and
#: ``"parallel"`` (a PettingZoo ``AECEnv`` / ``ParallelEnv``, :func:`make_aec` /
#: :func:`make_parallel`).
KINDS = ("single", "aec", "parallel")


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
    nested_sandboxes: bool = False
    """Whether the env makes sandboxes of its own inside its sandbox (one per session, for the
    agent's code): a ``docker`` sandbox then gets what bubblewrap needs to make them (see
    :attr:`agentgym.sandbox.SandboxLimits.nested`)."""


@dataclass(frozen=True)
class FamilyPrompt:
    """How agents of one env family are told to act (its envs' manifests carry it)."""

    role: str
    """The role description that opens the system message."""
    example: str = "look"
    """An example action, shown in the answer-format line."""
    action_tag: str = "action"
    """The tag actions are written in; ``""``: the whole response is the action, the env parses
    its own format (explained by ``response_format``)."""
    response_format: str = ""
    """The answer-format line for ``action_tag=""`` families."""
    answer_template: str | None = None
    """Where a final answer goes in a response (``{}`` marks it; IGPO scores the ground truth
    there); ``None``: the action format."""


#: The prompt of a family whose envs declare none.
DEFAULT_PROMPT = FamilyPrompt("You are an agent that solves tasks step by step in a text environment.")


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
    prompt: FamilyPrompt | None = None
    """How agents of the env's family are told to act (:func:`family_prompt`); ``None``: the
    family's other envs say, else :data:`DEFAULT_PROMPT`."""
    system_packages: tuple[str, ...] = ()
    """Debian packages the env needs besides Python (its family's image installs them; on a
    host, install them yourself: ``agentgym.sandbox.family_packages(family)`` lists them)."""
    resources: Resources = field(default_factory=Resources)
    client_kwargs: Mapping[str, float | None] = field(default_factory=dict)
    """The constructor kwargs that a network client of an env server may set, each with its
    ceiling: a number bounds every number in the value (``dim_room=[12, 12]`` against 12), and
    ``None`` leaves the value to the env's own checks. Only the operator may set the others
    (isolation switches, host paths and files, URLs, limits that have no ceiling):
    ``agentgym serve --allow-kwarg NAME``."""
    path_kwargs: tuple[str, ...] = ()
    """The constructor kwargs that name host files or directories. A network client may set
    one only where the operator allowed it (``agentgym serve --allow-kwarg NAME``) and gave a
    data root (``--data-root DIR``): the client's value is then a path inside that root."""
    plugin: str = ""
    """Name of the entry point that registered the id (filled in by the registry)."""
    kinds: tuple[str, ...] = ()
    """The :data:`KINDS` the id is registered as, in that order (filled in by the registry)."""


_manifests: dict[str, EnvManifest] = {}
_multiagent: dict[str, dict[str, str]] = {}
"""id -> {"aec": entry point, "parallel": entry point} (either may be missing)."""
_multiagent_kwargs: dict[str, dict[str, Any]] = {}
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
    _check_entry_point("register", id, entry_point)
    gym.register(id=id, entry_point=entry_point, kwargs=kwargs or {}, **spec_kwargs)
    _store_manifest(id, manifest, ("single",))


def register_multiagent(
    id: str,
    *,
    aec_entry_point: str | None = None,
    parallel_entry_point: str | None = None,
    manifest: EnvManifest | None = None,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Register a PettingZoo env as ``id``: an ``AECEnv`` factory, a ``ParallelEnv`` factory,
    or both (``"package.module:factory"`` strings, imported only by :func:`make_aec` /
    :func:`make_parallel`).

    ``id`` may also be a Gymnasium id (:func:`register`): its manifest then gains the
    multi-agent kinds, and ``manifest``, when given, replaces the other fields. ``kwargs`` are
    default factory kwargs, overridable at ``make_aec``/``make_parallel``.
    """
    entry_points = {
        kind: ep
        for kind, ep in (("aec", aec_entry_point), ("parallel", parallel_entry_point))
        if ep is not None
    }
    if not entry_points:
        raise TypeError(f"register_multiagent({id!r}): give aec_entry_point, parallel_entry_point or both")
    for entry_point in entry_points.values():
        _check_entry_point("register_multiagent", id, entry_point)
    _multiagent[id] = {**_multiagent.get(id, {}), **entry_points}
    _multiagent_kwargs[id] = dict(kwargs or {})
    _store_manifest(id, manifest, tuple(entry_points))


def _check_entry_point(caller: str, id: str, entry_point: Any) -> None:
    if not isinstance(entry_point, str) or ":" not in entry_point:
        raise TypeError(
            f"{caller}({id!r}): entry_point must be a 'module:Class' string so that the env's "
            f"dependencies are imported lazily, got {entry_point!r}"
        )


def _store_manifest(id: str, given: EnvManifest | None, kinds: tuple[str, ...]) -> None:
    """Record ``given`` (or keep the id's current manifest) with ``kinds`` added."""
    previous = _manifests.get(id)
    base = given or previous or EnvManifest()
    known = set(kinds) | set(previous.kinds if previous else ())
    _manifests[id] = replace(
        base,
        extras=tuple(base.extras),
        client_kwargs=dict(base.client_kwargs),
        plugin=base.plugin or _current_plugin,
        kinds=tuple(k for k in KINDS if k in known),
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
    """Every id registered through agentgym (Gymnasium and multi-agent), sorted, with its
    manifest."""
    return {env_id: _manifests[env_id] for env_id in sorted(_manifests)}


def family_prompt(family: str) -> FamilyPrompt:
    """The prompt of ``family``: the first of its registered envs (by id) that declares one,
    else :data:`DEFAULT_PROMPT`."""
    return next(
        (m.prompt for m in list_envs().values() if m.family == family and m.prompt is not None),
        DEFAULT_PROMPT,
    )


def _unknown(env_id: str, known: list[str] | None = None, what: str = "environment") -> UnknownEnvError:
    known = list(gym.registry) + list(_multiagent) if known is None else known
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(env_id.lower(), list(lowered), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(lowered[c]) for c in close)}?" if close else ""
    return UnknownEnvError(
        f"No {what} {env_id!r} is registered.{hint} `agentgym list` shows every id; "
        "a plugin's ids appear once its package is installed."
    )


def manifest(env_id: str) -> EnvManifest:
    """The manifest of ``env_id`` (a default one, of kind ``"single"``, for plain Gymnasium
    ids)."""
    if env_id not in gym.registry and env_id not in _multiagent:
        raise _unknown(env_id)
    return _manifests.get(env_id, EnvManifest(kinds=("single",)))


def _check_kwargs(env_id: str, entry_point: Any, kwargs: dict[str, Any]) -> None:
    """Raise a TypeError naming the accepted kwargs when ``kwargs`` has names that the
    ``"module:attr"`` ``entry_point`` does not accept."""
    if not isinstance(entry_point, str):
        return
    params = inspect.signature(load_entry_point(entry_point)).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        accepted = ", ".join(n for n in params if n != "self")
        raise TypeError(f"{env_id} got unknown argument(s) {unknown}; it accepts: {accepted}")


def load_entry_point(entry_point: str) -> Any:
    """The object that ``"package.module:attr"`` (``attr`` may be dotted) names, importing its
    module."""
    module_name, _, attr = entry_point.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


# Keyword arguments that gymnasium.make consumes itself rather than passing to the env.
_MAKE_ONLY = frozenset(
    {"max_episode_steps", "autoreset", "apply_api_compatibility", "disable_env_checker", "render_mode"}
)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with agentgym's errors: unknown ids suggest close ones, unknown kwargs
    name the accepted ones (a ``TypeError``). Value errors (a negative size, ...) come from the
    env itself. The env runs in this process; :func:`agentgym.make` also places it in a sandbox.
    """
    require_single(env_id)
    _check_kwargs(
        env_id, gym.spec(env_id).entry_point, {k: v for k, v in kwargs.items() if k not in _MAKE_ONLY}
    )
    return gym.make(env_id, **kwargs)


def require_single(env_id: str) -> None:
    """Raise :class:`UnknownEnvError` (naming close ids, or the multi-agent makers for a
    multi-agent-only id) unless ``env_id`` is a registered Gymnasium id."""
    if env_id not in gym.registry:
        if env_id in _multiagent:
            raise UnknownEnvError(
                f"{env_id!r} is a multi-agent environment only: make it with make_aec or make_parallel"
            )
        raise _unknown(env_id)


def make_aec(env_id: str, **kwargs: Any) -> Any:
    """A new PettingZoo ``AECEnv`` of the multi-agent id ``env_id``, with the registered
    default kwargs updated by ``kwargs``. Errors as :func:`make`'s."""
    return _make_multiagent(env_id, "aec", kwargs)


def make_parallel(env_id: str, **kwargs: Any) -> Any:
    """A new PettingZoo ``ParallelEnv`` of the multi-agent id ``env_id``, with the registered
    default kwargs updated by ``kwargs``. Errors as :func:`make`'s."""
    return _make_multiagent(env_id, "parallel", kwargs)


def _make_multiagent(env_id: str, kind: str, kwargs: dict[str, Any]) -> Any:
    entry_point = _multiagent.get(env_id, {}).get(kind)
    if entry_point is None:
        raise _unknown(
            env_id,
            [i for i, eps in _multiagent.items() if kind in eps],
            f"{'AEC' if kind == 'aec' else 'parallel'} environment",
        )
    _check_kwargs(env_id, entry_point, kwargs)
    return load_entry_point(entry_point)(**{**_multiagent_kwargs[env_id], **kwargs})
