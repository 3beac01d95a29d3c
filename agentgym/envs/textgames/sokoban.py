"""Sokoban as a text game: push every box onto a target.

Levels are generated from an integer seed in the manner of gym-sokoban (Schrader, 2018): carve a
room with a random walk, put each box on a target, then play the game backwards, the player
pulling boxes. Every backward pull is a forward push, so every level is solvable. Unlike
gym-sokoban's random backward play, the backward play here is a breadth-first search, and the
start position is one of those farthest from solved: a level is as hard as its room allows (within
a search budget), and rarely a one-move puzzle. Symbols and reward shape follow gym-sokoban and
verl-agent.

Positions are ``(row, col)`` pairs, row 0 at the top. ``dim`` counts the outer wall.
"""

from __future__ import annotations

import enum
import math
import random
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any, ClassVar

from agentgym.env import TextEnv, coerce_action, match_action

__all__ = [
    "ACTIONS",
    "Level",
    "Outcome",
    "SokobanEnv",
    "generate_level",
    "max_boxes",
    "solve",
]

Pos = tuple[int, int]
_State = tuple[Pos, frozenset[Pos]]  # (player, boxes)

#: The actions, in the order ``admissible_actions`` lists them.
ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")
_DELTAS: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
"""Earned for each box pushed onto a target; its negative for each box pushed off one."""
SOLVED_REWARD = 10.0

MIN_DIM, MAX_DIM = 5, 30

INSTRUCTION = "Push every box (X) onto a target (O). Actions: up, down, left, right."
LEGEND = "Legend: # wall, _ floor, O target, X box, √ box on target, P player, S player on target."
_SHOWN_ACTION_CHARS = 40
_TASK_ID = re.compile(r"[0-9]{1,20}")
#: Level seeds that ``reset`` without a ``task_id`` draws from.
_NUM_RANDOM_TASKS = 2**31

# Level generation. A floor of about 60% of the interior gives open rooms with some walls inside.
_FLOOR_FRACTION = 0.6
_TURN_PROBABILITY = 0.35
#: Positions the backward search may visit; small rooms have fewer, so their levels are the
#: hardest their room allows.
_SEARCH_STATES = 10_000
_MAX_TRIES = 1000


def _add(a: Pos, b: Pos) -> Pos:
    return a[0] + b[0], a[1] + b[1]


def _sub(a: Pos, b: Pos) -> Pos:
    return a[0] - b[0], a[1] - b[1]


class Outcome(enum.Enum):
    """What one move did."""

    MOVED = "moved"
    """The player stepped onto a free cell."""
    PUSHED = "pushed"
    """The player stepped forward and pushed the box ahead one cell on."""
    WALL = "wall"
    """Nothing moved: a wall is in the way."""
    BLOCKED = "blocked"
    """Nothing moved: the box ahead has a wall or another box behind it."""


def _move(
    walls: frozenset[Pos], boxes: frozenset[Pos], player: Pos, delta: Pos
) -> tuple[Outcome, frozenset[Pos], Pos]:
    """The rules of Sokoban: the player's move by ``delta``, as (outcome, boxes, player) after."""
    ahead = _add(player, delta)
    if ahead in walls:
        return Outcome.WALL, boxes, player
    if ahead not in boxes:
        return Outcome.MOVED, boxes, ahead
    beyond = _add(ahead, delta)
    if beyond in walls or beyond in boxes:
        return Outcome.BLOCKED, boxes, player
    return Outcome.PUSHED, (boxes - {ahead}) | {beyond}, ahead


@dataclass(frozen=True)
class Level:
    """A Sokoban position: the fixed layout (``walls``, ``targets``) and the pieces that move.

    ``walls`` holds every wall cell of the ``dim = (rows, cols)`` grid and must enclose the room;
    every other cell is floor. There are as many targets as boxes.
    """

    dim: tuple[int, int]
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    @property
    def boxes_on_target(self) -> int:
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        return self.boxes == self.targets

    def move(self, direction: str) -> tuple[Outcome, Level]:
        """The player's move in ``direction`` (one of :data:`ACTIONS`) and the level after it."""
        outcome, boxes, player = _move(self.walls, self.boxes, self.player, _DELTAS[direction])
        return outcome, replace(self, boxes=boxes, player=player)

    def text(self) -> str:
        """The grid, one row per line, in verl-agent's symbols (see :data:`LEGEND`)."""
        rows, cols = self.dim
        return "\n".join("".join(self._symbol((r, c)) for c in range(cols)) for r in range(rows))

    def _symbol(self, pos: Pos) -> str:
        if pos in self.walls:
            return "#"
        on_target = pos in self.targets
        if pos == self.player:
            return "S" if on_target else "P"
        if pos in self.boxes:
            return "√" if on_target else "X"
        return "O" if on_target else "_"


# ---------------------------------------------------------------------------------------------
# Level generation


def max_boxes(dim: tuple[int, int]) -> int:
    """The most boxes a level of size ``dim`` may hold: a quarter of the interior cells."""
    return (dim[0] - 2) * (dim[1] - 2) // 4


def _below(rng: random.Random, n: int) -> int:
    """A uniform int in ``[0, n)`` drawn with ``rng.random()`` alone, the one method whose stream
    Python promises to keep across versions (``randrange``, ``choice``, ``sample`` may change)."""
    return int(rng.random() * n)


def _sample(rng: random.Random, items: Sequence[Pos], k: int) -> list[Pos]:
    """``k`` distinct items of ``items`` in random order (a partial Fisher-Yates shuffle)."""
    pool = list(items)
    for i in range(k):
        j = i + _below(rng, len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


# Shapes stamped around each cell of the digging walk, as in gym-sokoban: they widen corridors.
_STAMPS: tuple[tuple[Pos, ...], ...] = (
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, -1), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
)


def _carve_room(dim: tuple[int, int], rng: random.Random) -> set[Pos]:
    """Floor cells dug by a random walk inside the outer wall until they fill
    :data:`_FLOOR_FRACTION` of the interior."""
    rows, cols = dim

    def inside(pos: Pos) -> bool:
        return 1 <= pos[0] <= rows - 2 and 1 <= pos[1] <= cols - 2

    wanted = math.ceil(_FLOOR_FRACTION * (rows - 2) * (cols - 2))
    deltas = list(_DELTAS.values())
    pos = (1 + _below(rng, rows - 2), 1 + _below(rng, cols - 2))
    delta = deltas[_below(rng, 4)]
    floor: set[Pos] = set()
    while len(floor) < wanted:
        stamp = _STAMPS[_below(rng, len(_STAMPS))]
        floor.update(cell for cell in (_add(pos, offset) for offset in stamp) if inside(cell))
        ahead = _add(pos, delta)
        if inside(ahead):
            pos = ahead
        if not inside(ahead) or rng.random() < _TURN_PROBABILITY:
            delta = deltas[_below(rng, 4)]
    return floor


def _pulls(floor: set[Pos], state: _State) -> Iterator[_State]:
    """The positions one backward move away: the player steps to a free cell, and may pull along
    a box from the cell behind it."""
    player, boxes = state
    for delta in _DELTAS.values():
        ahead = _add(player, delta)
        if ahead not in floor or ahead in boxes:
            continue
        yield ahead, boxes
        behind = _sub(player, delta)
        if behind in boxes:
            yield ahead, (boxes - {behind}) | {player}


def _reverse_search(
    dim: tuple[int, int], floor: set[Pos], num_boxes: int, rng: random.Random
) -> Level | None:
    """Put the boxes on random targets and search backwards, breadth first, from every solved
    position (the player anywhere) for at most :data:`_SEARCH_STATES` positions.

    Returns a random position of the deepest layer reached, whose shortest solution is exactly
    that many moves long, or ``None`` when no box can be pulled at all.
    """
    targets = frozenset(_sample(rng, sorted(floor), num_boxes))
    layer: list[_State] = [(player, targets) for player in sorted(floor - targets)]
    seen = set(layer)
    depth = -1
    while layer:
        deepest, layer, depth = layer, [], depth + 1
        for state in deepest:
            for successor in _pulls(floor, state):
                if successor not in seen and len(seen) < _SEARCH_STATES:
                    seen.add(successor)
                    layer.append(successor)
    if depth == 0:
        return None
    player, boxes = deepest[_below(rng, len(deepest))]
    rows, cols = dim
    walls = frozenset((r, c) for r in range(rows) for c in range(cols)) - floor
    return Level(dim, walls, targets, boxes, player)


def generate_level(dim: tuple[int, int], num_boxes: int, seed: int) -> Level:
    """The level of ``seed``: the same arguments give the same level in any process and Python
    version. At least one box starts off its target, and the level is solvable.

    ``dim`` and ``num_boxes`` must be in the ranges :class:`SokobanEnv` accepts; ``seed >= 0``.
    """
    rng = random.Random(seed)
    for _ in range(_MAX_TRIES):  # a failed try leaves rng advanced: the retry is deterministic
        level = _reverse_search(dim, _carve_room(dim, rng), num_boxes, rng)
        if level is not None:
            return level
    raise RuntimeError(f"no Sokoban level found for dim={dim}, num_boxes={num_boxes}, seed={seed}")


# ---------------------------------------------------------------------------------------------
# Solver


def _live_cells(level: Level) -> frozenset[Pos]:
    """Cells from which a box alone in the room can still be pushed onto a target.

    They are exactly the cells reached by pulling a lone box away from some target; a push onto
    any other cell makes the level unsolvable.
    """
    live = set(level.targets)
    todo = list(live)
    while todo:
        box = todo.pop()
        for delta in _DELTAS.values():
            to = _add(box, delta)
            if to not in live and to not in level.walls and _add(to, delta) not in level.walls:
                live.add(to)
                todo.append(to)
    return frozenset(live)


def solve(level: Level, *, max_states: int = 200_000) -> list[str] | None:
    """A shortest action sequence that solves ``level`` from its current position.

    Breadth-first search over (player, boxes) positions, skipping pushes onto dead cells (see
    :func:`_live_cells`). Returns ``[]`` when ``level`` is already solved, and ``None`` when it has
    no solution or none was found within ``max_states`` visited positions.
    """
    if level.solved:
        return []
    live = _live_cells(level)
    start: _State = (level.player, level.boxes)
    parents: dict[_State, tuple[_State, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        player, boxes = state
        for action, delta in _DELTAS.items():
            outcome, next_boxes, next_player = _move(level.walls, boxes, player, delta)
            if outcome in (Outcome.WALL, Outcome.BLOCKED):
                continue
            if outcome is Outcome.PUSHED and not next_boxes <= live:
                continue
            successor = (next_player, next_boxes)
            if successor in parents:
                continue
            parents[successor] = (state, action)
            if next_boxes == level.targets:
                return _actions_to(successor, parents)
            if len(parents) > max_states:
                return None
            frontier.append(successor)
    return None


def _actions_to(state: _State, parents: dict[_State, tuple[_State, str] | None]) -> list[str]:
    actions = []
    while (link := parents[state]) is not None:
        state, action = link
        actions.append(action)
    return actions[::-1]


# ---------------------------------------------------------------------------------------------
# The environment


_MESSAGES: dict[Outcome, str] = {
    Outcome.MOVED: "You moved {}.",
    Outcome.PUSHED: "You pushed a box {}.",
    Outcome.WALL: "You cannot move {}: a wall is in the way.",
    Outcome.BLOCKED: "You cannot push the box {}: it is blocked.",
}


def _int_arg(name: str, value: Any, low: int, high: int | None = None, why: str = "") -> int:
    """``value`` as an int in ``[low, high]``; TypeError for a non-int, ValueError out of range."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r:.60}")
    number = int(value)  # exact for an Integral (numbers.Integral declares no __gt__)
    if number < low or (high is not None and number > high):
        allowed = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {allowed}{why}; got {value}")
    return number


def _dim_arg(dim_room: Any) -> tuple[int, int]:
    """``dim_room`` as ``(rows, cols)``; any sequence of two ints (a Hydra list, ...) will do."""
    if (
        not isinstance(dim_room, Sequence)
        or isinstance(dim_room, str)
        or len(dim_room) != 2
        or not all(isinstance(n, Integral) and not isinstance(n, bool) for n in dim_room)
    ):
        raise TypeError(f"dim_room must be a pair of ints (rows, cols), got {dim_room!r:.60}")
    rows, cols = int(dim_room[0]), int(dim_room[1])
    if not (MIN_DIM <= rows <= MAX_DIM and MIN_DIM <= cols <= MAX_DIM):
        raise ValueError(
            f"dim_room must have rows and cols between {MIN_DIM} and {MAX_DIM}, the outer wall "
            f"included; got {(rows, cols)}"
        )
    return rows, cols


def _task_seed(task_id: Any) -> int:
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id):
        raise ValueError(
            "task_id must be the level seed as a string of 1 to 20 decimal digits, e.g. '123'; "
            f"got {task_id!r:.60}"
        )
    return int(task_id)


def _invalid_action_message(text: str) -> str:
    shown = text if len(text) <= _SHOWN_ACTION_CHARS else text[:_SHOWN_ACTION_CHARS] + "…"
    return f"Invalid action {shown!r}. Valid actions: {', '.join(ACTIONS)}."


class SokobanEnv(TextEnv):
    """Push every box onto a target, one move at a time.

    The level is drawn from an integer level seed, whose decimal string is ``info["task_id"]``:
    ``reset(options={"task_id": "123"})`` plays level 123, and ``reset(seed=s)`` draws the level
    seed from ``self.np_random``. Actions are ``up``, ``down``, ``left``, ``right`` (matched by
    :func:`~agentgym.env.match_action`); walking into a wall is a valid move that moves nothing.

    Rewards (gym-sokoban's): ``-0.1`` per step, ``+1`` per box pushed onto a target, ``-1`` per box
    pushed off one, ``+10`` when the last box reaches a target, which terminates the episode with
    ``info["success"] = True``. After ``max_steps`` steps without that the episode is truncated.
    Steps after the episode ended are answered as usual; ``reset`` starts the next one.

    Besides the standard keys, ``info["boxes_on_target"]`` counts the boxes on targets.

    Args:
        dim_room: ``(rows, cols)`` of the grid, the outer wall included; each from 5 to 30.
        num_boxes: boxes (and targets), from 1 to :func:`max_boxes` of ``dim_room``.
        max_steps: steps per episode, at least 1.
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    family: ClassVar[str] = "textgames"
    step_in_thread: ClassVar[bool] = False  # a step takes microseconds

    def __init__(
        self,
        *,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 100,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        self.dim_room = _dim_arg(dim_room)
        self.num_boxes = _int_arg(
            "num_boxes", num_boxes, 1, max_boxes(self.dim_room), f" for dim_room={self.dim_room}"
        )
        self.max_steps = _int_arg("max_steps", max_steps, 1)
        self._level: Level | None = None
        self._task_id = ""
        self._steps = 0

    @property
    def level(self) -> Level:
        """The current position. Raises ``RuntimeError`` before the first ``reset``."""
        if self._level is None:
            raise RuntimeError("SokobanEnv has no level yet: call reset() first")
        return self._level

    def solution(self, *, max_states: int = 200_000) -> list[str] | None:
        """A shortest action sequence that solves the level from here; see :func:`solve`."""
        return solve(self.level, max_states=max_states)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a level. ``options`` may hold ``task_id`` (a level seed string, or ``None`` to
        draw one); any other option raises ``ValueError``."""
        super().reset(seed=seed)
        options = options or {}
        unknown = sorted(set(options) - {"task_id"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; SokobanEnv accepts: task_id")
        task_id = options.get("task_id")
        if task_id is None:
            level_seed = int(self.np_random.integers(_NUM_RANDOM_TASKS))
        else:
            level_seed = _task_seed(task_id)
        self._task_id = str(level_seed)
        self._level = generate_level(self.dim_room, self.num_boxes, level_seed)
        self._steps = 0
        observation = "\n".join([INSTRUCTION, self._status(), self._level.text(), LEGEND])
        return observation, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        before = self.level
        self._steps += 1
        direction = match_action(text, ACTIONS)
        if direction is None:
            message, after = _invalid_action_message(text), before
        else:
            outcome, after = before.move(direction)
            message = _MESSAGES[outcome].format(direction)
        self._level = after
        reward = STEP_PENALTY + BOX_ON_TARGET_REWARD * (after.boxes_on_target - before.boxes_on_target)
        if after.solved and not before.solved:
            reward += SOLVED_REWARD
        terminated = after.solved
        truncated = not terminated and self._steps >= self.max_steps
        observation = "\n".join([f"{message} {self._status()}", after.text(), LEGEND])
        info = self._info() | {"action_valid": direction is not None, "success": terminated}
        return observation, reward, terminated, truncated, info

    def render_text(self) -> str:
        return self.level.text()

    def _status(self) -> str:
        level = self.level
        status = f"Boxes on target: {level.boxes_on_target}/{self.num_boxes}."
        if level.solved:
            return f"{status} Level solved!"
        steps_left = max(self.max_steps - self._steps, 0)
        return f"{status} Steps left: {steps_left}." if steps_left else f"{status} Out of steps."

    def _state_key(self) -> str:
        level = self.level
        rows, cols = self.dim_room
        boxes = ";".join(f"{r},{c}" for r, c in sorted(level.boxes))
        player = f"{level.player[0]},{level.player[1]}"
        return f"sokoban/{rows}x{cols}/{self._task_id}|p={player}|b={boxes}"

    def _info(self) -> dict[str, Any]:
        return {
            "task_id": self._task_id,
            "instruction": INSTRUCTION,
            "state_key": self._state_key(),
            "admissible_actions": list(ACTIONS),
            "boxes_on_target": self.level.boxes_on_target,
        }
