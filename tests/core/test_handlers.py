"""Every queue command handler meets arbitrary input with a reply or a CommandError.

Bad input must never crash a queue actor (a crash answers ``Internal server error`` and
rebuilds the queue). Hypothesis sends each handler maps of mixed plausible and wrong
values, against a queue that holds jobs in every live state and a small flow.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trioqueue.core.commands.context import Ctx
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.core.errors import Refused
from trioqueue.core.flows import parse_flow
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import JobWaiter, PullWaiter, Sliced
from trioqueue.testing.queue import QueueHarness

T0 = 1_764_000_000_000
IDS = ["done", "active", "waiting", "parent", "child", "ghost", ""]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(IDS), st.binary(max_size=4))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)
FIELDS = ["id", "ids", "queue", "jobs", "token", "tokens", "result", "results", "error",
          "delay", "priority", "lifo", "data", "name", "count", "timeout", "owner",
          "lockTtl", "duration", "durations", "progress", "message", "start", "end",
          "type", "childId", "parentId", "dependsOn", "customId", "jobId", "state",
          "limit", "offset", "config", "keepLogs", "level", "deduplicationId"]
# Plausible values, so that commands get past their first check and meet a wrong
# value deeper in (a random map alone rarely names a job that exists).
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from(IDS), "childId": st.sampled_from(IDS),
    "parentId": st.sampled_from(IDS), "queue": st.just("q"),
    "ids": st.lists(st.sampled_from(IDS), max_size=3),
    "type": st.sampled_from(["processed", "unprocessed", "failed", "ignored", "other"]),
    "token": st.sampled_from(["", "wrong"]), "delay": st.integers(-5, 5),
    "start": st.integers(-2, 3), "end": st.integers(-2, 3),
    "dependsOn": st.lists(st.sampled_from(IDS), max_size=3),
}
messages = st.builds(
    lambda plausible, wild: {**plausible, **wild},
    st.fixed_dictionaries({}, optional=PLAUSIBLE),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=4))


def populated() -> QueueHarness:
    h = QueueHarness()

    def push(**fields: Any) -> None:
        spec = parse_job_input({"data": {}, **fields}, custom_id_key="jobId")
        h.call("push", [spec], T0)

    push(jobId="done")
    push(jobId="active")
    h.call("pull", T0, count=1, owner=None, lock_ttl=30_000, conn=None)
    h.call("ack", "done", T0, has_result=True, result=1)
    push(jobId="active")  # a live custom id: a no-op
    h.call("pull", T0, count=1, owner="w", lock_ttl=30_000, conn=None)
    push(jobId="waiting")
    push(jobId="child")
    push(jobId="parent", dependsOn=["child"], childrenIds=["child"])
    return h


@pytest.mark.parametrize("cmd", sorted(QUEUE_HANDLERS))
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msg=messages)
def test_handlers_answer_or_refuse_any_input(cmd: str, msg: dict[str, Any]) -> None:
    h = populated()
    try:
        reply = QUEUE_HANDLERS[cmd](h.q, msg, Ctx(T0))
    except Refused as exc:
        assert isinstance(exc.message, str) and exc.message
        return
    if isinstance(reply, Sliced):  # long work: the actor runs it slice by slice
        reply.run()
        reply = reply.reply()
    assert isinstance(reply, (dict, PullWaiter, JobWaiter))
    h.commit()  # whatever it recorded must also be storable
    h.deliver_notices(T0)


@settings(max_examples=200, deadline=None)
@given(jobs=st.lists(st.dictionaries(
    st.sampled_from(["id", "queue", "input"]),
    st.one_of(values, st.dictionaries(st.sampled_from(
        ["name", "data", "parentId", "childrenIds", "dependsOn", "customId",
         "failParentOnFailure", "priority", "repeat"]), values, max_size=4))),
    max_size=4))
def test_pushf_validation_answers_or_refuses_any_input(jobs: list[Any]) -> None:
    try:
        items = parse_flow({"jobs": jobs})
    except Refused as exc:
        assert exc.message
    else:
        assert [item.id for item in items] == [job["id"] for job in jobs]


def test_a_large_pushb_is_admitted_in_slices_in_order() -> None:
    """A PUSHB of more than SLICE_JOBS plain jobs is long work: each slice admits the
    next SLICE_JOBS jobs (the actor commits it and lets other queues run), and the
    reply, after the last slice, lists every id in order."""
    from trioqueue.core.queue.slices import SLICE_JOBS

    h = QueueHarness()
    n = 2 * SLICE_JOBS + 7
    work = QUEUE_HANDLERS["PUSHB"](h.q, {"jobs": [{"data": i} for i in range(n)]}, Ctx(T0))
    assert isinstance(work, Sliced)
    admitted = []
    while not work.step():
        admitted.append(h.q.counts(T0)["waiting"])
        h.commit()
    # validated a slice at a time first (nothing admitted), then admitted in parts
    assert admitted == [0, 0, 0, 0, SLICE_JOBS, 2 * SLICE_JOBS]
    ids = work.reply()["ids"]
    assert len(ids) == len(set(ids)) == n == h.q.counts(T0)["waiting"]
    assert [h.q.jobs[i].data for i in ids] == list(range(n))
    # small batches stay one plain step
    small = QUEUE_HANDLERS["PUSHB"](h.q, {"jobs": [{"data": 1}] * SLICE_JOBS}, Ctx(T0))
    assert isinstance(small, dict)
    # a batch with custom ids is validated in slices, then admitted in one step
    named = [{"data": i, "customId": f"c{i}"} for i in range(SLICE_JOBS + 1)]
    work = QUEUE_HANDLERS["PUSHB"](h.q, {"jobs": named}, Ctx(T0))
    assert isinstance(work, Sliced)
    waiting = h.q.counts(T0)["waiting"]
    steps = 0
    while not work.step():
        steps += 1
        h.commit()
    assert steps == 3 and len(work.reply()["ids"]) == SLICE_JOBS + 1
    assert h.q.counts(T0)["waiting"] == waiting + SLICE_JOBS + 1
    assert h.q.jobs["c0"].data == 0


def test_a_large_pullb_leases_in_slices_in_priority_order() -> None:
    """A PULLB of more than SLICE_JOBS jobs leases the first SLICE_JOBS at once, then
    SLICE_JOBS more a step; the reply, after the last slice, holds every job in the
    order one step would have leased them, each with its own token and one lock
    deadline for all. A queue that runs out ends the work early; a small PULLB, or
    one the queue cannot fill past the first slice, stays one plain step."""
    from trioqueue.core.queue.slices import SLICE_JOBS

    h = QueueHarness()
    n = 3 * SLICE_JOBS + 7
    for i in range(n):  # priorities interleaved with creation order
        h.call("push", [parse_job_input({"data": i, "priority": i % 3},
                                        custom_id_key="jobId")], T0)
    expected = sorted(range(n), key=lambda i: (-(i % 3), i))
    msg = {"count": n - 2, "timeout": 0, "owner": "w", "lockTtl": 30_000}
    work = QUEUE_HANDLERS["PULLB"](h.q, msg, Ctx(T0))
    assert isinstance(work, Sliced)
    h.commit()
    active = [h.q.counts(T0)["active"]]
    while not work.step():
        active.append(h.q.counts(T0)["active"])
        h.commit()
    assert active == [SLICE_JOBS, 2 * SLICE_JOBS, 3 * SLICE_JOBS]
    reply = work.reply()
    assert [job["data"] for job in reply["jobs"]] == expected[:n - 2]
    assert len(set(reply["tokens"])) == n - 2
    assert len({h.q.leases.locks[job["id"]].expires_at for job in reply["jobs"]}) == 1
    # what is left (2 jobs) cannot fill a slice: one plain step
    rest = QUEUE_HANDLERS["PULLB"](h.q, {**msg, "count": SLICE_JOBS + 1}, Ctx(T0))
    assert isinstance(rest, dict)
    assert [job["data"] for job in rest["jobs"]] == expected[n - 2:]
    # a queue that runs out midway ends the work with what it had
    for i in range(SLICE_JOBS + 3):
        h.call("push", [parse_job_input({"data": i}, custom_id_key="jobId")], T0)
    work = QUEUE_HANDLERS["PULLB"](h.q, {**msg, "count": 3 * SLICE_JOBS}, Ctx(T0))
    assert isinstance(work, Sliced)
    assert [job["data"] for job in work.run()[0]] == list(range(SLICE_JOBS + 3))


def test_a_large_ackb_completes_in_slices_after_checking_every_token() -> None:
    """An ACKB of more than SLICE_JOBS jobs checks every token first (a wrong one in
    the last slice refuses the batch with nothing completed), then completes SLICE_JOBS
    jobs a step; the reply, after the last slice, names the ignored ids as one step
    would, and every result is kept."""
    from trioqueue.core.queue.slices import SLICE_JOBS

    h = QueueHarness()
    n = 2 * SLICE_JOBS + 3
    for i in range(n):
        h.call("push", [parse_job_input({"data": i}, custom_id_key="jobId")], T0)
    lease = QUEUE_HANDLERS["PULLB"](h.q, {"count": n, "timeout": 0, "owner": "w"}, Ctx(T0))
    assert isinstance(lease, Sliced)
    lease.run()
    pulled = lease.reply()
    h.commit()
    ids = [job["id"] for job in pulled["jobs"]]
    tokens = list(pulled["tokens"])
    msg = {"ids": [*ids, "no-such-job", ids[0]], "tokens": [*tokens, None, tokens[0]],
           "results": [{"r": i} for i in range(n + 2)]}
    wrong = {**msg, "tokens": [*tokens[:-1], "not-the-token", None, tokens[0]]}
    with pytest.raises(Refused):
        QUEUE_HANDLERS["ACKB"](h.q, wrong, Ctx(T0))
    assert h.q.counts(T0)["active"] == n and not h.q.take_writes()
    work = QUEUE_HANDLERS["ACKB"](h.q, msg, Ctx(T0))
    assert isinstance(work, Sliced)
    active = []
    while not work.step():
        active.append(h.q.counts(T0)["active"])
        h.commit()
    h.commit()
    assert active == [n - SLICE_JOBS, n - 2 * SLICE_JOBS]
    assert h.q.counts(T0)["active"] == 0 and h.q.counts(T0)["completed"] == n
    assert work.reply() == {"data": {"ignoredIds": ["no-such-job", ids[0]],
                                     "ignoredIndices": [n, n + 1]}}
    assert h.storage.get_result(ids[-1]) == (True, {"r": n - 1})
    # a batch of at most SLICE_JOBS stays one plain step
    for i in range(2):
        h.call("push", [parse_job_input({"data": i}, custom_id_key="jobId")], T0)
    small = QUEUE_HANDLERS["PULLB"](h.q, {"count": 2, "timeout": 0, "owner": "w"}, Ctx(T0))
    assert isinstance(small, dict)
    assert QUEUE_HANDLERS["ACKB"](h.q, {"ids": [j["id"] for j in small["jobs"]],
                                        "tokens": small["tokens"]}, Ctx(T0)) == {}


def test_a_large_pushb_with_a_bad_job_in_a_later_slice_admits_nothing() -> None:
    from trioqueue.core.queue.slices import SLICE_JOBS

    h = QueueHarness()
    jobs: list[Any] = [{"data": i} for i in range(3 * SLICE_JOBS)]
    jobs[2 * SLICE_JOBS + 5] = {"data": 1, "priority": "high"}
    work = QUEUE_HANDLERS["PUSHB"](h.q, {"jobs": jobs}, Ctx(T0))
    assert isinstance(work, Sliced)
    while not work.step():
        h.commit()
    assert work.refused is not None
    assert work.refused.startswith(f"jobs[{2 * SLICE_JOBS + 5}]: ")
    assert h.q.counts(T0)["waiting"] == 0 and not h.q.take_writes()
    with pytest.raises(Refused) as refused:  # the synchronous form raises it
        QUEUE_HANDLERS["PUSHB"](h.q, {"jobs": jobs}, Ctx(T0)).run()
    assert refused.value.message == work.refused
