"""A household text world in the spirit of ALFWorld (the TextWorld side), in pure Python.

A house of 1-4 rooms is generated from ``(task type, world seed)``. Rooms hold numbered
receptacles (``cabinet 2``, ``countertop 1``, ``fridge 1``, ...), some of them openable and closed
at the start; receptacles hold numbered items (``mug 1``, ``apple 2``, ...) that can be taken one
at a time and may be cleaned (sinkbasin), heated (microwave, stoveburner) or cooled (fridge);
lamps (``desklamp``, ``floorlamp``) can be switched with ``use``. The agent plays one of ALFWorld's
six task types, each generated solvable:

=========================  =====================================================
``pick_and_place``          put some mug on countertop.
``look_at_obj_in_light``    look at book under the desklamp.
``pick_clean_then_place``   put a clean mug in coffeemachine.
``pick_heat_then_place``    heat some apple and put it in fridge.
``pick_cool_then_place``    put a cool tomato on diningtable.
``pick_two_obj_and_place``  put two cellphone on sofa.
=========================  =====================================================

Actions use ALFWorld's vocabulary: ``go to {room or receptacle}``, ``open/close {r}``,
``take {item} from {r}``, ``put {item} in {r}`` (``on`` and the literal ``in/on`` are accepted
too), ``clean/heat/cool {item} with {appliance}``, ``use {lamp}``, ``examine {thing}``, ``look``,
``inventory``. ``info["admissible_actions"]`` lists every action valid in the current state.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from agentgym.env import TextEnv, coerce_action, normalize_action

__all__ = [
    "TASK_TYPES",
    "House",
    "HouseholdEnv",
    "HouseholdTask",
    "expert_action",
    "generate",
    "parse_task_id",
]

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_two_obj_and_place",
)
_LOOK, _TWO = "look_at_obj_in_light", "pick_two_obj_and_place"
CLEAN, HEAT, COOL = "clean", "heat", "cool"
_TRANSFORMS = {"pick_clean_then_place": CLEAN, "pick_heat_then_place": HEAT, "pick_cool_then_place": COOL}
_FLAG_WORDS = {CLEAN: "clean", HEAT: "hot", COOL: "cool"}
_ROOM_NAMES = ("kitchen", "living room", "bedroom", "bathroom")
# The room a task type needs at least one of: the one holding its appliance or lamp.
_ANCHOR_ROOMS = {
    "pick_clean_then_place": ("kitchen", "bathroom"),
    "pick_heat_then_place": ("kitchen",),
    "pick_cool_then_place": ("kitchen",),
    _LOOK: ("living room", "bedroom"),
}
_SEED_SPACE = 2**31  # world seeds drawn by reset() lie in [0, _SEED_SPACE)
_NONE = -1  # House.at in the middle of a room, House.held with empty hands, House.where if held

_AFFORDANCES: dict[str, frozenset[str]] = {
    name: frozenset(flags)
    for names, flags in (
        (("apple", "egg", "mug", "cup", "plate", "potato", "tomato"), (CLEAN, HEAT, COOL)),
        (("bread",), (HEAT, COOL)),
        (("bowl", "lettuce", "pan", "pot"), (CLEAN, COOL)),
        (("winebottle",), (COOL,)),
        (
            ("butterknife", "cloth", "dishsponge", "fork", "knife", "ladle", "soapbar", "spatula", "spoon"),
            (CLEAN,),
        ),
        (
            (
                "alarmclock",
                "book",
                "candle",
                "cd",
                "cellphone",
                "creditcard",
                "keychain",
                "laptop",
                "newspaper",
                "pen",
                "pencil",
                "peppershaker",
                "pillow",
                "remotecontrol",
                "saltshaker",
                "soapbottle",
                "spraybottle",
                "statue",
                "toiletpaper",
                "towel",
                "vase",
                "watch",
            ),
            (),
        ),
    )
    for name in names
}
_LAMPS = ("desklamp", "floorlamp")
_LAMP_HOSTS = frozenset({"desk", "dresser", "sidetable"})
_OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave"})
_IN = frozenset(
    {"bathtubbasin", "cabinet", "coffeemachine", "drawer", "fridge", "garbagecan", "microwave", "sinkbasin"}
)
_APPLIANCES = {"fridge": COOL, "microwave": HEAT, "sinkbasin": CLEAN, "stoveburner": HEAT}


@dataclass(frozen=True)
class _RoomTemplate:
    receptacles: tuple[tuple[str, int, int], ...]  # (class, fewest, most), alphabetical
    items: tuple[str, ...]
    item_count: tuple[int, int]
    lamps: tuple[tuple[str, float], ...] = ()  # (lamp class, probability of one)


_ROOMS: dict[str, _RoomTemplate] = {
    "kitchen": _RoomTemplate(
        (
            ("cabinet", 2, 5),
            ("coffeemachine", 1, 1),
            ("countertop", 1, 2),
            ("diningtable", 0, 1),
            ("drawer", 1, 3),
            ("fridge", 1, 1),
            ("garbagecan", 1, 1),
            ("microwave", 1, 1),
            ("shelf", 0, 2),
            ("sinkbasin", 1, 1),
            ("stoveburner", 1, 2),
        ),
        (
            "apple",
            "bowl",
            "bread",
            "butterknife",
            "cup",
            "dishsponge",
            "egg",
            "fork",
            "knife",
            "ladle",
            "lettuce",
            "mug",
            "pan",
            "peppershaker",
            "plate",
            "pot",
            "potato",
            "saltshaker",
            "spatula",
            "spoon",
            "tomato",
            "winebottle",
        ),
        (6, 10),
    ),
    "living room": _RoomTemplate(
        (
            ("armchair", 0, 1),
            ("cabinet", 0, 2),
            ("coffeetable", 1, 1),
            ("drawer", 0, 2),
            ("garbagecan", 0, 1),
            ("shelf", 1, 2),
            ("sidetable", 1, 2),
            ("sofa", 1, 1),
            ("tvstand", 0, 1),
        ),
        (
            "book",
            "cellphone",
            "creditcard",
            "keychain",
            "laptop",
            "newspaper",
            "pillow",
            "remotecontrol",
            "statue",
            "vase",
            "watch",
        ),
        (4, 8),
        (("floorlamp", 1.0), ("desklamp", 0.5)),
    ),
    "bedroom": _RoomTemplate(
        (
            ("bed", 1, 1),
            ("desk", 0, 1),
            ("drawer", 1, 3),
            ("dresser", 1, 1),
            ("garbagecan", 1, 1),
            ("shelf", 0, 2),
            ("sidetable", 1, 2),
        ),
        (
            "alarmclock",
            "book",
            "bowl",
            "cd",
            "cellphone",
            "creditcard",
            "keychain",
            "laptop",
            "mug",
            "pen",
            "pencil",
            "pillow",
        ),
        (4, 8),
        (("desklamp", 1.0),),
    ),
    "bathroom": _RoomTemplate(
        (
            ("bathtubbasin", 0, 1),
            ("cabinet", 1, 3),
            ("countertop", 1, 1),
            ("drawer", 0, 2),
            ("garbagecan", 1, 1),
            ("shelf", 0, 1),
            ("sinkbasin", 1, 2),
            ("toilet", 1, 1),
            ("towelholder", 0, 1),
        ),
        ("candle", "cloth", "dishsponge", "soapbar", "soapbottle", "spraybottle", "toiletpaper", "towel"),
        (3, 6),
    ),
}
_TEMPLATES = {
    "pick_and_place": ("put a {o} {p} {t}.", "put some {o} {p} {t}."),
    _LOOK: ("look at {o} under the {t}.", "examine the {o} with the {t}."),
    "pick_clean_then_place": ("put a clean {o} {p} {t}.", "clean some {o} and put it {p} {t}."),
    "pick_heat_then_place": ("put a hot {o} {p} {t}.", "heat some {o} and put it {p} {t}."),
    "pick_cool_then_place": ("put a cool {o} {p} {t}.", "cool some {o} and put it {p} {t}."),
    _TWO: ("put two {o} {p} {t}.", "find two {o} and put them {p} {t}."),
}
_TASK_ID = re.compile(r"([a-z_]+)/(0|[1-9][0-9]*)")  # canonical ids only, so they round-trip
_PUT = re.compile(r"put (.+?) (?:in/on|in|on) (.+)")
# ALFWorld command forms: a command of one of these forms naming things of this house is
# answered "Nothing happens." when it is not admissible; anything else gets an explanation.
_GRAMMAR = tuple(
    re.compile(p)
    for p in (
        r"(?:go to|open|close|examine|use) (.+)",
        r"take (.+) from (.+)",
        r"put (.+) (?:in/on|in|on) (.+)",
        r"(?:clean|heat|cool) (.+) with (.+)",
    )
)
_LONGEST_COMMAND = 120


def _preposition(receptacle_class: str) -> str:
    return "in" if receptacle_class in _IN else "on"


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _listing(names: Sequence[str]) -> str:
    """ALFWorld's enumeration: ``a mug 1, an apple 2, and a plate 1``; ``nothing`` if empty."""
    phrases = [_a(name) for name in names]
    if len(phrases) <= 1:
        return phrases[0] if phrases else "nothing"
    return f"{', '.join(phrases[:-1])}, and {phrases[-1]}"


@dataclass(frozen=True)
class HouseholdTask:
    """The goal of an episode. ``target_class`` is a receptacle class, or for
    ``look_at_obj_in_light`` the lamp class."""

    task_type: str
    world_seed: int
    object_class: str
    target_class: str
    instruction: str

    @property
    def task_id(self) -> str:
        return f"{self.task_type}/{self.world_seed}"

    @property
    def transform(self) -> str | None:
        """The flag (``clean``/``heat``/``cool``) the placed item must carry, if any."""
        return _TRANSFORMS.get(self.task_type)


@dataclass(frozen=True)
class Receptacle:
    name: str
    cls: str
    room: int
    openable: bool
    preposition: str
    appliance: str | None  # the transform it performs, if any


@dataclass(frozen=True)
class Item:
    name: str
    cls: str
    affordances: frozenset[str]
    is_lamp: bool


def _shortest_paths(exits: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """BFS from every room: ``(hops[a][b], next_hop[a][b])`` over the exits graph."""
    n = len(exits)
    hops, next_hop = [[0] * n for _ in range(n)], [list(range(n)) for _ in range(n)]
    for start in range(n):
        queue = deque([start])
        seen = {start}
        while queue:
            room = queue.popleft()
            for nxt in exits[room]:
                if nxt not in seen:
                    seen.add(nxt)
                    hops[start][nxt] = hops[start][room] + 1
                    next_hop[start][nxt] = nxt if room == start else next_hop[start][room]
                    queue.append(nxt)
    return hops, next_hop


class House:
    """A generated house: its fixed layout plus the mutable state that actions change.

    Rooms, receptacles and items are addressed by index. State: ``room`` (agent's room), ``at``
    (receptacle the agent stands at, or -1 for the middle of the room), ``held`` (item or -1),
    ``is_open[r]``, ``where[i]`` (receptacle holding item ``i``, -1 when held), ``flags[i]``
    (subset of clean/heat/cool) and ``lamp_on[i]``. Transition methods return the observation.
    """

    def __init__(
        self,
        rooms: Sequence[str],
        exits: Sequence[Sequence[int]],
        receptacles: Sequence[Receptacle],
        items: Sequence[Item],
        placement: Sequence[int],
        start_room: int,
    ):
        self.rooms = tuple(rooms)
        self.exits = tuple(tuple(e) for e in exits)
        self.receptacles = tuple(receptacles)
        self.items = tuple(items)
        self.room_receptacles = tuple(
            tuple(r for r, rec in enumerate(receptacles) if rec.room == room) for room in range(len(rooms))
        )
        self.hops, self.next_hop = _shortest_paths(self.exits)
        self.receptacle_index = {rec.name: r for r, rec in enumerate(receptacles)}
        self.names = frozenset(self.rooms) | self.receptacle_index.keys() | {i.name for i in items}
        self._key_order = sorted(range(len(items)), key=lambda i: items[i].name)
        self.room, self.at, self.held = start_room, _NONE, _NONE
        self.is_open = [False] * len(receptacles)
        self.where = list(placement)
        self.contents = [[i for i, r in enumerate(placement) if r == rec] for rec in range(len(receptacles))]
        self.flags: list[frozenset[str]] = [frozenset()] * len(items)
        self.lamp_on = [False] * len(items)

    # --- queries -------------------------------------------------------------------------------

    def visible(self, r: int) -> bool:
        """Whether receptacle ``r``'s contents can be seen and reached (when standing at it)."""
        return self.is_open[r] or not self.receptacles[r].openable

    def distance(self, r: int) -> int:
        """Number of ``go to`` actions the agent needs to stand at receptacle ``r``."""
        room = self.receptacles[r].room
        if room == self.room:
            return 0 if self.at == r else 1
        return self.hops[self.room][room] + 1

    def route(self, r: int) -> str:
        """The next ``go to`` action toward receptacle ``r`` (the agent is not at it)."""
        room = self.receptacles[r].room
        if room != self.room:
            return f"go to {self.rooms[self.next_hop[self.room][room]]}"
        return f"go to {self.receptacles[r].name}"

    def goal_reached(self, task: HouseholdTask) -> bool:
        """Whether the true state satisfies ``task`` (see the module docstring's table)."""
        if task.task_type == _LOOK:
            return (
                self.held != _NONE
                and self.items[self.held].cls == task.object_class
                and self.at != _NONE
                and any(
                    self.lamp_on[i] and self.items[i].cls == task.target_class for i in self.contents[self.at]
                )
            )
        need = 2 if task.task_type == _TWO else 1
        return any(
            sum(
                self.items[i].cls == task.object_class
                and (task.transform is None or task.transform in self.flags[i])
                for i in self.contents[r]
            )
            >= need
            for r, rec in enumerate(self.receptacles)
            if rec.cls == task.target_class
        )

    def state_key(self) -> str:
        """Canonical text of the full state (everything mutable, in a fixed order)."""
        held = self.items[self.held].name if self.held != _NONE else "-"
        at = self.receptacles[self.at].name if self.at != _NONE else "-"
        opened = ",".join(rec.name for r, rec in enumerate(self.receptacles) if self.is_open[r])
        parts = [f"room={self.rooms[self.room]}", f"at={at}", f"held={held}", f"open={opened}"]
        for i in self._key_order:
            where = "held" if self.where[i] == _NONE else self.receptacles[self.where[i]].name
            state = ",".join(sorted(self.flags[i])) + ("on" if self.lamp_on[i] else "")
            parts.append(f"{self.items[i].name}@{where}:{state}")
        return "|".join(parts)

    def canonical(self, command: str) -> str:
        """Rewrite a normalized ``put`` command to the receptacle's own preposition."""
        if command.startswith("put ") and len(command) <= _LONGEST_COMMAND:
            match = _PUT.fullmatch(command)
            r = self.receptacle_index.get(match[2], _NONE) if match else _NONE
            if r != _NONE:
                assert match is not None  # r came from it
                return f"put {match[1]} {self.receptacles[r].preposition} {match[2]}"
        return command

    def recognizes(self, command: str) -> bool:
        """Whether ``command`` is an ALFWorld command naming things of this house."""
        if command in ("look", "inventory"):
            return True
        if len(command) > _LONGEST_COMMAND:
            return False
        for pattern in _GRAMMAR:
            match = pattern.fullmatch(command)
            if match and all(name in self.names for name in match.groups()):
                return True
        return False

    def admissible(self) -> dict[str, Callable[[], str]]:
        """Every action valid now, mapped to the transition that performs it."""
        actions: dict[str, Callable[[], str]] = {"look": self.look, "inventory": self.inventory}
        for room in self.exits[self.room]:
            actions[f"go to {self.rooms[room]}"] = partial(self.go_to_room, room)
        for r in self.room_receptacles[self.room]:
            if r != self.at:
                actions[f"go to {self.receptacles[r].name}"] = partial(self.go_to_receptacle, r)
        held = self.items[self.held] if self.held != _NONE else None
        if held is not None:
            actions[f"examine {held.name}"] = partial(self.examine_item, self.held)
        if self.at == _NONE:
            return actions
        at, rec = self.at, self.receptacles[self.at]
        actions[f"examine {rec.name}"] = partial(self.describe_receptacle, at)
        if rec.openable:
            verb = "close" if self.is_open[at] else "open"
            actions[f"{verb} {rec.name}"] = partial(self.set_open, not self.is_open[at])
        if held is not None and rec.appliance in held.affordances:
            actions[f"{rec.appliance} {held.name} with {rec.name}"] = self.transform
        if not self.visible(at):
            return actions
        if held is not None:
            actions[f"put {held.name} {rec.preposition} {rec.name}"] = self.put
        for i in self.contents[at]:
            item = self.items[i]
            actions[f"examine {item.name}"] = partial(self.examine_item, i)
            if item.is_lamp:
                actions[f"use {item.name}"] = partial(self.toggle_lamp, i)
            elif held is None:
                actions[f"take {item.name} from {rec.name}"] = partial(self.take, i)
        return actions

    # --- descriptions --------------------------------------------------------------------------

    def describe_room(self, opening: str) -> str:
        seen = _listing([self.receptacles[r].name for r in self.room_receptacles[self.room]])
        exits = ", ".join(self.rooms[room] for room in self.exits[self.room]) or "none"
        return (
            f"{opening} the {self.rooms[self.room]}. Looking quickly around you, you see "
            f"{seen}. Exits: {exits}."
        )

    def describe_receptacle(self, r: int) -> str:
        rec = self.receptacles[r]
        if not self.visible(r):
            return f"The {rec.name} is closed."
        seen = _listing([self.items[i].name for i in self.contents[r]])
        if rec.openable:
            return f"The {rec.name} is open. In it, you see {seen}."
        return f"{rec.preposition.capitalize()} the {rec.name}, you see {seen}."

    # --- transitions (each returns the observation) --------------------------------------------

    def look(self) -> str:
        if self.at == _NONE:
            return self.describe_room("You are in the middle of")
        return (
            f"You are facing the {self.receptacles[self.at].name} in the "
            f"{self.rooms[self.room]}. {self.describe_receptacle(self.at)}"
        )

    def inventory(self) -> str:
        if self.held == _NONE:
            return "You are not carrying anything."
        return f"You are carrying: {_a(self.items[self.held].name)}."

    def go_to_room(self, room: int) -> str:
        self.room, self.at = room, _NONE
        return self.describe_room("You enter")

    def go_to_receptacle(self, r: int) -> str:
        self.at = r
        return f"You arrive at {self.receptacles[r].name}. {self.describe_receptacle(r)}"

    def set_open(self, is_open: bool) -> str:
        self.is_open[self.at] = is_open
        name = self.receptacles[self.at].name
        if is_open:
            return f"You open the {name}. {self.describe_receptacle(self.at)}"
        return f"You close the {name}."

    def take(self, i: int) -> str:
        self.contents[self.at].remove(i)
        self.where[i], self.held = _NONE, i
        return f"You pick up the {self.items[i].name} from the {self.receptacles[self.at].name}."

    def put(self) -> str:
        i, rec = self.held, self.receptacles[self.at]
        self.contents[self.at] = sorted([*self.contents[self.at], i])
        self.where[i], self.held = self.at, _NONE
        return f"You put the {self.items[i].name} {rec.preposition} the {rec.name}."

    def transform(self) -> str:
        rec = self.receptacles[self.at]
        kind = rec.appliance
        assert kind is not None  # admissible only at an appliance (see admissible)
        # Heating and cooling undo each other; cleaning is kept.
        opposite = {HEAT: COOL, COOL: HEAT}.get(kind)
        self.flags[self.held] = self.flags[self.held] - {opposite} | {kind}
        return f"You {kind} the {self.items[self.held].name} using the {rec.name}."

    def toggle_lamp(self, i: int) -> str:
        self.lamp_on[i] = not self.lamp_on[i]
        return f"You turn {'on' if self.lamp_on[i] else 'off'} the {self.items[i].name}."

    def examine_item(self, i: int) -> str:
        item = self.items[i]
        if item.is_lamp:
            return f"This is {_a(item.name)}. It is turned {'on' if self.lamp_on[i] else 'off'}."
        words = [_FLAG_WORDS[f] for f in (CLEAN, HEAT, COOL) if f in self.flags[i]]
        return f"This is {_a(item.name)}." + (f" It is {' and '.join(words)}." if words else "")


# --- generation ----------------------------------------------------------------------------------


class _Draft:
    """Receptacles and items of a house under construction, numbered per class."""

    def __init__(self, rng: random.Random, rooms: Sequence[str]):
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self.receptacles: list[Receptacle] = []
        for room, name in enumerate(rooms):
            for cls, fewest, most in _ROOMS[name].receptacles:
                for _ in range(rng.randint(fewest, most)):
                    self.receptacles.append(
                        Receptacle(
                            self._number(cls),
                            cls,
                            room,
                            cls in _OPENABLE,
                            _preposition(cls),
                            _APPLIANCES.get(cls),
                        )
                    )
        self.items: list[Item] = []
        self.placement: list[int] = []

    def _number(self, cls: str) -> str:
        self.counts[cls] += 1
        return f"{cls} {self.counts[cls]}"

    def spawn(self, cls: str, room: int, allowed: Callable[[Receptacle], bool]) -> None:
        choices = [r for r, rec in enumerate(self.receptacles) if rec.room == room and allowed(rec)]
        self.items.append(Item(self._number(cls), cls, _AFFORDANCES.get(cls, frozenset()), cls in _LAMPS))
        self.placement.append(self.rng.choice(choices))


def generate(
    task_type: str, world_seed: int, room_range: tuple[int, int] = (2, 4)
) -> tuple[House, HouseholdTask]:
    """Build the house and task of ``task_type/world_seed``, with a room count in ``room_range``.

    Deterministic in every process (``random.Random`` seeded with the task id's text, which it
    hashes with SHA-512). The task is solvable: its appliance or lamp exists, enough items of its
    class exist, and none of them starts where the goal wants it.
    """
    rng = random.Random(f"{task_type}/{world_seed}")
    anchor = rng.choice(_ANCHOR_ROOMS.get(task_type, _ROOM_NAMES))
    others = [room for room in _ROOM_NAMES if room != anchor]
    rng.shuffle(others)
    rooms = [anchor, *others[: rng.randint(*room_range) - 1]]
    rng.shuffle(rooms)
    exits: list[list[int]] = [[] for _ in rooms]
    for room in range(1, len(rooms)):  # a random spanning tree keeps every room reachable
        other = rng.randrange(room)
        exits[room].append(other)
        exits[other].append(room)
    draft = _Draft(rng, rooms)
    for room, name in enumerate(rooms):
        for lamp, probability in _ROOMS[name].lamps:
            if rng.random() < probability:
                draft.spawn(lamp, room, lambda rec: rec.cls in _LAMP_HOSTS)

    transform = _TRANSFORMS.get(task_type)
    classes = sorted(
        {
            cls
            for name in rooms
            for cls in _ROOMS[name].items
            if transform is None or transform in _AFFORDANCES[cls]
        }
    )
    object_class = rng.choice(classes)
    if task_type == _LOOK:
        target_class = rng.choice(sorted({item.cls for item in draft.items}))
    else:
        banned = {cls for cls, kind in _APPLIANCES.items() if kind == transform}
        target_class = rng.choice(sorted({rec.cls for rec in draft.receptacles} - banned))

    def allowed(cls: str) -> Callable[[Receptacle], bool]:
        if cls == object_class and task_type != _LOOK:
            return lambda rec: rec.cls != target_class
        return lambda rec: True

    for room, name in enumerate(rooms):
        template = _ROOMS[name]
        for _ in range(rng.randint(*template.item_count)):
            cls = rng.choice(template.items)
            draft.spawn(cls, room, allowed(cls))
    homes = [room for room, name in enumerate(rooms) if object_class in _ROOMS[name].items]
    for _ in range((2 if task_type == _TWO else 1) - draft.counts[object_class]):
        draft.spawn(object_class, rng.choice(homes), allowed(object_class))

    instruction = rng.choice(_TEMPLATES[task_type]).format(
        o=object_class, t=target_class, p=_preposition(target_class)
    )
    house = House(rooms, exits, draft.receptacles, draft.items, draft.placement, rng.randrange(len(rooms)))
    return house, HouseholdTask(task_type, world_seed, object_class, target_class, instruction)


# --- scripted expert -----------------------------------------------------------------------------


def _nearest(house: House, receptacles: Sequence[int]) -> int:
    return min(receptacles, key=lambda r: (house.distance(r), r))


def _walk_and(house: House, r: int, action: str, *, needs_open: bool = True) -> str:
    """Go to ``r``, open it if it is closed and ``needs_open``, then do ``action`` there."""
    if house.at != r:
        return house.route(r)
    if needs_open and not house.visible(r):
        return f"open {house.receptacles[r].name}"
    return action


def _fetch(house: House, candidates: Sequence[int]) -> str:
    i = min(candidates, key=lambda i: (house.distance(house.where[i]), i))
    r = house.where[i]
    return _walk_and(house, r, f"take {house.items[i].name} from {house.receptacles[r].name}")


def _drop(house: House) -> str:
    """Put the held item down: here if possible, else on the room's first open surface."""
    held = house.items[house.held].name
    if house.at != _NONE:
        rec = house.receptacles[house.at]
        return _walk_and(house, house.at, f"put {held} {rec.preposition} {rec.name}")
    r = next(r for r in house.room_receptacles[house.room] if house.visible(r))
    return house.route(r)


def _place_target(house: House, task: HouseholdTask) -> int:
    """The target receptacle: for two items, one already holding most of them (lowest index
    on ties, so the choice does not flip as the agent walks); else the nearest."""
    targets = [r for r, rec in enumerate(house.receptacles) if rec.cls == task.target_class]
    if task.task_type == _TWO:
        counts = {r: sum(house.items[i].cls == task.object_class for i in house.contents[r]) for r in targets}
        best = max(counts.values())
        if best:
            return min(r for r in targets if counts[r] == best)
    return _nearest(house, targets)


def expert_action(house: House, task: HouseholdTask) -> str:
    """The next action of a shortest-ish plan to ``task`` from the current state of ``house``.

    Uses the true state (closed receptacles' contents included) and re-plans on every call, so
    it works from any state; the result is always admissible. Returns ``"look"`` once the goal
    holds.
    """
    if house.goal_reached(task):
        return "look"
    wanted = [i for i, item in enumerate(house.items) if item.cls == task.object_class]
    holding = house.held != _NONE
    if holding and house.items[house.held].cls != task.object_class:
        return _drop(house)
    if task.task_type == _LOOK:
        if not holding:
            return _fetch(house, wanted)
        lamps = [i for i, item in enumerate(house.items) if item.cls == task.target_class]
        lamp = min(lamps, key=lambda i: (house.distance(house.where[i]), i))
        return _walk_and(house, house.where[lamp], f"use {house.items[lamp].name}")
    target = _place_target(house, task)
    if not holding:
        if task.task_type == _TWO:  # leave the ones already in place
            wanted = [i for i in wanted if house.where[i] != target]
        return _fetch(house, wanted)
    name = house.items[house.held].name
    if task.transform is not None and task.transform not in house.flags[house.held]:
        appliance = _nearest(
            house, [r for r, rec in enumerate(house.receptacles) if rec.appliance == task.transform]
        )
        rec = house.receptacles[appliance]
        return _walk_and(house, appliance, f"{task.transform} {name} with {rec.name}", needs_open=False)
    rec = house.receptacles[target]
    return _walk_and(house, target, f"put {name} {rec.preposition} {rec.name}")


# --- the environment -----------------------------------------------------------------------------


def _check_task_types(task_types: Sequence[str] | str | None) -> tuple[str, ...]:
    if task_types is None:
        return TASK_TYPES
    names = (task_types,) if isinstance(task_types, str) else tuple(task_types)
    unknown = [t for t in names if t not in TASK_TYPES]
    if unknown or not names:
        problem = f"unknown task type(s) {unknown}" if unknown else "no task types given"
        raise ValueError(f"HouseholdEnv: {problem}; valid task types: {', '.join(TASK_TYPES)}")
    return tuple(dict.fromkeys(names))


def _check_num_rooms(num_rooms: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(num_rooms, int):
        bounds: tuple[Any, ...] = (num_rooms, num_rooms)
    else:
        bounds = tuple(num_rooms) if isinstance(num_rooms, Sequence) else ()
    if (
        len(bounds) != 2
        or any(isinstance(b, bool) or not isinstance(b, int) for b in bounds)
        or not 1 <= bounds[0] <= bounds[1] <= len(_ROOM_NAMES)
    ):
        raise ValueError(
            f"HouseholdEnv: num_rooms must be an int or a (fewest, most) pair with "
            f"1 <= fewest <= most <= {len(_ROOM_NAMES)}, got {num_rooms!r}"
        )
    return bounds[0], bounds[1]


def parse_task_id(task_id: Any) -> tuple[str, int]:
    """``"pick_heat_then_place/1234"`` -> ``("pick_heat_then_place", 1234)``; ValueError if
    malformed."""
    match = _TASK_ID.fullmatch(task_id) if isinstance(task_id, str) else None
    if match is None or match[1] not in TASK_TYPES:
        raise ValueError(
            f"HouseholdEnv: malformed task_id {task_id!r}; expected '<task type>/<world seed>', "
            f"e.g. 'pick_heat_then_place/1234', with a task type among: {', '.join(TASK_TYPES)}"
        )
    return match[1], int(match[2])


class HouseholdEnv(TextEnv):
    """ALFWorld-style household tasks in a generated house (see the module docstring).

    Args:
        task_types: task types ``reset`` draws from (default: all six). Unknown names raise
            ``ValueError``. An explicit ``task_id`` may name any type.
        num_rooms: rooms per house, an int or an inclusive ``(fewest, most)`` range within 1..4.
        max_steps: steps after which an unsolved episode is truncated (invalid steps count).
        invalid_penalty: subtracted from the reward of an invalid action (>= 0).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.

    ``reset(seed=s, options={"task_id": "pick_heat_then_place/1234"})`` builds exactly that task
    (the house also depends on ``num_rooms``); ``reset(seed=s)`` draws the task type and world
    seed from ``self.np_random``. Reward is 1.0 on the step that completes the task (which then
    terminates), 0.0 otherwise, minus ``invalid_penalty`` on invalid actions. ``info`` carries
    the standard keys plus ``task_type``.
    """

    family: ClassVar[str] = "textgames"
    step_in_thread: ClassVar[bool] = False  # a step takes microseconds

    def __init__(
        self,
        task_types: Sequence[str] | None = None,
        num_rooms: int | tuple[int, int] = (2, 4),
        max_steps: int = 50,
        invalid_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        self.task_types = _check_task_types(task_types)
        self.room_range = _check_num_rooms(num_rooms)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"HouseholdEnv: max_steps must be an int >= 1, got {max_steps!r}")
        if not (
            isinstance(invalid_penalty, (int, float))
            and math.isfinite(invalid_penalty)
            and invalid_penalty >= 0
        ):
            raise ValueError(
                f"HouseholdEnv: invalid_penalty must be a finite number >= 0, got {invalid_penalty!r}"
            )
        self.max_steps = max_steps
        self.invalid_penalty = float(invalid_penalty)
        self._house: House | None = None
        self._task: HouseholdTask | None = None
        self._actions: dict[str, Callable[[], str]] = {}
        self._sorted_actions: tuple[str, ...] = ()
        self._state_key = ""
        self._steps = 0
        self._success = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        unknown = sorted(set(options or {}) - {"task_id"})
        if unknown:
            raise ValueError(f"HouseholdEnv.reset: unknown option(s) {unknown}; known: ['task_id']")
        if options and options.get("task_id") is not None:
            task_type, world_seed = parse_task_id(options["task_id"])
        else:
            task_type = self.task_types[int(self.np_random.integers(len(self.task_types)))]
            world_seed = int(self.np_random.integers(_SEED_SPACE))
        self._house, self._task = generate(task_type, world_seed, self.room_range)
        self._steps, self._success = 0, False
        self._refresh()
        observation = f"{self._house.look()}\n\nYour task is to: {self._task.instruction}"
        return observation, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = coerce_action(action)
        house = self._require_reset()
        if self._success or self._steps >= self.max_steps:
            return self.episode_over(self._info(action_valid=False), terminated=self._success)
        self._steps += 1
        # Admissible actions are already in normal form, so this is match_action's answer.
        command = house.canonical(normalize_action(text))
        transition = self._actions.get(command)
        if transition is None:
            observation = "Nothing happens." if house.recognizes(command) else self._unavailable()
            reward = 0.0 - self.invalid_penalty
        else:
            observation = transition()
            self._refresh()
            assert self._task is not None  # reset sets it with _house
            self._success = house.goal_reached(self._task)
            reward = float(self._success)
        truncated = not self._success and self._steps >= self.max_steps
        return observation, reward, self._success, truncated, self._info(transition is not None)

    def render_text(self) -> str:
        """Where the agent is (as ``look`` says it) and what it carries."""
        house = self._require_reset()
        return f"{house.look()}\n{house.inventory()}"

    def expert_action(self) -> str:
        """The scripted expert's next action from the current state (always admissible)."""
        house = self._require_reset()
        assert self._task is not None  # reset sets it with _house
        return expert_action(house, self._task)

    def _require_reset(self) -> House:
        if self._house is None:
            raise RuntimeError("HouseholdEnv: call reset() before step(), render() or expert_action()")
        return self._house

    def _refresh(self) -> None:
        house, task = self._house, self._task
        assert house is not None and task is not None  # reset set both
        self._actions = house.admissible()
        self._sorted_actions = tuple(sorted(self._actions))
        self._state_key = f"{task.task_id}|{house.state_key()}"

    def _unavailable(self) -> str:
        actions = self._sorted_actions
        examples = actions[:: max(1, math.ceil(len(actions) / 6))]
        return (
            "That action is not available here. Write exactly one admissible action, "
            f"such as: {'; '.join(examples)}. Type 'look' to see where you are."
        )

    def _info(self, action_valid: bool | None = None) -> dict[str, Any]:
        task = self._task
        assert task is not None  # only called after a reset
        info: dict[str, Any] = {
            "task_id": task.task_id,
            "task_type": task.task_type,
            "instruction": task.instruction,
            "state_key": self._state_key,
            "admissible_actions": list(self._sorted_actions),
        }
        if action_valid is not None:
            info["action_valid"] = action_valid
            info["success"] = self._success
        return info
