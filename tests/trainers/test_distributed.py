"""The data-parallel learner on torch.distributed (gloo, on this machine's CPU): the same batch
gives the same update with 1 and 2 processes, a checkpoint written with 1 or 2 processes resumes
with the other, ``agentgym train`` runs under torchrun, and a bad launch, a failing rank 0 or a
silent one ends every rank.

The ranks run in processes of their own (torch.multiprocessing's spawn, or torchrun for
``agentgym train``), one thread each, and every start has a deadline past which its processes
are killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from agentgym.trainers.distributed import Stopped, World, is_shard, local_launch
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow
from agentgym.trainers.loop import TrainConfig

CUDA = torch.cuda.is_available()

#: A learner that exercises every weighting across the ranks: several micro-batches per rank,
#: two mini-batches (old log-probs recomputed before the first), per-row aggregation, the value
#: loss (a mean over rows), the KL to the base model and the entropy bonus.
LEARNER: dict[str, Any] = {
    "lora_rank": 2,
    "lr": 1e-3,
    "mini_batches": 2,
    "aggregation": "seq-mean-token-mean",
    "value_head": True,
    "kl_coef": 0.05,
    "entropy_coeff": 0.01,
    "micro_batch_tokens": 40,
}

#: One step of `agentgym train` on the embedded model, LoRA rank 2, as small as it gets (GiGPO:
#: the steps' rewards give advantages that are not all 0).
TINY: dict[str, Any] = {
    "env": "agentgym/Sokoban-v0",
    "env_kwargs": {"dim_room": [5, 5]},
    "estimator": "gigpo",
    "tasks_per_step": 2,
    "group_size": 2,
    "max_turns": 2,
    "sampling": {"max_tokens": 6},
    "eval_every": 100,
    "eval_tasks": 1,
    "progress": False,
    "learner": {"lr": 1e-4, "lora_rank": 2, "seed": 0, "device": "cpu"},
}


def overrides(config: dict[str, Any], prefix: str = "") -> list[str]:
    """``config`` as Hydra overrides of ``agentgym train`` (``+`` for keys of free dicts)."""
    out = []
    for key, value in config.items():
        if isinstance(value, dict) and key != "env_kwargs":
            out += overrides(value, f"{prefix}{key}.")
        elif isinstance(value, dict):
            out += [f"+{key}.{k}={v}".replace(" ", "") for k, v in value.items()]
        else:
            out.append(f"{prefix}{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def batches() -> list[list[TrainingRow]]:
    """Two updates' rows: five (three share a prompt, as a group's first turns do), then three,
    whose second mini-batch has one row: one of two ranks has no share of it."""
    rng = np.random.default_rng(0)

    def row(prompt: list[int]) -> TrainingRow:
        response = rng.integers(100, 5000, size=int(rng.integers(2, 6))).tolist()
        return TrainingRow(
            prompt,
            response,
            float(rng.normal()),
            [],
            value_target=float(rng.normal()),
            old_value=0.0,
        )

    def prompt() -> list[int]:
        return rng.integers(100, 5000, size=int(rng.integers(4, 12))).tolist()

    shared = prompt()
    return [
        [row(shared), row(shared), row(shared), row(prompt()), row(prompt())],
        [row(prompt()) for _ in range(3)],
    ]


# --- ranks in processes of their own ------------------------------------------------------------


def _rank(rank: int, env: dict[str, str], work: Callable[..., None], args: tuple[Any, ...]) -> None:
    """The body of rank ``rank``: torchrun's variables, one thread, the world, ``work``; then
    the ranks leave the group together, before the interpreter's teardown (where gloo's threads
    can crash a rank whose peer is still working: a rank of the sharded run died of SIGSEGV
    once in CI)."""
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    work(World.from_env("cpu", float(env["TIMEOUT_S"])).join(), *args)
    with contextlib.suppress(RuntimeError):  # a rank that is gone: the test reads its error
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def spawn(
    work: Callable[..., None], *args: Any, ranks: int = 2, timeout_s: float = 60, deadline_s: float = 120
) -> None:
    """Run ``work(world, *args)`` as the ranks of one gloo world of ``ranks`` processes (the
    world's collectives time out after ``timeout_s``); raise if one fails, and kill them all
    past ``deadline_s``."""
    env = {**local_launch(ranks), "TIMEOUT_S": str(timeout_s)}
    context = mp.start_processes(_rank, (env, work, args), nprocs=ranks, join=False, start_method="spawn")
    deadline = time.monotonic() + deadline_s
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ranks ran past {deadline_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join()


def save(learner: Learner, path: Path, metrics: list[dict[str, float]] | None = None) -> None:
    """Write the learner's weights, the gradient of its last optimizer step (summed over the
    ranks), its step and ``metrics`` to ``path``."""
    state = {
        "weights": {k: v.detach().clone() for k, v in learner.trainable_state().items()},
        "gradients": {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None},
        "step": learner.step,
        "metrics": metrics,
    }
    torch.save(state, path)


def _two_runs(world: World, out: Path) -> None:
    """Two runs of the ranks on :func:`batches`, each rank saving its learner after each to
    ``out/<run>-<rank>.pt``. ``fresh``: from the initial weights, an update on the first batch,
    a checkpoint (``out/ranks``), an update on the second. ``resumed``: from the one-process
    checkpoint ``out/alone``, an update on the second batch."""
    learner = Learner(LearnerConfig(**LEARNER), world)
    first, second = batches()
    if not world.is_main:
        for run in ("fresh", "resumed"):
            learner.follow()
            save(learner, out / f"{run}-1.pt")
        return
    with world.leading():
        learner.share_state()
        metrics = [learner.update(first)]
        learner.save_checkpoint(out / "ranks")
        metrics.append(learner.update(second))
    save(learner, out / "fresh-0.pt", metrics)
    learner.load_checkpoint(out / "alone")
    with world.leading():
        learner.share_state()
        learner.update(second)
    save(learner, out / "resumed-0.pt")


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch computes on one thread, as each rank does: the one-process run then sums in the
    ranks' order (with two threads, its losses differ from theirs by 1e-5 relative)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What learners saved (:func:`save`) after :func:`batches`: ``alone`` (one process, a
    checkpoint after the first batch), ``fresh-0``/``fresh-1`` and ``resumed-0``/``resumed-1``
    (:func:`_two_runs`), ``2-1`` (one process resuming the two ranks' checkpoint), and the
    one-process checkpoint's bytes (``alone-checkpoint``)."""
    out = tmp_path_factory.mktemp("ranks")
    with one_thread():
        alone = Learner(LearnerConfig(**LEARNER))
        first, second = batches()
        metrics = [alone.update(first)]
        alone.save_checkpoint(out / "alone")
        metrics.append(alone.update(second))
        save(alone, out / "alone.pt", metrics)
        spawn(_two_runs, out)
        alone.load_checkpoint(out / "ranks")
        alone.update(second)
        save(alone, out / "2-1.pt")
    saved = {path.stem: torch.load(path, weights_only=False) for path in out.glob("*.pt")}
    return {**saved, "alone-checkpoint": (out / "alone" / "learner.pt").read_bytes()}


#: The KL to the base model is a mean of differences of two nearly equal log-probs, each with
#: float32 noise of about 1e-6 nats that depends on the shapes of the micro-batches (which the
#: ranks split differently): 1.5e-6 apart seen, 2.5e-5 relative.
KL_NOISE = 5e-6


def assert_same_weights(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal to float tolerance. Adam's first steps move a weight by about lr = 1e-3 whatever its
    gradient's size, also where the gradient is near 0 and float noise sets its sign: in one
    process, changing only the order of the sums (another micro-batch budget) moves weights by up
    to 4e-5, and one element of 1,152 ended 3e-4 apart between one process and two ranks."""
    assert got["step"] == expected["step"]
    for k, value in expected["weights"].items():
        torch.testing.assert_close(got["weights"][k], value, rtol=1e-3, atol=5e-4)


@pytest.mark.slow
def test_two_ranks_update_as_one(runs):
    """The update of two gloo ranks equals one process's: at every optimizer step the same
    gradient (its norm; the last one whole) and losses, the whole batch's and not a rank's, and
    in the end the same weights, on both ranks."""
    alone, ours, theirs = runs["alone"], runs["fresh-0"], runs["fresh-1"]
    assert alone["step"] == 4  # 2 updates x 2 mini-batches
    for got, expected in zip(ours["metrics"], alone["metrics"], strict=True):
        for key in ("loss", "pg_loss", "vf_loss", "kl", "entropy", "grad_norm", "tokens"):
            noise = KL_NOISE if key == "kl" else 1e-7
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=noise), key
    scale = max(g.abs().max() for g in alone["gradients"].values())
    for name, gradient in alone["gradients"].items():
        torch.testing.assert_close(ours["gradients"][name], gradient, rtol=1e-3, atol=1e-4 * float(scale))
        assert torch.equal(ours["gradients"][name], theirs["gradients"][name])
    assert all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in ours["weights"])
    assert_same_weights(ours, alone)


@pytest.mark.slow
def test_checkpoints_resume_across_world_sizes(runs):
    """A checkpoint of two ranks resumed in one process, and one of one process resumed on two
    ranks (both take rank 0's resumed state), end where the uninterrupted run does."""
    assert_same_weights(runs["2-1"], runs["alone"])
    assert_same_weights(runs["resumed-0"], runs["alone"])
    assert_same_weights(runs["resumed-1"], runs["resumed-0"])


def _sharded_runs(world: World, out: Path) -> None:
    """:func:`_two_runs` with the model sharded over the ranks (``fsdp``): ``sharded-fresh``
    and ``sharded-resumed`` (rank 0's learner, whose weights the ranks gather together), a
    checkpoint ``out/sharded`` after the first batch, and the adapter a push would write after
    the second (``out/adapter``)."""
    learner = Learner(LearnerConfig(**LEARNER, fsdp=True), world)
    shards = [p for p in learner.model.parameters() if is_shard(p)]
    assert learner.sharded and len(shards) == len(list(learner.model.parameters()))
    assert all(p.to_local().shape[0] == -(-p.shape[0] // 2) - world.rank * (p.shape[0] % 2) for p in shards)
    first, second = batches()
    if not world.is_main:
        learner.follow()  # until rank 0 stops: its every call that runs the model runs here too
        learner.follow()
        return
    with world.leading():
        learner.share_state()
        metrics = [learner.update(first)]
        learner.save_checkpoint(out / "sharded")
        metrics.append(learner.update(second))
        torch.save(
            {"weights": learner.trainable_state(), "step": learner.step, "metrics": metrics},
            out / "sharded-fresh.pt",
        )
        learner.save_pretrained(out / "adapter")  # what a weight push writes
    with world.leading():
        learner.load_checkpoint(out / "alone")
        learner.update(second)
        torch.save({"weights": learner.trainable_state(), "step": learner.step}, out / "sharded-resumed.pt")


@pytest.mark.slow
def test_sharded_ranks_update_as_one_and_resume_across_world_sizes(runs, tmp_path):
    """learner.fsdp: two ranks that each hold half of every parameter (FSDP2) update as one
    process does (the same losses and gradient norm at every optimizer step, the same weights);
    a one-process checkpoint resumes on them, and theirs in one process."""
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "learner.pt").write_bytes(runs["alone-checkpoint"])
    spawn(_sharded_runs, tmp_path)
    alone = runs["alone"]
    fresh, resumed = (
        torch.load(tmp_path / f"sharded-{run}.pt", weights_only=False) for run in ("fresh", "resumed")
    )
    # rel 1e-4: sharded ranks run each row whole, one process shares the prompts' passes
    for got, expected in zip(fresh["metrics"], alone["metrics"], strict=True):
        for key in ("loss", "pg_loss", "vf_loss", "kl", "entropy", "grad_norm", "tokens"):
            assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-7), key
    assert_same_weights(fresh, alone)
    assert_same_weights(resumed, alone)
    pushed = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert pushed.keys() == {k for k in fresh["weights"] if not k.startswith("value_head.")}
    assert all(torch.equal(pushed[k], fresh["weights"][k]) for k in pushed)
    one = Learner(LearnerConfig(**LEARNER))
    one.load_checkpoint(tmp_path / "sharded")
    one.update(batches()[1])
    assert_same_weights({"weights": one.trainable_state(), "step": one.step}, alone)


# --- agentgym train under torchrun ------------------------------------------------------------------


def torchrun(ranks: int, config: dict[str, Any], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """``agentgym train`` with ``config`` under torchrun with ``ranks`` processes on this
    machine, one thread each; its process group is killed past ``timeout_s``."""
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    args += ["-m", "agentgym.cli", "train", *overrides(config)]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun ran past {timeout_s} s:\n{out}")
    return subprocess.CompletedProcess(args, proc.returncode, out)


def left_running(marker: str) -> list[psutil.Process]:
    """Processes whose command line holds ``marker``."""
    return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


@pytest.mark.slow
def test_agentgym_train_under_torchrun(tmp_path):
    """Two ranks run one step of `agentgym train`: rank 0 alone logs, evaluates and writes the
    checkpoint; both ranks end when it is done."""
    done = torchrun(2, {**TINY, "steps": 1, "out_dir": tmp_path})
    assert done.returncode == 0, done.stdout
    assert done.stdout.count("agentgym train: done") == 1, done.stdout
    records = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [-1, 0]
    assert records[1]["update/grad_norm"] > 0 and records[1]["eval_success"] is not None
    state = torch.load(tmp_path / "checkpoint" / "learner.pt", weights_only=False)
    assert state["step"] == 1 and state["extra"]["step"] == 1
    assert not left_running(str(tmp_path))


# --- bad launches and failing ranks ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="needs a machine without CUDA")
def test_nccl_without_cuda_fails_every_rank_at_once(tmp_path):
    """learner.device=cuda (NCCL) on a CPU-only machine: a rank refuses the configuration before
    loading anything, torchrun stops the other (which may not have got as far as saying so
    too), and nothing is left running."""
    started = time.monotonic()
    done = torchrun(2, {**TINY, "steps": 1, "out_dir": tmp_path, "learner": {"device": "cuda"}})
    assert done.returncode != 0
    assert done.stdout.count("bad configuration: learner.device=cuda trains on the GPUs with NCCL") >= 1
    assert "use learner.device=cpu (gloo)" in done.stdout
    assert time.monotonic() - started < 60
    assert not (tmp_path / "checkpoint").exists()
    assert not left_running(str(tmp_path))


def test_sharding_refuses_what_runs_the_model_on_rank_0_alone():
    for setting, named in (
        ({"generator": "hf"}, "generator=hf"),
        ({"generator": "vllm", "estimator": "igpo", "env": "agentgym/SearchQA-v0"}, "estimator=igpo"),
        ({"generator": "vllm", "compare_with": "spa"}, "compare_with=spa"),
    ):
        with pytest.raises(
            ValueError, match=f"learner.fsdp=true shards the model over the ranks, and {named} would"
        ):
            TrainConfig.from_dict({**TINY, **setting, "learner": {**TINY["learner"], "fsdp": True}})
    TrainConfig.from_dict({**TINY, "generator": "vllm", "learner": {**TINY["learner"], "fsdp": True}})


def test_bad_launch_environment(monkeypatch):
    """What torchrun would set, set wrong: each a clear error, before any process group."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert World.from_env("cuda:3") == World()  # one process: as without torchrun
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not: start the ranks"):
        World.from_env()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match=r"RANK=2 and LOCAL_RANK=0 must be in \[0, WORLD_SIZE=2\)"):
        World.from_env("cpu")
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK must be an integer, got 'one'"):
        World.from_env("cpu")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="cpu \\(gloo\\) or cuda \\(NCCL\\), not 'meta'"):
        World.from_env("meta")
    with pytest.raises(ValueError, match="timeout must be > 0 s"):
        World.from_env("cpu", timeout_s=0)
    if not CUDA:
        with pytest.raises(ValueError, match="no CUDA device: use learner.device=cpu"):
            TrainConfig.from_dict({**TINY, "learner": {"device": "cuda"}})
    assert World.from_env("cpu") == World(1, 2, 0, "gloo")
    with pytest.raises(ValueError, match="dist_timeout_s must be > 0"):
        LearnerConfig(dist_timeout_s=-1)


def test_shares_cover_every_item_once_and_balance_tokens():
    weights = [30, 5, 5, 20, 10, 10, 20]
    shares = [World(r, 3, r, "gloo").share(weights) for r in range(3)]
    assert shares == [[0, 1], [2, 3, 4], [5, 6]]  # contiguous, 35 / 35 / 30 tokens
    assert [World(r, 3, r, "gloo").share([7]) for r in range(3)] == [[], [0], []]  # fewer items than ranks
    assert World().share(weights) == list(range(7))


def _fail_or_follow(world: World, out: Path) -> None:
    """Rank 0's run fails (an injected error); the other rank waits for work."""
    if world.is_main:
        with contextlib.suppress(KeyError), world.leading():
            raise KeyError("injected")
        (out / "0").write_text("failed")
    else:
        try:
            world.receive()
        except Stopped:
            (out / "1").write_text("stopped")


def test_a_failing_rank_0_stops_the_others(tmp_path):
    started = time.monotonic()
    spawn(_fail_or_follow, tmp_path, timeout_s=300)
    assert time.monotonic() - started < 60  # rank 1 did not wait out its timeout
    assert (tmp_path / "0").read_text() == "failed" and (tmp_path / "1").read_text() == "stopped"


def _silent(world: World, out: Path) -> None:
    """Rank 0 sends nothing for longer than the world's timeout; the other rank waits for work."""
    if world.is_main:
        time.sleep(2 * world.timeout_s)
        return
    try:
        world.receive()
    except RuntimeError as exc:
        (out / "error").write_text(str(exc))


def test_a_silent_rank_0_times_the_others_out(tmp_path):
    started = time.monotonic()
    spawn(_silent, tmp_path, timeout_s=1)
    error = (tmp_path / "error").read_text()
    assert "rank 1: rank 0 sent no work within 1 s (learner.dist_timeout_s)" in error
    assert time.monotonic() - started < 30
