"""The cron scheduler with its clock moved by hand: what it sends the queues, across
daylight-saving changes, at maxLimit, and with skipIfNoWorker."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from trioqueue.actors.request import Request
from trioqueue.actors.scheduler import CronScheduler
from trioqueue.core.commands.crons import CRON_FIRE
from trioqueue.core.errors import STORAGE_FULL
from trioqueue.core.repeating.crons import SCHEDULER_LEASE, parse_cron_command
from trioqueue.core.workers import WorkerRegistry
from trioqueue.core.writes import PutBrokerRecord, Writes

ROME = ZoneInfo("Europe/Rome")


class HandClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def deadline_for(self, wall_ms: float) -> float:
        return wall_ms / 1000


def rome_ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=ROME).timestamp() * 1000)


class Sent(list[tuple[str, Request]]):
    """What the scheduler handed the queues (queue, request), and, in ``committed``,
    what it gave the storage writer."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[Writes] = []

    def post(self, queue: str, request: Request) -> None:
        self.append((queue, request))

    def submit(self, writes: Writes) -> None:
        self.committed.append(writes)


def make(now: int, workers: WorkerRegistry | None = None
         ) -> tuple[CronScheduler, HandClock, Sent]:
    clock = HandClock(now)
    sent = Sent()
    scheduler = CronScheduler(clock, workers or WorkerRegistry(), sent.post, sent.submit)
    return scheduler, clock, sent


def run_until(scheduler: CronScheduler, clock: HandClock, end: int) -> None:
    """Move the clock from due time to due time (the timer's wake-ups) until ``end``."""
    while (due := scheduler.registry.next_due()) is not None and due <= end:
        clock.now = due
        scheduler.fire_due(due)


def fired_at(sent: list[tuple[str, Request]]) -> list[str]:
    out = []
    for _, req in sent:
        if req.cmd == CRON_FIRE:
            stamp = req.msg["record"]["last_fired"]
            out.append(datetime.fromtimestamp(stamp / 1000, ROME).isoformat())
    return out


def test_a_daily_0230_job_in_rome_fires_once_on_both_dst_days() -> None:
    start = rome_ms(2026, 3, 27, 12, 0)
    scheduler, clock, sent = make(start)
    scheduler.upsert(parse_cron_command({
        "name": "nightly", "queue": "q", "schedule": "30 2 * * *",
        "timezone": "Europe/Rome", "preventOverlap": False}, start, None))
    run_until(scheduler, clock, rome_ms(2026, 3, 31, 12, 0))
    assert fired_at(sent) == ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00",
                              "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]
    sent.clear()
    clock.now = start = rome_ms(2026, 10, 23, 12, 0)
    scheduler.fire_due(start)  # months of missed slots: one catch-up, the rest skipped
    sent.clear()
    run_until(scheduler, clock, rome_ms(2026, 10, 27, 12, 0))
    assert fired_at(sent) == ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00",
                              "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]


def test_every_firing_carries_its_job_and_advanced_record() -> None:
    scheduler, clock, sent = make(1_000_000)
    scheduler.upsert(parse_cron_command({
        "name": "t", "queue": "q", "repeatEvery": 500, "data": {"n": 1},
        "maxLimit": 3, "preventOverlap": False}, 1_000_000, None))
    run_until(scheduler, clock, 1_010_000)
    fires = [req for _, req in sent if req.cmd == CRON_FIRE]
    assert [r.msg["record"]["executions"] for r in fires] == [1, 2, 3]
    assert [r.msg["record"]["next_run"] for r in fires] == [1_001_000, 1_001_500, 1_002_000]
    assert all(r.msg["job"]["data"] == {"n": 1} for r in fires)
    # at maxLimit the schedule is deleted, in the store too
    stores = [op for writes in sent.committed for op in writes.ops]
    assert stores == [PutBrokerRecord("cron", "t", None)]
    assert scheduler.get("t") is None


def test_skip_if_no_worker_skips_until_one_registers() -> None:
    workers = WorkerRegistry()
    scheduler, clock, sent = make(0, workers)
    scheduler.upsert(parse_cron_command({
        "name": "w", "queue": "q", "repeatEvery": 1000, "skipIfNoWorker": True}, 0, None))
    run_until(scheduler, clock, 3000)
    assert sent == [] and scheduler.get("w").executions == 0  # type: ignore[union-attr]
    workers.register({"name": "x", "queues": ["q"]}, 3000, conn=None)
    run_until(scheduler, clock, 4000)
    assert len(sent) == 1 and scheduler.get("w").executions == 1  # type: ignore[union-attr]


def test_ten_thousand_schedules_are_one_heap() -> None:
    scheduler, clock, sent = make(0)
    for i in range(10_000):
        scheduler.upsert(parse_cron_command({
            "name": f"c{i}", "queue": "q", "repeatEvery": 60_000 + i}, 0, None))
    assert scheduler.registry.next_due() == 60_000
    clock.now = 60_000
    assert scheduler.fire_due(60_000) == 1  # one due, the other 9,999 untouched
    assert scheduler.registry.next_due() == 60_001


def test_refusals_are_logged_not_raised(caplog: Any) -> None:
    scheduler, _, _ = make(0)
    scheduler.deliver({"ok": False, "error": "Storage full"})
    assert "Storage full" in caplog.text


def test_in_a_cluster_the_holder_fires_through_its_hook_under_the_lease() -> None:
    """A cluster's scheduler (cluster/crons.py): each firing goes to ``fire``
    (the queue may be another broker's), every write names the scheduler's lease, and
    the registry is the one loaded when the lease was taken, until it is dropped."""
    clock = HandClock(1_000_000)
    sent = Sent()
    fired: list[tuple[str, int]] = []
    scheduler = CronScheduler(clock, WorkerRegistry(), sent.post, sent.submit,
                              fire=lambda d: fired.append((d.name, d.executions)),
                              lease=SCHEDULER_LEASE)
    late = parse_cron_command({"name": "late", "queue": "q", "repeatEvery": 500,
                               "maxLimit": 2, "preventOverlap": False}, 998_000, None)
    late.executions = 1  # (its predecessor fired once, then the lease moved)
    old = parse_cron_command({"name": "old", "queue": "q", "repeatEvery": 500,
                              "preventOverlap": False}, 900_000, None)
    scheduler.take({"late": late.to_record(), "old": old.to_record()}, late_ms=4000)
    # a slot missed while the lease moved fires now; one missed long ago is skipped,
    # as after a restart (skipMissedOnRestart)
    assert scheduler.get("late").next_run == 998_500  # type: ignore[union-attr]
    assert scheduler.get("old").next_run == 1_000_500  # type: ignore[union-attr]
    scheduler.fire_due(1_000_000)
    assert fired == [("late", 2)] and sent == []
    scheduler.remove("old")
    run_until(scheduler, clock, 1_010_000)
    assert fired == [("late", 2)]
    assert [(w.queue, w.ops) for w in sent.committed] == [
        (SCHEDULER_LEASE, [PutBrokerRecord("cron", "late", None)])]  # maxLimit reached
    scheduler.take({"u": parse_cron_command({"name": "u", "queue": "q",
                                             "repeatEvery": 500}, 0, None).to_record()},
                   late_ms=4000)
    assert [c["name"] for c in scheduler.listing()] == ["u"]
    scheduler.drop()  # handed over: nothing left to fire here
    assert scheduler.listing() == [] and scheduler.registry.next_due() is None


def test_a_firing_refused_for_a_full_store_is_undone_retried_and_logged_once(
        caplog: Any) -> None:
    clock = HandClock(1_000_000)
    sent = Sent()
    scheduler = CronScheduler(clock, WorkerRegistry(), sent.post, sent.submit,
                              full_retry_ms=100)
    scheduler.upsert(parse_cron_command({
        "name": "c", "queue": "q", "repeatEvery": 60_000, "preventOverlap": False},
        1_000_000, None))
    def tick() -> None:  # the timer's next wake-up
        due = scheduler.registry.next_due()
        assert due is not None
        clock.now = due
        scheduler.fire_due(due)

    for n in range(1, 4):  # refused three times: the firing is undone each time
        tick()
        _, firing = sent[-1]
        assert len(sent) == n
        firing.replier.deliver({"ok": False, "error": STORAGE_FULL})
        defn = scheduler.get("c")
        assert defn is not None and defn.executions == 0
        # tried again later each time (100, 200, 400 ms), not at the next slot
        assert defn.next_run == clock.now + 100 * 2 ** (n - 1)
    assert sum("a firing was refused" in r.message for r in caplog.records) == 1
    tick()
    assert len(sent) == 4
    sent[-1][1].replier.deliver({"ok": True, "id": "j"})
    assert scheduler.get("c").executions == 1  # type: ignore[union-attr]
    assert "fires again" in caplog.text


async def test_a_template_stored_without_its_size_is_measured_once_when_loaded() -> None:
    """A schedule stored before its template's size was kept: loaded, its template is
    measured a slice at a time with its encoding (before it fires), so no firing
    measures it in one step; the size is that of its compact JSON text."""
    from trioqueue.actors.scheduler import TemplateBytes
    from trioqueue.core.large_values.json_slices import compact_json
    from trioqueue.core.repeating.crons import CronDef, CronRegistry
    from trioqueue.storage.memory import MemoryStorage

    data = [{"a": i % 10} for i in range(20_000)]
    defn = CronDef(name="old", queue="q", job_name="j", data=data, schedule=None,
                   repeat_every=1000, timezone=None, priority=0.0, max_limit=None,
                   unique_key=None, dedup=None, skip_missed_on_restart=False,
                   skip_if_no_worker=False, prevent_overlap=False, job_options={},
                   anchor=0, next_run=1000)
    assert defn.data_chars is None
    registry = CronRegistry()
    registry.put(defn)
    templates = TemplateBytes(MemoryStorage())
    templates.adopt(defn)
    await templates.encode_loaded(registry)
    assert defn.data_chars == len(compact_json(data))
    assert templates.size_of(defn) is not None
