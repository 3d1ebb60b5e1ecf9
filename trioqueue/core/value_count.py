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

from .job import JobWire

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


def holds_many(data: Any, limit: int) -> bool:
    """Whether ``data`` (a list or map of decoded job data) holds more than ``limit``
    values; anything else holds none."""
    kind = type(data)
    if kind is dict:
        return weight(list(data.values()), limit) > limit
    if kind is list:
        return weight(data, limit) > limit
    return False


#: A list or map with more members than this is opened and its members handled in turn
#: (encoded, taken apart); a smaller one is handled whole, within a run of its siblings.
OPEN_MIN_MEMBERS: Final = 32
_PLAIN: Final = frozenset({list, dict})


def is_big(member: Any) -> bool:
    """Whether ``member`` is a list or map to open (see :data:`OPEN_MIN_MEMBERS`)."""
    kind = type(member)
    return (kind is list or kind is dict) and len(member) > OPEN_MIN_MEMBERS


def has_big(part: list[Any]) -> bool:
    """Whether a member of ``part`` is a container to open: by C-level calls when the
    members are all scalars or all containers (the common runs)."""
    kinds = set(map(type, part))
    if kinds.isdisjoint(_PLAIN):
        return False
    if kinds <= _PLAIN:
        return max(map(len, part)) > OPEN_MIN_MEMBERS
    return any(map(is_big, part))
