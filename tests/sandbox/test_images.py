"""What ``agentgym build`` puts in an image's wheelhouse (the image builds themselves, which need
Docker, are in test_sandbox_docker.py and tests/hosting/test_sandboxed_envs.py)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from agentgym.sandbox.images import build_wheelhouse

from support import ROOT


def test_the_wheel_holds_the_sources_not_an_earlier_builds_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setuptools reuses a tree's ``build/``: a module deleted from the sources after a build
    would still be packaged from there, and run in every image."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "agentgym", project / "agentgym", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    (project / "containers" / "base").mkdir(parents=True)
    (project / "containers" / "base" / "build.sh").touch()
    leftover = project / "build" / "lib" / "agentgym" / "deleted_module.py"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("RAN = True\n")
    monkeypatch.setenv("AGENTGYM_CONTAINERS", str(project / "containers"))
    wheels = build_wheelhouse(tmp_path / "wheels")
    (wheel,) = [w for w in wheels if w.name.startswith("agentgym-")]
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentgym/env.py" in names and "agentgym/conf/train.yaml" in names
    assert "agentgym/deleted_module.py" not in names
    assert not (project / "agentgym.egg-info").exists()  # nothing written into the tree either
    assert leftover.read_text() == "RAN = True\n"
