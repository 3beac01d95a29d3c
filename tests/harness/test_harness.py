"""The eval harness (``agentgym eval``): suites, the resumable run store, retries of
infrastructure errors, sandboxed runs that match in-process ones, exit codes, and bad input.

Runs are real: real envs, real sandboxes (bubblewrap and Docker), real subprocesses killed with
SIGKILL. The only stand-ins are policies that inject faults (they kill sandboxes, or are slow
enough for a kill to land mid-run).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from agentgym.episode import Episode, load_episodes
from agentgym.harness.eval import (
    EvalConfig,
    EvalSetupError,
    SamplingConfig,
    compose_eval_config,
    run_eval,
    run_eval_cli,
)
from agentgym.harness.stats import failure_category
from agentgym.harness.store import RunConfigMismatch, RunDirError, unit_key
from agentgym.harness.suite import SuiteError, available_suites, suite_from_config
from agentgym.policies.scripted import RandomPolicy
from agentgym.policy import Generation, GenerationRequest, SamplingParams
from agentgym.sandbox.base import HOST_DIR_PREFIX
from agentgym.sandbox.owner import Owner

from support import ROOT, TESTS
from support.sandboxes import descendants

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: What a subprocess puts on its path to import this module's policies (``test_harness.X``).
PYTHONPATH = os.pathsep.join(
    [str(Path(__file__).resolve().parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
)
CLI = [sys.executable, "-m", "agentgym.cli", "eval"]


# --- fault-injecting policies (importable by name: `policy._target_=test_harness.X`) ------------


class SlowRandomPolicy(RandomPolicy):
    """:class:`RandomPolicy` that takes ``delay`` seconds per call, so that a kill lands
    mid-run."""

    inline = False  # its generate awaits

    def __init__(self, seed: int | None = None, delay: float = 0.02):
        super().__init__(seed)
        self.delay = delay

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        await asyncio.sleep(self.delay)
        return await super().generate(requests)


def kill_my_sandboxes() -> int:
    """SIGKILL every env server this process runs in a sandbox (docker: kill its container);
    returns how many."""
    from agentgym.sandbox.docker import docker_client

    killed = 0
    try:
        api = docker_client().api
        mine = api.containers(filters={"label": f"agentgym.owner.pid={os.getpid()}"})
    except Exception:  # no daemon here: no containers either
        mine = []
    for c in mine:
        api.kill(c["Id"])
        killed += 1
    for pid in descendants(os.getpid()):
        try:
            if b"agentgym.server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
                killed += 1
        except OSError:
            pass
    return killed


class SandboxKiller(RandomPolicy):
    """:class:`RandomPolicy` that kills this process's sandboxes at its ``at``-th call, and at
    every ``every``-th call after (``every=0``: once)."""

    inline = False  # its generate awaits

    def __init__(self, seed: int | None = None, at: int = 3, every: int = 0):
        super().__init__(seed)
        self.at, self.every, self.calls, self.kills = at, every, 0, 0

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.calls += 1
        due = self.calls - self.at
        if due == 0 or (self.every and due > 0 and due % self.every == 0):
            self.kills += await asyncio.to_thread(kill_my_sandboxes)
        return await super().generate(requests)


# --- helpers ------------------------------------------------------------------------------------


def evaluate(out: Path, *overrides: str) -> tuple[Path, dict[str, Any]]:
    cfg = compose_eval_config([f"out_dir={out}", "progress=false", "report=false", *overrides])
    return asyncio.run(run_eval(cfg))


def outcomes(run: Path) -> dict[str, tuple[Any, ...]]:
    """What each stored unit's episodes did, by unit key (asserting each is stored once)."""
    found: dict[str, tuple[Any, ...]] = {}
    for e in load_episodes(run / "episodes.jsonl"):
        key = f"{unit_key(e)}/{e.agent}"
        assert key not in found, f"{key} stored twice"
        found[key] = (e.success, e.outcome, [t.action for t in e.turns], e.error)
    return found


def cli(tmp_path: Path, *overrides: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "COLUMNS": "200"}
    return subprocess.run(
        [*CLI, "progress=false", *overrides],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=env,
    )


# --- suites -------------------------------------------------------------------------------------


def test_smoke_suite_runs_every_entry_and_resumes(tmp_path: Path) -> None:
    out, summary = evaluate(tmp_path / "run", "suite=smoke")
    suite = suite_from_config(yaml.safe_load((out / "config.yaml").read_text()))
    assert list(summary["entries"]) == [e.name for e in suite.entries]
    assert {e.env.split("/")[1] for e in suite.entries} >= {"Sokoban-v0", "Werewolf-v0"}
    assert summary["complete"] and summary["planned"] == suite.units == summary["episodes"]
    for entry in suite.entries:
        stats = summary["entries"][entry.name]
        assert stats["episodes"] == stats["planned"] == entry.units and stats["errors"] == 0
        assert sum(stats["categories"].values()) == entry.units
    episodes = load_episodes(out / "episodes.jsonl")
    assert {e.tags["entry"] for e in episodes} == {e.name for e in suite.entries}
    assert summary["entries"]["household"]["task_types"]  # Household names its task types
    first = outcomes(out)
    _, again = evaluate(tmp_path / "run", "suite=smoke", "concurrency=3")  # concurrency: not a result
    assert again["resumed"] == {"kept": suite.units, "retried": 0, "torn": 0}
    assert outcomes(out) == first and again["episodes"] == summary["episodes"]


def test_suite_entries_take_missing_keys_from_the_top_level() -> None:
    config = {
        "env": "agentgym/Sokoban-v0",
        "env_kwargs": {},
        "seed": 7,
        "tasks": 3,
        "group_size": 2,
        "max_turns": 9,
        "task_ids": [],
        "suite": {
            "name": "mine",
            "entries": [
                {"env": "agentgym/GuessNumber-v0"},
                {"name": "two", "env": "agentgym/Sokoban-v0", "max_turns": 4, "env_kwargs": {"num_boxes": 2}},
            ],
        },
    }
    suite = suite_from_config(config)
    first, second = suite.entries
    assert (first.name, first.seed, first.tasks, first.group_size, first.max_turns) == (
        "agentgym/GuessNumber-v0",
        7,
        3,
        2,
        9,
    )
    assert (second.max_turns, second.env_kwargs) == (4, {"num_boxes": 2})
    assert suite.units == 12
    full = suite_from_config({**config, "suite": {"name": "full", "include": ["textgames", "werewolf"]}})
    parts = [
        suite_from_config(
            {**config, "suite": yaml.safe_load((ROOT / "agentgym/conf/suite" / f"{n}.yaml").read_text())}
        )
        for n in ("textgames", "werewolf")
    ]
    assert full.entries == parts[0].entries + parts[1].entries
    assert {"smoke", "textgames", "werewolf", "full"} <= set(available_suites())


@pytest.mark.parametrize(
    "suite, message",
    [
        ({"name": "s", "entries": [{"env": "agentgym/Nope-v0"}]}, "unknown env 'agentgym/Nope-v0'"),
        (
            {"name": "s", "entries": [{"env": "agentgym/Sokoban-v0", "boxes": 2}]},
            r"unknown key\(s\) \['boxes'\]",
        ),
        (
            {"name": "s", "entries": [{"env": "agentgym/Sokoban-v0"}, {"env": "agentgym/Sokoban-v0"}]},
            "entry names must be unique",
        ),
        ({"name": "s", "entries": [{"env": "agentgym/Sokoban-v0", "games": True}]}, "not a multi-agent env"),
        (
            {"name": "s", "entries": [{"env": "agentgym/Sokoban-v0", "tasks": 0}]},
            "tasks must be an integer >= 1",
        ),
        ({"name": "s", "include": ["nosuch"]}, "unknown suite 'nosuch'"),
        ({"name": "s", "entries": []}, "has no entries"),
        (
            {"name": "s", "entries": [{"env": "agentgym/Sokoban-v0", "episodes": 2}]},
            "suite s, entry 0: 'episodes' is now 'tasks'",
        ),  # an old name names the new one
        (
            {"name": "s", "entries": [{"env": "agentgym/Sokoban-v0", "max_turn": 2}]},
            r"unknown key\(s\) \['max_turn'\] \(did you mean 'max_turn' -> 'max_turns'\?\)",
        ),
    ],
)
def test_bad_suites_are_clear_errors(suite: dict[str, Any], message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        suite_from_config(
            {
                "env": "x",
                "env_kwargs": {},
                "seed": 0,
                "tasks": 1,
                "group_size": 1,
                "max_turns": 1,
                "task_ids": [],
                "suite": suite,
            }
        )


def test_a_config_with_an_old_key_names_the_new_one() -> None:
    with pytest.raises(SuiteError, match="'episodes' is now 'tasks'"):
        suite_from_config({"env": "agentgym/Sokoban-v0", "episodes": 2})


# --- bad input on the command line ------------------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        # each old name is an error that names the new one
        ("workers=4", "'workers' is now 'concurrency'"),
        ("max_retries=1", "'max_retries' is now 'retries'"),
        ("episodes=8", "'episodes' is now 'tasks'"),
        ("max_steps=50", "'max_steps' is now 'max_game_steps'"),
        ("+workers=4", "'workers' is now 'concurrency'"),  # adding it is no way around
        # in a suite entry too (the suite's own check, or Hydra's override of the entry)
        ("suite.entries.0.episodes=3", "'episodes' is now 'tasks'"),
        # a wrong type names the key
        ("tasks=abc", "bad value for 'tasks': Value 'abc' of type 'str' could not be converted to Integer"),
        ("sampling.temperature=hot", "bad value for 'sampling.temperature'"),
        ("report=maybe", "bad value for 'report'"),
        # a misspelled key names the nearest real one, at any depth
        ("concurency=4", "no key 'concurency'; did you mean 'concurrency'?"),
        ("sampling.temprature=0", "no key 'sampling.temprature'; did you mean 'sampling.temperature'?"),
        ("max_tokens=32", "no key 'max_tokens'; did you mean 'sampling.max_tokens'?"),
        ("policy.modle=x", "no key 'policy.modle'; did you mean 'policy.model'?"),
        ("polcy=hf", "no key 'polcy'; did you mean 'policy'?"),
    ],
)
def test_bad_overrides_name_the_key(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    extra = (
        ["suite=smoke"]
        if override.startswith("suite.")
        else ["policy=hf"]
        if override.startswith("policy.")
        else []
    )
    assert run_eval_cli([*extra, override]) == 2
    captured = capsys.readouterr()
    assert message in captured.err.replace("\n", "")
    assert captured.out.startswith("agentgym eval: error bad configuration: ")
    assert message in captured.out


def test_the_eval_schema_types_the_config() -> None:
    cfg = compose_eval_config(
        ["tasks=3", "sampling.stop=[END]", "+env_kwargs.num_boxes=2", "seats=[player_1]"]
    )
    assert cfg.tasks == 3 and list(cfg.sampling.stop) == ["END"] and cfg.seats == ["player_1"]
    assert OmegaConf.get_type(cfg) is EvalConfig
    params = SamplingConfig.of(cfg.sampling).params(temperature=0.0)
    assert params == SamplingParams(max_tokens=256, temperature=0.0, stop=("END",))
    # the YAML holds no key and no default of its own: the dataclass has them all
    raw = yaml.safe_load((ROOT / "agentgym/conf/eval.yaml").read_text())
    assert set(raw) == {"defaults"} and raw["defaults"][0] == "eval_schema"
    composed = OmegaConf.to_container(compose_eval_config(["policy=random"]))
    assert isinstance(composed, dict) and composed["tasks"] == EvalConfig.tasks == 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_exits_2_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def status(*overrides: str) -> tuple[int, str, str]:
        code = run_eval_cli(["progress=false", *overrides])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = status("suite=nosuch", f"out_dir={tmp_path / 'a'}")
    assert code == 2 and "Could not find 'suite/nosuch'" in err
    assert out.strip().splitlines()[-1].startswith("agentgym eval: error bad configuration")
    code, out, err = status("env=agentgym/Nope-v0", f"out_dir={tmp_path / 'b'}")
    assert code == 2 and "unknown env 'agentgym/Nope-v0'" in err
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, out, err = status("suite=smoke", f"out_dir={blocker / 'run'}")
    assert code == 2 and "cannot write the run directory" in err
    code, out, err = status("suite=smoke", "out_dir=/proc/agentgym-run")
    assert code == 2 and "cannot write the run directory /proc/agentgym-run" in err
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    code, out, err = status(
        "suite=smoke", "policy=vllm", f"policy.base_url={url}", f"out_dir={tmp_path / 'c'}"
    )
    assert code == 2 and url in err.replace("\n", "")
    assert time.monotonic() - started < 30  # said at once, not after a retry schedule
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert not (tmp_path / "c").exists()  # a run that could not start leaves no directory
    code, out, err = status("suite=smoke", "sandbox=podman", f"out_dir={tmp_path / 'd'}")
    assert code == 2 and "sandbox must be none, local, docker or auto (with a cluster)" in err
    code, out, err = status("suite=smoke", "sandbox=auto", f"out_dir={tmp_path / 'e'}")
    assert code == 2 and "sandbox=auto chooses a backend per node of a cluster" in err


def test_a_changed_config_is_refused_and_the_run_kept(tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate(run, "env=agentgym/GuessNumber-v0", "tasks=4")
    before = (run / "episodes.jsonl").read_bytes()
    with pytest.raises(RunConfigMismatch, match=r"max_turns: 30 -> 5.*refusing to mix"):
        evaluate(run, "env=agentgym/GuessNumber-v0", "tasks=4", "max_turns=5")
    with pytest.raises(RunConfigMismatch, match="env: 'agentgym/GuessNumber-v0' -> "):
        evaluate(run, "env=agentgym/Household-v0", "tasks=4")
    assert (run / "episodes.jsonl").read_bytes() == before
    assert "max_turns: 30" in (run / "config.yaml").read_text()
    _, summary = evaluate(run, "env=agentgym/GuessNumber-v0", "tasks=4", "concurrency=1")
    assert summary["resumed"]["kept"] == 4  # how it runs may change


def test_the_same_command_resumes_into_the_same_directory(tmp_path: Path) -> None:
    first = cli(tmp_path, "suite=smoke")
    assert first.returncode == 0, first.stderr
    line = first.stdout.strip().splitlines()[-1]
    assert line.startswith("agentgym eval: ok suite=smoke episodes=10 ") and "complete=true" in line
    run = tmp_path / line.rsplit("run=", 1)[1]
    assert run.parent == tmp_path / "runs" / "eval" and (run / "report.html").exists()
    second = cli(tmp_path, "suite=smoke")
    assert second.stdout.strip().splitlines()[-1] == line
    assert json.loads((run / "summary.json").read_text())["resumed"]["kept"] == 10
    other = cli(tmp_path, "suite=smoke", "max_turns=3")  # entries that set max_turns keep it
    assert other.returncode == 0 and "run=runs/eval/smoke-RandomPolicy-" in other.stdout
    assert other.stdout.strip().rsplit("run=", 1)[1] != line.rsplit("run=", 1)[1]


# --- the store: torn lines, errored units, SIGKILL -------------------------------------------


def test_torn_line_and_errored_episode_are_repaired(tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate(run, "suite=smoke")
    clean = outcomes(run)
    lines = (run / "episodes.jsonl").read_text().splitlines()
    broken = json.loads(lines[2])
    broken["error"], broken["success"] = "step failed: EnvServerUnavailable: gone", False
    lines[2] = json.dumps(broken)
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n" + lines[3][: len(lines[3]) // 2])
    _, summary = evaluate(run, "suite=smoke")
    assert summary["resumed"] == {"kept": 9, "retried": 1, "torn": 1}
    assert outcomes(run) == clean  # the errored one ran again; the torn copy is gone
    assert (run / "episodes.jsonl").read_text().endswith("}\n")


def test_kill_9_at_random_moments_loses_only_episodes_in_flight(tmp_path: Path) -> None:
    policy = [
        "policy._target_=test_harness.SlowRandomPolicy",
        "+policy.delay=0.01",
        "suite=textgames",
        "concurrency=4",
        "report=false",
    ]
    reference = tmp_path / "reference"
    evaluate(reference, *policy)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    rng, kills, seen = random.Random(7), 0, []
    for _ in range(4):
        proc = subprocess.Popen(
            [*CLI, "progress=false", f"out_dir={run}", *policy],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            target = rng.randint(5, 40)  # episodes this invocation adds before its kill
            start = _lines(run)
            deadline = time.monotonic() + 120
            while _lines(run) - start < target and proc.poll() is None:
                assert time.monotonic() < deadline, "no progress"
                time.sleep(rng.uniform(0.001, 0.02))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = (run / "episodes.jsonl").read_text()
        seen.append(len(text.splitlines()))
        for line in text.splitlines()[:-1]:  # only the last line may be torn
            Episode.from_dict(json.loads(line))
    assert kills >= 3 and seen == sorted(seen)
    _, summary = evaluate(run, *policy)
    assert summary["complete"] and summary["errors"] == 0
    assert outcomes(run) == outcomes(reference)  # every episode exactly once, as a clean run


def test_a_resumed_sandboxed_run_reclaims_what_the_killed_one_left(bwrap: None, tmp_path: Path) -> None:
    """SIGKILL leaves the run's sandbox dirs (and cgroups) behind; the resume removes them."""
    run = tmp_path / "run"
    args = [
        "env=agentgym/Sokoban-v0",
        "tasks=8",
        "max_turns=6",
        "concurrency=2",
        "sandbox=local",
        "policy._target_=test_harness.SlowRandomPolicy",
        "+policy.delay=0.05",
        "report=false",
    ]
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.Popen(
        [*CLI, "progress=false", f"out_dir={run}", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while _lines(run) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    owners = {
        p: Owner.from_tag(p.name[len(HOST_DIR_PREFIX) :])
        for p in Path(tempfile.gettempdir()).glob(f"{HOST_DIR_PREFIX}*")
    }
    left = [p for p, owner in owners.items() if owner is not None and owner.pid == proc.pid]
    assert left, "the killed run left no sandbox dir: nothing to reclaim"
    _, summary = evaluate(run, *args)
    assert summary["complete"] and summary["errors"] == 0
    assert not any(p.exists() for p in left)


def _lines(run: Path) -> int:
    try:
        return (run / "episodes.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# --- sandboxes: retries, infrastructure errors, the same outcomes as in-process -------------


def test_a_killed_sandbox_is_retried_and_recorded(backend: str, tmp_path: Path) -> None:
    out, summary = evaluate(
        tmp_path / "run",
        "env=agentgym/Sokoban-v0",
        "tasks=8",
        "max_turns=6",
        "concurrency=4",
        f"sandbox={backend}",
        "sandbox_sessions=4",
        "retries=2",
        "policy._target_=test_harness.SandboxKiller",
        "+policy.at=6",
    )
    episodes = load_episodes(out / "episodes.jsonl")
    retried = [e for e in episodes if e.failed_attempts]
    assert summary["errors"] == 0 and summary["complete"] and len(episodes) == 8
    # The kill takes every sandbox of this process (the one in use and the warm spare): the
    # episodes in flight (at most 4), and any begun on a killed server before a call found it
    # dead, are run again, each from its start.
    assert 1 <= len(retried) < 8 and summary["retried"] == len(retried)
    for e in retried:
        assert "EnvServerUnavailable" in e.failed_attempts[0] and e.error is None
        assert "is dead" in e.failed_attempts[0] or "exited" in e.failed_attempts[0]
    clean = outcomes(
        evaluate(tmp_path / "clean", "env=agentgym/Sokoban-v0", "tasks=8", "max_turns=6", "concurrency=4")[0]
    )
    assert outcomes(out) == clean  # a retry replays the episode from its start


def test_exceeding_the_retry_limit_is_an_infrastructure_error(
    bwrap: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_eval_cli(
        [
            f"out_dir={tmp_path / 'run'}",
            "progress=false",
            "env=agentgym/GuessNumber-v0",
            "tasks=2",
            "concurrency=2",
            "sandbox=local",
            "retries=1",
            "policy._target_=test_harness.SandboxKiller",
            "+policy.at=1",
            "+policy.every=1",
        ]
    )
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3 and line.startswith("agentgym eval: infra-errors ") and "infra_errors=2" in line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scored"] == 0 and summary["success_rate"] is None
    assert summary["categories"]["infra_error"] == 2 and summary["categories"]["failed"] == 0
    for e in load_episodes(tmp_path / "run" / "episodes.jsonl"):
        assert e.error and len(e.failed_attempts) == 1 and failure_category(e) == "infra_error"
    assert (
        run_eval_cli(
            [
                f"out_dir={tmp_path / 'run'}",
                "progress=false",
                "env=agentgym/GuessNumber-v0",
                "tasks=2",
                "concurrency=2",
                "retries=1",
                "max_infra_errors=1.0",
                "policy._target_=test_harness.SandboxKiller",
                "+policy.at=1",
                "+policy.every=1",
            ]
        )
        == 0
    )  # resumed in-process: the errored ones ran


@pytest.mark.docker
def test_docker_suite_gives_the_in_process_outcomes(current_textgames_image: str, tmp_path: Path) -> None:
    run = ["suite=smoke", "policy=random", "concurrency=4"]
    out, summary = evaluate(tmp_path / "docker", *run, "sandbox=docker", "sandbox_sessions=2")
    assert summary["errors"] == 0 and summary["complete"]
    families = {e.env_id for e in load_episodes(out / "episodes.jsonl")}
    assert {"agentgym/Sokoban-v0", "agentgym/Werewolf-v0"} <= families  # two families
    assert outcomes(out) == outcomes(evaluate(tmp_path / "local", *run)[0])


def test_games_entries_refuse_a_sandbox(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="run in this process"):
        evaluate(tmp_path / "run", "env=agentgym/Werewolf-v0", "sandbox=local")
    with pytest.raises(EvalSetupError, match="set `opponent`"):
        evaluate(tmp_path / "run2", "env=agentgym/Werewolf-v0", "seats=[player_1]")
    assert not (tmp_path / "run").exists()


def test_unwritable_directory_error_type(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError):
        evaluate(tmp_path / "file" / "run", "env=agentgym/GuessNumber-v0")
