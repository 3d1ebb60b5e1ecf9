"""Every storage key layout in one module, plus the value codecs and the op encoder.

Both adapters (:mod:`.lmdb_store` and :mod:`.memory`) store exactly these bytes, so that
ordering, validation and size limits are the same in both.

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
from collections.abc import Sequence
from typing import Any

import cbor2
import msgpack

from ..core.job import FINISHED_STATES, LIVE_STATES, QUEUED
from ..core.writes import (
    DELETE_JOB,
    FINISH_JOB,
    PUT_DEP_OUTCOME,
    PUT_JOB,
    PUT_QUEUE_META,
    Writes,
)

# --- sub-database names ------------------------------------------------------------

DB_LIVE = b"live"
DB_FINISHED = b"finished"
DB_FINISHED_IDX = b"finished_idx"
DB_RESULTS = b"results"
DB_QUEUE_META = b"queue_meta"
DB_COUNTS = b"counts"
DB_DEPS = b"deps"
DB_META = b"meta"
ALL_DBS = (
    DB_LIVE,
    DB_FINISHED,
    DB_FINISHED_IDX,
    DB_RESULTS,
    DB_QUEUE_META,
    DB_COUNTS,
    DB_DEPS,
    DB_META,
)

SCHEMA_KEY = b"schema"
SCHEMA_VERSION = 2  # 2: values in msgpack, CBOR fallback

MAX_KEY_BYTES = 511  # LMDB's compile-time default (mdb_env_get_maxkeysize)

_U16 = struct.Struct(">H")
_DEP_LEN = _U16.size
MAX_DEP_IDS_BYTES = MAX_KEY_BYTES - _DEP_LEN  # parent id + child id, UTF-8, in a deps key

STATE_BYTES: dict[str, bytes] = {"completed": b"c", "failed": b"f"}
BYTE_STATES: dict[int, str] = {b"c"[0]: "completed", b"f"[0]: "failed"}

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_SIGN = 1 << 63
_CREATED_LEN = 8


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
    if not key or b"\x00" in key or len(key) > MAX_KEY_BYTES:
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
    return key[prefix_len + _CREATED_LEN :].decode("utf-8")


def split_finished_idx_key(key: bytes) -> tuple[str, str, int, str]:
    """``finished_idx`` key -> ``(queue, state, createdAt, job id)``."""
    nul = key.index(b"\x00")
    created = key[nul + 2 : nul + 2 + _CREATED_LEN]
    return (
        key[:nul].decode("utf-8"),
        BYTE_STATES[key[nul + 1]],
        decode_created(created),
        key[nul + 2 + _CREATED_LEN :].decode("utf-8"),
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
#   (OP_PUT, job key, CBOR(record))
#   (OP_FINISH, job key, CBOR(record), finished_idx key, counts key, CBOR result | None)
#   (OP_DELETE, job key, deps prefix | None)
#   (OP_META, queue key, CBOR(meta))
#   (OP_DEP, deps key, V(outcome))
# OP_DELETE carries the job's ``deps`` prefix (None when its id is too long to own a row,
# see dep_scan_prefix): the adapter deletes that whole key range, the job's rows as a
# parent, in the same transaction. Rows where the job is the child are not in the range
# (they belong to their parent and live as long as it does).
OP_PUT = 0
OP_FINISH = 1
OP_DELETE = 2
OP_META = 3
OP_DEP = 4


def encode_ops(batches: Sequence[Writes]) -> list[tuple[Any, ...]]:
    """Validate and encode every operation of ``batches``, in order.

    Everything that can fail on bad input (unknown op, bad state, overlong key, value
    CBOR cannot encode) fails here, before a transaction exists, so an adapter applying
    the result only meets storage errors, and a retry after growing the map needs no
    re-encoding.
    """
    out: list[tuple[Any, ...]] = []
    append = out.append
    dumps = encode_value
    for writes in batches:
        for op in writes.ops:
            name = op[0]
            if name == PUT_JOB:
                record = op[1]
                if record.get("state", QUEUED) not in LIVE_STATES:
                    raise ValueError(f"put_job of a job in state {record.get('state')!r}")
                append((OP_PUT, job_key(record["id"]), dumps(record)))
            elif name == FINISH_JOB:
                record, has_result, result = op[1], op[2], op[3]
                if record.get("state") not in FINISHED_STATES:
                    raise ValueError(f"finish_job of a job in state {record.get('state')!r}")
                jkey = job_key(record["id"])
                idx_key, ckey = record_index_keys(record, jkey)
                append(
                    (
                        OP_FINISH,
                        jkey,
                        dumps(record),
                        idx_key,
                        ckey,
                        encode_result(result) if has_result else None,
                    )
                )
            elif name == DELETE_JOB:
                jkey = job_key(op[1])
                append((OP_DELETE, jkey, dep_scan_prefix(jkey)))
            elif name == PUT_QUEUE_META:
                append((OP_META, queue_key(op[1]), dumps(op[2])))
            elif name == PUT_DEP_OUTCOME:
                outcome = op[3]
                if not isinstance(outcome, dict):
                    # decode_value tells msgpack from CBOR by a map's first byte only
                    raise ValueError(f"a dependency outcome must be a dict: {outcome!r}")
                append((OP_DEP, dep_key(op[1], op[2]), dumps(outcome)))
            else:
                raise ValueError(f"unknown storage operation: {name!r}")
    return out
