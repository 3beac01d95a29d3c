"""Command line of the env server, shared by ``agentgym serve`` and ``python -m agentgym.server``.

    python -m agentgym.server [--host 127.0.0.1] [--port 8000 | --uds PATH]
        [--max-sessions 4096] [--idle-timeout 600] [--max-body-bytes 1048576] [--step-timeout 600]
        [--allow-env ID ...] [--allow-entry-points] [--allow-kwarg NAME ...]
        [--data-root DIR] [--trust-client-kwargs] [--token TOKEN] [--ready-file PATH]
        [--head-timeout 10] [--body-timeout 60] [--max-client-connections 4096]
        [--log-level warning]

``python -m agentgym.server`` starts faster than ``agentgym serve`` (it skips the CLI's other
imports); both take the same options.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgym.server import limits

if TYPE_CHECKING:
    from agentgym.server.serve import ClientLimits

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the server's options to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="TCP port; 0 picks a free one, see --ready-file (default %(default)s)",
    )
    parser.add_argument(
        "--uds", metavar="PATH", default=None, help="serve on this Unix domain socket instead of TCP"
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=limits.MAX_SESSIONS,
        metavar="N",
        help="sessions open at once (default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=limits.IDLE_TIMEOUT_S,
        metavar="S",
        help="seconds after which an idle session is closed (default %(default)s)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=limits.MAX_BODY_BYTES,
        metavar="B",
        help="largest request body (default %(default)s)",
    )
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=limits.STEP_TIMEOUT_S,
        metavar="S",
        help="longest reset or step; past it the session is closed (default %(default)s)",
    )
    parser.add_argument(
        "--allow-env",
        action="append",
        default=None,
        metavar="ID",
        help="host only these env ids (repeatable; default: every registered id)",
    )
    parser.add_argument(
        "--allow-entry-points",
        action="store_true",
        help="accept 'module:factory' env ids (runs code that clients name)",
    )
    parser.add_argument(
        "--allow-kwarg",
        action="append",
        default=[],
        metavar="NAME",
        help="let clients set this env constructor kwarg too, with no ceiling "
        "(repeatable; default: only those each env declares safe)",
    )
    parser.add_argument(
        "--data-root",
        metavar="DIR",
        default=None,
        help="resolve the host paths clients give (allowed path kwargs, such as "
        "SearchQA's questions) inside DIR; without it they give none",
    )
    parser.add_argument(
        "--trust-client-kwargs",
        action="store_true",
        help="let clients set any kwarg (for a server only its operator reaches)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="bearer token every request must carry (default "
        "$AGENTGYM_SERVER_TOKEN; needed to bind a non-loopback address)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        default=None,
        help='write {"pid", "url", "host", "port"} (or "uds") here once serving',
    )
    parser.add_argument(
        "--head-timeout",
        type=_seconds,
        default=limits.HEAD_TIMEOUT_S,
        metavar="S",
        help="seconds a connection has to send a request's line and headers; past it the "
        "request is answered 408 and the connection closed (default %(default)s)",
    )
    parser.add_argument(
        "--body-timeout",
        type=_seconds,
        default=limits.BODY_TIMEOUT_S,
        metavar="S",
        help="seconds a request has to send its body once its headers are in; past it the "
        "request is answered 408 and the connection closed (default %(default)s)",
    )
    parser.add_argument(
        "--max-client-connections",
        type=_count,
        default=limits.CLIENT_CONNECTIONS,
        metavar="N",
        help="connections one client address may hold open at once; one more is answered 503 "
        "and closed (default %(default)s; 0: no cap)",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )


def _seconds(text: str) -> float:
    """A number of seconds > 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"seconds must be a number > 0, got {text!r}")
    return value


def _count(text: str) -> int:
    """A whole number >= 0 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"a count must be a whole number >= 0, got {text!r}")
    return value


def client_limits(args: argparse.Namespace) -> ClientLimits:
    """The :class:`~agentgym.server.serve.ClientLimits` of the parsed options."""
    from agentgym.server.serve import ClientLimits

    return ClientLimits(args.head_timeout, args.body_timeout, args.max_client_connections)


def run(args: argparse.Namespace) -> int:
    """Serve with the parsed options until SIGTERM/SIGINT."""
    from agentgym.server.app import ServerConfig
    from agentgym.server.serve import serve

    try:
        ServerConfig(
            max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout,
            max_body_bytes=args.max_body_bytes,
            step_timeout_s=args.step_timeout,
        )
    except ValueError as exc:
        raise SystemExit(f"agentgym serve: {exc}") from None
    serve(
        args.host,
        args.port,
        uds=args.uds,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        max_body_bytes=args.max_body_bytes,
        step_timeout_s=args.step_timeout,
        env_allowlist=args.allow_env,
        allow_entry_points=args.allow_entry_points,
        allowed_kwargs=None if args.trust_client_kwargs else args.allow_kwarg,
        data_root=args.data_root,
        token=args.token,
        ready_file=args.ready_file,
        log_level=args.log_level,
        client_limits=client_limits(args),
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.server", description="Serve agentgym env sessions over HTTP."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
