"""Evaluation reports: ``report.html`` for one run, and a comparison of several runs.

The pages are Jinja2 templates (``templates/``: ``report.html.j2`` and ``compare.html.j2`` on
``page.html.j2``, with the repeated parts as macros in ``macros.html.j2``); this module computes
what they show (tables as rows of strings and numbers, plots) and passes it to them as plain data.
Both pages are self-contained: plots are matplotlib PNGs embedded as ``data:`` URIs, the CSS and
JS (``static/report.css``, ``static/report.js``) are inline, nothing is fetched from the network.
Every statistic is recomputed from ``episodes.jsonl`` with :mod:`agentgym.harness.stats`
(``summary.json`` may be missing or stale).

Episode text is untrusted: the templates are autoescaped and no value passed to them is marked
safe, so every string reaches the page HTML-escaped; the transcript data reaches it as a JSON
``<script>`` block (Jinja's ``tojson``: ``<``, ``>``, ``&`` and ``'`` written as ``\\u``
escapes, so no text can end the element) that the viewer inserts with ``textContent`` only. Only
the package's own static files are inlined unescaped. A lone surrogate (which UTF-8 cannot encode)
is written as its ``\\udXXX`` escape.

Episodes are grouped into *entries*: the suite entry of ``Episode.tags["entry"]``, or the
``env_id`` for runs that did not tag their episodes.

    agentgym report RUN                 writes RUN/report.html (or OUT/report.html with --out)
    agentgym report RUN1 RUN2 ...       writes OUT/compare.html and OUT/leaderboard.json
                                        (default OUT: runs/compare-<time>)
"""

from __future__ import annotations

import argparse
import base64
import functools
import io
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import numpy as np
import yaml
from markupsafe import Markup
from rich.markup import escape as markup_escape

from agentgym.console import output_console
from agentgym.episode import Episode, role_of
from agentgym.harness.ratings import INITIAL, K, game_results, rating_table
from agentgym.harness.stats import FAILURE_CATEGORIES, breakdown, failure_category, summarize
from agentgym.harness.store import RunDirError, entry_of, read_episodes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Run", "add_arguments", "compare_runs", "entry_of", "load_run", "run", "write_report"]

TEXT_LIMIT = 20_000
"""Longest text (characters) of one field embedded in the transcript viewer; longer texts are
cut, with a note of how much was left out, so that a page of thousands of episodes stays small
enough for a browser."""

_CATEGORY_COLORS = {
    "success": "#2e7d32",
    "failed": "#c62828",
    "max_turns": "#ef6c00",
    "invalid_format": "#6a1b9a",
    "infra_error": "#757575",
}


@dataclass(frozen=True)
class Run:
    """An eval run directory as read by :func:`load_run`."""

    path: Path
    config: dict[str, Any]
    """``config.yaml`` (the resolved Hydra config) as plain data."""
    episodes: list[Episode]
    skipped_lines: int
    """Lines of ``episodes.jsonl`` that are not episodes (a torn last line of a killed run)."""

    @property
    def suite(self) -> str:
        """The suite's name, else the single ``env`` of the config, else ``"-"``."""
        suite = self.config.get("suite")
        if isinstance(suite, Mapping) and suite.get("name"):
            return str(suite["name"])
        return str(self.config.get("env") or "-")

    @property
    def policy(self) -> str:
        """The policy's ``_target_`` (``"-"`` when the config has none)."""
        policy = self.config.get("policy")
        return str(policy.get("_target_") or "-") if isinstance(policy, Mapping) else "-"

    @property
    def model(self) -> str | None:
        """The policy's ``model``, when it has one."""
        policy = self.config.get("policy")
        model = policy.get("model") if isinstance(policy, Mapping) else None
        return None if model is None else str(model)


def load_run(run_dir: Path) -> Run:
    """Read ``run_dir``: its ``config.yaml`` and every parsable line of ``episodes.jsonl``.

    Raises :class:`RunDirError` (with a one-line message naming the path) when the directory
    or one of the two files is missing, or the config is not YAML.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    for name in ("episodes.jsonl", "config.yaml"):
        if not (run_dir / name).is_file():
            raise RunDirError(f"{run_dir}: not an eval run directory (no {name})")
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RunDirError(f"{run_dir / 'config.yaml'}: not YAML: {str(exc).splitlines()[0]}") from exc
    read, skipped = read_episodes(run_dir / "episodes.jsonl")
    return Run(run_dir, config if isinstance(config, dict) else {}, [e for _, e in read], skipped)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _rate_ci(summary: Mapping[str, Any]) -> str:
    """``"62.5% [30.6%, 86.3%]"``: the success rate with its 95% Wilson interval."""
    if summary["success_rate"] is None:
        return "n/a"
    low, high = summary["success_ci95"]
    return f"{summary['success_rate']:.1%} [{low:.1%}, {high:.1%}]"


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def _number(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


@functools.cache
def _environment() -> jinja2.Environment:
    """The Jinja2 environment of the pages: the package's ``templates/`` (found through the
    import system, so in an installed wheel too), autoescaping everywhere, an undefined
    variable an error, and ``tojson`` writing non-ASCII text as is in its original key order."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agentgym.harness"),
        autoescape=jinja2.select_autoescape(default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "sort_keys": False}
    env.globals["static"] = _static
    return env


_ENDS_INLINE_ELEMENT = re.compile(r"</(?:script|style)|<!--", re.IGNORECASE)


@functools.cache
def _static(name: str) -> Markup:
    """The package's ``static/<name>`` (CSS or JS), to be inlined unescaped in a ``<style>`` or
    ``<script>`` element: it must not contain text that could end (or comment out) the element."""
    text = (resources.files("agentgym.harness") / "static" / name).read_text(encoding="utf-8")
    if _ENDS_INLINE_ELEMENT.search(text):
        raise ValueError(f"static/{name} cannot be inlined: it contains </script, </style or <!--")
    return Markup(text)  # a file of this package, checked above


def _render(template: str, out: Path, **context: Any) -> None:
    """Render ``templates/<template>`` with ``context`` to ``out`` (UTF-8; a lone surrogate of
    an agent's text is written as ``\\udXXX`` rather than stopping the report)."""
    page = _environment().get_template(template).render(**context)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8", errors="backslashreplace")


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg, no pyplot state)


def _figure(width: float, height: float) -> Figure:
    # matplotlib loads with the first plot, not with the `agentgym` command.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> str:
    """``fig`` as a PNG ``data:`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _rates_and_errors(summaries: Sequence[Mapping[str, Any] | None]) -> tuple[np.ndarray, list[list[float]]]:
    """Success rates (NaN where a summary is missing or has no scored episode) and their 95%
    intervals as matplotlib's ``[2, n]`` error bars (zero where the rate is NaN).

    The error bars are a list: matplotlib 3.11 warns on a ``(2, 1)`` array (a single bar).
    """
    rated = [s if s is not None and s["success_rate"] is not None else None for s in summaries]
    rates = np.array([s["success_rate"] if s is not None else np.nan for s in rated], dtype=float)
    bounds = np.array(
        [s["success_ci95"] if s is not None else (np.nan, np.nan) for s in rated], dtype=float
    ).reshape(-1, 2)
    # abs: the interval contains the rate, up to rounding
    errors = np.abs(np.stack([rates - bounds[:, 0], bounds[:, 1] - rates]))
    return rates, np.nan_to_num(errors).tolist()


def _success_plot(rows: Mapping[str, Mapping[str, Any]], title: str) -> str:
    """Horizontal bars of the success rates of ``rows`` (label -> summary) with their 95%
    intervals as error bars; a label with no scored episode gets no bar."""
    rates, errors = _rates_and_errors(list(rows.values()))
    fig = _figure(8, 1.2 + 0.35 * len(rows))
    ax = fig.add_subplot()
    y = np.arange(len(rows))
    ax.barh(y, rates, xerr=errors, capsize=3, color="#1976d2")
    ax.set_yticks(y, list(rows))
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("success rate (95% Wilson interval)")
    ax.set_title(title)
    return _png(fig)


def _bin_edges(values: Sequence[float], most: int = 30) -> np.ndarray:
    """Histogram bins for ``values``: one per integer when they are integers spanning fewer
    than ``most``, else ``most`` (or fewer, for few distinct values) equal bins."""
    low, high = min(values), max(values)
    if all(float(v).is_integer() for v in values) and high - low < most:
        return np.arange(low - 0.5, high + 1.5)
    return np.histogram_bin_edges(values, bins=min(most, len(set(values))))


def _histograms(panels: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
    """One panel per ``title -> {entry: values}``: per-entry step histograms on shared bins."""
    fig = _figure(4.2 * len(panels), 3.2)
    for ax, (title, series) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels.items()):
        values = [v for vs in series.values() for v in vs]
        ax.set_title(title)
        if not values:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            continue
        edges = _bin_edges(values)
        for entry, vs in series.items():
            if vs:
                ax.hist(vs, bins=edges, histtype="step", linewidth=1.5, label=entry)
        ax.set_ylabel("count")
        ax.legend(fontsize="small")
    return _png(fig)


def _category_plot(by_entry: Mapping[str, Mapping[str, Any]]) -> str:
    """Horizontal stacked bars: the share of each failure category per entry."""
    labels = list(by_entry)
    fig = _figure(8, 1.4 + 0.35 * len(labels))
    ax = fig.add_subplot()
    y, left = np.arange(len(labels)), np.zeros(len(labels))
    for category in FAILURE_CATEGORIES:
        shares = np.array([s["categories"][category] / max(1, s["episodes"]) for s in by_entry.values()])
        ax.barh(y, shares, left=left, label=category, color=_CATEGORY_COLORS[category])
        left += shares
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of episodes")
    ax.legend(ncols=len(FAILURE_CATEGORIES), loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize="small")
    return _png(fig)


def _grouped_bars(entries: Sequence[str], runs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Bars of success rate per entry, one bar per run (label -> {entry: summary}), with 95%
    intervals; a run without that entry gets no bar."""
    fig = _figure(max(6.0, 1.0 + 0.5 * len(entries) * len(runs)), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(runs))
    x = np.arange(len(entries))
    for i, (label, by_entry) in enumerate(runs.items()):
        rates, errors = _rates_and_errors([by_entry.get(e) for e in entries])
        ax.bar(x + (i - (len(runs) - 1) / 2) * width, rates, width, yerr=errors, capsize=2, label=label)
    ax.set_xticks(x, entries, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("success rate (95% Wilson interval)")
    ax.legend(fontsize="small")
    return _png(fig)


# ---------------------------------------------------------------------------------------------
# Sections of report.html


def _success_section(by_entry: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Success per entry: its rows (entry, episodes, scored, infra errors, success [95% CI])
    and plot."""
    return {
        "rows": [
            (entry, s["episodes"], s["scored"], s["errors"], _rate_ci(s)) for entry, s in by_entry.items()
        ],
        "plot": _success_plot(by_entry, "success per entry"),
    }


def _task_type_section(episodes: Sequence[Episode]) -> dict[str, Any] | None:
    """Success per (entry, task type): rows (entry / task type, episodes, scored, success
    [95% CI]) and plot; None when no episode has a task type."""
    if not any(e.task_type for e in episodes):
        return None
    by_type = breakdown(episodes, lambda e: f"{entry_of(e)} / {e.task_type or '-'}")
    return {
        "rows": [(k, s["episodes"], s["scored"], _rate_ci(s)) for k, s in by_type.items()],
        "plot": _success_plot(by_type, "success per entry and task type"),
    }


def _pass_at_k_section(
    overall: Mapping[str, Any], by_entry: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """pass@k per entry and over all: its ``columns`` (``pass@k`` for every k of any group;
    none without a scored episode) and rows (entry, then one rate per column)."""
    ks = sorted({int(k) for s in (overall, *by_entry.values()) for k in s["pass_at_k"]})
    return {
        "columns": [f"pass@{k}" for k in ks],
        "rows": [
            (name, *(_pct(s["pass_at_k"].get(str(k))) for k in ks))
            for name, s in (*by_entry.items(), ("all", overall))
        ],
    }


def _distribution_section(
    scored: Sequence[Episode], by_entry: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Turns and response tokens per entry: rows (entry, mean turns, invalid actions, mean
    response tokens / episode, response tokens) and their histograms."""
    turns: dict[str, list[float]] = {entry: [] for entry in by_entry}
    tokens: dict[str, list[float]] = {entry: [] for entry in by_entry}
    for e in scored:
        turns[entry_of(e)].append(e.num_turns)
        tokens[entry_of(e)].append(sum(len(t.response_ids) for t in e.turns))
    return {
        "rows": [
            (
                entry,
                _number(s["mean_turns"]),
                _pct(s["invalid_action_rate"]),
                _number(s["mean_response_tokens"]),
                s["response_tokens"],
            )
            for entry, s in by_entry.items()
        ],
        "plot": _histograms({"turns per episode": turns, "response tokens per episode": tokens}),
    }


def _category_section(by_entry: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Outcome categories per entry: rows (entry, then a count per ``FAILURE_CATEGORIES``) and
    their plot."""
    return {
        "rows": [(entry, *(s["categories"][c] for c in FAILURE_CATEGORIES)) for entry, s in by_entry.items()],
        "plot": _category_plot(by_entry),
    }


_LATENCIES: dict[str, Callable[[Episode], list[float]]] = {
    "generate / turn": lambda e: [t.timings["generate"] for t in e.turns if "generate" in t.timings],
    "env step / turn": lambda e: [t.timings["step"] for t in e.turns if "step" in t.timings],
    "episode wall time": lambda e: [e.wall_time],
}
"""The latency measures of the report: name -> the seconds one episode contributes."""


def _latency_section(scored: Sequence[Episode], entries: Sequence[str]) -> dict[str, Any]:
    """Mean, median and 95th percentile of each of :data:`_LATENCIES`, per entry and (with
    several entries) over all scored episodes: rows (entry, measure, n, mean, p50, p95) and the
    histograms per entry."""
    values: dict[str, dict[str, list[float]]] = {
        name: {entry: [] for entry in entries} for name in _LATENCIES
    }
    for e in scored:
        for name, measure in _LATENCIES.items():
            values[name][entry_of(e)].extend(measure(e))
    rows = []
    for name, series in values.items():
        scopes = list(series.items())
        if len(scopes) > 1:
            scopes.append(("all", [v for vs in series.values() for v in vs]))
        for entry, vs in scopes:
            stats = (np.mean(vs), *np.percentile(vs, [50, 95])) if vs else (None,) * 3
            rows.append((entry, name, len(vs), *map(_seconds, stats)))
    return {"rows": rows, "plot": _histograms({f"{k} (s)": v for k, v in values.items()})}


def _roles_section(episodes: Sequence[Episode], seats: Sequence[str]) -> dict[str, Any] | None:
    """Games (episodes tagged with ``seats``): win rates per (entry, side, role), the side
    ``policy`` (or the member that played them, in a game of two league members) for the agents
    of ``seats`` (every agent when empty), else ``opponent``; the role is the last
    ``info["role"]`` of the episode's turns (``-`` without one). With a league the entry is
    ``<entry> vs <opponent>``: a row per opponent. None without games."""
    groups: dict[tuple[str, str, str], list[Episode]] = {}
    for e in episodes:
        if "seats" in e.tags:
            side = e.tags.get("player", "policy") if not seats or e.agent in seats else "opponent"
            groups.setdefault((entry_of(e), side, role_of(e) or "-"), []).append(e)
    if not groups:
        return None
    rows = []
    for key in sorted(groups):
        s = summarize(groups[key])
        rows.append((*key, s["episodes"], s["scored"], _rate_ci(s)))
    return {"rows": rows}


def _ratings_section(episodes: Sequence[Episode], seats: Sequence[str]) -> dict[str, Any] | None:
    """The Elo table (:mod:`agentgym.harness.ratings`) of the games played against named
    opponents (a league run): rows (rank, player, rating, games, mean score); None without."""
    results = game_results(episodes, lambda e: e.agent in seats)
    if not results:
        return None
    return {
        "k": f"{K:g}",
        "initial": f"{INITIAL:g}",
        "rows": [
            (i, row["player"], f"{row['rating']:.0f}", row["games"], f"{row['score']:.2f}")
            for i, row in enumerate(rating_table(results), start=1)
        ],
    }


def _clip(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    return f"{text[:TEXT_LIMIT]}\n[... {len(text) - TEXT_LIMIT} more characters not shown]"


def _episode_record(episode: Episode) -> dict[str, Any]:
    """What the transcript viewer shows of ``episode`` (long texts cut by :func:`_clip`)."""
    return {
        "id": episode.episode_id,
        "entry": entry_of(episode),
        "task_id": episode.task_id,
        "task_type": episode.task_type,
        "agent": episode.agent,
        "seed": episode.seed,
        "category": failure_category(episode),
        "outcome": episode.outcome,
        "wall_time": episode.wall_time,
        "error": episode.error,
        "failed_attempts": [_clip(a) for a in episode.failed_attempts],
        "instruction": _clip(episode.instruction),
        "turns": [
            {
                "observation": _clip(t.observation),
                "response": _clip(t.response_text),
                "action": _clip(t.action),
                "valid": t.action_valid,
                "reward": t.reward,
            }
            for t in episode.turns
        ],
    }


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the self-contained HTML report of the run in ``run_dir`` to ``out`` (default
    ``run_dir/report.html``) and return its path.

    The page has: a header (run, suite, policy, episode and error counts), success rates per
    entry and per (entry, task type) with 95% Wilson intervals, pass@k, turn and response-token
    histograms, outcome categories, latency (mean/p50/p95 of generate and env-step seconds per
    turn and of episode wall time), for games the win rates per entry, side and role, and with
    a league the Elo ratings of the policy and its opponents, and a transcript viewer of every
    episode (search, filter by outcome and entry, turns rendered on click). Raises
    :class:`RunDirError` for a directory that is not a run.
    """
    loaded = load_run(run_dir)
    out = Path(out) if out is not None else loaded.path / "report.html"
    episodes = loaded.episodes
    scored = [e for e in episodes if e.error is None]
    overall = summarize(episodes)
    by_entry = breakdown(episodes, entry_of)
    entries = list(by_entry)
    seats = [str(s) for s in loaded.config.get("seats") or []]
    header = [
        ("run", str(loaded.path)),
        ("suite", loaded.suite),
        ("policy", loaded.policy),
        ("model", loaded.model or "-"),
        ("episodes", overall["episodes"]),
        ("infra errors", overall["errors"]),
        ("retried", overall["retried"]),
        ("success", _rate_ci(overall)),
        *([("unreadable lines", loaded.skipped_lines)] if loaded.skipped_lines else []),
    ]
    stats = (
        None
        if not episodes
        else {
            "success": _success_section(by_entry),
            "by_task_type": _task_type_section(episodes),
            "pass_at_k": _pass_at_k_section(overall, by_entry),
            "distributions": _distribution_section(scored, by_entry),
            "categories": _category_section(by_entry),
            "latency": _latency_section(scored, entries),
            "roles": _roles_section(episodes, seats),
            "ratings": _ratings_section(episodes, seats),
        }
    )
    _render(
        "report.html.j2",
        out,
        title=f"agentgym report: {loaded.suite}",
        header=header,
        error_examples=[_clip(text) for text in overall["error_examples"]],
        stats=stats,
        categories=list(FAILURE_CATEGORIES),
        entries=entries,
        transcripts=[_episode_record(e) for e in episodes],
    )
    return out


# ---------------------------------------------------------------------------------------------
# Comparison of runs


def _labels(runs: Sequence[Run]) -> list[str]:
    """``"<model or policy class> (<run dir name>)"`` per run, suffixed ``#2``, ``#3`` ... where
    two runs would get the same label."""
    labels: list[str] = []
    for r in runs:
        base = f"{r.model or r.policy.rsplit('.', 1)[-1]} ({r.path.name})"
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base} #{n}"
        labels.append(label)
    return labels


def _leaderboard(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """The leaderboard rows of ``runs``, best overall success rate first (runs without a scored
    episode last; ties keep the given order)."""
    rows = []
    for label, r in zip(_labels(runs), runs):
        overall = summarize(r.episodes)
        rows.append(
            {
                "label": label,
                "run_dir": str(r.path),
                "policy": r.policy,
                "model": r.model,
                "success_rate": overall["success_rate"],
                "success_ci95": overall["success_ci95"],
                "episodes": overall["episodes"],
                "errors": overall["errors"],
                "entries": {
                    entry: {
                        "success_rate": s["success_rate"],
                        "success_ci95": s["success_ci95"],
                        "episodes": s["episodes"],
                        "errors": s["errors"],
                    }
                    for entry, s in breakdown(r.episodes, entry_of).items()
                },
            }
        )
    return sorted(rows, key=lambda row: 1.0 if row["success_rate"] is None else -row["success_rate"])


def compare_runs(run_dirs: Sequence[Path], out_dir: Path) -> tuple[Path, Path]:
    """Compare the runs in ``run_dirs``: write ``out_dir/compare.html`` (a leaderboard, success
    rate with 95% interval per entry per run, and a grouped bar plot) and
    ``out_dir/leaderboard.json`` (the runs, best overall success rate first, each with
    ``label``, ``run_dir``, ``policy``, ``model``, ``success_rate``, ``success_ci95``,
    ``episodes``, ``errors`` and ``entries``: ``{entry: {success_rate, success_ci95, episodes,
    errors}}``). Return the two paths. Raises :class:`RunDirError` for a directory that is not
    a run."""
    runs = [load_run(Path(d)) for d in run_dirs]
    board = _leaderboard(runs)
    entries = sorted({entry for row in board for entry in row["entries"]})
    leaderboard = [
        (i, row["label"], row["policy"], row["model"] or "-", _rate_ci(row), row["episodes"], row["errors"])
        for i, row in enumerate(board, start=1)
    ]
    per_entry = [
        (entry, *(_rate_ci(row["entries"][entry]) if entry in row["entries"] else "-" for row in board))
        for entry in entries
    ]
    plot = _grouped_bars(entries, {row["label"]: row["entries"] for row in board}) if entries else None
    out_dir = Path(out_dir)
    page, board_path = out_dir / "compare.html", out_dir / "leaderboard.json"
    _render(
        "compare.html.j2",
        page,
        title=f"agentgym comparison of {len(runs)} runs",
        runs=[{"label": row["label"], "run_dir": row["run_dir"]} for row in board],
        leaderboard=leaderboard,
        per_entry=per_entry,
        plot=plot,
    )
    board_path.write_text(json.dumps(board, indent=2) + "\n", encoding="utf-8")
    return page, board_path


# ---------------------------------------------------------------------------------------------
# `agentgym report`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``agentgym report`` to ``parser``."""
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="eval run directories; one: its report.html, several: a comparison",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write (default: the run's own directory for one run, runs/compare-<time> for several)",
    )


def run(args: argparse.Namespace) -> int:
    """``agentgym report``: with one run, write its ``report.html``; with several, write
    ``compare.html`` and ``leaderboard.json``. Print the written paths; return 0, or 2 with a
    one-line error on stderr when a path is not a run directory."""
    out, err = output_console(), output_console(stderr=True)
    try:
        if len(args.runs) == 1:
            paths = [write_report(args.runs[0], None if args.out is None else args.out / "report.html")]
        else:
            paths = list(
                compare_runs(
                    args.runs, args.out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
                )
            )
    except RunDirError as exc:
        err.print(f"[red]agentgym report:[/red] {markup_escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    for path in paths:
        out.print(markup_escape(str(path)), highlight=False, soft_wrap=True)
    return 0
