"""LMDB's byte layout in one module: every key layout and the value codecs (the encoder
that turns the typed operations of :mod:`.ops` into these keys and values is
:mod:`.encoding`).

Both adapters (:mod:`.lmdb.store` and :mod:`.memory`) store exactly these bytes, so that
ordering, key limits and sizes are the same in both. Which operations are valid is not
decided here but in :mod:`.ops`, which a store with another layout uses alone.

LMDB named sub-databases (a fixed handful; the queue name lives inside the key):

=================  ===============================================  ====================
sub-database       key                                              value
=================  ===============================================  ====================
``live``           job id (utf-8)                                   V(record)
``finished``       job id (utf-8)                                   V(record)
``finished_idx``   queue + NUL + state byte + createdAt + job id    ``b""``
``results``        job id (utf-8)                                   V({"r": result})
``queue_meta``     queue (utf-8)                                    V(meta)
``counts``         queue + NUL + state byte                         u64 big-endian
``deps``           u16 len(parent id) + parent id + child id        V(outcome)
``data``           job id (utf-8)                                   V({"d": data}) | text
``ahead``          row key (16 random bytes) + u32 piece index      UTF-8 bytes
``ahead_claims``   job id (utf-8)                                   row key + u32 pieces
``progress_claims`` job id (utf-8)                                  row key + u32 pieces
``outcome_claims`` a ``deps`` key                                    row key + u32 pieces
``broker``         kind (utf-8) + NUL + name (utf-8)                V(record)
``meta``           ``b"schema"``                                    u32 big-endian
=================  ===============================================  ====================

* ``broker`` holds the broker's own registries (cron schedules, webhooks), one row per
  record; a store without the sub-database (written before it existed) has none.

* V(x) is msgpack, or CBOR where msgpack cannot hold the value (see encode_value).
* ``live`` holds jobs in a live state (queued, active, waiting-children); ``finished``
  holds completed and failed jobs.
* The state byte is ``b"c"`` (completed) or ``b"f"`` (failed). ``createdAt`` (int epoch
  ms) is a u64 big-endian with the sign bit flipped, so negative times sort first and
  a bytewise cursor walk gives (createdAt, id) order; UTF-8 byte order equals code point
  order, so ties are broken exactly as Python's ``str`` comparison would.
* The ``finished_idx`` prefix ``queue + NUL + state byte`` is also the ``counts`` key.
* ``results`` wraps the result in ``{"r": ...}`` so a stored ``None`` differs from "no
  result" even to a reader that only decodes values.
* ``deps`` holds one row per (parent, child) of a flow: the child's outcome, written in
  the same commit as the child's own state change, read back by the parent, and deleted
  with the parent's record. The ids are UTF-8 job keys; the parent's is preceded by its
  byte length (u16 big-endian) because a job id may contain any character, NUL
  included, so no separator could end it: without the length, parent ``"a"``'s range
  would also hold the rows of parent ``"a1"``. With it, ``u16 len + parent id`` is
  exactly one parent's prefix, and a cursor walk gives its children in code point
  order. Adding this sub-database did not change the schema: LMDB creates it when an
  older data directory is opened, empty, which is exactly its content there.
* ``data`` holds the data of a job whose record was large (see :mod:`.kept_data`):
  such a record has no ``data`` and ``dataKept`` set, and is rewritten without the
  data at later state changes. Deleted with the job. Schema 3: a version-2 store has
  no such row and is read as it is (its version is raised when it is opened, so an
  older trioqueue does not read records whose data it would not find).
* ``ahead`` holds long data strings written before their job existed, a piece a
  transaction (``LmdbStorage.write_ahead``), so that no step writes all of one; the
  record's commit adds its ``ahead_claims`` row, deleted with the job along with the
  pieces. Pieces no claim points to (a push refused, or a crash before its record) are
  deleted when the store opens.
* ``progress_claims``: a job's long progress message, written ahead into ``ahead`` the
  same way, claimed by its record (which then names the rows in ``progressKept`` in
  place of its ``progressMessage``, see :mod:`.kept_progress`); replaced by the next
  progress, deleted with the job along with the pieces. Created empty when an older
  data directory is opened.
* ``outcome_claims``: a child's large result copied for its parent, written ahead into
  ``ahead`` the same way, claimed by the outcome row of the same ``deps`` key (which
  then holds its other fields and ``resultKept``, see :mod:`.kept_outcomes`); deleted
  with the parent's rows, or when the pair's row is written again. Schema 4: an older
  trioqueue would show a job without its long progress message and a parent without
  its child's result, so it refuses a store of version 4 (a version-2 or 3 store is
  raised to 4 when opened).

Limits: LMDB keys are at most :data:`MAX_KEY_BYTES` (511) bytes. Queue names are ASCII
``[A-Za-z0-9_.:-]`` and job ids at most 256 characters, both checked by the broker
before anything reaches storage; but a custom job id may be arbitrary Unicode (up to
4 bytes per character), so every encoder here checks the final key length and raises
:class:`ValueError` with a clear message rather than letting LMDB fail. Queue names must
be non-empty and free of NUL (NUL separates the queue from the state byte). A ``deps``
key holds two job ids, so a pair whose UTF-8 lengths add up to more than
:data:`MAX_DEP_IDS_BYTES` (509) cannot be stored: the broker must refuse such a parent and
child pair when the flow is added, since at commit time the ValueError stops the broker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import cbor2
import msgpack

from .port import FinishedCursor, FinishedPage
from .positions import check_page_limit

# --- sub-database names ------------------------------------------------------------

DB_LIVE = b"live"
DB_FINISHED = b"finished"
DB_FINISHED_IDX = b"finished_idx"
DB_RESULTS = b"results"
DB_QUEUE_META = b"queue_meta"
DB_COUNTS = b"counts"
DB_DEPS = b"deps"
DB_DATA = b"data"
DB_AHEAD = b"ahead"
DB_AHEAD_CLAIMS = b"ahead_claims"
DB_PROGRESS_CLAIMS = b"progress_claims"
DB_OUTCOME_CLAIMS = b"outcome_claims"
DB_BROKER = b"broker"
DB_META = b"meta"
ALL_DBS = (
    DB_LIVE,
    DB_FINISHED,
    DB_FINISHED_IDX,
    DB_RESULTS,
    DB_QUEUE_META,
    DB_COUNTS,
    DB_DEPS,
    DB_DATA,
    DB_AHEAD,
    DB_AHEAD_CLAIMS,
    DB_PROGRESS_CLAIMS,
    DB_OUTCOME_CLAIMS,
    DB_BROKER,
    DB_META,
)

SCHEMA_KEY = b"schema"
# 2: values in msgpack, CBOR fallback; 3: large data kept apart; 4: progress messages
# and children's results for their parents kept apart (records and outcome rows that
# an older trioqueue would read without them)
SCHEMA_VERSION = 4
#: The versions this trioqueue opens (a 2 or 3 is raised to 4 when opened).
READABLE_SCHEMAS = (2, 3, 4)

MAX_KEY_BYTES = 511  # LMDB's compile-time default (mdb_env_get_maxkeysize)

U16 = struct.Struct(">H")
_DEP_LEN = U16.size
MAX_DEP_IDS_BYTES = MAX_KEY_BYTES - _DEP_LEN  # parent id + child id, UTF-8, in a deps key

STATE_BYTES: dict[str, bytes] = {"completed": b"c", "failed": b"f"}
BYTE_STATES: dict[int, str] = {b"c"[0]: "completed", b"f"[0]: "failed"}

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_SIGN = 1 << 63
CREATED_LEN = 8


# --- keys ---------------------------------------------------------------------------


def too_long(what: str, key: bytes) -> ValueError:
    return ValueError(
        f"{what} key is {len(key)} bytes, over LMDB's {MAX_KEY_BYTES}-byte limit "
        f"(job ids and queue names must be validated by the broker before storage)"
    )


def job_key(job_id: str) -> bytes:
    """Key of ``live``, ``finished`` and ``results``: the job id in UTF-8."""
    key = job_id.encode("utf-8")
    if not key or len(key) > MAX_KEY_BYTES:
        if not key:
            raise ValueError("job id must be a non-empty string")
        raise too_long("job id", key)
    return key


def decode_job_key(key: bytes) -> str:
    return key.decode("utf-8")


def queue_key(queue: str) -> bytes:
    """Key of ``queue_meta``: the queue name in UTF-8."""
    key = queue.encode("utf-8")
    if not key or 0 in key or len(key) > MAX_KEY_BYTES:  # (0: a memchr, see codec.py)
        if len(key) > MAX_KEY_BYTES:
            raise too_long("queue name", key)
        raise ValueError(f"queue name must be non-empty and contain no NUL: {queue!r}")
    return key


def broker_key(kind: str, name: str) -> bytes:
    """Key of ``broker``: the registry's kind, NUL, the record's name (UTF-8)."""
    key = kind.encode("utf-8") + b"\x00" + name.encode("utf-8")
    if len(key) > MAX_KEY_BYTES:
        raise too_long("broker record", key)
    return key


def decode_broker_key(key: bytes) -> tuple[str, str]:
    kind, _, name = key.partition(b"\x00")
    return kind.decode("utf-8"), name.decode("utf-8")


def decode_broker_rows(rows: Iterable[tuple[bytes, bytes]]
                       ) -> dict[str, dict[str, dict[str, Any]]]:
    """``Recovered.broker_records`` (kind -> {name: record}) from ``broker`` rows."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key, value in rows:
        kind, name = decode_broker_key(key)
        out.setdefault(kind, {})[name] = decode_value(value)
    return out


def decode_queue_key(key: bytes) -> str:
    return key.decode("utf-8")


def finished_prefix(queue: str, state: str) -> bytes:
    """``queue + NUL + state byte``: the ``finished_idx`` prefix and the ``counts`` key."""
    try:
        state_byte = STATE_BYTES[state]
    except KeyError:
        raise ValueError(f"not a finished state: {state!r}") from None
    key = queue_key(queue) + b"\x00" + state_byte
    if len(key) > MAX_KEY_BYTES:
        raise too_long("finished prefix", key)
    return key


count_key = finished_prefix


def decode_count_key(key: bytes) -> tuple[str, str]:
    """``counts`` key -> ``(queue, "completed" | "failed")``."""
    return key[:-2].decode("utf-8"), BYTE_STATES[key[-1]]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``.

    A finished prefix ends in ``b"c"`` or ``b"f"``, so incrementing the last byte never
    carries.
    """
    return prefix[:-1] + bytes((prefix[-1] + 1,))


def encode_created(created_at: int) -> bytes:
    """createdAt (epoch ms, may be negative) as 8 bytes that sort like the integer."""
    value = int(created_at) + _SIGN
    if not 0 <= value < (1 << 64):
        raise ValueError(f"createdAt out of the signed 64-bit range: {created_at!r}")
    return _U64.pack(value)


def decode_created(raw: bytes) -> int:
    return _U64.unpack(raw)[0] - _SIGN


def finished_idx_key(prefix: bytes, created_at: int, jkey: bytes) -> bytes:
    """``finished_idx`` key from a :func:`finished_prefix` and a :func:`job_key`."""
    key = prefix + encode_created(created_at) + jkey
    if len(key) > MAX_KEY_BYTES:
        raise too_long("finished index", key)
    return key


def idx_job_id(key: bytes, prefix_len: int) -> str:
    """The job id at the end of a ``finished_idx`` key whose prefix is ``prefix_len`` long."""
    return key[prefix_len + CREATED_LEN :].decode("utf-8")


def idx_seek_key(prefix: bytes, after: FinishedCursor) -> bytes:
    """The smallest ``finished_idx`` key of ``prefix`` past the cursor ``after``.

    ``after`` names the last entry of a page, ``(createdAt, job id)``; that entry may be
    gone since, so this is not a stored key: the entry's key plus a NUL byte, which
    sorts right after it and before any longer key.
    """
    created, job_id = after
    return finished_idx_key(prefix, created, job_key(job_id)) + b"\x00"


def idx_page(keys: list[bytes], prefix_len: int, limit: int) -> FinishedPage:
    """A :class:`~trioqueue.storage.port.FinishedPage` of ``finished_idx`` keys read
    with ``limit``: a shorter read was the last page."""
    cut = prefix_len + CREATED_LEN
    ids = [key[cut:].decode("utf-8") for key in keys]
    if len(keys) < limit:
        return FinishedPage(ids, None)
    last = keys[-1]
    return FinishedPage(ids, (decode_created(last[prefix_len:cut]), ids[-1]))


def split_finished_idx_key(key: bytes) -> tuple[str, str, int, str]:
    """``finished_idx`` key -> ``(queue, state, createdAt, job id)``."""
    nul = key.index(b"\x00")
    created = key[nul + 2 : nul + 2 + CREATED_LEN]
    return (
        key[:nul].decode("utf-8"),
        BYTE_STATES[key[nul + 1]],
        decode_created(created),
        key[nul + 2 + CREATED_LEN :].decode("utf-8"),
    )


def record_index_keys(record: dict[str, Any], jkey: bytes) -> tuple[bytes, bytes]:
    """``(finished_idx key, counts key)`` of a finished record stored under ``jkey``."""
    prefix = finished_prefix(record["queue"], record["state"])
    return finished_idx_key(prefix, record.get("createdAt") or 0, jkey), prefix


def lookup_job_key(job_id: str) -> bytes | None:
    """The job key to read, or None when no such key can ever have been stored."""
    try:
        return job_key(job_id)
    except (ValueError, AttributeError):
        return None


def dep_prefix(parent_id: str) -> bytes:
    """``u16 len + parent job key``: the prefix of every ``deps`` row of one parent.

    Not itself a stored key, so not checked against :data:`MAX_KEY_BYTES`: a parent may
    have an id too long for any row (see :func:`dep_scan_prefix`) and still be deleted.
    """
    jkey = job_key(parent_id)
    return U16.pack(len(jkey)) + jkey


def dep_key(parent_id: str, child_id: str) -> bytes:
    """``deps`` key of one (parent, child) row: :func:`dep_prefix` + child job key."""
    key = dep_prefix(parent_id) + job_key(child_id)
    if len(key) > MAX_KEY_BYTES:
        raise too_long("dependency (parent id + child id)", key)
    return key


def dep_scan_prefix(jkey: bytes) -> bytes | None:
    """The ``deps`` prefix of the parent stored under ``jkey``, or None if it has no rows.

    A row key is the prefix plus at least one byte, so a prefix of :data:`MAX_KEY_BYTES`
    bytes or more can own no row; returning None then spares the adapters a seek that
    can find nothing, with a key longer than any LMDB stores.
    """
    prefix = U16.pack(len(jkey)) + jkey
    return prefix if len(prefix) < MAX_KEY_BYTES else None


def dep_key_prefix(key: bytes) -> bytes:
    """The :func:`dep_prefix` (the parent's part) of a ``deps`` key."""
    return key[: _DEP_LEN + U16.unpack_from(key)[0]]


def dep_child_id(key: bytes) -> str:
    """The child id of a ``deps`` key (the parent's length says where it starts)."""
    return key[_DEP_LEN + U16.unpack_from(key)[0] :].decode("utf-8")


def split_dep_key(key: bytes) -> tuple[str, str]:
    """``deps`` key -> ``(parent id, child id)``."""
    cut = _DEP_LEN + U16.unpack_from(key)[0]
    return key[_DEP_LEN:cut].decode("utf-8"), key[cut:].decode("utf-8")


def lookup_dep_prefix(parent_id: str) -> bytes | None:
    """The ``deps`` prefix to read, or None when that parent can own no row."""
    jkey = lookup_job_key(parent_id)
    return None if jkey is None else dep_scan_prefix(jkey)


def lookup_prefix(queue: str, state: str) -> bytes | None:
    """The finished prefix to read (None for an unstorable queue name).

    An unknown ``state`` is a caller bug and raises :class:`ValueError`.
    """
    if state not in STATE_BYTES:
        raise ValueError(f"not a finished state: {state!r}")
    try:
        return finished_prefix(queue, state)
    except ValueError:
        return None


def lookup_page_prefix(queue: str, state: str, limit: int) -> bytes | None:
    """:func:`lookup_prefix` for a page of ids, whose ``limit`` must be positive."""
    check_page_limit(limit)
    return lookup_prefix(queue, state)


#: The length of an ``ahead`` row key (random bytes: rows exist before their job does).
AHEAD_ROW_KEY_BYTES = 16


def ahead_piece_key(row_key: bytes, index: int) -> bytes:
    """Key of one piece of a string written ahead (``ahead``); pieces sort in order."""
    return row_key + _U32.pack(index)


def encode_claim(row_key: bytes, pieces: int) -> bytes:
    """An ``ahead_claims`` value: the row key and how many pieces it has."""
    return row_key + _U32.pack(pieces)


def decode_claim(raw: bytes) -> tuple[bytes, int]:
    return bytes(raw[:AHEAD_ROW_KEY_BYTES]), _U32.unpack(raw[AHEAD_ROW_KEY_BYTES:])[0]


# --- values -------------------------------------------------------------------------

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def encode_value(value: Any) -> bytes:
    """msgpack (twice as fast as CBOR both ways), CBOR for what msgpack cannot hold.

    Values are always maps, and a msgpack map's first byte (0x80-0x8f, 0xde, 0xdf) never
    starts a CBOR map (0xa0-0xbb, 0xbf), so :func:`decode_value` tells them apart. The
    CBOR fallback keeps integers beyond 64 bits, which a CBOR client may send as data.
    """
    try:
        return _pack(value)
    except (OverflowError, TypeError, ValueError):
        return cbor2.dumps(value)


def decode_value(raw: bytes) -> Any:
    first = raw[0] if raw else 0
    if 0xA0 <= first <= 0xBB or first == 0xBF:
        return cbor2.loads(raw)
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def encode_result(result: Any) -> bytes:
    return encode_value({"r": result})


def decode_result(raw: bytes) -> Any:
    return decode_value(raw)["r"]


def encode_count(n: int) -> bytes:
    return _U64.pack(n)


def decode_count(raw: bytes) -> int:
    return _U64.unpack(raw)[0]


def encode_schema(version: int) -> bytes:
    return _U32.pack(version)


def decode_schema(raw: bytes) -> int:
    return _U32.unpack(raw)[0]
