"""The env server's error vocabulary, on both sides of the wire.

Every error response of the server is JSON ``{"error": CODE, "detail": TEXT, ...}`` with one of
the codes of :data:`STATUS` (env failures add ``exception_type``). The server raises
:class:`ApiError`; the client turns a response, or the lack of one, into an
:class:`EnvServerError`:

``EnvServerError``                    base class; ``url`` is the server's
 - ``EnvServerUnavailable``           (also ``ConnectionError``) nobody answers at ``url``: the
                                      server is not running, was killed, or dropped the connection
 - ``EnvServerTimeout``               (also ``TimeoutError``) no answer within ``seconds``
 - ``EnvServerHTTPError``             the server answered with an error; ``status``, ``code``,
                                      ``detail``
    - ``RequestRejected``             (also ``ValueError``) a 4xx: the request was bad or
                                      exceeded a limit; the server is fine
       - ``UnknownRemoteEnv``         (also :class:`agentgym.UnknownEnvError`) unknown env id
       - ``InvalidRemoteKwargs``      (also ``TypeError``) the env's constructor refused the
                                      kwargs with a ``TypeError`` (unknown names), as
                                      :func:`agentgym.make` raises in-process
    - ``EnvServerFull``               503: ``max_sessions`` reached; retry later or elsewhere
    - ``RemoteEnvError``              (also ``RuntimeError``) the env itself raised (or had
                                      raised, for a broken session); ``exception_type``
"""

from __future__ import annotations

from typing import Any

from agentgym.registry import UnknownEnvError

__all__ = [
    "STATUS",
    "ApiError",
    "EnvServerError",
    "EnvServerFull",
    "EnvServerHTTPError",
    "EnvServerTimeout",
    "EnvServerUnavailable",
    "InvalidRemoteKwargs",
    "RemoteEnvError",
    "RequestRejected",
    "UnknownRemoteEnv",
    "error_from_response",
]

#: HTTP status of every error code the server sends.
STATUS: dict[str, int] = {
    "malformed_json": 400,  # the body is not JSON
    "invalid_kwargs": 400,  # make(env_id, **kwargs) raised TypeError/ValueError
    "invalid_argument": 400,  # reset(seed, options) raised TypeError/ValueError
    "unauthorized": 401,  # the server has a token and the request did not carry it
    "env_not_allowed": 403,  # the id is outside the server's env allowlist
    "kwarg_not_allowed": 403,  # a kwarg clients may not set, or a value past its ceiling
    "unknown_env": 404,  # no such env id (detail suggests close ones)
    "unknown_session": 404,  # no such session (never created, deleted, or reaped when idle)
    "not_found": 404,  # no such route
    "method_not_allowed": 405,
    "reset_needed": 409,  # step before the first reset (Gymnasium's ResetNeeded)
    "session_broken": 409,  # the session's env raised earlier and was closed
    "body_too_large": 413,  # the body exceeds max_body_bytes
    "invalid_request": 422,  # a field is missing or has the wrong type
    "session_busy": 429,  # the session already has MAX_QUEUED requests in the server
    "env_error": 500,  # the env raised in reset/step
    "make_failed": 500,  # make raised something other than TypeError/ValueError
    "internal_error": 500,  # a bug in the server
    "too_many_sessions": 503,  # max_sessions reached
    "step_timeout": 504,  # reset/step ran past the server's deadline; the session is closed
}


class ApiError(Exception):
    """Raised inside the server; answered as ``{"error": code, "detail": detail, **extra}``."""

    def __init__(self, code: str, detail: str, **extra: Any):
        super().__init__(f"{code}: {detail}")
        self.status = STATUS[code]
        self.code = code
        self.detail = detail
        self.extra = extra

    def payload(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.detail, **self.extra}


class EnvServerError(Exception):
    """Something went wrong talking to the env server at ``url``."""

    def __init__(self, message: str, *, url: str):
        super().__init__(message)
        self.url = url


class EnvServerUnavailable(EnvServerError, ConnectionError):
    """Nobody answers at ``url``: the server is not running, was killed, or dropped the
    connection mid-request."""


class EnvServerTimeout(EnvServerError, TimeoutError):
    """The server did not answer within ``seconds``."""

    def __init__(self, message: str, *, url: str, seconds: float | None):
        super().__init__(message, url=url)
        self.seconds = seconds


class EnvServerHTTPError(EnvServerError):
    """The server answered ``status`` with error ``code`` and explanation ``detail``."""

    def __init__(
        self, message: str, *, url: str, status: int, code: str, detail: str, payload: dict[str, Any]
    ):
        super().__init__(message, url=url)
        self.status = status
        self.code = code
        self.detail = detail
        self.payload = payload


class RequestRejected(EnvServerHTTPError, ValueError):
    """A 4xx answer: the request was malformed, named something unknown, or exceeded a limit."""


class UnknownRemoteEnv(RequestRejected, UnknownEnvError):
    """The server has no env of that id; ``detail`` suggests close ones."""


class InvalidRemoteKwargs(RequestRejected, TypeError):
    """The env's constructor raised ``TypeError`` for the kwargs (``invalid_kwargs``); ``detail``
    names the accepted ones."""


class EnvServerFull(EnvServerHTTPError):
    """The server already hosts ``max_sessions`` sessions."""


class RemoteEnvError(EnvServerHTTPError, RuntimeError):
    """The env raised inside the server; ``exception_type`` names the exception's class."""

    @property
    def exception_type(self) -> str:
        return str(self.payload.get("exception_type", ""))


_REMOTE_ENV_CODES = frozenset(
    {"env_error", "make_failed", "session_broken", "internal_error", "step_timeout"}
)


def error_from_response(url: str, status: int, payload: Any, text: str) -> EnvServerHTTPError:
    """The exception for an error answer: ``payload`` is its parsed JSON body (or ``None``),
    ``text`` the raw body, used when the body is not the server's JSON (a proxy's page)."""
    if not (isinstance(payload, dict) and isinstance(payload.get("error"), str)):
        payload = {"error": f"http_{status}", "detail": text[:1000]}
    code, detail = payload["error"], str(payload.get("detail", ""))
    if code == "unknown_env":
        cls: type[EnvServerHTTPError] = UnknownRemoteEnv
    elif code == "invalid_kwargs" and payload.get("exception_type") == "TypeError":
        cls = InvalidRemoteKwargs
    elif code == "too_many_sessions":
        cls = EnvServerFull
    elif code in _REMOTE_ENV_CODES:
        cls = RemoteEnvError
    elif 400 <= status < 500:
        cls = RequestRejected
    else:
        cls = EnvServerHTTPError
    kind = f" ({payload['exception_type']})" if payload.get("exception_type") else ""
    return cls(
        f"env server {url} answered {status} {code}{kind}: {detail}",
        url=url,
        status=status,
        code=code,
        detail=detail,
        payload=payload,
    )
