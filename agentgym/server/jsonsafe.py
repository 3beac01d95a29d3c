"""JSON encoding of what envs return (observations, infos, rewards) for the wire.

Env ``info`` dicts may hold anything Python can. :func:`dumps` turns them into JSON by these rules,
which :func:`to_jsonable` applies (and which a client can rely on):

==========================================  ==============================================
value                                       becomes
==========================================  ==============================================
``None``, ``bool``, ``int``, ``float``,     itself (``NaN``/``Infinity`` are written as
``str`` (subclasses included)               Python's ``json`` does, and read back exactly)
numpy scalar (``np.int64``, ``np.bool_``)   the Python scalar (``.item()``)
``np.ndarray``                              nested lists (``.tolist()``)
``tuple``, ``list``                         list
``set``, ``frozenset``                      list, sorted when its items are comparable
``bytes``                                   str, decoded as UTF-8 (bad bytes -> U+FFFD)
``dict``                                    object; ``str``/``int``/``float``/``bool``/``None``
                                            keys as ``json`` writes them (numpy ones
                                            via ``.item()``), other keys ``str(key)``
a container that contains itself            the string ``"<cycle>"`` where it recurs
anything else                               ``str(value)``
==========================================  ==============================================

So ``(1, 2)`` arrives as ``[1, 2]`` and ``{(0, 1): "x"}`` as ``{"(0, 1)": "x"}``: a remote env's
info equals the local one after the same conversion, not always the local one itself.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["dumps", "to_jsonable"]

_SCALARS = (str, int, float, bool, type(None))


def _leaf(value: Any) -> Any:
    """The JSON-native stand-in of a value ``json`` cannot encode and that is no container."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def to_jsonable(value: Any) -> Any:
    """``value`` rebuilt from JSON-native types by the rules of the module docstring."""
    return _convert(value, set())


def _convert(value: Any, active: set[int]) -> Any:
    """``active`` holds the ids of the containers being converted, to cut cycles."""
    if isinstance(value, _SCALARS):
        return value
    if not isinstance(value, (dict, list, tuple)):
        leaf = _leaf(value)
        return leaf if isinstance(leaf, _SCALARS) else _convert(leaf, active)
    if id(value) in active:
        return "<cycle>"
    active.add(id(value))
    try:
        if isinstance(value, dict):
            return {_key(k): _convert(v, active) for k, v in value.items()}
        return [_convert(v, active) for v in value]
    finally:
        active.discard(id(value))


def _key(key: Any) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    return key if isinstance(key, _SCALARS) else str(key)


def dumps(value: Any) -> bytes:
    """ASCII JSON of ``value`` by the module's rules (non-ASCII text is ``\\u``-escaped, so
    that any ``str``, lone surrogates included, round-trips exactly).

    Plain data (the common case) goes straight through the C encoder; only a value it refuses
    (a tuple or numpy key, a cycle) is first rebuilt with :func:`to_jsonable`.
    """
    try:
        text = json.dumps(value, default=_leaf, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(to_jsonable(value), separators=(",", ":"))
    return text.encode("ascii")
