"""Full storage, below the wire: the handlers' ``Ctx.storage_full`` refusal and the
per-batch :class:`~trioqueue.actors.admission.Admission` measure.

The handlers are driven through :class:`~trioqueue.testing.queue.QueueHarness` (a real
QueueState over a MemoryStorage, committing after each command as the actor does), so
"nothing changed" is checked both in memory and in what reached storage.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.actors.admission import Admission, StoreLimit, admit_estimate, disk_limit_bytes
from trioqueue.config import MIB, Config
from trioqueue.core.commands.context import Ctx
from trioqueue.core.commands.crons import CRON_FIRE
from trioqueue.core.commands.table import ADMITTING, QUEUE_HANDLERS
from trioqueue.core.errors import STORAGE_FULL, Refused
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import Sliced
from trioqueue.testing.queue import QueueHarness

T0 = 1_764_000_000_000
FULL = Ctx(T0, storage_full=True)


class NoRoom:
    """A store with no room left: what the actor's Admission answers when full."""

    def refuses(self, frame_bytes: int | None, jobs: int = 1, request: object = None) -> bool:
        return True


def full(h: QueueHarness) -> None:
    """The store is full from now on, for the core's own asks as well (q.room)."""
    h.q.room = NoRoom()


def run(h: QueueHarness, cmd: str, msg: dict[str, Any], ctx: Ctx) -> Any:
    """One handler call, committed like the actor does (also after a refusal)."""
    try:
        reply = QUEUE_HANDLERS[cmd](h.q, msg, ctx)
        if isinstance(reply, Sliced):  # long work, run to the end as the actor would
            reply.run()
            return reply.reply()
        return reply
    finally:
        h.commit()


def snapshot(h: QueueHarness) -> tuple[Any, ...]:
    return (sorted(h.q.jobs), dict(h.index), h.storage.load(), h.storage.size_bytes,
            h.q.counts(T0))


def test_storage_full_text_is_retriable_and_prefixed() -> None:
    assert STORAGE_FULL.startswith("Storage full")
    assert "retry" in STORAGE_FULL


@pytest.mark.parametrize("cmd,msg", [
    ("PUSH", {"queue": "q", "data": {"a": 1}, "jobId": "new"}),
    ("PUSHB", {"queue": "q", "jobs": [{"data": 1, "customId": "b1"}, {"data": 2}]}),
])
def test_a_full_store_refuses_new_jobs_leaving_no_trace(cmd: str, msg: dict[str, Any]) -> None:
    h = QueueHarness()
    run(h, "PUSH", {"data": "old", "jobId": "old"}, Ctx(T0))
    before = snapshot(h)
    with pytest.raises(Refused) as refused:
        run(h, cmd, msg, FULL)
    assert refused.value.message == STORAGE_FULL
    assert snapshot(h) == before  # not in memory, not in the index, not in storage
    # the same command is accepted once there is room: the refusal was retriable
    reply = run(h, cmd, msg, Ctx(T0))
    assert "id" in reply or len(reply["ids"]) == 2


def test_validation_errors_come_before_storage_full() -> None:
    # A malformed job is refused for good, whatever the space: say so, not "retry".
    h = QueueHarness()
    with pytest.raises(Refused) as bad:
        run(h, "PUSH", {"data": {"a": 1}, "priority": "high"}, FULL)
    assert bad.value.message == "priority must be a number"
    with pytest.raises(Refused) as bad_batch:
        run(h, "PUSHB", {"jobs": [{"data": 1}, "not a job"]}, FULL)
    assert bad_batch.value.message.startswith("jobs[1]:")


def test_existing_jobs_are_served_while_full() -> None:
    h = QueueHarness()
    for i in range(4):
        run(h, "PUSH", {"data": i, "jobId": f"j{i}"}, Ctx(T0))
    pulled = run(h, "PULLB", {"count": 3, "timeout": 0, "owner": "w"}, FULL)
    ids = [job["id"] for job in pulled["jobs"]]
    assert ids == ["j0", "j1", "j2"]
    token = dict(zip(ids, pulled["tokens"], strict=True))
    run(h, "ACK", {"id": "j0", "token": token["j0"], "result": 1}, FULL)
    run(h, "FAIL", {"id": "j1", "token": token["j1"], "unrecoverable": True}, FULL)
    # an active job back to waiting is a move of an existing job: allowed
    run(h, "MoveToWait", {"id": "j2", "token": token["j2"]}, FULL)
    run(h, "Obliterate", {}, FULL)
    assert h.q.jobs == {}


def test_move_to_wait_of_a_dead_letter_is_refused_while_full() -> None:
    h = QueueHarness()
    run(h, "PUSH", {"data": 1, "jobId": "dead"}, Ctx(T0))
    job = run(h, "PULL", {"timeout": 0, "owner": "w"}, Ctx(T0))
    run(h, "FAIL", {"id": "dead", "token": job["token"], "unrecoverable": True}, Ctx(T0))
    before = snapshot(h)
    room = h.q.room
    full(h)
    with pytest.raises(Refused) as refused:
        run(h, "MoveToWait", {"id": "dead"}, FULL)
    assert refused.value.message == STORAGE_FULL  # reviving creates a live job
    assert snapshot(h) == before
    h.q.room = room
    run(h, "MoveToWait", {"id": "dead"}, Ctx(T0))
    assert h.q.jobs["dead"].state == "queued"


def test_move_to_wait_keeps_its_own_errors_while_full() -> None:
    h = QueueHarness()
    spec = parse_job_input({"data": 1}, custom_id_key="jobId")
    job_id = h.call("push", [spec], T0)[0]
    pulled = run(h, "PULL", {"timeout": 0, "owner": "w"}, Ctx(T0))
    run(h, "ACK", {"id": job_id, "token": pulled["token"]}, Ctx(T0))
    full(h)
    with pytest.raises(Refused) as refused:
        run(h, "MoveToWait", {"id": job_id}, FULL)
    assert refused.value.message == "Cannot move job from state 'completed' to waiting"


def test_only_job_creating_commands_are_admission_checked() -> None:
    # Commands measured before they run, by their frame; revivals (RetryDlq,
    # RetryCompleted, MoveToWait of a dead letter, auto-retry) and repeat successors
    # ask the step's room in the core instead (q.room).
    assert ADMITTING == {"PUSH", "PUSHB", CRON_FIRE}
    assert ADMITTING <= QUEUE_HANDLERS.keys()


# ------------------------------------------------------------------ Admission


class FakeBroker:
    """Answers storage_room from a scripted store: ``bound`` and ``exact`` room."""

    def __init__(self, bound_room: int, exact_room: int) -> None:
        self.bound_room = bound_room
        self.exact_room = exact_room
        self.measures: list[bool] = []

    def storage_room(self, *, exact: bool) -> int:
        self.measures.append(exact)
        return self.exact_room if exact else self.bound_room

    def admit_need(self, frame_bytes: int | None, jobs: int) -> int:
        return frame_bytes or 0  # what these tests pass is the need itself


def admission(broker: FakeBroker) -> Admission:
    return Admission(broker)


def test_a_store_far_from_full_costs_one_cheap_measure_per_batch() -> None:
    broker = FakeBroker(bound_room=10_000, exact_room=10_000)
    batch = admission(broker)
    assert not any(batch.refuses(1_000) for _ in range(10))
    assert broker.measures == [False]  # the bound only, once
    # the batch took the room the bound gave; only then is the exact figure asked for
    assert not batch.refuses(1)
    assert broker.measures == [False, True]


def test_the_exact_measure_is_taken_once_when_the_bound_is_not_enough() -> None:
    broker = FakeBroker(bound_room=-5, exact_room=2_500)  # high-water mark past the limit
    batch = admission(broker)
    assert not batch.refuses(1_000)
    assert not batch.refuses(1_000)
    assert batch.refuses(1_000)  # 500 left
    assert not batch.refuses(500)
    assert broker.measures == [False, True]


def test_a_full_store_refuses_every_new_job_of_the_batch() -> None:
    broker = FakeBroker(bound_room=-1, exact_room=-1)
    batch = admission(broker)
    assert batch.refuses(admit_estimate(0))
    assert batch.refuses(admit_estimate(0))
    assert broker.measures == [False, True]


def test_admit_estimate_grows_with_frame_and_jobs() -> None:
    assert admit_estimate(None) == admit_estimate(0) > 0
    assert admit_estimate(1000) > admit_estimate(100)
    assert admit_estimate(1000, jobs=10) > admit_estimate(1000, jobs=1)


def test_a_command_asked_again_after_need_data_is_charged_once() -> None:
    """A handler that needs a stored read first runs again with the same request: it
    must get the same answer, not be charged a second time (it was refused at twice
    its need, so a store with room for one more job refused it)."""
    # exact: what the bound said, less the first job, committed before the measure
    broker = FakeBroker(bound_room=1_000, exact_room=400)
    batch = admission(broker)
    first, second = object(), object()
    assert not batch.refuses(600, request=first)
    assert not batch.refuses(600, request=first)  # the re-run: same answer, no charge
    assert batch.refuses(600, request=second)  # 400 left
    assert batch.refuses(600, request=second)
    assert not batch.refuses(400, request=object())


# ---------------------------------------------------- the limit: maximum and disk

GIB = 1024 * MIB


def test_the_disk_limit_keeps_the_stores_reserve_and_room_for_other_writers() -> None:
    config = Config()
    # a 16 MiB disk: the store's reserve for that size (1 MiB, a sixteenth) and 1/32
    # of it for other writers
    assert disk_limit_bytes(16 * MIB, config) == 16 * MIB - MIB - MIB // 2
    # a disk of 100 GiB: 1/32 as the store's reserve, and at most 64 MiB for others
    assert disk_limit_bytes(100 * GIB, config) == 100 * GIB - 100 * GIB // 32 - 64 * MIB
    # set by hand, both are taken as given
    config = Config(store_reserve_bytes=2 * MIB, disk_reserve_bytes=3 * MIB)
    assert disk_limit_bytes(100 * MIB, config) == 95 * MIB
    # a disk with less than the reserves left refuses every new job
    assert disk_limit_bytes(4 * MIB, config) < 0


def test_the_limit_is_the_smaller_of_the_maximum_and_the_disk() -> None:
    config = Config()
    disk: list[int | None] = [100 * GIB]
    limit = StoreLimit(10 * GIB, lambda: disk[0], config, now_s=lambda: 0.0)
    assert limit.bytes() == 10 * GIB  # a maximum below what the disk can take
    disk[0] = 2 * GIB  # another writer filled the disk: seen at the next exact ask
    assert limit.bytes(fresh=True) == disk_limit_bytes(2 * GIB, config) < 2 * GIB
    disk[0] = None  # no disk of its own (memory, a database server): the maximum
    assert limit.bytes(fresh=True) == 10 * GIB


def test_a_cheap_ask_reuses_the_disk_measure_for_a_while() -> None:
    """The store's own growth leaves what it could take on its disk unchanged, so a
    batch far from full does not pay two syscalls: the measure is reused for
    disk_measure_interval_ms, then taken again."""
    config = Config(disk_measure_interval_ms=100)
    measures: list[int] = []
    clock = [0.0]

    def disk_bytes() -> int:
        measures.append(1)
        return 2 * GIB - 100 * MIB * (len(measures) - 1)  # another writer fills it

    def after(writes: int) -> int:
        return disk_limit_bytes(2 * GIB - 100 * MIB * writes, config)

    limit = StoreLimit(10 * GIB, disk_bytes, config, now_s=lambda: clock[0])
    assert limit.bytes() == after(0)
    clock[0] = 0.099
    assert limit.bytes() == after(0) and len(measures) == 1
    clock[0] = 0.1
    assert limit.bytes() == after(1) and len(measures) == 2
    assert limit.bytes(fresh=True) == after(2) and len(measures) == 3


def test_the_disk_reserve_is_a_setting() -> None:
    assert Config().disk_reserve_bytes_for(16 * MIB) == MIB // 2
    assert Config().disk_reserve_bytes_for(1 << 40) == 64 * MIB
    assert Config(disk_reserve_bytes=0).disk_reserve_bytes_for(1 << 40) == 0
    with pytest.raises(ValueError):
        Config(disk_reserve_bytes=-1).validate()
    with pytest.raises(ValueError):  # PostgreSQL's disk is its server's
        Config(storage_url="postgresql://db/q", disk_reserve_bytes=MIB).validate()


# ------------------------------------------------- the core's own asks (q.room)


def bury(h: QueueHarness, n: int) -> None:
    for i in range(n):
        run(h, "PUSH", {"data": i, "jobId": f"d{i}", "maxAttempts": 1}, Ctx(T0))
        job = run(h, "PULL", {"timeout": 0, "owner": "w"}, Ctx(T0))
        run(h, "FAIL", {"id": f"d{i}", "token": job["token"]}, Ctx(T0))


class Room:
    """Room for ``left`` more jobs."""

    def __init__(self, left: int) -> None:
        self.left = left

    def refuses(self, frame_bytes: int | None, jobs: int = 1, request: object = None) -> bool:
        if jobs > self.left:
            return True
        self.left -= jobs
        return False


def test_a_bulk_retry_dlq_revives_what_fits_then_refuses() -> None:
    h = QueueHarness()
    bury(h, 5)
    h.q.room = Room(2)
    with pytest.raises(Refused) as refused:
        run(h, "RetryDlq", {}, Ctx(T0))
    assert refused.value.message == STORAGE_FULL
    assert sorted(h.q.jobs) == ["d0", "d1"]  # what fitted; the rest stays dead
    assert len(h.q.dlq) == 3


def test_dlq_auto_retry_holds_while_full_and_retries_later() -> None:
    h = QueueHarness()
    bury(h, 3)
    run(h, "SetDlqConfig", {"config": {"autoRetry": True, "autoRetryInterval": 10}},
        Ctx(T0))
    full(h)
    h.q.auto_retry_work(T0 + 100).run()
    assert h.q.jobs == {} and len(h.q.dlq) == 3  # not done, not lost
    assert h.q.dlq.next_wakeup(h.q.settings.dlq) == T0 + 100 + 1000  # no spin
    h.q.room = Room(10)
    assert h.q.auto_retry_work(T0 + 1100).run() == 3


def test_an_ackb_admitting_repeat_successors_is_refused_whole_while_full() -> None:
    h = QueueHarness()
    rid = run(h, "PUSH", {"data": 1, "repeat": {"every": 1000}}, Ctx(T0))["id"]
    run(h, "PUSH", {"data": 2, "jobId": "plain"}, Ctx(T0))
    pulled = run(h, "PULLB", {"count": 2, "timeout": 0, "owner": "w"}, Ctx(T0))
    full(h)
    with pytest.raises(Refused) as refused:
        run(h, "ACKB", {"ids": [rid, "plain"], "tokens": pulled["tokens"]}, Ctx(T0))
    assert refused.value.message == STORAGE_FULL
    assert {h.q.jobs[rid].state, h.q.jobs["plain"].state} == {"active"}
