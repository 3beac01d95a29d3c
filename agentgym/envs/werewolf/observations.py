"""What one player sees: the rules as their instruction, their text observation, the answers
they may give, and the same knowledge as values for rule-based bots.

Everything here is built from what the player may know and nothing else: their own role, their
fellow werewolves (werewolves only), the seer's results (the seer only), the roles the rules
announce, and the lines of the game record addressed to them (``Game.lines``: public events and
their own private ones). Observations are self-contained, so that a prompt needs no history.
"""

from __future__ import annotations

from typing import Any

from agentgym.env import TypedText
from agentgym.envs.werewolf.actions import MAX_BID
from agentgym.envs.werewolf.engine import Game, article, name_of
from agentgym.envs.werewolf.rules import DOCTOR, SEER, VILLAGER, WEREWOLF, WEREWOLVES, Rules

__all__ = ["admissible_answers", "instruction", "observation", "view"]


_PLURALS = {WEREWOLF: "werewolves", SEER: "seers", DOCTOR: "doctors", VILLAGER: "villagers"}
_POWERS = {
    WEREWOLF: "Each night you and the other werewolves choose a player to kill; by day you hide "
    "what you are.",
    SEER: "Each night you learn the exact role of one player; you cannot check the same player twice.",
    DOCTOR: "Each night you protect one player from the werewolves.",
    VILLAGER: "You have no special power: find the werewolves by talking and voting.",
}


def instruction(rules: Rules, seat: int, role: str) -> str:
    """The rules as the player of ``seat`` should read them (the task of their episode)."""
    counts = [f"{n} {role if n == 1 else _PLURALS[role]}" for role, n in rules.role_counts().items() if n]
    debate = (
        "before each statement everyone bids 0-4 for the word and the highest bid speaks"
        if rules.speaking_order == "bid"
        else "players speak in seat order"
    )
    exile = (
        "a player is exiled by votes from more than half of the living players"
        if rules.exile_rule == "majority"
        else "the player with most votes is exiled"
    )
    reveal = (
        "The role of a dead player is announced."
        if rules.reveal_role_on_death
        else "Roles stay secret when players die."
    )
    return (
        f"You are {name_of(seat)} in a game of Werewolf with {rules.num_players} players "
        f"(Player1 to Player{rules.num_players}): {_join(counts)}. Your role: {role}. "
        f"{_POWERS[role]}\n"
        f"Each night the werewolves choose a victim, the doctor protects one player"
        f"{'' if rules.allow_self_protect else ' other than themself'} and the seer learns one "
        f"player's role. Each day players debate ({debate}, at most {rules.debate_turns} "
        f"statements), then vote in secret: {exile}. {reveal} The villagers win when no "
        f"werewolf is left; the werewolves win when they are as many as the other players.\n"
        "Answer each question with the part it asks for, such as <target>Player3</target>, "
        "<bid>2</bid>, <speech>I suspect Player3.</speech> or <vote>Player3</vote>."
    )


def observation(game: Game, agent: str) -> TypedText:
    """``agent``'s view of the game as text: who they are, what they know, the record lines
    addressed to them, and their question (or why they have none)."""
    me = game.by_agent[agent]
    known = [
        f"{name} is {article(role)}" for name, role in game.known_roles(agent).items() if name != me.name
    ]
    dead = [p.name for p in game.players if not p.alive]
    parts = [
        f"You are {me.name}, {article(me.role)}." + (f" You know: {'; '.join(known)}." if known else ""),
        f"Alive: {', '.join(p.name for p in game.living())}."
        + (f" Dead: {', '.join(dead)}." if dead else ""),
        "Game so far:\n- " + "\n- ".join(game.lines[agent]),
        _prompt(game, agent),
    ]
    return TypedText("\n".join(parts))


def _prompt(game: Game, agent: str) -> str:
    pending = game.pending.get(agent)
    if pending is None:
        if game.over:
            return "The game is over."
        if not game.by_agent[agent].alive:
            return "You are dead: the game goes on without you."
        return "Wait while the other players act."
    question, day = pending.question, game.day
    options = ", ".join(question.options)
    asks = {
        "attack": (
            f"Night {day}: choose tonight's victim. Answer <target>PlayerN</target> with one of: {options}."
        ),
        "protect": (
            f"Night {day}: choose a player to protect tonight. Answer "
            f"<target>PlayerN</target> with one of: {options}."
        ),
        "check": (
            f"Night {day}: choose a player whose role you will learn. Answer "
            f"<target>PlayerN</target> with one of: {options}."
        ),
        "bid": (
            f"Day {day} debate: how much do you want to speak next? Answer <bid>0</bid> "
            f"(stay quiet) to <bid>{MAX_BID}</bid> (you must speak)."
        ),
        "speech": (f"Day {day} debate: it is your turn to speak. Answer <speech>your statement</speech>."),
        "vote": (
            f"Day {day} vote: vote to exile one of {options} with <vote>PlayerN</vote>, "
            "or abstain with <vote>nobody</vote>."
        ),
    }
    refusal = f"Your last answer was refused: {pending.refusal} Answer again.\n" if pending.refusal else ""
    return refusal + asks[question.kind]


def admissible_answers(game: Game, agent: str) -> list[str]:
    """Well-formed answers to ``agent``'s question (every valid one, except for a speech, where
    a few plain statements stand for the free text); ``[]`` without a question."""
    pending = game.pending.get(agent)
    if pending is None:
        return []
    question = pending.question
    if question.kind == "bid":
        return [f"<bid>{n}</bid>" for n in range(MAX_BID + 1)]
    if question.kind == "speech":
        me = game.by_agent[agent].name
        return ["<speech>I have nothing to say yet.</speech>"] + [
            f"<speech>I suspect {p.name}.</speech>" for p in game.living() if p.name != me
        ]
    answers = [f"<{question.tag}>{name}</{question.tag}>" for name in question.options]
    return answers + (["<vote>nobody</vote>"] if question.kind == "vote" else [])


def view(game: Game, agent: str) -> dict[str, Any]:
    """``agent``'s knowledge as JSON values, for rule-based players (the ``werewolf`` info key):

    ``you``, ``role``, ``day``, ``phase``; ``question`` (the kind asked now, or ``None``) and
    ``options`` (the names it may name); ``alive`` (names, seat order); ``known_roles``
    (name -> role, as :meth:`Game.known_roles`); ``proposal`` (werewolves only: tonight's
    proposed victim); ``speeches`` (public statements, ``(day, name, text)``). Its sequences
    are tuples (a remote env's arrive as lists): an episode keeps every turn's info, and the
    garbage collector stops walking tuples of strings once it has seen them.
    """
    me = game.by_agent[agent]
    pending = game.pending.get(agent)
    out: dict[str, Any] = {
        "you": me.name,
        "role": me.role,
        "day": game.day,
        "phase": game.phase,
        "question": pending.question.kind if pending else None,
        "options": tuple(pending.question.options) if pending else (),
        "alive": tuple(p.name for p in game.living()),
        "known_roles": game.known_roles(agent),
        "speeches": tuple(game.speeches),
    }
    if me.team == WEREWOLVES:
        out["proposal"] = game.proposal
    return out


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
