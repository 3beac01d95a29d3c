"""What an env server can host, and how a session's env is made.

A session hosts one env of one of two kinds:

* ``"single"``: a Gymnasium env, made with :func:`agentgym.make` from an id in Gymnasium's
  registry (every agentgym env, every plugin's, any plain Gymnasium id). ``make``'s wrappers
  (``TimeLimit`` from ``max_episode_steps``, order enforcing) stay on, except Gymnasium's passive
  env checker, which is off unless the kwargs say ``disable_env_checker: false``: its warnings
  would reach no one, and after a ``reset`` that raised (bad options), its first ``step``
  fails with ``TypeError: cannot unpack non-iterable NoneType`` (Gymnasium 1.x).
* ``"parallel"``: a PettingZoo ``ParallelEnv``, made with :func:`agentgym.registry.make_parallel`
  from an id that a plugin's ``register()`` registered with
  :func:`agentgym.registry.register_multiagent` (or :func:`register_parallel`, its shorthand).
  The factory is imported and called with the session's kwargs when a session needs it.

A server started with ``allow_entry_points`` (``agentgym serve --allow-entry-points``) also
accepts ``"package.module:factory"`` as an env id: the factory is imported and called with the
kwargs, and the kind is what it returns. That runs whatever code the client names, so it is off
by default and meant for tests and trusted callers only.

Clients are hostile until the operator says otherwise: a session's kwargs may hold only the
names that the env's manifest declares safe for clients
(:attr:`~agentgym.registry.EnvManifest.client_kwargs`, numbers within their ceilings) and those
the operator allowed (``agentgym serve --allow-kwarg NAME``); anything else answers 403
``kwarg_not_allowed`` naming the kwarg, before the env is made. A server whose only client is
its operator (a sandbox pool's, over its private socket) is started with ``--trust-client-kwargs``.

One id may be registered as both kinds (a single-seat Gymnasium wrapper and a parallel env of the
same game); the session request's ``kind`` picks one, and without ``kind`` the Gymnasium id wins.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from agentgym.registry import (
    UnknownEnvError,
    list_envs,
    load_entry_point,
    make,
    make_parallel,
    manifest,
    register_multiagent,
)
from agentgym.server.errors import ApiError

__all__ = ["KINDS", "Kind", "check_client_kwargs", "hostable_envs", "make_env", "register_parallel"]

Kind = Literal["single", "parallel"]
KINDS: tuple[Kind, ...] = ("single", "parallel")

_ENTRY_POINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def register_parallel(id: str, entry_point: str) -> None:
    """Shorthand for :func:`~agentgym.registry.register_multiagent` with a ``ParallelEnv``
    factory only: ``entry_point`` (``"module:attr"``, imported only when a session needs it)
    becomes available to env servers as ``id`` with kind ``"parallel"``."""
    if not isinstance(entry_point, str) or not _ENTRY_POINT.fullmatch(entry_point):
        raise TypeError(
            f"register_parallel({id!r}): entry_point must be a 'module:attr' string, got {entry_point!r}"
        )
    register_multiagent(id, parallel_entry_point=entry_point)


def _parallel_ids() -> list[str]:
    return [env_id for env_id, m in list_envs().items() if "parallel" in m.kinds]


def hostable_envs(allowlist: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """``{"id", "kind", "family", "description"}`` of every registered id a session may name
    (within ``allowlist`` if one is given), Gymnasium ids first, each group sorted."""
    envs = [
        {"id": env_id, "kind": kind, "family": m.family, "description": m.description}
        for kind in KINDS
        for env_id, m in list_envs().items()
        if kind in m.kinds
    ]
    return [e for e in envs if allowlist is None or e["id"] in allowlist]


def check_client_kwargs(
    env_id: str, kwargs: dict[str, Any], allowed: frozenset[str] | None, data_root: Path | None = None
) -> dict[str, Any]:
    """The kwargs to make the env with, or ``kwarg_not_allowed`` for the first kwarg a client
    may not set: neither in ``allowed`` (the operator's; ``None`` allows every kwarg as it is)
    nor declared in the manifest's ``client_kwargs``, holding a number past its declared
    ceiling, or (one of the manifest's ``path_kwargs``) not a relative path inside
    ``data_root``, to which it is resolved. Unknown ids pass (making them answers
    ``unknown_env``)."""
    if allowed is None or not kwargs:
        return kwargs
    try:
        m = manifest(env_id)
    except UnknownEnvError:
        return kwargs
    declared, kwargs = m.client_kwargs, dict(kwargs)
    for name, value in kwargs.items():
        if name in m.path_kwargs and name in allowed:
            kwargs[name] = _inside_data_root(env_id, name, value, data_root)
            continue
        if name in allowed:
            continue
        if name not in declared:
            may = (
                f"clients may set {', '.join(sorted(declared))}"
                if declared
                else "clients may set none of its kwargs"
            )
            raise ApiError(
                "kwarg_not_allowed",
                f"{env_id}: a client may not set {name!r} "
                f"({may}); the operator can allow it with agentgym serve "
                f"--allow-kwarg {name}",
                kwarg=name,
            )
        ceiling = declared[name]
        if ceiling is not None and any(not x <= ceiling for x in _numbers(value)):  # NaN too
            raise ApiError(
                "kwarg_not_allowed",
                f"{env_id}: {name}={value!r} is past the "
                f"ceiling for clients, {ceiling:g}; the operator can allow more "
                f"with agentgym serve --allow-kwarg {name}",
                kwarg=name,
                ceiling=ceiling,
            )
    return kwargs


def _inside_data_root(env_id: str, name: str, value: Any, data_root: Path | None) -> str:
    """``value``, a client's path, resolved inside ``data_root`` (symlinks followed)."""
    if data_root is None:
        raise ApiError(
            "kwarg_not_allowed",
            f"{env_id}: {name!r} names a host path, which "
            "clients may name only inside the server's data root: start it with "
            "agentgym serve --data-root DIR",
            kwarg=name,
        )
    root = data_root.resolve()
    path = (root / value).resolve() if isinstance(value, str) and "\x00" not in value else None
    if path is None or value.startswith("/") or not path.is_relative_to(root):
        raise ApiError(
            "kwarg_not_allowed",
            f"{env_id}: {name}={value!r} is not a relative path inside the server's data root",
            kwarg=name,
        )
    return str(path)


def _numbers(value: Any) -> list[float]:
    """The numbers in a JSON value (booleans are not numbers here), walked without recursion:
    a client's value may nest as deep as the JSON parser allows."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return found


def make_env(
    env_id: str, kwargs: dict[str, Any], kind: Kind | None, *, allow_entry_points: bool
) -> tuple[Any, Kind]:
    """Make the env of a new session; returns it with its kind.

    Blocking (it may import the env's module): call it in a worker thread. Raises
    :class:`~agentgym.server.errors.ApiError`: ``unknown_env`` (with close ids suggested),
    ``env_not_allowed`` for an entry point without ``allow_entry_points``, ``invalid_kwargs`` when
    the constructor raises ``TypeError``/``ValueError``, ``make_failed`` for anything else.
    """
    if kind != "parallel" and env_id in gym.registry:
        options = {"disable_env_checker": True, **kwargs}
        return _build(lambda: make(env_id, **options), env_id), "single"
    if kind != "single" and env_id in _parallel_ids():
        return _checked(_build(lambda: make_parallel(env_id, **kwargs), env_id), env_id, kind)
    if _ENTRY_POINT.fullmatch(env_id):
        if not allow_entry_points:
            raise ApiError(
                "env_not_allowed",
                f"{env_id!r} is an entry point; this server hosts "
                "registered ids only (start it with --allow-entry-points to allow them)",
            )
        return _checked(_build(lambda: load_entry_point(env_id)(**kwargs), env_id), env_id, kind)
    raise ApiError("unknown_env", _unknown_message(env_id, kind))


def _build(factory: Callable[[], Any], env_id: str) -> Any:
    try:
        return factory()
    except UnknownEnvError as exc:
        raise ApiError("unknown_env", str(exc)) from None
    except (TypeError, ValueError) as exc:
        message = str(exc) if env_id in str(exc) else f"{env_id}: {exc}"
        raise ApiError("invalid_kwargs", message, exception_type=type(exc).__name__) from None
    except Exception as exc:  # any failure of the env's own code is the client's answer
        raise ApiError(
            "make_failed", f"{env_id}: {type(exc).__name__}: {exc}", exception_type=type(exc).__name__
        ) from None


def _checked(env: Any, env_id: str, wanted: Kind | None) -> tuple[Any, Kind]:
    """``env`` with its kind, found by its type; closes it and raises if it is not ``wanted``."""
    from pettingzoo import ParallelEnv  # only entry points and parallel ids need it

    kind: Kind | None = (
        "single" if isinstance(env, gym.Env) else "parallel" if isinstance(env, ParallelEnv) else None
    )
    if kind is not None and wanted in (None, kind):
        return env, kind
    env.close()
    raise ApiError(
        "invalid_kwargs",
        f"{env_id} made a {type(env).__name__}, which is not "
        + (
            "a Gymnasium Env or a PettingZoo ParallelEnv"
            if kind is None
            else f"of the requested kind {wanted!r}"
        ),
    )


def _unknown_message(env_id: str, kind: Kind | None) -> str:
    """The registry's "did you mean" text, plus close parallel ids where they may be meant."""
    parts = []
    if kind != "parallel":
        try:
            manifest(env_id)
            parts.append(
                f"No environment {env_id!r} is registered as a Gymnasium env (it is a "
                "multi-agent env: ask for kind 'parallel')."
            )
        except UnknownEnvError as exc:
            parts.append(str(exc))
    if kind != "single":
        close = difflib.get_close_matches(env_id, _parallel_ids(), n=3, cutoff=0.6)
        if kind == "parallel" and env_id in gym.registry:
            parts.append(
                f"No parallel environment {env_id!r} is registered (it is a Gymnasium "
                "id: ask for kind 'single')."
            )
        elif close:
            parts.append(f"Parallel envs: did you mean {', '.join(map(repr, close))}?")
        elif kind == "parallel":
            parts.append(f"No parallel environment {env_id!r} is registered.")
    return " ".join(parts)
