"""Large job data kept apart from its record, written once (issue 12, item 2).

A job's record is rewritten at every state change: a pull, a retry, the finish. With
its data inside, an 8.5 MB job cost three 8.5 MB encodings, puts and commits, each one
call that held the event loop for milliseconds (docs/benchmarks.md, "Issue 12, twelfth
pass"). A record whose encoding reaches :data:`KEEP_DATA_BYTES` therefore goes to the
store in two values: the record without its data (and :data:`KEPT_FIELD` set), and the
data alone under the job's key in the ``data`` sub-database (``V({"d": data})``, or a
string's UTF-8 bytes as they are, written from the string's own buffer).

Later writes of the same job skip the data as long as it is the same object: the core
replaces a job's data when it changes (UpdateData, a flow's parent), it never edits it
in place. :class:`KeptData` remembers, per job, the data object whose bytes are stored;
a write of the job with that object writes the record alone. Forgotten when the job
finishes (its finished record is the last write, normally: a retry writes the data
again) or is deleted (the ``data`` row goes in the same commit), so it holds no data
the core has dropped.

Every read of a record puts the data back (:func:`with_data`), so nothing above the
adapters knows where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ..utf8_views import utf8_view

#: A record whose encoding is at least this long keeps its data apart. Below it, a
#: rewrite costs less than a second key per job would.
KEEP_DATA_BYTES: Final = 64 * 1024
#: The record field that says its data is in the ``data`` sub-database: True for a
#: row of ``V({"d": data})``, :data:`TEXT` for a string's UTF-8 bytes as they are.
KEPT_FIELD: Final = "dataKept"
TEXT: Final = "text"
#: A data row's value: encoded, or a view of a string's own bytes.
Row = bytes | memoryview
_UNSET: Any = object()


class KeptData:
    """Which jobs' data the store holds apart, as which object (see the module).

    An adapter's encoding stages changes (:meth:`stage`); they take effect with
    :meth:`settle` once the commit succeeded, and are dropped by :meth:`discard` when
    it failed, so a failed write never makes a later one skip data that is not stored.
    """

    __slots__ = ("held", "_staged")

    def __init__(self) -> None:
        self.held: dict[str, Any] = {}
        self._staged: dict[str, Any] = {}

    @property
    def active(self) -> bool:
        """Whether any job's data is held or staged (the common case: none)."""
        return bool(self.held or self._staged)

    def stored_as(self, job_id: str) -> Any:
        """The data object whose bytes are stored for ``job_id``, as far as the writes
        encoded so far know; a sentinel no data is when none."""
        staged = self._staged.get(job_id, _UNSET)
        if staged is not _UNSET:
            return _UNSET if staged is None else staged
        return self.held.get(job_id, _UNSET)

    def stage(self, job_id: str, data: Any | None) -> None:
        """``data`` is stored for ``job_id`` by the write being encoded (None: no data
        is held for it any more)."""
        self._staged[job_id] = data

    def settle(self) -> None:
        held = self.held
        for job_id, data in self._staged.items():
            if data is None:
                held.pop(job_id, None)
            else:
                held[job_id] = data
        self._staged.clear()

    def discard(self) -> None:
        self._staged.clear()


def held_record(job_id: str, record: dict[str, Any], kept: KeptData,
                dumps: Callable[[Any], bytes]) -> bytes | None:
    """The encoded record without its data when that data is the object already stored
    for ``job_id``; None when it is not (the record is then encoded as it is)."""
    if "data" not in record or kept.stored_as(job_id) is not record["data"]:
        return None
    rest = dict(record)
    del rest["data"]
    rest[KEPT_FIELD] = True
    return dumps(rest)


def keep_apart(job_id: str, record: dict[str, Any], kept: KeptData,
               dumps: Callable[[Any], bytes]) -> tuple[bytes, Row]:
    """The encoded record without its data (``KEPT_FIELD`` set) and the data's own
    value, for a record found large; staged as stored for ``job_id``."""
    rest = dict(record)
    data = rest.pop("data")
    kept.stage(job_id, data)
    # a string's row is its UTF-8 bytes, read from the string itself (not copied first)
    view = utf8_view(data) if type(data) is str else None
    rest[KEPT_FIELD] = True if view is None else TEXT
    return dumps(rest), dumps({"d": data}) if view is None else view


def kept_record(job_id: str, record: dict[str, Any], kept: KeptData,
                dumps: Callable[[Any], bytes], value: bytes | None
                ) -> tuple[bytes, Row | None]:
    """A record's value with ``kept`` in play, and its data's value when that is to be
    written apart (its row put before the record). Without the data when it is stored
    already; kept apart when ``value`` (the record encoded whole, made here if None) is
    large, or when the data is a long string (known large before any encoding)."""
    if value is None:
        held = held_record(job_id, record, kept, dumps)
        if held is not None:
            return held, None
        data = record.get("data")
        if type(data) is str and len(data) >= KEEP_DATA_BYTES:
            return keep_apart(job_id, record, kept, dumps)
        value = dumps(record)
    if len(value) >= KEEP_DATA_BYTES and "data" in record:
        return keep_apart(job_id, record, kept, dumps)
    if kept.active and kept.stored_as(job_id) is not _UNSET:
        # new data, small, written in the record: the old object is not held any more
        # (its row stays until the job is deleted, counted as used meanwhile)
        kept.stage(job_id, None)
    return value, None


def with_data(record: dict[str, Any], read: Callable[[], Row | None],
              loads: Callable[[bytes], Any]) -> dict[str, Any]:
    """``record`` with its data back in place when it was kept apart; ``read`` gives
    the ``data`` row. A row missing is a broken store: it raises, naming the job."""
    kept = record.pop(KEPT_FIELD, False)
    if kept:
        raw = read()
        if raw is None:
            raise RuntimeError(f"job {record.get('id')!r}: its data row is missing")
        record["data"] = str(raw, "utf-8") if kept == TEXT else loads(bytes(raw))["d"]
    return record
