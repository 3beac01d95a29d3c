"""`agentgym train` end to end on the embedded model, and exact resume of a killed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from agentgym.trainers.learner import Learner, LearnerConfig
from agentgym.trainers.loop import TrainConfig, Trainer, train

pytestmark = pytest.mark.slow  # minutes of CPU; part of the README's test command and CI

TINY = {
    "env": "agentgym/Sokoban-v0",
    "env_kwargs": {"dim_room": [5, 5]},
    "estimator": "gigpo",
    "steps": 3,
    "tasks_per_step": 2,
    "group_size": 2,
    "max_turns": 2,
    "sampling": {"max_tokens": 6},
    "eval_every": 3,
    "eval_tasks": 2,
    "progress": False,
    "learner": {"lr": 1e-4, "lora_rank": 4, "seed": 0},
}


def final_weights(out_dir):
    learner = Learner(LearnerConfig(**{**TINY["learner"]}))
    learner.load_checkpoint(out_dir / "checkpoint")
    return learner.step, {k: v.clone() for k, v in learner.trainable_state().items()}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """(out_dir, records) of one uninterrupted TINY run, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("straight")
    return out, train(TrainConfig.from_dict({**TINY, "out_dir": str(out)}))


def test_train_writes_metrics_curve_and_checkpoint(tiny_run):
    tmp_path, records = tiny_run
    assert [r["step"] for r in records] == [0, 1, 2]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == -1 and "eval_success" in lines[0]  # the untrained baseline
    assert lines[-1]["eval_success"] is not None and lines[-1]["update/grad_norm"] > 0
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert (tmp_path / "checkpoint" / "learner.pt").is_file()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


GUESS = {
    **TINY,
    "env": "agentgym/GuessNumber-v0",
    "env_kwargs": {},
    "steps": 1,
    "eval_tasks": 1,
    "max_turns": 3,
    "prompt": {"history": 0, "bare_actions": True, "examples": [["Guess a number from 1 to 8.", "4"]]},
}


def test_igpo_scores_the_ground_truth_and_trains(tmp_path):
    records = train(
        TrainConfig.from_dict({**GUESS, "estimator": "igpo", "group_size": 4, "out_dir": str(tmp_path)})
    )
    assert records[0]["update/grad_norm"] > 0 and records[0]["advantage_std"] > 0


def test_ppo_trains_policy_and_value_head(tmp_path):
    config = TrainConfig.from_dict(
        {**TINY, "estimator": "ppo", "steps": 1, "eval_tasks": 1, "out_dir": str(tmp_path)}
    )  # -0.1 a step: returns vary
    assert config.learner.value_head  # estimator=ppo turns the critic on
    records = train(config)
    assert records[0]["update/grad_norm"] > 0 and records[0]["update/vf_loss"] > 0
    weights = torch.load(tmp_path / "checkpoint" / "learner.pt", weights_only=False)["weights"]
    assert "value_head.weight" in weights


@pytest.mark.vllm
def test_vllm_generator_trains_and_serves_the_pushed_adapter(tmp_path):
    """generator=vllm: episodes come from a local vLLM server, and after each update the new
    LoRA adapter is hot-loaded into it (the policy version moves with it)."""
    records = train(
        TrainConfig.from_dict(
            {
                **TINY,
                "generator": "vllm",
                "steps": 2,
                "estimator": "reinforce_pp",
                "eval_tasks": 1,
                "out_dir": str(tmp_path),
            }
        )
    )  # returns vary by turn
    assert [r["step"] for r in records] == [0, 1]
    assert all(r["update/grad_norm"] > 0 and r["errors"] == 0 for r in records)
    assert sorted(p.name for p in (tmp_path / "pushed").iterdir())  # adapters written for vLLM
    import psutil  # the server is shut down with the run

    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if "vllm.entrypoints.openai.api_server" in " ".join(p.info["cmdline"] or [])
    ]


def test_igpo_needs_a_ground_truth(tmp_path):
    with pytest.raises(ValueError, match="needs info\\['ground_truth'\\]"):
        train(
            TrainConfig.from_dict(
                {**TINY, "estimator": "igpo", "steps": 1, "eval_tasks": 1, "out_dir": str(tmp_path)}
            )
        )


def test_spa_step_trains_and_checkpoints_its_progress_estimator(tmp_path):
    config = {**TINY, "estimator": "spa", "steps": 1, "eval_tasks": 1, "out_dir": str(tmp_path)}
    records = train(TrainConfig.from_dict(config))
    assert records[0]["update/grad_norm"] > 0 and records[0]["advantage_std"] > 0
    saved = torch.load(tmp_path / "checkpoint" / "learner.pt", weights_only=False)["extra"]
    trainer = Trainer(TrainConfig.from_dict({**config, "steps": 2, "resume": True}))
    try:
        assert trainer.start_step == 1
        restored = trainer.progress.state_dict()
        assert all(torch.equal(restored[k], saved["progress"][k]) for k in saved["progress"])
    finally:
        trainer.close()


def test_killed_run_resumes_to_the_same_parameters(tiny_run, tmp_path):
    straight, killed = tiny_run[0], tmp_path / "killed"

    # Run the CLI, kill it (SIGKILL) once step 1 is checkpointed, then resume it.
    args = [
        sys.executable,
        "-m",
        "agentgym.cli",
        "train",
        f"out_dir={killed}",
        "steps=3",
        "tasks_per_step=2",
        "group_size=2",
        "max_turns=2",
        "sampling.max_tokens=6",
        "eval_every=3",
        "eval_tasks=2",
        "progress=false",
        "+env_kwargs.dim_room=[5,5]",
        "learner.lr=1e-4",
        "learner.lora_rank=4",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    metrics = killed / "metrics.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and any(json.loads(x)["step"] == 0 for x in metrics.read_text().splitlines()):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    step, _ = final_weights(killed)
    assert step == 1  # killed after step k = 1 (0-based step 0 done), before the end
    resumed = subprocess.run([*args, "resume=true"], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (step_a, a), (step_b, b) = final_weights(straight), final_weights(killed)
    assert step_a == step_b == 3
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert steps == [-1, 0, 1, 2]


def test_bad_configuration():
    with pytest.raises(ValueError, match="unknown estimator"):
        TrainConfig.from_dict({**TINY, "estimator": "ppo2"})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="LoRA hot-load is exact"):
            TrainConfig.from_dict(
                {**TINY, "generator": "vllm", "learner": {**TINY["learner"], "lora_rank": 0}}
            )
    with pytest.raises(ValueError, match="bad prompt options"):
        TrainConfig.from_dict({**TINY, "prompt": {"histroy": 0}})
    with pytest.raises(ValueError, match="answer_template must contain"):
        TrainConfig.from_dict({**TINY, "answer_template": "<answer></answer>"})
    with pytest.raises(ValueError, match="no key 'stepz'; did you mean 'steps'\\?"):
        TrainConfig.from_dict({**TINY, "stepz": 3})
    with pytest.raises(ValueError, match="'trainer' is now 'estimator'"):
        TrainConfig.from_dict({**TINY, "trainer": "grpo"})
    with pytest.raises(ValueError, match="'max_tokens' is now 'sampling.max_tokens'"):
        TrainConfig.from_dict({**TINY, "max_tokens": 6})
    with pytest.raises(ValueError, match="sandbox must be none, local, docker or auto .*got 'podman'"):
        TrainConfig.from_dict({**TINY, "sandbox": "podman"})
    with pytest.raises(ValueError, match="sandbox=auto chooses a backend per node of a cluster"):
        TrainConfig.from_dict({**TINY, "sandbox": "auto"})
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "train", "steps=0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "steps must be >= 1" in proc.stdout
