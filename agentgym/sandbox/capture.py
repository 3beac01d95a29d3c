"""Collecting a command's stdout and stderr under a byte cap, and exit-status conventions."""

from __future__ import annotations

__all__ = ["STDERR", "STDOUT", "OutputCapture", "shell_status"]

STDOUT, STDERR = 1, 2


class OutputCapture:
    """Keeps the first ``cap`` bytes of each stream; remembers whether one went over."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._streams = {STDOUT: bytearray(), STDERR: bytearray()}
        self.truncated = False

    def feed(self, stream: int, data: bytes) -> bool:
        """Add ``data`` to ``stream`` (:data:`STDOUT` or :data:`STDERR`); ``False`` once that
        stream has gone over the cap (the caller should then stop the command)."""
        buf = self._streams[stream]
        room = self.cap - len(buf)
        buf += data[: max(room, 0)]
        if len(data) > room:
            self.truncated = True
        return not self.truncated

    @property
    def stdout(self) -> bytes:
        return bytes(self._streams[STDOUT])

    @property
    def stderr(self) -> bytes:
        return bytes(self._streams[STDERR])


def shell_status(returncode: int) -> int:
    """``subprocess``'s status (negative = killed by that signal) in the shell's convention
    (``128 + signal``), the one Docker and bubblewrap report."""
    return 128 - returncode if returncode < 0 else returncode
