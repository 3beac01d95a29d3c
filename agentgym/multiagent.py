"""Multi-agent rollouts: games of PettingZoo text envs in which every seat has its own policy.

:func:`acollect` (and its blocking twin :func:`collect`) plays ``len(tasks) * group_size`` games,
each its own asyncio task, at most ``concurrency`` at once. A seat's policy may be a model, a
rule-based bot or anything else that speaks the :class:`~agentgym.policy.Policy` protocol; one
policy may play many seats, and the seating may depend on the task (a league opponent per group).
Requests go through one :class:`~agentgym.rollout.RequestBatcher` per policy, shared by every
seat and every game, so that a local model answers all the seats that wait on it in one batch.

Driving the env:

- a PettingZoo ``ParallelEnv`` (preferred: its seats answer concurrently): each step asks the
  live agents whose info says ``action_required`` (absent means ``True``) and steps with their
  actions; the other agents send none.
- a PettingZoo ``AECEnv``: ``agent_iter`` order, one agent at a time (games still run
  concurrently).

Recording: each agent's turns become one :class:`~agentgym.episode.Episode` (``agent`` is the
seat). A :class:`~agentgym.episode.Turn` is one policy call: the observation the seat answered,
the response and its token data, the action, the agent's info after the step, and as reward
every env reward the agent received from that step up to its next turn (plus the weighted
``signals``); rewards received before an agent's first turn count in its ``outcome`` only.
``success`` is the agent's last ``info["success"]``. Episode ``group_id`` is
``env_id|task_id|seed|agent``: the ``group_size`` games of one task and seed form, per seat, one
group of episodes from the same start, for group advantage estimators.

Info keys that multi-agent envs add to the standard ones of :class:`~agentgym.env.EnvInfo`:

| key | meaning |
|---|---|
| ``action_required`` | parallel envs: whether the agent's action is read this step |
| ``role``, ``team`` | the agent's role and team, where the game has them (per-role statistics) |
| ``signals`` | ``{name: value}`` facts about the agent's last action, for ``signals=`` shaping |
| ``metrics`` | at the end: ``{name: [hits, trials]}`` rates that the harness aggregates per role |

An env whose agents have roles may list them in ``metadata["roles"]`` (the values ``info["role"]``
takes): trainers check ``train_roles`` against it.

An env may also have ``game_record()`` (the whole game as JSON values, for people): when
``acollect`` is given an ``on_game``, it is kept in each :class:`GameResult` passed to it, with the
env's final ``render()`` when the env was made with a ``render_mode`` (without an ``on_game``
nobody would read them, and they are not made).

Failure isolation: an env or policy that raises, or a generate call over its timeout, ends that
game; all its episodes are truncated with the cause in ``Episode.error`` (a game whose env could
not be made has none: its agents are unknown). The other games go on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from pettingzoo import AECEnv, ParallelEnv

from agentgym.episode import Episode
from agentgym.heap import rollout_collector
from agentgym.policy import Generation, GenerationRequest, Policy, SamplingParams
from agentgym.prompting import Prompter, PrompterProtocol
from agentgym.registry import make_aec, make_parallel, manifest
from agentgym.rollout import (
    EnvPool,
    RequestBatcher,
    Task,
    Timeouts,
    generated_turn,
    group_id,
    progress_bar,
    request_seed,
)

__all__ = [
    "Batchers",
    "GameResult",
    "Seat",
    "Seating",
    "WholeResponse",
    "acollect",
    "collect",
    "default_prompter",
    "step_parallel",
]

MultiAgentEnv: TypeAlias = AECEnv | ParallelEnv
SYSTEM_PROMPT = (
    "You are a player in a multi-player text game. Answer each question in the format it asks for."
)


@dataclass(frozen=True)
class WholeResponse:
    """A prompter whose action is the whole response: for envs that read structured parts out
    of free text themselves (Werewolf's ``<vote>``, ``<speech>``, ...). Messages come from the
    wrapped ``prompter``."""

    prompter: PrompterProtocol

    def system(self, instruction: str) -> str:
        return self.prompter.system(instruction)

    def messages(
        self, system: str, past: Any, observation: str, admissible: Any = None
    ) -> list[dict[str, str]]:
        return self.prompter.messages(system, past, observation, admissible)

    def parse(self, response: str, admissible: Any = None) -> str:
        return response


def default_prompter(family: str = "misc", **options: Any) -> WholeResponse:
    """The prompter of multi-agent seats: a :class:`~agentgym.prompting.Prompter` of
    ``family`` (``options`` are its fields) whose actions are whole responses, with the
    game player's system prompt unless ``options`` set one (``None`` leaves it unset)."""
    if options.get("system_prompt") is None:
        options["system_prompt"] = SYSTEM_PROMPT
    return WholeResponse(Prompter(family=family, **options))


class Seat:
    """One agent of one game: how it asks its policy, its prompt history, and its episode.

    ``batcher`` sends the seat's requests to its policy (shared by every seat of that policy).
    Sampling seeds are :func:`~agentgym.rollout.request_seed` of (the task's seed, ``member``,
    the seat's turn), so ``member`` must differ between the seats of one game and between games
    of one group.
    """

    def __init__(
        self,
        episode: Episode,
        batcher: RequestBatcher,
        prompter: PrompterProtocol,
        sampling: SamplingParams,
        member: int,
        signals: Mapping[str, float] | None = None,
    ):
        self.episode = episode
        self.batcher = batcher
        self.prompter = prompter
        self.sampling = sampling
        self.member = member
        self.signals = dict(signals or {})
        self.system = ""
        self.past: list[tuple[str, str]] = []
        """(observation, response) of the seat's turns, for its chat (kept only when its policy
        reads messages)."""
        self.received = 0.0
        """Env rewards (and signals) so far."""
        self._asked: tuple[str, dict[str, Any], Generation, str | None, float] | None = None
        self._asked_at = 0.0

    def start(self, info: dict[str, Any]) -> None:
        """Begin the episode from the agent's first info."""
        self.episode.task_id = str(info.get("task_id", self.episode.task_id))
        self.episode.instruction = info.get("instruction", "")
        self.system = self.prompter.system(self.episode.instruction)

    def ask(self, observation: str, info: dict[str, Any]) -> GenerationRequest:
        """The request for the seat's action on ``observation``; :meth:`take` its answer."""
        if isinstance(observation, str):
            observation = str(observation)  # a str subclass (PettingZoo's typed text) is GC-tracked
        request = GenerationRequest(  # in field order (keywords would cost a dict per turn)
            self.prompter.messages(self.system, self.past, observation, info.get("admissible_actions"))
            if self.batcher.reads_messages
            else [],
            self.sampling,
            request_seed(self.episode.seed, self.member, len(self.episode.turns)),
            observation,
            info,
            self.episode.episode_id,
        )
        self._asked_at = time.perf_counter()
        return request

    def take(self, request: GenerationRequest, generation: Generation) -> str:
        """The action in the answer ``generation`` to :meth:`ask`'s ``request`` (``""`` when the
        response has none), remembered for :meth:`record`."""
        action = self.prompter.parse(generation.text, request.info.get("admissible_actions"))
        seconds = time.perf_counter() - self._asked_at
        self._asked = (request.observation, request.info, generation, action, seconds)
        return action or ""

    async def act(self, observation: str, info: dict[str, Any]) -> str:
        """The seat's action for ``observation`` (``""`` when the response has none)."""
        request = self.ask(observation, info)
        return self.take(request, await self.batcher.submit(request))

    def record(self, reward: float, info: dict[str, Any], step_seconds: float) -> None:
        """Record the turn of the last :meth:`act` with the env's answer to it."""
        assert self._asked is not None, "record() follows act()"
        observation, asked_info, generation, action, generate_seconds = self._asked
        self._asked = None
        reward = float(reward)
        if self.signals:
            shaping = info.get("signals") or {}
            reward += sum(w * float(shaping.get(k, 0.0)) for k, w in self.signals.items())
        self.received += reward
        self.episode.turns.append(
            generated_turn(
                generation,
                action,
                observation=observation,
                reward=reward,
                state_key=asked_info.get("state_key"),
                info=info,
                timings={"generate": generate_seconds, "step": step_seconds},
            )
        )
        if self.batcher.reads_messages:
            self.past.append((observation, generation.text))

    def credit(self, reward: float) -> None:
        """Add ``reward`` to the seat's last turn (to its outcome only, before any turn)."""
        reward = float(reward)
        self.received += reward
        if self.episode.turns:
            self.episode.turns[-1].reward += reward

    def finish(self, info: dict[str, Any], terminated: bool, truncated: bool) -> None:
        self.episode.terminated, self.episode.truncated = bool(terminated), bool(truncated)
        self.episode.success = bool(info.get("success", False))
        self.episode.outcome = self.received


@dataclass
class GameResult:
    """One finished game: every agent's episode and last info, and the env's record."""

    task: Task
    member: int
    """Index of the game within its group."""
    episodes: dict[str, Episode]
    """By agent, in the env's ``possible_agents`` order."""
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each agent's last info."""
    record: Any = None
    """``env.game_record()`` at the end, for envs that have one (only when :func:`acollect` has
    an ``on_game``: nothing else reads it)."""
    rendering: Any = None
    """``env.render()`` at the end, for envs made with a ``render_mode`` (only with an
    ``on_game``, like ``record``)."""
    error: str | None = None


class Batchers:
    """One :class:`~agentgym.rollout.RequestBatcher` per policy object (by identity), made on
    first use with the policy's ``max_batch_size`` and ``max_concurrent_batches``, so that all
    the seats a policy plays share its batches. ``timeout`` bounds each generate call."""

    def __init__(self, timeout: float | None = None):
        self.timeout = timeout
        self._known: list[tuple[Policy, RequestBatcher]] = []

    def of(self, policy: Policy) -> RequestBatcher:
        """``policy``'s batcher."""
        for known, batcher in self._known:
            if known is policy:
                return batcher
        batcher = RequestBatcher(
            policy,
            getattr(policy, "max_batch_size", None),
            getattr(policy, "max_concurrent_batches", None),
            self.timeout,
        )
        self._known.append((policy, batcher))
        return batcher

    async def aclose(self) -> None:
        for _, batcher in self._known:
            await batcher.aclose()


@dataclass
class _Run:
    """What every game of one :func:`acollect` call shares."""

    env_id: str
    pool: EnvPool
    policies: Callable[[Task, str], Policy]
    """The policy of (the task's games, the agent)."""
    batchers: Batchers
    prompters: Callable[[str], Any]
    sampling: SamplingParams
    signals: Mapping[str, float]
    max_game_steps: int
    keep_records: bool
    """Whether games keep the env's record and rendering (someone reads each result)."""


async def step_parallel(
    env: ParallelEnv,
    seats: Mapping[str, Seat],
    observations: dict[str, Any],
    infos: dict[str, dict[str, Any]],
    given: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], ...]:
    """One step of a parallel game: every seat whose agent must act (``action_required``) asks
    its policy (with one :meth:`~agentgym.rollout.RequestBatcher.submit_all` per policy: inline
    policies one after another, the others concurrently); ``given``
    adds actions decided elsewhere (agents without a seat). Each seat's turn is recorded and its
    rewards credited; a finished seat's episode is closed. Returns what ``env.step`` returned,
    with ``infos`` merged into the previous ones."""
    given = given or {}
    acting = [
        a for a in env.agents if infos[a].get("action_required", True) and a in seats and a not in given
    ]
    if not acting:  # no request, so no batcher to yield: let the loop run (other games, Ctrl-C)
        await asyncio.sleep(0)
    by_batcher: dict[RequestBatcher, list[Seat]] = {}
    for agent in acting:
        by_batcher.setdefault(seats[agent].batcher, []).append(seats[agent])
    actions: dict[str, str] = {}
    for batcher, asking in by_batcher.items():
        if batcher.inline:
            actions.update(await _ask(batcher, asking, observations, infos))
    waiting = [_ask(b, asking, observations, infos) for b, asking in by_batcher.items() if not b.inline]
    for answered in await asyncio.gather(*waiting) if waiting else ():
        actions.update(answered)
    actions.update(given)
    start = time.perf_counter()
    observations, rewards, terminations, truncations, step_infos = await _call(env, "step", actions)
    seconds = time.perf_counter() - start
    infos = {**infos, **step_infos}
    for agent, reward in rewards.items():
        seat = seats.get(agent)
        if seat is None:
            continue
        if agent in acting:
            seat.record(reward, infos[agent], seconds)
        elif reward:
            seat.credit(reward)
        if terminations[agent] or truncations[agent]:
            seat.finish(infos[agent], terminations[agent], truncations[agent])
    return observations, rewards, terminations, truncations, infos


async def _ask(
    batcher: RequestBatcher,
    seats: list[Seat],
    observations: Mapping[str, Any],
    infos: Mapping[str, dict[str, Any]],
) -> dict[str, str]:
    """``{agent: action}`` of ``seats`` (all played by ``batcher``'s policy), asked together."""
    requests = [seat.ask(observations[seat.episode.agent], infos[seat.episode.agent]) for seat in seats]
    generations = await batcher.submit_all(requests)
    return {seat.episode.agent: seat.take(r, g) for seat, r, g in zip(seats, requests, generations)}


async def _play_parallel(
    env: ParallelEnv, seats: dict[str, Seat], task: Task, max_game_steps: int
) -> dict[str, dict[str, Any]]:
    observations, infos = await _call(env, "reset", seed=task.seed, options=_options(task))
    for agent in env.agents:
        seats[agent].start(infos[agent])
    for _ in range(max_game_steps):
        if not env.agents:
            break
        observations, *_, infos = await step_parallel(env, seats, observations, infos)
    return infos


async def _play_aec(
    env: AECEnv, seats: dict[str, Seat], task: Task, max_game_steps: int
) -> dict[str, dict[str, Any]]:
    env.reset(seed=task.seed, options=_options(task))
    infos = dict(env.infos)
    for agent in env.agents:
        seats[agent].start(infos[agent])
    for agent in env.agent_iter(max_game_steps):
        observation, reward, terminated, truncated, info = env.last()
        seats[agent].credit(reward)
        infos[agent] = info
        if terminated or truncated:
            env.step(None)
            seats[agent].finish(info, terminated, truncated)
            continue
        action = await seats[agent].act(observation, info)
        start = time.perf_counter()
        env.step(action)
        infos[agent] = env.infos.get(agent, info)
        seats[agent].record(0.0, infos[agent], time.perf_counter() - start)
    return infos


async def _call(env: ParallelEnv, method: str, *args: Any, **kwargs: Any) -> Any:
    """``env.<method>``, through its async twin ``a<method>`` where it has one (a remote env)."""
    twin = getattr(env, f"a{method}", None)
    if twin is not None:
        return await twin(*args, **kwargs)
    return getattr(env, method)(*args, **kwargs)


def _options(task: Task) -> dict[str, Any] | None:
    return {"task_id": task.task_id} if task.task_id is not None else None


async def _play(run: _Run, task: Task, member: int) -> GameResult:
    group = group_id(run.env_id, task)
    env, healthy = None, True
    result = GameResult(task, member, {})
    seats: dict[str, Seat] = {}
    try:
        env = await run.pool.acquire()
        for index, agent in enumerate(env.possible_agents):
            policy = run.policies(task, agent)
            episode = Episode(
                episode_id=f"{group}|{agent}#{member}",
                env_id=run.env_id,
                task_id=task.task_id or "",
                group_id=f"{group}|{agent}",
                seed=task.seed,
                agent=agent,
            )
            seats[agent] = Seat(
                episode,
                run.batchers.of(policy),
                run.prompters(agent),
                run.sampling,
                member * len(env.possible_agents) + index,
                run.signals,
            )
        result.episodes = {agent: seat.episode for agent, seat in seats.items()}
        play = _play_parallel if isinstance(env, ParallelEnv) else _play_aec
        result.infos = await play(env, seats, task, run.max_game_steps)
        for agent in env.agents:  # still playing after max_game_steps
            seats[agent].finish(result.infos.get(agent, {}), False, True)
        if run.keep_records and callable(getattr(env, "game_record", None)):
            result.record = env.game_record()
        if run.keep_records and getattr(env, "render_mode", None) is not None:
            result.rendering = env.render()
    except Exception as exc:  # the game ends with its cause; the other games go on
        result.error = f"{type(exc).__name__}: {exc}"
        healthy = False
    finally:
        if env is not None:
            await run.pool.release(env, healthy)
    if result.error:
        for episode in result.episodes.values():
            episode.error = result.error
            episode.truncated, episode.terminated, episode.success = True, False, False
    return result


def _per_agent(value: Any, name: str) -> Callable[[str], Any]:
    """``value`` as a function of the agent: a mapping is looked up (a missing agent raises
    ``ValueError``), anything else serves every agent."""
    if isinstance(value, Mapping):

        def lookup(agent: str) -> Any:
            if agent not in value:
                raise ValueError(f"{name} has no entry for agent {agent!r} (it names {sorted(value)})")
            return value[agent]

        return lookup
    return lambda agent: value


Seating: TypeAlias = Policy | Mapping[str, Policy]
"""One policy for every seat, or ``{agent: policy}`` naming every agent."""


def _seating(policies: Seating | Callable[[Task], Seating]) -> Callable[[Task, str], Policy]:
    """``policies`` as a function of (task, agent): a :data:`Seating` serves every task; a
    function of the task is asked for each task's seating."""
    if isinstance(policies, Mapping) or isinstance(policies, Policy):
        lookup = _per_agent(policies, "policies")
        return lambda task, agent: lookup(agent)
    return lambda task, agent: _per_agent(policies(task), "policies")(agent)


async def acollect(
    env: str | Callable[[], MultiAgentEnv],
    policies: Seating | Callable[[Task], Seating],
    tasks: Iterable[Task],
    *,
    group_size: int = 1,
    max_game_steps: int = 10_000,
    concurrency: int = 16,
    prompter: PrompterProtocol | Mapping[str, PrompterProtocol] | None = None,
    sampling: SamplingParams | None = None,
    signals: Mapping[str, float] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    timeouts: Timeouts | None = None,
    progress: bool = True,
    on_game: Callable[[GameResult], None] | None = None,
    skip: Callable[[Task, int], bool] | None = None,
) -> list[Episode]:
    """Play ``group_size`` games of every task; return every agent's episode, in (task, member,
    agent) order.

    Args:
        env: a multi-agent id (made with ``env_kwargs``: its ``ParallelEnv`` where registered,
            else its ``AECEnv``) or a factory returning a fresh PettingZoo env.
        policies: one policy for every seat, or ``{agent: policy}`` naming every agent. The same
            policy object may play several seats (its requests are batched together).
        tasks: start states; ``reset(seed=task.seed, options={"task_id": task.task_id})``.
        max_game_steps: env steps (parallel) or agent turns (AEC) after which a game is truncated
            (a bound on the whole game; a single-agent episode's is ``max_turns``, one agent's
            turns).
        concurrency: games in flight at once.
        prompter: message builder and action parser (see :class:`WholeResponse`), one for every
            seat or ``{agent: prompter}``; default :func:`default_prompter` of the env's family.
        signals: ``{name: weight}``: each turn's reward gains ``weight * info["signals"][name]``
            (per-turn shaping, e.g. ``{"correct_vote": 0.1}``).
        timeouts: only ``generate`` applies (to policies that are not inline); env calls run
            in this process (a remote env has its own timeouts).
        on_game: called with each finished :class:`GameResult` (in completion order), e.g. to
            save its episodes and record as soon as it ends.
        skip: ``skip(task, member)`` true leaves that game out (e.g. one a resumed evaluation
            already has).

    Like :func:`agentgym.rollout.acollect`, it runs with the cycle collector set for what it
    keeps (:func:`~agentgym.heap.rollout_collector`).
    """
    if group_size < 1 or max_game_steps < 1 or concurrency < 1:
        raise ValueError(
            f"group_size, max_game_steps and concurrency must be >= 1, got "
            f"{group_size}, {max_game_steps}, {concurrency}"
        )
    tasks = list(tasks)
    if isinstance(env, str):
        env_id, family = env, manifest(env).family
        kinds, kwargs = manifest(env).kinds, dict(env_kwargs or {})
        maker = make_parallel if "parallel" in kinds else make_aec

        async def factory() -> MultiAgentEnv:
            return maker(env_id, **kwargs)
    else:
        env_id, family = getattr(env, "env_id", getattr(env, "__name__", "env")), "misc"

        async def factory() -> MultiAgentEnv:
            return env()

    run = _Run(
        env_id=env_id,
        pool=EnvPool(factory),
        policies=_seating(policies),
        batchers=Batchers((timeouts or Timeouts()).generate),
        prompters=_per_agent(prompter or default_prompter(family), "prompter"),
        sampling=sampling or SamplingParams(),
        signals=dict(signals or {}),
        max_game_steps=max_game_steps,
        keep_records=on_game is not None,
    )
    slots = asyncio.Semaphore(concurrency)
    stats = {"done": 0, "errors": 0, "turns": 0}
    started = time.perf_counter()
    units = [(t, m) for t in tasks for m in range(group_size) if skip is None or not skip(t, m)]
    bar, bar_id = progress_bar(env_id, len(units), progress)

    async def one(task: Task, member: int) -> GameResult:
        async with slots:
            game = await _play(run, task, member)
        stats["done"] += 1
        stats["errors"] += game.error is not None
        stats["turns"] += sum(e.num_turns for e in game.episodes.values())
        rate = stats["turns"] / max(time.perf_counter() - started, 1e-9)
        bar.update(
            bar_id,
            advance=1,
            status=f"{rate:,.0f} turns/s"
            + (f"  [red]{stats['errors']} errors[/red]" if stats["errors"] else ""),
        )
        if on_game is not None:
            on_game(game)
        return game

    with bar, rollout_collector():
        try:
            await _check_seats(run, tasks)
            async with asyncio.TaskGroup() as group:
                running = [group.create_task(one(t, m)) for t, m in units]
            return [e for r in running for e in r.result().episodes.values()]
        finally:
            await run.batchers.aclose()
            await run.pool.close()


async def _check_seats(run: _Run, tasks: Iterable[Task]) -> None:
    """Raise ``ValueError`` now, not in every game, when a mapping (of any task) misses one of
    the env's agents."""
    env = await run.pool.acquire()
    try:
        for agent in env.possible_agents:
            run.prompters(agent)
            for task in tasks:
                run.policies(task, agent)
    finally:
        await run.pool.release(env, True)


P = TypeVar("P")


def possible_agents(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None
) -> tuple[list[str], dict[str, Any]]:
    """The agents of the multi-agent env ``env_id`` (made with ``env_kwargs`` once, and closed)
    and its ``metadata``."""
    maker = make_parallel if "parallel" in manifest(env_id).kinds else make_aec
    probe = maker(env_id, **dict(env_kwargs or {}))
    try:
        return list(probe.possible_agents), dict(probe.metadata)
    finally:
        probe.close()


def seat_policies(
    agents: Iterable[str], policy: P, seats: Iterable[str] = (), opponent: P | None = None
) -> dict[str, P]:
    """``{agent: policy}`` for :func:`acollect`: ``policy`` plays ``seats`` (empty: every agent)
    and ``opponent`` the others. ``ValueError`` for a seat that is not one of ``agents``, or for
    seats left to an ``opponent`` that is ``None``."""
    agents, seats = list(agents), list(seats) or list(agents)
    unknown = sorted(set(seats) - set(agents))
    if unknown:
        raise ValueError(f"seats {unknown} are not agents of the env: {agents}")
    if opponent is None:
        if len(set(seats)) < len(agents):
            raise ValueError(
                f"the policy plays {seats} only: set `opponent` to the policy of the other seats"
            )
        return dict.fromkeys(agents, policy)
    return {a: policy if a in seats else opponent for a in agents}


def collect(*args: Any, **kwargs: Any) -> list[Episode]:
    """Blocking :func:`acollect` (starts an event loop; inside one, await ``acollect``)."""
    return asyncio.run(acollect(*args, **kwargs))
