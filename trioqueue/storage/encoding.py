"""The typed write operations of :mod:`.ops`, encoded into LMDB's keys and values.

Both key-value adapters (:mod:`.lmdb.store`, :mod:`.memory`) apply exactly what
:func:`encode_ops` gives, so they store the same bytes; the layouts themselves are in
:mod:`.keys`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .kept_data import (
    KEEP_DATA_BYTES,
    AheadClaim,
    KeptData,
    broker_row,
    kept_record,
    outcome_row,
    result_row,
)
from .keys import (
    MAX_KEY_BYTES,
    U16,
    broker_key,
    dep_key,
    encode_value,
    finished_idx_key,
    finished_prefix,
    queue_key,
    too_long,
)
from .ops import DeleteJob, FinishJob, Op, PutBrokerRecord, PutDepOutcome, PutJob, PutQueueMeta

# Encoded operations, the same for both adapters:
#   (OP_PUTS, [(job key, V(record)), ...])  a run of consecutive put_job operations
#   (OP_FINISH, job key, V(record), finished_idx key, counts key, V(result) | None)
#   (OP_DELETE, job key, deps prefix | None)
#   (OP_META, queue key, V(meta))
#   (OP_DEP, deps key, V(outcome))
#   (OP_DEP, deps key, V(stub), row key, pieces)  an outcome row whose result was
#                                            written ahead (kept_outcomes.py)
#   (OP_DATA, job key, row)                 a large record's data, kept apart
#   (OP_CLAIM, job key, row key, pieces)    a record takes rows written ahead
#   (OP_BROKER, broker key, V(record) | None)  None: the row is deleted
#   (OP_PROGRESS, job key, row key, pieces)  a record takes a progress message's rows
#                                            written ahead (row key b"": its claim goes)
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
OP_CLAIM = 6
OP_BROKER = 7
OP_PROGRESS = 8


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
    # Whether kept data may be in play (a job's data held or written ahead, or a large
    # record met in this call): else a record is only measured once encoded
    keeping = kept is not None
    if kept is None:
        kept = KeptData()  # (never staged: keeping is False)
    active = kept.active
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
                raise too_long("job id", key)
            if not active:
                value = dumps(record)
                if keeping and len(value) >= KEEP_DATA_BYTES:
                    value = _kept_value(job_id, key, record, kept, append, value)
                    puts = None  # an OP_DATA may have come in between
                    active = True
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
            if active:
                value = _kept_value(job_id, jkey, record, kept, append, None)
                kept.stage(job_id, None)  # its last write, normally (see kept_data)
                kept.progress.forget(job_id)
            else:
                value = dumps(record)
                if keeping and len(value) >= KEEP_DATA_BYTES:
                    value = _kept_value(job_id, jkey, record, kept, append, value)
                    kept.stage(job_id, None)
                    active = True
            append((OP_FINISH, jkey, value,
                    finished_idx_key(prefix, created_at, jkey),  # checks the length
                    prefix, result_row(kept, result) if has_result else None))
        elif cls is DeleteJob:
            jkey = op[0].encode("utf-8")
            if len(jkey) > MAX_KEY_BYTES:
                raise too_long("job id", jkey)
            if active:
                kept.stage(op[0], None)
                kept.progress.forget(op[0])
            # the deps prefix inline (see dep_scan_prefix): None when no row can fit
            dep_prefix = U16.pack(len(jkey)) + jkey
            append((OP_DELETE, jkey, dep_prefix if len(dep_prefix) < MAX_KEY_BYTES else None))
        else:
            append(_encode_other(op, kept))
    return out


def _kept_value(job_id: str, key: bytes, record: dict[str, Any], kept: KeptData,
                append: Callable[[tuple[Any, ...]], None], value: bytes | None) -> bytes:
    """:func:`~.kept_data.kept_record`'s value, its OP_DATA or OP_CLAIM appended first
    (and its OP_PROGRESS, when its progress message is or was kept apart)."""
    if kept.progress.active:
        apart, claim = kept.progress.apart(job_id, record)
        if claim is not None:
            append((OP_PROGRESS, key, claim.row_key, claim.pieces))
        if apart is not record:
            record, value = apart, None
        kept.staging = kept.staging or kept.progress.staging
    value, row = kept_record(job_id, record, kept, encode_value, value)
    if type(row) is AheadClaim:
        append((OP_CLAIM, key, row.row_key, row.pieces))
    elif row is not None:
        append((OP_DATA, key, row))
    return value


def _encode_other(op: Op, kept: KeptData) -> tuple[Any, ...]:
    if isinstance(op, PutQueueMeta):
        return (OP_META, queue_key(op.queue), encode_value(op.meta))
    if isinstance(op, PutDepOutcome):
        outcome = op.outcome
        taken = kept.outcomes.take(outcome) if kept.outcomes.ahead else None
        if taken is not None:
            kept.staging = True
            stub, claim = taken
            return (OP_DEP, dep_key(op.parent_id, op.child_id), stub, *claim)
        row = outcome_row(kept, outcome) if kept.results else None
        return (OP_DEP, dep_key(op.parent_id, op.child_id),
                encode_value(outcome) if row is None else row)
    if isinstance(op, PutBrokerRecord):
        value = None if op.value is None else (
            broker_row(kept, op.value) or encode_value(op.value))
        return (OP_BROKER, broker_key(op.kind, op.name), value)
    raise TypeError(f"not a storage operation: {op!r}")
