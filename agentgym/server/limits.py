"""The env server's default limits, one set for :class:`~agentgym.server.app.ServerConfig`,
:func:`~agentgym.server.serve.serve` (and its :class:`~agentgym.server.serve.ClientLimits`) and
the command line (:mod:`agentgym.server.main`). No imports: the command line loads it first."""

#: Sessions open at once; one more answers 503 ``too_many_sessions``.
MAX_SESSIONS = 4096
#: Seconds without a call after which a session is closed.
IDLE_TIMEOUT_S = 600.0
#: Largest request body in bytes (1 MiB); a larger one answers 413 ``body_too_large``.
MAX_BODY_BYTES = 1 << 20
#: The longest a reset or step may run, in seconds; past it the session is closed.
STEP_TIMEOUT_S = 600.0
#: Seconds a connection has to send a request's line and headers.
HEAD_TIMEOUT_S = 10.0
#: Seconds a request has to send its body once its headers are in.
BODY_TIMEOUT_S = 60.0
#: Connections one client address may hold open at once: a client needs about one per session
#: it calls at once, and a server takes MAX_SESSIONS sessions.
CLIENT_CONNECTIONS = MAX_SESSIONS
