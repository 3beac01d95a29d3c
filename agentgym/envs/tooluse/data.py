"""Data-analysis questions over generated CSV files and a SQLite database, answered exactly.

A task (:class:`DataTask`) is a question about the files of its workspace, all made from the
task's ``seed`` by :func:`materialize`:

- ``sales.csv``: ``date, region, product, units, unit_price``, 200 to 2000 rows of 2023-2024,
  sorted by date; prices with two decimals;
- ``employees.csv``: ``name, department, salary, hire_date, manager``, 30 to 120 people: a chief
  executive (department ``Executive``, no manager), a head per department reporting to them,
  team leads reporting to the head, staff reporting to the head or a lead;
- ``shop.db``: SQLite tables ``customers``, ``products``, ``orders`` (with a ``status``:
  completed, cancelled or returned) and ``order_items`` (``quantity``, ``unit_price``), linked by
  foreign keys.

Every workspace holds all three files, whichever one the question is about; the instruction
names the file to use and the answer's format. The answer is computed here in exact arithmetic
(integer cents, fractions) from the generated rows, and canonical: numbers with two decimals
(half away from zero) or whole counts, names as generated, lists comma-separated. Questions whose
answer would hang on a tie or a rounding edge (two best regions, a salary equal to an average)
are not asked.

``expert_calls`` are tool calls (``("python", {"code": ...})`` or ``("sql", {"query": ...,
"database": "shop.db"})``) that compute the answer from the files, stdlib only, relative paths:
the answer is the last line the last call prints (for SQL, the value of its one row). They are a
second computation, independent of the one here, and running them proves a task solvable
through the tools.

:func:`check_answer` is lenient about form, strict about content: a number is the first number
of the text (``$1,234.50``, ``about 1234.5``) and must be within the task's ``tolerance``; names
compare case-, whitespace- and punctuation-insensitively; lists are split on commas, semicolons,
newlines, "and" and "&" and compared as sets (``list``) or in order (``ordered_list``).

Tasks are split by data seed (:func:`data_task_split`): about 80% train, 20% test.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import random
import re
import sqlite3
import statistics
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from fractions import Fraction
from pathlib import Path
from textwrap import dedent
from typing import Any, NamedTuple, TypeVar

from agentgym import seeding
from agentgym.seeding import SPLITS

__all__ = [
    "ANSWER_TYPES",
    "DATABASE",
    "DEFAULT_NUM_DATA_TASKS",
    "EMPLOYEES",
    "FILES",
    "KINDS",
    "SALES",
    "SPLITS",
    "DataTask",
    "check_answer",
    "data_task_split",
    "data_tasks",
    "generate_data_tasks",
    "materialize",
]

ANSWER_TYPES: tuple[str, ...] = ("number", "name", "list", "ordered_list")
DEFAULT_NUM_DATA_TASKS = 600
SALES, EMPLOYEES, DATABASE = "sales.csv", "employees.csv", "shop.db"
#: The files of every task's workspace, in the order :func:`materialize` returns them.
FILES: tuple[str, ...] = (SALES, EMPLOYEES, DATABASE)

_MONEY = "Answer with the number only, rounded to 2 decimals."
_COUNT = "Answer with a whole number only."
_COMPLETED = (
    "count only orders whose status is 'completed'; an order's amount is the sum of "
    "quantity * unit_price over its order_items"
)


@dataclass(frozen=True)
class DataTask:
    """One question. ``seed`` makes its files (:func:`materialize`), ``kind`` is its template,
    ``answer`` the canonical answer, ``tolerance`` the absolute slack of a number answer.
    ``expert_calls`` are (tool name, arguments) pairs that compute the answer from the files.
    The hash is the id's."""

    id: str
    instruction: str
    seed: int
    kind: str
    answer: str
    answer_type: str
    tolerance: float
    expert_calls: tuple[tuple[str, dict[str, Any]], ...]

    def __hash__(self) -> int:
        return hash(self.id)


# Data ---------------------------------------------------------------------------------------------

_FIRST_NAMES = (
    "Alice",
    "Bruno",
    "Carmen",
    "Dmitri",
    "Elena",
    "Farah",
    "Gustavo",
    "Hana",
    "Ivan",
    "Jamal",
    "Keiko",
    "Liam",
    "Maya",
    "Nikhil",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
    "Umar",
    "Vera",
    "Wei",
    "Ximena",
    "Yusuf",
    "Zoe",
    "Aaron",
    "Bianca",
    "Chen",
    "Diana",
    "Emeka",
    "Fiona",
    "Goran",
    "Helga",
    "Ines",
    "Jonas",
    "Kofi",
    "Lena",
    "Marco",
    "Nadia",
)
_LAST_NAMES = (
    "Abbott",
    "Barros",
    "Castillo",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Haddad",
    "Ito",
    "Jensen",
    "Kowalski",
    "Larsen",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quintero",
    "Rossi",
    "Silva",
    "Tanaka",
    "Uddin",
    "Varga",
    "Weber",
    "Xu",
    "Yilmaz",
    "Zimmer",
    "Alvarez",
    "Brennan",
    "Costa",
    "Dalton",
    "Esposito",
    "Ferreira",
    "Gupta",
    "Hoffmann",
    "Ibrahim",
    "Jovanovic",
    "Keller",
    "Lindqvist",
    "Mendes",
    "Novak",
)
_REGIONS = ("North", "South", "East", "West", "Central", "Coastal", "Mountain")
#: Sales products and their list prices in cents.
_SALES_PRODUCTS = (
    ("Desk Lamp", 2999),
    ("Office Chair", 14900),
    ("Standing Desk", 39900),
    ("Monitor Arm", 8950),
    ("Keyboard", 4999),
    ("Wireless Mouse", 2499),
    ("Webcam", 6999),
    ("Headset", 7999),
    ("USB Hub", 1999),
    ("Laptop Stand", 3499),
    ("Notebook Pack", 899),
    ("Whiteboard", 5999),
)
_DEPARTMENTS = ("Engineering", "Sales", "Marketing", "Finance", "Support", "Operations", "Legal", "Research")
_CITIES = ("Lisbon", "Oslo", "Austin", "Toronto", "Nairobi", "Osaka", "Lyon", "Denver", "Porto", "Dublin")
#: Shop products: name, category, price in cents.
_SHOP_PRODUCTS = (
    ("Chef Knife", "Kitchen", 4500),
    ("Cast Iron Pan", "Kitchen", 3899),
    ("Coffee Grinder", "Kitchen", 5499),
    ("Tea Kettle", "Kitchen", 2999),
    ("Cutting Board", "Kitchen", 1850),
    ("Spice Rack", "Kitchen", 2200),
    ("Pruning Shears", "Garden", 1999),
    ("Watering Can", "Garden", 1499),
    ("Garden Hose", "Garden", 3499),
    ("Seed Starter Kit", "Garden", 1299),
    ("Trowel", "Garden", 999),
    ("Camping Lantern", "Outdoor", 2799),
    ("Trail Backpack", "Outdoor", 8999),
    ("Sleeping Bag", "Outdoor", 6499),
    ("Water Filter", "Outdoor", 3999),
    ("Folding Chair", "Outdoor", 2499),
    ("Puzzle Cube", "Toys", 1199),
    ("Building Blocks", "Toys", 3499),
    ("Kite", "Toys", 1599),
    ("Board Game", "Toys", 2999),
    ("Plush Bear", "Toys", 1899),
    ("Bluetooth Speaker", "Electronics", 4999),
    ("Phone Charger", "Electronics", 1999),
    ("Smart Plug", "Electronics", 1499),
    ("E-Reader", "Electronics", 11999),
    ("Fitness Tracker", "Electronics", 7999),
)
_STATUSES = ("completed", "cancelled", "returned")
_YEARS = ("2023", "2024")
_START = date(2023, 1, 1)
_DAYS = 731  # 2023-01-01 .. 2024-12-31
_HIRED, _HIRE_DAYS = date(2008, 1, 1), 6210  # .. 2024-12-31


class _Sale(NamedTuple):
    date: str
    region: str
    product: str
    units: int
    price: int  # cents


class _Employee(NamedTuple):
    name: str
    department: str
    salary: int
    hire_date: str
    manager: str


class _Customer(NamedTuple):
    id: int
    name: str
    city: str
    signup_date: str


class _Product(NamedTuple):
    id: int
    name: str
    category: str
    price: int  # cents


class _Order(NamedTuple):
    id: int
    customer_id: int
    order_date: str
    status: str


class _Item(NamedTuple):
    id: int
    order_id: int
    product_id: int
    quantity: int
    unit_price: int  # cents


@dataclass(frozen=True)
class _Sales:
    regions: tuple[str, ...]
    products: tuple[str, ...]
    rows: tuple[_Sale, ...]


@dataclass(frozen=True)
class _Shop:
    customers: tuple[_Customer, ...]
    products: tuple[_Product, ...]
    orders: tuple[_Order, ...]
    items: tuple[_Item, ...]


def _day(rng: random.Random, start: date = _START, days: int = _DAYS) -> str:
    return (start + timedelta(days=rng.randrange(days))).isoformat()


def _names(rng: random.Random, n: int) -> list[str]:
    picks = rng.sample(range(len(_FIRST_NAMES) * len(_LAST_NAMES)), n)
    return [f"{_FIRST_NAMES[i % len(_FIRST_NAMES)]} {_LAST_NAMES[i // len(_FIRST_NAMES)]}" for i in picks]


def _weights(rng: random.Random, n: int) -> list[float]:
    """Uneven popularity, so that groups differ."""
    return [rng.uniform(0.3, 3.0) for _ in range(n)]


def _sales(seed: int) -> _Sales:
    rng = seeding.rng("agentgym.tooluse.data", "sales", seed)
    regions = tuple(rng.sample(_REGIONS, rng.randint(3, 6)))
    catalog = rng.sample(_SALES_PRODUCTS, rng.randint(5, 9))
    n = rng.randint(200, 2000)
    where = rng.choices(regions, _weights(rng, len(regions)), k=n)
    what = rng.choices(catalog, _weights(rng, len(catalog)), k=n)
    rows = [
        _Sale(_day(rng), region, name, rng.randint(1, 25), round(price * rng.uniform(0.85, 1.15)))
        for region, (name, price) in zip(where, what)
    ]
    rows.sort(key=lambda s: s.date)
    return _Sales(regions, tuple(name for name, _ in catalog), tuple(rows))


def _salary(rng: random.Random, low: int, high: int) -> int:
    return 500 * rng.randint(low // 500, high // 500)


def _employees(seed: int) -> tuple[_Employee, ...]:
    rng = seeding.rng("agentgym.tooluse.data", "employees", seed)
    departments = rng.sample(_DEPARTMENTS, rng.randint(4, 6))
    names = iter(_names(rng, rng.randint(30, 120)))
    people: list[_Employee] = []

    def hire(department: str, low: int, high: int, manager: str) -> str:
        name = next(names)
        people.append(
            _Employee(name, department, _salary(rng, low, high), _day(rng, _HIRED, _HIRE_DAYS), manager)
        )
        return name

    chief = hire("Executive", 240_000, 320_000, "")
    managers: dict[str, list[str]] = {}
    for department in departments:
        head = hire(department, 150_000, 220_000, chief)
        managers[department] = [head] + [
            hire(department, 105_000, 160_000, head) for _ in range(rng.randint(1, 3))
        ]
    sizes = _weights(rng, len(departments))
    for name in names:
        department = rng.choices(departments, sizes)[0]
        people.append(
            _Employee(
                name,
                department,
                _salary(rng, 45_000, 130_000),
                _day(rng, _HIRED, _HIRE_DAYS),
                rng.choice(managers[department]),
            )
        )
    rng.shuffle(people)
    return tuple(people)


def _shop(seed: int) -> _Shop:
    rng = seeding.rng("agentgym.tooluse.data", "shop", seed)
    cities = rng.sample(_CITIES, rng.randint(4, 7))
    customers = tuple(
        _Customer(i, name, rng.choice(cities), _day(rng, date(2021, 1, 1), 1095))
        for i, name in enumerate(_names(rng, rng.randint(25, 60)), 1)
    )
    catalog = rng.sample(_SHOP_PRODUCTS, rng.randint(15, len(_SHOP_PRODUCTS)))
    products = tuple(_Product(i, *entry) for i, entry in enumerate(catalog, 1))
    buyers, popular = _weights(rng, len(customers)), _weights(rng, len(products))
    days = sorted(_day(rng) for _ in range(rng.randint(150, 600)))
    orders: list[_Order] = []
    items: list[_Item] = []
    for order_id, day in enumerate(days, 1):
        customer = rng.choices(customers, buyers)[0]
        orders.append(_Order(order_id, customer.id, day, rng.choices(_STATUSES, (88, 8, 4))[0]))
        picked = dict.fromkeys(rng.choices(products, popular, k=rng.randint(1, 4)))
        for product in picked:
            price = product.price if rng.random() < 0.8 else round(product.price * 0.9)
            items.append(
                _Item(len(items) + 1, order_id, product.id, rng.choice((1, 1, 1, 2, 2, 3, 4, 5)), price)
            )
    return _Shop(customers, products, tuple(orders), tuple(items))


# Files --------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL,
                        signup_date TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
                       price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     order_date TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_items (id INTEGER PRIMARY KEY,
                          order_id INTEGER NOT NULL REFERENCES orders(id),
                          product_id INTEGER NOT NULL REFERENCES products(id),
                          quantity INTEGER NOT NULL, unit_price REAL NOT NULL);
"""


def _cents(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


def _database(shop: _Shop) -> bytes:
    """The database file's bytes: built in memory and serialized, so no journal, no timestamp,
    and the same bytes each time under the same SQLite library."""
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(_SCHEMA)
        con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", shop.customers)
        con.executemany(
            "INSERT INTO products VALUES (?, ?, ?, ?)",
            [(p.id, p.name, p.category, p.price / 100) for p in shop.products],
        )
        con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", shop.orders)
        con.executemany(
            "INSERT INTO order_items VALUES (?, ?, ?, ?, ?)",
            [(*item[:4], item.unit_price / 100) for item in shop.items],
        )
        con.commit()
        return con.serialize()
    finally:
        con.close()


def materialize(task: DataTask, directory: Path) -> list[str]:
    """Write the task's files (:data:`FILES`) into ``directory``; their names, relative to it.
    The same task gives the same bytes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sales = _sales(task.seed)
    (directory / SALES).write_bytes(
        _csv(
            ("date", "region", "product", "units", "unit_price"),
            [(*s[:4], _cents(s.price)) for s in sales.rows],
        )
    )
    (directory / EMPLOYEES).write_bytes(_csv(_Employee._fields, _employees(task.seed)))
    (directory / DATABASE).write_bytes(_database(_shop(task.seed)))
    return list(FILES)


# Answers and expert calls -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Question:
    instruction: str
    answer: str
    answer_type: str
    tolerance: float
    expert_calls: tuple[tuple[str, dict[str, Any]], ...]


def _fixed(x: Fraction | int) -> str:
    """``x`` with two decimals, rounded half away from zero."""
    hundredths = math.floor(abs(Fraction(x)) * 100 + Fraction(1, 2))
    sign = "-" if x < 0 and hundredths else ""
    return f"{sign}{hundredths // 100}.{hundredths % 100:02d}"


def _money(cents: Fraction | int) -> str:
    return _fixed(Fraction(cents, 100))


def _python(*parts: str, **values: Any) -> tuple[tuple[str, dict[str, Any]], ...]:
    """A python call running the code ``parts``, each dedented, with ``$name`` replaced by
    ``repr`` of ``values[name]``."""
    code = "\n".join(dedent(part).strip() for part in parts)
    source = string.Template(code).substitute({k: repr(v) for k, v in values.items()})
    return (("python", {"code": source}),)


def _sql(query: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    return (("sql", {"query": " ".join(query.split()), "database": DATABASE}),)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _number(
    instruction: str, value: str, calls: tuple[tuple[str, dict[str, Any]], ...], tolerance: float = 0.01
) -> _Question:
    return _Question(instruction, value, "number", tolerance, calls)


_K = TypeVar("_K")


def _unique_top(totals: Mapping[_K, float], k: int = 1) -> list[_K] | None:
    """The ``k`` keys with the largest totals, largest first, or ``None`` where the order of the
    first ``k + 1`` has a tie (a missing key counts as 0)."""
    ranked = sorted(totals, key=lambda key: -totals[key])
    values = [totals[key] for key in ranked] + [0]
    if len(ranked) < k or any(values[i] <= values[i + 1] for i in range(k)):
        return None
    return ranked[:k]


def _quarter(year: int, q: int) -> tuple[str, str, str]:
    """Label, first day, last day of a quarter."""
    last = (31, 30, 30, 31)[q - 1]
    return f"Q{q} {year}", f"{year}-{3 * q - 2:02d}-01", f"{year}-{3 * q:02d}-{last}"


_SALES_ROWS = """
    import csv
    rows = list(csv.DictReader(open("sales.csv", newline="")))
"""
_EMPLOYEE_ROWS = """
    import csv
    rows = [r for r in csv.DictReader(open("employees.csv", newline=""))
            if r["department"] == $department]
"""


# Templates: each draws its parameters with ``rng`` and asks about the files of ``seed``, or gives
# None where the question would be empty or ambiguous.


def _revenue_sum(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    product, region = rng.choice(sales.products), rng.choice(sales.regions)
    year = rng.choice(_YEARS)
    rows = [s for s in sales.rows if s.product == product and s.region == region and s.date.startswith(year)]
    if not rows:
        return None
    return _number(
        f"Using sales.csv, what was the total revenue (units * unit_price, summed over rows) of "
        f"{product} in the {region} region in {year}? {_MONEY}",
        _money(sum(s.units * s.price for s in rows)),
        _python(
            _SALES_ROWS,
            """
            total = sum(int(r["units"]) * float(r["unit_price"]) for r in rows
                        if r["product"] == $product and r["region"] == $region
                        and r["date"].startswith($year))
            print(f"{total:.2f}")
        """,
            product=product,
            region=region,
            year=year,
        ),
    )


def _mean_units(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    product, region = rng.choice(sales.products), rng.choice(sales.regions)
    units = [s.units for s in sales.rows if s.product == product and s.region == region]
    if len(units) < 2:
        return None
    return _number(
        f"Using sales.csv, what is the average number of units per sale (per row) of {product} "
        f"in the {region} region? {_MONEY}",
        _fixed(Fraction(sum(units), len(units))),
        _python(
            _SALES_ROWS,
            """
            units = [int(r["units"]) for r in rows
                     if r["product"] == $product and r["region"] == $region]
            print(f"{sum(units) / len(units):.2f}")
        """,
            product=product,
            region=region,
        ),
    )


def _top_products(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    region, year = rng.choice(sales.regions), rng.choice(_YEARS)
    k = rng.choice((3, 3, 4))
    totals: Counter[str] = Counter()
    for s in sales.rows:
        if s.region == region and s.date.startswith(year):
            totals[s.product] += s.units * s.price
    top = _unique_top(totals, k)
    if top is None:
        return None
    return _Question(
        f"Using sales.csv, which {k} products brought the most revenue (units * unit_price) in "
        f"the {region} region in {year}? Answer with the product names, comma-separated, "
        f"highest revenue first.",
        ", ".join(top),
        "ordered_list",
        0.0,
        _python(
            _SALES_ROWS,
            """
            totals = {}
            for r in rows:
                if r["region"] == $region and r["date"].startswith($year):
                    revenue = int(r["units"]) * float(r["unit_price"])
                    totals[r["product"]] = totals.get(r["product"], 0) + revenue
            print(", ".join(sorted(totals, key=totals.get, reverse=True)[:$k]))
        """,
            region=region,
            year=year,
            k=k,
        ),
    )


def _count_range(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    region = rng.choice(sales.regions)
    first = _day(rng, _START, _DAYS - 30)
    last = (date.fromisoformat(first) + timedelta(days=rng.randint(14, 180))).isoformat()
    last = min(last, "2024-12-31")
    count = sum(s.region == region and first <= s.date <= last for s in sales.rows)
    if not count:
        return None
    return _number(
        f"Using sales.csv, how many sales (rows) were made in the {region} region from {first} to "
        f"{last}, both dates included? {_COUNT}",
        str(count),
        _python(
            _SALES_ROWS,
            """
            print(sum(r["region"] == $region and $first <= r["date"] <= $last for r in rows))
        """,
            region=region,
            first=first,
            last=last,
        ),
        tolerance=0.0,
    )


def _top_region(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    product, year = rng.choice(sales.products), rng.choice(_YEARS)
    units: Counter[str] = Counter()
    for s in sales.rows:
        if s.product == product and s.date.startswith(year):
            units[s.region] += s.units
    top = _unique_top(units)
    if top is None:
        return None
    return _Question(
        f"Using sales.csv, which region sold the most units of {product} in {year}? Answer with "
        f"the region name only.",
        top[0],
        "name",
        0.0,
        _python(
            _SALES_ROWS,
            """
            units = {}
            for r in rows:
                if r["product"] == $product and r["date"].startswith($year):
                    units[r["region"]] = units.get(r["region"], 0) + int(r["units"])
            print(max(units, key=units.get))
        """,
            product=product,
            year=year,
        ),
    )


def _median_price(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    product, region = rng.choice(sales.products), rng.choice(sales.regions)
    prices = [s.price for s in sales.rows if s.product == product and s.region == region]
    if len(prices) < 3:
        return None
    return _number(
        f"Using sales.csv, what is the median unit_price of the {product} sales in the {region} "
        f"region? {_MONEY}",
        _money(statistics.median(Fraction(p) for p in prices)),
        _python(
            _SALES_ROWS,
            """
            import statistics
            prices = [float(r["unit_price"]) for r in rows
                      if r["product"] == $product and r["region"] == $region]
            print(f"{statistics.median(prices):.2f}")
        """,
            product=product,
            region=region,
        ),
    )


def _distinct_days(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    product, region = rng.choice(sales.products), rng.choice(sales.regions)
    days = {s.date for s in sales.rows if s.product == product and s.region == region}
    if not days:
        return None
    return _number(
        f"Using sales.csv, on how many distinct dates was {product} sold in the {region} region? {_COUNT}",
        str(len(days)),
        _python(
            _SALES_ROWS,
            """
            print(len({r["date"] for r in rows
                       if r["product"] == $product and r["region"] == $region}))
        """,
            product=product,
            region=region,
        ),
        tolerance=0.0,
    )


def _pct_change(rng: random.Random, seed: int) -> _Question | None:
    sales = _sales(seed)
    region = rng.choice(sales.regions)
    quarters = [_quarter(year, q) for year in (2023, 2024) for q in (1, 2, 3, 4)]
    i = rng.randrange(7)
    before, after = rng.choice(
        (
            (quarters[i], quarters[i + 1]),  # quarter over quarter
            (quarters[i % 4], quarters[i % 4 + 4]),  # year over year
            (("2023", "2023-01-01", "2023-12-31"), ("2024", "2024-01-01", "2024-12-31")),
        )
    )

    def revenue(period: tuple[str, str, str]) -> int:
        return sum(
            s.units * s.price for s in sales.rows if s.region == region and period[1] <= s.date <= period[2]
        )

    old, new = revenue(before), revenue(after)
    if not old:
        return None
    return _number(
        f"Using sales.csv, by what percentage did the total revenue (units * unit_price) of the "
        f"{region} region change from {before[0]} ({before[1]} to {before[2]}) to {after[0]} "
        f"({after[1]} to {after[2]})? Answer with the percentage as a number only, negative for a "
        f"decrease (e.g. -4.25), rounded to 2 decimals.",
        _fixed(Fraction(new - old, old) * 100),
        _python(
            _SALES_ROWS,
            """
            def revenue(first, last):
                return sum(int(r["units"]) * float(r["unit_price"]) for r in rows
                           if r["region"] == $region and first <= r["date"] <= last)
            old, new = revenue($b1, $b2), revenue($a1, $a2)
            print(f"{(new - old) / old * 100:.2f}")
        """,
            region=region,
            b1=before[1],
            b2=before[2],
            a1=after[1],
            a2=after[2],
        ),
    )


def _departments(people: Sequence[_Employee]) -> list[str]:
    return sorted({p.department for p in people} - {"Executive"})


def _above_average(rng: random.Random, seed: int) -> _Question | None:
    people = _employees(seed)
    department = rng.choice(_departments(people))
    staff = [p for p in people if p.department == department]
    mean = Fraction(sum(p.salary for p in staff), len(staff))
    above = [p.name for p in staff if p.salary > mean]
    if not 2 <= len(above) <= 12 or any(abs(p.salary - mean) < 1 for p in staff):
        return None
    return _Question(
        f"Using employees.csv, which employees of the {department} department earn more than the "
        f"average salary of that department? Answer with their names, comma-separated, in any "
        f"order.",
        ", ".join(above),
        "list",
        0.0,
        _python(
            _EMPLOYEE_ROWS,
            """
            mean = sum(int(r["salary"]) for r in rows) / len(rows)
            print(", ".join(r["name"] for r in rows if int(r["salary"]) > mean))
        """,
            department=department,
        ),
    )


def _most_reports(rng: random.Random, seed: int) -> _Question | None:
    top = _unique_top(Counter(p.manager for p in _employees(seed) if p.manager))
    if top is None:
        return None
    return _Question(
        "Using employees.csv, where the manager column names each employee's direct manager: who "
        "has the most direct reports? Answer with the person's name only.",
        top[0],
        "name",
        0.0,
        _python("""
            import csv
            from collections import Counter
            rows = csv.DictReader(open("employees.csv", newline=""))
            print(Counter(r["manager"] for r in rows if r["manager"]).most_common(1)[0][0])
        """),
    )


def _median_salary(rng: random.Random, seed: int) -> _Question | None:
    people = _employees(seed)
    department = rng.choice(_departments(people))
    salaries = [Fraction(p.salary) for p in people if p.department == department]
    return _number(
        f"Using employees.csv, what is the median salary in the {department} department? {_MONEY}",
        _fixed(statistics.median(salaries)),
        _python(
            _EMPLOYEE_ROWS,
            """
            import statistics
            print(f"{statistics.median(int(r['salary']) for r in rows):.2f}")
        """,
            department=department,
        ),
    )


def _hired_count(rng: random.Random, seed: int) -> _Question | None:
    people = _employees(seed)
    department = rng.choice(_departments(people))
    start = rng.randint(2008, 2022)
    first, last = f"{start}-01-01", f"{rng.randint(start, min(start + 4, 2024))}-12-31"
    count = sum(p.department == department and first <= p.hire_date <= last for p in people)
    if not count:
        return None
    return _number(
        f"Using employees.csv, how many employees of the {department} department were hired from "
        f"{first} to {last}, both dates included? {_COUNT}",
        str(count),
        _python(
            _EMPLOYEE_ROWS,
            """
            print(sum($first <= r["hire_date"] <= $last for r in rows))
        """,
            department=department,
            first=first,
            last=last,
        ),
        tolerance=0.0,
    )


def _spending(shop: _Shop, first: str = "", last: str = "9999") -> Counter[int]:
    """Cents spent per customer id on completed orders dated from ``first`` to ``last``."""
    kept = {
        o.id: o.customer_id for o in shop.orders if o.status == "completed" and first <= o.order_date <= last
    }
    spent: Counter[int] = Counter()
    for item in shop.items:
        if item.order_id in kept:
            spent[kept[item.order_id]] += item.quantity * item.unit_price
    return spent


_JOIN_ITEMS = """FROM customers c JOIN orders o ON o.customer_id = c.id
                 JOIN order_items i ON i.order_id = o.id"""


def _customer_spend(rng: random.Random, seed: int) -> _Question | None:
    shop = _shop(seed)
    customer = rng.choice(shop.customers)
    spent = _spending(shop)[customer.id]
    if not spent:
        return None
    return _number(
        f"Using shop.db, how much did {customer.name} spend in total ({_COMPLETED})? {_MONEY}",
        _money(spent),
        _sql(f"""SELECT printf('%.2f', SUM(i.quantity * i.unit_price)) {_JOIN_ITEMS}
                 WHERE c.name = {_literal(customer.name)} AND o.status = 'completed'"""),
    )


def _top_customer(rng: random.Random, seed: int) -> _Question | None:
    shop = _shop(seed)
    year = rng.choice(_YEARS)
    top = _unique_top(_spending(shop, f"{year}-01-01", f"{year}-12-31"))
    if top is None:
        return None
    name = next(c.name for c in shop.customers if c.id == top[0])
    return _Question(
        f"Using shop.db, which customer spent the most in {year} ({_COMPLETED})? Answer with the "
        f"customer's name only.",
        name,
        "name",
        0.0,
        _sql(f"""SELECT c.name {_JOIN_ITEMS}
                 WHERE o.status = 'completed' AND o.order_date BETWEEN '{year}-01-01' AND
                 '{year}-12-31' GROUP BY c.id ORDER BY SUM(i.quantity * i.unit_price) DESC
                 LIMIT 1"""),
    )


def _most_ordered(rng: random.Random, seed: int) -> _Question | None:
    shop = _shop(seed)
    category = rng.choice(sorted({p.category for p in shop.products}))
    names = {p.id: p.name for p in shop.products if p.category == category}
    completed = {o.id for o in shop.orders if o.status == "completed"}
    quantity: Counter[str] = Counter()
    for item in shop.items:
        if item.product_id in names and item.order_id in completed:
            quantity[names[item.product_id]] += item.quantity
    top = _unique_top(quantity)
    if len(names) < 2 or top is None:
        return None
    return _Question(
        f"Using shop.db, which product of the {category} category was ordered in the largest "
        f"total quantity, counting only orders whose status is 'completed'? Answer with the "
        f"product name only.",
        top[0],
        "name",
        0.0,
        _sql(f"""SELECT p.name FROM products p JOIN order_items i ON i.product_id = p.id
                 JOIN orders o ON o.id = i.order_id
                 WHERE p.category = {_literal(category)} AND o.status = 'completed'
                 GROUP BY p.id ORDER BY SUM(i.quantity) DESC LIMIT 1"""),
    )


def _city_orders(rng: random.Random, seed: int) -> _Question | None:
    shop = _shop(seed)
    city = rng.choice(sorted({c.city for c in shop.customers}))
    first = _day(rng, _START, _DAYS - 60)
    last = min((date.fromisoformat(first) + timedelta(days=rng.randint(30, 240))).isoformat(), "2024-12-31")
    local = {c.id for c in shop.customers if c.city == city}
    count = sum(o.customer_id in local and first <= o.order_date <= last for o in shop.orders)
    if not count:
        return None
    return _number(
        f"Using shop.db, how many orders (of any status) were placed by customers from {city} "
        f"from {first} to {last}, both dates included? {_COUNT}",
        str(count),
        _sql(f"""SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id
                 WHERE c.city = {_literal(city)}
                 AND o.order_date BETWEEN '{first}' AND '{last}'"""),
        tolerance=0.0,
    )


_TEMPLATES: dict[str, Callable[[random.Random, int], _Question | None]] = {
    "revenue_sum": _revenue_sum,
    "mean_units": _mean_units,
    "top_products": _top_products,
    "count_range": _count_range,
    "top_region": _top_region,
    "median_price": _median_price,
    "distinct_days": _distinct_days,
    "pct_change": _pct_change,
    "above_average": _above_average,
    "most_reports": _most_reports,
    "median_salary": _median_salary,
    "hired_count": _hired_count,
    "customer_spend": _customer_spend,
    "top_customer": _top_customer,
    "most_ordered": _most_ordered,
    "city_orders": _city_orders,
}
#: The template names, a task's ``kind``.
KINDS: tuple[str, ...] = tuple(_TEMPLATES)
_MAX_TRIES = 200


# Generation and splits ----------------------------------------------------------------------------


def generate_data_tasks(seed: int = 0, num_tasks: int = DEFAULT_NUM_DATA_TASKS) -> list[DataTask]:
    """``num_tasks`` tasks with ids ``data-00000`` on, each with its own data seed. Templates
    come in rounds of all :data:`KINDS` in shuffled order, so their counts differ by at most
    one. The same arguments give the same tasks."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be non-negative, got {num_tasks}")
    rng = seeding.rng("agentgym.tooluse.data", seed)
    used: set[int] = set()
    tasks: list[DataTask] = []
    kinds: list[str] = []
    while len(tasks) < num_tasks:
        if not kinds:
            kinds = list(KINDS)
            rng.shuffle(kinds)
        kind = kinds.pop()
        for _ in range(_MAX_TRIES):
            data_seed = rng.randrange(1 << 31)
            question = None if data_seed in used else _TEMPLATES[kind](rng, data_seed)
            if question is not None:
                break
        else:
            raise RuntimeError(f"no {kind} question in {_MAX_TRIES} tries")
        used.add(data_seed)
        tasks.append(
            DataTask(
                f"data-{len(tasks):05d}",
                question.instruction,
                data_seed,
                kind,
                question.answer,
                question.answer_type,
                question.tolerance,
                question.expert_calls,
            )
        )
    return tasks


def data_task_split(tasks: Sequence[DataTask], split: str) -> list[DataTask]:
    """The tasks of ``split``, one of :data:`SPLITS`, in order: whether a task is a test task
    depends only on its data seed (about one in five)."""
    seeding.check_split(split)
    return [task for task in tasks if seeding.split_of("agentgym.tooluse.data", task.seed) == split]


@functools.cache
def _all_tasks() -> tuple[DataTask, ...]:
    return tuple(generate_data_tasks())


def data_tasks(split: str = "train") -> list[DataTask]:
    """The ``split`` tasks of ``generate_data_tasks()`` (made once per process)."""
    return data_task_split(_all_tasks(), split)


# Checking -----------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(-?)\$?(-?)(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?")
_SEPARATORS = re.compile(r",|;|\n|&|\band\b", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_PUNCTUATION = re.compile(r"[^\w\s]")


def _parse_number(text: str) -> float | None:
    """The first number of ``text``: thousands separators, a currency sign and a minus sign
    (also U+2212) allowed."""
    text = unicodedata.normalize("NFKC", text).replace("\u2212", "-")
    match = _NUMBER.search(text)
    if match is None:
        return None
    sign = -1.0 if match[1] or match[2] else 1.0
    return sign * float(match[3].replace(",", "") + (match[4] or ""))


def _normalize(text: str) -> str:
    text = _PUNCTUATION.sub("", unicodedata.normalize("NFKC", text).lower())
    return " ".join(text.split())


def _items(text: str) -> list[str]:
    items = (_normalize(_BULLET.sub("", part)) for part in _SEPARATORS.split(text))
    return [item for item in items if item]


def check_answer(task: DataTask, text: str) -> bool:
    """Whether ``text`` answers ``task`` (see the module documentation for how leniently)."""
    if task.answer_type == "number":
        value = _parse_number(text)
        return value is not None and abs(value - float(task.answer)) <= task.tolerance + 1e-6
    if task.answer_type == "name":
        return _normalize(text) == _normalize(task.answer)
    if task.answer_type == "list":
        return set(_items(text)) == set(_items(task.answer))
    if task.answer_type == "ordered_list":
        return _items(text) == _items(task.answer)
    raise ValueError(f"unknown answer type {task.answer_type!r}")
