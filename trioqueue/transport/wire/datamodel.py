"""What a decoded payload may hold, checked by one validating walk, and :data:`ABSENT`.

Every codec funnels what its decoder produced through :func:`validated`, which
accepts only the JSON-like data model the protocol uses (maps with string keys,
arrays, strings, bytes, numbers, booleans, null) and nothing a decoder library might
conjure from tags or extension types, and bounds nesting at :data:`MAX_DEPTH`, so
later code can recurse over decoded values without fear. Numeric map keys become the
property names JavaScript would make of them. JavaScript ``undefined`` (msgpack ext
type 0, CBOR simple value 23) means "not present": map entries holding it are dropped
and array slots become ``None``. The walk mutates the decoder's fresh output in place.

:func:`validated_steps` is the same walk in slices, for large frames; it also bounds
the JSON text of the value (``core/job_data.py`` then need not measure job data again).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import cbor2

from ...core import native
from ..slicing import Slicer, Steps

#: Deepest container nesting a decoded payload may have; a top-level map is depth 1.
MAX_DEPTH: Final = 64


class DecodeError(Exception):
    """The payload is not a well-formed message in the connection's codec.

    ``req_id``: the frame's ``reqId`` when a lenient reading still found one
    (:mod:`~trioqueue.transport.wire.req_ids`), so the error is answered on it."""

    req_id: str | None = None

    def fresh(self) -> DecodeError:
        """The same error (its type, text and ``reqId``), never raised: a raised one's
        traceback holds the frame that caught it (a cycle only a full GC frees)."""
        new = type(self)(str(self))
        new.req_id = self.req_id
        return new


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
        elif _clean_other(value, vt, depth):
            rebuild = True
    if rebuild:
        _rebuild_map(m)


def _rebuild_map(m: dict[Any, Any]) -> None:
    """``m`` in place without its absent entries and with every key a string; a decoder
    produced it and nobody else holds it (the slow path: most maps need none of it)."""
    items = list(m.items())
    m.clear()
    for key, value in items:
        if _is_absent(value):
            continue
        m[key if type(key) is str else _key_to_str(key)] = value


def _clean_list(items: list[Any], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    for i, value in enumerate(items):
        vt = type(value)
        if vt in _LEAF_TYPES:
            continue
        if vt is dict:
            _clean_map(value, depth + 1)
        elif _clean_other(value, vt, depth):
            items[i] = None


def _clean_other(value: Any, vt: type, depth: int) -> bool:
    """The rest of the dispatch of a member of a map or array at ``depth`` that is neither
    a leaf nor a map: an array is cleaned, True for an absent marker (the caller drops a
    map entry, or nulls an array slot), anything else is refused. Leaves and maps, by far
    the most common members, are decided by the caller inline, at no call per value.
    """
    if vt is list:
        _clean_list(value, depth + 1)
        return False
    if _is_absent(value):
        return True
    raise DecodeError(f"value of type {vt.__name__} is not allowed")


def validated_py(value: Any) -> Any:
    """:func:`validated` in Python: the rules, and what the C form falls back on."""
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


validated: Callable[[Any], Any]
"""``value`` checked and cleaned in place (see the module docstring); raises
:class:`DecodeError`. It runs on every decoded frame, so where the extension is built it
is ``trioqueue.core._data_walk.validated``: C settles the trees that need no change and
hands any container that does (or that it refuses) to :func:`_clean_map` or
:func:`_clean_list`, so the rules and texts are only those of the Python walk."""

_c_walk = native.extension("trioqueue.core._data_walk")
if _c_walk is None:
    validated = validated_py
    IMPLEMENTATION = "Python"
else:
    _c_walk.configure_validated(_clean_map, _clean_list, validated_py, MAX_DEPTH)
    validated = _c_walk.validated
    IMPLEMENTATION = "C"


# ----------------------------------------------------------------- in slices, with a bound

# What the JSON text of one value can take at most, in characters (the constants of
# core/job_data.py's _json_bound): a float's repr is at most 24 characters, an int64
# or uint64 at most 20, false/true/null at most 5; a larger int is a CBOR bignum of at
# most 64 bytes (155 digits); a map key that is not a string becomes one of those.
_SCALAR_CHARS: Final = 24
_BIGNUM_CHARS: Final = 160
_KEY_CHARS: Final = _BIGNUM_CHARS + 4
_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1


def _leaf_chars(value: Any, vt: type) -> int:
    """A bound of the JSON text of a leaf that is not a str (bytes as a Buffer's JSON)."""
    if vt is bytes:
        return 27 + 4 * len(value)  # {"type":"Buffer","data":[...]}: up to "255," a byte
    if vt is int and not _INT64_MIN <= value <= _UINT64_MAX:
        return _BIGNUM_CHARS
    return _SCALAR_CHARS


def validated_steps(value: Any, slicer: Slicer) -> Steps[tuple[Any, int]]:
    """:func:`validated`, in slices (yields when ``slicer`` says so), for large frames.

    Returns the value and a bound of its JSON text in which every string counts its
    length plus its quotes: its escapes are left out (the caller adds them from the
    payload's bytes, see ``large/frames.py``). The rules, errors and in-place changes
    are those of :func:`validated`; the walk is written again here because the plain
    one must stay as cheap as it is on every small frame.
    """
    vt = type(value)
    if vt is dict:
        chars = yield from _map_steps(value, 1, slicer)
        return value, chars
    if vt is list:
        chars = yield from _list_steps(value, 1, slicer)
        return value, chars
    if vt is str:
        return value, len(value) + 2
    if _is_absent(value):
        return None, 4
    if vt not in _LEAF_TYPES:
        raise DecodeError(f"value of type {vt.__name__} is not allowed")
    return value, _leaf_chars(value, vt)


def _map_steps(m: dict[Any, Any], depth: int, slicer: Slicer) -> Steps[int]:
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    rebuild = False
    chars = 2
    # Pausing inside the iteration is safe: nothing else holds this fresh value.
    for key, value in m.items():
        if type(key) is str:
            chars += len(key) + 4  # "key":  and a comma
        else:
            rebuild = True
            chars += _KEY_CHARS
        vt = type(value)
        if vt is str:
            chars += len(value) + 2
        elif not value and (vt is dict or vt is list):
            chars += 2  # empty: nothing to walk (no generator: they can be a whole frame)
        elif vt is dict:
            chars += yield from _map_steps(value, depth + 1, slicer)
        elif vt is list:
            chars += yield from _list_steps(value, depth + 1, slicer)
        elif vt in _LEAF_TYPES:
            chars += _leaf_chars(value, vt)
        elif _is_absent(value):
            rebuild = True
        else:
            raise DecodeError(f"value of type {vt.__name__} is not allowed")
        if slicer.due():
            yield
    if rebuild:
        _rebuild_map(m)
    return chars


def _list_steps(items: list[Any], depth: int, slicer: Slicer) -> Steps[int]:
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    chars = 2
    for start in range(0, len(items), _RUN):
        run = items[start:start + _RUN]
        plain = _plain_run_chars(run)
        if plain is not None:
            chars += plain
            if slicer.due(len(run)):
                yield
            continue
        for i, value in enumerate(run, start):
            vt = type(value)
            if vt is str:
                chars += len(value) + 3
            elif not value and (vt is dict or vt is list):
                chars += 3
            elif vt is dict:
                chars += 1 + (yield from _map_steps(value, depth + 1, slicer))
            elif vt is list:
                chars += 1 + (yield from _list_steps(value, depth + 1, slicer))
            elif vt in _LEAF_TYPES:
                chars += 1 + _leaf_chars(value, vt)
            elif _is_absent(value):
                items[i] = None
                chars += 5
            else:
                raise DecodeError(f"value of type {vt.__name__} is not allowed")
            if slicer.due():
                yield
    return chars


# Array items looked at together: a run of one plain kind is checked by C-level calls,
# not value by value (an array of a million numbers, strings or empty maps is what a
# large frame of small values usually is).
_RUN: Final = 256
_NUMBERS: Final = frozenset({float, bool, type(None)})
_EMPTY_OK: Final = frozenset({list, dict})


def _plain_run_chars(run: list[Any]) -> int | None:
    """The JSON bound of ``run`` (with its commas) if its items need no walk: all
    strings, all scalars (ints within 64 bits), or all empty arrays and maps; else None.
    """
    kinds = set(map(type, run))
    if kinds == {str}:
        return sum(map(len, run)) + 3 * len(run)
    if kinds <= _NUMBERS or (
            kinds == {int} and _INT64_MIN <= min(run) and max(run) <= _UINT64_MAX):
        return (_SCALAR_CHARS + 1) * len(run)
    if kinds <= _EMPTY_OK and not any(map(len, run)):
        return 3 * len(run)
    return None
