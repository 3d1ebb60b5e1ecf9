"""An empty dict sized beforehand for a map whose count is known (a msgpack or CBOR map
header), so that making it a key at a time never resizes it.

A dict grows by resizes, and one resize copies every entry in one call: a large map
decoded a slice at a time still held the event loop for its last resize. CPython has no
public call that sizes a dict (``_PyDict_NewPresized`` stops at 87,381 entries), so the
C extension (``trioqueue.core._presized``) makes the table; without it the map grows as
any dict does (correct, with those steps).

The count comes from the wire, so the caller bounds it by what its payload can hold
(:func:`entries_bound`): a header claiming millions of entries in a small frame (or the
same key over and over) gets no larger table than those bytes could fill, and none past
:data:`MAX_PRESIZED` entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import native

__all__ = ["IMPLEMENTATION", "MAX_PRESIZED", "MIN_PRESIZED", "entries_bound",
           "merge_into", "presized_dict"]

#: A map of fewer entries is made as any dict (its resizes are short).
MIN_PRESIZED: Final = 1 << 15
#: The most entries a table is sized for: a job's data (10M characters of JSON, each
#: entry at least 5) holds at most 2M.
MAX_PRESIZED: Final = 1 << 21


def _plain(count: int) -> dict[Any, Any]:
    """Without the extension: a dict as any other (it grows by its own resizes)."""
    if count < 0:
        raise ValueError("count must not be negative")
    return {}


_made: Callable[[int], dict[Any, Any]]
_c = native.extension("trioqueue.core._presized")
if _c is None:
    _made = _plain
    IMPLEMENTATION = "Python"
else:
    _made = _c.presized_dict
    IMPLEMENTATION = "C"


def entries_bound(count: int, payload_bytes: int, entry_bytes: int = 2) -> int:
    """The entries a map header's ``count`` may really fill, with ``payload_bytes`` left
    to hold them at ``entry_bytes`` at least each (a key and a value: one byte each)."""
    return max(0, min(count, payload_bytes // entry_bytes, MAX_PRESIZED))


def presized_dict(count: int) -> dict[Any, Any]:
    """An empty dict that takes ``count`` keys without a resize (see the module); a
    plain one for a small count."""
    if count < MIN_PRESIZED:
        return {}
    return _made(min(count, MAX_PRESIZED))


def merge_into(out: dict[Any, Any], run: dict[Any, Any]) -> None:
    """``out.update(run)``, keeping ``out``'s table: an empty dict's update takes a copy
    of ``run``'s table in place of its own (a presized one lost to a small one), so
    the first key goes in alone first (it keeps its place: the update sets it again)."""
    if not out and run:
        key = next(iter(run))
        out[key] = run[key]
    out.update(run)
