"""The README's main job, run as written (the eval part of its first command): the embedded
model on GuessNumber with its small-model prompt wins games, and says so in its last line."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

pytestmark = pytest.mark.slow  # a minute of CPU: the embedded model plays 16 games


def _main_job() -> list[str]:
    """The arguments of ``agentgym`` in the README's ``bash scripts/setup.sh && ...`` line."""
    line = next(
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("bash scripts/setup.sh && ")
    )
    command = shlex.split(line.split("&&", 1)[1])
    assert command[0] == ".venv/bin/agentgym", command
    return command[1:]


def test_the_readme_main_job_wins_games(tmp_path: Path) -> None:
    args = _main_job()
    assert args[0] == "eval" and "policy=hf" in args
    agentgym = Path(sys.executable).with_name("agentgym")
    proc = subprocess.run(
        [str(agentgym), *args, f"out_dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    found = re.search(r"^agentgym eval: ok .* episodes=16 success=([\d.]+)% .*complete=true", last)
    assert found, last
    assert float(found.group(1)) >= 20.0, last  # the README says about 4 in 10
    assert (tmp_path / "run" / "report.html").is_file()
