"""`pip install .` (a real wheel, not the editable checkout) ships every subpackage, the Hydra
configs and the entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys

from support import ROOT, run_python


def test_wheel_install_imports_everything(tmp_path):
    target = tmp_path / "site"
    # Built from a copy: an in-tree build leaves build/ and agentgym.egg-info in the checkout,
    # whose stale metadata (entry points) Python run from the checkout would read first.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "*.egg-info", "runs", "__pycache__", ".hypothesis", "tests"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    code = (
        "import agentgym, agentgym.envs.textgames.sokoban, agentgym.envs.textgames.household\n"
        "import agentgym.policies.scripted, agentgym.trainers\n"
        "from agentgym.harness.eval import compose_eval_config\n"
        "mods = [agentgym, agentgym.envs.textgames.sokoban, agentgym.policies.scripted, agentgym.trainers]\n"
        f"assert all(m.__file__.startswith({str(target)!r}) for m in mods), [m.__file__ for m in mods]\n"
        "assert compose_eval_config(['env=agentgym/Household-v0']).env == 'agentgym/Household-v0'\n"
        "assert agentgym.list_envs()['agentgym/Sokoban-v0'].plugin == 'textgames'\n"
        "from agentgym.cli import build_parser\n"
        "assert build_parser().parse_args(['index', 'c.jsonl', 'out']).out_dir == 'out'\n"
        "print('OK')"
    )
    proc = run_python(code, env={"PYTHONPATH": str(target)}, cwd=tmp_path)
    assert proc.stdout.strip() == "OK"
    assert (target / "bin" / "agentgym").exists()
