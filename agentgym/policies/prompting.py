"""Moved to :mod:`agentgym.prompting` (the prompter is part of the core's policy protocol); this
name stays for one release."""

from agentgym.prompting import FamilyPrompt, Prompter

__all__ = ["FamilyPrompt", "Prompter"]
