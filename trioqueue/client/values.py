"""What a command may carry, checked before anything is sent.

The wire's data model is JSON's plus byte strings: maps with string keys, lists (and
tuples, sent as lists), strings, bytes, integers, floats, booleans and None. Every
client of the broker, in any language and codec, reads a job's data back in that
model, so the client does not convert anything else by a rule of its own: a
``datetime``, ``Decimal``, ``UUID``, ``set``, dataclass or any other object is refused
with :class:`~trioqueue.client.errors.ValidationError` naming where it is
(``data.when``, ``jobs[2].data.ids``, ``result``), before the command is encoded.
Convert such values yourself (``when.isoformat()``, ``str(amount)``, ``str(uid)``,
``sorted(tags)``, ``dataclasses.asdict(obj)``).

Why refuse rather than convert: a silent conversion would hand the worker a ``str``
where the producer put a ``datetime``, which fails far from its cause; and without the
check the codec either raises without saying where (msgpack) or encodes a tag the
broker refuses (CBOR), whose refusal names no command.
"""

from __future__ import annotations

from typing import Any

from ..transport.wire.datamodel import MAX_DEPTH
from .errors import ValidationError

_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_MAX_INT_BITS = 64 * 8  # the broker's bignum bound (transport.codec.MAX_BIGNUM_BYTES)
_HINT = ("the wire carries JSON's types plus bytes: convert it first (e.g. isoformat(), "
         "str(), list(), dataclasses.asdict())")


def check_message(msg: dict[str, Any]) -> None:
    """Raise :class:`ValidationError` for the first value in ``msg`` the wire cannot
    carry, naming its path from the command's fields."""
    for key, value in msg.items():
        kind = type(value)
        if kind in _SCALARS and (kind is not int or value.bit_length() <= _MAX_INT_BITS):
            continue
        problem = _problem(value, 1)
        if problem is not None:
            path, what = problem
            path.append(key)
            raise ValidationError(f"{_path(path)}: {what}", str(msg.get("cmd", "")))


def check_value(value: Any, name: str) -> None:
    """The same check for one value, its path rooted at ``name`` (e.g. ``result``)."""
    problem = _problem(value, 1)
    if problem is not None:
        path, what = problem
        path.append(name)
        raise ValidationError(f"{_path(path)}: {what}")


def _path(reversed_path: list[Any]) -> str:
    out = ""
    for part in reversed(reversed_path):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _problem(value: Any, depth: int) -> tuple[list[Any], str] | None:
    """None when ``value`` is fine; else (its path reversed, what is wrong)."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is int and value.bit_length() > _MAX_INT_BITS:
            return [], f"an integer of {value.bit_length()} bits is too large"
        return None
    if depth > MAX_DEPTH:
        return [], f"nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                return [], f"map key {key!r} is not a string ({type(key).__name__})"
            kind = type(item)
            if kind in _SCALARS and (kind is not int or item.bit_length() <= _MAX_INT_BITS):
                continue  # the common shapes, without a call per value
            problem = _problem(item, depth + 1)
            if problem is not None:
                problem[0].append(key)
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            kind = type(item)
            if kind in _SCALARS and (kind is not int or item.bit_length() <= _MAX_INT_BITS):
                continue
            problem = _problem(item, depth + 1)
            if problem is not None:
                problem[0].append(index)
                return problem
        return None
    if isinstance(value, (str, int, float)) and not hasattr(value, "__dataclass_fields__"):
        return None  # str and int subclasses (enums) are sent as their values
    return [], f"cannot encode {kind.__name__} ({_HINT})"
