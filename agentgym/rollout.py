"""The rollout engine: many episodes at once, each its own asyncio task.

:func:`acollect` (and its blocking twin :func:`collect`) runs ``len(tasks) * group_size`` episodes
with at most ``concurrency`` in flight. There are no lock-step rounds: an episode asks the policy
for its next response as soon as its env has answered. Requests that become ready together are
handed to the policy as one batch (:class:`RequestBatcher`), so that a local model generates them
in one forward pass while a server-backed policy simply sees them concurrently.

:class:`EpisodeRunner` is the machinery underneath, for a caller that decides which episodes to
run while others are still running (the asynchronous trainer): one episode per call, sharing the
envs, the request batching and the ``concurrency`` slots.

Failure isolation: an env that raises, a policy that raises, or a call that exceeds its timeout
truncates only the affected episodes, with the cause in ``Episode.error``; the others go on. An
env that failed is closed and never reused; every env is closed when collection ends, also on
cancellation.

Sandboxes: with ``sandbox="local" | "docker"`` every env is a session on an env server in a
sandbox, from one :class:`~agentgym.hosting.EnvServerPool` for the whole call (or the pool
passed in, shared across calls). An episode whose sandbox dies ends with an ``Episode.error``
that says how it died; the pool's next envs go to new sandboxes, and the batch goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import gymnasium as gym
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from agentgym.asyncenv import async_twins
from agentgym.env import TextEnv
from agentgym.episode import Episode, Turn
from agentgym.heap import rollout_collector
from agentgym.policy import Generation, GenerationRequest, Policy, SamplingParams
from agentgym.prompting import Prompter, PrompterProtocol
from agentgym.registry import make, manifest

if TYPE_CHECKING:
    from agentgym.hosting import ServerPool
    from agentgym.hosting.ray import SandboxChoice
    from agentgym.sandbox.spec import Backend

__all__ = [
    "EnvFailure",
    "EnvPool",
    "EpisodeRunner",
    "RequestBatcher",
    "Task",
    "Timeouts",
    "acollect",
    "collect",
    "generated_turn",
    "group_id",
    "progress_bar",
    "request_seed",
    "sandbox_choice",
]

EnvFactory = Callable[[], gym.Env]
AsyncEnvFactory = Callable[[], Awaitable[gym.Env]]
T = TypeVar("T")


@dataclass(frozen=True)
class Task:
    """A start state: ``reset(seed=seed, options={"task_id": task_id})``.

    ``task_id=None`` lets the env draw the task from ``seed``.
    """

    task_id: str | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Timeouts:
    """Per-call limits in seconds."""

    reset: float = 120.0
    step: float = 120.0
    generate: float = 600.0


class RequestBatcher:
    """Gathers generation requests that are ready at the same time into one ``generate`` call.

    Requests submitted during one event-loop iteration form a batch (at most ``max_batch``).
    With ``max_inflight`` set (a local model that can run one batch at a time), requests that
    arrive while the limit is reached wait and go out together when a batch finishes.
    ``timeout`` (seconds) bounds each ``generate`` call, not the wait before it; a policy that
    serves requests independently (a server) sets ``max_batch_size = 1`` so that each request
    has its own call and its own timeout.

    An ``inline`` policy (see :class:`~agentgym.policy.Policy`) is asked for each request alone,
    when its submitter awaits it, or for the requests given together to :meth:`submit_all`: no
    future, no batch across submitters (a rule-based player gains nothing from batches, and
    those are most of what the engine costs it). Since such a request never waits,
    the batcher gives the event loop a turn once ``time_slice`` seconds have passed since its
    last one (other games and sessions, timeouts, Ctrl-C): a game of inline seats runs that long
    at a stretch, with its data still in the CPU's caches, instead of yielding every turn.
    ``timeout`` does not apply to it; while paused, its requests wait like any other.
    """

    time_slice = 0.005
    """Seconds an inline policy's submitters may run before the batcher yields to the loop."""

    def __init__(
        self,
        policy: Policy,
        max_batch: int | None = None,
        max_inflight: int | None = None,
        timeout: float | None = None,
    ):
        self.policy = policy
        self.timeout = timeout
        self.max_batch = max_batch
        self.max_inflight = max_inflight
        self.inline = bool(getattr(policy, "inline", False))
        self.reads_messages = bool(getattr(policy, "reads_messages", True))
        self._pending: list[tuple[GenerationRequest, asyncio.Future[Generation]]] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._flush_scheduled = False
        self._paused = False
        self._slice_ends = 0.0

    def pause(self) -> None:
        """Hold new batches back (those already sent run on) until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        """Send what waited while paused."""
        self._paused = False
        self._schedule()

    def submit(self, request: GenerationRequest) -> Awaitable[Generation]:
        """The generation of ``request``: a future, resolved when its batch returns; for an
        inline policy a coroutine that asks the policy when awaited (or, paused then, waits in
        the queue like any request)."""
        if self.inline:
            return self._answer(request)
        return self._queued(request)

    async def submit_all(self, requests: list[GenerationRequest]) -> list[Generation]:
        """The generations of ``requests``, which are ready together (the seats of one game that
        act in one step), in order. An inline policy answers them in one ``generate`` call."""
        if not self.inline or self._paused:
            return list(await asyncio.gather(*(self._queued(r) for r in requests)))
        generations = self._counted(await self.policy.generate(requests), len(requests))
        if time.perf_counter() >= self._slice_ends:  # the slice is over: give the loop a turn
            await asyncio.sleep(0)
            self._slice_ends = time.perf_counter() + self.time_slice
        return generations

    async def _answer(self, request: GenerationRequest) -> Generation:
        return (await self.submit_all([request]))[0]

    def _queued(self, request: GenerationRequest) -> asyncio.Future[Generation]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._schedule()
        return future

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._pending = [(r, f) for r, f in self._pending if not f.done()]
        while (
            self._pending
            and not self._paused
            and (self.max_inflight is None or len(self._inflight) < self.max_inflight)
        ):
            size = self.max_batch or len(self._pending)
            batch, self._pending = self._pending[:size], self._pending[size:]
            task = asyncio.ensure_future(self._run(batch))
            self._inflight.add(task)
            task.add_done_callback(self._batch_done)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        # Only now is the batch out of _inflight: a flush scheduled from inside the batch could
        # still find the limit reached and strand the requests that arrived meanwhile.
        self._inflight.discard(task)
        if self._pending:
            self._schedule()

    async def _generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        try:
            async with asyncio.timeout(self.timeout):
                generations = await self.policy.generate(requests)
        except TimeoutError:
            raise TimeoutError(f"generate timed out after {self.timeout} s") from None
        return self._counted(generations, len(requests))

    def _counted(self, generations: list[Generation], expected: int) -> list[Generation]:
        if len(generations) != expected:
            raise RuntimeError(
                f"{type(self.policy).__name__}.generate returned {len(generations)} "
                f"generations for {expected} requests"
            )
        return generations

    async def _run(self, batch: list[tuple[GenerationRequest, asyncio.Future[Generation]]]) -> None:
        try:
            try:
                results: list[Generation | BaseException] = list(await self._generate([r for r, _ in batch]))
            except Exception:
                if len(batch) == 1:
                    raise
                # One bad request must not fail its batch-mates: retry each alone.
                singles = await asyncio.gather(
                    *(self._generate([r]) for r, _ in batch), return_exceptions=True
                )
                results = [s if isinstance(s, BaseException) else s[0] for s in singles]
        except Exception as exc:
            results = [exc]
        for (_, future), result in zip(batch, results):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def aclose(self) -> None:
        """Cancel batches still running (their episodes have already ended)."""
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)


class EnvPool:
    """Idle envs of one factory, reused across episodes (or multi-agent games). Envs that failed,
    and idle envs that ``usable`` rejects when they would be reused (their sandbox died
    meanwhile), are closed instead. An env is anything with ``close()`` or ``aclose()``."""

    def __init__(self, factory: Callable[[], Awaitable[Any]], usable: Callable[[Any], bool] | None = None):
        self.factory = factory
        self.usable = usable
        self.idle: list[Any] = []
        self.all: list[Any] = []

    async def acquire(self) -> Any:
        while self.idle:
            env = self.idle.pop()
            if self.usable is None or self.usable(env):
                return env
            await self._discard(env)
        env = await self.factory()
        self.all.append(env)
        return env

    async def release(self, env: Any, healthy: bool) -> None:
        if healthy:
            self.idle.append(env)
        else:
            await self._discard(env)

    async def _discard(self, env: Any) -> None:
        self.all.remove(env)
        await _close_quietly(env)

    async def close(self) -> None:
        envs, self.all, self.idle = self.all, [], []
        for env in envs:
            await _close_quietly(env)


async def _close_quietly(env: Any) -> None:
    """Close ``env``, through its async ``aclose`` where it has one (a remote env's connections
    belong to this event loop)."""
    try:
        aclose = getattr(env, "aclose", None)
        if aclose is not None:
            await aclose()
        else:
            env.close()
    except Exception:  # closing is best effort; the episode already carries the real error
        pass


def _async_api(env: gym.Env):
    """(areset, astep, interruptible) for ``env``, every wrapper on it honoured.

    A :class:`~agentgym.env.TextEnv` is driven through its async twins, with the wrappers that have an async
    form applied around them (:func:`~agentgym.asyncenv.async_twins`; Gymnasium's order
    enforcing and passive checker are bypassed: the engine enforces ``max_turns`` itself); any
    other env, or one wrapped in a wrapper with a ``step``/``reset`` of its own, runs through its
    sync methods in a worker thread. ``interruptible`` is False for a TextEnv that steps on the
    event loop: such a call cannot be timed out, so no timer is set; a TextEnv whose async twins
    await I/O (a remote env) says ``interruptible = True``.
    """
    twins = async_twins(env)
    if twins is not None:
        core = env.unwrapped
        assert isinstance(core, TextEnv)  # async_twins gives twins only for a TextEnv core
        return twins.areset, twins.astep, getattr(core, "interruptible", core.step_in_thread)

    async def areset(*, seed=None, options=None):
        return await asyncio.to_thread(env.reset, seed=seed, options=options)

    async def astep(action):
        return await asyncio.to_thread(env.step, action)

    return areset, astep, True


async def _bounded(call: Awaitable[T], seconds: float | None) -> T:
    """``await call`` within ``seconds`` (no timer at all when ``seconds`` is None)."""
    if seconds is None:
        return await call
    async with asyncio.timeout(seconds):
        return await call


def request_seed(seed: int | None, member: int, turn: int) -> int | None:
    """Sampling seed of one request, a function of (task seed, group member, turn) only."""
    if seed is None:
        return None
    return (seed * 1_000_003 + member * 7_919 + turn) % (2**31 - 1)


@dataclass
class _Run:
    """What every episode of one :func:`acollect` call shares."""

    env_id: str
    pool: EnvPool
    batcher: RequestBatcher
    prompter: PrompterProtocol
    sampling: SamplingParams
    max_turns: int
    timeouts: Timeouts
    retries: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    on_turn: Callable[[Turn], None] | None = None


def generated_turn(
    generation: Generation,
    action: str | None,
    *,
    observation: str,
    reward: float,
    state_key: str | None,
    info: dict[str, Any],
    timings: dict[str, float],
) -> Turn:
    """The :class:`Turn` of a response: ``generation``'s text and token data, the parsed
    ``action`` (``None``: no action in the response, recorded as ``""`` and invalid), and the
    env's side: the ``observation`` answered, ``reward``, the ``state_key`` acted from, the
    ``info`` after the step (its ``action_valid``) and ``timings``."""
    # In field order: a class called with keywords first builds a dict of them (a cost per turn).
    return Turn(
        observation,
        action or "",
        action is not None and bool(info.get("action_valid", True)),
        reward,
        state_key,
        generation.text,
        generation.prompt_ids or (),
        generation.response_ids or (),
        generation.logprobs or (),
        generation.finish_reason,
        generation.policy_version,
        info,
        timings,
    )


class EnvFailure(RuntimeError):
    """An env said in ``info["error"]`` that its own machinery failed (a browser that stopped
    answering, a dead desktop): the episode ends with this as its infrastructure error, never as
    the agent's failure, and is retried like any other."""


async def _run_episode(run: _Run, task: Task, group_id: str, member: int) -> Episode:
    episode = Episode(
        episode_id=f"{group_id}#{member}",
        env_id=run.env_id,
        task_id=task.task_id or "",
        group_id=group_id,
        seed=task.seed,
        tags=dict(run.tags),
    )
    started = time.perf_counter()
    env, healthy, phase = None, True, "env creation"
    try:
        env = await run.pool.acquire()
        areset, astep, interruptible = _async_api(env)
        reset_timeout, step_timeout = (
            (run.timeouts.reset, run.timeouts.step) if interruptible else (None, None)
        )
        phase = "reset"
        options = {"task_id": task.task_id} if task.task_id is not None else None
        obs, info = await _bounded(areset(seed=task.seed, options=options), reset_timeout)
        if info.get("error"):
            raise EnvFailure(info["error"])
        episode.task_id = str(info.get("task_id", episode.task_id))
        episode.instruction = info.get("instruction", "")
        episode.task_type = str(info.get("task_type", ""))
        episode.ground_truth = info.get("ground_truth")
        system = run.prompter.system(episode.instruction)
        past: list[tuple[str, str]] = []
        for turn_index in range(run.max_turns):
            phase = "generate"
            request = GenerationRequest(
                messages=(
                    run.prompter.messages(system, past, obs, info.get("admissible_actions"))
                    if run.batcher.reads_messages
                    else []
                ),
                sampling=run.sampling,
                seed=request_seed(task.seed, member, turn_index),
                observation=obs,
                info=info,
                session=episode.episode_id,
            )
            start = time.perf_counter()
            generation = await run.batcher.submit(request)
            generated = time.perf_counter()
            action = run.prompter.parse(generation.text, info.get("admissible_actions"))
            phase = "step"
            next_obs, reward, terminated, truncated, next_info = await _bounded(
                astep(action or ""), step_timeout
            )
            episode.turns.append(
                generated_turn(
                    generation,
                    action,
                    observation=obs,
                    reward=float(reward),
                    state_key=info.get("state_key"),
                    info=next_info,
                    timings={"generate": generated - start, "step": time.perf_counter() - generated},
                )
            )
            if run.on_turn is not None:
                run.on_turn(episode.turns[-1])
            if next_info.get("error"):
                raise EnvFailure(next_info["error"])
            past.append((obs, generation.text))
            obs, info = next_obs, next_info
            if terminated or truncated:
                episode.terminated, episode.truncated = bool(terminated), bool(truncated)
                break
        else:
            episode.truncated = True
        episode.success = bool(info.get("success", False))
    except TimeoutError:
        episode.error = f"{phase} timed out after {getattr(run.timeouts, phase, '?')} s"
        healthy = phase == "generate"
    except Exception as exc:
        episode.error = f"{phase} failed: {type(exc).__name__}: {exc}"
        healthy = phase == "generate"
    finally:
        if env is not None:
            await run.pool.release(env, healthy)
    if episode.error:
        episode.truncated, episode.terminated, episode.success = True, False, False
    episode.outcome = sum(t.reward for t in episode.turns)
    episode.wall_time = time.perf_counter() - started
    return episode


async def _run_with_retries(run: _Run, task: Task, group_id: str, member: int) -> Episode:
    """:func:`_run_episode`, run again while it ends with an error, ``run.retries`` times at
    most; the last attempt is returned with the earlier attempts' errors."""
    failed: list[str] = []
    while True:
        episode = await _run_episode(run, task, group_id, member)
        if episode.error is None or len(failed) >= run.retries:
            episode.failed_attempts = failed
            return episode
        failed.append(episode.error)


def progress_bar(description: str, total: int, enabled: bool) -> tuple[Progress, TaskID]:
    """A progress bar of ``total`` items with a ``status`` field, and its task id (a disabled
    bar when not ``enabled``); use it as a context manager. It draws on stderr: stdout is for
    results."""
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        disable=not enabled,
        console=Console(stderr=True),
    )
    return bar, bar.add_task(description, total=total, status="")


class _ProgressStatus:
    """The status a :func:`progress_bar` shows while episodes run: updated after every turn
    (turns, response tokens per second: something moves while long episodes are still going)
    and every episode (success rate so far, errors)."""

    def __init__(self, bar: Progress, bar_id: TaskID) -> None:
        self.bar, self.bar_id = bar, bar_id
        self.started = time.perf_counter()
        self.turns = self.tokens = self.done = self.success = self.errors = 0

    def turn(self, turn: Turn) -> None:
        self.turns += 1
        self.tokens += len(turn.response_ids)
        self._show(advance=0)

    def episode(self, episode: Episode) -> None:
        self.done += 1
        self.success += episode.success
        self.errors += episode.error is not None
        self._show(advance=1)

    def _show(self, advance: int) -> None:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        parts = [f"success {self.success / self.done:.0%}"] if self.done else []
        parts.append(f"{self.turns:,} turns")
        if self.tokens:
            parts.append(f"{self.tokens / seconds:,.1f} tokens/s")
        if self.errors:
            parts.append(f"[red]{self.errors} errors[/red]")
        self.bar.update(self.bar_id, advance=advance, status="  ".join(parts))


def group_id(env_id: str, task: Task) -> str:
    """``Episode.group_id`` of the episodes of ``task`` on ``env_id``: ``"{env}|{task}|{seed}"``
    (``-`` for a task drawn from its seed). Member ``m``'s ``episode_id`` is
    ``"{group_id}#{m}"``."""
    return f"{env_id}|{task.task_id if task.task_id is not None else '-'}|{task.seed}"


class EpisodeRunner:
    """Episodes on request, at most ``concurrency`` at once, sharing one pool of envs and one
    :class:`RequestBatcher`: what :func:`acollect` runs its batch on, and what a caller that
    decides on the next episodes while others still run (an asynchronous trainer) drives itself.

    An async context manager: entering makes the env pool (and the sandbox pool, for
    ``sandbox="local" | "docker"``) and picks the default prompter; leaving cancels the batches
    still generating and closes every env, and the sandbox pool if the runner made it. The
    arguments are :func:`acollect`'s; ``on_turn`` is called with every recorded turn.
    """

    def __init__(
        self,
        env: str | EnvFactory,
        policy: Policy,
        *,
        max_turns: int = 30,
        concurrency: int = 64,
        prompter: PrompterProtocol | None = None,
        sampling: SamplingParams | None = None,
        env_kwargs: dict[str, Any] | None = None,
        timeouts: Timeouts | None = None,
        sandbox: Backend | Literal["auto"] | ServerPool | None = None,
        cluster: str | None = None,
        retries: int = 0,
        tags: dict[str, str] | None = None,
        on_turn: Callable[[Turn], None] | None = None,
    ):
        if max_turns < 1 or concurrency < 1 or retries < 0:
            raise ValueError(
                f"max_turns and concurrency must be >= 1 and retries >= 0, "
                f"got {max_turns}, {concurrency}, {retries}"
            )
        if (sandbox is not None or cluster is not None) and not isinstance(env, str):
            raise ValueError(
                "sandbox= and cluster= need an env id, not a factory: the env is made on its server"
            )
        if cluster is not None and sandbox is not None and not isinstance(sandbox, str):
            raise ValueError(
                "with cluster=, sandbox= is a backend name ('local', 'docker' or 'auto'), not a pool"
            )
        if isinstance(sandbox, str):
            sandbox = sandbox_choice(sandbox, cluster)
        self.env, self.env_id, self.policy = env, _env_id(env), policy
        self.max_turns, self.prompter, self.env_kwargs = max_turns, prompter, env_kwargs or {}
        self.sampling, self.timeouts = sampling or SamplingParams(), timeouts or Timeouts()
        self.sandbox, self.cluster = sandbox, cluster
        self.retries, self.tags, self.on_turn = retries, dict(tags or {}), on_turn
        self._slots = asyncio.Semaphore(concurrency)
        self._run: _Run | None = None
        self._servers: ServerPool | None = None
        self._own_servers = False

    async def __aenter__(self) -> EpisodeRunner:
        self._servers, self._own_servers = await _server_pool(self.sandbox, self.cluster)
        pool = EnvPool(
            _env_factory(self.env, self.env_kwargs, self._servers),
            self._servers.usable if self._servers is not None else None,
        )
        prompter = self.prompter
        if prompter is None:
            prompter = Prompter(family=await _family(self.env, pool))
        self._run = _Run(
            env_id=self.env_id,
            pool=pool,
            batcher=RequestBatcher(
                self.policy,
                getattr(self.policy, "max_batch_size", None),
                getattr(self.policy, "max_concurrent_batches", None),
                self.timeouts.generate,
            ),
            prompter=prompter,
            sampling=self.sampling,
            max_turns=self.max_turns,
            timeouts=self.timeouts,
            retries=self.retries,
            tags=self.tags,
            on_turn=self.on_turn,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        run, self._run = self._running(), None
        await run.batcher.aclose()
        await run.pool.close()
        if self._own_servers:
            assert self._servers is not None
            await self._servers.aclose()

    def _running(self) -> _Run:
        if self._run is None:
            raise RuntimeError("EpisodeRunner: use it inside `async with`")
        return self._run

    async def episode(self, task: Task, member: int, group: str | None = None) -> Episode:
        """Group member ``member`` of ``task`` (with ``group`` as its ``group_id``; default
        :func:`group_id`), once a slot is free (slots go to waiting callers in arrival order),
        run again up to ``retries`` times while it ends with an error."""
        run = self._running()
        async with self._slots:
            return await _run_with_retries(run, task, group or group_id(self.env_id, task), member)

    def pause(self) -> None:
        """Hold the episodes' generation requests back (envs already stepping go on, batches
        already sent finish) until :meth:`resume`."""
        self._running().batcher.pause()

    def resume(self) -> None:
        self._running().batcher.resume()


def _env_id(env: str | EnvFactory) -> str:
    """The id episodes of ``env`` carry: the id itself, or a factory's ``env_id`` or name."""
    return env if isinstance(env, str) else getattr(env, "env_id", getattr(env, "__name__", "env"))


async def acollect(
    env: str | EnvFactory,
    policy: Policy,
    tasks: Iterable[Task],
    *,
    group_size: int = 1,
    max_turns: int = 30,
    concurrency: int = 64,
    prompter: PrompterProtocol | None = None,
    sampling: SamplingParams | None = None,
    env_kwargs: dict[str, Any] | None = None,
    timeouts: Timeouts | None = None,
    progress: bool = True,
    on_episode: Callable[[Episode], None] | None = None,
    sandbox: Backend | Literal["auto"] | ServerPool | None = None,
    cluster: str | None = None,
    retries: int = 0,
    tags: dict[str, str] | None = None,
    skip: Callable[[Task, int], bool] | None = None,
) -> list[Episode]:
    """Run ``group_size`` episodes of every task and return them in (task, member) order.

    Args:
        env: an env id (made with ``env_kwargs``) or a factory returning a fresh env.
        policy: any :class:`~agentgym.policy.Policy`. Its optional attributes ``max_batch_size``
            and ``max_concurrent_batches`` tune request batching.
        tasks: start states; each yields one group of ``group_size`` episodes that share the task
            and the seed (their sampling seeds differ).
        max_turns: turns after which an unfinished episode is truncated.
        concurrency: episodes in flight at once.
        prompter: message builder and action parser; default
            ``agentgym.prompting.Prompter`` for the env's family.
        on_episode: called with each finished episode, in completion order (e.g. to append it to
            a file as soon as it ends).
        sandbox: run the envs in sandboxed env servers (``env`` must be an id): ``"local"`` or
            ``"docker"`` for a pool of this call (one warm spare sandbox, closed at the end), or
            an :class:`~agentgym.hosting.EnvServerPool` (or any
            :class:`~agentgym.hosting.ServerPool`) to share (left open).
        cluster: run the envs on env servers in Ray actors across a Ray cluster
            (:class:`~agentgym.hosting.ray.RayEnvServerPool`, ``agentgym[ray]``, started for
            this call and stopped at its end): ``"local"`` (a Ray instance for the call),
            ``"auto"`` (the cluster of ``ray start``) or its address. With ``sandbox="local"``
            or ``"docker"``, each server runs in a sandbox of that backend on its node; with
            ``sandbox="auto"``, of the node's backend (``docker`` where the node offers the
            ``docker`` resource, else ``local``).
        retries: times an episode that ended with an error (an infrastructure failure: a dead
            sandbox, a failed policy call, a timeout, an env's ``info["error"]``) is run again
            from its start, on a fresh env; the returned episode lists the discarded attempts'
            errors in ``failed_attempts``, and still has an ``error`` if its last attempt failed
            too.
        tags: labels put on every episode (``Episode.tags``).
        skip: ``skip(task, member)`` true leaves that episode out (e.g. one a resumed
            evaluation already has); the result holds only the episodes run.

    Everything the episodes record lives until the call returns, so it runs with the cycle
    collector set for that (:func:`~agentgym.heap.rollout_collector`: what survives a collection
    goes straight to the oldest generation, and full collections are rare).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    tasks = list(tasks)
    units = [(t, m) for t in tasks for m in range(group_size) if skip is None or not skip(t, m)]
    bar, bar_id = progress_bar(_env_id(env), len(units), progress)
    shown = _ProgressStatus(bar, bar_id)
    runner = EpisodeRunner(
        env,
        policy,
        max_turns=max_turns,
        concurrency=concurrency,
        prompter=prompter if prompter is not None or units else Prompter(family="misc"),
        sampling=sampling,
        env_kwargs=env_kwargs,
        timeouts=timeouts,
        sandbox=sandbox,
        cluster=cluster,
        retries=retries,
        tags=tags,
        on_turn=shown.turn if progress else None,
    )

    async def one(task: Task, member: int) -> Episode:
        episode = await runner.episode(task, member)
        shown.episode(episode)
        if on_episode is not None:
            on_episode(episode)
        return episode

    async with runner:
        with bar, rollout_collector():
            async with asyncio.TaskGroup() as group:
                running = [group.create_task(one(t, m)) for t, m in units]
            return [r.result() for r in running]


async def _family(env: str | EnvFactory, pool: EnvPool) -> str:
    """The family whose prompt ``env``'s episodes get: a registered id's manifest says; a factory's
    env says itself (its core's ``family``), so both ways of naming an env prompt alike. The env
    made to ask goes back to ``pool`` for the first episode."""
    if isinstance(env, str):
        return manifest(env).family
    try:
        made = await pool.acquire()
    except Exception:  # every episode will make its own env and report this failure
        return "misc"
    await pool.release(made, healthy=True)
    return getattr(made.unwrapped, "family", "misc")


def _env_factory(
    env: str | EnvFactory, kwargs: dict[str, Any], servers: ServerPool | None
) -> AsyncEnvFactory:
    """How :func:`acollect` makes an env: the caller's factory, ``make`` in this process, or a
    session on a sandboxed env server."""
    if not isinstance(env, str):

        async def call() -> gym.Env:
            return env()
    elif servers is None:

        async def call() -> gym.Env:
            return make(env, **kwargs)
    else:

        async def call() -> gym.Env:
            return await servers.amake(env, kwargs)

    return call


def sandbox_choice(sandbox: object, cluster: str | None) -> SandboxChoice | None:
    """The sandbox backend that ``sandbox`` names for env servers: ``None`` for none (also as
    the config words ``"none"`` and ``"null"``), ``"local"`` (bubblewrap), ``"docker"``, or with
    a ``cluster`` also ``"auto"`` (each server's node decides). ``ValueError`` for any other
    value, and for ``"auto"`` without a cluster."""
    if sandbox in (None, "none", "null"):
        return None
    if sandbox not in ("local", "docker", "auto"):
        raise ValueError(f"sandbox must be none, local, docker or auto (with a cluster), got {sandbox!r}")
    if sandbox == "auto" and cluster is None:
        raise ValueError("sandbox=auto chooses a backend per node of a cluster: it needs cluster=")
    return sandbox


async def _server_pool(
    sandbox: Backend | Literal["auto"] | ServerPool | None, cluster: str | None
) -> tuple[ServerPool | None, bool]:
    """The env server pool for ``sandbox=`` and ``cluster=``, and whether the caller owns it."""
    if cluster is not None:
        from agentgym.hosting import RayEnvServerPool  # Ray loads only when used

        backend = sandbox if isinstance(sandbox, str) else None
        return await asyncio.to_thread(RayEnvServerPool, cluster, sandbox=backend), True  # ray.init blocks
    if sandbox is None or not isinstance(sandbox, str):
        return sandbox, False
    assert sandbox != "auto", "refused without a cluster"
    from agentgym.hosting import EnvServerPool  # sandboxes load only when used

    return EnvServerPool(sandbox, warm=1), True


def collect(*args: Any, **kwargs: Any) -> list[Episode]:
    """Blocking :func:`acollect` (starts an event loop; inside one, await ``acollect``)."""
    return asyncio.run(acollect(*args, **kwargs))


def default_tasks(count: int, seed: int = 0, task_ids: Sequence[str] | None = None) -> list[Task]:
    """``count`` tasks: the given ids cycled (each with seed ``seed + i``), or env-drawn tasks
    from seeds ``seed .. seed + count - 1``."""
    if task_ids:
        return [Task(task_ids[i % len(task_ids)], seed + i) for i in range(count)]
    return [Task(None, seed + i) for i in range(count)]
