"""The stateful apps (contacts, calendar, email, notes), their command line, and the generated
multi-step tasks with their end-state check."""

from __future__ import annotations

import copy
import inspect
import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentgym.envs.tooluse.app_tasks import (
    DEFAULT_NUM_TASKS,
    MAX_LISTING_CHARS,
    TEMPLATES,
    AppTask,
    answer_matches,
    app_task_split,
    app_tasks,
    check,
    expected_state,
    generate_app_tasks,
    generate_world,
)
from agentgym.envs.tooluse.apps import APIS, AppError, call, empty_state, new_id
from agentgym.envs.tooluse.protocol import Tool

ANSWER_KINDS = {"sender_phone", "meeting_time", "count_meetings"}
READ_ONLY = {
    "contacts_search",
    "contacts_get",
    "calendar_list_events",
    "calendar_search_events",
    "calendar_get_event",
    "email_search",
    "email_read",
    "notes_list",
}


@pytest.fixture(scope="module")
def tasks() -> list[AppTask]:
    return generate_app_tasks()


@pytest.fixture
def state() -> dict[str, Any]:
    """A small world: two contacts, an event, a note, a received and a sent message."""
    s = empty_state("2025-03-12", "Alex Morgan", "alex.morgan@example.com")
    call(
        s,
        "contacts_create",
        {"name": "Dana Whitfield", "email": "dana@brightlane.io", "phone": "(415) 555-0134"},
    )
    call(s, "contacts_create", {"name": "Omar Okafor", "email": "omar@mossgate.co"})
    call(
        s,
        "calendar_create_event",
        {
            "title": "Design review",
            "start": "2025-03-13T10:00",
            "end": "2025-03-13T11:00",
            "attendees": ["con-0001"],
            "location": "Room 4B",
        },
    )
    call(s, "notes_create", {"title": "Ideas", "body": "ship it", "tags": ["work"]})
    s["email"].append(
        {
            "id": new_id(s, "email"),
            "folder": "inbox",
            "from": "dana@brightlane.io",
            "to": ["alex.morgan@example.com"],
            "subject": "Budget draft",
            "body": "See attached.",
            "sent_at": "2025-03-11T16:20",
            "in_reply_to": None,
        }
    )
    call(s, "email_send", {"to": ["omar@mossgate.co"], "subject": "Hello", "body": "Hi Omar"})
    return s


def first_of(tasks: list[AppTask], kind: str) -> AppTask:
    return next(t for t in tasks if t.kind == kind)


def replay(task: AppTask, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    state = copy.deepcopy(task.initial)
    for name, arguments in calls:
        call(state, name, arguments)
    return state


# The world and the tasks --------------------------------------------------------------------------


def test_worlds_are_deterministic_and_consistent():
    world = generate_world(5)
    assert world == generate_world(5) and world != generate_world(6)
    assert json.loads(json.dumps(world)) == world
    assert len(world["contacts"]) == 20 and len(world["email"]) == 30
    assert len(world["notes"]) == 15 and 30 <= len(world["calendar"]) <= 50
    for kind in ("contacts", "calendar", "email", "notes"):
        ids = [o["id"] for o in world[kind]]
        assert len(set(ids)) == len(ids) and world["next_id"][kind] == len(ids) + 1
    assert len({c["name"].split()[0] for c in world["contacts"]}) == 20
    events = sorted(world["calendar"], key=lambda e: e["start"])
    assert all(
        a["end"] <= b["start"] for a, b in itertools.pairwise(events) if a["start"][:10] == b["start"][:10]
    )
    stamps = [m["sent_at"] for m in world["email"]]
    assert len(set(stamps)) == 30 and max(stamps) < f"{world['today']}T09:00"
    assert len({m["subject"] for m in world["email"]}) == 30


def test_tasks_are_deterministic_and_cover_every_template():
    some = generate_app_tasks(seed=3, num_tasks=2 * len(TEMPLATES))
    assert some == generate_app_tasks(seed=3, num_tasks=2 * len(TEMPLATES))
    other = generate_app_tasks(seed=4, num_tasks=2 * len(TEMPLATES))
    assert [t.instruction for t in some] != [t.instruction for t in other]
    assert [t.id for t in some] == [f"apps-{i:05d}" for i in range(len(some))]
    assert Counter(t.kind for t in some) == {kind: 2 for kind in TEMPLATES}
    assert len(TEMPLATES) >= 8
    with pytest.raises(ValueError):
        generate_app_tasks(num_tasks=-1)


def test_splits_are_disjoint_and_cached(tasks):
    train, test = app_task_split(tasks, "train"), app_task_split(tasks, "test")
    assert not {t.id for t in train} & {t.id for t in test}
    assert len(train) + len(test) == len(tasks) == DEFAULT_NUM_TASKS
    assert 0.1 < len(test) / len(tasks) < 0.3
    assert [t.id for t in app_tasks("test")] == [t.id for t in test]
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        app_task_split(tasks, "dev")


# The APIs -----------------------------------------------------------------------------------------


def test_every_api_has_an_openai_style_schema():
    assert 14 <= len(APIS) <= 18
    for name, api in APIS.items():
        params = api.parameters
        assert api.name == name and api.description
        assert params["type"] == "object" and isinstance(params["properties"], dict)
        assert set(params["required"]) <= set(params["properties"])
        assert params["additionalProperties"] is False
        jsonschema.Draft202012Validator.check_schema(params)
        assert Tool(name, api.description, params).schema()["function"]["name"] == name
        state, *names = inspect.signature(api.fn).parameters.values()
        assert state.name == "state" and {p.name for p in names} == set(params["properties"])
        assert {p.name for p in names if p.default is p.empty} == set(params["required"])


@pytest.mark.parametrize(
    "name, arguments, says",
    [
        ("calendar_teleport", {}, "Unknown API 'calendar_teleport'. The APIs are: contacts_search"),
        ("calendar_get_event", {"event_id": "evt-0042"}, "There is no event 'evt-0042'"),
        (
            "calendar_create_event",
            {"title": "X", "start": "next Tuesday", "end": "2025-03-13T11:00"},
            "is not a datetime; write it as YYYY-MM-DDTHH:MM",
        ),
        (
            "calendar_create_event",
            {"title": "X", "start": "2025-03-13", "end": "2025-03-13T11:00"},
            "is not a datetime",
        ),
        (
            "calendar_create_event",
            {"title": "X", "start": "2025-03-13T10:00:30", "end": "2025-03-13T11:00"},
            "to the minute",
        ),
        (
            "calendar_create_event",
            {"title": "X", "start": "2025-03-13T11:00", "end": "2025-03-13T10:00"},
            "must end after it starts",
        ),
        (
            "calendar_create_event",
            {
                "title": "X",
                "start": "2025-03-13T12:00",
                "end": "2025-03-13T13:00",
                "attendees": ["con-0001", "nobody@example.com"],
            },
            "Unknown attendee 'nobody@example.com'",
        ),
        (
            "calendar_update_event",
            {"event_id": "evt-0001", "end": "2025-03-13T09:00"},
            "must end after it starts",
        ),
        ("calendar_update_event", {"event_id": "evt-0001"}, "Nothing to update"),
        ("calendar_list_events", {"start_date": "2025-03-14", "end_date": "2025-03-13"}, "before start_date"),
        (
            "calendar_list_events",
            {"start_date": "March 13", "end_date": "2025-03-13"},
            "is not a date; write it as YYYY-MM-DD",
        ),
        (
            "email_send",
            {"to": ["stranger@example.com"], "subject": "Hi", "body": "x"},
            "not the email address of any contact",
        ),
        ("email_send", {"to": [], "subject": "Hi", "body": "x"}, "at least one"),
        (
            "email_send",
            {"to": "dana@brightlane.io", "subject": "Hi", "body": "x"},
            "to must be a list of strings",
        ),
        (
            "email_send",
            {"to": ["dana@brightlane.io"], "subject": "Hi", "body": "  "},
            "body must not be empty",
        ),
        ("email_search", {"folder": "spam"}, "folder must be one of inbox, sent"),
        ("email_read", {"message_id": "msg-0099"}, "There is no message 'msg-0099'"),
        ("email_reply", {"message_id": "msg-0002", "body": "x"}, "only inbox messages"),
        ("notes_update", {"note_id": "note-0001"}, "Nothing to update"),
        ("notes_delete", {"note_id": "note-0404"}, "There is no note 'note-0404'"),
        ("notes_create", {"title": "  ", "body": "x"}, "title must not be empty"),
        (
            "contacts_create",
            {"name": "Dana Two", "email": "DANA@brightlane.io"},
            "already the email of contact con-0001",
        ),
        ("contacts_create", {"name": "Zed", "email": "zed-at-example"}, "not an email address"),
        ("contacts_update", {"contact_id": "con-0001", "phone": "call me"}, "not a phone number"),
        ("contacts_get", {}, "missing required argument(s): contact_id"),
        ("contacts_get", {"contact_id": "con-0001", "verbose": True}, "unexpected argument(s) verbose"),
        ("contacts_get", {"contact_id": 1}, "contact_id must be a string"),
    ],
)
def test_bad_calls_raise_and_change_nothing(state, name, arguments, says):
    before = copy.deepcopy(state)
    with pytest.raises(AppError, match=re.escape(says)):
        call(state, name, arguments)
    assert state == before


def test_the_apis_do_what_they_say(state):
    twin = copy.deepcopy(state)
    event = call(
        state,
        "calendar_create_event",
        {
            "title": "Lunch",
            "start": "2025-03-14 12:00",
            "end": "2025-03-14T13:00:00",
            "attendees": ["OMAR@mossgate.co", "con-0002"],
        },
    )
    assert event["id"] == "evt-0002" and state["next_id"]["calendar"] == 3
    assert event["start"] == "2025-03-14T12:00" and event["end"] == "2025-03-14T13:00"
    assert event["attendees"] == ["Omar Okafor <omar@mossgate.co>"]
    assert state["calendar"][-1]["attendees"] == ["con-0002"]
    shown = call(state, "calendar_get_event", {"event_id": "evt-0001"})["attendees"]
    invited = call(
        state, "calendar_update_event", {"event_id": "evt-0002", "attendees": [*event["attendees"], *shown]}
    )
    assert invited["attendees"] == [*event["attendees"], *shown]
    assert state["calendar"][-1]["attendees"] == ["con-0002", "con-0001"]
    call(state, "calendar_update_event", {"event_id": "evt-0002", "attendees": ["con-0002"]})
    moved = call(state, "calendar_update_event", {"event_id": "evt-0001", "start": "2025-03-14T15:30"})
    assert (moved["start"], moved["end"]) == ("2025-03-14T15:30", "2025-03-14T16:30")
    listed = call(state, "calendar_list_events", {"start_date": "2025-03-14", "end_date": "2025-03-14"})
    assert [e["id"] for e in listed] == ["evt-0002", "evt-0001"]
    assert [e["id"] for e in call(state, "calendar_search_events", {"query": "LUNCH"})] == ["evt-0002"]
    assert call(state, "contacts_search", {"query": "dana 555"})[0]["id"] == "con-0001"
    reply = call(state, "email_reply", {"message_id": "msg-0001", "body": "Thanks!"})
    assert reply["subject"] == "Re: Budget draft" and reply["to"] == ["dana@brightlane.io"]
    assert reply["in_reply_to"] == "msg-0001" and reply["folder"] == "sent"
    assert reply["sent_at"] == "2025-03-12T09:00" and reply["from"] == "alex.morgan@example.com"
    sent = call(state, "email_search", {"folder": "sent"})
    assert [m["id"] for m in sent] == ["msg-0003", "msg-0002"] and "body" not in sent[0]
    assert call(state, "email_search", {"query": "budget"})[0]["id"] == "msg-0001"
    assert call(state, "notes_list", {"tag": "WORK", "query": "ship"})[0]["id"] == "note-0001"
    assert call(state, "notes_list", {"tag": "home"}) == []
    note = call(state, "notes_update", {"note_id": "note-0001", "tags": ["a", "A", " b "]})
    assert note["tags"] == ["a", "b"]
    note["tags"].append("not in the state")  # results are copies
    assert state["notes"][0]["tags"] == ["a", "b"]
    assert call(state, "calendar_delete_event", {"event_id": "evt-0002"}) == {"deleted": "evt-0002"}
    assert [e["id"] for e in state["calendar"]] == ["evt-0001"]
    # The same calls on the same state give the same state.
    for name, arguments in [
        (
            "calendar_create_event",
            {
                "title": "Lunch",
                "start": "2025-03-14 12:00",
                "end": "2025-03-14T13:00:00",
                "attendees": ["OMAR@mossgate.co", "con-0002"],
            },
        ),
        ("calendar_update_event", {"event_id": "evt-0001", "start": "2025-03-14T15:30"}),
        ("email_reply", {"message_id": "msg-0001", "body": "Thanks!"}),
        ("notes_update", {"note_id": "note-0001", "tags": ["a", "A", " b "]}),
        ("calendar_delete_event", {"event_id": "evt-0002"}),
    ]:
        call(twin, name, arguments)
    assert twin == state


def test_the_command_line_saves_only_on_success(state, tmp_path: Path):
    path = tmp_path / "apps.json"
    path.write_text(json.dumps(state))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "agentgym.envs.tooluse.apps", "call", *args, "--state", str(path)]
        return subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)

    ok = run("notes_create", json.dumps({"title": "Plan", "body": "step one"}))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["id"] == "note-0002"
    assert json.loads(path.read_text())["notes"][-1]["title"] == "Plan"
    saved = path.read_bytes()
    for args, says in [
        (("notes_delete", '{"note_id": "note-0404"}'), "no note 'note-0404'"),
        (("notes_create", "{not json"), "must be a JSON object"),
        (("teleport", "{}"), "Unknown API 'teleport'"),
    ]:
        bad = run(*args)
        assert bad.returncode == 2 and says in bad.stderr and bad.stdout == ""
        assert path.read_bytes() == saved
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# Checking -----------------------------------------------------------------------------------------


def test_the_expert_solves_every_task(tasks):
    assert Counter(t.kind for t in tasks) == {k: DEFAULT_NUM_TASKS // len(TEMPLATES) for k in TEMPLATES}
    for task in tasks:
        initial = json.dumps(task.initial, sort_keys=True)
        state = copy.deepcopy(task.initial)
        for name, arguments in task.expert_calls:  # each result fits the env's default output
            assert len(json.dumps(call(state, name, arguments))) <= MAX_LISTING_CHARS
        result = check(task, state, task.answer)
        assert result.success, (task.id, task.instruction, result.problems)
        assert json.dumps(task.initial, sort_keys=True) == initial
        assert (task.answer is not None) == (task.kind in ANSWER_KINDS)
        assert task.instruction.startswith("It is 09:00 on ")
        assert len(task.expert_calls) <= 8


def untouched(task: AppTask, kind: str) -> dict[str, Any]:
    """An object of ``kind`` that the task leaves as it is."""
    expected = {o["id"]: o for o in expected_state(task)[kind]}
    return next(o for o in task.initial[kind] if expected.get(o["id"]) == o)


@pytest.mark.parametrize("kind", TEMPLATES)
def test_a_collateral_change_fails_and_is_named(tasks, kind):
    task = first_of(tasks, kind)
    note, event = untouched(task, "notes"), untouched(task, "calendar")
    final = expected_state(task)
    call(final, "notes_delete", {"note_id": note["id"]})
    result = check(task, final, task.answer)
    gone = f"note {note['id']} ('{note['title']}') was deleted; it should not be"
    assert not result.success and result.problems == [gone]
    final = expected_state(task)
    call(final, "calendar_update_event", {"event_id": event["id"], "location": "Moon base"})
    result = check(task, final, task.answer)
    assert not result.success and len(result.problems) == 1
    assert event["id"] in result.problems[0] and "location is 'moon base'" in result.problems[0]
    final = expected_state(task)
    call(final, "notes_create", {"title": "Scratch", "body": "x"})
    assert check(task, final, task.answer).problems[-1].startswith("unexpected new note note-")


@pytest.mark.parametrize("kind", sorted(set(TEMPLATES) - ANSWER_KINDS))
def test_a_missing_step_fails(tasks, kind):
    task = first_of(tasks, kind)
    calls = list(task.expert_calls)
    last = max(i for i, (name, _) in enumerate(calls) if name not in READ_ONLY)
    result = check(task, replay(task, calls[:last] + calls[last + 1 :]), task.answer)
    assert not result.success and result.problems
    if calls[last][0] in ("email_send", "email_reply"):
        assert result.problems[-1].startswith("missing a new email to ")
    assert not check(task, copy.deepcopy(task.initial), task.answer).success


@pytest.mark.parametrize("kind", sorted(ANSWER_KINDS))
def test_a_wrong_or_missing_answer_fails(tasks, kind):
    task = first_of(tasks, kind)
    final = expected_state(task)
    for answer in ("I don't know", None, "99:99", "0"):
        result = check(task, final, answer)
        assert not result.success and "the answer" in result.problems[-1]
    assert check(task, final, f"The answer is: {task.answer}.").success


@pytest.mark.parametrize(
    "expected, given, right",
    [
        ("14:30", "14:30", True),
        ("14:30", "2:30 PM", True),
        ("14:30", "It starts at 2:30 p.m.", True),
        ("09:00", "9am", True),
        ("14:30", "2:30", False),
        ("14:30", "14:00", False),
        ("14:30", "14:30 or 15:00", False),
        ("(415) 555-0134", "415-555-0134", True),
        ("(415) 555-0134", "+1 415 555 0134", True),
        ("(415) 555-0134", "(415) 555-0135", False),
        ("3", "three", True),
        ("3", "3 meetings.", True),
        ("3", "4", False),
        ("Room 4B", "room 4b.", True),
        ("Room 4B", "Room 4", False),
        ("3", None, False),
    ],
)
def test_answers_are_compared_by_what_they_mean(expected, given, right):
    assert answer_matches(expected, given) is right


def test_other_correct_solutions_pass(tasks):
    # Rescheduling by moving the start alone, and writing the time the 12-hour way.
    task = first_of(tasks, "reschedule")
    calls = [c for c in task.expert_calls if c[0] not in READ_ONLY]
    (_, update), (_, email) = calls
    start = update["start"]
    hour, minute = int(start[11:13]), start[14:16]
    final = replay(
        task,
        [
            ("calendar_update_event", {"event_id": update["event_id"], "start": start.replace("T", " ")}),
            (
                "email_send",
                {
                    "to": [e.upper() for e in email["to"]],
                    "subject": "Moved",
                    "body": f"Now at {hour - 12}:{minute} p.m., thanks!",
                },
            ),
        ],
    )
    assert check(task, final).success, check(task, final).problems
    # The email must still say the time.
    final = replay(task, [calls[0], ("email_send", {**email, "body": "I moved it."})])
    assert check(task, final).problems == [
        f"missing a new email to {email['to'][0]} mentioning '{start[11:]}'",
        f"unexpected new email {final['email'][-1]['id']} ('{email['subject']}')",
    ]

    # A reply written with email_send counts when it carries the original subject.
    task = first_of(tasks, "reply_with_phone")
    ((_, reply),) = [c for c in task.expert_calls if c[0] == "email_reply"]
    original = next(m for m in task.initial["email"] if m["id"] == reply["message_id"])
    by_send = {"to": [original["from"]], "body": reply["body"]}
    assert check(
        task, replay(task, [("email_send", {**by_send, "subject": f"RE: {original['subject']}"})])
    ).success
    assert not check(task, replay(task, [("email_send", {**by_send, "subject": "Hi"})])).success

    # A note in another layout, tags in another case; new objects are matched whatever their id.
    task = first_of(tasks, "attendee_note")
    ((_, note),) = [c for c in task.expert_calls if c[0] == "notes_create"]
    scratch = f"note-{task.initial['next_id']['notes']:04d}"
    final = replay(
        task,
        [
            ("notes_create", {"title": "scratch", "body": "x"}),
            ("notes_delete", {"note_id": scratch}),
            (
                "notes_create",
                {
                    "title": note["title"].upper(),
                    "tags": ["Meeting"],
                    "body": "Invited: " + ", ".join(note["body"].lower().splitlines()) + ".",
                },
            ),
        ],
    )
    assert final["notes"][-1]["id"] != expected_state(task)["notes"][-1]["id"]
    assert check(task, final).success, check(task, final).problems
    # ...but leaving someone out fails.
    final = replay(task, [("notes_create", {**note, "body": note["body"].splitlines()[0]})])
    assert not check(task, final).success

    # A new contact with its phone written differently, invited by address.
    task = first_of(tasks, "new_contact_meeting")
    (_, contact), (_, event) = task.expert_calls
    digits = "".join(ch for ch in contact["phone"] if ch.isdigit())
    final = replay(
        task,
        [
            ("contacts_create", {**contact, "phone": digits}),
            ("calendar_create_event", {**event, "attendees": [contact["email"]]}),
        ],
    )
    assert check(task, final).success, check(task, final).problems


def test_a_malformed_state_fails(tasks):
    task = tasks[0]
    assert check(task, "not a state").problems == ["the apps' state is not a JSON object"]
    broken = expected_state(task)
    del broken["notes"][0]["title"]
    result = check(task, broken)
    assert not result.success and "malformed: notes" in result.problems[0]
