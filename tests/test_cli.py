"""The `agentgym` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import agentgym
from agentgym.episode import load_episodes

CLI = [sys.executable, "-m", "agentgym.cli"]


def agentgym_cmd(*args: str, stdin: str | None = None, cwd: Path | None = None):
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "COLUMNS": "160"})


def test_version():
    proc = agentgym_cmd("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"agentgym {agentgym.__version__}"


def test_list():
    proc = agentgym_cmd("list")
    assert proc.returncode == 0
    assert "agentgym/Sokoban-v0" in proc.stdout and "agentgym/Household-v0" in proc.stdout
    assert "textgames" in proc.stdout


def test_play_until_ctrl_d():
    proc = agentgym_cmd("play", "agentgym/Sokoban-v0", "--seed", "0", stdin="up\n:actions\nfly\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Task:" in out and "#" in out  # instruction and grid
    assert "up, down, left, right" in out  # :actions
    assert "(invalid action)" in out  # 'fly'
    assert out.rstrip().endswith("bye")


def test_play_to_the_end():
    env = agentgym.make("agentgym/Sokoban-v0")
    env.reset(seed=0)
    moves = "\n".join(env.unwrapped.solution()) + "\n"
    proc = agentgym_cmd("play", "agentgym/Sokoban-v0", "--seed", "0", stdin=moves)
    assert proc.returncode == 0 and "Episode solved" in proc.stdout


def test_play_bad_input():
    proc = agentgym_cmd("play", "agentgym/Sokobam-v0")
    assert proc.returncode == 2 and "Did you mean 'agentgym/Sokoban-v0'" in proc.stdout
    proc = agentgym_cmd("play", "agentgym/Sokoban-v0", "--set", "num_boxes=0")
    assert proc.returncode == 2 and "num_boxes" in proc.stdout
    proc = agentgym_cmd("play", "agentgym/Sokoban-v0", "--set", "novalue")
    assert proc.returncode != 0 and "KEY=VALUE" in proc.stderr


def test_eval_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = agentgym_cmd("eval", "env=agentgym/Household-v0", "episodes=6", "group_size=2",
                        "max_turns=10", f"out_dir={out}", "progress=false")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 12 and summary["errors"] == 0
    assert 0.0 <= summary["success_ci95"][0] <= summary["success_ci95"][1] <= 1.0
    episodes = load_episodes(out / "episodes.jsonl")
    assert len(episodes) == 12 and all(e.num_turns >= 1 for e in episodes)
    assert "env: agentgym/Household-v0" in (out / "config.yaml").read_text()
    assert proc.stdout.splitlines()[-1].startswith("agentgym eval: ok suite=agentgym_Household-v0 "
                                                   "episodes=12 success=")


def test_eval_bad_config():
    proc = agentgym_cmd("eval", "no_such_key=1")
    assert proc.returncode == 2 and "bad configuration" in proc.stderr
    assert proc.stdout.startswith("agentgym eval: error bad configuration")
    proc = agentgym_cmd("eval", "policy=nonexistent")
    assert proc.returncode == 2 and "bad configuration" in proc.stderr
