"""Hydra configs of the ``agentgym`` commands (``eval.yaml``, ``train.yaml``, ``policy/``)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose as _compose
from hydra import initialize_config_module
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

__all__ = ["CONFIG_ERRORS", "compose"]

#: What a bad command-line override raises.
CONFIG_ERRORS = (HydraException, OmegaConfBaseException)


def compose(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``name`` of this package with Hydra command-line overrides applied."""
    with initialize_config_module("agentgym.conf", version_base=None):
        return _compose(name, overrides=list(overrides))
