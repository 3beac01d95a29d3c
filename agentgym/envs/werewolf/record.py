"""The record of a game for people: a JSON log and a self-contained HTML transcript.

The record shows everything, night actions and secret ballots included, each event marked with
who learned it: everyone (public), some players (private), or no player at all (hidden: bids
and refused answers). Players never see the record; their observations come from
the same events filtered by audience (see :mod:`.observations`).
"""

from __future__ import annotations

import html
from dataclasses import asdict
from typing import Any

from agentgym.envs.werewolf.engine import Game, name_of

__all__ = ["RECORD_FORMAT", "game_record", "to_html", "to_text"]

RECORD_FORMAT = "agentgym/werewolf-record/1"
_PHASE_TITLES = {"night": "Night {day}", "day": "Day {day}", "vote": "Vote, day {day}", "end": "End"}


def game_record(game: Game) -> dict[str, Any]:
    """The whole game as JSON values: rules, players with roles, winner and every event.

    Event ``audience`` is ``null`` (public), a list of player names (private), or ``[]``
    (hidden from every player).
    """
    seats = {p.agent: p.seat for p in game.players}
    return {
        "format": RECORD_FORMAT,
        "task_id": f"{game.deal}/{game.seed}",
        "seed": game.seed,
        "deal": game.deal,
        "rules": asdict(game.rules),
        "players": [
            {"agent": p.agent, "name": p.name, "role": p.role, "team": p.team, "alive": p.alive}
            for p in game.players
        ],
        "winner": game.winner,
        "over": game.over,
        "truncated": game.truncated,
        "days": game.day,
        "events": [
            {
                "day": e.day,
                "phase": e.phase,
                "kind": e.kind,
                "text": e.text,
                "audience": None if e.audience is None else [name_of(seats[a]) for a in e.audience],
                "data": e.data,
            }
            for e in game.events
        ],
    }


def _visibility(audience: list[str] | None) -> tuple[str, str]:
    """(css class, label) of an event's audience."""
    if audience is None:
        return "public", ""
    if not audience:
        return "hidden", "hidden from players"
    return "private", "to " + ", ".join(audience)


def _sections(record: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Events grouped by consecutive (day, phase), with a title for each group."""
    groups: list[tuple[str, list[dict[str, Any]]]] = []
    last = None
    for event in record["events"]:
        key = (event["day"], event["phase"])
        if key != last:
            groups.append((_PHASE_TITLES[event["phase"]].format(day=event["day"]), []))
            last = key
        groups[-1][1].append(event)
    return groups


def _outcome(record: dict[str, Any]) -> str:
    if record["winner"]:
        return f"The {record['winner']} win"
    return "Undecided (stopped)" if record["over"] else "In progress"


def to_text(record: dict[str, Any]) -> str:
    """The record as plain text, one event a line (the ``ansi`` render)."""
    roles = ", ".join(f"{p['name']} {p['role']}{'' if p['alive'] else ' (dead)'}" for p in record["players"])
    lines = [f"Werewolf {record['task_id']}: {_outcome(record)}", f"Roles: {roles}"]
    for title, events in _sections(record):
        lines.append(f"== {title}")
        for event in events:
            _, label = _visibility(event["audience"])
            lines.append(f"{f'[{label}] ' if label else ''}{event['text']}")
    return "\n".join(lines)


_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; }
h1 { font-size: 1.5rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .4rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: .2rem .8rem; border-bottom: 1px solid #eee;
        text-align: left; }
.werewolves { color: #a11; } .villagers { color: #15a; } .dead { color: #999; }
ol { list-style: none; padding: 0; }
li { padding: .25rem .5rem; margin: .15rem 0; border-radius: 4px; }
li.public { background: #f6f6f6; } li.private { background: #fff4dc; }
li.hidden { background: #eee; color: #666; font-size: 90%; }
.to { font-size: 80%; color: #876; margin-right: .5rem; } li.hidden .to { color: #888; }
.legend span { padding: .1rem .4rem; border-radius: 4px; margin-right: .5rem; }
"""


def to_html(record: dict[str, Any]) -> str:
    """A self-contained HTML page (no scripts, no external resources) of the record."""
    e = html.escape
    rows = "".join(
        f'<tr class="{"" if p["alive"] else "dead"}"><td>{e(p["name"])}</td>'
        f'<td class="{e(p["team"])}">{e(p["role"])}</td><td>{e(p["team"])}</td>'
        f"<td>{'alive' if p['alive'] else 'dead'}</td></tr>"
        for p in record["players"]
    )
    sections = []
    for title, events in _sections(record):
        items = []
        for event in events:
            css, label = _visibility(event["audience"])
            to = f'<span class="to">{e(label)}</span>' if label else ""
            items.append(f'<li class="{css}">{to}{e(event["text"])}</li>')
        sections.append(f"<h2>{e(title)}</h2><ol>{''.join(items)}</ol>")
    rules = ", ".join(f"{k}={v}" for k, v in record["rules"].items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Werewolf {e(record['task_id'])}</title><style>{_CSS}</style></head><body>"
        f"<h1>Werewolf: {e(_outcome(record))}</h1>"
        f"<p>Game {e(record['task_id'])} (deal/seed), {record['days']} day(s). "
        f"Rules: {e(rules)}.</p>"
        f"<table><tr><th>player</th><th>role</th><th>team</th><th>end</th></tr>{rows}</table>"
        '<p class="legend"><span style="background:#f6f6f6">public</span>'
        '<span style="background:#fff4dc">private: only the players named</span>'
        '<span style="background:#eee">hidden from every player</span></p>'
        f"{''.join(sections)}</body></html>\n"
    )
