"""Large job data kept apart from its record, written once.

A job's record is rewritten at every state change: a pull, a retry, the finish. With
its data inside, a large job cost three encodings, puts and commits of all its data, each
one call that held the event loop. A record whose
encoding reaches :data:`KEEP_DATA_BYTES` therefore goes to the store in two values: the
record without its data (and :data:`KEPT_FIELD` set), and the data alone under the job's
key in the ``data`` sub-database (``V({"d": data})``, or a string's UTF-8 bytes as they
are, written from the string's own buffer).

Later writes of the same job skip the data as long as it is the same object: the core
replaces a job's data when it changes (UpdateData, a flow's parent), it never edits it
in place. :class:`KeptData` remembers, per job, the data object whose bytes are stored;
a write of the job with that object writes the record alone. Forgotten when the job
finishes (its finished record is the last write, normally: a retry writes the data
again) or is deleted (the ``data`` row goes in the same commit), so it holds no data
the core has dropped.

Data of many small values may also come with its row already encoded, a slice at a
time, by the connection that decoded it (``actors/ahead_writes.py``): the record that
takes it keeps its data apart whatever its size and puts that row in its own commit,
so the commit encodes none of the data.

Every read of a record puts the data back (:func:`with_data`), so nothing above the
adapters knows where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final, NamedTuple

import msgpack

from ..core.large_values.graveyard import Graveyard
from ..utf8_views import utf8_view
from .kept_outcomes import KeptOutcomes, OutcomeClaim
from .kept_progress import PROGRESS_FIELD, PROGRESS_KEPT, KeptProgress, ProgressClaim
from .keys import decode_result, decode_value, encode_result, job_key
from .value_pieces import EncodedValues, Packed, joined_map

#: A record whose encoding is at least this long keeps its data apart. Below it, a
#: rewrite costs less than a second key per job would.
KEEP_DATA_BYTES: Final = 64 * 1024
#: The record field that says where its data is: True for a row of ``V({"d": data})``
#: under the job's key in ``data``, :data:`TEXT` for a string's UTF-8 bytes there as
#: they are, ``[TEXT, row key, pieces]`` for a string written ahead of its record in
#: pieces (the ``ahead`` sub-database; see :class:`~.lmdb.ahead.AheadRows`),
#: ``[VALUE, row key, pieces]`` for other data written ahead, its pieces joined being
#: ``V({"d": data})``.
KEPT_FIELD: Final = "dataKept"
TEXT: Final = "text"
VALUE: Final = "value"
#: A data row's value: encoded, or a view of a string's own bytes.
Row = bytes | memoryview
#: A data row at least this long, read back for a command, is left encoded (as
#: :class:`~.value_pieces.Packed`) for the queue's actor to decode a slice at a time.
PACKED_MIN_BYTES: Final = 128 * 1024


class AheadClaim(NamedTuple):
    """A record takes the rows written ahead for its data (its commit claims them)."""

    row_key: bytes
    pieces: int


class KeptData:
    """Which jobs' data the store holds apart, as which object and where (the module),
    and the strings written ahead of their records, not yet taken by one.

    An adapter's encoding stages changes (:meth:`stage`, :meth:`take_ahead`); they take
    effect with :meth:`settle` once the commit succeeded, and are dropped by
    :meth:`discard` when it failed, so a failed write never makes a later one skip data
    that is not stored.
    """

    __slots__ = ("held", "ahead", "_staged", "_taken", "active", "staging", "graveyard",
                 "results", "progress", "encoded", "outcomes", "_drop_pieces")

    def __init__(self, drop_pieces: Callable[[bytes, int], None] | None = None) -> None:
        """``drop_pieces`` deletes pieces written ahead that no record took (the
        store's); without it, this only stages what an encoding keeps apart."""
        self._drop_pieces = _no_pieces if drop_pieces is None else drop_pieces
        # job id -> (data object, the record's KEPT_FIELD value)
        self.held: dict[str, tuple[Any, Any]] = {}
        # id(text) -> (text, its claim): rows written ahead, or encoded ahead (bytes),
        # not taken by a record yet
        self.ahead: dict[int, tuple[Any, AheadClaim | bytes]] = {}
        self._staged: dict[str, tuple[Any, Any] | None] = {}
        self._taken: list[int] = []
        # Whether any job's data is held, staged or written ahead (commonly none): an
        # attribute kept up to date, read for every record written
        self.active = False
        self.staging = False  # changes wait for settle or discard
        # Where data let go of goes to be taken apart a slice at a time (None: freed
        # by its last holder, in one call)
        self.graveyard: Graveyard | None = None
        # id(result) -> (result, its row): an ACK's result of many values, encoded a
        # slice at a time before the command ran, for its finish to write as it is
        self.results: dict[int, tuple[Any, bytes]] = {}
        # long progress messages written ahead or stored apart (kept_progress.py)
        self.progress = KeptProgress()
        # data objects encoded ahead and kept (a schedule's template): the rows of the
        # records that carry one are made from its bytes
        self.encoded = EncodedValues()
        # children's results written ahead for their parents' outcome rows
        self.outcomes = KeptOutcomes()

    def _refresh(self) -> None:
        self.active = bool(self.held or self._staged or self.ahead or self.progress.active
                           or self.encoded)

    def keep_encoded(self, data: Any, encoded: bytes) -> None:
        self.encoded.keep(data, encoded)
        self.active = True

    def drop_encoded(self, data: Any) -> None:
        self.encoded.drop(data)
        self._refresh()

    def encoded_of(self, data: Any) -> bytes | None:
        return self.encoded.of(data)

    # --- the port's rows written or encoded ahead (the stores hand these on) ---------

    def expect_ahead(self, text: Any, row_key: bytes, pieces: int) -> None:
        self.add_ahead(text, AheadClaim(row_key, pieces))

    def expect_encoded(self, data: Any, row: bytes) -> None:
        self.add_ahead(data, row)

    def release_ahead(self, text: Any) -> None:
        claim = self.forget_ahead(text)
        if type(claim) is AheadClaim:
            self._drop_pieces(*claim)

    def expect_result(self, result: Any, row: bytes) -> None:
        """``row`` is ``result``'s row (``V({"r": result})``), encoded ahead: the finish
        that stores this very object writes it instead of encoding it again."""
        self.results[id(result)] = (result, row)

    def release_result(self, result: Any) -> None:
        """The command that carried ``result`` is answered: its row is not needed."""
        entry = self.results.get(id(result))
        if entry is not None and entry[0] is result:
            del self.results[id(result)]

    def expect_progress(self, text: str, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` hold ``text``'s UTF-8 bytes: the next record
        whose progress message is this very string takes them (kept_progress.py)."""
        self.progress.expect(text, ProgressClaim(row_key, pieces))
        self.active = True

    def release_progress(self, text: str) -> None:
        """The command that carried ``text`` is answered: its pieces go, if no record
        took them."""
        claim = self.progress.forget_ahead(text)
        if claim is not None:
            self._refresh()
            self._drop_pieces(*claim)

    def expect_outcome(self, result: Any, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` hold ``result``'s bytes: the next outcome row
        that carries this very result takes them (kept_outcomes.py)."""
        self.outcomes.expect(result, OutcomeClaim(row_key, pieces))

    def release_outcome(self, result: Any) -> None:
        """The command that carried ``result`` is answered: its pieces go, if no
        outcome row took them."""
        claim = self.outcomes.forget_ahead(result)
        if claim is not None:
            self._drop_pieces(*claim)

    def set_graveyard(self, graveyard: Graveyard) -> None:
        self.graveyard = graveyard

    def let_go(self, value: Any) -> None:
        graveyard = self.graveyard
        if graveyard is not None:
            graveyard.bury(value)

    # --- what an encoding stages --------------------------------------------------

    def stored_as(self, job_id: str) -> tuple[Any, Any] | None:
        """(data object, KEPT_FIELD value) stored for ``job_id``, as far as the writes
        encoded so far know; None when none."""
        if job_id in self._staged:
            return self._staged[job_id]
        return self.held.get(job_id)

    def stage(self, job_id: str, data: Any | None, kept: Any = True) -> None:
        """``data`` is stored for ``job_id`` (where ``kept`` says) by the write being
        encoded (None: no data is held for it any more)."""
        self._staged[job_id] = None if data is None else (data, kept)
        self.active = self.staging = True

    def hold(self, job_id: str, data: Any, kept: Any) -> None:
        """A recovered record's data, as stored (the store's own reads, not staged)."""
        self.held[job_id] = (data, kept)
        self.active = True

    def ahead_for(self, text: Any) -> AheadClaim | bytes | None:
        """The rows written (or the row encoded) ahead for this very data object, if
        any and not taken."""
        entry = self.ahead.get(id(text))
        if entry is None or entry[0] is not text or id(text) in self._taken:
            return None
        return entry[1]

    def take_ahead(self, text: Any) -> None:
        self._taken.append(id(text))
        self.staging = True

    def add_ahead(self, text: Any, claim: AheadClaim | bytes) -> None:
        """Rows were written ahead for ``text`` (or its row encoded, ``bytes``): the
        next record with it takes them."""
        self.ahead[id(text)] = (text, claim)
        self.active = True

    def forget_ahead(self, text: Any) -> AheadClaim | bytes | None:
        """No record will take ``text``'s rows now: the claim to drop, if none took them."""
        entry = self.ahead.get(id(text))
        if entry is None or entry[0] is not text:
            return None
        del self.ahead[id(text)]
        self._refresh()
        if self.graveyard is not None:
            self.graveyard.bury(text)  # (data of a push no record took)
        return entry[1]

    def settle(self) -> None:
        self.staging = False
        held = self.held
        graveyard = self.graveyard
        for job_id, stored in self._staged.items():
            if stored is None:
                gone = held.pop(job_id, None)
                if gone is not None and graveyard is not None:
                    graveyard.bury(gone[0])  # (a large job's data, finished or deleted)
            else:
                held[job_id] = stored
        self._staged.clear()
        for key in self._taken:
            self.ahead.pop(key, None)
        self._taken.clear()
        if self.progress.staging:
            self.progress.settle()
        if self.outcomes.staging:
            self.outcomes.settle()
        self._refresh()

    def discard(self) -> None:
        self.staging = False
        self._staged.clear()
        self._taken.clear()
        if self.progress.staging:
            self.progress.discard()
        if self.outcomes.staging:
            self.outcomes.discard()
        self._refresh()


def _no_pieces(row_key: bytes, pieces: int) -> None:
    raise RuntimeError("pieces written ahead, and no store to drop them from")


def result_row(kept: KeptData, result: Any) -> bytes:
    """A finished job's result row: the one encoded ahead for this very object, if
    any (see :meth:`KeptData.expect_result`), else encoded here."""
    if kept.results:
        entry = kept.results.get(id(result))
        if entry is not None and entry[0] is result:
            return entry[1]
    return encode_result(result)


def outcome_row(kept: KeptData, outcome: dict[str, Any]) -> bytes | None:
    """A dependency outcome's row (``V(outcome)``) made from its result's row encoded
    ahead, when that very result has one: a child's result of many values copied for
    its parent is not encoded a second time in one call. None otherwise."""
    if "result" not in outcome or type(outcome) is not dict or len(outcome) > 15:
        return None
    result = outcome["result"]
    entry = kept.results.get(id(result))
    if entry is None or entry[0] is not result:
        return None
    row = entry[1]
    # V({"r": result}): a fixmap of one entry, the key "r", then the result's bytes
    if row[:3] != _RESULT_HEAD:
        return None
    pieces: list[bytes | memoryview] = [bytes((0x80 | len(outcome),))]
    try:
        for key, value in outcome.items():
            pieces.append(_pack(key))
            pieces.append(memoryview(row)[3:] if key == "result" else _pack(value))
    except (OverflowError, TypeError, ValueError):
        return None  # (encoded whole, as any other row: its CBOR fallback included)
    return b"".join(pieces)


#: The head of a data row in msgpack: ``{"d": ...}``.
_ROW_HEAD: Final = b"\x81\xa1d"


def broker_row(kept: KeptData, value: dict[str, Any]) -> bytes | None:
    """A broker record's row (``V(value)``) joined from its ``data``'s bytes encoded
    ahead and kept (a schedule's record of a large template), or None: encoded whole
    as any other."""
    if not kept.encoded or type(value) is not dict:
        return None
    encoded = kept.encoded.of(value.get("data"))
    return None if encoded is None else joined_map(value, "data", encoded)


#: The head of a result's row in msgpack: ``{"r": ...}``.
_RESULT_HEAD: Final = b"\x81\xa1r"
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def read_row(raw: bytes, packed_min: int | None) -> Any:
    """A stored value read back; with ``packed_min``, one at least that long comes as
    :class:`~.value_pieces.Packed`, for the caller to decode a slice at a time."""
    if packed_min is not None and len(raw) >= packed_min:
        return Packed(bytes(raw))
    return decode_value(raw)


def read_result(raw: bytes | None, packed_min: int | None) -> tuple[bool, Any]:
    """A result row read back: ``(False, None)`` when none; with ``packed_min``, a row
    at least that long comes as :class:`~.value_pieces.Packed` (``V({"r": result})``
    undecoded), for the caller to decode a slice at a time."""
    if raw is None:
        return False, None
    if packed_min is not None and len(raw) >= packed_min:
        return True, Packed(bytes(raw))
    return True, decode_result(raw)


def held_record(job_id: str, record: dict[str, Any], kept: KeptData,
                dumps: Callable[[Any], bytes]) -> bytes | None:
    """The encoded record without its data when that data is the object already stored
    for ``job_id``; None when it is not (the record is then encoded as it is)."""
    stored = kept.stored_as(job_id)
    if stored is None or "data" not in record or stored[0] is not record["data"]:
        return None
    return dumps(_without_data(record, stored[1]))


def _without_data(record: dict[str, Any], where: Any) -> dict[str, Any]:
    """A copy of ``record`` with KEPT_FIELD ``where`` in place of its data."""
    rest = dict(record)
    del rest["data"]
    rest[KEPT_FIELD] = where
    return rest


def keep_apart(job_id: str, record: dict[str, Any], kept: KeptData,
               dumps: Callable[[Any], bytes]) -> tuple[bytes, Row | AheadClaim]:
    """The encoded record without its data (``KEPT_FIELD`` set) and the data's own row,
    or the claim of the rows written ahead for it, for a record found large; staged as
    stored for ``job_id``."""
    data = record["data"]
    claim = kept.ahead_for(data) if kept.ahead else None
    if isinstance(claim, bytes):
        # its row encoded ahead, a slice at a time: put with the record as it is
        kept.take_ahead(data)
        kept.stage(job_id, data, True)
        return dumps(_without_data(record, True)), claim
    if claim is not None:
        kept.take_ahead(data)
        where: Any = [TEXT if type(data) is str else VALUE, claim.row_key, claim.pieces]
        kept.stage(job_id, data, where)
        return dumps(_without_data(record, where)), claim
    # a string's row is its UTF-8 bytes, read from the string itself (not copied first)
    view = utf8_view(data) if type(data) is str else None
    where = True if view is None else TEXT
    kept.stage(job_id, data, where)
    if view is not None:
        return dumps(_without_data(record, where)), view
    encoded = kept.encoded.of(data) if kept.encoded else None
    # (data encoded ahead and kept, a schedule's template: its row joined, not encoded)
    row = dumps({"d": data}) if encoded is None else _ROW_HEAD + encoded
    return dumps(_without_data(record, where)), row


def kept_record(job_id: str, record: dict[str, Any], kept: KeptData,
                dumps: Callable[[Any], bytes], value: bytes | None
                ) -> tuple[bytes, Row | AheadClaim | None]:
    """A record's value with ``kept`` in play, and its data's row (or the claim of rows
    written ahead) when that is to be written apart (put before the record). Without
    the data when it is stored already; kept apart when ``value`` (the record encoded
    whole, made here if None) is large, or when the data is a long string (known large
    before any encoding)."""
    if value is None:
        held = held_record(job_id, record, kept, dumps)
        if held is not None:
            return held, None
        data = record.get("data")
        if type(data) is str and len(data) >= KEEP_DATA_BYTES or (
                kept.ahead and kept.ahead_for(data) is not None) or (
                kept.encoded and kept.encoded.of(data) is not None):
            # (data written or encoded ahead: known large, and never encoded here)
            return keep_apart(job_id, record, kept, dumps)
        value = dumps(record)
    if len(value) >= KEEP_DATA_BYTES and "data" in record:
        return keep_apart(job_id, record, kept, dumps)
    if kept.active and kept.stored_as(job_id) is not None:
        # new data, small, written in the record: the old object is not held any more
        # (its row stays until the job is deleted, counted as used meanwhile)
        kept.stage(job_id, None)
    return value, None


def put_data_back(records: list[dict[str, Any]], read: Callable[[bytes, Any], Row | None],
                  loads: Callable[[bytes], Any], kept: KeptData | None = None,
                  packed_min: int | None = None) -> None:
    """The data of every record of ``records`` kept apart, put back in place (``read``
    gives a row from the job's key and the record's KEPT_FIELD value); with ``kept``
    (recovered live records), each is held as stored, so the next write of its job
    writes no data again; with ``packed_min``, as :func:`with_data`."""
    for record in records:
        where = record.get(KEPT_FIELD)
        progress = record.get(PROGRESS_KEPT)
        if where or progress:
            with_data(record, partial(read, job_key(record["id"])), loads, packed_min)
            if kept is not None and where:
                kept.hold(record["id"], record["data"], where)
            if kept is not None and progress:
                kept.progress.hold(record["id"], record[PROGRESS_FIELD],
                                   ProgressClaim(*progress))
                kept.active = True


def data_back(read: Callable[[bytes, Any], Row | None], loads: Callable[[bytes], Any],
              record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (of a listing) with its data back in place when it was kept apart,
    left encoded as :class:`~.value_pieces.Packed` whatever its size, for the caller to
    decode a slice at a time (a progress message kept apart put back too)."""
    if record.get(KEPT_FIELD) or record.get(PROGRESS_KEPT):
        with_data(record, partial(read, job_key(record["id"])), loads, 0)
    return record


def with_data(record: dict[str, Any], read: Callable[[Any], Row | None],
              loads: Callable[[bytes], Any], packed_min: int | None = None
              ) -> dict[str, Any]:
    """``record`` with its data back in place when it was kept apart; ``read`` gives
    the row (all pieces, for rows written ahead), given the record's KEPT_FIELD value.
    With ``packed_min``, an encoded row at least that long is put back as
    :class:`~.value_pieces.Packed`, for the caller to decode. A row missing is a broken
    store: it raises, naming the job. A progress message kept apart is put back too."""
    progress = record.pop(PROGRESS_KEPT, None)
    if progress is not None:
        raw = read([TEXT, progress[0], progress[1]])  # (its pieces written ahead)
        if raw is None:
            raise RuntimeError(f"job {record.get('id')!r}: its progress rows are missing")
        record[PROGRESS_FIELD] = str(raw, "utf-8")
    kept = record.pop(KEPT_FIELD, False)
    if kept:
        raw = read(kept)
        if raw is None:
            raise RuntimeError(f"job {record.get('id')!r}: its data row is missing")
        text = kept == TEXT or (type(kept) is list and kept[0] == TEXT)
        if text:
            record["data"] = str(raw, "utf-8")
        elif packed_min is not None and len(raw) >= packed_min:
            record["data"] = Packed(bytes(raw))
        else:
            record["data"] = loads(bytes(raw))["d"]
    return record
