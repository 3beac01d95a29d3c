"""Reading a player's answer: the structured part that the question asks for, validated.

An answer is free text (a model's whole response) that must contain one structured part, the
last one counting (:func:`agentgym.env.extract_tag`)::

    night, werewolves, doctor, seer   <target>Player5</target>
    bidding to speak                  <bid>0</bid> .. <bid>4</bid>
    debate                            <speech>...</speech>
    vote                              <vote>Player3</vote> or <vote>nobody</vote>

A player is named ``Player5`` (also ``player_5``, ``Player 5`` or ``5``). Anything else raises
:class:`InvalidAnswer` with a message for the player.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym.env import extract_tag, normalize_action

__all__ = ["ABSTAIN", "MAX_RESPONSE_CHARS", "TAGS", "InvalidAnswer", "Question", "parse_answer"]

#: Longest answer read, in characters; longer ones are refused unread.
MAX_RESPONSE_CHARS = 8192
MAX_BID = 4
TAGS = {
    "attack": "target",
    "protect": "target",
    "check": "target",
    "bid": "bid",
    "speech": "speech",
    "vote": "vote",
}
"""Question kind -> the tag of its structured part."""
ABSTAIN = ("nobody", "no one", "none", "abstain")
_PLAYER = re.compile(r"(?:player)?[ _]?(\d{1,3})")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class InvalidAnswer(ValueError):
    """An answer that does not answer its question; the message says why, for the player."""


@dataclass(frozen=True)
class Question:
    """What one player is asked. ``options`` are the names that answer it (targets, in seat
    order); ``refused`` pairs other players' names with the reason they may not be named."""

    kind: str
    """``attack``, ``protect``, ``check`` (night), ``bid``, ``speech`` or ``vote`` (day)."""
    options: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def tag(self) -> str:
        return TAGS[self.kind]

    @property
    def example(self) -> str:
        """A well-formed answer, for instructions and feedback."""
        content = {"target": "PlayerN", "vote": "PlayerN", "bid": "2", "speech": "what you say to everyone"}[
            self.tag
        ]
        return f"<{self.tag}>{content}</{self.tag}>"


def parse_answer(question: Question, text: str, max_speech_chars: int) -> str | int | None:
    """The value that ``text`` answers ``question`` with: a player's name for targets and votes
    (``None`` for a vote for nobody), an int for a bid, the statement (whitespace collapsed to
    single spaces) for a speech. Raises :class:`InvalidAnswer`."""
    if len(text) > MAX_RESPONSE_CHARS:
        raise InvalidAnswer(
            f"Your answer is {len(text):,} characters long; answers longer than "
            f"{MAX_RESPONSE_CHARS:,} characters are not read."
        )
    content = extract_tag(text, question.tag)
    if content is None:
        others = sorted({t for t in TAGS.values() if t != question.tag and extract_tag(text, t) is not None})
        found = f" (you used <{others[0]}>, which is for another question)" if others else ""
        raise InvalidAnswer(
            f"Your answer has no <{question.tag}>...</{question.tag}> part"
            f"{found}. Answer like this: {question.example}"
        )
    if question.tag == "bid":
        return _bid(content)
    if question.tag == "speech":
        return _speech(content, max_speech_chars)
    return _target(question, content)


def _bid(content: str) -> int:
    value = normalize_action(content)
    if not (value.isdigit() and int(value) <= MAX_BID):
        raise InvalidAnswer(f"A bid is a whole number from 0 to {MAX_BID}, not {content[:40]!r}.")
    return int(value)


def _speech(content: str, max_chars: int) -> str:
    # Everyone reads a statement: the other players, people in records and terminals. A control
    # character (a terminal's escape sequence) or a lone surrogate (which UTF-8 cannot encode)
    # would reach them all, so each becomes U+FFFD.
    statement = _UNPRINTABLE.sub("\ufffd", " ".join(content.split()))
    if not statement:
        raise InvalidAnswer("Your statement is empty: write it between <speech> and </speech>.")
    if len(statement) > max_chars:
        raise InvalidAnswer(
            f"Your statement is {len(statement):,} characters long; keep it under {max_chars:,}."
        )
    return statement


def _target(question: Question, content: str) -> str | None:
    value = normalize_action(content)
    if question.kind == "vote" and value in ABSTAIN:
        return None
    match = _PLAYER.fullmatch(value)
    name = f"Player{int(match.group(1))}" if match else None
    if name in question.options:
        return name
    reasons = dict(question.refused)
    if name in reasons:
        raise InvalidAnswer(
            f"You cannot name {name}: {reasons[name]}. Choose one of {', '.join(question.options)}."
        )
    raise InvalidAnswer(
        f"{content[:40]!r} is not a player you can name here. Choose one of {', '.join(question.options)}."
    )
