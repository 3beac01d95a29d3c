"""Hydra configs of the ``agentgym`` commands (``eval.yaml``, ``train.yaml``, ``policy/``, ...).

A command's keys, their types and defaults are a dataclass, its *schema*, which the module that
defines it registers here (:func:`register_schema`; ``agentgym.harness.eval.EvalConfig`` for
``eval``, ``agentgym.trainers.loop.TrainConfig`` for ``train``): it goes into Hydra's
``ConfigStore`` as ``<name>_schema``, the first entry of ``<name>.yaml``'s defaults list, so that
Hydra type-checks every override. The YAML files hold only the defaults list and what differs
from the dataclass defaults. :func:`compose` adds what Hydra does not say: a key that was renamed
names its new name, a mistyped one the nearest real one, a wrong type the key.
:func:`config_help` lists every key with its default and the first sentence of its field
docstring (``agentgym eval --help``); :func:`config_info` is ``--info``.

This package imports no harness or trainer (a layer rule): schemas come to it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import itertools
import re
import textwrap
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hydra import compose as _hydra_compose
from hydra import initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

__all__ = [
    "CONFIG_ERRORS",
    "ConfigError",
    "ConfigKey",
    "check_keys",
    "compose",
    "config_help",
    "config_info",
    "config_keys",
    "field_docs",
    "register_schema",
    "schema_of",
    "to_dict",
]

CONFIG_MODULE = "agentgym.conf"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and what is wrong."""


#: What a bad command-line override raises.
CONFIG_ERRORS = (HydraException, OmegaConfBaseException, ConfigError)

#: The modules that register the schema of a command's config (named for error messages only).
_OWNERS = {"eval": "agentgym.harness.eval", "train": "agentgym.trainers.loop"}


@dataclasses.dataclass(frozen=True)
class _Schema:
    schema: type
    renamed: Mapping[str, str]


_SCHEMAS: dict[str, _Schema] = {}


def register_schema(name: str, schema: type, renamed: Mapping[str, str] | None = None) -> None:
    """Make the dataclass ``schema`` the schema of the config ``name`` (stored in Hydra's
    ``ConfigStore`` as ``<name>_schema``, which ``<name>.yaml`` lists first in its defaults).
    ``renamed``: ``{old key: new key}`` of keys that were renamed; an override of an old key is an
    error that names the new one. Registering again replaces the schema."""
    ConfigStore.instance().store(name=f"{name}_schema", node=schema)
    _SCHEMAS[name] = _Schema(schema, dict(renamed or {}))


def schema_of(name: str) -> type:
    """The registered schema of the config ``name``; :class:`ConfigError` when none is."""
    try:
        return _SCHEMAS[name].schema
    except KeyError:
        owner = _OWNERS.get(name)
        raise ConfigError(
            f"the schema of config {name!r} is not registered" + (f": import {owner} first" if owner else "")
        ) from None


# --- schema introspection -----------------------------------------------------------------------


def _dataclass(tp: Any) -> type | None:
    """``tp`` when it is a dataclass type, else ``None``."""
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


@functools.cache
def _field_types(schema: type) -> dict[str, Any]:
    hints = typing.get_type_hints(schema)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(schema)}


def _keys(schema: type, prefix: str = "") -> Iterator[str]:
    """Every dotted key of ``schema``, those of nested dataclasses included (and their parent)."""
    for name, tp in _field_types(schema).items():
        yield prefix + name
        nested = _dataclass(tp)
        if nested is not None:
            yield from _keys(nested, f"{prefix}{name}.")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass's fields (the string literal under a field), its
    bases' included; empty where the source cannot be read."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _plain(text: str) -> str:
    """reST markup out: ``:class:`~a.B``` -> ``B``, double backquotes -> nothing."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text)
    return " ".join(text.replace("``", "").split())


def _first_sentence(text: str) -> str:
    text = _plain(text)
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\.)\.(?=\s+[A-Z(]|$)", text)
    return text[: match.start() + 1] if match else text


# --- renamed and unknown keys -------------------------------------------------------------------


def _suggestion(path: str, schema: type) -> str | None:
    """The real key nearest to the unknown dotted ``path``: one with the same last part
    elsewhere (``max_tokens`` -> ``sampling.max_tokens``), else a close spelling at the same
    level, else anywhere."""
    keys = [k for k in _keys(schema) if k != path]
    leaf = path.rsplit(".", 1)[-1]
    same = [k for k in keys if k.rsplit(".", 1)[-1] == leaf]
    if same:
        return same[0]
    parent = path.rpartition(".")[0]
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(path, siblings, n=1, cutoff=0.6) or difflib.get_close_matches(
        path, keys, n=1, cutoff=0.75
    )
    return close[0] if close else None


def _renamed(path: str, renamed: Mapping[str, str]) -> str | None:
    for old, new in renamed.items():
        if path == old or path.startswith(old + "."):
            return f"{old!r} is now {new!r}"
    return None


def _check_key(path: str, schema: type, renamed: Mapping[str, str], help_hint: str = "") -> None:
    """Raise :class:`ConfigError` when the dotted ``path`` is an old name or, down to the first
    part that is not a dataclass (a dict, ``Any``), not a key of ``schema``."""
    message = _renamed(path, renamed)
    if message:
        raise ConfigError(message)
    current: type | None = schema
    parts = path.split(".")
    for i, part in enumerate(parts):
        if current is None:
            return
        types = _field_types(current)
        if part not in types:
            unknown = ".".join(parts[: i + 1])
            near = _suggestion(unknown, schema)
            raise ConfigError(f"no key {unknown!r}" + (f"; did you mean {near!r}?" if near else help_hint))
        current = _dataclass(types[part])


def check_keys(data: Mapping[str, Any], schema: type, renamed: Mapping[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` for the first key of the plain mapping ``data`` (with the keys
    of its mappings under dataclass fields, as dotted paths) that was renamed or that ``schema``
    lacks."""

    def paths(values: Mapping[str, Any], tp: type, prefix: str) -> Iterator[str]:
        types = _field_types(tp)
        for key, value in values.items():
            yield prefix + str(key)
            nested = _dataclass(types.get(key))
            if nested is not None and isinstance(value, Mapping):
                yield from paths(value, nested, f"{prefix}{key}.")

    for path in paths(data, schema, ""):
        _check_key(path, schema, renamed or {})


# --- composing ----------------------------------------------------------------------------------


def _parsed_keys(overrides: Sequence[str]) -> list[str]:
    """The keys the overrides set or delete (the group for a group choice); none when they do
    not parse (Hydra then says why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return []
    return [o.key_or_group for o in parsed]


def _explained(exc: BaseException, name: str) -> BaseException:
    """A :class:`ConfigError` naming the key where Hydra's error does not; else Hydra's error,
    on one line."""
    cause = exc.__cause__ if isinstance(exc, HydraException) else exc
    key = getattr(cause, "full_key", None)
    if isinstance(cause, ValidationError) and key:
        return ConfigError(f"bad value for {key!r}: {str(cause).splitlines()[0]}")
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        leaf, renamed = re.split(r"[.\[]", str(key))[-1], _SCHEMAS[name].renamed if name in _SCHEMAS else {}
        if leaf in renamed:  # e.g. an old key of a suite entry, which mirror the top-level ones
            return ConfigError(f"no key {str(key)!r}: {leaf!r} is now {renamed[leaf]!r}")
        parent = getattr(cause, "parent_node", None)
        siblings = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
        near = difflib.get_close_matches(str(key).rsplit(".", 1)[-1], siblings, n=1)
        add = re.search(r"use (\+\S+)", str(exc))
        where = str(key).rpartition(".")[0]
        return ConfigError(
            f"no key {str(key)!r}"
            + (f"; did you mean {(where + '.' if where else '') + near[0]!r}?" if near else "")
            + (f" (to add a key: {add.group(1)})" if add else "")
        )
    return exc


def _compose(name: str, overrides: Sequence[str], return_hydra_config: bool = False) -> DictConfig:
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        return _hydra_compose(name, overrides=list(overrides), return_hydra_config=return_hydra_config)


def _checked(name: str, overrides: Sequence[str]) -> None:
    """Raise :class:`ConfigError` for an override of an old or unknown key."""
    entry = _SCHEMAS.get(name)
    if entry is None:
        if name in _OWNERS:
            schema_of(name)  # raises: the YAML lists a schema that nobody registered
        return
    hint = f" (agentgym {name} --help lists the keys)"
    for key in _parsed_keys(overrides):
        if key.split(".")[0] != "hydra":
            _check_key(key, entry.schema, entry.renamed, hint)


def compose(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``name`` of this package with Hydra command-line overrides applied, checked
    against its registered schema. Raises one of :data:`CONFIG_ERRORS`: a :class:`ConfigError`
    names an old key's new name (``'workers' is now 'concurrency'``), the nearest real key of an
    unknown one (``no key 'lerner'; did you mean 'learner'?``), or the key of a value of the
    wrong type."""
    _checked(name, overrides)
    try:
        return _compose(name, overrides)
    except CONFIG_ERRORS as exc:
        explained = _explained(exc, name)
        if explained is exc:
            raise
        raise explained from exc


def to_dict(cfg: DictConfig, *, resolve: bool = False) -> dict[str, Any]:
    """``cfg`` as plain containers (``OmegaConf.to_container``), checked to be a mapping with
    string keys: :class:`ConfigError` when it is not."""
    data = OmegaConf.to_container(cfg, resolve=resolve)
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"expected string keys, got {bad[0]!r}")
    return typing.cast(dict[str, Any], data)


# --- --help and --info --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One line of ``--help``."""

    key: str
    default: str
    meaning: str


def _show(value: Any) -> str:
    """A value as it is written in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _groups(name: str) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """The config groups of ``name``: their default choices and their options."""
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        cfg = _hydra_compose(name, overrides=[], return_hydra_config=True)
        choices = {k: v for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}
        loader = GlobalHydra.instance().config_loader()
        options = {group: loader.get_group_options(group) for group in choices}
    return choices, options


def config_keys(name: str) -> list[ConfigKey]:
    """Every key of the config ``name``: its default (composed, so the YAML's values count) and
    the first sentence of its field docstring. A config group shows its default choice and
    lists its options; the keys of nested dataclasses are listed as dotted keys."""
    schema = schema_of(name)
    defaults = OmegaConf.to_container(compose(name), resolve=False)
    choices, options = _groups(name)
    out: list[ConfigKey] = []

    def walk(tp: type, values: Any, prefix: str) -> None:
        docs = field_docs(tp)
        for field_name, field_type in _field_types(tp).items():
            key, value = prefix + field_name, (values or {}).get(field_name)
            nested = _dataclass(field_type)
            if nested is not None:
                walk(nested, value, key + ".")
                continue
            meaning = _first_sentence(docs.get(field_name, ""))
            if key in choices:
                choice = choices[key]
                out.append(
                    ConfigKey(
                        key,
                        "null" if choice is None else str(choice),
                        f"{meaning} Options: {', '.join(options[key])}.".strip(),
                    )
                )
            else:
                out.append(ConfigKey(key, _show(value), meaning))

    walk(schema, defaults, "")
    return out


def config_help(name: str) -> str:
    """The key table of ``agentgym <name> --help``."""
    keys = config_keys(name)
    width = max(len(k.key) for k in keys)
    shown = [k.default if len(k.default) <= 24 else k.default[:21] + "..." for k in keys]
    value_width = max(len(s) for s in shown)
    lines = [f"config keys (override as KEY=VALUE; {len(keys)} keys, default, meaning):"]
    lines += [f"  {k.key:<{width}}  {s:<{value_width}}  {k.meaning}".rstrip() for k, s in zip(keys, shown)]
    return "\n".join(lines)


def config_info(name: str, overrides: Sequence[str] = ()) -> str:
    """What ``--info`` prints: where configs come from, the schema, the defaults list the
    overrides give (the configs merged, in order), the group choices and the composed
    config."""
    from hydra.types import RunMode

    cfg = compose(name, overrides)
    schema = schema_of(name)
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        loader = GlobalHydra.instance().config_loader()
        sources = [
            f"{s.provider}: {s.scheme()}://{s.path}" for s in loader.get_sources() if s.provider != "hydra"
        ]
        merged = [
            d
            for d in loader.compute_defaults_list(name, list(overrides), RunMode.RUN).defaults
            if not d.config_path.startswith("hydra/")
            and d.config_path != "hydra/config"
            and (d.package or "").split(".")[0] != "hydra"
        ]
        choices = {
            k: v
            for k, v in _hydra_compose(
                name, overrides=list(overrides), return_hydra_config=True
            ).hydra.runtime.choices.items()
            if not k.startswith("hydra/")
        }
    lines = [f"agentgym {name}: configuration", "", "Config search path:"]
    lines += [f"  {s}" for s in sources]
    lines += [
        "",
        f"Schema: {name}_schema = {schema.__module__}.{schema.__qualname__}",
        "",
        "Defaults list (merged in this order):",
    ]
    lines += [f"  {d.config_path:<24} package={d.package or '<root>'}" for d in merged]
    lines += ["", "Config groups (choice):"]
    lines += [f"  {group}: {'null' if choice is None else choice}" for group, choice in choices.items()]
    lines += [
        "",
        f"Overrides: {' '.join(overrides) or '(none)'}",
        "",
        "Config:",
        OmegaConf.to_yaml(cfg).rstrip(),
    ]
    return "\n".join(lines)
