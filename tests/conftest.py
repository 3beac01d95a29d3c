"""How the suite runs, and the fixtures every directory may use. Tests use real components; see
the markers in pyproject.toml.

``tests/`` mirrors the package (``core/``, ``server/``, ``sandbox/``, ``hosting/``, ``harness/``,
``trainers/``, ``policies/``, ``envs/<family>/``, and ``security/``). Test modules never import
each other: what they share is in the ``support`` package (``tests/support/``, on ``sys.path``),
whose fixture modules this file loads as plugins; a directory's ``conftest.py`` holds fixtures
only its own files use.

The suite runs on several workers (pytest-xdist, ``-n`` in pyproject.toml's ``addopts``; ``-n 0``
runs it in one process). Each worker gets a temp directory of its own (``$TMPDIR``), so that what
a test leaves there, in sandboxes' host dirs, containers and processes, is told apart from what
tests on other workers are doing. Tests whose checks see a resource of the whole machine run
one after another on one worker: :func:`serial_group` names their group.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import FIXTURES, WORKER

# The fixtures that tests in several directories use (each directory's conftest.py holds those
# only its own files use).
pytest_plugins = ["support.sandboxes", "support.servers"]

if WORKER is not None:
    # before anything asks tempfile (it caches the answer); with /tmp's permissions, since the
    # desktop runs its applications as another user
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"{WORKER}-", dir=tempfile.gettempdir())
    os.chmod(os.environ["TMPDIR"], 0o1777)
    tempfile.tempdir = None
    # Torch's threads in this worker: its share of the cores. Two workers that both compute with
    # a thread per core make every parallel region wait for a descheduled thread (a small collect
    # took 13 s so, 3 s with one thread each). CLI subprocesses inherit the share through
    # OMP_NUM_THREADS (vLLM's CPU workers bind their own threads).
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    try:
        import torch
    except ImportError:
        pass
    else:
        torch.set_num_threads(_threads)

#: Test files whose tests kill owners of sandboxes and run ``agentgym sandbox gc`` (which removes
#: what any dead owner on the machine left) or fill the Docker daemon with containers.
SANDBOX_FILES = frozenset(
    {
        "test_sandbox.py",
        "test_sandbox_docker.py",
        "test_docker_hosts.py",
        "test_sandboxed_envs.py",
        "test_harness.py",
        "test_harness_image.py",
        "test_isolation.py",
    }
)


#: Test files that train the embedded model in-process: each keeps every core busy and takes a few
#: GB at its peak, so two at once only share the cores (and the memory). They form one group,
#: the longest, handed out first, while the other worker runs the tests that mostly wait
#: (browsers, desktops, containers, servers).
TRAINING_FILES = frozenset(
    {
        "test_learning.py",
        "test_async_learning.py",
        "test_search_igpo.py",
        "test_train_loop.py",
        "test_learner.py",
        "test_distributed.py",
        "test_trl.py",
    }
)


def serial_group(item: pytest.Item) -> str | None:
    """The group of tests that must not run beside each other that ``item`` belongs to:
    ``"vllm"`` (servers of 3 GB, checked for by process name machine-wide), ``"desktop"`` (X
    servers and applications, likewise), ``"sandbox"`` (:data:`SANDBOX_FILES`), ``"training"``
    (:data:`TRAINING_FILES`); ``None`` for a test that may run beside any other. Files are
    matched by name, wherever they sit under ``tests/``; each test of a group carries the
    ``xdist_group`` marker with its name."""
    if item.get_closest_marker("vllm"):
        return "vllm"
    if item.get_closest_marker("gui"):
        return "desktop"
    if item.path.name in SANDBOX_FILES:
        return "sandbox"
    return "training" if item.path.name in TRAINING_FILES else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests of :func:`serial_group` and order them: xdist (``--no-loadscope-reorder``)
    hands out groups and single tests in this order (a group where its first test stands), a
    worker taking the next one when it has at most two tests left. The training group goes
    first (the longest, on one worker from the start), then the other groups (several minutes
    each: handed out last, one of them kept a worker busy for minutes after the other was
    done), then the ``slow`` tests, so that the long work starts at once and the end is many
    short tests that even the workers out. Among equally slow tests those that need Docker go
    last, so that a group runs its other tests while ``.ci/run`` builds the images."""
    for item in items:
        if (group := serial_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(
        key=lambda item: (
            {"training": 0, None: 2}.get(serial_group(item), 1),
            item.get_closest_marker("slow") is None,
            item.get_closest_marker("docker") is not None,
        )
    )


@pytest.hookimpl(trylast=True)  # after xdist wrote the groups into the node ids
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run a worker whose tests lost their groups: xdist passes a group to its
    scheduler in the node id, which pytest 9.2 no longer lets it change (pytest-xdist#1386);
    grouped tests would then run beside each other and fail at random."""
    if WORKER is None or not session.config.getvalue("loadgroup"):
        return
    lost = [
        i.nodeid
        for i in session.items
        if serial_group(i) is not None and not i.nodeid.endswith(f"@{serial_group(i)}")
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (first: {lost[0]}): "
            "use a pytest that it supports (see pyproject.toml)"
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    if WORKER is not None:
        shutil.rmtree(tempfile.gettempdir(), ignore_errors=True)


_LIBC = ctypes.CDLL("libc.so.6") if sys.platform == "linux" else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Before the first test: move what collection made (every test module and what it
    imported: torch, transformers, ... about 730,000 objects) to the garbage collector's
    permanent generation, which no collection walks. None of it becomes garbage before the
    session ends, and a full collection took 0.4 s for it (see :func:`_free_models`)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _free_models() -> Iterator[None]:
    """After a test that ran for a second or more (one that may have built models), collect
    what its trainers and models left in reference cycles: the garbage collector runs by counts
    of objects, not bytes, so a few model-sized cycles would otherwise stay through many tests
    (a worker reached 12 GB). Quick tests skip the collection."""
    started = time.perf_counter()
    yield
    if time.perf_counter() - started >= 1.0:
        gc.collect()
        if _LIBC is not None:
            _LIBC.malloc_trim(0)  # hand the freed heap back (threads' arenas keep it otherwise)


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where the sample and the broken plugin are pip-installed; put it on PYTHONPATH."""
    target = tmp_path_factory.mktemp("plugins")
    for name in ("sample_plugin", "broken_plugin"):
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
                str(FIXTURES / name),
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return target
