"""The harness image (``containers/harness``): a whole evaluation is one ``docker run`` that
starts the env sandboxes as sibling containers through the host's Docker socket and writes its
results to a mounted directory; the host's ``agentgym sandbox gc`` spares a running harness's
sandboxes and removes a killed one's; ``docker stop`` lets the harness remove them itself.

Runs the harness as the recipe in the Dockerfile does: as this user (so that the results, and
the sandboxes' files under the shared directory, belong to it), with the socket's group, and
with a short host directory mounted at the same path as ``$AGENTGYM_SANDBOX_ROOT``. Builds the
harness image (and the text games' image) if missing or built from other sources (~25 s each).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentgym
from agentgym.sandbox import build_images

from support import unavailable
from support.sandboxes import eventually

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

SOCKET = "/var/run/docker.sock"
EVAL = [
    "eval",
    "env=agentgym/GuessNumber-v0",
    "policy=random",
    "sandbox=docker",
    "max_turns=4",
    "progress=false",
]
LONG_RUN = "tasks=5000"  # minutes of work: still running when a test stops or kills it


@pytest.fixture(scope="session")
def harness_image(client: Any, base_image: str, current_textgames_image: str) -> str:
    """The harness image, rebuilt if it runs other sources than this checkout's (with the text
    games' image it starts, likewise up to date)."""
    build_images(["harness"], base_image=base_image, client=client, stale_only=True)
    return f"agentgym/harness:{agentgym.__version__}"


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A host directory for the sandboxes' host directories, short enough for socket paths;
    empty again at the end of the test."""
    root = Path(tempfile.mkdtemp(prefix="agh-", dir="/tmp"))
    try:
        yield root
        assert not list(root.iterdir()), "sandbox host directories were left behind"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def start_harness(client: Any, harness_image: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``start(*args, root=None)``: a detached harness container running ``agentgym *args`` as
    this user, with the Docker socket, ``tmp_path/out`` at ``/out`` and, given ``root``, that
    directory at the same path as ``$AGENTGYM_SANDBOX_ROOT``. Removed at the end of the test."""
    if not os.path.exists(SOCKET):
        unavailable(f"the harness needs the daemon's socket at {SOCKET}")
    started = []

    def start(*args: str, root: Path | None = None) -> Any:
        volumes = {
            SOCKET: {"bind": SOCKET, "mode": "rw"},
            str(tmp_path / "out"): {"bind": "/out", "mode": "rw"},
        }
        environment = {}
        if root is not None:
            volumes[str(root)] = {"bind": str(root), "mode": "rw"}
            environment["AGENTGYM_SANDBOX_ROOT"] = str(root)
        (tmp_path / "out").mkdir(exist_ok=True)
        container = client.containers.run(
            harness_image,
            list(args),
            detach=True,
            name=f"agentgym-harness-test-{secrets.token_hex(4)}",
            user=f"{os.getuid()}:{os.getgid()}",
            group_add=[str(os.stat(SOCKET).st_gid)],
            volumes=volumes,
            environment=environment,
        )
        started.append(container)
        return container

    yield start
    for container in started:
        container.remove(force=True)


def sandboxes_of(client: Any, harness: Any) -> list[str]:
    """Names of the sandbox containers that ``harness`` created and that still exist."""
    found = client.api.containers(all=True, filters={"label": f"agentgym.owner.container={harness.id}"})
    return [c["Names"][0].lstrip("/") for c in found]


def host_gc(root: Path) -> str:
    """``agentgym sandbox gc`` on the host, looking under ``root`` too; its report."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "sandbox", "gc"],
        check=False,
        text=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "AGENTGYM_SANDBOX_ROOT": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_harness_image_runs_an_eval_against_the_host_daemon(
    client: Any, start_harness: Callable[..., Any], shared_root: Path, tmp_path: Path
) -> None:
    since = time.time()
    harness = start_harness(
        "eval",
        "suite=smoke",
        "policy=random",
        "sandbox=docker",
        "progress=false",
        "out_dir=/out/run",
        root=shared_root,
    )
    status = harness.wait(timeout=300)["StatusCode"]
    logs = harness.logs().decode(errors="replace")
    assert status == 0, logs
    # stdout alone: docker copies the two streams separately, so their interleaving is not kept.
    stdout = harness.logs(stderr=False).decode(errors="replace")
    assert stdout.strip().splitlines()[-1].startswith("agentgym eval: ok suite=smoke episodes=10 ")
    run = tmp_path / "out" / "run"
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 10 and all(e["error"] is None and e["turns"] for e in episodes), logs
    assert {e["env_id"] for e in episodes} >= {"agentgym/Sokoban-v0", "agentgym/Werewolf-v0"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 10 and summary["errors"] == 0 and summary["complete"]
    assert (run / "report.html").stat().st_size > 0 and (run / "config.yaml").exists()
    assert {p.stat().st_uid for p in run.rglob("*")} == {os.getuid()}  # the user's, removable
    # The envs ran in sibling containers that the harness created (and removed) itself.
    created = client.events(
        since=since,
        until=time.time(),
        decode=True,
        filters={"type": "container", "event": "create", "label": f"agentgym.owner.container={harness.id}"},
    )
    assert list(created), "the harness started no env sandbox containers"
    assert sandboxes_of(client, harness) == []


def test_host_gc_spares_a_running_harness_and_cleans_up_after_a_killed_one(
    client: Any, start_harness: Callable[..., Any], shared_root: Path
) -> None:
    harness = start_harness(*EVAL, LONG_RUN, "out_dir=/out/run", root=shared_root)
    eventually(lambda: bool(sandboxes_of(client, harness)), timeout_s=120)
    running = sandboxes_of(client, harness)
    report = host_gc(shared_root)
    assert not any(name in report for name in running), report  # a live owner's: spared
    assert not any(str(shared_root) in line for line in report.splitlines()), report
    harness.kill()  # failure injection: no exit hook runs
    harness.wait(timeout=60)
    left = sandboxes_of(client, harness)
    assert left  # left behind ...
    report = host_gc(shared_root)
    assert all(f"container {name}" in report for name in left), report  # ... until gc
    assert sandboxes_of(client, harness) == []  # (and shared_root is empty: see the fixture)


def test_docker_stop_lets_the_harness_remove_its_sandboxes(
    client: Any, start_harness: Callable[..., Any], shared_root: Path
) -> None:
    harness = start_harness(*EVAL, LONG_RUN, "out_dir=/out/run", root=shared_root)
    eventually(lambda: bool(sandboxes_of(client, harness)), timeout_s=120)
    harness.stop(timeout=30)  # SIGTERM, handled like Ctrl-C; SIGKILL only after 30 s
    status = harness.wait(timeout=60)["StatusCode"]
    assert status == 143, harness.logs().decode(errors="replace")  # SIGTERM, not killed
    assert sandboxes_of(client, harness) == []


def test_harness_without_a_shared_directory_says_how_to_mount_one(
    client: Any, start_harness: Callable[..., Any]
) -> None:
    harness = start_harness(*EVAL, "tasks=1", "out_dir=/out/run")
    status = harness.wait(timeout=300)["StatusCode"]
    logs = harness.logs().decode(errors="replace")
    assert status != 0 and "-v $D:$D -e AGENTGYM_SANDBOX_ROOT=$D" in logs, logs
    assert sandboxes_of(client, harness) == []
