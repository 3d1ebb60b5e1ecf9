"""Job data: JSON-serialisable and within bunqueue's size limit, checked as cheaply
as the common case allows.

:func:`validate_job_data` accepts what bunqueue's ``JSON.stringify`` check accepts and
refuses it with the same texts (:data:`DATA_NOT_SERIALIZABLE`, :data:`DATA_TOO_LARGE`).
It runs once per pushed job, so it avoids building the JSON text: a frame too small to
carry too much data is not sized at all, and small data of the plain types a codec
produces is bounded by one type walk (:func:`_json_bound`); only data that walk cannot
settle is encoded and measured in UTF-16 code units, as JavaScript's ``length`` is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from trioqueue.core import native
from trioqueue.core.errors import Refused

MAX_DATA_CHARS = 10 * 1024 * 1024
"""bunqueue's "10 MB": ``JSON.stringify(data).length`` may not exceed 10 * 1024 * 1024."""

JSON_CHARS_PER_WIRE_BYTE = 28
"""The most JSON characters one msgpack/CBOR byte can become, so a frame of at most
``max_chars / 28`` bytes cannot carry too-large data and its size is never measured.

Text alone expands at most 6x (a control character becomes ``\\u00XX``), but byte
strings are sized as the Buffer JSON that bunqueue's ``JSON.stringify`` writes: an empty
CBOR byte string in an array is 1 byte and ``{"type":"Buffer","data":[]},`` (28
characters); msgpack needs 2 bytes for it (14x). 28 keeps the shortcut sound and still
covers every frame up to 374 KiB, which is all but the largest PUSHB batches."""

DATA_NOT_SERIALIZABLE = "Job data must be JSON serializable"
DATA_TOO_LARGE = "Job data too large (max 10MB)"


class _Unsure(Exception):
    """The fast walk met something it does not model; ``json.dumps`` decides instead."""


_FAST_DEPTH = 64
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
# Upper bounds of the JSON text of one scalar: a float's repr is at most 24 characters,
# an int64/uint64 at most 20, ``false``/``null`` at most 5.
_SCALAR_BOUND = 24
# The scalars whose text never exceeds that bound, whatever their value (ints depend on it).
_SCALARS = frozenset({float, bool, type(None)})


def _json_bound_py(value: Any, depth: int) -> int:
    """An upper bound of ``len(JSON.stringify(value))``; raises :class:`_Unsure`.

    A recursive type check over the plain types a codec produces (dict with str keys,
    list, tuple, str, int, float, bool, None, bytes), much cheaper than ``json.dumps``
    for small data. Strings count 6 characters each (the worst escape). Anything else
    (other key types, subclasses, huge ints, deep nesting or a cycle) is left to the
    exact path, which also produces the errors.
    """
    kind = type(value)
    if kind is str:
        return 6 * len(value) + 2
    if kind is dict:
        if depth > _FAST_DEPTH:
            raise _Unsure
        total = 2
        for key, item in value.items():
            if type(key) is not str:
                raise _Unsure
            # The common members are sized inline: a call per scalar would cost more
            # than the whole check of a small map.
            item_kind = type(item)
            if item_kind is str:
                total += 6 * (len(key) + len(item)) + 8
            elif item_kind in _SCALARS or (item_kind is int and _INT64_MIN <= item <= _UINT64_MAX):
                total += 6 * len(key) + 4 + _SCALAR_BOUND
            else:
                total += 6 * len(key) + 4 + _json_bound_py(item, depth + 1)
        return total
    if kind is list or kind is tuple:
        return _array_bound(value, depth)
    if kind in _SCALARS or (kind is int and _INT64_MIN <= value <= _UINT64_MAX):
        return _SCALAR_BOUND
    if kind is bytes or kind is bytearray:
        return 27 + 4 * len(value)  # {"type":"Buffer","data":[...]}: 27 + up to "255,"
    raise _Unsure


def _array_bound(value: list[Any] | tuple[Any, ...], depth: int) -> int:
    """:func:`_json_bound_py` of an array (a map's members are sized in that function
    itself: maps are the common top level, and this saves them a call)."""
    if depth > _FAST_DEPTH:
        raise _Unsure
    total = 2
    for item in value:
        item_kind = type(item)
        if item_kind is str:
            total += 6 * len(item) + 3
        elif item_kind in _SCALARS or (item_kind is int and _INT64_MIN <= item <= _UINT64_MAX):
            total += 1 + _SCALAR_BOUND
        else:
            total += 1 + _json_bound_py(item, depth + 1)
    return total


_json_bound: Callable[[Any, int], int]
""":func:`_json_bound_py`, in C where the extension is built
(``trioqueue.core._data_walk.json_bound``): the same integers, and :class:`_Unsure` for
the same values, at no bytecode per value; the Python function stays the rule (the C
form also hands it a bound past 64 bits)."""

_c_walk = native.extension("trioqueue.core._data_walk")
if _c_walk is None:
    _json_bound = _json_bound_py
    IMPLEMENTATION = "Python"
else:
    _c_walk.configure_json_bound(_Unsure, _json_bound_py, _FAST_DEPTH)
    _json_bound = _c_walk.json_bound
    IMPLEMENTATION = "C"


def _json_floor(value: Any) -> int:
    """A lower bound of ``len(JSON.stringify(value))`` for what :func:`_json_bound`
    settled (so no other type occurs): each code point is at least one UTF-16 unit,
    every scalar at least one character; escapes, commas and Buffer digits are left out.
    """
    kind = type(value)
    if kind is str:
        return len(value) + 2
    if kind is dict:
        return 2 + sum(len(key) + 3 + _json_floor(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return 2 + sum(map(_json_floor, value))
    if kind is bytes or kind is bytearray:
        return 27 + len(value)  # {"type":"Buffer","data":[]} and one digit a byte
    return 1


def _json_default(value: Any) -> Any:
    # msgpack bin / CBOR byte strings round-trip in job data as in bunqueue, where
    # msgpackr decodes them to a Buffer; JSON.stringify writes a Buffer this way.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "Buffer", "data": list(bytes(value))}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Built once: json.dumps with options builds a new encoder on every call.
_json_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_json_default, allow_nan=True
)


def _json_text(data: Any) -> str:
    try:
        return _json_encoder.encode(data)
    except (TypeError, ValueError, RecursionError, OverflowError):
        # TypeError: a type JSON cannot encode; ValueError: a cycle, or an int beyond
        # Python's digit limit; RecursionError: nesting deeper than the stack (JS throws
        # a RangeError there, which bunqueue reports the same way).
        raise Refused(DATA_NOT_SERIALIZABLE) from None


def validate_job_data(
    data: Any, *, max_chars: int | None = MAX_DATA_CHARS, frame_bytes: int | None = None,
    json_bound: int | None = None,
) -> None:
    """Check job data the way bunqueue's ``JSON.stringify`` check does.

    ``max_chars=None`` skips the size limit (``Update`` has none). ``frame_bytes`` is the
    size of the frame the data arrived in: when it is small enough that the data cannot
    reach ``max_chars`` (see :data:`JSON_CHARS_PER_WIRE_BYTE`), no size is computed.
    ``json_bound`` is an upper bound of the JSON text (UTF-16 units) of the data, from
    a walk of the transport that also checked its types; at most ``max_chars`` (or
    any, with no size limit), the data is accepted without a look.

    Accepted beyond Python's ``json``: bytes/bytearray (sized as a JSON'd Buffer), and
    NaN/Infinity floats, which ``JSON.stringify`` writes as ``null``. The exact size is
    measured in UTF-16 code units, as JS ``length`` does; NaN/Infinity are counted with
    Python's spelling (a few characters off, never mattering in practice).
    """
    if json_bound is not None and (max_chars is None or json_bound <= max_chars):
        # The transport's walk that bounded it also checked every value's type (a
        # large frame's: transport/large/frames.py): no walk here at all, which for
        # data of millions of values would be one long step. (Without a size limit,
        # as for ``Update``, any bound says the types were checked.)
        return
    skip_size = max_chars is None or (
        frame_bytes is not None and frame_bytes * JSON_CHARS_PER_WIRE_BYTE <= max_chars
    )
    try:
        bound = _json_bound(data, 0)
    except _Unsure:
        pass
    else:
        if skip_size or (max_chars is not None and bound <= max_chars):
            return
        # The walk settled it, so it is serializable: the only question left is size,
        # and data too large even unescaped is refused without building its text.
        if max_chars is not None and _json_floor(data) > max_chars:
            raise Refused(DATA_TOO_LARGE)
    text = _json_text(data)
    if max_chars is None:
        return
    size = len(text)
    if size * 2 > max_chars and not text.isascii():
        size = len(text.encode("utf-16-le", "surrogatepass")) // 2
    if size > max_chars:
        raise Refused(DATA_TOO_LARGE)
