"""Where the commands print: rich consoles that keep tables whole when the output is piped."""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["PIPE_WIDTH", "output_console"]

#: Console width when the output is not a terminal and ``COLUMNS`` is unset: tables are as wide as
#: their content (a pipe or a log file gets whole rows, not rows folded at 80 columns).
PIPE_WIDTH = 1000


def output_console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): a terminal's width on a terminal, ``COLUMNS`` when
    set, else :data:`PIPE_WIDTH` columns. Not a terminal: no colours or other escape codes
    (rich's own rule, unless ``FORCE_COLOR`` is set)."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and not os.environ.get("COLUMNS", "").isdigit()
    return Console(stderr=stderr, width=PIPE_WIDTH if wide else None)
