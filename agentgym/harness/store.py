"""The results store of an eval run: one directory, safe to kill at any moment, resumable.

Layout::

    RUN/config.yaml      the resolved config of the run (written before the first episode)
    RUN/episodes.jsonl   one Episode per line, appended and fsynced as units finish
    RUN/summary.json     statistics, rewritten (atomically) at the end of every run

A *unit* is what the engine runs and what is stored or retried as one: an episode
(single-agent) or a whole game (multi-agent: every seat's episode). Its key is
``"{entry}::{group}#{member}"``: the suite entry, the group (:func:`agentgym.rollout.group_id`)
and the member index. A unit's lines are written by one ``write`` followed by ``fsync``, so a
process killed with SIGKILL loses at most the units in flight, and leaves at most one torn line
at the end of the file.

Opening a run directory that holds a run (:meth:`RunStore.open`) resumes it: a torn or
unreadable line is dropped; units whose episodes carry an infrastructure error, or that are
incomplete, are dropped too (they run again); the file is rewritten with the rest (to a
temporary file, then renamed, so that a kill during the rewrite leaves the old or the new file,
both valid). A run directory whose config differs from the new one in a key that changes
results is refused (:class:`RunConfigMismatch`): the episodes of two configs never mix.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentgym.episode import Episode, episode_json
from agentgym.files import atomic_write

__all__ = [
    "RESULT_NEUTRAL_KEYS",
    "RunConfigMismatch",
    "RunDirError",
    "RunStore",
    "config_diff",
    "entry_of",
    "read_episodes",
    "unit_key",
]

RESULT_NEUTRAL_KEYS = frozenset(
    {
        "concurrency",
        "progress",
        "out_dir",
        "sandbox",
        "sandbox_warm",
        "sandbox_sessions",
        "docker_hosts",
        "cluster",
        "retries",
        "max_infra_errors",
        "report",
        "policy.base_url",
        "policy.timeout",
        "policy.max_retries",
        "policy.cooldown",
        "policy.backoff",
        "policy.server",
        "policy.api_key_env",
        "policy.check_model",
        "policy.max_concurrency",
        "policy.max_batch_size",
        "policy.device",
    }
)
"""Config keys (dotted) that change how a run is executed, not its results: a resumed run may
change them."""


class RunDirError(OSError):
    """A run directory cannot be used: it cannot be created or written (eval), or it is not a
    readable run (report)."""


class RunConfigMismatch(ValueError):
    """The run directory holds a run of another config; :attr:`differences` lists how."""

    def __init__(self, path: Path, differences: list[str]):
        self.differences = differences
        shown = "; ".join(differences[:8]) + (" ..." if len(differences) > 8 else "")
        super().__init__(
            f"{path} holds a run of a different config ({shown}); refusing to mix their "
            "episodes: pass another out_dir, or delete that directory to start over"
        )


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every dotted key whose value differs, except
    :data:`RESULT_NEUTRAL_KEYS`."""
    a, b = _flatten(old), _flatten(new)
    return [
        f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k)
        and k not in RESULT_NEUTRAL_KEYS
        and not any(k.startswith(n + ".") for n in RESULT_NEUTRAL_KEYS)
    ]


def entry_of(episode: Episode) -> str:
    """The suite entry that ran ``episode`` (``tags["entry"]``; its env id for episodes saved
    without one)."""
    return episode.tags.get("entry", episode.env_id)


def read_episodes(path: Path) -> tuple[list[tuple[str, Episode]], int]:
    """The readable lines of a run's ``episodes.jsonl`` as ``(line, episode)`` pairs, and how
    many lines were dropped: unreadable ones, and a last line without its newline (a write cut
    short by a kill). A missing file reads as empty."""
    raw = path.read_bytes() if path.exists() else b""
    read, dropped = [], int(bool(raw) and not raw.endswith(b"\n"))
    for line in raw.split(b"\n")[:-1]:  # after the last newline: a torn line or nothing
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
            read.append((text, Episode.from_dict(json.loads(text))))
        except (UnicodeDecodeError, ValueError, TypeError, AttributeError):
            dropped += 1
    return read, dropped


def unit_key(episode: Episode) -> str:
    """The key of the unit ``episode`` belongs to (see the module documentation). Game episodes
    (``tags["seats"]`` set) drop their agent from the group."""
    entry = entry_of(episode)
    group, _, member = episode.episode_id.rpartition("#")
    if "seats" in episode.tags:
        group = group.removesuffix(f"|{episode.agent}")
    return f"{entry}::{group}#{member}"


def _complete(episodes: Sequence[Episode]) -> bool:
    """A unit counts as done: all its episodes there (every seat of a game), none errored."""
    size = int(episodes[0].tags.get("seats", 1))
    return len({e.agent for e in episodes}) == size and all(e.error is None for e in episodes)


@dataclass
class Resumed:
    """What :meth:`RunStore.open` found in an existing run."""

    kept: int = 0
    """Units kept (finished before)."""
    retried: int = 0
    """Units dropped to run again (infrastructure error, or incomplete)."""
    torn: int = 0
    """Torn or unreadable lines dropped."""


class RunStore:
    """The run directory ``path``; open it with :meth:`open`."""

    def __init__(self, path: Path, done: dict[str, list[Episode]], resumed: Resumed | None):
        self.path = path
        self.done = done
        """Finished units by key; grows with :meth:`append`."""
        self.resumed = resumed
        """``None`` for a new run."""

    @property
    def episodes_path(self) -> Path:
        return self.path / "episodes.jsonl"

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: Mapping[str, Any]) -> RunStore:
        """Create the run directory ``path``, or resume the run in it.

        Raises :class:`RunDirError` if it cannot be created or written, and
        :class:`RunConfigMismatch` if it holds a run of a config that differs from ``config``
        (a plain, resolved mapping) in a key that changes results.
        """
        path = Path(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise RunDirError(f"cannot write the run directory {path}: {exc.strerror or exc}") from exc
        previous = path / "config.yaml"
        resumed = None
        if previous.exists():
            old = yaml.safe_load(previous.read_text(encoding="utf-8")) or {}
            differences = config_diff(old, config)
            if differences:
                raise RunConfigMismatch(path, differences)
            resumed = Resumed()
        atomic_write(previous, yaml.safe_dump(dict(config), sort_keys=False), fsync=True)
        done = cls._recover(path / "episodes.jsonl", resumed) if resumed else {}
        if resumed is None:
            atomic_write(path / "episodes.jsonl", "", fsync=True)
        return cls(path, done, resumed)

    @staticmethod
    def _recover(file: Path, resumed: Resumed) -> dict[str, list[Episode]]:
        """The finished units of ``file``, which is rewritten to hold exactly them."""
        units: dict[str, list[Episode]] = defaultdict(list)
        lines: dict[str, list[str]] = defaultdict(list)
        read, resumed.torn = read_episodes(file)
        for text, episode in read:
            key = unit_key(episode)
            units[key].append(episode)
            lines[key].append(text)
        done = {k: eps for k, eps in units.items() if _complete(eps)}
        resumed.kept, resumed.retried = len(done), len(units) - len(done)
        atomic_write(file, "".join(line + "\n" for k in done for line in lines[k]), fsync=True)
        return dict(done)

    def append(self, episodes: Iterable[Episode]) -> None:
        """Append one unit's episodes with one write and fsync. Errored units are stored too (the
        summary counts them); the next :meth:`open` drops them to run again."""
        episodes = list(episodes)
        data = "".join(episode_json(e) + "\n" for e in episodes)
        with open(self.episodes_path, "a", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if episodes and _complete(episodes):
            self.done[unit_key(episodes[0])] = episodes

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomic_write(self.path / "summary.json", json.dumps(summary, indent=2) + "\n", fsync=True)
