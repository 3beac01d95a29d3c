"""Werewolf: PettingZoo API, rules, information hiding, invalid answers, bots, the single-seat
Gymnasium env, records, evaluation, and a game with the embedded model in every seat."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import pickle
import random
import re
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import agentgym
from agentgym.envs import werewolf
from agentgym.envs.werewolf.actions import MAX_RESPONSE_CHARS
from agentgym.envs.werewolf.bots import BotPolicy, decide
from agentgym.envs.werewolf.engine import Game
from agentgym.envs.werewolf.observations import instruction, observation, view
from agentgym.envs.werewolf.record import to_html, to_text
from agentgym.envs.werewolf.rules import ROLES, Rules
from agentgym.multiagent import collect
from agentgym.policy import GenerationRequest
from agentgym.registry import make_aec, make_parallel, register_multiagent
from agentgym.rollout import Task, default_tasks

from support import contract
from support.hostile import HOSTILE
from support.werewolf import SHORTEST_GAME

WEREWOLF = "agentgym/Werewolf-v0"
# Deal of the scripted games: Player1 and Player2 werewolves, Player3 seer, Player4 doctor.
DEAL = "WWSDVVVV"
# What PettingZoo's api tests say of every text env (they expect numpy arrays and Box spaces).
TEXT_SPACE_WARNINGS = (
    r"Observation is not a NumPy array|.*probably should be "
    r"gymnasium.spaces.box or gymnasium.spaces.discrete"
)


def new_game(deal: str = DEAL, seed: int = 0, preset: str = "arena", **rules: Any) -> Game:
    return Game(Rules.preset(preset, **rules), seed, deal)


def answer(game: Game, answers: dict[str, str]) -> None:
    """Answer every pending question: ``answers`` maps names to answers (default: abstain,
    bid 0, or a pass)."""
    for agent in list(game.pending):
        name = game.by_agent[agent].name
        kind = game.pending[agent].question.kind
        default = {
            "bid": "<bid>0</bid>",
            "speech": "<speech>I pass.</speech>",
            "vote": "<vote>nobody</vote>",
        }.get(kind, "")
        game.answer(agent, answers.get(name, default))


def night(game: Game, victim: str | None, protect: str | None = None, check: str | None = None) -> None:
    """Play a night in which every werewolf names ``victim``."""
    wolves = {p.name: f"<target>{victim}</target>" for p in game.living("werewolf")}
    extra = {
        "Player4": f"<target>{protect}</target>" if protect else "",
        "Player3": f"<target>{check}</target>" if check else "",
    }
    while game.round in ("night", "wolves"):
        answer(game, wolves | extra)


def vote(game: Game, ballots: dict[str, str | None]) -> None:
    """The vote of the day (after any debate): ``{voter: target or None}``."""
    while game.round in ("bid", "speech"):
        answer(game, {})
    assert game.round == "vote"
    answer(game, {v: f"<vote>{t or 'nobody'}</vote>" for v, t in ballots.items()})


def texts(game: Game, kind: str) -> list[str]:
    return [e.text for e in game.events if e.kind == kind]


def random_actions(env: Any, infos: dict[str, Any], rng: random.Random) -> dict[str, str]:
    return {a: rng.choice(infos[a]["admissible_actions"]) for a in env.agents if infos[a]["action_required"]}


def play_parallel(env: Any, seed: int, pick: Any) -> list[Any]:
    """Play a game to its end with ``pick(env, infos)`` actions; the trace of everything."""
    observations, infos = env.reset(seed=seed)
    trace = [observations, infos]
    while env.agents:
        step = env.step(pick(env, infos))
        trace.append(step)
        infos = step[4]
    return trace


# ------------------------------------------------------------------ PettingZoo API


@pytest.mark.parametrize("preset", ["arena", "lspo"])
def test_pettingzoo_api_tests(preset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", TEXT_SPACE_WARNINGS)
        api_test(werewolf.env(preset=preset), num_cycles=60)
        parallel_api_test(werewolf.parallel_env(preset=preset), num_cycles=300)


def test_seed_determinism():
    seed_test(lambda: werewolf.env(preset="lspo"), num_cycles=100)
    parallel_seed_test(lambda: werewolf.parallel_env(), num_cycles=100)
    # Same seed and same actions, same game, record included; another seed, another game.
    runs = []
    for seed in (5, 5, 6):
        env = werewolf.parallel_env(render_mode="ansi")
        trace = play_parallel(env, seed, functools.partial(random_actions, rng=random.Random(1)))
        runs.append((trace, env.game_record(), env.render()))
    assert runs[0] == runs[1] and runs[0][1] != runs[2][1]
    # A task id replays its game whatever the seed.
    task_id = runs[0][1]["task_id"]
    env = werewolf.parallel_env()
    observations, infos = env.reset(seed=99, options={"task_id": task_id})
    assert observations == runs[0][0][0] and infos == runs[0][0][1]


def test_aec_dead_step_and_rewards_at_the_end():
    env = werewolf.env(preset="lspo")
    env.reset(seed=3)
    policy, rewards, steps = BotPolicy(), {}, 0
    for agent in env.agent_iter():
        _, reward, terminated, truncated, info = env.last()
        rewards[agent] = rewards.get(agent, 0.0) + reward
        if terminated or truncated:
            env.step(None)
            continue
        assert info["action_required"] and env.game.by_agent[agent].alive
        env.step(policy.answer(GenerationRequest([], info=info, seed=steps)))
        steps += 1
    assert env.agents == [] and env.game.over
    winners = {p.agent for p in env.game.players if p.team == env.game.winner}
    assert rewards == {a: 1.0 if a in winners else -1.0 for a in env.possible_agents}


def test_aec_game_copies_play_on_alone():
    """A deep copy or a pickle of a game in progress plays on as the original would (the state
    key's digest is rebuilt from the events), and playing a copy leaves the original alone."""
    policy = BotPolicy()

    def play(env: Any, steps: int) -> list[tuple[str, str]]:
        keys = []
        for k in range(steps):
            agent = env.agent_selection
            *_, terminated, truncated, info = env.last()
            done = terminated or truncated
            env.step(None if done else policy.answer(GenerationRequest([], info=info, seed=k)))
            keys.append((agent, env.game.state_key()))
        return keys

    env = werewolf.env(preset="lspo")
    env.reset(seed=3)
    play(env, 12)
    before = env.game.state_key()
    twin, pickled = copy.deepcopy(env), pickle.loads(pickle.dumps(env))
    assert pickled.game.state_key() == before
    assert play(twin, 20)[-1][1] != before
    assert env.game.state_key() == before
    assert play(env, 20) == play(pickled, 20)


def test_registry_makes_every_kind():
    assert agentgym.list_envs()[WEREWOLF].kinds == ("single", "aec", "parallel")
    assert agentgym.list_envs()[WEREWOLF].family == "werewolf"
    assert isinstance(make_aec(WEREWOLF, preset="lspo"), werewolf.env().__class__)
    assert make_parallel(WEREWOLF, num_players=6).possible_agents[-1] == "player_6"
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['player'\].*num_players"):
        make_parallel(WEREWOLF, player=3)
    with pytest.raises(ValueError, match="preset"):
        make_parallel(WEREWOLF, preset="classic")
    with pytest.raises(ValueError, match="werewolves"):
        werewolf.parallel_env(num_players=4, werewolves=2)
    with pytest.raises(agentgym.UnknownEnvError, match="Did you mean 'agentgym/Werewolf-v0'"):
        make_parallel("agentgym/Werewolff-v0")
    with pytest.raises(agentgym.UnknownEnvError, match="No parallel environment"):
        make_parallel("agentgym/Sokoban-v0")
    with pytest.raises(TypeError, match="give aec_entry_point, parallel_entry_point or both"):
        register_multiagent("test/Nothing-v0")
    with pytest.raises(TypeError, match="'module:Class' string"):
        register_multiagent("test/Eager-v0", parallel_entry_point=werewolf.parallel_env)
    assert "test/Nothing-v0" not in agentgym.list_envs()


def test_parallel_env_through_the_env_server():
    from agentgym.server.client import RemoteParallelEnv
    from agentgym.server.jsonsafe import to_jsonable
    from agentgym.server.launch import ServerProcess

    def bots(env: Any, infos: dict[str, Any]) -> dict[str, str]:
        return {
            a: decide(infos[a]["werewolf"], random.Random(a))
            for a in env.agents
            if infos[a]["action_required"]
        }

    with ServerProcess() as server:
        remote = RemoteParallelEnv(server.url, WEREWOLF, {"preset": "lspo"})
        try:
            assert remote.possible_agents == [f"player_{i}" for i in range(1, 8)]
            got = play_parallel(remote, 4, bots)
        finally:
            remote.close()
    expected = play_parallel(werewolf.parallel_env(preset="lspo"), 4, bots)
    assert to_jsonable(got) == to_jsonable(expected) and len(got) > 10


# ------------------------------------------------------------------ rules


def test_doctor_save_and_death_announcements():
    game = new_game(debate_turns=0)
    night(game, "Player5", protect="Player5")
    assert game.by_name["Player5"].alive
    assert texts(game, "dawn") == [
        ("Day 1 begins. The doctor saved the werewolves' victim: nobody died last night.")
    ]
    vote(game, {})
    night(game, "Player5", protect="Player6")
    assert not game.by_name["Player5"].alive
    assert texts(game, "dawn")[-1] == "Day 2 begins. Player5 was killed last night."
    assert "villager" not in texts(game, "dawn")[-1]
    revealing = new_game(debate_turns=0, reveal_role_on_death=True)
    night(revealing, "Player5")
    assert texts(revealing, "dawn")[-1].endswith("Player5 was a villager.")
    assert revealing.revealed == {"Player5": "villager"}


def test_self_protection_follows_the_rule():
    assert "Player4" in new_game().pending["player_4"].question.options
    game = new_game(allow_self_protect=False)
    assert "Player4" not in game.pending["player_4"].question.options
    game.answer("player_4", "<target>Player4</target>")
    assert "You cannot name Player4: that is you" in observation(game, "player_4")


def test_seer_learns_exact_roles_and_cannot_check_twice():
    game = new_game(debate_turns=0)
    night(game, "Player5", check="Player4")
    assert game.checks == {"Player4": "doctor"}
    assert "Night 1: you checked Player4: Player4 is the doctor." in game.lines["player_3"]
    vote(game, {})
    assert "Player4" not in game.pending["player_3"].question.options
    assert not game.answer("player_3", "<target>Player4</target>").valid
    assert "you already checked them" in observation(game, "player_3")
    assert game.answer("player_3", "<target>Player1</target>").valid
    night(game, "Player6")
    assert game.checks == {"Player4": "doctor", "Player1": "werewolf"}


def test_werewolves_see_the_proposal_and_ties_follow_the_seed():
    victims = {}
    for seed in [*list(range(8)), 0]:
        game = new_game(seed=seed, debate_turns=0)
        answer(game, {"Player1": "<target>Player5</target>"})  # the lead werewolf of night 1
        answer(game, {})  # the doctor and the seer pass (refused twice: no action)
        assert list(game.pending) == ["player_2"] and game.round == "wolves"
        assert view(game, "player_2")["proposal"] == "Player5"
        assert "Night 1: Player1 proposes to attack Player5." in observation(game, "player_2")
        assert "proposal" not in view(game, "player_5")
        assert "proposes" not in observation(game, "player_5")
        answer(game, {"Player2": "<target>Player6</target>"})  # a tie, drawn with the seed
        dead = [p.name for p in game.players if not p.alive]
        assert victims.setdefault(seed, dead) == dead and len(dead) == 1
    assert {d[0] for d in victims.values()} == {"Player5", "Player6"}


def test_vote_needs_a_strict_majority():
    game = new_game(debate_turns=0)
    night(game, None)  # the werewolves name nobody valid: their answers default to no victim
    vote(game, {"Player1": "Player5", "Player2": "Player5", "Player3": "Player6", "Player4": "Player6"})
    assert texts(game, "tally")[-1] == "Day 1 vote: Player5 2 votes, Player6 2 votes, 4 abstained."
    assert texts(game, "exile")[-1] == "Nobody is exiled." and len(game.living()) == 8
    night(game, None)
    vote(
        game,
        {n: "Player5" for n in ("Player1", "Player2", "Player3", "Player4")}
        | {n: "Player6" for n in ("Player5", "Player7", "Player8")},
    )
    assert texts(game, "exile")[-1] == "Nobody is exiled."  # 4 of 8 is no majority
    night(game, None)
    vote(game, {n: "Player5" for n in ("Player1", "Player2", "Player3", "Player4", "Player6")})
    assert texts(game, "exile")[-1] == "Player5 is exiled."


@pytest.mark.parametrize("tie, exiled", [("no_exile", set()), ("random", {"Player5", "Player6"})])
def test_plurality_and_tie_rules(tie, exiled):
    outcomes = set()
    for seed in range(10):
        game = new_game(seed=seed, debate_turns=0, exile_rule="plurality", vote_tie=tie)
        night(game, None)
        vote(game, {"Player1": "Player5", "Player2": "Player6"})
        outcomes |= {p.name for p in game.players if not p.alive}
    assert outcomes == exiled
    game = new_game(debate_turns=0, exile_rule="plurality")
    night(game, None)
    vote(game, {"Player1": "Player5", "Player2": "Player5", "Player3": "Player6"})
    assert not game.by_name["Player5"].alive  # most votes, far from a majority


def test_werewolves_win_at_parity_the_moment_it_happens():
    rules = {"num_players": 5, "werewolves": 1, "seers": 0, "doctors": 0, "debate_turns": 0}
    game = new_game("WVVVV", **rules)
    night(game, "Player2")  # 1 werewolf, 3 others
    vote(game, {n: "Player3" for n in ("Player1", "Player4", "Player5")})  # 1 against 2
    assert not game.over and game.round == "night"
    night(game, "Player4")  # 1 against 1: over at dawn, before any debate
    assert game.over and game.winner == "werewolves" and not game.truncated
    assert game.pending == {} and game.events[-1].kind == "end"
    assert [e.kind for e in game.events[-2:]] == ["dawn", "end"]
    assert game.by_name["Player5"].alive


def test_villagers_win_when_the_last_werewolf_goes():
    game = new_game("WVVVV", num_players=5, werewolves=1, seers=0, doctors=0, debate_turns=0)
    night(game, "Player2")
    vote(game, {n: "Player1" for n in ("Player3", "Player4", "Player5")})
    assert game.over and game.winner == "villagers" and game.pending == {}
    assert [e.kind for e in game.events[-2:]] == ["exile", "end"]


def test_dead_players_never_act_nor_can_be_named():
    env = werewolf.parallel_env(debate_turns=1)
    observations, infos = env.reset(options={"task_id": f"{DEAL}/0"})
    while env.game.by_name["Player5"].alive:  # the doctor and the seer pass
        observations, _, _, _, infos = env.step(
            {
                "player_1": "<target>Player5</target>",
                "player_2": "<target>Player5</target>",
                "player_5": "<target>Player1</target>",
            }
        )
    assert "player_5" in env.agents
    assert "You are dead" in observations["player_5"]
    events = len(env.game.events)
    while env.agents:
        assert not infos["player_5"]["action_required"]
        assert "player_5" not in env.game.pending
        assert all("Player5" not in q.question.options for q in env.game.pending.values())
        actions = {
            a: "<vote>Player5</vote>" if i == 0 else ""
            for i, a in enumerate(a for a in env.agents if infos[a]["action_required"])
        }
        actions["player_5"] = "<vote>Player1</vote><bid>4</bid><speech>Boo!</speech>"
        observations, _, _, _, infos = env.step(actions)
    new = env.game.events[events:]
    assert not any(e.data.get("actor") == "Player5" for e in new)
    assert any("You cannot name Player5: they are dead" in e.text for e in new)


def test_debate_by_bids_and_by_seat():
    game = new_game(debate_turns=3)
    night(game, "Player8")
    answer(game, {"Player3": "<bid>4</bid>", "Player5": "<bid>4</bid>"})
    speaker = next(iter(game.pending))
    assert game.round == "speech" and speaker in ("player_3", "player_5")
    answer(game, {game.by_agent[speaker].name: "<speech>I  am\n the seer.</speech>"})
    assert game.speeches == [(1, game.by_agent[speaker].name, "I am the seer.")]
    answer(game, {})  # all bids 0 end the debate
    assert game.round == "vote" and texts(game, "debate_end")
    seat = new_game(preset="lspo", deal="WWSDVVV")
    night(seat, "Player7")
    spoken = []
    while seat.round == "speech":
        spoken.append(next(iter(seat.pending)))
        answer(seat, {})
    assert spoken == [f"player_{i}" for i in range(1, 7)]  # day 1 starts at seat 1
    vote(seat, {})
    night(seat, "Player6")
    assert next(iter(seat.pending)) == "player_2"  # day 2 starts one seat later


def test_undecided_game_stops_after_max_days():
    env = werewolf.parallel_env(max_days=2, debate_turns=0)
    env.reset(seed=0)
    steps = 0
    while env.agents:
        _, rewards, terminations, truncations, _ = env.step({})
        steps += 1
    assert env.game.truncated and env.game.winner is None and env.game.day == 2
    assert set(rewards.values()) == {0.0} and all(truncations.values())
    assert not any(terminations.values()) and steps < 40


# ------------------------------------------------------------------ invalid answers

JUNK = [
    "",
    "   ",
    "x" * 100_000,
    "<target>" + "x" * MAX_RESPONSE_CHARS + "</target>",
    "\x00\xff\ufffd\x1b[2J",
    "🦜 ünïcødé 漢字",
    "<action>up</action>",
    "<vote></vote>",
    "<vote>Player99</vote>",
    "<vote>Player5</vote>",
    "<bid>9</bid>",
    "<bid>two</bid>",
    "<speech>" + "blah " * 400 + "</speech>",
    "<speech>   </speech>",
    "<target>Player5</target>",
    "<speech>I vote Player5</speech>",
]


def test_invalid_answers_get_feedback_then_a_default():
    game = new_game(debate_turns=1)
    night(game, "Player5")  # Player5 is dead from now on
    assert game.pending["player_6"].question.kind == "bid"
    assert not game.answer("player_6", "<vote>Player3</vote>").valid
    shown = observation(game, "player_6")
    assert "you used <vote>, which is for another question" in shown
    assert shown.endswith(
        "Answer again.\nDay 1 debate: how much do you want to speak next? "
        "Answer <bid>0</bid> (stay quiet) to <bid>4</bid> (you must speak)."
    )
    assert not game.answer("player_6", "<bid>7</bid>").valid
    assert "player_6" not in game.pending  # a second refusal applies the default
    assert (
        "A bid is a whole number from 0 to 4, not '7'. Your answer was refused twice: your bid is 0."
    ) in game.lines["player_6"]
    assert game.events[-1].kind == "bid" and game.events[-1].data["bid"] == 0
    answer(game, {})
    for text, expected in [
        ("<vote>Player5</vote>", "You cannot name Player5: they are dead"),
        ("<vote>Player42</vote>", "is not a player you can name here"),
        ("", "has no <vote>...</vote> part"),
        ("x" * 100_000, "answers longer than 8,192 characters are not read"),
    ]:
        game = new_game(debate_turns=0)
        night(game, "Player5")
        answered = game.answer("player_6", text)
        assert not answered.valid and expected in answered.message
        shown = observation(game, "player_6")
        assert expected in shown and len(shown) < 3_000
        game.answer("player_6", text)
        assert "player_6" not in game.pending and "Day 1: you abstain." in game.lines["player_6"]


@pytest.mark.parametrize("seed", [0, 1])
def test_junk_never_stalls_a_game(seed):
    """Every answer junk (some valid by chance): every game ends, within bounded steps."""
    rng = random.Random(seed)
    for make in (werewolf.parallel_env, lambda: make_parallel(WEREWOLF, preset="lspo")):
        env = make()
        trace = play_parallel(
            env,
            seed,
            lambda e, infos: {a: rng.choice(JUNK + infos[a]["admissible_actions"]) for a in e.agents},
        )
        assert env.game.over and len(trace) < 2 * 60 * env.rules.max_days
        assert all(len(o) < 20_000 for step in trace[2:] for o in step[0].values())
        assert any(info.get("action_valid") is False for step in trace[2:] for info in step[4].values())


HOSTILE_ANSWERS = [
    *HOSTILE,
    *(f"<{tag}>{h}</{tag}>" for tag in ("speech", "vote", "bid", "target") for h in HOSTILE),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hostile_answers_neither_raise_nor_reach_anyone_unprintable(seed):
    """Answers from support.hostile, bare and in every tag, most of a game's: no step raises or
    reports an error, and what people and players read (observations, renderings, the record
    as the harness writes it) is UTF-8 without control characters."""
    rng = random.Random(seed)
    renderings = []
    for mode in ("ansi", "html"):
        env = werewolf.parallel_env(preset="lspo", debate_turns=2, render_mode=mode)
        trace = play_parallel(
            env,
            seed,
            lambda e, infos: {
                a: rng.choice(HOSTILE_ANSWERS)
                if rng.random() < 0.7
                else rng.choice(infos[a]["admissible_actions"])
                for a in e.agents
                if infos[a]["action_required"]
            },
        )
        assert env.game.over
        assert not any("error" in info for step in trace[2:] for info in step[4].values())
        observations = [o for step in [trace[0], *(s[0] for s in trace[2:])] for o in step.values()]
        renderings += [*observations, env.render(), json.dumps(env.game_record())]
    for text in renderings:
        text.encode("utf-8")
        assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text)


def test_a_speech_reaches_the_others_printable():
    """Control characters (a terminal's escape sequences) and lone surrogates in a statement
    become U+FFFD; the rest of it is said as written."""
    env = werewolf.parallel_env(preset="lspo", debate_turns=1)
    said = "<speech>Trust me \x1b[2J\ud800 I am the seer\x00</speech>"
    observations, infos = env.reset(seed=0)
    while not any(
        "<speech>" in infos[a]["admissible_actions"][0] for a in env.agents if infos[a]["action_required"]
    ):
        *_, infos = env.step(
            {a: infos[a]["admissible_actions"][0] for a in env.agents if infos[a]["action_required"]}
        )
    (speaker,) = [a for a in env.agents if infos[a]["action_required"]]
    observations, *_, infos = env.step({speaker: said})
    assert infos[speaker]["action_valid"]
    heard = "Trust me \ufffd[2J\ufffd I am the seer\ufffd"
    assert env.game.events[-1].data["speech"] == heard
    assert all(heard in o for a, o in observations.items() if a != speaker)


# ------------------------------------------------------------------ information hiding

_ROLE_WORD = re.compile(r"\b(?:werewolf|seer|doctor|villager)\b", re.IGNORECASE)


def _roles_stated(text: str, names: list[str]) -> list[str]:
    """Sentences of ``text`` that name one of ``names`` and a role."""
    sentences = re.split(r"[.\n]", text)
    return [s for s in sentences if _ROLE_WORD.search(s) and any(re.search(rf"\b{n}\b", s) for n in names)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    preset=st.sampled_from(["arena", "lspo"]),
    reveal=st.booleans(),
    junk=st.floats(0, 0.5),
)
def test_villagers_never_learn_hidden_roles(seed, preset, reveal, junk):
    """Random games with random (and invalid) answers: no observation or bot view of a
    villager or the doctor holds another player's role unless the rules announced it."""
    rng = random.Random(seed)
    env = werewolf.parallel_env(preset=preset, reveal_role_on_death=reveal, debate_turns=3)
    observations, infos = env.reset(seed=seed)
    game = env.game
    while True:
        for p in game.players:
            if p.role in ("villager", "doctor"):
                hidden = [q.name for q in game.players if q.name != p.name and q.name not in game.revealed]
                assert _roles_stated(observations[p.agent], hidden) == []
                assert set(infos[p.agent]["werewolf"]["known_roles"]) == {p.name} | set(game.revealed)
                assert "proposal" not in infos[p.agent]["werewolf"]
                assert infos[p.agent]["instruction"] == instruction(env.rules, p.seat, p.role)
        if not env.agents:
            break
        actions = {
            a: rng.choice(JUNK) if rng.random() < junk else rng.choice(infos[a]["admissible_actions"])
            for a in env.agents
            if infos[a]["action_required"]
        }
        observations, _, _, _, infos = env.step(actions)
    assert game.over
    if reveal:
        assert set(game.revealed) == {p.name for p in game.players if not p.alive}
    else:
        assert game.revealed == {}


# ------------------------------------------------------------------ bots


def _bot_games(count: int, preset: str = "arena") -> list[dict[str, Any]]:
    records = []
    for seed in range(count):
        env = werewolf.parallel_env(preset=preset)
        play_parallel(
            env,
            seed,
            lambda e, infos, seed=seed: {
                a: decide(infos[a]["werewolf"], random.Random(f"{seed}/{a}"))
                for a in e.agents
                if infos[a]["action_required"]
            },
        )
        records.append(env.game_record())
    return records


def test_bots_play_by_their_strategy():
    records = _bot_games(40)
    winners = [r["winner"] for r in records]
    assert 0.2 < winners.count("villagers") / len(records) < 0.8  # a contest either way
    seer_reveals = protected_claimants = 0
    for record in records:
        roles = {p["name"]: p["role"] for p in record["players"]}
        claimants: list[str] = []
        for event in record["events"]:
            data = event["data"]
            if event["kind"] == "speech" and data["speech"] and "I am the seer" in data["speech"]:
                assert roles[data["actor"]] == "seer"  # bots never claim falsely
                assert all(
                    roles[n] == "werewolf" for n in re.findall(r"(Player\d+) is a werewolf", data["speech"])
                )
                seer_reveals += 1
                claimants.append(data["actor"])
            if event["kind"] == "protect" and claimants and data["target"] == claimants[-1]:
                protected_claimants += 1
            if event["kind"] == "tally":
                for voter, target in data["ballots"].items():
                    if roles[voter] == "werewolf" and target:
                        assert roles[target] != "werewolf"  # never against a partner
    assert seer_reveals > 10 and protected_claimants > 5


def test_bot_decisions():
    base = {
        "you": "Player6",
        "role": "villager",
        "day": 1,
        "phase": "vote",
        "question": "vote",
        "options": ["Player1", "Player2", "Player3", "Player4"],
        "alive": [f"Player{i}" for i in range(1, 7)],
        "known_roles": {"Player6": "villager"},
        "speeches": [
            [1, "Player3", "I am the seer. Player2 is a werewolf."],
            [1, "Player1", "I suspect Player3."],
        ],
    }
    rng = random.Random(0)
    assert decide(base, rng) == "<vote>Player2</vote>"
    assert (
        decide({**base, "question": "speech"}, rng)
        == "<speech>I believe the seer: Player2 is a werewolf.</speech>"
    )
    doctor = {**base, "role": "doctor", "question": "protect", "options": base["alive"]}
    assert decide(doctor, rng) == "<target>Player3</target>"
    wolf = {
        **base,
        "you": "Player2",
        "role": "werewolf",
        "known_roles": {"Player2": "werewolf", "Player1": "werewolf"},
    }
    assert decide(wolf, rng) == "<vote>Player3</vote>"
    assert decide({**wolf, "question": "attack", "proposal": "Player4"}, rng) == "<target>Player4</target>"
    seer = {
        **base,
        "you": "Player5",
        "role": "seer",
        "speeches": [],
        "known_roles": {"Player5": "seer", "Player4": "werewolf"},
    }
    assert decide({**seer, "question": "bid"}, rng) == "<bid>4</bid>"
    assert (
        decide({**seer, "question": "speech"}, rng)
        == "<speech>I am the seer. Player4 is a werewolf. Vote for Player4.</speech>"
    )
    quiet = {**base, "speeches": []}
    assert decide(quiet, rng) == "<vote>nobody</vote>"
    with pytest.raises(ValueError, match="werewolf"):
        BotPolicy().answer(GenerationRequest([], info={}))


# ------------------------------------------------------------------ the single-seat env


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gym_contract_check_env(seed):
    contract.check_env_contract(WEREWOLF, seed)


@pytest.mark.parametrize(
    "check",
    [
        contract.bad_actions_answered_not_raised,
        contract.deterministic_across_processes,
        contract.task_id_reproduces_start_state,
        contract.async_twins_match_sync,
    ],
)
def test_gym_contract(check):
    check(WEREWOLF)


def test_single_seat_plays_a_whole_game():
    import gymnasium

    env = gymnasium.make(WEREWOLF, seat="player_3", role="seer", preset="lspo")
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        assert info["role"] == "seer" and obs.startswith("You are Player3, the seer.")
        total, done = 0.0, False
        while not done:
            action = BotPolicy().answer(GenerationRequest([], info=info, seed=seed))
            obs, reward, terminated, truncated, info = env.step(action)
            total, done = total + reward, terminated or truncated
            assert info["action_valid"] or not env.unwrapped.game_env.game.by_agent["player_3"].alive
        assert total == (1.0 if info["success"] else -1.0 if terminated else 0.0)
        assert env.step("<vote>Player1</vote>")[0].startswith("The episode is over")
    with pytest.raises(ValueError, match="seat must be one of player_1 .. player_7"):
        agentgym.make(WEREWOLF, preset="lspo", seat="player_8")
    with pytest.raises(ValueError, match="role must be"):
        agentgym.make(WEREWOLF, role="hunter")
    with pytest.raises(ValueError, match="deals player_1 a"):
        agentgym.make(WEREWOLF, role="seer").reset(options={"task_id": "WWVVVVDS/0"})


def test_single_seat_others_are_any_policies():
    from agentgym.policies.scripted import RandomPolicy

    class Counting(BotPolicy):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []

        async def generate(self, requests):
            self.batches.append(len(requests))
            return await super().generate(requests)

    counting = Counting()
    env = agentgym.make(
        WEREWOLF, others={"player_2": RandomPolicy(seed=1), "player_3": counting}, role="villager"
    )
    _, info = env.reset(seed=4)
    while True:
        _, _, terminated, truncated, info = env.step(
            info["admissible_actions"][-1] if info["admissible_actions"] else ""
        )
        if terminated or truncated:
            break
    assert counting.batches and max(counting.batches) == 1  # player_3 alone


# ------------------------------------------------------------------ records


def test_record_json_html_and_renders():
    env = werewolf.parallel_env(render_mode="html")
    play_parallel(
        env,
        2,
        lambda e, infos: {
            a: decide(infos[a]["werewolf"], random.Random(0)) for a in e.agents if infos[a]["action_required"]
        },
    )
    record = json.loads(json.dumps(env.game_record()))
    assert record["format"] == "agentgym/werewolf-record/1"
    assert {p["role"] for p in record["players"]} == set(ROLES)
    assert record["winner"] in ("werewolves", "villagers")
    night_actions = [e for e in record["events"] if e["kind"] in ("attack", "protect", "check")]
    assert night_actions and all(e["audience"] for e in night_actions)  # private, not public
    assert any(e["audience"] == [] for e in record["events"])  # bids: hidden from players
    page = env.render()
    assert page.startswith("<!DOCTYPE html>") and page == to_html(record)
    assert "<script" not in page and "http" not in page.replace('lang="en"', "")
    for event in night_actions:
        assert event["text"].replace("'", "&#x27;") in page
    assert to_text(record).count("\n") >= len(record["events"])
    env = werewolf.parallel_env(render_mode="ansi")
    env.reset(seed=0)
    assert env.render().startswith("Werewolf ")


# ------------------------------------------------------------------ multi-agent rollouts


def test_collect_games_give_one_episode_per_seat():
    games = []
    bots = BotPolicy()
    from agentgym.policies.scripted import RandomPolicy

    random_policy = RandomPolicy(seed=0)
    policies = {f"player_{i}": random_policy if i <= 2 else bots for i in range(1, 8)}
    episodes = collect(
        WEREWOLF,
        policies,
        default_tasks(3, seed=10),
        group_size=2,
        env_kwargs={"preset": "lspo"},
        signals={"correct_vote": 0.5},
        progress=False,
        on_game=games.append,
    )
    assert len(episodes) == 3 * 2 * 7 and len(games) == 6
    assert [e.agent for e in episodes[:7]] == list(policies)
    for game in games:
        assert game.error is None and game.record["over"]
        for agent, episode in game.episodes.items():
            info = game.infos[agent]
            assert episode.success == info["success"]
            assert episode.group_id == f"{WEREWOLF}|-|{game.task.seed}|{agent}"
            assert episode.task_id == game.record["task_id"]
            votes = sum(t.info.get("signals", {}).get("correct_vote", 0.0) for t in episode.turns)
            team = 1.0 if info["success"] else -1.0 if game.record["winner"] else 0.0
            assert episode.outcome == pytest.approx(team + 0.5 * votes)
            assert all(t.action_valid for t in episode.turns)
    # The two games of a task share the deal, so each seat's group has one role.
    for start in range(0, len(episodes), 14):
        assert [e.task_id for e in episodes[start : start + 7]] == [
            e.task_id for e in episodes[start + 7 : start + 14]
        ]


def test_collect_through_the_aec_env():
    episodes = collect(lambda: werewolf.env(preset="lspo"), BotPolicy(), [Task(None, 1)], progress=False)
    parallel = collect(WEREWOLF, BotPolicy(), [Task(None, 1)], env_kwargs={"preset": "lspo"}, progress=False)
    assert len(episodes) == 7 and not any(e.error for e in episodes)
    assert [e.success for e in episodes] == [e.success for e in parallel]


# ------------------------------------------------------------------ evaluation


def test_eval_runs_games_and_reports_per_role(tmp_path):
    from agentgym.harness.eval import EvalSetupError, compose_eval_config, run_eval

    cfg = compose_eval_config(
        [
            f"env={WEREWOLF}",
            "tasks=6",
            f"out_dir={tmp_path}",
            "progress=false",
            "seats=[player_1]",
            "opponent={_target_: agentgym.envs.werewolf.bots.BotPolicy}",
            "policy._target_=agentgym.envs.werewolf.bots.BotPolicy",
            "+env_kwargs.preset=lspo",
        ]
    )
    out, summary = asyncio.run(run_eval(cfg))
    summary = summary["entries"][WEREWOLF]
    assert summary["games_played"] == 6 and summary["game_errors"] == 0
    assert summary["episodes"] == 6 and summary["games"] is True
    assert sum(r["players"] for r in summary["roles"].values()) == 6
    assert sum(r["players"] for r in summary["opponent_roles"].values()) == 36
    wolves = summary["opponent_roles"]["werewolf"]
    assert 0 <= wolves["wins"]["ci95"][0] <= wolves["wins"]["rate"] <= wolves["wins"]["ci95"][1]
    assert wolves["vote_accuracy"]["trials"] > 0
    assert summary["opponent_roles"]["villager"]["vote_accuracy"]["trials"] > 0
    seer = summary["roles"].get("seer") or summary["opponent_roles"]["seer"]
    assert seer["wolves_identified"]["trials"] == 2 * seer["players"]
    assert len(list(out.glob("games/*/*.json"))) == len(list(out.glob("games/*/*.html"))) == 6
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 42
    bad = compose_eval_config([f"env={WEREWOLF}", "seats=[player_1]", f"out_dir={tmp_path / 'bad'}"])
    with pytest.raises(EvalSetupError, match="set `opponent`"):
        asyncio.run(run_eval(bad))


# ------------------------------------------------------------------ the embedded model


@pytest.mark.slow
def test_embedded_model_in_every_seat():
    pytest.importorskip("torch")
    from agentgym.multiagent import default_prompter
    from agentgym.policies.hf import HFPolicy
    from agentgym.policy import SamplingParams

    policy = HFPolicy("smollm2-135m", seed=0)
    games = []
    episodes = collect(
        WEREWOLF,
        policy,
        [Task(None, 0)],
        progress=False,
        on_game=games.append,
        env_kwargs=SHORTEST_GAME,
        prompter=default_prompter("werewolf", history=0),
        sampling=SamplingParams(max_tokens=24),
    )
    assert len(episodes) == 5 and {e.agent for e in episodes} == set(games[0].episodes)
    assert games[0].error is None and games[0].record["over"]
    turns = [t for e in episodes for t in e.turns]
    assert turns and all(t.response_ids and len(t.response_logprobs) == len(t.response_ids) for t in turns)
    assert all(e.terminated or e.truncated for e in episodes)
