"""What a decoded payload may hold, checked by one validating walk, and :data:`ABSENT`.

Every codec funnels what its decoder produced through :func:`validated`, which
accepts only the JSON-like data model the protocol uses (maps with string keys,
arrays, strings, bytes, numbers, booleans, null) and nothing a decoder library might
conjure from tags or extension types, and bounds nesting at :data:`MAX_DEPTH`, so
later code can recurse over decoded values without fear. Numeric map keys become the
property names JavaScript would make of them. JavaScript ``undefined`` (msgpack ext
type 0, CBOR simple value 23) means "not present": map entries holding it are dropped
and array slots become ``None``. The walk mutates the decoder's fresh output in place.
"""

from __future__ import annotations

import math
from typing import Any, Final

import cbor2

#: Deepest container nesting a decoded payload may have; a top-level map is depth 1.
MAX_DEPTH: Final = 64


class DecodeError(Exception):
    """The payload is not a well-formed message in the connection's codec."""


class _Absent:
    """Type of :data:`ABSENT`; a singleton so identity checks are reliable."""

    __slots__ = ()
    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        # Pickling and copying must hand back the singleton, not a lookalike.
        return "ABSENT"


#: JavaScript ``undefined``: a map entry holding it is treated as not present.
ABSENT: Final = _Absent()

_CBOR_UNDEFINED: Final = cbor2.undefined

_LEAF_TYPES: Final = frozenset({str, int, float, bool, type(None), bytes})


def _key_to_str(key: Any) -> str:
    """Mirror how JavaScript turns a numeric map key into an object property name."""
    kt = type(key)
    if kt is int:
        return str(key)
    if kt is float:
        if key.is_integer():
            return str(int(key))
        if math.isnan(key):
            return "NaN"
        if math.isinf(key):
            return "Infinity" if key > 0 else "-Infinity"
        return repr(key)
    raise DecodeError(f"map key of type {kt.__name__} is not allowed")


def _is_absent(value: Any) -> bool:
    return value is ABSENT or value is _CBOR_UNDEFINED


def _clean_map(m: dict[Any, Any], depth: int) -> None:
    # Mutates in place: the value was just produced by the decoder and nobody
    # else holds it, so rebuilding would only cost allocations.
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    rebuild = False
    for key, value in m.items():
        if type(key) is not str:
            rebuild = True
        vt = type(value)
        if vt in _LEAF_TYPES:
            continue
        if vt is dict:
            _clean_map(value, depth + 1)
        elif vt is list:
            _clean_list(value, depth + 1)
        elif _is_absent(value):
            rebuild = True
        else:
            raise DecodeError(f"value of type {vt.__name__} is not allowed")
    if rebuild:
        items = list(m.items())
        m.clear()
        for key, value in items:
            if _is_absent(value):
                continue
            m[key if type(key) is str else _key_to_str(key)] = value


def _clean_list(items: list[Any], depth: int) -> None:
    # The dispatch of _clean_map, written out again: a helper shared by the two would
    # cost a call per decoded value, on every frame.
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    for i, value in enumerate(items):
        vt = type(value)
        if vt in _LEAF_TYPES:
            continue
        if vt is dict:
            _clean_map(value, depth + 1)
        elif vt is list:
            _clean_list(value, depth + 1)
        elif _is_absent(value):
            items[i] = None
        else:
            raise DecodeError(f"value of type {vt.__name__} is not allowed")


def validated(value: Any) -> Any:
    vt = type(value)
    if vt is dict:
        _clean_map(value, 1)
    elif vt is list:
        _clean_list(value, 1)
    elif _is_absent(value):
        return None
    elif vt not in _LEAF_TYPES:
        raise DecodeError(f"value of type {vt.__name__} is not allowed")
    return value
