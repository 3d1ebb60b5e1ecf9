"""pg_plan: a batch's operations reduced to the rows they leave, table by table (no
server needed; tests/storage/test_pg_store.py checks the same against PostgreSQL and the
reference model)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage import keys as K
from trioqueue.storage.ops import validate_writes
from trioqueue.storage.pg.plan import BatchPlan, plan_batch, plan_cluster


def rec(job_id: str, state: str = "queued", created: int = 1) -> dict[str, Any]:
    return JobRecord(id=job_id, queue="q", state=state, created_at=created).to_record()


def plan(*calls: tuple[Any, ...]) -> BatchPlan:
    writes = Writes()
    for name, *args in calls:
        getattr(writes, name)(*args)
    return plan_batch(validate_writes([writes]))


def key(job_id: str) -> bytes:
    return K.job_key(job_id)


def test_an_empty_batch_plans_nothing() -> None:
    assert not plan()


def test_the_last_word_on_a_job_is_what_is_written() -> None:
    p = plan(("put_job", rec("a")), ("finish_job", rec("a", "completed", 5), True, 7),
             ("put_job", rec("b")), ("delete_job", "b"),
             ("delete_job", "c"), ("put_job", rec("c", "active")))
    assert set(p.live_put) == {key("c")}
    assert K.decode_value(p.live_put[key("c")][1])["state"] == "active"
    assert p.live_delete == {key("a"), key("b")}
    queue, state, created, record, result = p.finished_put[key("a")]
    assert (queue, state, created) == ("q", "completed", 5)
    assert K.decode_value(record)["id"] == "a" and K.decode_result(result) == 7
    # c was deleted (every generation) before it was put again; b is gone for good
    assert p.finished_delete == {key("b"), key("c")}


def test_a_finish_without_a_result_clears_an_earlier_one() -> None:
    p = plan(("finish_job", rec("a", "failed"), False, None))
    assert p.finished_put[key("a")][4] is None
    none_is_a_result = plan(("finish_job", rec("a", "completed"), True, None))
    assert K.decode_result(none_is_a_result.finished_put[key("a")][4]) is None


def test_a_parents_deletion_drops_only_the_outcomes_written_before_it() -> None:
    p = plan(("put_dep_outcome", "p", "early", {"r": 1}), ("delete_job", "p"),
             ("put_dep_outcome", "p", "late", {"r": 2}),
             ("put_dep_outcome", "other", "c", {"r": 3}))
    assert p.outcomes_cleared == {key("p")}
    assert {parent: set(rows) for parent, rows in p.outcomes_put.items()} == {
        key("p"): {key("late")}, key("other"): {key("c")}}


def test_queue_meta_and_broker_records_keep_their_last_value() -> None:
    p = plan(("put_queue_meta", "q", {"paused": True}), ("put_queue_meta", "q", {"paused": False}),
             ("put_broker_record", "cron", "a", {"every": 1}),
             ("put_broker_record", "cron", "a", None),
             ("put_broker_record", "cron", "b", None),
             ("put_broker_record", "cron", "b", {"every": 2}))
    assert {q: K.decode_value(m) for q, m in p.queue_meta.items()} == {"q": {"paused": False}}
    assert p.broker_delete == {K.broker_key("cron", "a")}
    assert {k: K.decode_value(v) for k, v in p.broker_put.items()} == {
        K.broker_key("cron", "b"): {"every": 2}}


def test_an_id_no_key_can_hold_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError):
        plan(("put_job", rec("ok")), ("put_job", rec("é" * 300)))


def test_a_batchs_custom_id_claims_keep_the_last_word_on_each_id() -> None:
    """A claim settled (it goes) and a flow's claim held by its message: the last of
    the batch's writes on an id decides, as for every other row."""
    first, second = Writes("qa"), Writes(None)
    first.cluster.claims_done.extend([("x", "qa"), ("y", "qa")])
    second.cluster.claims_held.append(("y", "qr"))
    second.cluster.claims_done.append(("z", "qa"))
    rows = plan_cluster([first, Writes("qb"), second])
    assert rows is not None
    assert rows.claims_gone == {K.job_key("x"): "qa", K.job_key("z"): "qa"}
    assert rows.claims_held == {K.job_key("y"): "qr"}
    assert plan_cluster([Writes("qa")]) is None
