"""Shared fixtures. Tests use real components; see the markers in pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def unavailable(reason: str) -> NoReturn:
    """Skip a test whose system dependency (Docker, bubblewrap, Chromium) is missing; under CI
    (``$CI`` set), where everything must run, fail it instead."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but: {reason}")
    pytest.skip(reason)


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120,
               check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv; return the finished process."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where the sample and the broken plugin are pip-installed; put it on PYTHONPATH."""
    target = tmp_path_factory.mktemp("plugins")
    for name in ("sample_plugin", "broken_plugin"):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
             "--target", str(target), str(FIXTURES / name)],
            check=True, capture_output=True, text=True, timeout=300,
        )
    return target
