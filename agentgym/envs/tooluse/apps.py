"""Four small stateful apps, contacts, calendar, email and notes, and the APIs an agent calls.

The apps' state is one JSON-serializable dict (:func:`empty_state`)::

    {"today": "2025-03-12",                   # the world's date; "now" is today at NOW (09:00)
     "user": {"name": ..., "email": ...},     # whose apps these are
     "contacts": [{"id": "con-0001", "name", "email", "phone"}, ...],
     "calendar": [{"id": "evt-0001", "title", "start", "end", "attendees", "location"}, ...],
     "email": [{"id": "msg-0001", "folder", "from", "to", "subject", "body", "sent_at",
                "in_reply_to"}, ...],
     "notes": [{"id": "note-0001", "title", "body", "tags"}, ...],
     "next_id": {"contacts": 21, "calendar": 41, "email": 31, "notes": 16}}

Datetimes are local ISO strings to the minute (``"2025-03-12T15:30"``), dates ``"2025-03-12"``.
Event ``attendees`` are contact ids (the user attends every event; the APIs show attendees as
``"Name <address>"`` and take ids, addresses or that form); email addresses are lower case,
``folder`` is ``"inbox"`` or ``"sent"``, ``in_reply_to`` the id of the message a reply answers
(else ``None``). A new object gets the next id of its kind from ``next_id`` and a sent email is
stamped ``today`` at :data:`NOW`, so the same calls on the same state always give the same
state.

Each API (:data:`APIS`) is a function ``(state, **arguments)`` that returns a JSON-serializable
result (copies, never the state's own objects) and may change ``state`` in place; its
``parameters`` are a JSON Schema object in the OpenAI function-calling format. :func:`call`
checks the arguments against that schema and dispatches. A bad call (unknown API or id, a
missing, unexpected or mistyped argument, a malformed date or datetime, an event that ends
before it starts, an address that is no contact's) raises :class:`AppError`, whose message says
what to do instead, and leaves the state as it was: every API validates before it changes
anything.

The command line keeps the state in a file, as the tools of a sandboxed agent do::

    python -m agentgym.envs.tooluse.apps call NAME '<json arguments>' --state apps.json

On success it saves the state (atomically: a temporary file renamed over the old one), prints
the result as JSON and exits 0; on an :class:`AppError` it prints the message to stderr, leaves
the file alone and exits 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "APIS",
    "COLLECTIONS",
    "FOLDERS",
    "NOW",
    "Api",
    "AppError",
    "call",
    "empty_state",
    "main",
    "new_id",
]

#: The world's time of day: "now" is ``today`` at this time. Sent emails are stamped with it.
NOW = "09:00"
#: The state's collections and the prefixes of their ids.
COLLECTIONS: dict[str, str] = {"contacts": "con", "calendar": "evt", "email": "msg", "notes": "note"}
FOLDERS: tuple[str, ...] = ("inbox", "sent")

_NOUNS = {"contacts": "contact", "calendar": "event", "email": "message", "notes": "note"}
_FINDERS = {
    "contacts": "contacts_search",
    "calendar": "calendar_list_events or calendar_search_events",
    "email": "email_search",
    "notes": "notes_list",
}
_ADDRESS = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]{2,}")
_PHONE = re.compile(r"\+?[\d\s().-]+")
_NAMED = re.compile(r"[^<>]*<([^<>]+)>")

State = dict[str, Any]


class AppError(ValueError):
    """A call the apps refuse, with a message for the agent; the state is unchanged."""


@dataclass(frozen=True)
class Api:
    """One API: ``parameters`` is a JSON Schema object, ``fn(state, **arguments)`` the call."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]


# State --------------------------------------------------------------------------------------------


def empty_state(today: str, user_name: str, user_email: str) -> State:
    """A state with no objects, dated ``today`` (YYYY-MM-DD), belonging to the named user."""
    return {
        "today": date.fromisoformat(today).isoformat(),
        "user": {"name": user_name, "email": user_email.lower()},
        **{kind: [] for kind in COLLECTIONS},
        "next_id": {kind: 1 for kind in COLLECTIONS},
    }


def new_id(state: State, kind: str) -> str:
    """The id the next object of ``kind`` (a key of :data:`COLLECTIONS`) gets; advances the
    counter."""
    number = state["next_id"][kind]
    state["next_id"][kind] = number + 1
    return f"{COLLECTIONS[kind]}-{number:04d}"


def _get(state: State, kind: str, object_id: str) -> dict[str, Any]:
    for obj in state[kind]:
        if obj["id"] == object_id:
            return obj
    noun = _NOUNS[kind]
    raise AppError(f"There is no {noun} {object_id!r}; find {noun} ids with {_FINDERS[kind]}.")


def _matches(query: str, *fields: str) -> bool:
    """Whether every word of ``query`` occurs in ``fields`` (case-insensitive)."""
    text = "\n".join(fields).casefold()
    return all(word in text for word in query.casefold().split())


# Argument values ----------------------------------------------------------------------------------


def _text(value: str, name: str) -> str:
    text = value.strip()
    if not text:
        raise AppError(f"{name} must not be empty.")
    return text


def _date(value: str, name: str) -> date:
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise AppError(f"{name} {value!r} is not a date; write it as YYYY-MM-DD.") from None


def _datetime(value: str, name: str) -> str:
    """``value`` as a canonical ``YYYY-MM-DDTHH:MM``."""
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text) if len(text) > 10 else None
    except ValueError:
        moment = None
    if moment is None:
        raise AppError(
            f"{name} {value!r} is not a datetime; write it as YYYY-MM-DDTHH:MM, e.g. 2025-03-14T15:30."
        )
    if moment.tzinfo is not None or moment.second or moment.microsecond:
        raise AppError(
            f"{name} {value!r}: give a local time to the minute, without seconds or "
            f"a timezone (YYYY-MM-DDTHH:MM)."
        )
    return moment.strftime("%Y-%m-%dT%H:%M")


def _span(start: str, end: str) -> None:
    if end <= start:
        raise AppError(f"An event must end after it starts (start {start}, end {end}).")


def _shifted(event: dict[str, Any], start: str) -> str:
    """The end of ``event`` moved to begin at ``start``, keeping its length."""
    length = datetime.fromisoformat(event["end"]) - datetime.fromisoformat(event["start"])
    return (datetime.fromisoformat(start) + length).strftime("%Y-%m-%dT%H:%M")


def _new_address(state: State, value: str, exclude: str | None = None) -> str:
    address = value.strip().lower()
    if not _ADDRESS.fullmatch(address):
        raise AppError(f"{value!r} is not an email address.")
    for contact in state["contacts"]:
        if contact["email"] == address and contact["id"] != exclude:
            raise AppError(f"{address} is already the email of contact {contact['id']} ({contact['name']}).")
    return address


def _phone(value: str) -> str:
    phone = value.strip()
    digits = sum(ch.isdigit() for ch in phone)
    if phone and not (_PHONE.fullmatch(phone) and 7 <= digits <= 15):
        raise AppError(f"{value!r} is not a phone number (7 to 15 digits, e.g. (415) 555-0134).")
    return phone


def _contact_for(state: State, value: str) -> dict[str, Any] | None:
    """The contact ``value`` names: by id, by address, or as ``Name <address>``."""
    named = _NAMED.fullmatch(value.strip())
    key = (named.group(1) if named else value).strip().lower()
    return next((c for c in state["contacts"] if key in (c["id"], c["email"])), None)


def _attendees(state: State, values: list[str]) -> list[str]:
    """Contact ids for ``values`` (see :func:`_contact_for`), without repeats."""
    ids: list[str] = []
    for value in values:
        contact = _contact_for(state, value)
        if contact is None:
            raise AppError(
                f"Unknown attendee {value!r}: give contact ids (contacts_search finds "
                f"them) or contacts' email addresses."
            )
        if contact["id"] not in ids:
            ids.append(contact["id"])
    return ids


def _recipients(state: State, values: list[str]) -> list[str]:
    """Contacts' addresses for ``values``, without repeats."""
    known = {c["email"] for c in state["contacts"]}
    addresses: list[str] = []
    for value in values:
        address = value.strip().lower()
        if address not in known:
            raise AppError(
                f"{value!r} is not the email address of any contact; find addresses with contacts_search."
            )
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise AppError("to must list at least one email address.")
    return addresses


def _tags(values: list[str]) -> list[str]:
    tags: list[str] = []
    for value in values:
        tag = value.strip()
        if tag and tag.casefold() not in (t.casefold() for t in tags):
            tags.append(tag)
    return tags


# Contacts -----------------------------------------------------------------------------------------


def contacts_search(state: State, query: str) -> list[dict[str, Any]]:
    return [dict(c) for c in state["contacts"] if _matches(query, c["name"], c["email"], c["phone"])]


def contacts_get(state: State, contact_id: str) -> dict[str, Any]:
    return dict(_get(state, "contacts", contact_id))


def contacts_create(state: State, name: str, email: str, phone: str = "") -> dict[str, Any]:
    contact = {"name": _text(name, "name"), "email": _new_address(state, email), "phone": _phone(phone)}
    contact = {"id": new_id(state, "contacts"), **contact}
    state["contacts"].append(contact)
    return dict(contact)


def contacts_update(
    state: State, contact_id: str, name: str | None = None, email: str | None = None, phone: str | None = None
) -> dict[str, Any]:
    contact = _get(state, "contacts", contact_id)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = _text(name, "name")
    if email is not None:
        changes["email"] = _new_address(state, email, exclude=contact_id)
    if phone is not None:
        changes["phone"] = _phone(phone)
    if not changes:
        raise AppError("Nothing to update: give at least one of name, email, phone.")
    contact.update(changes)
    return dict(contact)


# Calendar -----------------------------------------------------------------------------------------


def _event_view(state: State, event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with its attendees as ``Name <address>``."""
    people = {c["id"]: c for c in state["contacts"]}
    attendees = [f"{people[i]['name']} <{people[i]['email']}>" for i in event["attendees"]]
    return {**event, "attendees": attendees}


def _by_start(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=lambda e: (e["start"], e["id"]))


def calendar_list_events(state: State, start_date: str, end_date: str) -> list[dict[str, Any]]:
    first, last = _date(start_date, "start_date"), _date(end_date, "end_date")
    if last < first:
        raise AppError(f"end_date {end_date} is before start_date {start_date}.")
    low, high = f"{first.isoformat()}T00:00", f"{(last + timedelta(days=1)).isoformat()}T00:00"
    return [
        _event_view(state, e) for e in _by_start(state["calendar"]) if e["start"] < high and e["end"] > low
    ]


def calendar_search_events(state: State, query: str) -> list[dict[str, Any]]:
    return [
        _event_view(state, e)
        for e in _by_start(state["calendar"])
        if _matches(query, e["title"], e["location"])
    ]


def calendar_get_event(state: State, event_id: str) -> dict[str, Any]:
    return _event_view(state, _get(state, "calendar", event_id))


def calendar_create_event(
    state: State, title: str, start: str, end: str, attendees: list[str] | None = None, location: str = ""
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "title": _text(title, "title"),
        "start": _datetime(start, "start"),
        "end": _datetime(end, "end"),
        "attendees": _attendees(state, attendees or []),
        "location": location.strip(),
    }
    _span(event["start"], event["end"])
    event = {"id": new_id(state, "calendar"), **event}
    state["calendar"].append(event)
    return _event_view(state, event)


def calendar_update_event(
    state: State,
    event_id: str,
    title: str | None = None,
    start: str | None = None,
    end: str | None = None,
    attendees: list[str] | None = None,
    location: str | None = None,
) -> dict[str, Any]:
    event = _get(state, "calendar", event_id)
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = _text(title, "title")
    if start is not None:
        changes["start"] = _datetime(start, "start")
        changes["end"] = _shifted(event, changes["start"])
    if end is not None:
        changes["end"] = _datetime(end, "end")
    if attendees is not None:
        changes["attendees"] = _attendees(state, attendees)
    if location is not None:
        changes["location"] = location.strip()
    if not changes:
        raise AppError("Nothing to update: give at least one of title, start, end, attendees, location.")
    _span(changes.get("start", event["start"]), changes.get("end", event["end"]))
    event.update(changes)
    return _event_view(state, event)


def calendar_delete_event(state: State, event_id: str) -> dict[str, Any]:
    event = _get(state, "calendar", event_id)
    state["calendar"].remove(event)
    return {"deleted": event_id}


# Email --------------------------------------------------------------------------------------------


def _summary(message: dict[str, Any]) -> dict[str, Any]:
    return {key: copy.deepcopy(message[key]) for key in ("id", "from", "to", "subject", "sent_at")}


def email_search(state: State, query: str = "", folder: str = "inbox") -> list[dict[str, Any]]:
    hits = [
        m
        for m in state["email"]
        if m["folder"] == folder and _matches(query, m["from"], *m["to"], m["subject"], m["body"])
    ]
    return [_summary(m) for m in sorted(hits, key=lambda m: (m["sent_at"], m["id"]), reverse=True)]


def email_read(state: State, message_id: str) -> dict[str, Any]:
    return copy.deepcopy(_get(state, "email", message_id))


def _send(state: State, to: list[str], subject: str, body: str, in_reply_to: str | None) -> dict[str, Any]:
    message = {
        "id": new_id(state, "email"),
        "folder": "sent",
        "from": state["user"]["email"],
        "to": to,
        "subject": subject,
        "body": body,
        "sent_at": f"{state['today']}T{NOW}",
        "in_reply_to": in_reply_to,
    }
    state["email"].append(message)
    return copy.deepcopy(message)


def email_send(state: State, to: list[str], subject: str, body: str) -> dict[str, Any]:
    return _send(state, _recipients(state, to), subject.strip(), _text(body, "body"), None)


def email_reply(state: State, message_id: str, body: str) -> dict[str, Any]:
    original = _get(state, "email", message_id)
    if original["folder"] != "inbox":
        raise AppError(
            f"{message_id} is in {original['folder']}; only inbox messages can be "
            f"replied to (use email_send to write again)."
        )
    subject = original["subject"]
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    return _send(state, [original["from"]], subject, _text(body, "body"), message_id)


# Notes --------------------------------------------------------------------------------------------


def notes_list(state: State, tag: str = "", query: str = "") -> list[dict[str, Any]]:
    wanted = tag.strip().casefold()
    return [
        copy.deepcopy(n)
        for n in state["notes"]
        if (not wanted or wanted in (t.casefold() for t in n["tags"]))
        and _matches(query, n["title"], n["body"])
    ]


def notes_create(state: State, title: str, body: str, tags: list[str] | None = None) -> dict[str, Any]:
    note = {"title": _text(title, "title"), "body": body.strip(), "tags": _tags(tags or [])}
    note = {"id": new_id(state, "notes"), **note}
    state["notes"].append(note)
    return copy.deepcopy(note)


def notes_update(
    state: State,
    note_id: str,
    title: str | None = None,
    body: str | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    note = _get(state, "notes", note_id)
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = _text(title, "title")
    if body is not None:
        changes["body"] = body.strip()
    if tags is not None:
        changes["tags"] = _tags(tags)
    if not changes:
        raise AppError("Nothing to update: give at least one of title, body, tags.")
    note.update(changes)
    return copy.deepcopy(note)


def notes_delete(state: State, note_id: str) -> dict[str, Any]:
    state["notes"].remove(_get(state, "notes", note_id))
    return {"deleted": note_id}


# The registry -------------------------------------------------------------------------------------


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _list(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _api(
    fn: Callable[..., Any], description: str, properties: dict[str, Any], required: tuple[str, ...] = ()
) -> Api:
    return Api(
        fn.__name__,
        description,
        {
            "type": "object",
            "properties": properties,
            "required": list(required),
            "additionalProperties": False,
        },
        fn,
    )


_WHEN = "local time YYYY-MM-DDTHH:MM"
_WHO = "contact ids, contacts' email addresses, or 'Name <email>' as events list them"
_CONTACT_ID = _s("a contact id, e.g. con-0003")
_EVENT_ID = _s("an event id, e.g. evt-0007")
_NOTE_ID = _s("a note id, e.g. note-0002")

APIS: dict[str, Api] = {
    api.name: api
    for api in (
        _api(
            contacts_search,
            "Find contacts whose name, email or phone contains every word of the "
            "query (case-insensitive; an empty query lists all).",
            {"query": _s("words to look for")},
            ("query",),
        ),
        _api(contacts_get, "Get one contact by id.", {"contact_id": _CONTACT_ID}, ("contact_id",)),
        _api(
            contacts_create,
            "Add a contact. Its email must not be another contact's.",
            {"name": _s("full name"), "email": _s("email address"), "phone": _s("phone number")},
            ("name", "email"),
        ),
        _api(
            contacts_update,
            "Change a contact; only the fields given change.",
            {
                "contact_id": _CONTACT_ID,
                "name": _s("full name"),
                "email": _s("email address"),
                "phone": _s("phone number"),
            },
            ("contact_id",),
        ),
        _api(
            calendar_list_events,
            "List the events that overlap the days start_date to end_date "
            "(inclusive), by start time, attendees as 'Name <email>'.",
            {"start_date": _s("first day, YYYY-MM-DD"), "end_date": _s("last day, YYYY-MM-DD")},
            ("start_date", "end_date"),
        ),
        _api(
            calendar_search_events,
            "Find events whose title or location contains every word of "
            "the query (case-insensitive), by start time.",
            {"query": _s("words to look for")},
            ("query",),
        ),
        _api(calendar_get_event, "Get one event by id.", {"event_id": _EVENT_ID}, ("event_id",)),
        _api(
            calendar_create_event,
            "Create an event. The user attends every event; attendees are the others invited.",
            {
                "title": _s("title"),
                "start": _s(_WHEN),
                "end": _s(_WHEN + ", after start"),
                "attendees": _list(_WHO + " (default: none)"),
                "location": _s("where (default: empty)"),
            },
            ("title", "start", "end"),
        ),
        _api(
            calendar_update_event,
            "Change an event; only the fields given change. Giving start "
            "without end moves the event and keeps its length; attendees replaces the whole list.",
            {
                "event_id": _EVENT_ID,
                "title": _s("title"),
                "start": _s(_WHEN),
                "end": _s(_WHEN),
                "attendees": _list(_WHO),
                "location": _s("where"),
            },
            ("event_id",),
        ),
        _api(calendar_delete_event, "Delete an event.", {"event_id": _EVENT_ID}, ("event_id",)),
        _api(
            email_search,
            "Find messages of a folder whose sender, recipients, subject or body "
            "contain every word of the query (case-insensitive), newest first. Returns summaries "
            "without the body: read a message with email_read.",
            {
                "query": _s("words to look for (default: empty, every message)"),
                "folder": _s("inbox (default) or sent", enum=list(FOLDERS)),
            },
        ),
        _api(
            email_read,
            "Read one message, body included.",
            {"message_id": _s("a message id, e.g. msg-0012")},
            ("message_id",),
        ),
        _api(
            email_send,
            "Send an email from the user to one or more contacts.",
            {"to": _list("contacts' email addresses"), "subject": _s("subject line"), "body": _s("the text")},
            ("to", "subject", "body"),
        ),
        _api(
            email_reply,
            "Reply to an inbox message: sends body to its sender, subject 'Re: ...'.",
            {"message_id": _s("the inbox message's id"), "body": _s("the text")},
            ("message_id", "body"),
        ),
        _api(
            notes_list,
            "List notes (title, body, tags), optionally only those with a tag and/or "
            "whose title or body contains every word of the query.",
            {"tag": _s("only notes with this tag (case-insensitive)"), "query": _s("words to look for")},
        ),
        _api(
            notes_create,
            "Create a note.",
            {"title": _s("title"), "body": _s("the text"), "tags": _list("tags (default: none)")},
            ("title", "body"),
        ),
        _api(
            notes_update,
            "Change a note; only the fields given change. tags replaces the whole list.",
            {
                "note_id": _NOTE_ID,
                "title": _s("title"),
                "body": _s("the text"),
                "tags": _list("all the note's tags"),
            },
            ("note_id",),
        ),
        _api(notes_delete, "Delete a note.", {"note_id": _NOTE_ID}, ("note_id",)),
    )
}


def _check_arguments(api: Api, arguments: Any) -> None:
    if not isinstance(arguments, dict):
        raise AppError(f"The arguments of {api.name} must be a JSON object.")
    properties = api.parameters["properties"]
    unexpected = sorted(set(arguments) - set(properties))
    if unexpected:
        raise AppError(
            f"{api.name} got unexpected argument(s) {', '.join(unexpected)}; it takes: "
            f"{', '.join(properties)}."
        )
    missing = [key for key in api.parameters["required"] if key not in arguments]
    if missing:
        raise AppError(f"{api.name} is missing required argument(s): {', '.join(missing)}.")
    for key, value in arguments.items():
        schema = properties[key]
        if schema["type"] == "string" and not isinstance(value, str):
            raise AppError(f"{api.name}: {key} must be a string, got {json.dumps(value)}.")
        if schema["type"] == "array" and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise AppError(f"{api.name}: {key} must be a list of strings, got {json.dumps(value)}.")
        if "enum" in schema and value not in schema["enum"]:
            raise AppError(f"{api.name}: {key} must be one of {', '.join(schema['enum'])}, got {value!r}.")


def call(state: State, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call the API ``name`` on ``state`` with ``arguments``; its result. Raises
    :class:`AppError` (state unchanged) for an unknown API or a bad call."""
    api = APIS.get(name)
    if api is None:
        raise AppError(f"Unknown API {name!r}. The APIs are: {', '.join(APIS)}.")
    arguments = {} if arguments is None else arguments
    _check_arguments(api, arguments)
    return api.fn(state, **arguments)


# Command line -------------------------------------------------------------------------------------


def _load(path: Path) -> State:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AppError(f"No apps state at {path}.") from None
    except ValueError as exc:
        raise AppError(f"The apps state {path} is not valid JSON: {exc}") from None
    if not isinstance(state, dict):
        raise AppError(f"The apps state {path} is not a JSON object.")
    return state


def _save(path: Path, state: State) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, indent=1, ensure_ascii=False)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    """``call NAME ARGUMENTS --state FILE`` (see the module documentation); the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.tooluse.apps", description="Call an API of the apps on a state file."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("call", help="call one API; print its result as JSON")
    one.add_argument("name", help=f"one of: {', '.join(APIS)}")
    one.add_argument("arguments", nargs="?", default="{}", help="a JSON object")
    one.add_argument("--state", type=Path, default=Path("apps.json"), help="the state file")
    args = parser.parse_args(argv)
    try:
        try:
            arguments = json.loads(args.arguments)
        except ValueError as exc:
            raise AppError(f"The arguments must be a JSON object: {exc}") from None
        state = _load(args.state)
        result = call(state, args.name, arguments)
    except AppError as exc:
        print(exc, file=sys.stderr)
        return 2
    _save(args.state, state)
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
