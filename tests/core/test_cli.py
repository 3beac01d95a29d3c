"""The `agentgym` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentgym
from agentgym.episode import load_episodes

CLI = [sys.executable, "-m", "agentgym.cli"]


def agentgym_cmd(*args: str, stdin: str | None = None, cwd: Path | None = None):
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160"},
    )


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
    proc = agentgym_cmd(
        "eval",
        "env=agentgym/Household-v0",
        "tasks=6",
        "group_size=2",
        "max_turns=10",
        f"out_dir={out}",
        "progress=false",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 12 and summary["errors"] == 0
    assert 0.0 <= summary["success_ci95"][0] <= summary["success_ci95"][1] <= 1.0
    episodes = load_episodes(out / "episodes.jsonl")
    assert len(episodes) == 12 and all(e.num_turns >= 1 for e in episodes)
    assert "env: agentgym/Household-v0" in (out / "config.yaml").read_text()
    assert proc.stdout.splitlines()[-1].startswith(
        "agentgym eval: ok suite=agentgym_Household-v0 episodes=12 success="
    )


def test_eval_bad_config():
    proc = agentgym_cmd("eval", "no_such_key=1")
    assert proc.returncode == 2 and "bad configuration" in proc.stderr
    assert proc.stdout.startswith("agentgym eval: error bad configuration")
    proc = agentgym_cmd("eval", "policy=nonexistent")
    assert proc.returncode == 2 and "bad configuration" in proc.stderr


# --- configuration: one vocabulary, old names, types, typos, --help, --cfg, --info ---------------


def test_eval_train_and_collect_share_one_vocabulary():
    """The keys of eval and train that name what collect takes are collect's parameter names,
    and no old name is left in any of them."""
    import inspect
    from dataclasses import fields

    from agentgym import multiagent, rollout
    from agentgym.harness.eval import RENAMED, EvalConfig, SamplingConfig
    from agentgym.harness.suite import RENAMED_ENTRY_KEYS, SuiteEntry
    from agentgym.policy import SamplingParams
    from agentgym.trainers.loop import RENAMED as TRAIN_RENAMED
    from agentgym.trainers.loop import TrainConfig

    collect = set(inspect.signature(rollout.acollect).parameters)
    games = set(inspect.signature(multiagent.acollect).parameters)
    eval_keys, train_keys = {f.name for f in fields(EvalConfig)}, {f.name for f in fields(TrainConfig)}
    entry_keys = {f.name for f in fields(SuiteEntry)}
    shared = {"tasks", "group_size", "max_turns", "concurrency", "sampling", "env_kwargs", "progress"}
    assert shared <= collect & eval_keys
    assert {"tasks", "group_size", "max_turns", "env_kwargs"} <= entry_keys
    assert {"retries", "sandbox"} <= collect & eval_keys
    assert {
        "tasks",
        "group_size",
        "concurrency",
        "sampling",
        "env_kwargs",
        "progress",
        "max_game_steps",
        "signals",
    } <= games & eval_keys
    assert shared - {"tasks"} <= train_keys and {"tasks_per_step", "eval_tasks"} <= train_keys
    old = set(RENAMED) | set(TRAIN_RENAMED) | set(RENAMED_ENTRY_KEYS)
    assert not old & (collect | games | eval_keys | train_keys | entry_keys)
    assert [f.name for f in fields(SamplingConfig)] == [f.name for f in fields(SamplingParams)]
    assert TrainConfig().sampling.params() == SamplingParams(max_tokens=64)


def test_old_names_are_errors_naming_the_new_one():
    proc = agentgym_cmd("eval", "workers=4")
    assert proc.returncode == 2
    assert "agentgym eval: bad configuration: 'workers' is now 'concurrency'" in proc.stderr
    assert proc.stdout.startswith("agentgym eval: error bad configuration: 'workers' is now 'concurrency'")
    for override, message in [
        ("trainer=grpo", "'trainer' is now 'estimator'"),
        ("groups_per_step=4", "'groups_per_step' is now 'tasks_per_step'"),
        ("max_tokens=6", "'max_tokens' is now 'sampling.max_tokens'"),
        ("temperature=0.5", "'temperature' is now 'sampling.temperature'"),
    ]:
        proc = agentgym_cmd("train", override)
        assert proc.returncode == 2, proc.stderr
        assert f"agentgym train: bad configuration: {message}" in proc.stdout, proc.stdout


def test_train_types_and_typos_name_the_key(capsys):
    from agentgym.cli import main
    from agentgym.trainers.loop import TrainConfig

    for override, message in [
        ("steps=abc", "bad value for 'steps': Value 'abc' of type 'str' could not be converted to Integer"),
        ("learner.lora_rank=1.5", "bad value for 'learner.lora_rank'"),
        ("lerner.lr=1e-5", "no key 'lerner'; did you mean 'learner'?"),
        ("learner.lrr=1e-5", "no key 'learner.lrr'; did you mean 'learner.lr'?"),
        ("+learner.lrr=1e-5", "no key 'learner.lrr'; did you mean 'learner.lr'?"),
        ("estimater=grpo", "no key 'estimater'; did you mean 'estimator'?"),
        ("learner.aggregation=mean", "learner.aggregation must be one of"),
        (
            "learner.device=gpu0",
            "learner.device must be auto or a torch device (cpu, cuda, cuda:1, ...), got 'gpu0'",
        ),
        ("estimator=ppo2", "unknown estimator 'ppo2'"),
    ]:
        assert main(["train", override]) == 2, override
        assert message in capsys.readouterr().out.replace("\n", ""), override
    # the same checks for callers that build the config from a dict
    with pytest.raises(ValueError, match="'trainer' is now 'estimator'"):
        TrainConfig.from_dict({"trainer": "grpo"})
    with pytest.raises(ValueError, match="no key 'learner.lrr'; did you mean 'learner.lr'?"):
        TrainConfig.from_dict({"learner": {"lrr": 1e-5}})
    cfg = TrainConfig.from_dict({"sampling": {"temperature": 0.5}, "learner": {"lora_rank": 4}})
    assert (cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.learner.lora_rank) == (64, 0.5, 4)


def _key_line(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line.split()[:1] == [key])


def test_help_lists_every_key_with_its_default_and_meaning():
    from dataclasses import fields

    from agentgym.harness.eval import EvalConfig

    proc = agentgym_cmd("eval", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--cfg" in proc.stdout and "--info" in proc.stdout
    line = _key_line(proc.stdout, "concurrency")
    assert line.split()[1] == "16" and "in flight at once" in line
    assert _key_line(proc.stdout, "policy").split()[1] == "random"  # a group: its default choice
    assert "hf, openai, random, scripted, vllm" in _key_line(proc.stdout, "policy")
    assert _key_line(proc.stdout, "sampling.max_tokens").split()[1] == "256"
    for f in fields(EvalConfig):  # every key, generated from the dataclass
        if f.name != "sampling":
            assert len(_key_line(proc.stdout, f.name).split()) > 2, f.name  # with a meaning
    proc = agentgym_cmd("train", "--help")
    assert proc.returncode == 0, proc.stderr
    assert _key_line(proc.stdout, "tasks_per_step").split()[1] == "8"
    assert _key_line(proc.stdout, "learner.lr").split()[1] == "1e-06"
    assert "Learning rate" in _key_line(proc.stdout, "learner.lr")
    assert _key_line(proc.stdout, "sampling.max_tokens").split()[1] == "64"


def test_cfg_job_prints_the_composed_config_and_info_says_where_it_comes_from():
    import yaml

    proc = agentgym_cmd("eval", "--cfg", "job", "env=agentgym/GuessNumber-v0", "tasks=3", "policy=scripted")
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert (cfg["env"], cfg["tasks"], cfg["concurrency"]) == ("agentgym/GuessNumber-v0", 3, 16)
    assert cfg["policy"]["_target_"].endswith("ScriptedPolicy")
    proc = agentgym_cmd("train", "--cfg", "job", "steps=3", "learner.lr=1e-5")
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert (cfg["steps"], cfg["learner"]["lr"], cfg["estimator"]) == (3, 1e-5, "gigpo")
    proc = agentgym_cmd("eval", "env=agentgym/Household-v0", "--cfg", "job", "tasks=2")
    assert proc.returncode == 0, proc.stderr  # overrides on both sides of the option
    assert yaml.safe_load(proc.stdout)["tasks"] == 2
    proc = agentgym_cmd("eval", "--cfg", "job", "workers=2")
    assert proc.returncode == 2 and "'workers' is now 'concurrency'" in proc.stdout
    proc = agentgym_cmd("eval", "--info", "suite=smoke")
    assert proc.returncode == 0, proc.stderr
    assert "eval_schema = agentgym.harness.eval.EvalConfig" in proc.stdout
    assert "suite/smoke" in proc.stdout and "pkg://agentgym.conf" in proc.stdout


def test_train_summary_says_what_it_did_and_wrote(tmp_path):
    from agentgym.trainers.loop import TrainConfig, train_summary

    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "learner.pt").write_bytes(b"x")
    (out / "learning_curve.png").write_bytes(b"x")
    records = [
        {"step": -1, "eval_success": 0.25},
        {"step": 0, "train_success": 0.5},
        {"step": 1, "train_success": 0.5, "eval_success": 0.5},
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = train_summary(TrainConfig(out_dir=str(out), steps=2, eval_tasks=4), 75.0, 2)
    assert "gigpo on agentgym/Sokoban-v0, 2/2 steps (2 in this run) in 1m 15s" in text
    assert "held-out success: 25.0% untrained -> 50.0% after step 2 (greedy, 4 held-out tasks)" in text
    for path in ("metrics.jsonl", "learning_curve.png", "checkpoint/learner.pt"):
        assert str(out / path) in text
    assert "tensorboard" not in text  # only what exists


def test_tables_stay_whole_when_piped():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([*CLI, "list"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "\x1b[" not in proc.stdout
    manifest = agentgym.list_envs()["agentgym/Sokoban-v0"]
    row = next(line for line in proc.stdout.splitlines() if "agentgym/Sokoban-v0" in line)
    assert manifest.description in row  # the whole row on one line, not folded at 80 columns


def test_play_edits_the_line_with_readline():
    """On a terminal, arrow keys move in the line (readline) instead of becoming the action:
    'p', left arrow, 'u' is 'up'."""
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: play on the terminal
        os.execv(sys.executable, [*CLI, "play", "agentgym/Sokoban-v0", "--seed", "0"])
    output = b""

    def read_until(marker: bytes, timeout: float = 120) -> None:
        nonlocal output
        deadline = time.time() + timeout
        while marker not in output and time.time() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    break
        assert marker in output, output.decode(errors="replace")

    try:
        read_until(b"action> ")
        output = b""
        os.write(fd, b"p\x1b[Du\r")  # p, left arrow, u: "up"
        read_until(b"action> ")
        assert b"invalid action" not in output, output.decode(errors="replace")
        assert b"up" in output and b"turn" in output  # a turn was played: the action "up"
        os.write(fd, b"\x04")  # Ctrl-D
        read_until(b"bye")
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
