"""How many values a decoded value holds, looked at no further than a limit.

Data of a million small values is cheap to carry and costly to encode or free in one
call, so the broker asks, before such work, whether a value holds more than some number
of values: the answer must cost about that number, not the value's size. Counting goes
a level of the tree at a time with C-level calls (a loop per value would cost more than
most of the work it decides on).
"""

from __future__ import annotations

from itertools import chain, compress
from typing import Any, Final

from ..job import JobWire

_LISTS: Final = frozenset({list, tuple})
_MAPS: Final = frozenset({dict, JobWire})
CONTAINERS: Final = _LISTS | _MAPS
_is_container = CONTAINERS.__contains__
_is_list = _LISTS.__contains__
_is_map = _MAPS.__contains__


def weight(values: list[Any], limit: int) -> int:
    """How many values ``values`` holds, its items and all they contain (a map's entry
    counts one); past ``limit`` the count stops (the result is then only more than
    ``limit``), so the cost is that of looking at about ``limit`` values."""
    total = len(values)
    items: list[Any] = values
    while total <= limit:
        if len(items) < 8:  # (a small level: a loop costs less than the C calls' setup)
            kids = [item for item in items if type(item) in CONTAINERS]
        else:
            kids = list(compress(items, map(_is_container, map(type, items))))
        if not kids:
            break
        total += sum(map(len, kids))
        if total > limit:
            break
        kinds = list(map(type, kids))
        if dict not in kinds and JobWire not in kinds:
            items = list(chain.from_iterable(kids))
        else:
            lists = compress(kids, map(_is_list, kinds))
            maps = compress(kids, map(_is_map, kinds))
            items = list(chain(chain.from_iterable(lists),
                               chain.from_iterable(map(dict.values, maps))))
    return total


_PLAIN: Final = frozenset({list, dict})


def holds_many(data: Any, limit: int) -> bool:
    """Whether ``data`` (a list or map of decoded job data) holds more than ``limit``
    values; anything else holds none."""
    kind = type(data)
    if kind is dict:
        return weight(list(data.values()), limit) > limit
    if kind is list:
        return weight(data, limit) > limit
    return False


#: The most values one call may handle whole (encode, free): a run of members holding
#: more is cut shorter, and a member holding more alone is opened and handled a run at a
#: time. Decided by weight, not by members: lists of 31 lists of 31 lists ... hold a
#: million values in containers of few members each.
RUN_MAX_VALUES: Final = 16384


def run_values(part: list[Any]) -> int:
    """How many values the members ``part`` hold with them, looked at no further than
    :data:`RUN_MAX_VALUES`: ``len(part)`` for a run of scalars (one C-level pass)."""
    if _PLAIN.isdisjoint(map(type, part)):
        return len(part)
    return weight(part, RUN_MAX_VALUES)


def container_of_many(member: Any) -> bool:
    """Whether ``member`` is a list or map holding more than :data:`RUN_MAX_VALUES`
    values (one to open and handle a run at a time)."""
    kind = type(member)
    if kind is list:
        return len(member) > RUN_MAX_VALUES or weight(member, RUN_MAX_VALUES) > RUN_MAX_VALUES
    if kind is dict:
        return len(member) > RUN_MAX_VALUES or weight(
            list(member.values()), RUN_MAX_VALUES) > RUN_MAX_VALUES
    return False
