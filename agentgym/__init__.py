"""agentgym: a gym for training and evaluating LLM agents on multi-turn text tasks.

``import agentgym`` registers every installed environment (ours and plugins') in Gymnasium's
registry, after which ``gymnasium.make("agentgym/Sokoban-v0")`` works.
"""

from agentgym._version import __version__
from agentgym.env import EnvInfo, TextEnv, extract_tag, match_action, normalize_action
from agentgym.registry import (
    EnvManifest,
    PluginWarning,
    Resources,
    UnknownEnvError,
    list_envs,
    load_plugins,
    make,
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

load_plugins()
