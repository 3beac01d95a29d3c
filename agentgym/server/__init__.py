"""The env server (``agentgym serve``) and its clients.

An env server hosts many env sessions behind a keep-alive JSON HTTP API (:mod:`.app`);
:class:`RemoteEnv` (a :class:`~agentgym.env.TextEnv`) and :class:`RemoteParallelEnv` (a
PettingZoo ``ParallelEnv``) forward to one; :class:`ServerProcess` starts one as a subprocess,
optionally under a sandbox's command prefix.

Names are imported on first use, so that ``python -m agentgym.server`` loads no client code and
a client loads no server code.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EnvServerError",
    "EnvServerFull",
    "EnvServerHTTPError",
    "EnvServerTimeout",
    "EnvServerUnavailable",
    "InvalidRemoteKwargs",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteParallelEnv",
    "RequestRejected",
    "ServerProcess",
    "UnknownRemoteEnv",
    "register_parallel",
    "serve",
]

_HOMES = {
    "EnvServerError": "errors",
    "EnvServerFull": "errors",
    "EnvServerHTTPError": "errors",
    "EnvServerTimeout": "errors",
    "EnvServerUnavailable": "errors",
    "InvalidRemoteKwargs": "errors",
    "RemoteEnv": "client",
    "RemoteEnvError": "errors",
    "RemoteParallelEnv": "client",
    "RequestRejected": "errors",
    "ServerProcess": "launch",
    "UnknownRemoteEnv": "errors",
    "register_parallel": "envs",
    "serve": "serve",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
