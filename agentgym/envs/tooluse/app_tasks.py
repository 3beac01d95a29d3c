"""Multi-step tasks over the apps (:mod:`~agentgym.envs.tooluse.apps`), checked on their end state.

:func:`generate_world` makes an apps state from a seed: a user, 20 contacts with invented
names, about 40 events on the weekdays of the week of ``today`` and the next (none overlapping,
on the half hour, 08:00 to 18:00), 30 emails (24 received, 6 sent, all before now, no two at
the same minute, no two with the same subject) and 15 notes.

An :class:`AppTask` is an instruction over its own world (``initial``), written in words like
"It is 09:00 on Wednesday, March 12, 2025. Move my meeting with Dana Whitfield on Thursday,
March 13 to ...", with the calls an expert makes to do it (``expert_calls``, lookups included)
and, for a question, the ``answer``. :data:`TEMPLATES` are the kinds of task; each checks, on
the world, the facts its instruction relies on (one meeting with that person that day, a title
no other title contains, a free slot, a search that finds exactly one message, a listing short
enough to read whole...) and draws another world when they do not hold.
:func:`generate_app_tasks` cycles through the templates; ids are ``apps-00000`` on.
:func:`app_task_split` puts about one task in five in ``test``, by a hash of its id.

:func:`check` compares an end state with :func:`expected_state` (the initial state with the
expert's calls applied) canonically, so that any correct way of getting there passes:

- objects that existed at the start are compared by id, field by field: names, titles,
  locations and tags case- and whitespace-insensitively, attendees (as their contacts' email
  addresses) and tags as sets, phone numbers by their digits; any change the expected state
  lacks, and any deletion or missing change, is a problem naming the object;
- objects created during the task are matched to the expected new ones by content, ignoring
  their ids and the ``next_id`` counters. A new email is matched on its folder, sender and set
  of recipients; its subject and body are free but together must mention the task's ``facts``
  for it (each fact a tuple of accepted spellings: "15:30" or "3:30 pm"), compared as words
  after lower-casing and dropping punctuation; an expected reply must be an ``email_reply`` to
  the message or carry its subject. A new note's body is checked the same way, its title and
  tags compared. Every new object with no match, on either side, is a problem;
- for a question, the answer must be right: times compared as times ("14:30" = "2:30 pm"),
  phone numbers by their digits, counts as numbers (digits or words up to twenty), anything
  else after normalization (case, punctuation, whitespace). Of an answer in a sentence, every
  time (or phone number, or number) it mentions must be the expected one. For an action task
  the answer is not looked at.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
import string
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from agentgym import seeding
from agentgym.envs.tooluse.apps import COLLECTIONS, NOW, call, empty_state, new_id
from agentgym.seeding import SPLITS

__all__ = [
    "DEFAULT_NUM_TASKS",
    "MAX_LISTING_CHARS",
    "SPLITS",
    "TEMPLATES",
    "AppTask",
    "CheckResult",
    "answer_matches",
    "app_task_split",
    "app_tasks",
    "check",
    "expected_state",
    "generate_app_tasks",
    "generate_world",
]

DEFAULT_NUM_TASKS = 600
NUM_CONTACTS = 20
#: The longest listing (as JSON) a task needs the agent to read whole: less than the 4,000
#: characters a tool result of ``agentgym/ToolUse-v0`` shows by default.
MAX_LISTING_CHARS = 3_500

State = dict[str, Any]
Facts = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class AppTask:
    """One task. ``kind`` names its template; ``initial`` is the apps' state to start from (do
    not mutate it); ``answer`` is ``None`` for an action task; ``facts`` maps the id of each
    email or note the expert creates to what its text must mention. The hash is the id's."""

    id: str
    kind: str
    instruction: str
    initial: State
    expert_calls: tuple[tuple[str, dict[str, Any]], ...]
    answer: str | None = None
    facts: Mapping[str, Facts] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.id)


@dataclass(frozen=True)
class CheckResult:
    """Whether a task is solved and, if not, what is wrong, one line each."""

    success: bool
    problems: list[str]


# The world ----------------------------------------------------------------------------------------

_FIRST_NAMES = (
    "Dana",
    "Omar",
    "Priya",
    "Mateo",
    "Ingrid",
    "Kwame",
    "Sofia",
    "Hiroshi",
    "Leila",
    "Tomasz",
    "Amara",
    "Felix",
    "Noor",
    "Elena",
    "Jonas",
    "Aisha",
    "Rafael",
    "Mei",
    "Callum",
    "Zara",
    "Diego",
    "Freya",
    "Yusuf",
    "Chiara",
    "Nikhil",
    "Astrid",
    "Tariq",
    "Beatriz",
    "Emeka",
    "Hana",
    "Lucas",
    "Sanne",
    "Ravi",
    "Olga",
    "Kofi",
    "Ines",
    "Marcus",
    "Yara",
    "Anders",
    "Lucia",
    "Idris",
    "Maren",
    "Arjun",
    "Camille",
    "Bilal",
    "Greta",
    "Joaquin",
    "Keiko",
    "Samir",
    "Thea",
    "Malik",
    "Rosa",
    "Viktor",
    "Nadia",
    "Emil",
    "Ayla",
    "Teodor",
    "Wren",
    "Farah",
    "Soren",
)
_LAST_NAMES = (
    "Whitfield",
    "Okafor",
    "Natarajan",
    "Alvarez",
    "Lindqvist",
    "Mensah",
    "Rossi",
    "Tanaka",
    "Haddad",
    "Kowalski",
    "Adeyemi",
    "Brandt",
    "Siddiqui",
    "Petrova",
    "Bauer",
    "Diallo",
    "Moreau",
    "Chen",
    "MacLeod",
    "Kaur",
    "Novak",
    "Ferreira",
    "Yilmaz",
    "Sato",
    "Osei",
    "Lambert",
    "Castillo",
    "Nakamura",
    "Horvath",
    "Quinn",
    "Abara",
    "Dubois",
    "Eriksen",
    "Fontaine",
    "Gallagher",
    "Ibrahim",
    "Jansen",
    "Kapoor",
    "Larsen",
    "Mwangi",
    "Nilsson",
    "Ortega",
    "Pereira",
    "Rahman",
    "Sandoval",
    "Takahashi",
    "Ueda",
    "Varga",
    "Walsh",
    "Zhou",
)
_DOMAINS = (
    "brightlane.io",
    "northwind-labs.com",
    "copperfield.org",
    "halcyon.dev",
    "mossgate.co",
    "quillstone.net",
    "ferncastle.io",
    "saltmarsh.com",
)
_AREAS = ("415", "312", "617", "206", "512", "303", "919", "503")
_PROJECTS = (
    "Borealis",
    "Cedarline",
    "Driftwood",
    "Falconer",
    "Granite",
    "Harborview",
    "Juniper",
    "Kestrel",
    "Meridian",
    "Nimbus",
    "Orchid",
    "Quartz",
    "Sequoia",
    "Zephyr",
    "Aurora",
    "Mosaic",
)
_MEETING_KINDS = ("standup", "design review", "planning", "retro", "kickoff", "sync", "demo", "budget review")
_GENERIC_EVENTS = (
    "Weekly team sync",
    "All-hands",
    "Hiring panel",
    "Team lunch",
    "Quarterly planning",
    "Vendor call",
    "Security training",
    "Mentoring session",
)
_LOCATIONS = (
    "Room 4B",
    "Room 2A",
    "Board room",
    "Video call",
    "Cafe Lumen",
    "Atrium",
    "Lab 3",
    "Library corner",
)
_DOCS = (
    "budget draft",
    "timeline",
    "status update",
    "launch checklist",
    "vendor quote",
    "slide deck",
    "open questions",
    "hiring plan",
    "test results",
    "risk log",
)
_RECEIVED = (
    "I attached the {doc} for {project}. Could you take a look before {weekday}?",
    "Quick update on {project}: the {doc} is ready for your review.",
    "Do you have time this week to go over the {doc} for {project}?",
    "I made a few changes to the {project} {doc}; let me know what you think.",
)
_SENT = (
    "Here is the {doc} for {project} we talked about.",
    "Thanks for your comments on the {project} {doc}; I updated it.",
)
_MISC_EMAILS = {
    "Lunch on Friday?": "Are you free for lunch on Friday? I was thinking of the noodle place "
    "near the station.",
    "Offsite venue ideas": "I shortlisted three venues for the offsite; the one by the lake looks "
    "best so far.",
    "Expense report reminder": "Expense reports for last month are due at the end of the week.",
    "Conference travel": "The conference registration is confirmed. Shall we book the same "
    "hotel as last year?",
    "Book recommendation": "I finished the book you lent me. I think you would enjoy the sequel.",
    "Parking changes": "From next month the north car park will be closed for repairs.",
    "Holiday rota": "Could you add your days off to the holiday rota when you get a chance?",
    "Welcome drinks": "We are doing welcome drinks for the new starters after work on Thursday.",
    "Printer on the third floor": "The printer on the third floor works again.",
    "Team photo": "The photographer comes on Tuesday morning for the team photo.",
}
_NOTE_TOPICS = ("ideas", "meeting notes", "risks", "next steps", "open questions")
_NOTE_LINES = (
    "review the budget before the next sync",
    "share the timeline with the team",
    "book a room for the demo",
    "collect feedback from the pilot users",
    "update the roadmap slide",
)
_PERSONAL_NOTES = (
    ("Groceries", "oat milk, eggs, spinach, coffee beans, lemons", ("personal", "todo")),
    ("Reading list", "The Overstory; Piranesi; A Psalm for the Wild-Built", ("reading",)),
    (
        "Trip to Lisbon",
        "Book the flights, check the tram times and pack the rain jacket.",
        ("travel", "personal"),
    ),
    ("Gift ideas", "a plant stand, a good notebook, tickets to the jazz night", ("personal",)),
    ("Workout plan", "Monday run, Wednesday swim, Saturday long walk", ("personal",)),
    ("Podcast list", "two history shows and one about urban design", ("ideas",)),
    ("Garden", "move the tomatoes to the sunny bed; buy compost", ("personal", "todo")),
)
_WORK_NOTE = "- ask {first} about the {doc}\n- {line}"
_CALL_NOTE = "Talked about the {doc} for {project}. Follow up next week."
#: Tags tag_notes adds; no note of a generated world has them.
_NEW_TAGS = ("priority", "follow-up", "q3", "archive", "to-review")
_NEW_MEETINGS = ("Intro call", "Partnership chat", "Project briefing", "Onboarding session")
_FIRST_MONDAY = date(2025, 1, 6)


def _add(state: State, kind: str, **fields: Any) -> dict[str, Any]:
    obj = {"id": new_id(state, kind), **fields}
    state[kind].append(obj)
    return obj


def _address(first: str, last: str, rng: random.Random) -> str:
    return f"{first}.{last}@{rng.choice(_DOMAINS)}".lower()


def _phone_number(rng: random.Random, number: int) -> str:
    return f"({rng.choice(_AREAS)}) 555-{number:04d}"


def _iso(day: date, minutes: int) -> str:
    return f"{day.isoformat()}T{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(iso: str) -> int:
    return int(iso[11:13]) * 60 + int(iso[14:16])


def _weekdays(today: date) -> list[date]:
    """The weekdays of the week of ``today`` and the next."""
    monday = today - timedelta(days=today.weekday())
    return [monday + timedelta(days=d) for d in (*range(5), *range(7, 12))]


def _add_events(rng: random.Random, state: State, projects: list[str]) -> None:
    people = state["contacts"]
    for day in _weekdays(date.fromisoformat(state["today"])):
        taken: list[tuple[int, int]] = []
        for _ in range(rng.randint(3, 5)):
            for _attempt in range(20):
                start, length = rng.randrange(16, 36) * 30, rng.choice((30, 60, 60, 90))
                if start + length <= 18 * 60 and all(start >= e or start + length <= s for s, e in taken):
                    taken.append((start, start + length))
                    break
        for start, end in sorted(taken):
            roll = rng.random()
            if roll < 0.5:
                title = f"{rng.choice(projects)} {rng.choice(_MEETING_KINDS)}"
                attendees = rng.sample(people, rng.randint(2, 4))
            elif roll < 0.75:
                title = rng.choice(_GENERIC_EVENTS)
                attendees = rng.sample(people, rng.randint(1, 5))
            else:
                attendees = [rng.choice(people)]
                title = f"1:1 with {attendees[0]['name'].split()[0]}"
            _add(
                state,
                "calendar",
                title=title,
                start=_iso(day, start),
                end=_iso(day, end),
                attendees=[c["id"] for c in attendees],
                location=rng.choice(_LOCATIONS),
            )


def _add_emails(rng: random.Random, state: State, projects: list[str]) -> None:
    today = date.fromisoformat(state["today"])
    user_first = state["user"]["name"].split()[0]
    # Minutes before now: 07:00-21:59 on each of the ten days before today, 07:00-08:59 today.
    stamps = sorted(rng.sample(range(10 * 900 + 120), 30))
    subjects = [(f"{p} {doc}", p, doc) for p in projects for doc in _DOCS]
    subjects = rng.sample(subjects, 22) + [(s, "", "") for s in rng.sample(list(_MISC_EMAILS), 8)]
    rng.shuffle(subjects)
    folders = ["sent"] * 6 + ["inbox"] * 24
    rng.shuffle(folders)
    for stamp, (subject, project, doc), folder in zip(stamps, subjects, folders):
        back, minute = divmod(stamp, 900)
        sent_at = (
            _iso(today - timedelta(days=10 - back), 7 * 60 + minute)
            if back < 10
            else _iso(today, 7 * 60 + stamp - 9000)
        )
        other = rng.choice(state["contacts"])
        weekday = rng.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"))
        text = (
            rng.choice(_RECEIVED if folder == "inbox" else _SENT).format(
                doc=doc, project=project, weekday=weekday
            )
            if project
            else _MISC_EMAILS[subject]
        )
        if folder == "inbox":
            sender, to = other["email"], [state["user"]["email"]]
            body = f"Hi {user_first},\n\n{text}\n\nBest,\n{other['name'].split()[0]}"
        else:
            sender, to = state["user"]["email"], [other["email"]]
            body = f"Hi {other['name'].split()[0]},\n\n{text}\n\nBest,\n{user_first}"
        _add(
            state,
            "email",
            folder=folder,
            **{"from": sender},
            to=to,
            subject=subject,
            body=body,
            sent_at=sent_at,
            in_reply_to=None,
        )


def _add_notes(rng: random.Random, state: State, projects: list[str]) -> None:
    firsts = [c["name"].split()[0] for c in state["contacts"]]
    work = rng.sample([(p, t) for p in projects for t in _NOTE_TOPICS], 8)
    notes = [
        (
            f"{p} {topic}",
            _WORK_NOTE.format(first=rng.choice(firsts), doc=rng.choice(_DOCS), line=rng.choice(_NOTE_LINES)),
            ["work", rng.choice(("ideas", "todo"))],
        )
        for p, topic in work
    ]
    notes += [(title, body, list(tags)) for title, body, tags in rng.sample(_PERSONAL_NOTES, 5)]
    notes += [
        (
            f"Call with {first}",
            _CALL_NOTE.format(doc=rng.choice(_DOCS), project=rng.choice(projects)),
            ["work", "meeting"],
        )
        for first in rng.sample(firsts, 2)
    ]
    rng.shuffle(notes)
    for title, body, tags in notes:
        _add(state, "notes", title=title, body=body, tags=tags)


def generate_world(seed: int | str) -> State:
    """The apps' state of world ``seed`` (see the module documentation); the same seed gives
    the same state."""
    rng = seeding.rng("agentgym.tooluse.world", seed)
    today = _FIRST_MONDAY + timedelta(weeks=rng.randrange(104), days=rng.randrange(5))
    firsts = rng.sample(_FIRST_NAMES, NUM_CONTACTS + 1)
    lasts = rng.sample(_LAST_NAMES, NUM_CONTACTS + 1)
    state = empty_state(today.isoformat(), f"{firsts[0]} {lasts[0]}", _address(firsts[0], lasts[0], rng))
    for first, last, number in zip(firsts[1:], lasts[1:], rng.sample(range(10000), NUM_CONTACTS)):
        _add(
            state,
            "contacts",
            name=f"{first} {last}",
            email=_address(first, last, rng),
            phone=_phone_number(rng, number),
        )
    projects = rng.sample(_PROJECTS, 5)
    _add_events(rng, state, projects)
    _add_emails(rng, state, projects)
    _add_notes(rng, state, projects)
    return state


# Templates ----------------------------------------------------------------------------------------


@dataclass
class _Draft:
    instruction: str
    calls: list[tuple[str, dict[str, Any]]]
    answer: str | None = None
    facts: dict[str, Facts] = field(default_factory=dict)


class _Expert:
    """Makes API calls on a copy of a world, recording them."""

    def __init__(self, world: State):
        self.state = copy.deepcopy(world)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, api: str, /, **arguments: Any) -> Any:
        self.calls.append((api, arguments))
        return call(self.state, api, arguments)


def _today(world: State) -> date:
    return date.fromisoformat(world["today"])


def _day_of(event: dict[str, Any]) -> date:
    return date.fromisoformat(event["start"][:10])


def _say(day: date, today: date) -> str:
    said = f"{day:%A}, {day:%B} {day.day}"
    return f"tomorrow, {said}" if day == today + timedelta(days=1) else said


def _intro(world: State) -> str:
    today = _today(world)
    return f"It is {NOW} on {today:%A}, {today:%B} {today.day}, {today.year}. "


def _first(person: dict[str, Any]) -> str:
    return person["name"].split()[0]


def _people(world: State) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in world["contacts"]}


def _on(world: State, day: date) -> list[dict[str, Any]]:
    return sorted((e for e in world["calendar"] if _day_of(e) == day), key=lambda e: e["start"])


def _the_meeting(world: State, contact_id: str, day: date) -> dict[str, Any] | None:
    """The one event of ``day`` that ``contact_id`` attends, if there is exactly one."""
    events = [e for e in _on(world, day) if contact_id in e["attendees"]]
    return events[0] if len(events) == 1 else None


def _only_title(title: str, events: list[dict[str, Any]]) -> bool:
    """Whether every title among ``events`` that contains ``title`` is ``title`` itself."""
    return all(e["title"] == title for e in events if title.casefold() in e["title"].casefold())


def _hm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _time_spellings(hhmm: str) -> tuple[str, ...]:
    hour, minute = int(hhmm[:2]), int(hhmm[3:])
    h12, half = hour % 12 or 12, "am" if hour < 12 else "pm"
    forms = [hhmm, f"{h12}:{minute:02d} {half}", f"{h12}:{minute:02d}{half}"]
    if hour < 10:
        forms.append(f"{hour}:{minute:02d}")
    if minute == 0:
        forms += [f"{h12} {half}", f"{h12}{half}"]
    return tuple(forms)


def _date_spellings(day: date) -> tuple[str, ...]:
    month = f"{day:%B}"
    suffix = "th" if 10 <= day.day <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day.day % 10, "th")
    nth = f"{day.day}{suffix}"
    return (
        f"{month} {day.day}",
        f"{day.day} {month}",
        f"{month} {nth}",
        f"{nth} {month}",
        day.isoformat(),
        f"{day:%A}",
    )


def _phone_spellings(phone: str) -> tuple[str, ...]:
    return (phone, "".join(ch for ch in phone if ch.isdigit()))


def _free_start(events: list[dict[str, Any]], earliest: int, length: int) -> int:
    """The earliest start from ``earliest`` (minutes) at which ``length`` minutes overlap none of
    ``events`` (all on one day)."""
    start = earliest
    while clash := next(
        (e for e in events if _minutes(e["start"]) < start + length and _minutes(e["end"]) > start), None
    ):
        start = _minutes(clash["end"])
    return start


def _reschedule(rng: random.Random, world: State) -> _Draft | None:
    today = _today(world)
    calendar: list[dict[str, Any]] = world["calendar"]
    options = [
        (event, cid)
        for event in calendar
        if _day_of(event) > today and _minutes(event["start"]) < 15 * 60
        for cid in event["attendees"]
        if _the_meeting(world, cid, _day_of(event)) is event
    ]
    if not options:
        return None
    event, cid = rng.choice(options)
    person, day = _people(world)[cid], _day_of(event)
    length = _minutes(event["end"]) - _minutes(event["start"])
    others = [e for e in _on(world, day) if e is not event]
    start = _free_start(others, 15 * 60, length)
    expert = _Expert(world)
    expert("contacts_search", query=person["name"])
    expert("calendar_list_events", start_date=day.isoformat(), end_date=day.isoformat())
    expert(
        "calendar_update_event", event_id=event["id"], start=_iso(day, start), end=_iso(day, start + length)
    )
    sent = expert(
        "email_send",
        to=[person["email"]],
        subject=f"New time: {event['title']}",
        body=f'Hi {_first(person)},\n\nI moved "{event["title"]}" on '
        f"{_say(day, today)} to {_hm(start)}-{_hm(start + length)}.\n\nThanks",
    )
    return _Draft(
        _intro(world) + f"Move my meeting with {person['name']} on {_say(day, today)} "
        f"to the earliest time from 15:00 on that same day when it fits without "
        f"overlapping my other events (back-to-back is fine), keeping its length. "
        f"Then email {_first(person)} the new start time.",
        expert.calls,
        facts={sent["id"]: (_time_spellings(_hm(start)),)},
    )


def _attendee_note(rng: random.Random, world: State) -> _Draft | None:
    options = [
        e
        for e in world["calendar"]
        if len(e["attendees"]) >= 2 and _only_title(e["title"], _on(world, _day_of(e)))
    ]
    if not options:
        return None
    event = rng.choice(options)
    day, people = _day_of(event), _people(world)
    names = [people[cid]["name"] for cid in event["attendees"]]
    title = f"{event['title']} attendees"
    expert = _Expert(world)
    expert("calendar_list_events", start_date=day.isoformat(), end_date=day.isoformat())
    note = expert("notes_create", title=title, body="\n".join(names), tags=["meeting"])
    return _Draft(
        _intro(world) + f"Create a note titled '{title}' that lists the full names of "
        f"everyone invited to '{event['title']}' on {_say(day, _today(world))}, and "
        f"tag it 'meeting'.",
        expert.calls,
        facts={note["id"]: tuple((name,) for name in names)},
    )


def _reply_with_phone(rng: random.Random, world: State) -> _Draft | None:
    inbox = [m for m in world["email"] if m["folder"] == "inbox"]
    senders = sorted({m["from"] for m in inbox})
    sender = rng.choice(senders)
    latest = max((m for m in inbox if m["from"] == sender), key=lambda m: m["sent_at"])
    person = next(c for c in world["contacts"] if c["email"] == sender)
    other = rng.choice([c for c in world["contacts"] if c is not person])
    expert = _Expert(world)
    expert("contacts_search", query=person["name"])
    expert("email_search", query=sender)
    expert("contacts_search", query=other["name"])
    reply = expert(
        "email_reply",
        message_id=latest["id"],
        body=f"Hi {_first(person)},\n\n{other['name']}'s phone number is {other['phone']}.\n\nBest",
    )
    return _Draft(
        _intro(world) + f"Reply to the latest email from {person['name']} and tell "
        f"them {other['name']}'s phone number.",
        expert.calls,
        facts={reply["id"]: (_phone_spellings(other["phone"]),)},
    )


def _cancel_and_notify(rng: random.Random, world: State) -> _Draft | None:
    today = _today(world)
    options = [
        (day, e["title"])
        for day in _weekdays(today)
        if day > today
        for e in _on(world, day)
        if _only_title(e["title"], _on(world, day))
    ]
    if not options:
        return None
    day, title = rng.choice(sorted(set(options)))
    if rng.random() < 0.4:  # a second one, so that "every" is not a formality
        first = next(e for e in _on(world, day) if e["title"] == title)
        length = _minutes(first["end"]) - _minutes(first["start"])
        start = _free_start(_on(world, day), 8 * 60, length)
        _add(
            world,
            "calendar",
            title=title,
            start=_iso(day, start),
            end=_iso(day, start + length),
            attendees=rng.sample(
                first["attendees"] if title.startswith("1:1") else list(_people(world)),
                1 if title.startswith("1:1") else 2,
            ),
            location=rng.choice(_LOCATIONS),
        )
    events = [e for e in _on(world, day) if e["title"] == title]
    people = _people(world)
    to = sorted({people[cid]["email"] for e in events for cid in e["attendees"]})
    expert = _Expert(world)
    expert("calendar_list_events", start_date=day.isoformat(), end_date=day.isoformat())
    for event in events:
        expert("calendar_delete_event", event_id=event["id"])
    sent = expert(
        "email_send",
        to=to,
        subject=f"Cancelled: {title}",
        body=f"Hi all,\n\n{title} on {_say(day, today)} is cancelled.\n\nThanks",
    )
    return _Draft(
        _intro(world) + f"Cancel every event titled '{title}' on {_say(day, today)} "
        f"(delete them from my calendar) and send one email to all of their attendees "
        f"together saying that '{title}' is cancelled.",
        expert.calls,
        facts={
            sent["id"]: (
                ("cancel", "cancelled", "canceled", "cancelling", "canceling", "cancellation"),
                (title,),
            )
        },
    )


def _add_attendee(rng: random.Random, world: State) -> _Draft | None:
    options = []
    for project in _PROJECTS:
        hits = call(world, "calendar_search_events", {"query": project})
        if 2 <= len(hits) <= 4 and all(re.search(rf"\b{project}\b", e["title"]) for e in hits):
            ids = {e["id"] for e in hits}
            events = [e for e in world["calendar"] if e["id"] in ids]
            options += [
                (project, events, c)
                for c in world["contacts"]
                if any(c["id"] not in e["attendees"] for e in events)
            ]
    if not options:
        return None
    project, events, person = rng.choice(options)
    expert = _Expert(world)
    expert("contacts_search", query=person["name"])
    expert("calendar_search_events", query=project)
    for event in events:
        if person["id"] not in event["attendees"]:
            expert(
                "calendar_update_event", event_id=event["id"], attendees=[*event["attendees"], person["id"]]
            )
    return _Draft(
        _intro(world) + f"Add {person['name']} to every meeting whose title mentions "
        f"{project}, keeping the other attendees.",
        expert.calls,
    )


def _sender_phone(rng: random.Random, world: State) -> _Draft | None:
    options = [
        m
        for m in world["email"]
        if m["folder"] == "inbox"
        and [h["id"] for h in call(world, "email_search", {"query": m["subject"]})] == [m["id"]]
    ]
    if not options:
        return None
    message = rng.choice(options)
    person = next(c for c in world["contacts"] if c["email"] == message["from"])
    expert = _Expert(world)
    expert("email_search", query=message["subject"])
    expert("contacts_search", query=message["from"])
    return _Draft(
        _intro(world) + f"What is the phone number of the person who emailed me about "
        f"'{message['subject']}'? Answer with just the number.",
        expert.calls,
        answer=person["phone"],
    )


def _meeting_time(rng: random.Random, world: State) -> _Draft | None:
    options = [
        (day, c, event)
        for day in _weekdays(_today(world))
        for c in world["contacts"]
        if (event := _the_meeting(world, c["id"], day)) is not None
    ]
    if not options:
        return None
    day, person, event = rng.choice(options)
    expert = _Expert(world)
    expert("calendar_list_events", start_date=day.isoformat(), end_date=day.isoformat())
    return _Draft(
        _intro(world) + f"What time does my meeting with {person['name']} on "
        f"{_say(day, _today(world))} start? Answer with just the time as HH:MM.",
        expert.calls,
        answer=event["start"][11:],
    )


def _unused_phone(rng: random.Random, world: State) -> str:
    taken = {c["phone"][-4:] for c in world["contacts"]}
    return _phone_number(rng, rng.choice([n for n in range(10000) if f"{n:04d}" not in taken]))


def _update_phone(rng: random.Random, world: State) -> _Draft | None:
    person = rng.choice(world["contacts"])
    phone = _unused_phone(rng, world)
    used = {m["sent_at"] for m in world["email"]}
    free = [t for t in range(7 * 60, 9 * 60) if _iso(_today(world), t) not in used]
    message = _add(
        world,
        "email",
        folder="inbox",
        **{"from": person["email"]},
        to=[world["user"]["email"]],
        subject="My new phone number",
        body=f"Hi {world['user']['name'].split()[0]},\n\nMy phone number has changed: "
        f"from today on you can reach me at {phone}.\n\nCheers,\n{_first(person)}",
        sent_at=_iso(_today(world), rng.choice(free)),
        in_reply_to=None,
    )
    if [m["id"] for m in call(world, "email_search", {"query": "phone number"})] != [message["id"]]:
        return None
    expert = _Expert(world)
    expert("email_search", query="phone number")
    expert("email_read", message_id=message["id"])
    expert("contacts_search", query=person["name"])
    expert("contacts_update", contact_id=person["id"], phone=phone)
    return _Draft(
        _intro(world) + f"{person['name']} emailed me their new phone number. Update their contact with it.",
        expert.calls,
    )


def _new_contact_meeting(rng: random.Random, world: State) -> _Draft | None:
    today = _today(world)
    names = [c["name"].split() for c in world["contacts"]] + [world["user"]["name"].split()]
    first = rng.choice([n for n in _FIRST_NAMES if n not in {f for f, _ in names}])
    last = rng.choice([n for n in _LAST_NAMES if n not in {s for _, s in names}])
    length = rng.choice((30, 60))
    options = [
        (day, start)
        for day in _weekdays(today)
        if day > today
        for start in range(9 * 60, 17 * 60, 30)
        if _free_start(_on(world, day), start, length) == start
    ]
    if not options:
        return None
    day, start = rng.choice(options)
    name, email, phone = f"{first} {last}", _address(first, last, rng), _unused_phone(rng, world)
    title, location = f"{rng.choice(_NEW_MEETINGS)} with {first}", rng.choice(_LOCATIONS)
    expert = _Expert(world)
    contact = expert("contacts_create", name=name, email=email, phone=phone)
    expert(
        "calendar_create_event",
        title=title,
        start=_iso(day, start),
        end=_iso(day, start + length),
        attendees=[contact["id"]],
        location=location,
    )
    return _Draft(
        _intro(world) + f"Add {name} ({email}, {phone}) to my contacts, then schedule "
        f"a {length}-minute meeting titled '{title}' with them on {_say(day, today)} "
        f"at {_hm(start)} in {location}.",
        expert.calls,
    )


def _tag_notes(rng: random.Random, world: State) -> _Draft | None:
    options = []
    for project in _PROJECTS:
        hits = call(world, "notes_list", {"query": project})
        if 2 <= len(hits) <= 4 and all(
            re.search(rf"\b{project}\b", f"{n['title']}\n{n['body']}") for n in hits
        ):
            options.append((project, hits))
    if not options:
        return None
    project, notes = rng.choice(options)
    tag = rng.choice(_NEW_TAGS)
    expert = _Expert(world)
    expert("notes_list", query=project)
    for note in notes:
        expert("notes_update", note_id=note["id"], tags=[*note["tags"], tag])
    return _Draft(
        _intro(world) + f"Add the tag '{tag}' to every note that mentions {project} "
        f"in its title or body, keeping their other tags.",
        expert.calls,
    )


def _share_next_meeting(rng: random.Random, world: State) -> _Draft | None:
    today = _today(world)
    titles = sorted(
        {
            e["title"]
            for e in world["calendar"]
            if e["attendees"] and _only_title(e["title"], world["calendar"])
        }
    )
    options = [
        t
        for t in titles
        if not any(e["title"] == t and _day_of(e) == today for e in world["calendar"])
        and any(e["title"] == t and _day_of(e) > today for e in world["calendar"])
    ]
    if not options:
        return None
    title = rng.choice(options)
    event = min(
        (e for e in world["calendar"] if e["title"] == title and _day_of(e) > today), key=lambda e: e["start"]
    )
    person = _people(world)[rng.choice(event["attendees"])]
    day, start = _day_of(event), event["start"][11:]
    expert = _Expert(world)
    expert("calendar_search_events", query=title)
    expert("contacts_search", query=person["name"])
    sent = expert(
        "email_send",
        to=[person["email"]],
        subject=title,
        body=f"Hi {_first(person)},\n\nThe next {title} is on {_say(day, today)} at "
        f"{start} in {event['location']}.\n\nSee you there",
    )
    return _Draft(
        _intro(world) + f"Email {person['name']} the date, start time and location of "
        f"my next '{title}' meeting.",
        expert.calls,
        facts={sent["id"]: (_date_spellings(day), _time_spellings(start), (event["location"],))},
    )


def _count_meetings(rng: random.Random, world: State) -> _Draft | None:
    days = _weekdays(_today(world))
    at = rng.choice((0, 1, 2, 5, 6, 7))  # three days of one week
    first, last = days[at], days[at + 2]
    person = rng.choice(world["contacts"])
    count = sum(person["id"] in e["attendees"] for e in world["calendar"] if first <= _day_of(e) <= last)
    expert = _Expert(world)
    expert("contacts_search", query=person["name"])
    listing = expert("calendar_list_events", start_date=first.isoformat(), end_date=last.isoformat())
    if not count or len(json.dumps(listing)) > MAX_LISTING_CHARS:
        return None
    today = _today(world)
    return _Draft(
        _intro(world) + f"How many meetings with {person['name']} are on my calendar "
        f"from {_say(first, today)} to {_say(last, today)}? Answer with just the "
        f"number.",
        expert.calls,
        answer=str(count),
    )


_MAKERS: dict[str, Callable[[random.Random, State], _Draft | None]] = {
    "reschedule": _reschedule,
    "attendee_note": _attendee_note,
    "reply_with_phone": _reply_with_phone,
    "cancel_and_notify": _cancel_and_notify,
    "add_attendee": _add_attendee,
    "sender_phone": _sender_phone,
    "meeting_time": _meeting_time,
    "update_phone": _update_phone,
    "new_contact_meeting": _new_contact_meeting,
    "tag_notes": _tag_notes,
    "share_next_meeting": _share_next_meeting,
    "count_meetings": _count_meetings,
}
#: The kinds of task, in the order :func:`generate_app_tasks` cycles through them.
TEMPLATES: tuple[str, ...] = tuple(_MAKERS)
_MAX_WORLDS = 50


def generate_app_tasks(seed: int = 0, num_tasks: int = DEFAULT_NUM_TASKS) -> list[AppTask]:
    """``num_tasks`` tasks, task ``i`` of template ``TEMPLATES[i % len(TEMPLATES)]``, each over
    its own world. The same arguments give the same tasks."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be non-negative, got {num_tasks}")
    rng = seeding.rng("agentgym.tooluse.app_tasks", seed)
    tasks = []
    for number in range(num_tasks):
        kind = TEMPLATES[number % len(TEMPLATES)]
        for _ in range(_MAX_WORLDS):
            world = generate_world(rng.randrange(2**32))
            draft = _MAKERS[kind](rng, world)
            if draft is not None:
                break
        else:
            raise RuntimeError(f"template {kind!r} fits none of {_MAX_WORLDS} worlds")
        tasks.append(
            AppTask(
                f"apps-{number:05d}",
                kind,
                draft.instruction,
                world,
                tuple(draft.calls),
                draft.answer,
                draft.facts,
            )
        )
    return tasks


def app_task_split(tasks: list[AppTask], split: str) -> list[AppTask]:
    """The tasks of ``split``, one of :data:`SPLITS`, in order (about one in five is a test
    task, by its id)."""
    seeding.check_split(split)
    return [task for task in tasks if seeding.split_of("agentgym.tooluse.app_tasks", task.id) == split]


@functools.lru_cache(maxsize=1)
def _all_tasks() -> tuple[AppTask, ...]:
    return tuple(generate_app_tasks())


def app_tasks(split: str = "train") -> list[AppTask]:
    """The ``split`` tasks of ``generate_app_tasks()`` (made once per process)."""
    return app_task_split(list(_all_tasks()), split)


# Checking -----------------------------------------------------------------------------------------

_FIELDS = {
    "contacts": ("name", "email", "phone"),
    "calendar": ("title", "start", "end", "attendees", "location"),
    "email": ("folder", "from", "to", "subject", "body", "sent_at", "in_reply_to"),
    "notes": ("title", "body", "tags"),
}
_NOUNS = {"contacts": "contact", "calendar": "event", "email": "email", "notes": "note"}
#: Fields of a new email that are not compared (its text is checked for facts instead).
_FREE_EMAIL_FIELDS = ("subject", "body", "sent_at", "in_reply_to")


def expected_state(task: AppTask) -> State:
    """The task's initial state with the expert's calls applied."""
    state = copy.deepcopy(task.initial)
    for name, arguments in task.expert_calls:
        call(state, name, arguments)
    return state


def _squash(text: str) -> str:
    return " ".join(str(text).casefold().split())


def _words(text: str) -> str:
    """``text`` lower-cased, dots dropped, other punctuation as spaces, padded with spaces."""
    return " " + " ".join(re.sub(r"[^a-z0-9:]+", " ", text.lower().replace(".", "")).split()) + " "


def _mentions(text: str, spellings: tuple[str, ...]) -> bool:
    words = _words(text)
    return any(_words(s) in words for s in spellings)


def _canonical(kind: str, obj: dict[str, Any], emails: dict[str, str]) -> dict[str, Any]:
    """``obj`` without its id, in the form two equivalent objects share (``emails``: contact id
    to address, for attendees)."""
    if kind == "contacts":
        return {
            "name": _squash(obj["name"]),
            "email": str(obj["email"]).lower(),
            "phone": "".join(ch for ch in str(obj["phone"]) if ch.isdigit()),
        }
    if kind == "calendar":
        return {
            "title": _squash(obj["title"]),
            "start": obj["start"],
            "end": obj["end"],
            "attendees": sorted({emails.get(a, a) for a in obj["attendees"]}),
            "location": _squash(obj["location"]),
        }
    if kind == "email":
        return {
            **{key: obj[key] for key in _FIELDS["email"]},
            "from": str(obj["from"]).lower(),
            "to": sorted({str(a).lower() for a in obj["to"]}),
        }
    return {
        "title": _squash(obj["title"]),
        "body": _squash(obj["body"]),
        "tags": sorted({_squash(t) for t in obj["tags"]}),
    }


def _label(kind: str, obj: dict[str, Any]) -> str:
    if kind == "contacts":
        return str(obj["name"])
    if kind == "calendar":
        return f"'{obj['title']}' {obj['start']}"
    return f"'{obj['subject' if kind == 'email' else 'title']}'"


def _describe(kind: str, obj: dict[str, Any], facts: Facts) -> str:
    if kind == "contacts":
        what = f"contact {obj['name']} <{obj['email']}>"
    elif kind == "calendar":
        what = f"event '{obj['title']}' {obj['start']} to {obj['end'][11:]}"
    elif kind == "email":
        what = f"email to {', '.join(obj['to'])}"
        what += f" in reply to {obj['in_reply_to']}" if obj["in_reply_to"] else ""
    else:
        what = f"note '{obj['title']}'"
    if facts:
        what += " mentioning " + ", ".join(repr(spellings[0]) for spellings in facts)
    return f"missing a new {what}"


def _malformed(state: Any) -> str | None:
    if not isinstance(state, dict):
        return "the apps' state is not a JSON object"
    for kind, fields in _FIELDS.items():
        objects = state.get(kind)
        if not isinstance(objects, list) or not all(
            isinstance(o, dict) and {"id", *fields} <= o.keys() for o in objects
        ):
            return (
                f"the apps' state is malformed: {kind} must be a list of objects with id, {', '.join(fields)}"
            )
    return None


def _match(fits: list[list[bool]], right: int) -> tuple[list[int], list[int]]:
    """A maximum matching of a bipartite graph (``fits[i][j]``: left ``i`` may pair with right
    ``j``): the unmatched left and right indices."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(right):
            if fits[i][j] and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    lost = [i for i in range(len(fits)) if not augment(i, set())]
    return lost, [j for j in range(right) if j not in owner]


class _Comparison:
    """One collection of an expected and a final state, compared."""

    def __init__(self, task: AppTask, kind: str, expected: State, final: State):
        self.task, self.kind, self.noun = task, kind, _NOUNS[kind]
        self.expected, self.final = expected, final
        self.expected_emails = {c["id"]: str(c["email"]).lower() for c in expected["contacts"]}
        self.final_emails = {c["id"]: str(c["email"]).lower() for c in final["contacts"]}

    def problems(self) -> list[str]:
        before = [o["id"] for o in self.task.initial[self.kind]]
        want = {o["id"]: o for o in self.expected[self.kind]}
        have = {o["id"]: o for o in self.final[self.kind]}
        problems = [p for oid in before for p in self._existing(oid, want.get(oid), have.get(oid))]
        new_want = [o for oid, o in want.items() if oid not in before]
        new_have = [o for oid, o in have.items() if oid not in before]
        lost, extra = _match([[self._fits(w, h) for h in new_have] for w in new_want], len(new_have))
        problems += [
            _describe(self.kind, new_want[i], self.task.facts.get(new_want[i]["id"], ())) for i in lost
        ]
        problems += [
            f"unexpected new {self.noun} {new_have[j]['id']} ({_label(self.kind, new_have[j])})"
            for j in extra
        ]
        return problems

    def _existing(self, oid: str, want: dict[str, Any] | None, have: dict[str, Any] | None) -> list[str]:
        if want is None and have is None:
            return []
        if have is None:
            assert want is not None  # both None returned above
            return [f"{self.noun} {oid} ({_label(self.kind, want)}) was deleted; it should not be"]
        if want is None:
            return [f"{self.noun} {oid} ({_label(self.kind, have)}) should have been deleted"]
        a = _canonical(self.kind, have, self.final_emails)
        b = _canonical(self.kind, want, self.expected_emails)
        changes = [f"{key} is {a[key]!r}, expected {b[key]!r}" for key in b if a[key] != b[key]]
        if not changes:
            return []
        return [f"{self.noun} {oid} ({_label(self.kind, want)}): " + "; ".join(changes)]

    def _fits(self, want: dict[str, Any], have: dict[str, Any]) -> bool:
        facts = self.task.facts.get(want["id"], ())
        a = _canonical(self.kind, have, self.final_emails)
        b = _canonical(self.kind, want, self.expected_emails)
        free = _FREE_EMAIL_FIELDS if self.kind == "email" else ("body",) if facts else ()
        if any(a[key] != b[key] for key in b if key not in free):
            return False
        text = f"{have['subject']}\n{have['body']}" if self.kind == "email" else have.get("body")
        if facts and not all(_mentions(str(text), spellings) for spellings in facts):
            return False
        return self.kind != "email" or not want["in_reply_to"] or self._replies(want, have)

    def _replies(self, want: dict[str, Any], have: dict[str, Any]) -> bool:
        """Whether ``have`` answers the message ``want`` replies to: made by ``email_reply``,
        or carrying its subject."""
        if have["in_reply_to"] == want["in_reply_to"]:
            return True
        original = next(m for m in self.expected["email"] if m["id"] == want["in_reply_to"])
        return _squash(original["subject"]) in _squash(have["subject"])


_WORD_NUMBERS = {
    word: n
    for n, word in enumerate(
        (
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        )
    )
}
_CLOCK = re.compile(r"(?<![\d:])(\d{1,2})(?::(\d{2}))?(?:\s*([ap])\.?m\b\.?)?(?![\d:])")
_PHONE_RUN = re.compile(r"\+?\d[\d\s().-]{5,}\d")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _times(text: str) -> set[str]:
    times = set()
    for hour, minute, half in _CLOCK.findall(text.lower()):
        if not minute and not half:
            continue  # a bare number is no time
        h, m = int(hour), int(minute or 0)
        if half:
            if not 1 <= h <= 12:
                continue
            h = h % 12 + (12 if half == "p" else 0)
        if h <= 23 and m <= 59:
            times.add(f"{h:02d}:{m:02d}")
    return times


def _phones(text: str) -> set[str]:
    runs = ("".join(ch for ch in run if ch.isdigit()) for run in _PHONE_RUN.findall(text))
    return {d[1:] if len(d) == 11 and d.startswith("1") else d for d in runs}


def _numbers(text: str) -> set[int]:
    words = _normalize(text).split()
    return {int(w) if w.isdigit() else _WORD_NUMBERS[w] for w in words if w.isdigit() or w in _WORD_NUMBERS}


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(text.split())


def answer_matches(expected: str, given: str | None) -> bool:
    """Whether ``given`` is the answer ``expected`` (see the module documentation)."""
    if given is None:
        return False
    if re.fullmatch(r"\d\d:\d\d", expected):
        return _times(given) == {expected}
    if re.fullmatch(r"\+?[\d\s().-]{7,}", expected):
        return _phones(given) == _phones(expected)
    if expected.isdigit():
        return _numbers(given) == {int(expected)}
    return _normalize(given) == _normalize(expected)


def check(task: AppTask, final_state: Any, answer: str | None = None) -> CheckResult:
    """Whether ``final_state`` (and, for a question, ``answer``) solves ``task``, and what is
    wrong if not (see the module documentation)."""
    malformed = _malformed(final_state)
    if malformed:
        return CheckResult(False, [malformed])
    expected = expected_state(task)
    problems = [
        f"{key} is {final_state.get(key)!r}, expected {expected[key]!r}"
        for key in ("today", "user")
        if final_state.get(key) != expected[key]
    ]
    for kind in COLLECTIONS:
        problems += _Comparison(task, kind, expected, final_state).problems()
    if task.answer is not None and not answer_matches(task.answer, answer):
        problems.append(f"the answer {answer!r} is not the expected {task.answer!r}")
    return CheckResult(not problems, problems)
