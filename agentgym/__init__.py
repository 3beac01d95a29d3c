"""agentgym: a gym for training and evaluating LLM agents on multi-turn text tasks.

``import agentgym`` registers every installed environment (ours and plugins') in Gymnasium's
registry, after which ``gymnasium.make("agentgym/Sokoban-v0")`` works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import gymnasium as gym

from agentgym import registry
from agentgym._version import __version__
from agentgym.env import EnvInfo, TextEnv, extract_tag, match_action, normalize_action
from agentgym.registry import (
    EnvManifest,
    PluginWarning,
    Resources,
    UnknownEnvError,
    list_envs,
    load_plugins,
    make_aec,
    make_parallel,
    manifest,
    register,
    register_multiagent,
)

__all__ = [
    "EnvInfo",
    "EnvManifest",
    "PluginWarning",
    "Resources",
    "TextEnv",
    "UnknownEnvError",
    "__version__",
    "extract_tag",
    "list_envs",
    "load_plugins",
    "make",
    "make_aec",
    "make_parallel",
    "manifest",
    "match_action",
    "normalize_action",
    "register",
    "register_multiagent",
]

if TYPE_CHECKING:
    from agentgym.hosting import EnvServerPool
    from agentgym.sandbox.spec import Backend
    from agentgym.server import RemoteEnv


@overload
def make(env_id: str, *, sandbox: None = None, **kwargs: Any) -> gym.Env: ...
@overload
def make(env_id: str, *, sandbox: Backend | EnvServerPool, **kwargs: Any) -> RemoteEnv: ...
def make(env_id: str, *, sandbox: Backend | EnvServerPool | None = None, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with agentgym's errors (:func:`agentgym.registry.make`): unknown ids
    suggest close ones, unknown kwargs name the accepted ones (a ``TypeError``). Value errors (a
    negative size, ...) come from the env itself.

    With ``sandbox`` (``"local"``, ``"docker"``, or an
    :class:`~agentgym.hosting.EnvServerPool`) the env runs in an env server inside a
    sandbox with the limits of the env's manifest, and the result is a
    :class:`~agentgym.server.RemoteEnv` with the same observations, rewards and infos (as JSON
    values). Its ``close()`` (or its garbage collection) gives the sandbox back: a backend name
    uses a process-wide pool that closes a sandbox with its last env; interpreter exit closes
    every sandbox. Unknown kwargs raise :class:`~agentgym.server.InvalidRemoteKwargs` (a
    ``TypeError``) with the server's message; a missing image says which ``agentgym build`` to
    run (:class:`~agentgym.sandbox.SandboxError`).
    """
    if sandbox is None:
        return registry.make(env_id, **kwargs)
    registry.require_single(env_id)
    # Hosting (sandboxes, the server client, httpx: ~80 ms) loads only when a sandbox is asked for.
    from agentgym.hosting import make_sandboxed

    return make_sandboxed(env_id, sandbox, kwargs)


load_plugins()
