"""The ``repeat`` job option in Python names: ``Queue.add(..., repeat={...})``.

The broker runs a repeat job as a chain (docs/client.md, "Periodic jobs"): each
completion creates the next generation for the next slot. Here the mapping is checked
and renamed before anything is sent: ``every`` (ms) or ``pattern`` (a cron expression,
with ``tz``), ``limit``, ``start_date``/``end_date`` (epoch ms, or an aware
``datetime``), ``offset`` (ms), ``immediately``. An unknown key is refused, so a typo
(``end``) does not silently become a chain without an end.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from .errors import ValidationError


class Repeat(TypedDict, total=False):
    """``repeat``: exactly one of ``every`` and ``pattern``. ``limit`` counts the
    generations after the first (bunqueue's meaning: ``limit=3`` runs four times)."""

    every: int
    pattern: str
    tz: str
    limit: int
    start_date: int | datetime
    end_date: int | datetime
    offset: int
    immediately: bool


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _ms(name: str, value: Any, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValidationError(f"{name} must be whole milliseconds (an int) of at least "
                              f"{minimum}, not {_show(value)}")
    return value


def _date(name: str, value: Any) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(f"{name} must be an aware datetime (with a tzinfo), "
                                  f"not {_show(value)}")
        return int(value.timestamp() * 1000)
    return _ms(name, value, 0)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string, not {_show(value)}")
    return value


def _count(name: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValidationError(f"{name} must be an int of at least 0, not {_show(value)}")
    return value


def _flag(name: str, value: Any) -> bool:
    if type(value) is not bool:
        raise ValidationError(f"{name} must be True or False, not {_show(value)}")
    return value


# Python key -> (wire key, check(name, value) -> value to send)
_KEYS: dict[str, tuple[str, Any]] = {
    "every": ("every", lambda n, v: _ms(n, v, 1)),
    "pattern": ("pattern", _text),
    "tz": ("tz", _text),
    "limit": ("limit", _count),
    "start_date": ("startDate", _date),
    "end_date": ("endDate", _date),
    "offset": ("offset", lambda n, v: _ms(n, v, 0)),
    "immediately": ("immediately", _flag),
}


def repeat_option(name: str, value: Any) -> dict[str, Any]:
    """The wire form of ``repeat`` (``name`` is how errors call it)."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"{name} must be a mapping, not {_show(value)}")
    wire: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _KEYS:
            known = ", ".join(_KEYS)
            raise ValidationError(f"{name} has no key {key!r} (it takes {known})")
        if item is None:
            continue
        wire_key, check = _KEYS[key]
        wire[wire_key] = check(f"{name}[{key!r}]", item)
    if ("every" in wire) == ("pattern" in wire):
        raise ValidationError(f"{name} needs exactly one of 'every' and 'pattern'")
    return wire
