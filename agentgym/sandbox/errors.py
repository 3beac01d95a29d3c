"""The errors and warnings of sandboxes (every backend raises these)."""

__all__ = ["ExecError", "SandboxDeadError", "SandboxError", "SandboxWarning"]


class SandboxError(RuntimeError):
    """A sandbox could not do what was asked (start, exec, file access, ...)."""


class SandboxDeadError(SandboxError):
    """The sandbox is closed, or died (its container was killed or removed, its dirs vanished)."""


class SandboxWarning(UserWarning):
    """A sandbox runs with weaker isolation than asked for (no bubblewrap, no cgroups, ...)."""


class ExecError(SandboxError):
    """Raised by :meth:`ExecResult.check` for a command that failed, timed out or was cut off."""
