"""The text-environment contract every agentgym environment follows.

A :class:`TextEnv` is a :class:`gymnasium.Env` whose observations and actions are strings. It adds
three things to Gymnasium's contract and nothing else:

* the standard ``info`` keys of :class:`EnvInfo`, which the rollout engine, the trainers and the
  harness read (``state_key`` for GiGPO's anchor groups, ``action_valid`` for grounding, ...);
* async twins :meth:`TextEnv.areset` / :meth:`TextEnv.astep`, which IO-bound envs override;
* the rule that a bad *action* never raises: the env answers with an observation that explains the
  problem and ``info["action_valid"] = False``. Bad *arguments* (to ``make``/``__init__``, or an
  action that is not a ``str`` at all) raise clear errors.

Action text reaches an env already extracted from the model's response (see
``agentgym.prompting``); the helpers at the bottom of this module (:func:`extract_tag`,
:func:`normalize_action`, :func:`match_action`) are shared by both sides.
"""

from __future__ import annotations

import asyncio
import functools
import re
import string
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from typing import Any, ClassVar, TypedDict, TypeVar, overload

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.spaces import utils as space_utils
from gymnasium.vector.utils import shared_memory
from numpy.typing import NDArray

__all__ = [
    "EnvInfo",
    "TextEnv",
    "TypedText",
    "UnicodeText",
    "coerce_action",
    "extract_tag",
    "match_action",
    "normalize_action",
    "pick_task",
]

#: The observation of a step after the end of an episode (:meth:`TextEnv.episode_over`).
EPISODE_OVER = "The episode is over; call reset() to start a new one."

#: Longest observation an env may return, in characters.
MAX_OBSERVATION_CHARS = 1 << 20
#: Longest action the action space describes, in characters. Longer actions are still answered
#: (with an invalid-action observation), never rejected with an exception.
MAX_ACTION_CHARS = 1 << 16


class _AllCharacters(Sequence[str], Set[str]):
    """Every Unicode code point, as a set and as a list indexed by code point (computed, not
    stored: 1,114,112 one-character strings would take over 100 MB)."""

    def __len__(self) -> int:
        return _CODE_POINTS

    def __contains__(self, x: object) -> bool:
        return isinstance(x, str) and len(x) == 1

    def __iter__(self) -> Iterator[str]:
        return map(chr, range(_CODE_POINTS))

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return tuple(map(chr, range(_CODE_POINTS)[i]))
        return chr(range(_CODE_POINTS)[i])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AllCharacters)

    def __hash__(self) -> int:
        return hash(_AllCharacters)


_CODE_POINTS = sys.maxunicode + 1
_ALL_CHARACTERS = _AllCharacters()


@functools.cache
def _all_characters_string() -> str:
    return "".join(_ALL_CHARACTERS)


class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` whose charset is all of Unicode: every ``str`` of an
    allowed length is a member.

    Free text has no smaller charset: observations quote the agent's action back, and envs draw
    with characters such as ``√``. Characters are indexed by code point
    (``character_index(c) == ord(c)``, surrogates included), so Gymnasium's ``flatten`` /
    ``unflatten``, ``FlattenObservation`` and the shared memory of ``AsyncVectorEnv`` take any
    member: flattened, a string is ``max_length`` int32 code points padded with
    ``len(character_set)`` (``sys.maxunicode + 1``). Those functions are registered for this
    space to run in NumPy, since Gymnasium's own loop over every padded character would take
    most of a second per observation. :meth:`sample` draws from printable ASCII, unless a mask
    or probability over the code points says otherwise.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        # The charset given to Text only fills the attributes that the properties below replace
        # (membership and indexing cover every code point); one character keeps an env's
        # construction cheap (Text indexes every character of its charset).
        super().__init__(max_length, min_length=min_length, charset=" ", seed=seed)

    @property
    def character_set(self) -> _AllCharacters:  # type: ignore[override]
        return _ALL_CHARACTERS

    @property
    def character_list(self) -> _AllCharacters:  # type: ignore[override]
        return _ALL_CHARACTERS

    def character_index(self, char: str) -> np.int32:
        return np.int32(ord(char))

    @property
    def characters(self) -> str:
        """Every code point in order (about 4 MiB, built once per process when first read)."""
        return _all_characters_string()

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(
        self,
        mask: tuple[int | None, NDArray[np.int8] | None] | None = None,
        probability: tuple[int | None, NDArray[np.float64] | None] | None = None,
    ) -> str:
        """A string of random length drawn from printable ASCII; ``mask`` (0/1 ``int8``) or
        ``probability`` (``float64``) arrays have one entry per code point and, like a given
        length, are checked as :class:`~gymnasium.spaces.Text` checks them."""
        if mask is not None and probability is not None:
            raise ValueError("give mask or probability, not both")
        length, weights = None, None
        if mask is not None:
            length, weights = self._validate_mask(mask, np.int8, "mask")
        elif probability is not None:
            length, weights = self._validate_mask(probability, np.float64, "probability")
        if length is None:
            length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        if weights is None:
            return "".join(self.np_random.choice(list(string.printable), size=length))
        if not weights.any():
            if self.min_length:
                raise ValueError(f"no character may be drawn, but strings have >= {self.min_length}")
            return ""
        codes = self.np_random.choice(len(weights), size=length, p=weights / weights.sum())
        return _decode(codes)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class TypedText(str):
    """A text observation of a :class:`UnicodeText` space: a ``str`` that also states the
    space's numpy ``dtype``, because PettingZoo's ``api_test`` compares ``observation.dtype``
    with ``observation_space(agent).dtype``. The GC tracks it, unlike a plain ``str``; a
    recording keeps ``str(observation)``."""

    __slots__ = ()
    dtype = np.dtype(str)


def _decode(codes: NDArray[Any]) -> str:
    """The string of the code points ``codes`` (padding, values >= ``_CODE_POINTS``, dropped)."""
    codes = np.asarray(codes)
    return codes[codes < _CODE_POINTS].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


# mypy's singledispatch plugin takes the generic fallbacks' Space[T] for an unrelated type.
@space_utils.flatten.register(UnicodeText)
def _flatten_unicode_text(space: UnicodeText, x: str) -> NDArray[np.int32]:  # type: ignore[misc]
    codes = np.frombuffer(x.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    if len(codes) > space.max_length:
        raise ValueError(f"a string of {len(codes)} characters is not in {space}")
    out = np.full(space.max_length, _CODE_POINTS, dtype=np.int32)
    out[: len(codes)] = codes
    return out


@space_utils.unflatten.register(UnicodeText)
def _unflatten_unicode_text(space: UnicodeText, x: NDArray[np.int32]) -> str:  # type: ignore[misc]
    return _decode(x)


class _SharedTexts(Sequence[str]):
    """The strings in an ``AsyncVectorEnv``'s shared memory, decoded at each read.

    Gymnasium reads the buffer once, when the vector env is made, and relies on the result
    being a view that the workers' later writes show through (as a NumPy array is); a tuple of
    strings would hold the empty buffer forever. A deep copy (what the vector env returns unless
    ``copy=False``) is a plain tuple."""

    def __init__(self, rows: NDArray[np.int32]):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(_decode(row) for row in self._rows[i])
        return _decode(self._rows[i])

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


@shared_memory.read_from_shared_memory.register(UnicodeText)
def _read_unicode_text(space: UnicodeText, memory: Any, n: int = 1) -> _SharedTexts:
    return _SharedTexts(np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, space.max_length)))


class EnvInfo(TypedDict, total=False):
    """The standard keys of the ``info`` dict returned by ``reset`` and ``step``.

    Every key is optional in the type, but the rules below say when an env must set it. Envs may
    add their own keys; these names are reserved for the meanings given here.
    """

    task_id: str
    """Stable id of the task. ``reset(options={"task_id": t})`` selects it; set on every call."""
    instruction: str
    """The task as the agent should read it; set on every call."""
    task_type: str
    """Optional kind of task (e.g. Household's ``pick_two``); reports break results down by it."""
    state_key: str
    """Canonical key of the env state *after* this call, used to form GiGPO anchor groups.
    Equal keys mean equal states, not merely equal text: hidden state (inventory, closed
    containers, ...) is part of the key. Set on every call by envs that support step-level
    credit."""
    action_valid: bool
    """Whether the action parsed and was admissible. Set by every ``step``."""
    admissible_actions: list[str]
    """Optional list of the actions that are valid in the current state."""
    success: bool
    """Whether the task was solved. Set by every ``step``; meaningful at episode end."""
    ground_truth: str
    """The answer the task expects (search/QA). Never shown to the agent."""
    error: str
    """Infrastructure failure text. An episode with an error is truncated; the batch goes on."""


class TextEnv(gym.Env[str, str]):
    """Base class of agentgym environments: a Gymnasium env with text observations and actions.

    Subclasses implement Gymnasium's ``reset`` and ``step`` as usual (calling
    ``super().reset(seed=seed)`` first, so that ``self.np_random`` is seeded) and
    :meth:`render_text`. Contract, on top of Gymnasium's:

    * ``reset(seed=s, options={"task_id": t})`` reproduces the same start state in any process;
      ``reset(seed=s)`` alone draws the task from ``s``. Nothing may depend on Python's salted
      ``hash()`` of strings.
    * ``info`` follows :class:`EnvInfo`: ``task_id``, ``instruction`` on every call;
      ``action_valid`` and ``success`` on every ``step``.
    * ``step`` with a ``str`` action never raises because of the action's content (empty, huge,
      binary junk, any Unicode): it returns an explanatory observation with
      ``action_valid=False``. A non-``str`` action raises ``TypeError`` (see
      :func:`coerce_action`).
    * ``info["error"]`` is for the env's own machinery failing (a browser that stopped
      answering, a dead desktop), never for anything the agent did: the rollout engine ends the
      episode there as an infrastructure error and runs it again on a fresh env.
    * Returned observations and infos are fresh objects on every call.

    Class attributes: ``family`` names the env family (used by prompting and reports);
    ``step_in_thread`` says whether the default async twins run ``reset``/``step`` in a worker
    thread (right for anything that blocks) or directly on the event loop (right for pure-Python
    envs whose step takes microseconds, where a thread hop would cost more than the step).
    """

    # render_fps only silences the checker: text renders once per call. Gymnasium annotates
    # metadata without ClassVar (an instance variable, to mypy); it is a class attribute.
    metadata: ClassVar[dict[str, Any]] = {  # type: ignore[misc]
        "render_modes": ["ansi", "human"],
        "render_fps": 4,
    }
    family: ClassVar[str] = "misc"
    step_in_thread: ClassVar[bool] = True

    # Typed as Text: a RemoteEnv takes its spaces from the server, which may send a plain Text.
    observation_space: spaces.Text = UnicodeText(MAX_OBSERVATION_CHARS)
    action_space: spaces.Text = UnicodeText(MAX_ACTION_CHARS)

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported by {type(self).__name__}; "
                f"choose one of {self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        # Per-instance spaces, so that seeding one env's action space leaves the others alone.
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Gymnasium's ``step``, with the reward typed as ``float``. Subclasses implement it."""
        raise NotImplementedError

    @staticmethod
    def episode_over(
        info: dict[str, Any], *, terminated: bool = True
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """What ``step`` returns once the episode has ended: nothing happens, no reward, the
        same end again (``terminated``, else truncated) and ``info`` with ``action_valid``
        false."""
        return EPISODE_OVER, 0.0, terminated, not terminated, {**info, "action_valid": False}

    def render_text(self) -> str:
        """A text picture of the current state, for people (``render``)."""
        raise NotImplementedError

    def render(self) -> str | None:
        """``"ansi"`` returns :meth:`render_text`; ``"human"`` prints it; ``None`` does nothing."""
        if self.render_mode is None:
            return None
        text = self.render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Async twin of ``reset``. Default: ``reset`` in a worker thread (see ``step_in_thread``)."""
        if not self.step_in_thread:
            return self.reset(seed=seed, options=options)
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Async twin of ``step``. Default: ``step`` in a worker thread (see ``step_in_thread``)."""
        if not self.step_in_thread:
            return self.step(action)
        return await asyncio.to_thread(self.step, action)


T = TypeVar("T")


def pick_task(
    tasks: Sequence[T],
    by_id: Mapping[str, T],
    options: Mapping[str, Any] | None,
    rng: Any,
    who: str,
    noun: str = "task",
) -> T:
    """The task a ``reset`` starts: ``options["task_id"]`` (looked up in ``by_id``), else one of
    ``tasks`` drawn with ``rng`` (the env's ``np_random``). Other options, and ids not in
    ``by_id``, raise ``ValueError`` naming ``who`` (the env) and ``noun`` ("task", "question")."""
    unknown = sorted(set(options or {}) - {"task_id"})
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; {who} accepts: task_id")
    task_id = (options or {}).get("task_id")
    if task_id is None:
        return tasks[int(rng.integers(len(tasks)))]
    if str(task_id) not in by_id:
        raise ValueError(
            f"{who}: no {noun} {task_id!r} here ({len(tasks)} {noun}s, e.g. {next(iter(by_id))!r})"
        )
    return by_id[str(task_id)]


def coerce_action(action: Any) -> str:
    """Return ``action`` if it is a ``str`` (``np.str_`` included), else raise ``TypeError``.

    The content is not checked here: bad content is the env's to answer as an invalid action.
    """
    if isinstance(action, str):
        return str(action)
    raise TypeError(f"actions are text: expected str, got {type(action).__name__}: {action!r:.60}")


_WS = re.compile(r"\s+")
_EDGE_JUNK = " \t\r\n\"'`.,;:!?*"


def normalize_action(text: str) -> str:
    """Canonical form for comparing actions: lowercased, whitespace collapsed to single spaces,
    surrounding quotes/punctuation/markdown emphasis stripped.

    >>> normalize_action("  **Go  to\\tCabinet 1.** ")
    'go to cabinet 1'
    """
    return _WS.sub(" ", text).strip(_EDGE_JUNK).lower()


def extract_tag(text: str, tag: str = "action") -> str | None:
    """Content of the last complete ``<tag>...</tag>`` pair in ``text``, stripped; ``None`` if
    there is none. Tags match case-insensitively; content may span lines.

    >>> extract_tag("I think <action>up</action> then <action> left </action>")
    'left'
    """
    matches = _tag_pattern(tag).findall(text)
    return matches[-1].strip() if matches else None


@functools.lru_cache(maxsize=64)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag)
    return re.compile(rf"<{name}>(.*?)</{name}>", flags=re.IGNORECASE | re.DOTALL)


def match_action(text: str, candidates: Iterable[str]) -> str | None:
    """The candidate equal to ``text`` after :func:`normalize_action` of both, or ``None``.

    Matching is exact on the normalized forms: no fuzzy guessing, so that an agent is credited
    only for actions it actually wrote.
    """
    wanted = normalize_action(text)
    for candidate in candidates:
        if normalize_action(candidate) == wanted:
            return candidate
    return None
