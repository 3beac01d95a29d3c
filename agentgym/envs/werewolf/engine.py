"""The Werewolf engine: the state of one game, and who must answer which question.

A :class:`Game` is driven by answers. ``pending`` maps every player who owes an answer to their
question; :meth:`Game.answer` takes one. The players of one round answer simultaneously: nobody
learns another's answer before the round resolves, which happens when the last of them has
answered. Rounds, in order:

``night``   the lead werewolf (the living werewolves take turns, one night each) proposes a
            victim, the doctor protects one player, the seer checks one player.
``wolves``  the other living werewolves, who now see the proposal, choose a victim too.
            At dawn the victim is the player with most werewolf votes (ties drawn with the seed),
            unless the doctor protected them; the seer learns the checked player's exact role;
            the death (or the save) is announced, without roles unless the rules reveal them.
``bid``     (``speaking_order="bid"``) every living player bids 0-4; the highest bid speaks
            (ties drawn with the seed); all bids 0 end the debate.
``speech``  one player speaks (after a bid, or in seat order).
``vote``    every living player votes; the ballots are secret, the tally is announced; the
            exile follows ``exile_rule`` and ``vote_tie``.

The win condition is checked after every death, and the game stops the moment it holds:
villagers win when no werewolf lives, werewolves when they are at least as many as the others.
After ``max_days`` days an undecided game stops with no winner (``truncated``).

An answer that does not answer its question (see :mod:`.actions`) is refused with a message and
asked again; a second refusal applies the default: no target, bid 0, silence, or abstention.

Randomness: one ``random.Random(seed)``. It first draws a deal (even when the deal is given, so
that a game started from ``(deal, seed)`` draws the same tie-breaks as the game that dealt it),
then every tie-break, in game order. Nothing depends on Python's ``hash()``.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.werewolf.actions import InvalidAnswer, Question, parse_answer
from agentgym.envs.werewolf.rules import (
    DOCTOR,
    ROLES,
    SEER,
    VILLAGERS,
    WEREWOLF,
    WEREWOLVES,
    Rules,
    team_of,
)

__all__ = [
    "LETTERS",
    "Answered",
    "Event",
    "Game",
    "Pending",
    "Player",
    "agent_of",
    "article",
    "draw_deal",
    "name_of",
    "parse_deal",
]

LETTERS = {WEREWOLF: "W", SEER: "S", DOCTOR: "D", "villager": "V"}
ROLE_OF_LETTER = {letter: role for role, letter in LETTERS.items()}
ATTEMPTS = 2
"""Answers a player gets per question: one retry after a refusal."""


def agent_of(seat: int) -> str:
    """PettingZoo agent id of ``seat`` (0-based): ``player_1`` for seat 0."""
    return f"player_{seat + 1}"


def name_of(seat: int) -> str:
    """Name of ``seat`` (0-based) in game text: ``Player1`` for seat 0."""
    return f"Player{seat + 1}"


def parse_deal(deal: str, rules: Rules) -> str:
    """``deal`` (one letter per seat: W werewolf, S seer, D doctor, V villager) checked against
    ``rules``; raises ``ValueError``."""
    counts = Counter(ROLE_OF_LETTER.get(letter, "?") for letter in deal)
    if len(deal) != rules.num_players or counts != Counter(
        {role: n for role, n in rules.role_counts().items() if n}
    ):
        raise ValueError(
            f"deal {deal!r} does not fit the rules: need {rules.num_players} letters "
            f"(W werewolf, S seer, D doctor, V villager) with counts "
            f"{rules.role_counts()}"
        )
    return deal


def draw_deal(rules: Rules, rng: random.Random) -> str:
    """A random deal under ``rules`` (one letter per seat), as the game of seed ``s`` draws it
    first from ``random.Random(s)``."""
    letters = [LETTERS[role] for role in ROLES for _ in range(rules.role_counts()[role])]
    rng.shuffle(letters)
    return "".join(letters)


@dataclass
class Player:
    seat: int
    role: str
    alive: bool = True
    agent: str = field(init=False)
    """PettingZoo agent id (:func:`agent_of`)."""
    name: str = field(init=False)
    """Name in game text (:func:`name_of`)."""
    team: str = field(init=False)

    def __post_init__(self) -> None:
        self.agent, self.name = agent_of(self.seat), name_of(self.seat)
        self.team = team_of(self.role)


@dataclass(frozen=True)
class Event:
    """One line of the game record.

    ``audience`` is who learns it: ``None`` everyone (public), a tuple of agent ids those players
    only, ``()`` nobody but the record's viewer. ``data`` holds the facts as values.
    """

    day: int
    phase: str
    kind: str
    text: str
    audience: tuple[str, ...] | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Pending:
    """A question a player owes an answer to, and how it went so far."""

    question: Question
    attempts: int = 0
    refusal: str = ""
    """Why the last answer was refused ("" before any refusal)."""


@dataclass(frozen=True)
class Answered:
    """What :meth:`Game.answer` did with one answer."""

    valid: bool
    message: str = ""
    """The refusal, for an invalid answer."""
    signals: dict[str, float] = field(default_factory=dict)
    """Per-turn facts for reward shaping: ``correct_vote`` (1.0 for a vote against the other
    team, 0.0 against one's own) after a vote for a player."""


@dataclass
class _Night:
    lead: str = ""
    proposal: str | None = None
    wolf_votes: dict[str, str | None] = field(default_factory=dict)
    protect: str | None = None
    check: str | None = None


class Game:
    """One game of Werewolf under ``rules``, from ``seed`` and optionally a given ``deal``."""

    def __init__(self, rules: Rules, seed: int, deal: str | None = None):
        self.rules = rules
        self.seed = seed
        self.rng = random.Random(seed)
        drawn = draw_deal(rules, self.rng)
        self.deal = drawn if deal is None else parse_deal(deal, rules)
        self.players = [Player(seat, ROLE_OF_LETTER[letter]) for seat, letter in enumerate(self.deal)]
        self._living = list(self.players)
        self.by_agent = {p.agent: p for p in self.players}
        self.by_name = {p.name: p for p in self.players}
        self.day = 0
        self.phase = "night"
        self.round = ""
        self.pending: dict[str, Pending] = {}
        self.events: list[Event] = []
        self.lines: dict[str, list[str]] = {p.agent: [] for p in self.players}
        """The text of the events each player has learned, in order."""
        self.speeches: list[tuple[int, str, str]] = []
        """Public statements: (day, speaker's name, statement)."""
        self.revealed: dict[str, str] = {}
        """Roles announced publicly (deaths under ``reveal_role_on_death``): name -> role."""
        self.checks: dict[str, str] = {}
        """The seer's results: name -> role, in the order checked."""
        self.vote_record: dict[str, list[int]] = {p.agent: [0, 0] for p in self.players}
        """Per agent: [votes against the other team, votes for a player]."""
        self.winner: str | None = None
        self.over = False
        self.truncated = False
        self._night = _Night()
        self._bids: dict[str, int] = {}
        self._debate_left = 0
        self._speakers: list[str] = []
        self._votes: dict[str, str | None] = {}
        self._digest = hashlib.sha1(self.deal.encode())
        self._start_night()

    # A hash object can be neither pickled nor copied; the events rebuild it.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_digest"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._digest = hashlib.sha1(self.deal.encode())
        for event in self.events:
            self._digest.update(_digest_line(event))

    # ------------------------------------------------------------------ queries

    def living(self, role: str | None = None) -> list[Player]:
        """Living players (of ``role``), in seat order."""
        if role is None:
            return list(self._living)
        return [p for p in self._living if p.role == role]

    def known_roles(self, agent: str) -> dict[str, str]:
        """Every role ``agent`` knows, by name: their own, their fellow werewolves', their checks
        as the seer, and the roles announced publicly."""
        me = self.by_agent[agent]
        known = {me.name: me.role}
        if me.role == WEREWOLF:
            known |= {p.name: WEREWOLF for p in self.players if p.role == WEREWOLF}
        if me.role == SEER:
            known |= self.checks
        return known | self.revealed

    @property
    def proposal(self) -> str | None:
        """Tonight's victim proposed by the lead werewolf (``None`` before or without one)."""
        return self._night.proposal

    def state_key(self) -> str:
        """Key of the whole state: the deal, every event so far and the pending questions."""
        pending = ",".join(f"{a}:{p.question.kind}:{p.attempts}" for a, p in self.pending.items())
        return f"{self.deal}|{self._digest.hexdigest()[:20]}|{pending}"

    def metrics(self, agent: str) -> dict[str, list[int]]:
        """Rates for the harness as ``[hits, trials]``: ``vote_accuracy`` (votes against the
        other team, of votes for a player) for everyone, ``wolves_identified`` (werewolves
        checked, of werewolves in the game) for the seer."""
        out = {"vote_accuracy": list(self.vote_record[agent])}
        if self.by_agent[agent].role == SEER:
            out["wolves_identified"] = [
                sum(r == WEREWOLF for r in self.checks.values()),
                self.rules.werewolves,
            ]
        return out

    # ------------------------------------------------------------------ answers

    def answer(self, agent: str, text: str) -> Answered:
        """Take ``agent``'s answer to its pending question. Raises ``ValueError`` if ``agent``
        owes no answer (callers ask only pending players); never raises for the content."""
        pending = self.pending.get(agent)
        if pending is None:
            raise ValueError(f"{agent} has no question to answer now")
        pending.attempts += 1
        try:
            value = parse_answer(pending.question, text, self.rules.max_speech_chars)
        except InvalidAnswer as exc:
            return self._refuse(agent, pending, str(exc), text)
        signals = self._apply(agent, pending.question.kind, value)
        self._done(agent)
        return Answered(True, signals=signals)

    def _refuse(self, agent: str, pending: Pending, message: str, text: str) -> Answered:
        player = self.by_agent[agent]
        self._event(
            "refusal",
            f"{player.name}'s answer was refused: {message}",
            (),
            answer=text[:200],
            attempt=pending.attempts,
        )
        if pending.attempts < ATTEMPTS:
            pending.refusal = message
            return Answered(False, message)
        kind = pending.question.kind
        default = {"bid": 0}.get(kind)
        consequence = {"bid": "your bid is 0", "speech": "you say nothing", "vote": "you abstain"}.get(
            kind, "you do nothing tonight"
        )
        self._event("default", f"{message} Your answer was refused twice: {consequence}.", (agent,))
        self._apply(agent, kind, default)
        self._done(agent)
        return Answered(False, message)

    def _apply(self, agent: str, kind: str, value: Any) -> dict[str, float]:
        player, night = self.by_agent[agent], self._night
        wolves = tuple(p.agent for p in self.living(WEREWOLF))
        if kind == "attack":
            night.wolf_votes[agent] = value
            if agent == night.lead:
                night.proposal = value
                text = (
                    f"Night {self.day}: {player.name} proposes to attack {value}."
                    if value
                    else f"Night {self.day}: {player.name} makes no proposal."
                )
            else:
                text = (
                    f"Night {self.day}: {player.name} chooses {value}."
                    if value
                    else f"Night {self.day}: {player.name} chooses nobody."
                )
            self._event("attack", text, wolves, actor=player.name, target=value)
        elif kind == "protect":
            night.protect = value
            if value:
                self._event(
                    "protect",
                    f"Night {self.day}: you protect {value}.",
                    (agent,),
                    actor=player.name,
                    target=value,
                )
        elif kind == "check":
            night.check = value
        elif kind == "bid":
            self._bids[agent] = value
            self._event("bid", f"{player.name} bids {value}.", (), actor=player.name, bid=value)
        elif kind == "speech":
            if value is None:
                self._event("speech", f"{player.name} says nothing.", actor=player.name, speech=None)
            else:
                self.speeches.append((self.day, player.name, value))
                self._event("speech", f'{player.name}: "{value}"', actor=player.name, speech=value)
        elif kind == "vote":
            self._votes[agent] = value
            text = f"Day {self.day}: you vote for {value}." if value else f"Day {self.day}: you abstain."
            self._event("vote", text, (agent,), actor=player.name, target=value)
            if value is not None:
                correct = self.by_name[value].team != player.team
                self.vote_record[agent][0] += correct
                self.vote_record[agent][1] += 1
                return {"correct_vote": float(correct)}
        return {}

    def _done(self, agent: str) -> None:
        del self.pending[agent]
        if not self.pending:
            {
                "night": self._end_first_night_round,
                "wolves": self._dawn,
                "bid": self._end_bids,
                "speech": self._end_speech,
                "vote": self._end_vote,
            }[self.round]()

    # ------------------------------------------------------------------ rounds

    def _ask(self, round: str, questions: dict[str, Question]) -> None:
        self.round = round
        self.pending = {p.agent: Pending(questions[p.agent]) for p in self.players if p.agent in questions}

    def _start_night(self) -> None:
        if self.day >= self.rules.max_days:
            self._finish(None)
            return
        self.day += 1
        self.phase = "night"
        self._night = _Night()
        wolves = self.living(WEREWOLF)
        self._night.lead = wolves[(self.day - 1) % len(wolves)].agent
        self._event("nightfall", f"Night {self.day} falls.")
        questions = {self._night.lead: self._target_question(self._night.lead, "attack")}
        for role, kind in ((DOCTOR, "protect"), (SEER, "check")):
            for player in self.living(role):
                question = self._target_question(player.agent, kind)
                if question.options:
                    questions[player.agent] = question
        self._ask("night", questions)

    def _end_first_night_round(self) -> None:
        followers = [p.agent for p in self.living(WEREWOLF) if p.agent != self._night.lead]
        if not followers:
            self._dawn()
            return
        self._ask("wolves", {a: self._target_question(a, "attack") for a in followers})

    def _dawn(self) -> None:
        night = self._night
        victim = self._most_voted(Counter(v for v in night.wolf_votes.values() if v))
        wolves = tuple(p.agent for p in self.living(WEREWOLF))
        if victim is not None:
            self._event(
                "attack",
                f"Night {self.day}: the werewolves attack {victim}.",
                wolves,
                target=victim,
                decided=True,
            )
        if night.check is not None:
            role = self.by_name[night.check].role
            self.checks[night.check] = role
            seer = tuple(p.agent for p in self.living(SEER))
            self._event(
                "check",
                f"Night {self.day}: you checked {night.check}: {night.check} is {article(role)}.",
                seer,
                target=night.check,
                role=role,
            )
        self.phase = "day"
        if victim is not None and victim == night.protect:
            self._event(
                "dawn",
                f"Day {self.day} begins. The doctor saved the werewolves' victim: nobody died last night.",
                saved=victim,
            )
        elif victim is not None:
            self._kill(victim, f"Day {self.day} begins. {victim} was killed last night.", "dawn")
        else:
            self._event("dawn", f"Day {self.day} begins. Nobody died last night.")
        if not self._game_decided():
            self._start_debate()

    def _start_debate(self) -> None:
        if self.rules.speaking_order == "bid":
            self._debate_left = self.rules.debate_turns
            self._start_bids()
            return
        start = (self.day - 1) % self.rules.num_players
        order = sorted(self.living(), key=lambda p: (p.seat - start) % self.rules.num_players)
        self._speakers = [p.agent for p in order][: self.rules.debate_turns]
        self._next_speaker()

    def _start_bids(self) -> None:
        if self._debate_left == 0:
            self._start_vote()
            return
        self._bids = {}
        self._ask("bid", {p.agent: Question("bid") for p in self.living()})

    def _end_bids(self) -> None:
        top = max(self._bids.values())
        if top == 0:
            self._event("debate_end", "Nobody wants to speak: the debate ends.")
            self._start_vote()
            return
        tied = [p.agent for p in self.living() if self._bids.get(p.agent) == top]
        speaker = tied[0] if len(tied) == 1 else self.rng.choice(tied)
        self._debate_left -= 1
        self._ask("speech", {speaker: Question("speech")})

    def _next_speaker(self) -> None:
        if not self._speakers:
            self._start_vote()
            return
        self._ask("speech", {self._speakers.pop(0): Question("speech")})

    def _end_speech(self) -> None:
        if self.rules.speaking_order == "bid":
            self._start_bids()
        else:
            self._next_speaker()

    def _start_vote(self) -> None:
        self.phase = "vote"
        self._votes = {}
        self._ask("vote", {p.agent: self._target_question(p.agent, "vote") for p in self.living()})

    def _end_vote(self) -> None:
        counts = Counter(v for v in self._votes.values() if v)
        abstained = sum(v is None for v in self._votes.values())
        tally = ", ".join(
            f"{name} {n} vote{'s' * (n > 1)}"
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], self.by_name[kv[0]].seat))
        )
        self._event(
            "tally",
            f"Day {self.day} vote: {tally or 'no votes'}{f', {abstained} abstained' if abstained else ''}.",
            ballots={p.name: self._votes[p.agent] for p in self.players if p.agent in self._votes},
        )
        exiled = self._exiled(counts)
        if exiled is None:
            self._event("exile", "Nobody is exiled.")
        else:
            self._kill(exiled, f"{exiled} is exiled.", "exile")
        if not self._game_decided():
            self._start_night()

    def _exiled(self, counts: Counter[str]) -> str | None:
        if not counts:
            return None
        if self.rules.exile_rule == "majority":
            name, top = max(counts.items(), key=lambda kv: kv[1])
            return name if 2 * top > len(self.living()) else None
        top = max(counts.values())
        tied = [name for name, n in counts.items() if n == top]
        if len(tied) == 1:
            return tied[0]
        return self._draw(tied) if self.rules.vote_tie == "random" else None

    def _most_voted(self, counts: Counter[str]) -> str | None:
        """The name with most votes, ties drawn with the seed; ``None`` without votes."""
        if not counts:
            return None
        top = max(counts.values())
        tied = [name for name, n in counts.items() if n == top]
        return tied[0] if len(tied) == 1 else self._draw(tied)

    def _draw(self, names: list[str]) -> str:
        return self.rng.choice(sorted(names, key=lambda n: self.by_name[n].seat))

    # ------------------------------------------------------------------ deaths and the end

    def _kill(self, name: str, text: str, kind: str) -> None:
        player = self.by_name[name]
        player.alive = False
        self._living.remove(player)
        if self.rules.reveal_role_on_death:
            self.revealed[name] = player.role
            text += f" {name} was {article(player.role)}."
        self._event(kind, text, victim=name, role=player.role)

    def _game_decided(self) -> bool:
        """Finish the game if a team has won; return whether it is over."""
        wolves = len(self.living(WEREWOLF))
        if wolves == 0:
            self._finish(VILLAGERS)
        elif wolves >= len(self.living()) - wolves:
            self._finish(WEREWOLVES)
        return self.over

    def _finish(self, winner: str | None) -> None:
        self.over, self.winner, self.truncated = True, winner, winner is None
        self.phase, self.round, self.pending = "end", "", {}
        text = {
            VILLAGERS: "The villagers win: no werewolf is left.",
            WEREWOLVES: "The werewolves win: they are as many as the other players.",
            None: f"The game ends undecided after {self.day} days.",
        }[winner]
        self._event("end", text, winner=winner, roles={p.name: p.role for p in self.players})

    # ------------------------------------------------------------------ helpers

    def _target_question(self, agent: str, kind: str) -> Question:
        me = self.by_agent[agent]
        options, refused = [], []
        for p in self.players:
            if not p.alive:
                reason = "they are dead"
            elif p.seat == me.seat and (kind != "protect" or not self.rules.allow_self_protect):
                reason = "that is you"
            elif kind == "attack" and p.role == WEREWOLF:
                reason = "they are a werewolf like you"
            elif kind == "check" and p.name in self.checks:
                reason = "you already checked them"
            else:
                options.append(p.name)
                continue
            refused.append((p.name, reason))
        return Question(kind, tuple(options), tuple(refused))

    def _event(self, kind: str, text: str, audience: tuple[str, ...] | None = None, **data: Any) -> None:
        event = Event(self.day, self.phase, kind, text, audience, data)
        self.events.append(event)
        self._digest.update(_digest_line(event))
        for agent in self.lines if audience is None else audience:
            self.lines[agent].append(text)


def _digest_line(event: Event) -> bytes:
    """What an event adds to the state key's digest (any text: a lone surrogate is encoded as
    such, not refused)."""
    return f"{event.kind}|{event.audience}|{event.text}\n".encode("utf-8", "surrogatepass")


def article(role: str) -> str:
    """``"a werewolf"``, ``"the seer"``, ``"the doctor"``, ``"a villager"``."""
    return f"the {role}" if role in (SEER, DOCTOR) else f"a {role}"
