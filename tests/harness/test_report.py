"""Evaluation reports (``agentgym.harness.report``): the statistics on the page, escaping of
untrusted episode text, the comparison and leaderboard, ``agentgym report``'s exit codes, and the
pages as headless Chromium renders them with the network blocked.

The browser tests (marker ``browser``) need Chromium at /usr/lib/chromium/chromium and the
Playwright package; without them they skip, except under CI (``$CI`` set), where that is a
failure.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agentgym.episode import Episode, Turn, save_episodes
from agentgym.harness.report import (
    add_arguments,
    compare_runs,
    entry_of,
    load_run,
    run,
    write_report,
)
from agentgym.harness.stats import breakdown, summarize
from agentgym.policies.scripted import RandomPolicy
from agentgym.rollout import collect, default_tasks

XSS = "<script>alert(1)</script> </script><script>alert(2)</script> <img src=x onerror=alert(3)> <!-- "
CONFIG = """\
policy:
  _target_: agentgym.policies.hf.HFPolicy
  model: smollm2-135m
suite:
  name: mini-suite
  entries:
    - {name: guess, env: agentgym/GuessNumber-v0}
    - {name: sokoban, env: agentgym/Sokoban-v0}
"""
PLOTS = 5  # success per entry, per task type, turn/token histograms, categories, latency


def _turn(action: str = "4", observation: str = "Guess a number.", response: str | None = None) -> Turn:
    return Turn(
        observation=observation,
        action=action,
        action_valid=bool(action),
        reward=0.0,
        response_text=f"<action>{action}</action>" if response is None else response,
        response_ids=[1, 2, 3],
        timings={"generate": 0.02, "step": 0.001},
    )


def _episode(
    entry: str,
    group: str,
    member: int,
    category: str,
    *,
    task_type: str = "",
    instruction: str = "Find the number.",
    turns: list[Turn] | None = None,
    **fields: Any,
) -> Episode:
    """An episode of ``category`` (one of ``FAILURE_CATEGORIES``) in suite entry ``entry``."""
    turns = turns if turns is not None else [_turn(), _turn()]
    if category == "invalid_format":
        turns = [_turn(action="", response="no idea") for _ in turns]
    return Episode(
        episode_id=f"{group}#{member}",
        env_id=f"agentgym/{entry.title()}-v0",
        task_id=group,
        group_id=group,
        seed=0,
        instruction=instruction,
        task_type=task_type,
        turns=turns,
        success=category == "success",
        terminated=category in ("success", "failed"),
        truncated=category in ("max_turns", "invalid_format", "infra_error"),
        outcome=float(category == "success"),
        error=f"env crashed: {XSS}" if category == "infra_error" else None,
        wall_time=0.05 * (member + 1),
        tags={"entry": entry},
        **fields,
    )


def synthetic_episodes() -> list[Episode]:
    """Twelve episodes in two entries and three groups of four.

    guess/easy: 3 successes, 1 failed; guess/hard: 1 success, 2 max_turns, 1 infra error;
    sokoban: 1 success, 2 invalid_format, 1 failed (retried once, untrusted text everywhere).
    "zebra" appears in one instruction, one response and one observation.
    """
    return [
        _episode("guess", "easy", 0, "success", task_type="easy", instruction="Find the zebra."),
        _episode("guess", "easy", 1, "success", task_type="easy"),
        _episode("guess", "easy", 2, "success", task_type="easy"),
        _episode("guess", "easy", 3, "failed", task_type="easy"),
        _episode("guess", "hard", 0, "success", task_type="hard"),
        _episode(
            "guess",
            "hard",
            1,
            "max_turns",
            task_type="hard",
            turns=[_turn(response="I see a Zebra <action>4</action>")],
        ),
        _episode("guess", "hard", 2, "max_turns", task_type="hard"),
        _episode("guess", "hard", 3, "infra_error", task_type="hard"),
        _episode("sokoban", "sok", 0, "success", turns=[_turn("up", "a zebra crossing")]),
        _episode("sokoban", "sok", 1, "invalid_format"),
        _episode("sokoban", "sok", 2, "invalid_format"),
        _episode(
            "sokoban",
            "sok",
            3,
            "failed",
            instruction=f"Push the box. {XSS}",
            turns=[_turn("left", f"You see {XSS}", f"{XSS}<action>left</action>")] * 3,
            failed_attempts=[f"timeout {XSS}"],
        ),
    ]


def _make_run(path: Path, episodes: list[Episode], config: str = CONFIG) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(config, encoding="utf-8")
    save_episodes(path / "episodes.jsonl", episodes)
    return path


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    """A run of :func:`synthetic_episodes` whose last line was torn by a killed process."""
    path = _make_run(tmp_path / "synthetic", synthetic_episodes())
    with open(path / "episodes.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"episode_id": "torn", "env_id": "agentgym/Gue')
    return path


@pytest.fixture
def real_run(tmp_path: Path) -> Path:
    """A run of the real rollout engine: RandomPolicy on GuessNumber, 4 tasks x 2 episodes."""
    # In a thread of its own: while the browser fixture is up, Playwright's sync API holds an
    # event loop in this thread, where collect's asyncio.run cannot start another.
    with ThreadPoolExecutor(1) as worker:
        episodes = worker.submit(
            collect,
            "agentgym/GuessNumber-v0",
            RandomPolicy(seed=0),
            default_tasks(4),
            group_size=2,
            progress=False,
        ).result()
    return _make_run(
        tmp_path / "real",
        episodes,
        config=(
            "env: agentgym/GuessNumber-v0\n"
            "policy: {_target_: agentgym.policies.scripted.RandomPolicy, seed: 0}\n"
        ),
    )


def _row(*cells: str) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


# ---------------------------------------------------------------------------------------------
# The page's content


def test_load_run_skips_torn_line_and_reads_config(synthetic_run: Path) -> None:
    loaded = load_run(synthetic_run)
    assert len(loaded.episodes) == 12 and loaded.skipped_lines == 1
    assert (loaded.suite, loaded.policy, loaded.model) == (
        "mini-suite",
        "agentgym.policies.hf.HFPolicy",
        "smollm2-135m",
    )


def test_report_statistics(synthetic_run: Path) -> None:
    page = write_report(synthetic_run).read_text(encoding="utf-8")
    assert (synthetic_run / "report.html").is_file()
    # success per entry (episodes, scored, infra errors, rate [Wilson 95%]) and per task type
    assert _row("guess", "8", "7", "1", "57.1% [25.0%, 84.2%]") in page
    assert _row("sokoban", "4", "4", "0", "25.0% [4.6%, 69.9%]") in page
    assert _row("guess / easy", "4", "4", "75.0% [30.1%, 95.4%]") in page
    assert _row("guess / hard", "4", "3", "33.3% [6.1%, 79.2%]") in page
    assert "<dd>45.5% [21.3%, 72.0%]</dd>" in page  # overall, in the header
    assert "<dd>mini-suite</dd>" in page and "<dd>smollm2-135m</dd>" in page
    assert "<dt>unreadable lines</dt><dd>1</dd>" in page
    # pass@1, @2, @4 over all groups: mean(3/4, 1/3, 1/4); mean(1, 2/3, 1/2); mean(1, 1)
    assert _row("all", "44.4%", "72.2%", "100.0%") in page
    # categories: success, failed, max_turns, invalid_format, infra_error
    assert _row("guess", "4", "1", "2", "0", "1") in page
    assert _row("sokoban", "1", "1", "0", "2", "0") in page
    # latency of the scored episodes' turns: 21 turns at 20 ms generate
    assert _row("all", "generate / turn", "21", "20.0 ms", "20.0 ms", "20.0 ms") in page
    assert page.count('<img src="data:image/png;base64,') == PLOTS


def test_report_escapes_untrusted_text(synthetic_run: Path) -> None:
    page = write_report(synthetic_run).read_text(encoding="utf-8")
    # the viewer's JSON and its code: no other script element, and none closed by episode text
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "<img src=x" not in page and "<!-- " not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the infra error text, escaped
    data = re.search(r'<script type="application/json" id="episode-data">(.*?)</script>', page, re.DOTALL)
    assert data is not None
    records = json.loads(data.group(1))
    assert len(records) == 12 and records[11]["instruction"] == f"Push the box. {XSS}"
    assert records[11]["failed_attempts"] == [f"timeout {XSS}"]


HOSTILE = (
    "<script>alert(1)</script> \"><img src=x onerror=alert(2)> '><svg onload=alert(3)> "
    "\ud800 </pre></textarea>{{ 7*7 }} &amp; <style>body{background:url(http://x.test)}"
)
"""Agent text that would inject markup (in text and in both kinds of quoted attribute), close
the element it is in, or be re-evaluated by a template, with a lone surrogate."""
ENTRY = '"><img src=x onerror=alert(4)>'
"""A suite entry's name that would inject markup in an attribute (short: it labels plots)."""
PAGE_TAGS = {
    "html",
    "head",
    "meta",
    "link",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "h3",
    "dl",
    "dt",
    "dd",
    "pre",
    "section",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "img",
    "p",
    "div",
    "input",
    "select",
    "option",
    "span",
    "ol",
    "button",
    "script",
    "ul",
    "li",
}


class _Elements(HTMLParser):
    """The start tags of a page with their attributes, and its text outside script and style
    (character references decoded, as a browser shows it)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.in_code = tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self.in_code = False

    def handle_data(self, data: str) -> None:
        if not self.in_code:
            self.text.append(data)


def _elements(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


def test_report_escapes_hostile_text_and_is_self_contained(tmp_path: Path) -> None:
    """Hostile text everywhere an agent (or its env) puts text: it shows as text, nothing is
    injected, the lone surrogate is written as ``\\ud800`` (and the transcript data keeps it),
    and the page loads nothing but ``data:`` URIs."""
    turn = _turn(action=f"act {HOSTILE}", observation=f"obs {HOSTILE}", response=f"resp {HOSTILE}")
    episodes = [
        _episode(
            ENTRY,
            f"task {HOSTILE}",
            0,
            "failed",
            task_type='type "><img src=x onerror=alert(9)>',
            instruction=f"inst {HOSTILE}",
            turns=[turn],
            failed_attempts=[f"attempt {HOSTILE}"],
            agent=f"agent {HOSTILE}",
        ),
        _episode("guess", "g", 0, "infra_error"),
    ]
    episodes[1].error = f"error {HOSTILE}"  # (in the page header: an error example)
    run_dir = _make_run(
        tmp_path / "hostile",
        episodes,
        config=(
            "policy: {_target_: '<script>alert(10)</script>', model: '\"><img src=x>'}\n"
            "suite: {name: '</title><script>alert(11)</script>'}\n"
        ),
    )
    raw = write_report(run_dir).read_bytes()
    page = raw.decode("utf-8")  # strict: the surrogate was escaped, not written as is

    # nothing injected: only the page's own elements, no event handler, two script elements
    elements = _elements(page)
    assert {tag for tag, _ in elements.tags} <= PAGE_TAGS
    assert not [(tag, name) for tag, attrs in elements.tags for name in attrs if name.startswith("on")]
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert page.count("<style") == 1
    assert "<img src=x" not in page and "<svg" not in page and "</textarea>" not in page
    # ... but shown as text: in the header (from the config) and the infrastructure error
    text = "".join(elements.text)
    assert "error " + HOSTILE.replace("\ud800", "\\ud800") in text
    assert "</title><script>alert(11)</script>" in text and '"><img src=x>' in text
    assert "<script>alert(10)</script>" in text and "{{ 7*7 }}" in text  # not evaluated
    # in attribute values: the entry filter's options (the entry name, unchanged)
    options = [attrs["value"] for tag, attrs in elements.tags if tag == "option"]
    assert ENTRY in options
    # the transcript data: as JSON that no text can end, the surrogate kept exactly
    data = re.search(r'<script type="application/json" id="episode-data">(.*?)</script>', page, re.DOTALL)
    assert data is not None and "<" not in data.group(1) and "\\ud800" in data.group(1)
    records = json.loads(data.group(1))
    assert records[0]["instruction"] == f"inst {HOSTILE}"
    assert records[0]["task_id"] == f"task {HOSTILE}" and records[0]["agent"] == f"agent {HOSTILE}"
    assert records[0]["turns"] == [
        {
            "observation": f"obs {HOSTILE}",
            "response": f"resp {HOSTILE}",
            "action": f"act {HOSTILE}",
            "valid": True,
            "reward": 0.0,
        }
    ]
    assert records[0]["failed_attempts"] == [f"attempt {HOSTILE}"]

    # self-contained: every URL a data: URI, no CSS url()/@import, no script src
    urls = [
        value or ""
        for tag, attrs in elements.tags
        for name, value in attrs.items()
        if name in ("src", "href", "srcset", "action", "formaction", "poster", "data")
    ]
    assert urls and all(url.startswith("data:") for url in urls), urls
    (css,) = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert "url(" not in css and "@import" not in css
    assert all(attrs.get("src") is None for tag, attrs in elements.tags if tag == "script")
    assert not re.search(
        r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", page.replace("http://x.test", ""), re.IGNORECASE
    )


def test_report_templates_are_package_data_and_strict() -> None:
    """The templates and static files are found through the package (as in an installed
    wheel), and a template given too little data fails instead of showing blanks."""
    from importlib import resources

    import jinja2

    from agentgym.harness import report

    package = resources.files("agentgym.harness")
    for name in (
        "templates/page.html.j2",
        "templates/macros.html.j2",
        "templates/report.html.j2",
        "templates/compare.html.j2",
        "static/report.css",
        "static/report.js",
    ):
        assert (package / name).is_file(), name
    env = report._environment()
    assert isinstance(env.loader, jinja2.PackageLoader)
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("report.html.j2").render(title="t")
    assert str(env.from_string("{{ x }}").render(x="<b>")) == "&lt;b&gt;"  # autoescaped


def test_report_of_an_empty_run(tmp_path: Path) -> None:
    path = _make_run(tmp_path / "empty", [])
    page = write_report(path, tmp_path / "out" / "page.html").read_text(encoding="utf-8")
    assert "<dd>0</dd>" in page and "<img" not in page


def test_compare_runs_leaderboard(synthetic_run: Path, real_run: Path, tmp_path: Path) -> None:
    errors_only = _make_run(tmp_path / "down", [_episode("guess", "g", i, "infra_error") for i in range(3)])
    page, board_path = compare_runs([real_run, errors_only, synthetic_run], tmp_path / "cmp")
    board = json.loads(board_path.read_text(encoding="utf-8"))
    real = summarize(load_run(real_run).episodes)
    ranked = sorted(
        [("smollm2-135m (synthetic)", 5 / 11), ("RandomPolicy (real)", real["success_rate"])],
        key=lambda pair: -pair[1],
    )
    assert [row["label"] for row in board] == [*(label for label, _ in ranked), "smollm2-135m (down)"]
    synthetic = next(row for row in board if row["run_dir"] == str(synthetic_run))
    assert synthetic["policy"] == "agentgym.policies.hf.HFPolicy"
    assert synthetic["model"] == "smollm2-135m"
    assert (synthetic["episodes"], synthetic["errors"]) == (12, 1)
    assert synthetic["success_rate"] == pytest.approx(5 / 11)
    assert synthetic["entries"]["sokoban"]["success_rate"] == 0.25
    assert board[-1]["success_rate"] is None and board[-1]["errors"] == 3
    by_entry = breakdown(load_run(real_run).episodes, entry_of)
    assert (
        set(board[[r["run_dir"] for r in board].index(str(real_run))]["entries"])
        == set(by_entry)
        == {"agentgym/GuessNumber-v0"}
    )
    html = page.read_text(encoding="utf-8")
    assert "57.1% [25.0%, 84.2%]" in html and html.count("<img") == 1


# ---------------------------------------------------------------------------------------------
# `agentgym report`


def _report(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="agentgym report")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def test_cli_one_run(synthetic_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _report(str(synthetic_run)) == 0
    assert str(synthetic_run / "report.html") in capsys.readouterr().out
    assert _report(str(synthetic_run), "--out", str(tmp_path / "elsewhere")) == 0
    assert (tmp_path / "elsewhere" / "report.html").is_file()


def test_cli_several_runs(
    synthetic_run: Path,
    real_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _report(str(synthetic_run), str(real_run)) == 0
    (out,) = (tmp_path / "runs").glob("compare-*")
    printed = capsys.readouterr().out
    assert str(Path("runs") / out.name / "compare.html") in printed
    assert str(Path("runs") / out.name / "leaderboard.json") in printed
    board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert {row["run_dir"] for row in board} == {str(synthetic_run), str(real_run)}
    rates = [row["success_rate"] for row in board]
    assert rates == sorted(rates, reverse=True)
    assert not (synthetic_run / "report.html").exists()


@pytest.mark.parametrize("problem", ["missing", "no config", "no episodes"])
def test_cli_bad_run_dir(
    problem: str, synthetic_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "missing" if problem == "missing" else synthetic_run
    if problem != "missing":
        (synthetic_run / ("config.yaml" if problem == "no config" else "episodes.jsonl")).unlink()
    assert _report(str(path), str(synthetic_run), "--out", str(tmp_path / "cmp")) == 2
    err = capsys.readouterr().err
    expected = {
        "missing": "no such run directory",
        "no config": "no config.yaml",
        "no episodes": "no episodes.jsonl",
    }[problem]
    assert err.startswith("agentgym report: ") and expected in err
    assert err.count("\n") == 1
    assert not (tmp_path / "cmp").exists()


# ---------------------------------------------------------------------------------------------
# The pages in headless Chromium, offline


@dataclass
class Opened:
    """A page loaded offline, with what it tried that it must not."""

    page: Any
    requests: list[str] = field(default_factory=list)
    """Every request URL the page made."""
    blocked: list[str] = field(default_factory=list)
    """Requests for anything but ``file:`` and ``data:`` URLs (aborted)."""
    errors: list[str] = field(default_factory=list)
    """Console errors and uncaught exceptions."""
    dialogs: list[str] = field(default_factory=list)
    """Messages of alert/confirm/prompt dialogs (dismissed)."""

    def assert_clean(self, images: int) -> None:
        """No network, no errors, no dialog, and ``images`` decoded ``<img>`` elements."""
        assert self.blocked == []
        assert all(url.startswith(("file:", "data:")) for url in self.requests), self.requests
        assert self.errors == [] and self.dialogs == []
        widths = self.page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == images and all(w > 0 for w in widths), widths


@contextmanager
def opened(browser: Any, path: Path) -> Iterator[Opened]:
    """``path`` loaded in a fresh browser context that aborts every non-file request."""
    context = browser.new_context()
    try:
        page = context.new_page()
        seen = Opened(page)

        def guard(route: Any) -> None:
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                seen.blocked.append(route.request.url)
                route.abort()

        context.route("**/*", guard)
        context.on("request", lambda request: seen.requests.append(request.url))
        page.on("console", lambda msg: seen.errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: seen.errors.append(str(exc)))

        def dismiss(dialog: Any) -> None:
            seen.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismiss)
        page.goto(path.as_uri(), wait_until="load")
        yield seen
    finally:
        context.close()


@pytest.mark.browser
def test_browser_report_viewer(browser: Any, synthetic_run: Path) -> None:
    from playwright.sync_api import expect

    with opened(browser, write_report(synthetic_run)) as seen:
        page = seen.page
        rows = page.locator("#ep-list li.ep")
        expect(rows).to_have_count(12)
        expect(page.locator("#count")).to_have_text("12 of 12 episodes")
        page.fill("#search", "ZEBRA")  # instruction, response and observation, any case
        expect(rows).to_have_count(3)
        page.fill("#search", "")
        page.select_option("#category", "invalid_format")
        expect(rows).to_have_count(2)
        page.select_option("#entry", "sokoban")
        expect(rows).to_have_count(2)
        page.select_option("#category", "")
        expect(rows).to_have_count(4)
        page.fill("#search", "push the box")
        expect(rows).to_have_count(1)
        expect(page.locator("#detail .turn")).to_have_count(0)
        rows.first.click()
        turns = page.locator("#detail .turn")
        expect(turns).to_have_count(3)
        expect(turns.first.locator("pre").first).to_have_text(f"You see {XSS}")
        expect(page.locator("#detail")).to_contain_text(f"timeout {XSS}")
        assert page.locator("script").count() == 2  # nothing injected
        seen.assert_clean(images=PLOTS)


@pytest.mark.browser
def test_browser_report_of_real_rollout(browser: Any, real_run: Path) -> None:
    from playwright.sync_api import expect

    episodes = load_run(real_run).episodes
    summary = summarize(episodes)
    low, high = summary["success_ci95"]
    with opened(browser, write_report(real_run)) as seen:
        page = seen.page
        expect(page.locator("#success tbody tr").first).to_contain_text(
            f"{summary['success_rate']:.1%} [{low:.1%}, {high:.1%}]"
        )
        rows = page.locator("#ep-list li.ep")
        expect(rows).to_have_count(len(episodes))
        rows.nth(1).click()
        expect(page.locator("#detail h3")).to_have_text(episodes[1].episode_id)
        expect(page.locator("#detail .turn")).to_have_count(episodes[1].num_turns)
        seen.assert_clean(images=PLOTS - 1)  # GuessNumber has no task types


@pytest.mark.browser
def test_browser_compare_page(browser: Any, synthetic_run: Path, real_run: Path, tmp_path: Path) -> None:
    page_path, _ = compare_runs([synthetic_run, real_run], tmp_path / "cmp")
    with opened(browser, page_path) as seen:
        assert seen.page.locator("#leaderboard tbody tr").count() == 2
        seen.assert_clean(images=1)
