"""The backend-neutral write operations: what validate_writes accepts, refuses and hands
an adapter, with no LMDB layout involved."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage.ops import (
    DeleteJob,
    FinishJob,
    PutDepOutcome,
    PutJob,
    PutQueueMeta,
    validate_writes,
)


def rec(job_id: str, **attrs: Any) -> dict[str, Any]:
    return JobRecord(id=job_id, queue=attrs.pop("queue", "q"), **attrs).to_record()


def test_every_operation_typed_in_order_across_batches() -> None:
    first, second = Writes(), Writes()
    live = rec("a", state="active")
    done = rec("b", state="completed", created_at=-7)
    first.put_job(live)
    first.finish_job(done, True, None)
    first.finish_job(rec("c", state="failed"), False, "ignored")
    second.delete_job("d")
    second.put_queue_meta("q", {"paused": True})
    second.put_dep_outcome("p", "c", {"r": 1})
    assert validate_writes([first, Writes(), second]) == [
        PutJob("a", live),
        FinishJob("b", "q", "completed", -7, done, True, None),
        FinishJob("c", "q", "failed", 0, rec("c", state="failed"), False, None),
        DeleteJob("d"),
        PutQueueMeta("q", {"paused": True}),
        PutDepOutcome("p", "c", {"r": 1}),
    ]
    assert type(validate_writes([first])[0]) is PutJob  # built in C, still the class


@pytest.mark.parametrize(("call", "message"), [
    (lambda w: w.put_job(rec("x", state="completed")), "put_job of a job in state 'completed'"),
    (lambda w: w.put_job(rec("")), "job id must be a non-empty string"),
    (lambda w: w.finish_job(rec("x", state="active"), False), "finish_job of a job in state"),
    (lambda w: w.finish_job(rec("x", state="failed", queue=""), False), "queue name must be"),
    (lambda w: w.finish_job(rec("", state="failed"), False), "job id must be"),
    (lambda w: w.delete_job(""), "job id must be"),
    (lambda w: w.delete_job(7), "job id must be"),
    (lambda w: w.put_queue_meta("bad\x00queue", {}), "contain no NUL"),
    (lambda w: w.put_dep_outcome("p", "", {}), "job id must be"),
    (lambda w: w.put_dep_outcome("p", "c", ["x"]), "must be a dict"),
    (lambda w: w.ops.append(("drop_everything",)), "unknown storage operation"),
])
def test_bad_operations_raise_value_error(call: Any, message: str) -> None:
    w = Writes()
    w.put_job(rec("fine"))
    call(w)
    with pytest.raises(ValueError, match=message):
        validate_writes([w])


def test_no_lmdb_layout_is_needed() -> None:
    # a store with another layout (SQL) imports this module and the port, nothing of LMDB
    code = ("import sys, trioqueue.storage.ops, trioqueue.storage.port\n"
            "bad = {'lmdb', 'msgpack', 'cbor2', 'trioqueue.storage.keys'} & set(sys.modules)\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_writes_keep_the_queue_whose_lease_they_need() -> None:
    """A Writes names at most one queue (its commit is fenced by that queue's lease in
    a cluster): extending keeps it, takes it from writes of a queue, and refuses to mix
    two queues' writes."""
    mine = Writes("q")
    mine.put_job(rec("a"))
    records = Writes()
    records.put_broker_record("cron", "nightly", {"every": 5})
    mine.extend(records)
    assert mine.queue == "q" and len(mine) == 2
    records.extend(mine)
    assert records.queue == "q" and len(records) == 3
    other = Writes("other")
    other.put_job(rec("b", queue="other"))
    with pytest.raises(ValueError, match="queue 'q' with writes of queue 'other'"):
        mine.extend(other)
    assert len(mine) == 2  # nothing appended
    assert Writes().queue is None
