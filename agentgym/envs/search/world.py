"""A generated encyclopedia of fictional entities, and multi-hop questions about it.

The corpus of the search environment: questions in the manner of HotpotQA (Yang et al., 2018) and
MuSiQue (Trivedi et al., 2022), but every name and fact is invented from a seed, so no model can
answer them from memory.

A world holds countries, cities, people, organizations, works (books, films, albums) and events.
Their facts are consistent: a city lies in a country and is older than everyone born there; an
organization is founded by a person aged 25 to 60 and headquartered in a city; a work comes out
after its creator turns 20, through a publisher, studio or label that already exists; an event is
organized by an existing organization. Each entity has one encyclopedia passage, titled with its
name, that states each of its facts once, with a phrasing drawn from several and the sentences
shuffled. Some names are deliberately close to earlier ones (relatives sharing a surname, a city
one vowel off, "Halvern Press" and "Halvern Society"). News snippets, twice as many as entities,
mention an entity without stating its facts and state a fact of another entity of the same kind.
Everything is drawn from the facts, so no passage contradicts another.

Questions follow links between entities (``birthplace``, ``employer``, ``founder``, ...), each a
function, so every hop names one entity. A bridge question asks for the last fact of a chain of 1
to 4 links ("In which country is the birthplace of the author of The Amber Loom?"); a comparison
asks which of two entities, each named or one link away, is older. Each hop needs one passage:
the passage of the entity whose fact it reads, the ``supporting`` passages in hop order (for a
comparison, the first option's, then the second's; a 3-hop comparison bridges its first option).
An entity passage states one year, its own (born, founded, published or held); a country's none.

Each hop also has a paraphrase, what a person would search for: the name known at that hop in a
question or description that shares no other word with the passage to find ("Where was Varen
Ostrel from?" for "Varen Ostrel was a native of Tarnmoor"). Each fact has three templates, plain
English that avoids every wording a passage of its kind uses; a hop's is drawn from a stream of
its own, so that the rest of the world is the same with or without them.

Entities are split 80/10/10 into train, dev and test before questions are drawn, and a question
starts only from entities of its own split, so no split shares a question or a start entity.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count, islice

from agentgym import seeding

__all__ = [
    "DEFAULT_NUM_ENTITIES",
    "MIN_ENTITIES",
    "SPLITS",
    "Passage",
    "Question",
    "World",
    "generate_world",
    "iter_passages",
]

SPLITS: tuple[str, ...] = ("train", "dev", "test")
DEFAULT_NUM_ENTITIES = 1200
MIN_ENTITIES = 50


@dataclass(frozen=True)
class Passage:
    """One document: ``id`` is unique within a corpus; an entity passage's title is its name."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """A question, its gold answers (the first canonical, the others safe aliases) and its hops.

    ``type`` is ``"bridge"`` (1-hop questions included) or ``"comparison"``; ``hops`` (1 to 4)
    is the number of passages it needs. ``supporting[i]`` is the id of the passage that hop ``i``
    must read; ``hop_queries[i]`` is a short search query for it, made of the name known at that
    hop and a word for the fact ("The Amber Loom author", then "Varen Ostrel birthplace").
    ``split`` is one of :data:`SPLITS`. ``hop_paraphrases[i]`` (generated worlds only; empty
    otherwise) asks for the same fact as a person would, with the same name and other words than
    the passage's ("Who penned The Amber Loom?", then "Where was Varen Ostrel from?").
    """

    id: str
    question: str
    answers: tuple[str, ...]
    type: str
    hops: int
    supporting: tuple[str, ...]
    hop_queries: tuple[str, ...]
    split: str
    hop_paraphrases: tuple[str, ...] = ()


@dataclass(frozen=True)
class World:
    """A generated corpus and the questions about it."""

    passages: list[Passage]
    questions: list[Question]

    def split(self, name: str) -> list[Question]:
        """The questions of split ``name``, one of :data:`SPLITS`; any other name raises
        ``ValueError``."""
        seeding.check_split(name, SPLITS)
        return [q for q in self.questions if q.split == name]


# Entities ----------------------------------------------------------------------------------------

_SHARES = (
    ("country", 0.04),
    ("city", 0.12),
    ("person", 0.40),
    ("org", 0.14),
    ("work", 0.20),
    ("event", 0.10),
)
#: Organization sectors: name endings, and the first year one may be founded.
_SECTORS = {
    "press": (("Press", "Publishing", "Books"), 1785),
    "studio": (("Studios", "Pictures", "Films"), 1890),
    "label": (("Records", "Recordings", "Music"), 1920),
    "society": (
        ("Society", "Institute", "Guild", "Academy", "Company", "Bank", "Observatory", "Foundry", "Museum"),
        1785,
    ),
}
_SECTOR_WEIGHTS = (0.2, 0.15, 0.15, 0.5)
#: Work kinds: weight, the sector that publishes them, first year, and their creators' jobs.
_WORKS = {
    "book": (0.5, "press", 1800, ("novelist", "poet", "essayist", "historian")),
    "film": (0.25, "studio", 1895, ("film director", "filmmaker")),
    "album": (0.25, "label", 1925, ("composer", "singer", "songwriter")),
}
#: Occupations and the first birth year each is open to.
_OCCUPATIONS = (
    ("novelist", 0),
    ("poet", 0),
    ("essayist", 0),
    ("historian", 0),
    ("film director", 1850),
    ("filmmaker", 1850),
    ("composer", 0),
    ("singer", 0),
    ("songwriter", 0),
    ("cartographer", 0),
    ("architect", 0),
    ("engineer", 0),
    ("botanist", 0),
    ("physician", 0),
    ("merchant", 0),
    ("banker", 0),
    ("astronomer", 0),
    ("painter", 0),
    ("chemist", 0),
    ("diplomat", 0),
)
_EVENT_NOUNS = (
    "Summit",
    "Exhibition",
    "Congress",
    "Fair",
    "Regatta",
    "Games",
    "Symposium",
    "Festival",
    "Conference",
)

_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "qu",
    "r",
    "s",
    "sh",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "z",
)
_VOWELS = ("a", "a", "e", "e", "i", "o", "o", "u", "ae", "ai", "ei", "ou")
_CODAS = ("", "", "l", "n", "r", "s", "m", "nd", "rn", "st", "th", "ll")
_PLACE_ENDS = (
    "moor",
    "wick",
    "holm",
    "ford",
    "mere",
    "gate",
    "dale",
    "haven",
    "by",
    "stead",
    "bury",
    "port",
    "fell",
    "crest",
)
_LAND_ENDS = ("ia", "esse", "ar", "and", "ovia", "ene", "is", "ith", "mark")
_ADJECTIVES = (
    "Amber",
    "Silent",
    "Hollow",
    "Crimson",
    "Distant",
    "Gilded",
    "Broken",
    "Quiet",
    "Northern",
    "Iron",
    "Pale",
    "Wandering",
    "Last",
    "Winter",
    "Salt",
    "Glass",
    "Burning",
    "Second",
    "Lonely",
    "Hidden",
    "Bright",
    "Velvet",
    "Copper",
    "Drowned",
    "Narrow",
    "Golden",
    "Patient",
    "Restless",
    "Empty",
    "Sleeping",
)
_NOUNS = (
    "Loom",
    "Harbor",
    "Lantern",
    "Orchard",
    "Compass",
    "Tide",
    "Garden",
    "Letter",
    "Bridge",
    "Mirror",
    "Season",
    "Crown",
    "Archive",
    "Ledger",
    "Meadow",
    "Furnace",
    "Choir",
    "Voyage",
    "Shore",
    "Signal",
    "Tower",
    "Window",
    "Engine",
    "Hour",
    "Map",
    "Wake",
    "Orchid",
    "Anchor",
    "Kettle",
    "Threshold",
)
_TITLES = ("The {a} {n}", "{n} of {w}", "The {a} {n} of {w}", "{a} {n}", "The {n} of {w}", "{a} {n}s")
#: Kinds that get namesakes: a share of their names reuse an earlier surname or stem.
_NAMESAKE_RATE = {"person": 0.2, "city": 0.15, "org": 0.15, "event": 0.15}


@dataclass
class _Entity:
    kind: str  # "country", "city", "person", "org", "event" or a work kind: "book", ...
    name: str
    ref: str  # the name as written mid-sentence: the name, or "the " + name
    year: int  # born, founded, published or held; 0 for a country, which has no year
    trait: str = ""  # a person's occupation, an organization's sector
    links: dict[str, int] = field(default_factory=dict)  # relation -> entity index


def _group(kind: str) -> str:
    return "work" if kind in _WORKS else kind


class _Namer:
    """Invents unique, pronounceable names; some on purpose close to an earlier one."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.stems: dict[str, list[str]] = {}

    def word(self, syllables: int) -> str:
        rng = self.rng
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables))
        if rng.random() < 0.15:
            word = rng.choice("aeio") + word
        return (word + rng.choice(_CODAS)).capitalize()

    def stem(self, kind: str) -> str:
        rng = self.rng
        if kind == "city":
            return self.word(1) + rng.choice(_PLACE_ENDS)
        if kind == "country":
            return self.word(rng.choice((1, 2))) + rng.choice(_LAND_ENDS)
        if kind in _WORKS:
            return rng.choice(_TITLES).format(a=rng.choice(_ADJECTIVES), n=rng.choice(_NOUNS), w=self.word(2))
        return self.word(2)

    def variant(self, name: str) -> str:
        """``name`` with one vowel changed (not a ``u`` after ``q``)."""
        spots = [i for i, ch in enumerate(name) if ch in "aeiou" and name[i - 1] != "q"]
        i = self.rng.choice(spots)
        return name[:i] + self.rng.choice([v for v in "aeiou" if v != name[i]]) + name[i + 1 :]

    def name(self, kind: str, sector: str = "") -> str:
        """A name no entity has yet, for an entity of ``kind`` (an organization's ``sector``)."""
        rng = self.rng
        while True:
            earlier = self.stems.get(kind)
            namesake = bool(earlier) and rng.random() < _NAMESAKE_RATE.get(kind, 0.0)
            stem = rng.choice(earlier) if earlier and namesake else self.stem(kind)
            if kind == "city" and namesake:
                stem = self.variant(stem)
            if kind == "person":
                name = f"{self.word(2)} {stem}"
            elif kind == "org":
                name = f"{stem} {rng.choice(_SECTORS[sector][0])}"
            elif kind == "event":
                name = f"{stem} {rng.choice(_EVENT_NOUNS)}"
            else:
                name = stem
            key = name.removeprefix("The ")  # so that no alias without "The" names another
            if key not in self.used:
                self.used.add(key)
                self.stems.setdefault(kind, []).append(stem)
                return name


class _Timeline:
    """Entities sorted by year, to draw one whose year lies in a span."""

    def __init__(self, entities: list[_Entity], ids: list[int]) -> None:
        pairs = sorted((entities[i].year, i) for i in ids)
        self.years = [y for y, _ in pairs]
        self.ids = [i for _, i in pairs]

    def draw(self, rng: random.Random, lo: int, hi: int) -> int | None:
        a, b = bisect_left(self.years, lo), bisect_right(self.years, hi)
        return self.ids[rng.randrange(a, b)] if a < b else None


def _entities(rng: random.Random, num_entities: int) -> list[_Entity]:
    """About ``num_entities`` entities with consistent facts (an organization or work whose draw
    finds no founder, creator or publisher of the right age is dropped)."""
    namer, es = _Namer(rng), []
    n = {kind: max(2, round(share * num_entities)) for kind, share in _SHARES}

    def add(entity: _Entity) -> int:
        es.append(entity)
        return len(es) - 1

    countries = [
        add(_Entity("country", (name := namer.name("country")), name, 0)) for _ in range(n["country"])
    ]
    cities = []
    for i in range(n["city"]):
        country = countries[i] if i < len(countries) else rng.choice(countries)
        name = namer.name("city")
        cities.append(add(_Entity("city", name, name, rng.randint(1000, 1750), links={"country": country})))
        es[country].links.setdefault("capital", cities[-1])
    people = []
    for _ in range(n["person"]):
        born = rng.randint(1760, 1960)
        job = rng.choice([job for job, since in _OCCUPATIONS if since <= born])
        name = namer.name("person")
        people.append(add(_Entity("person", name, name, born, job, {"birthplace": rng.choice(cities)})))
    by_birth, orgs = _Timeline(es, people), []
    for _ in range(n["org"]):
        sector = rng.choices(list(_SECTORS), _SECTOR_WEIGHTS)[0]
        founded = rng.randint(_SECTORS[sector][1], 2010)
        founder = by_birth.draw(rng, founded - 60, founded - 25)
        if founder is not None:
            name = namer.name("org", sector)
            orgs.append(
                add(
                    _Entity(
                        "org",
                        name,
                        name if sector != "society" else f"the {name}",
                        founded,
                        sector,
                        {"founder": founder, "headquarters": rng.choice(cities)},
                    )
                )
            )
    by_founding = _Timeline(es, orgs)
    for p in people:
        employer = by_founding.draw(rng, es[p].year - 60, es[p].year + 45)
        if employer is not None:
            es[p].links["employer"] = employer
    founded_by = Counter(es[o].links["founder"] for o in orgs)
    for o in orgs:
        if founded_by[es[o].links["founder"]] == 1:
            es[es[o].links["founder"]].links["founded"] = o
    publishers = {s: [o for o in orgs if es[o].trait == s] for s in _SECTORS}
    creators = {
        kind: _Timeline(es, [p for p in people if es[p].trait in jobs])
        for kind, (_, _, _, jobs) in _WORKS.items()
    }
    for _ in range(n["work"]):
        kind = rng.choices(list(_WORKS), [w[0] for w in _WORKS.values()])[0]
        sector, since = _WORKS[kind][1:3]
        if not publishers[sector]:
            continue
        publisher = rng.choice(publishers[sector])
        year = rng.randint(max(es[publisher].year, since), min(es[publisher].year + 80, 2020))
        creator = creators[kind].draw(rng, year - 65, year - 20)
        if creator is not None:
            name = namer.name(kind)
            add(_Entity(kind, name, name, year, links={"creator": creator, "publisher": publisher}))
    for _ in range(n["event"] if orgs else 0):
        organizer = rng.choice(orgs)
        name = namer.name("event")
        add(
            _Entity(
                "event",
                name,
                f"the {name}",
                rng.randint(max(es[organizer].year, 1850), 2020),
                links={"host": rng.choice(cities), "organizer": organizer},
            )
        )
    return es


# Facts in words ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rel:
    """How text states, asks and searches one fact of one kind of entity."""

    says: tuple[str, ...]  # sentences stating it: {s} the subject, {o} the value
    asks: tuple[str, ...]  # questions whose answer is the value: {x} the subject
    query: str  # the word a searcher adds to the subject's name
    # what a searcher writes instead, {x} the subject: questions and descriptions that share no
    # word with ``says`` or with the rest of a passage of this kind (test_paraphrases.py checks)
    paraphrases: tuple[str, ...]
    np: tuple[str, ...] = ()  # for a link: noun phrases for the entity it points to, {x} as above


_RELS: dict[tuple[str, str], _Rel] = {
    ("country", "capital"): _Rel(
        (
            "The capital of {s} is {o}.",
            "{s} is governed from its capital, {o}.",
            "{o} serves as the capital of {s}.",
        ),
        ("What is the capital of {x}?", "Which city is the capital of {x}?"),
        "capital",
        (
            "Which city is the seat of government of {x}?",
            "Where does the government of {x} sit?",
            "administrative center of {x}",
        ),
        ("the capital of {x}", "the capital city of {x}"),
    ),
    ("city", "country"): _Rel(
        (
            "{s} is a city in {o}.",
            "{s} lies in {o}.",
            "{s} is located in {o}.",
            "{o} counts {s} among its cities.",
        ),
        ("In which country is {x}?", "Which country contains {x}?"),
        "country",
        ("Which nation is {x} part of?", "nation that {x} belongs to", "{x} is a town in which nation?"),
        ("the country where {x} is located", "the country containing {x}"),
    ),
    ("city", "year"): _Rel(
        (
            "{s} was founded in {o}.",
            "{s} dates its founding to {o}.",
            "The first settlement at {s} was established in {o}.",
            "Settlers founded {s} in {o}.",
        ),
        ("In what year was {x} founded?", "When was {x} founded?"),
        "founded",
        (
            "When did {x} come into being?",
            "How far back does the history of {x} go?",
            "origins of the town of {x}",
        ),
    ),
    ("person", "year"): _Rel(
        (
            "{s} was born in {o}.",
            "{s}'s year of birth was {o}.",
            "Records give {o} as the year {s} was born.",
            "{s} came into the world in {o}.",
        ),
        ("In what year was {x} born?", "When was {x} born?"),
        "born",
        ("How old was {x}?", "age of {x}", "birthdate of {x}"),
    ),
    ("person", "occupation"): _Rel(
        (
            "{s} worked as {o}.",
            "{s} was {o} by profession.",
            "By trade, {s} was {o}.",
            "{s} made a living as {o}.",
        ),
        ("What was the occupation of {x}?", "What did {x} do for a living?"),
        "occupation",
        ("What was {x}'s job?", "{x} line of work", "What job did {x} hold?"),
    ),
    ("person", "birthplace"): _Rel(
        (
            "{s} was born in {o}.",
            "{s} was a native of {o}.",
            "{o} was the birthplace of {s}.",
            "{s} was born and raised in {o}.",
        ),
        ("In which city was {x} born?", "Where was {x} born?"),
        "birthplace",
        ("Where was {x} from?", "hometown of {x}", "Which town does {x} come from?"),
        ("the birthplace of {x}", "the city where {x} was born"),
    ),
    ("person", "employer"): _Rel(
        (
            "{s} was employed by {o}.",
            "{s} worked for {o} for many years.",
            "{o} employed {s}.",
            "{s} spent a long career at {o}.",
        ),
        ("Which organization employed {x}?", "For which organization did {x} work?"),
        "employer",
        ("Which institution had {x} on its staff?", "Who paid {x}'s salary?", "organization that hired {x}"),
        ("the employer of {x}", "the organization that employed {x}"),
    ),
    ("person", "founded"): _Rel(
        ("{s} founded {o}.", "{s} went on to establish {o}.", "{o} was set up by {s}."),
        ("Which organization did {x} found?", "What organization was founded by {x}?"),
        "founded",
        ("What organization did {x} start?", "institution created by {x}", "What did {x} launch?"),
        ("the organization founded by {x}", "the organization that {x} established"),
    ),
    ("org", "year"): _Rel(
        (
            "{s} was founded in {o}.",
            "{s} was established in {o}.",
            "{s} has operated since {o}.",
            "{s} opened its doors in {o}.",
        ),
        ("In what year was {x} founded?", "When was {x} established?"),
        "founded",
        ("How old is {x}?", "When did {x} start out?", "When was {x} created?"),
    ),
    ("org", "founder"): _Rel(
        (
            "{s} was founded by {o}.",
            "{o} founded {s}.",
            "{s} was established by {o}.",
            "{o} is credited with founding {s}.",
        ),
        ("Who founded {x}?", "Who was the founder of {x}?"),
        "founder",
        ("Who started {x}?", "creator of {x}", "Who set up {x}?"),
        ("the founder of {x}", "the person who founded {x}"),
    ),
    ("org", "headquarters"): _Rel(
        (
            "{s} is headquartered in {o}.",
            "{s} has its headquarters in {o}.",
            "{s} is based in {o}.",
            "The head office of {s} is in {o}.",
        ),
        ("In which city is {x} headquartered?", "Where is {x} based?"),
        "headquarters",
        ("Where is {x} located?", "Which city is {x} in?", "home city of {x}"),
        ("the city where {x} is headquartered", "the headquarters city of {x}"),
    ),
    ("book", "year"): _Rel(
        (
            "{s} was published in {o}.",
            "{s} first appeared in {o}.",
            "{s} came out in {o}.",
            "The first edition of {s} is dated {o}.",
        ),
        ("In what year was {x} published?", "When was {x} first published?"),
        "published",
        ("When did {x} hit the shelves?", "How old is {x}?", "When was {x} printed?"),
    ),
    ("book", "creator"): _Rel(
        ("{s} was written by {o}.", "{o} wrote {s}.", "{s} is a book by {o}.", "{o} is the author of {s}."),
        ("Who wrote {x}?", "Who is the author of {x}?"),
        "author",
        ("Who penned {x}?", "writer of {x}", "Who is {x} by?"),
        ("the author of {x}", "the writer of {x}"),
    ),
    ("book", "publisher"): _Rel(
        ("{s} was published by {o}.", "{o} published {s}.", "{s} was issued by {o}.", "{o} brought out {s}."),
        ("Which company published {x}?", "Who published {x}?"),
        "publisher",
        ("Which company printed {x}?", "imprint behind {x}", "Who holds the rights to {x}?"),
        ("the publisher of {x}", "the company that published {x}"),
    ),
    ("film", "year"): _Rel(
        ("{s} premiered in {o}.", "{s} was released in {o}.", "{s} reached cinemas in {o}."),
        ("In what year was {x} released?", "When did {x} premiere?"),
        "released",
        ("When did {x} open in theaters?", "How old is the movie {x}?", "When did audiences get to see {x}?"),
    ),
    ("film", "creator"): _Rel(
        (
            "{s} was directed by {o}.",
            "{o} directed {s}.",
            "{s} is a film by {o}.",
            "{o} was the director of {s}.",
        ),
        ("Who directed {x}?", "Who was the director of {x}?"),
        "director",
        ("Who helmed {x}?", "Whose movie is {x}?", "filmmaker responsible for {x}"),
        ("the director of {x}", "the person who directed {x}"),
    ),
    ("film", "publisher"): _Rel(
        (
            "{s} was produced by {o}.",
            "{o} produced {s}.",
            "{s} was made at {o}.",
            "{o} was the studio behind {s}.",
        ),
        ("Which studio produced {x}?", "Who produced {x}?"),
        "studio",
        ("production company of {x}", "Who financed the movie {x}?", "Which company bankrolled {x}?"),
        ("the studio that produced {x}", "the studio behind {x}"),
    ),
    ("album", "year"): _Rel(
        ("{s} was released in {o}.", "{s} came out in {o}.", "{s} appeared in record shops in {o}."),
        ("In what year was {x} released?", "When did {x} come out?"),
        "released",
        ("When did {x} drop?", "How old is {x}?", "When did fans get to hear {x}?"),
    ),
    ("album", "creator"): _Rel(
        (
            "{s} was recorded by {o}.",
            "{o} recorded {s}.",
            "{s} is an album by {o}.",
            "{o} is the artist behind {s}.",
        ),
        ("Who recorded {x}?", "Which artist made {x}?"),
        "artist",
        ("Whose songs are on {x}?", "musician who made {x}", "performer of {x}"),
        ("the artist who recorded {x}", "the musician behind {x}"),
    ),
    ("album", "publisher"): _Rel(
        (
            "{s} was released by {o}.",
            "{o} released {s}.",
            "{s} came out on {o}.",
            "{o} was the label behind {s}.",
        ),
        ("Which label released {x}?", "On which label did {x} come out?"),
        "label",
        ("Who distributed {x}?", "Which company owns the rights to {x}?", "Which company pressed {x}?"),
        ("the label that released {x}", "the record label behind {x}"),
    ),
    ("event", "year"): _Rel(
        ("{s} took place in {o}.", "{s} was held in {o}.", "{s} opened in {o}."),
        ("In what year did {x} take place?", "When was {x} held?"),
        "year",
        ("When did {x} happen?", "date of {x}", "How long ago was {x}?"),
    ),
    ("event", "host"): _Rel(
        (
            "{s} was hosted by the city of {o}.",
            "{o} hosted {s}.",
            "{s} was staged in {o}.",
            "The venue for {s} was the city of {o}.",
        ),
        ("In which city was {x} held?", "Where did {x} take place?"),
        "host city",
        ("Where did {x} happen?", "location of {x}", "Which town was {x} in?"),
        ("the host city of {x}", "the city that hosted {x}"),
    ),
    ("event", "organizer"): _Rel(
        (
            "{s} was organized by {o}.",
            "{o} organized {s}.",
            "{s} was put on by {o}.",
            "{o} was the organizer of {s}.",
        ),
        ("Which organization organized {x}?", "Who organized {x}?"),
        "organizer",
        ("Who ran {x}?", "Which institution was in charge of {x}?", "Who arranged {x}?"),
        ("the organizer of {x}", "the organization that put on {x}"),
    ),
}
#: Comparison questions per kind of entity compared: (asking for the older, for the younger).
_COMPARE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "person": (
        ("Who was born earlier, {a} or {b}?", "Who is older: {a} or {b}?"),
        ("Who was born later, {a} or {b}?", "Who is younger: {a} or {b}?"),
    ),
    "city": (
        ("Which city was founded first, {a} or {b}?", "Which is older: {a} or {b}?"),
        ("Which city was founded later, {a} or {b}?", "Which is younger: {a} or {b}?"),
    ),
    "org": (
        ("Which was founded first: {a} or {b}?", "Which organization is older, {a} or {b}?"),
        ("Which was founded later: {a} or {b}?", "Which organization is younger, {a} or {b}?"),
    ),
    "work": (
        ("Which came out first, {a} or {b}?", "Which is older: {a} or {b}?"),
        ("Which came out later, {a} or {b}?", "Which is more recent: {a} or {b}?"),
    ),
    "event": (
        ("Which took place first, {a} or {b}?", "Which happened earlier: {a} or {b}?"),
        ("Which took place later, {a} or {b}?", "Which happened more recently: {a} or {b}?"),
    ),
}
#: Sentences that state nothing, and how a passage refers to its subject besides by name.
_FLAVOR = {
    "country": (
        "{s} is known for its mountain passes.",
        "Much of {s} is farmland.",
        "{s} has a long coastline dotted with fishing villages.",
    ),
    "city": (
        "{s} is known for its covered markets.",
        "A river divides {s} into two quarters.",
        "{s} has a long tradition of glassmaking.",
        "The old walls of {s} still stand.",
    ),
    "person": (
        "{s} was known for a careful, unhurried manner.",
        "Contemporaries described {s} as reserved but generous.",
        "{s} kept detailed notebooks that survive in private hands.",
        "Little is known about the early schooling of {s}.",
    ),
    "org": (
        "{s} keeps a small archive open to visitors.",
        "{s} is known for its emblem.",
        "Over time {s} grew well beyond its original size.",
    ),
    "work": (
        "Critics were divided on {s} at first.",
        "{s} has been reissued several times.",
        "{s} gained a devoted following.",
    ),
    "event": (
        "Attendance at {s} exceeded expectations.",
        "{s} was widely covered in the press.",
        "{s} drew visitors from many countries.",
    ),
}
_PRONOUN = {
    "country": "the country",
    "city": "the city",
    "org": "the organization",
    "book": "the book",
    "film": "the film",
    "album": "the album",
    "event": "the event",
}
#: News: what happened to an entity in year {y}, perhaps in city {c}; and how the same issue
#: goes on to state a fact of another entity.
_NEWS = {
    "country": (
        "In {y}, {s} held a closely watched general election.",
        "{s} issued a new series of postage stamps in {y}.",
    ),
    "city": (
        "In {y}, heavy rain flooded the lower streets of {s}.",
        "A new stone bridge opened in {s} in {y}.",
        "In {y}, a fire damaged several warehouses in {s}.",
    ),
    "person": (
        "In {y}, {s} gave a public lecture in {c}.",
        "{s} was photographed at a harbor festival in {c} in {y}.",
        "In {y}, {s} attended a charity dinner in {c}.",
        "Reporters caught up with {s} during a visit to {c} in {y}.",
    ),
    "org": (
        "In {y}, {s} opened a small branch office in {c}.",
        "{s} hosted a reception for visiting scholars in {c} in {y}.",
        "In {y}, {s} announced a scholarship for students from {c}.",
    ),
    "work": (
        "{s} was the subject of a retrospective in {c} in {y}.",
        "In {y}, a club in {c} spent a month discussing {s}.",
        "In {y}, critics in {c} revisited {s}.",
    ),
    "event": (
        "In {y}, veterans of {s} gathered for a reunion in {c}.",
        "Memorabilia from {s} went to auction in {c} in {y}.",
    ),
}
_ALSO = (
    "The same issue noted that {f}",
    "A sidebar in the same issue recalled that {f}",
    "Elsewhere in the issue, a note recalled that {f}",
)
_PAPERS = (
    "The Morning Ledger",
    "The Evening Courier",
    "The Weekly Herald",
    "The Northern Gazette",
    "The Harbor Times",
    "The Provincial Review",
    "The Daily Chronicle",
    "The Sunday Packet",
)
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_NEWS_PER_ENTITY = 2


def _facts(e: _Entity) -> list[str]:
    """The facts an entity's passage states, attributes first, then links."""
    return ["year"] * bool(e.year) + ["occupation"] * (e.kind == "person") + list(e.links)


def _value(es: list[_Entity], e: _Entity, fact: str, *, article: bool = False) -> str:
    """A fact's value as an answer, or (``article``) as written in a sentence."""
    if fact == "year":
        return str(e.year)
    if fact == "occupation":
        if not article:
            return e.trait
        return ("an " if e.trait[0] in "aeiou" else "a ") + e.trait
    target = es[e.links[fact]]
    return target.ref if article else target.name


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def _say(template: str, subject: str, value: str, *, start: bool = True) -> str:
    """``template`` filled in, as a sentence (``start``) or as a clause inside one."""
    text = template.format(s=subject, o=value)
    if start:
        return _cap(text)
    return text if template[0] == "{" else text[0].lower() + text[1:]


def _describe(rng: random.Random, es: list[_Entity], e: _Entity) -> str:
    """An entity's encyclopedia text: each fact once plus one remark, in shuffled order; the
    first sentence names it, later ones name it or refer to it otherwise."""
    lines = [
        (rng.choice(_RELS[e.kind, fact].says), _value(es, e, fact, article=True)) for fact in _facts(e)
    ] + [(rng.choice(_FLAVOR[_group(e.kind)]), "")]
    rng.shuffle(lines)
    other = e.name.split()[-1] if e.kind == "person" else _PRONOUN[e.kind]
    return " ".join(
        _say(t, e.ref if k == 0 or rng.random() < 0.5 else other, o) for k, (t, o) in enumerate(lines)
    )


def _news(
    rng: random.Random, es: list[_Entity], by_kind: dict[str, list[int]], titles: set[str]
) -> tuple[str, str]:
    """A dated news snippet (title, text) about a random entity that states none of its facts,
    then states one fact of another entity of the same kind. Its title is new to ``titles``."""
    e = es[rng.randrange(len(es))]
    if e.kind == "person":  # in their working life
        year = rng.randint(e.year + 20, min(e.year + 75, 2024))
    else:
        year = rng.randint(max(e.year + 1, 1800), 2024)
    place = es[rng.choice(by_kind["city"])].ref
    text = _cap(rng.choice(_NEWS[_group(e.kind)]).format(s=e.ref, c=place, y=year))
    other = es[rng.choice(by_kind[e.kind])]
    if other is not e:
        fact = rng.choice(_facts(other))
        clause = _say(
            rng.choice(_RELS[other.kind, fact].says),
            other.ref,
            _value(es, other, fact, article=True),
            start=False,
        )
        text += " " + rng.choice(_ALSO).format(f=clause)
    while True:
        title = (
            f"{rng.choice(_PAPERS)}, {rng.randint(1, 28)} {rng.choice(_MONTHS)} {year}, "
            f"page {rng.randint(1, 12)}"
        )
        if title not in titles:
            titles.add(title)
            return title, text


def _corpus(
    rng: random.Random, num_entities: int, first_id: int
) -> tuple[list[_Entity], list[Passage], list[str]]:
    """Entities, and all passages in shuffled order, numbered from ``first_id``; and the id of
    each entity's passage."""
    es = _entities(rng, num_entities)
    by_kind: dict[str, list[int]] = {}
    for i, e in enumerate(es):
        by_kind.setdefault(e.kind, []).append(i)
    drafts = [(e.name, _describe(rng, es, e)) for e in es]
    titles = {e.name for e in es}
    drafts += [_news(rng, es, by_kind, titles) for _ in range(_NEWS_PER_ENTITY * len(es))]
    order = list(range(len(drafts)))
    rng.shuffle(order)
    ids = [""] * len(drafts)
    for k, i in enumerate(order):
        ids[i] = f"p{first_id + k:06d}"
    return es, [Passage(ids[i], *drafts[i]) for i in order], ids[: len(es)]


# Questions ---------------------------------------------------------------------------------------

_Path = list[tuple[int, str]]  # (entity, fact) per hop; a link's target is the next hop's entity
_BRIDGES_PER_START = 0.25  # per hop count 1..4, per start entity of a split
_COMPARISONS_PER_START = 0.4 / 3  # per hop count 2..4


def _walk(rng: random.Random, es: list[_Entity], start: int, hops: int) -> _Path | None:
    """A random chain of ``hops`` facts from ``start``: links to entities not yet on it, then any
    fact; ``None`` where it gets stuck."""
    path, seen, e = [], {start}, start
    for hop in range(hops):
        links = es[e].links
        options = [f for f in _facts(es[e]) if links.get(f) not in seen and (f in links or hop == hops - 1)]
        if not options:
            return None
        fact = rng.choice(options)
        path.append((e, fact))
        if fact in links:
            e = links[fact]
            seen.add(e)
    return path


def _phrase(rng: random.Random, es: list[_Entity], path: _Path) -> str:
    """How a question names the entity of ``path``'s last hop: by name, or by the links to it.
    Past the first link, only phrases that end with the subject: no "the city where the city
    where ..."."""
    x = es[path[0][0]].ref
    for hop, (e, fact) in enumerate(path[:-1]):
        nps = _RELS[es[e].kind, fact].np
        x = rng.choice([t for t in nps if hop == 0 or t.endswith("{x}")]).format(x=x)
    return x


def _answers(answer: str) -> tuple[str, ...]:
    """The answer and its safe aliases: a title without its leading "The"."""
    return (answer, answer[4:]) if answer.startswith("The ") else (answer,)


_Draft = tuple[str, tuple[str, ...], str, _Path]  # question, answers, type, hops


def _bridges(rng: random.Random, es: list[_Entity], pool: list[int], want: int) -> list[_Draft]:
    """Up to ``want`` distinct bridge questions of each hop count 1..4, starting in ``pool``."""
    drafts, seen = [], set()
    for hops in range(1, 5):
        made = 0
        for _ in range(20 * want):
            path = _walk(rng, es, rng.choice(pool), hops)
            if path is None or tuple(path) in seen:
                continue
            seen.add(tuple(path))
            e, fact = path[-1]
            ask = rng.choice(_RELS[es[e].kind, fact].asks)
            drafts.append(
                (
                    _cap(ask.format(x=_phrase(rng, es, path))),
                    _answers(_value(es, es[e], fact)),
                    "bridge",
                    path,
                )
            )
            made += 1
            if made == want:
                break
    return drafts


def _comparisons(rng: random.Random, es: list[_Entity], pool: list[int], want: int) -> list[_Draft]:
    """Up to ``want`` distinct comparisons of each hop count 2..4 between entities of one kind,
    each named (one hop) or one link away from an entity of ``pool`` (two hops)."""
    named: dict[str, list[_Path]] = {}
    linked: dict[str, list[_Path]] = {}
    for e in pool:
        if es[e].year:
            named.setdefault(_group(es[e].kind), []).append([(e, "year")])
        for fact, t in es[e].links.items():
            if es[t].year:
                linked.setdefault(_group(es[t].kind), []).append([(e, fact), (t, "year")])
    drafts, seen = [], set()
    for first, second in ((named, named), (linked, named), (linked, linked)):  # 2, 3, 4 hops
        groups = [g for g in _COMPARE if first.get(g) and second.get(g)]
        made = 0
        for _ in range(20 * want if groups else 0):
            g = rng.choice(groups)
            a, b = rng.choice(first[g]), rng.choice(second[g])
            key = frozenset((tuple(a), tuple(b)))
            ya, yb = es[a[-1][0]].year, es[b[-1][0]].year
            if ya == yb or key in seen or {e for e, _ in a} & {e for e, _ in b}:
                continue
            seen.add(key)
            later = rng.random() < 0.5
            winner = a if (ya > yb) == later else b
            ask = rng.choice(_COMPARE[g][later])
            drafts.append(
                (
                    ask.format(a=_phrase(rng, es, a), b=_phrase(rng, es, b)),
                    _answers(es[winner[-1][0]].name),
                    "comparison",
                    a + b,
                )
            )
            made += 1
            if made == want:
                break
    return drafts


def _paraphrase(rng: random.Random, e: _Entity, fact: str) -> str:
    """A searcher's natural-language query for ``fact`` of ``e``, naming it."""
    return _cap(rng.choice(_RELS[e.kind, fact].paraphrases).format(x=e.ref))


def _questions(
    rng: random.Random, es: list[_Entity], passage_ids: list[str], wording: random.Random
) -> list[Question]:
    """Questions in shuffled order; each split's start from its own share of the entities. The
    hops' paraphrases are drawn from ``wording`` alone, in question then hop order."""
    starts = list(range(len(es)))
    rng.shuffle(starts)
    a, b = round(0.8 * len(starts)), round(0.9 * len(starts))
    drafts = []
    for split, pool in zip(SPLITS, (starts[:a], starts[a:b], starts[b:]), strict=True):
        made = _bridges(rng, es, pool, round(_BRIDGES_PER_START * len(pool)))
        made += _comparisons(rng, es, pool, round(_COMPARISONS_PER_START * len(pool)))
        drafts += [(split, *draft) for draft in made]
    rng.shuffle(drafts)
    return [
        Question(
            f"q{k:05d}",
            text,
            answers,
            kind,
            len(path),
            tuple(passage_ids[e] for e, _ in path),
            tuple(f"{es[e].name} {_RELS[es[e].kind, fact].query}" for e, fact in path),
            split,
            tuple(_paraphrase(wording, es[e], fact) for e, fact in path),
        )
        for k, (split, text, answers, kind, path) in enumerate(drafts)
    ]


# Public ------------------------------------------------------------------------------------------


def generate_world(seed: int = 0, num_entities: int = DEFAULT_NUM_ENTITIES) -> World:
    """The world of ``seed``: about ``num_entities`` entities (at least :data:`MIN_ENTITIES`),
    each with its passage, twice as many news snippets, and about 1.4 questions per entity.

    The same arguments give the same world; passage ids are ``p000000`` on, question ids
    ``q00000`` on, both in shuffled order. Titles are unique.
    """
    if num_entities < MIN_ENTITIES:
        raise ValueError(f"num_entities must be at least {MIN_ENTITIES}, got {num_entities}")
    es, passages, passage_ids = _corpus(seeding.rng("agentgym.search.world", seed, "0"), num_entities, 0)
    questions = _questions(
        seeding.rng("agentgym.search.world", seed, "questions"),
        es,
        passage_ids,
        seeding.rng("agentgym.search.world", seed, "paraphrases"),
    )
    return World(passages, questions)


def iter_passages(seed: int, num_passages: int) -> Iterator[Passage]:
    """Exactly ``num_passages`` passages, streamed: the passages of ``generate_world(seed)``,
    then those of further worlds of the default size, their ids numbered on. One world is held
    at a time; titles are unique within a world, not across worlds."""
    if num_passages < 0:
        raise ValueError(f"num_passages must be non-negative, got {num_passages}")
    return islice(_stream(seed), num_passages)


def _stream(seed: int) -> Iterator[Passage]:
    first = 0
    for block in count():
        rng = seeding.rng("agentgym.search.world", seed, block)
        passages = _corpus(rng, DEFAULT_NUM_ENTITIES, first)[1]
        first += len(passages)
        yield from passages
