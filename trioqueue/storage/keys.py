"""LMDB's byte layout in one module: every key layout, the value codecs, and the
encoder that turns the typed operations of :mod:`.ops` into keys and values.

Both adapters (:mod:`.lmdb_store` and :mod:`.memory`) store exactly these bytes, so that
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
``data``           job id (utf-8)                                   V({"d": data})
``meta``           ``b"schema"``                                    u32 big-endian
=================  ===============================================  ====================

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
from collections.abc import Callable, Sequence
from typing import Any

import cbor2
import msgpack

from .kept_data import KEEP_DATA_BYTES, KeptData, kept_record
from .ops import DeleteJob, FinishJob, Op, PutDepOutcome, PutJob, PutQueueMeta
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
    DB_META,
)

SCHEMA_KEY = b"schema"
SCHEMA_VERSION = 3  # 2: values in msgpack, CBOR fallback; 3: large data kept apart
#: The versions this trioqueue opens (a 2 is raised to 3 when opened).
READABLE_SCHEMAS = (2, 3)

MAX_KEY_BYTES = 511  # LMDB's compile-time default (mdb_env_get_maxkeysize)

_U16 = struct.Struct(">H")
_DEP_LEN = _U16.size
MAX_DEP_IDS_BYTES = MAX_KEY_BYTES - _DEP_LEN  # parent id + child id, UTF-8, in a deps key

STATE_BYTES: dict[str, bytes] = {"completed": b"c", "failed": b"f"}
BYTE_STATES: dict[int, str] = {b"c"[0]: "completed", b"f"[0]: "failed"}

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_SIGN = 1 << 63
CREATED_LEN = 8


# --- keys ---------------------------------------------------------------------------


def _too_long(what: str, key: bytes) -> ValueError:
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
        raise _too_long("job id", key)
    return key


def decode_job_key(key: bytes) -> str:
    return key.decode("utf-8")


def queue_key(queue: str) -> bytes:
    """Key of ``queue_meta``: the queue name in UTF-8."""
    key = queue.encode("utf-8")
    if not key or 0 in key or len(key) > MAX_KEY_BYTES:  # (0: a memchr, see codec.py)
        if len(key) > MAX_KEY_BYTES:
            raise _too_long("queue name", key)
        raise ValueError(f"queue name must be non-empty and contain no NUL: {queue!r}")
    return key


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
        raise _too_long("finished prefix", key)
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
        raise _too_long("finished index", key)
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
    return _U16.pack(len(jkey)) + jkey


def dep_key(parent_id: str, child_id: str) -> bytes:
    """``deps`` key of one (parent, child) row: :func:`dep_prefix` + child job key."""
    key = dep_prefix(parent_id) + job_key(child_id)
    if len(key) > MAX_KEY_BYTES:
        raise _too_long("dependency (parent id + child id)", key)
    return key


def dep_scan_prefix(jkey: bytes) -> bytes | None:
    """The ``deps`` prefix of the parent stored under ``jkey``, or None if it has no rows.

    A row key is the prefix plus at least one byte, so a prefix of :data:`MAX_KEY_BYTES`
    bytes or more can own no row; returning None then spares the adapters a seek that
    can find nothing, with a key longer than any LMDB stores.
    """
    prefix = _U16.pack(len(jkey)) + jkey
    return prefix if len(prefix) < MAX_KEY_BYTES else None


def dep_key_prefix(key: bytes) -> bytes:
    """The :func:`dep_prefix` (the parent's part) of a ``deps`` key."""
    return key[: _DEP_LEN + _U16.unpack_from(key)[0]]


def dep_child_id(key: bytes) -> str:
    """The child id of a ``deps`` key (the parent's length says where it starts)."""
    return key[_DEP_LEN + _U16.unpack_from(key)[0] :].decode("utf-8")


def split_dep_key(key: bytes) -> tuple[str, str]:
    """``deps`` key -> ``(parent id, child id)``."""
    cut = _DEP_LEN + _U16.unpack_from(key)[0]
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


# --- operations ---------------------------------------------------------------------

# Encoded operations, the same for both adapters:
#   (OP_PUTS, [(job key, V(record)), ...])  a run of consecutive put_job operations
#   (OP_FINISH, job key, V(record), finished_idx key, counts key, V(result) | None)
#   (OP_DELETE, job key, deps prefix | None)
#   (OP_META, queue key, V(meta))
#   (OP_DEP, deps key, V(outcome))
#   (OP_DATA, job key, V({"d": data}))      a large record's data, kept apart
# Consecutive puts travel as one list so the LMDB adapter writes them with one
# ``putmulti`` call (in C) rather than one ``txn.put`` each; the order of all operations
# is kept. OP_DELETE carries the job's ``deps`` prefix (None when its id is too long to
# own a row, see dep_scan_prefix): the adapter deletes that whole key range, the job's
# rows as a parent, in the same transaction, and its ``data`` row. Rows where the job
# is the child are not in the range (they belong to their parent and live as long as
# it does). OP_DATA comes before the record that needs it.
OP_PUTS = 0
OP_FINISH = 1
OP_DELETE = 2
OP_META = 3
OP_DEP = 4
OP_DATA = 5


def encode_ops(ops: Sequence[Op], kept: KeptData | None = None) -> list[tuple[Any, ...]]:
    """LMDB's keys and values for operations already checked by
    :func:`~trioqueue.storage.ops.validate_writes`, in order.

    What the layout itself refuses (an overlong key, a createdAt beyond 64 bits) raises
    :class:`ValueError` here, before a transaction exists, so an adapter applying the
    result only meets storage errors, and a retry after growing the map needs no
    re-encoding. With ``kept``, a large record's data is kept apart (see
    :mod:`.kept_data`); the adapter settles ``kept`` once the result is committed.
    """
    out: list[tuple[Any, ...]] = []
    append = out.append
    dumps = encode_value
    puts: list[tuple[bytes, bytes]] | None = None
    # the prefix of the last finished range: a batch finishes jobs of few queues
    last_queue = last_state = ""
    prefix = b""
    # Any: the class is compared by identity below, which mypy does not narrow by
    typed: Sequence[Any] = ops
    for op in typed:
        # NamedTuples unpacked rather than read by attribute: one specialised opcode;
        # their class read once and compared by identity (validate_writes admits only
        # these five classes, no subclasses)
        cls = type(op)
        if cls is PutJob:
            job_id, record = op
            key = job_id.encode("utf-8")  # non-empty: validate_writes checked it
            if len(key) > MAX_KEY_BYTES:
                raise _too_long("job id", key)
            # (a long string as the data is known large before it is encoded: encoded
            # whole first, it would be encoded twice)
            if kept is None or not (kept.active or (
                    type(data := record.get("data")) is str and len(data) >= KEEP_DATA_BYTES)):
                value = dumps(record)
                if len(value) >= KEEP_DATA_BYTES and kept is not None:
                    value = _kept_value(job_id, key, record, kept, append, value)
                    puts = None  # an OP_DATA may have come in between
            else:
                value = _kept_value(job_id, key, record, kept, append, None)
                puts = None
            if puts is None:
                puts = []
                append((OP_PUTS, puts))
            puts.append((key, value))
            continue
        puts = None
        if cls is FinishJob:
            job_id, queue, state, created_at, record, has_result, result = op
            jkey = job_id.encode("utf-8")
            if queue != last_queue or state != last_state:
                prefix = finished_prefix(queue, state)
                last_queue, last_state = queue, state
            if kept is not None and kept.active:
                value = _kept_value(job_id, jkey, record, kept, append, None)
                kept.stage(job_id, None)  # its last write, normally (see kept_data)
            else:
                value = dumps(record)
                if len(value) >= KEEP_DATA_BYTES and kept is not None:
                    value = _kept_value(job_id, jkey, record, kept, append, value)
                    kept.stage(job_id, None)
            append((OP_FINISH, jkey, value,
                    finished_idx_key(prefix, created_at, jkey),  # checks the length
                    prefix, encode_result(result) if has_result else None))
        elif cls is DeleteJob:
            jkey = op[0].encode("utf-8")
            if len(jkey) > MAX_KEY_BYTES:
                raise _too_long("job id", jkey)
            if kept is not None and kept.active:
                kept.stage(op[0], None)
            # the deps prefix inline (see dep_scan_prefix): None when no row can fit
            dep_prefix = _U16.pack(len(jkey)) + jkey
            append((OP_DELETE, jkey, dep_prefix if len(dep_prefix) < MAX_KEY_BYTES else None))
        else:
            append(_encode_other(op))
    return out


def _kept_value(job_id: str, key: bytes, record: dict[str, Any], kept: KeptData,
                append: Callable[[tuple[Any, ...]], None], value: bytes | None) -> bytes:
    """:func:`~.kept_data.kept_record`'s value, its OP_DATA appended first if any."""
    value, data_value = kept_record(job_id, record, kept, encode_value, value)
    if data_value is not None:
        append((OP_DATA, key, data_value))
    return value


def _encode_other(op: Op) -> tuple[Any, ...]:
    if isinstance(op, PutQueueMeta):
        return (OP_META, queue_key(op.queue), encode_value(op.meta))
    if isinstance(op, PutDepOutcome):
        return (OP_DEP, dep_key(op.parent_id, op.child_id), encode_value(op.outcome))
    raise TypeError(f"not a storage operation: {op!r}")
