"""Atomic writes (agentgym/files.py): the target holds the old content or the new, whole, and no
temporary is left behind."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from agentgym.files import atomic_path, atomic_write


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_replaces_the_content(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    atomic_write(path, b"\x00old")
    assert path.read_bytes() == b"\x00old"
    atomic_write(path, "n\u00e9w\n")
    assert path.read_bytes() == "n\u00e9w\n".encode()
    atomic_write(path, "n\u00e9w", encoding="latin-1")
    assert path.read_bytes() == b"n\xe9w"
    assert list(tmp_path.iterdir()) == [path]


def test_atomic_write_sets_the_mode_less_the_umask(tmp_path: Path) -> None:
    atomic_write(tmp_path / "plain", "x")
    atomic_write(tmp_path / "private", "x", mode=0o600)
    assert _mode(tmp_path / "plain") == 0o666 & ~_umask()
    assert _mode(tmp_path / "private") == 0o600 & ~_umask()
    (tmp_path / "was-private").write_text("old")
    (tmp_path / "was-private").chmod(0o600)
    atomic_write(tmp_path / "was-private", "new")
    assert _mode(tmp_path / "was-private") == 0o666 & ~_umask()


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, "new" * 10_000, fsync=True)
    assert path.read_text() == "old"
    assert list(tmp_path.iterdir()) == [path]


def test_fsync_flushes_the_file_and_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "a", "x")
    assert synced == []
    atomic_write(tmp_path / "a", "y", fsync=True)
    assert synced == [False, True]  # the file before the rename, the directory after it


def test_readers_see_the_old_or_the_new_content_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    versions = [bytes([k]) * 200_000 for k in range(2)]
    atomic_write(path, versions[0])
    seen: set[bytes] = set()
    done = threading.Event()

    def read() -> None:
        while True:
            seen.add(path.read_bytes())
            if done.is_set():
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for k in range(60):
            atomic_write(path, versions[k % 2])
    finally:
        done.set()
        reader.join()
    assert seen and seen <= set(versions)


def test_atomic_path_moves_a_file_into_place(tmp_path: Path) -> None:
    path = tmp_path / "learner.pt"
    path.write_bytes(b"old")
    with atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".learner.pt.")
        assert not tmp.exists()
        tmp.write_bytes(b"new")
        assert path.read_bytes() == b"old"
    assert path.read_bytes() == b"new"
    assert _mode(path) == 0o666 & ~_umask()  # as if written in place
    assert list(tmp_path.iterdir()) == [path]


def test_a_failed_atomic_path_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "curve.png"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="midway"), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("midway")
    assert path.read_bytes() == b"old"
    assert list(tmp_path.iterdir()) == [path]


def test_atomic_path_builds_a_directory_in_place(tmp_path: Path) -> None:
    out = tmp_path / "index"
    with atomic_path(out, mkdir=True) as tmp:
        assert tmp.is_dir() and not any(tmp.iterdir())
        assert _mode(tmp) == 0o700 & ~_umask()
        (tmp / "sub").mkdir()
        (tmp / "sub" / "data").write_text("x")
        assert not out.exists()
    assert (out / "sub" / "data").read_text() == "x"
    assert list(tmp_path.iterdir()) == [out]


def test_a_failed_directory_is_removed_with_its_contents(tmp_path: Path) -> None:
    out = tmp_path / "index"
    out.mkdir()
    (out / "old").write_text("old")
    with pytest.raises(ValueError, match="midway"), atomic_path(out, mkdir=True) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "data").write_text("x")
        raise ValueError("midway")
    assert [p.name for p in out.iterdir()] == ["old"]
    assert list(tmp_path.iterdir()) == [out]


def test_a_directory_does_not_replace_a_full_one(tmp_path: Path) -> None:
    """The rename fails on a non-empty directory (another writer finished first): both stay as
    they were, the temporary is removed. The body may remove the old directory itself."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("theirs")
    with pytest.raises(OSError), atomic_path(out, mkdir=True) as tmp:
        (tmp / "config.json").write_text("ours")
    assert (out / "config.json").read_text() == "theirs"
    assert list(tmp_path.iterdir()) == [out]
