"""Elo ratings (``agentgym.harness.ratings``) and the league's tables in ``report.html``: the
equations on a hand-computed example, game results read from stored games, and a real
``agentgym eval`` against a league whose report headless Chromium renders, offline.

The browser test (marker ``browser``) needs Chromium at /usr/lib/chromium/chromium and the
Playwright package; without them it skips, except under CI (``$CI`` set), where that fails.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentgym.envs.signaling import ENV_ID
from agentgym.episode import Episode
from agentgym.harness.eval import compose_eval_config, run_eval
from agentgym.harness.ratings import POLICY, elo, game_results, rating_table

BOT = "agentgym.envs.signaling.bots.BotPolicy"


def test_elo_on_a_hand_computed_example() -> None:
    """K = 32, everyone from 1000, in order:
    a beats b:      E_a = 0.5;                                      a = 1016, b = 984
    a draws c:      E_a = 1 / (1 + 10 ** (-16 / 400)) = 0.52301;    a = 1016 - 0.736 = 1015.26,
                                                                    c = 1000.74
    b loses to c:   E_b = 1 / (1 + 10 ** (16.74 / 400)) = 0.47593;  b = 984 - 15.23 = 968.77,
                                                                    c = 1000.74 + 15.23 = 1015.97
    """
    results = [("a", "b", 1.0), ("a", "c", 0.5), ("b", "c", 0.0)]
    ratings = elo(results)
    assert list(ratings) == ["a", "b", "c"]
    assert ratings == pytest.approx({"a": 1015.26, "b": 968.77, "c": 1015.97}, abs=0.01)
    assert sum(ratings.values()) == pytest.approx(3000)  # every game moves points, never makes them
    assert elo(results, k=0, initial=1500) == {"a": 1500, "b": 1500, "c": 1500}
    table = rating_table(results)
    assert [(r["player"], r["games"], r["score"]) for r in table] == [
        ("c", 2, 0.75),
        ("a", 2, 0.75),
        ("b", 2, 0.0),
    ]


def test_elo_refuses_bad_results() -> None:
    with pytest.raises(ValueError, match=r"score must be in \[0, 1\], got 1.5 \(a against b\)"):
        elo([("a", "b", 1.5)])
    with pytest.raises(ValueError, match="a cannot play against itself"):
        elo([("a", "a", 0.5)])


def _seat(entry: str, opponent: str, seed: int, member: int, agent: str, success: bool, **kw: Any) -> Episode:
    group = f"{ENV_ID}|-|{seed}"
    return Episode(
        episode_id=f"{group}|{agent}#{member}",
        env_id=ENV_ID,
        task_id="",
        group_id=f"{group}|{agent}",
        seed=seed,
        agent=agent,
        success=success,
        tags={"entry": entry, "seats": "3", "opponent": opponent},
        **kw,
    )


def test_game_results_score_each_game_by_the_sides_winning_shares() -> None:
    """The policy plays player_1; the opponent player_2 and player_3."""

    def game(opponent: str, seed: int, wins: tuple[bool, bool, bool], **kw: Any) -> list[Episode]:
        entry = f"{ENV_ID} vs {opponent}"
        return [_seat(entry, opponent, seed, 0, f"player_{i + 1}", w, **kw) for i, w in enumerate(wins)]

    episodes = [
        *game("y", 2, (True, False, False)),  # a win: 1
        *game("x", 1, (False, True, False)),  # (1 + 0 - 0.5) / 2
        *game("x", 0, (True, True, True)),  # everyone won: a draw
        *game("y", 3, (True, False, False), error="env crashed"),  # left out
        _seat("untagged", "z", 4, 0, "player_1", True),  # no opponent seat: left out
    ]
    episodes[-1].tags.pop("opponent")
    results = game_results(episodes, lambda e: e.agent == "player_1")
    assert results == [(POLICY, "x", 0.5), (POLICY, "x", 0.25), (POLICY, "y", 1.0)]


# ---------------------------------------------------------------------------------------------
# The report of a league evaluation in headless Chromium


def _league_run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The expert sender/receiver against the Signaling bot and a league of two fallible bots
    (``league.json`` as a training run writes it, its members' policies the bot's configs)."""
    league = tmp_path / "league"
    league.mkdir()
    members = [
        {"name": name, "step": step, "path": name, "policy": {"_target_": BOT, "error_rate": rate, "seed": 0}}
        for name, step, rate in (("step-000001", 1, 1.0), ("step-000002", 2, 0.5))
    ]
    (league / "league.json").write_text(json.dumps({"members": members}), encoding="utf-8")
    cfg = compose_eval_config(
        [
            f"env={ENV_ID}",
            "tasks=4",
            f"out_dir={tmp_path / 'run'}",
            "progress=false",
            "prompt=signaling",
            "seats=[player_1]",
            f"opponent={{_target_: {BOT}}}",
            f"league={league}",
            "policy=scripted",
            "policy.act=agentgym.envs.signaling.bots:expert_action",
        ]
    )
    # In a thread of its own: Playwright's sync API holds an event loop in this one.
    with ThreadPoolExecutor(1) as worker:
        return worker.submit(asyncio.run, run_eval(cfg)).result()


@pytest.mark.browser
def test_browser_report_of_a_league_evaluation(browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    out, summary = _league_run(tmp_path)
    opponents = ["BotPolicy", "step-000001", "step-000002"]
    assert list(summary["entries"]) == [f"{ENV_ID} vs {o}" for o in opponents] and summary["complete"]
    perfect = summary["entries"][f"{ENV_ID} vs BotPolicy"]["roles"]
    assert {r: s["wins"]["rate"] for r, s in perfect.items()} == {"receiver": 1.0, "sender": 1.0}
    assert summary["entries"][f"{ENV_ID} vs step-000001"]["roles"]["sender"]["wins"]["rate"] == 0.0
    # Signaling is cooperative: both sides win or lose together, every game is a draw.
    assert {(r["player"], round(r["rating"]), r["games"]) for r in summary["ratings"]} == {
        (POLICY, 1000, 12),
        *((o, 1000, 4) for o in opponents),
    }

    context = browser.new_context()
    try:
        blocked: list[str] = []
        errors: list[str] = []

        def guard(route: Any) -> None:
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context.route("**/*", guard)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto((out / "report.html").as_uri(), wait_until="load")
        roles = page.locator("#roles tbody tr")
        # per opponent: the policy's seat and the opponent's, each as sender and as receiver
        expect(roles).to_have_count(3 * 2 * 2)
        expect(roles.first).to_contain_text(f"{ENV_ID} vs BotPolicy")
        expect(roles.first).to_contain_text("100.0% [")
        expect(page.locator("#roles")).to_contain_text(f"{ENV_ID} vs step-000001")
        ratings = page.locator("#ratings tbody tr")
        expect(ratings).to_have_count(4)
        players = {ratings.nth(i).locator("td").nth(1).inner_text() for i in range(4)}
        assert players == {POLICY, *opponents}
        expect(page.locator("#ratings")).to_contain_text("K = 32")
        assert blocked == [] and errors == []
    finally:
        context.close()
