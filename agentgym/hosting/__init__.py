"""Hosting: env servers placed in sandboxes, one layer above the sandbox backends and the server.

- :class:`EnvServerPool`: env servers in sandboxes of one backend, handing out
  :class:`~agentgym.server.RemoteEnv` sessions (behind ``agentgym.make(env_id, sandbox=...)``
  and ``collect(..., sandbox=...)``).
- :func:`make_sandboxed` / :func:`default_pool`: the process-wide pools that
  ``agentgym.make(env_id, sandbox="local" | "docker")`` uses.
- :mod:`agentgym.hosting.envserver`: starting the env server inside one sandbox, checking it, and
  saying why it stopped answering.
"""

from agentgym.hosting.pool import SESSIONS_PER_SERVER, EnvServerPool, default_pool, make_sandboxed

__all__ = ["SESSIONS_PER_SERVER", "EnvServerPool", "default_pool", "make_sandboxed"]
