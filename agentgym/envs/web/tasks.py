"""Shopping tasks over a generated catalog, and WebShop's graded reward for a purchase.

A goal (:class:`Goal`) asks, in words like WebShop's instructions (Yao et al., 2022), for a
product of one type with one to three of its attributes, values for its options and a budget:
"i am looking for a slim fit cotton dress shirt for men in navy color and size m, and price lower
than 30.00 dollars". Instructions are lower case, prices written with two decimals, option values
as the catalog has them but lower-cased. Each goal comes with a ``target``, a product that
satisfies it (:func:`satisfies`: same type, every attribute, every option value in stock
together, price within budget), the proof that it can be done, and a ``query``, a short search of
its type and one or two of its attributes ("men's" or the like where the category names one)
that ranks the target among its first 50 results.

Every goal has near misses: products of the target's type that fail it on exactly one count (a
required attribute missing, over budget, or without stock for the asked options), so the first
search result is often the wrong one to buy. Usually a goal names every option of its target;
now and then, for a product with two options, only one, and the other is the buyer's choice.

Goals are split by target product (:func:`task_split`): about 80% train, 20% test, and no product
is the target of goals in both.

:func:`grade` is WebShop's reward. For one purchased line, a product and the option values chosen
for it::

    reward = r_type * (attributes matched + options matched + price ok)
                    / (required attributes + required options + 1)

with ``r_type`` 1.0 for the goal's product type, 0.5 for another type of its subcategory (first
two category levels), 0.1 for another of its department, else 0.0. An option matches when the
chosen value equals the asked one, case-insensitively, and the product offers it. A whole order
scores its best line, with the reward divided by the number of lines: buying extra items dilutes
it. An empty order, or a line whose product does not exist, scores 0. A perfect purchase of one
line scores exactly 1.0, the only success.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from agentgym import seeding
from agentgym.envs.web.catalog import TYPE_NOUNS, Catalog, Product, catalog
from agentgym.seeding import SPLITS

__all__ = [
    "DEFAULT_NUM_TASKS",
    "SPLITS",
    "Goal",
    "Score",
    "generate_tasks",
    "grade",
    "satisfies",
    "task_split",
    "tasks",
]

DEFAULT_NUM_TASKS = 1_500
#: How deep in a query's results the target may be.
QUERY_DEPTH = 50


@dataclass(frozen=True)
class Goal:
    """One shopping task. ``options`` maps option names to the asked values (catalog casing);
    ``target`` is the id of a product that satisfies the goal; ``query`` a search that ranks it
    within the first :data:`QUERY_DEPTH` results. The hash is the id's."""

    id: str
    instruction: str
    category: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, str]
    max_price: float
    target: str
    query: str

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def product_type(self) -> str:
        return self.category[-1]


@dataclass(frozen=True)
class Score:
    """The graded reward of an order and, for its best line, the parts it is made of."""

    reward: float
    r_type: float
    attributes_matched: int
    options_matched: int
    price_ok: bool


_ZERO = Score(0.0, 0.0, 0, 0, False)


# Grading ------------------------------------------------------------------------------------------


def _r_type(goal: Goal, product: Product) -> float:
    if product.category == goal.category:
        return 1.0
    if product.category[:2] == goal.category[:2]:
        return 0.5
    return 0.1 if product.category[0] == goal.category[0] else 0.0


def _line(goal: Goal, catalog: Catalog, product_id: str, choice: Mapping[str, str]) -> Score:
    try:
        product = catalog.product(product_id)
    except (KeyError, TypeError):
        return _ZERO
    r_type = _r_type(goal, product)
    attributes = sum(a in product.attributes for a in goal.attributes)
    options = 0
    for name, wanted in goal.options.items():
        chosen = str(choice.get(name, "")).lower()
        offered = {v.lower() for v in product.options.get(name, ())}
        options += chosen == wanted.lower() and chosen in offered
    price_ok = product.price <= goal.max_price
    reward = r_type * (attributes + options + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    return Score(reward, r_type, attributes, options, price_ok)


def grade(goal: Goal, catalog: Catalog, purchased: Sequence[tuple[str, Mapping[str, str]]]) -> Score:
    """WebShop's reward for the order ``purchased``, lines of (product id, chosen options): the
    best line's score, its reward divided by the number of lines. Empty order: all zeros."""
    if not purchased:
        return _ZERO
    best = max(
        (_line(goal, catalog, pid, choice) for pid, choice in purchased), key=lambda score: score.reward
    )
    return replace(best, reward=best.reward / len(purchased))


def _available(goal: Goal, product: Product) -> bool:
    """Whether some in-stock combination of ``product`` has every value ``goal`` asks for."""
    names = list(product.options)
    if any(name not in product.options for name in goal.options):
        return False
    at = [(names.index(name), value.lower()) for name, value in goal.options.items()]
    return any(units > 0 and all(key[i].lower() == v for i, v in at) for key, units in product.stock.items())


def satisfies(goal: Goal, product: Product) -> bool:
    """Whether buying ``product`` (in an in-stock combination with the asked values) fulfils
    ``goal`` completely."""
    return (
        product.category == goal.category
        and product.price <= goal.max_price
        and all(a in product.attributes for a in goal.attributes)
        and _available(goal, product)
    )


def _near_miss(goal: Goal, product: Product) -> bool:
    """A product of the goal's type that fails it on exactly one count."""
    fails = (
        not all(a in product.attributes for a in goal.attributes),
        product.price > goal.max_price,
        not _available(goal, product),
    )
    return product.category == goal.category and sum(fails) == 1


# Instructions -------------------------------------------------------------------------------------

_TEMPLATES = (
    "i am looking for {item}{options}, and price lower than {price} dollars",
    "i need {item}{options}, and price lower than {price} dollars",
    "i want to buy {item}{options}, and it should cost less than {price} dollars",
    "find me {item}{options}, with a price lower than {price} dollars",
    "looking for {item}{options} priced under {price} dollars",
    "i would like {item}{options}, under {price} dollars",
    "please find {item}{options}, and keep it under {price} dollars",
)
_OPTION_WORDS = {
    "size": "size {v}",
    "color": "{v} color",
    "shade": "{v} shade",
    "model": "{v} model",
    "length": "{v} length",
    "capacity": "{v} capacity",
    "flavor": "{v} flavor",
    "scent": "{v} scent",
    "style": "{v} style",
}
_JOINS = (" in ", " with ", ", ")
_CLAUSE_JOINS = (", in ", ", with ")  # after "that is ...", where a bare comma would list on
_FOR = {"Men": " for men", "Women": " for women", "Kids": " for kids"}
_QUERY_WHO = {"Men": "men's", "Women": "women's", "Kids": "kids"}
_UNCOUNTED = frozenset(
    ("honey", "pasta", "olive oil", "sparkling water", "ground coffee", "beef jerky", "modeling clay")
)
_AFTER = ("for ", "with ")  # attributes that read after the noun


def _plural(noun: str) -> bool:
    return noun.endswith("s") and not noun.endswith("ss")


def _article(phrase: str, noun: str) -> str:
    if _plural(noun) or noun in _UNCOUNTED:
        return phrase
    vowel = phrase[0] in "aeio" or (phrase[0] == "u" and not phrase.startswith(("us", "uni")))
    return ("an " if vowel else "a ") + phrase


def _listed(words: Sequence[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def _instruction(
    rng: random.Random,
    category: tuple[str, ...],
    attributes: tuple[str, ...],
    options: Mapping[str, str],
    max_price: float,
) -> str:
    noun = TYPE_NOUNS[category[-1]]
    who = _FOR.get(category[1], "")
    before = [a for a in attributes if not a.startswith(_AFTER)]
    after = [a for a in attributes if a.startswith(_AFTER)]
    joins: tuple[str, ...]
    if rng.random() < 0.6:
        item, joins = _article(" ".join([*before, noun, *after]), noun) + who, _JOINS
    else:
        verb = "are" if _plural(noun) else "is"
        item = f"{_article(noun, noun)}{who} that {verb} {_listed(list(attributes))}"
        joins = _CLAUSE_JOINS
    wanted = (
        _listed([_OPTION_WORDS.get(name, "{v}").format(v=value.lower()) for name, value in options.items()])
        if options
        else ""
    )
    return rng.choice(_TEMPLATES).format(
        item=item, options=rng.choice(joins) + wanted if wanted else "", price=f"{max_price:.2f}"
    )


def _queries(rng: random.Random, category: tuple[str, ...], attributes: tuple[str, ...]) -> list[str]:
    """Searches a person might type for the goal, shortest first: its type and an attribute,
    then with the gender the category names, then with two attributes."""
    noun = TYPE_NOUNS[category[-1]]

    def query(words: Sequence[str]) -> str:
        after = [w for w in words if w.startswith(_AFTER)]
        return " ".join([*(w for w in words if w not in after), noun, *after])

    who = [_QUERY_WHO[category[1]]] if category[1] in _QUERY_WHO else []
    singles = rng.sample(attributes, len(attributes))
    return (
        [query([a]) for a in singles]
        + [query([*who, a]) for a in singles if who]
        + [query(pair) for pair in combinations(singles, 2)]
    )


def _budget(rng: random.Random, price: float) -> float:
    """A round budget of 2% to 60% over ``price``."""
    limit = price * rng.uniform(1.02, 1.6)
    step = 1 if limit < 10 else 5 if limit < 100 else 10 if limit < 300 else 50
    return float(math.ceil(limit / step) * step)


# Generation ---------------------------------------------------------------------------------------


def _goal(
    rng: random.Random, catalog: Catalog, target: Product, kin: list[Product], number: int
) -> Goal | None:
    """A goal whose target is ``target`` (``kin``: the products of its type), or ``None`` where
    it would have no near miss or no query finds the target."""
    attributes = tuple(rng.sample(target.attributes, min(len(target.attributes), rng.choice((1, 2, 2, 3)))))
    options: dict[str, str] = {}
    if target.options:
        key = rng.choice([k for k, units in target.stock.items() if units > 0])
        options = dict(zip(target.options, key))
        if len(options) == 2 and rng.random() < 0.15:
            del options[rng.choice(list(options))]
    max_price = _budget(rng, target.price)
    goal = Goal(f"shop-{number:05d}", "", target.category, attributes, options, max_price, target.id, "")
    if not any(_near_miss(goal, p) for p in kin):
        return None
    for query in _queries(rng, target.category, attributes):
        if any(p.id == target.id for p in catalog.search(query)[:QUERY_DEPTH]):
            return replace(
                goal,
                query=query,
                instruction=_instruction(rng, target.category, attributes, options, max_price),
            )
    return None


def generate_tasks(catalog: Catalog, seed: int = 0, num_tasks: int = DEFAULT_NUM_TASKS) -> list[Goal]:
    """Up to ``num_tasks`` goals over ``catalog`` (fewer only for a catalog too small to have
    them), each with its own target product, drawn from products in shuffled order. Ids are
    ``shop-00000`` on. The same arguments give the same goals."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be non-negative, got {num_tasks}")
    rng = seeding.rng("agentgym.web.tasks", seed)
    by_type: dict[tuple[str, ...], list[Product]] = {}
    for p in catalog.products:
        by_type.setdefault(p.category, []).append(p)
    order = sorted(catalog.products, key=lambda p: p.id)
    rng.shuffle(order)
    goals: list[Goal] = []
    for target in order:
        if len(goals) == num_tasks:
            break
        goal = _goal(rng, catalog, target, by_type[target.category], len(goals))
        if goal is not None:
            goals.append(goal)
    return goals


def task_split(tasks: list[Goal], split: str) -> list[Goal]:
    """The goals of ``split``, one of :data:`SPLITS`, in order: whether a goal is a test goal
    depends only on its target's id (about one in five), so no target is in both splits."""
    seeding.check_split(split)
    return [goal for goal in tasks if seeding.split_of("agentgym.web.tasks", goal.target) == split]


@functools.lru_cache(maxsize=4)
def _tasks(seed: int) -> tuple[Goal, ...]:
    return tuple(generate_tasks(catalog(seed)))


def tasks(seed: int = 0, split: str = "train") -> list[Goal]:
    """The ``split`` goals of the shared catalog of ``seed``
    (``generate_tasks(catalog(seed))``, made once per process)."""
    return task_split(list(_tasks(seed)), split)
