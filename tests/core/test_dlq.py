"""The dead-letter queue's rules in the core: entries, the admin commands, and what the
config promises (eviction, expiry, auto-retry) run by the queue's own timer.

Commands go through their handlers (``core.commands.table``) on a :class:`QueueHarness`,
whose store is a real MemoryStorage committed after every command and every slice of
long work, as the queue actor does. Time is explicit: the core takes ``now``.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.commands.context import Ctx
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import Sliced
from trioqueue.core.queue.dlq import TimerWaiter
from trioqueue.core.stack_traces import TRACE_KEEP_BYTES, trace_tail
from trioqueue.testing.queue import QueueHarness

NOW = 1_700_000_000_000
DEFAULTS = {"autoRetry": False, "autoRetryInterval": 3_600_000, "maxAutoRetries": 3,
            "maxAge": 604_800_000, "maxEntries": 10_000}


class Harness(QueueHarness):
    steps = 0  # slices the last long work took

    def run_work(self, work: Sliced) -> Any:
        """Long work a slice at a time, committing each, as the actor does."""
        self.steps = 0
        while not work.step():
            self.steps += 1
            self.commit()
            assert work.need is None  # the harness's view reads directly
        self.commit()
        if work.refused is not None:
            raise Refused(work.refused)
        return work.reply()

    def cmd(self, name: str, now: int, **msg: Any) -> Any:
        try:
            result = QUEUE_HANDLERS[name](self.q, {"queue": self.name, **msg}, Ctx(now=now))
        except Refused:
            self.commit()
            raise
        self.commit()
        return self.run_work(result) if isinstance(result, Sliced) else result

    def push(self, now: int, **fields: Any) -> str:
        spec = parse_job_input({"data": None, **fields}, custom_id_key="jobId")
        ids: list[str] = self.call("push", [spec], now)
        return ids[0]

    def bury(self, now: int, *, error: str = "boom", stack: list[str] | None = None,
             **fields: Any) -> str:
        """Push a job of one attempt, pull it and fail it: a DLQ entry at ``now``."""
        job_id = self.push(now, maxAttempts=1, **fields)
        jobs, _ = self.call("pull", now, count=1, owner=None, lock_ttl=30_000, conn=None)
        assert jobs[0]["id"] == job_id
        self.cmd("FAIL", now, id=job_id, error=error, stack=stack)
        return job_id

    def tick(self, now: int) -> int:
        """The queue's timer at ``now``, running the long work it begins; how many
        pieces of timer work it began."""
        began = 0
        for answer in self.call("tick", now):
            if isinstance(answer.waiter, TimerWaiter):
                assert answer.work is not None
                self.run_work(answer.work)
                began += 1
        return began

    def listed(self, now: int, **msg: Any) -> list[str]:
        reply = self.cmd("Dlq", now, **msg)
        assert [e["job"] for e in reply["entries"]] == reply["jobs"]
        return [e["job"]["id"] for e in reply["entries"]]

    def stats(self, now: int) -> dict[str, Any]:
        stats: dict[str, Any] = self.cmd("GetDlqStats", now)["data"]["stats"]
        return stats


@pytest.fixture
def h() -> Harness:
    return Harness()


def python_trace(frames: int) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for i in range(frames):
        lines += [f'  File "/lib/deep.py", line {i}, in step{i}', f"    step{i + 1}()"]
    lines += ['  File "/app/tasks.py", line 42, in send_email',
              "    raise ValueError('bad address')", "ValueError: bad address"]
    return lines


# ----------------------------------------------------------------------- entries


def test_a_terminal_fail_makes_an_entry_with_the_whole_trace(h: Harness) -> None:
    trace = python_trace(60)  # 125 lines: past bunqueue's 100 kept and its 10 shown
    job = h.bury(NOW, error="bad address", stack=trace)
    reply = h.cmd("Dlq", NOW + 5)
    [entry] = reply["entries"]
    assert entry["reason"] == "max_attempts_exceeded" and entry["error"] == "bad address"
    assert entry["enteredAt"] == NOW and entry["retryCount"] == 0
    assert entry["lastRetryAt"] is None and entry["nextRetryAt"] is None
    assert entry["expiresAt"] == NOW + DEFAULTS["maxAge"]
    assert entry["stack"] == trace
    assert entry["stack"][-2:] == ["    raise ValueError('bad address')",
                                   "ValueError: bad address"]
    assert entry["attempts"] == [{"attempt": 1, "startedAt": NOW, "failedAt": NOW,
                                  "reason": "explicit_fail", "error": "bad address",
                                  "duration": 0}]
    wire = entry["job"]
    assert wire["id"] == job and wire["state"] == "failed"
    # bunqueue's field as bunqueue keeps it: the first 10 lines, trimmed
    assert wire["stacktrace"] == [line.strip() for line in trace[:10]]
    assert wire["failedReason"] == "bad address" and wire["failedStack"] == trace
    assert h.cmd("GetJob", NOW, id=job)["job"]["failedStack"] == trace


def test_a_trace_is_cut_to_its_tail_in_bytes() -> None:
    lines = [f"line {i} " + "x" * 200 for i in range(1_000)] + ["ValueError: last"]
    kept = trace_tail(lines)
    assert kept[-1] == "ValueError: last" and kept[-2] == lines[-2]
    assert kept[0].startswith("... (") and kept[0].endswith("earlier lines cut)")
    assert sum(len(line) + 1 for line in kept[1:]) <= TRACE_KEEP_BYTES
    assert trace_tail(["a", "b"]) == ["a", "b"]
    huge = trace_tail(["x" * 100_000 + "END"])
    assert huge[-1].endswith("END") and len(huge[-1]) < TRACE_KEEP_BYTES


def test_reasons_filters_and_pages(h: Harness) -> None:
    a = h.bury(NOW)
    b = h.bury(NOW + 10)
    discarded = h.push(NOW + 20)
    h.cmd("Discard", NOW + 20, id=discarded)
    c = h.bury(NOW + 30)
    assert h.listed(NOW + 40) == [a, b, discarded, c]
    assert h.listed(NOW + 40, filter={"reason": "unknown"}) == [discarded]
    assert h.listed(NOW + 40, filter={"olderThan": NOW + 20}) == [a, b]
    assert h.listed(NOW + 40, filter={"newerThan": NOW + 10}) == [discarded, c]
    assert h.listed(NOW + 40, filter={"newerThan": NOW, "olderThan": NOW + 30}) == [
        b, discarded]
    assert h.listed(NOW + 40, filter={"offset": 1, "limit": 2}) == [b, discarded]
    assert h.listed(NOW + 40, count=3) == [a, b, discarded]
    assert h.listed(NOW + 40, filter={"retriable": True}) == [a, b, discarded, c]
    assert h.listed(NOW + 40, filter={"expired": True}) == []
    h.cmd("SetDlqConfig", NOW, config={"maxAge": 25})
    assert h.listed(NOW + 40, filter={"expired": True}) == [a, b]
    assert h.listed(NOW + 40, filter={"expired": False}) == [discarded, c]
    # garbage in the filter is dropped, not refused
    assert h.listed(NOW + 40, filter={"reason": 3, "limit": "x"}) == [a, b, discarded, c]


def test_stats(h: Harness) -> None:
    assert h.stats(NOW) == {"total": 0, "byReason": {}, "byQueue": {}, "pendingRetry": 0,
                            "expired": 0, "oldestEntry": None, "newestEntry": None}
    h.bury(NOW)
    h.bury(NOW + 10)
    discarded = h.push(NOW + 20)
    h.cmd("Discard", NOW + 20, id=discarded)
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": True, "maxAge": 15})
    assert h.stats(NOW + 25) == {
        "total": 3, "byReason": {"max_attempts_exceeded": 2, "unknown": 1},
        "byQueue": {"q": 3}, "pendingRetry": 3, "expired": 2,
        "oldestEntry": NOW, "newestEntry": NOW + 20}


# ------------------------------------------------------------------ admin commands


def test_retry_one_resets_attempts_and_keeps_the_id(h: Harness) -> None:
    job = h.bury(NOW, data={"to": "a@b.c"})
    other = h.bury(NOW)
    assert h.cmd("RetryDlq", NOW + 1, jobId=job) == {"count": 1}
    live = h.q.jobs[job]
    assert live.attempts == 0 and live.state == "queued" and live.data == {"to": "a@b.c"}
    assert h.cmd("GetState", NOW + 1, id=job)["state"] == "waiting"
    assert h.listed(NOW + 1) == [other]
    assert h.cmd("RetryDlq", NOW + 1, jobId=job) == {"count": 0}  # no entry now
    assert h.cmd("RetryDlq", NOW + 1, jobId="nope") == {"count": 0}


def test_retry_first_count_then_all(h: Harness) -> None:
    ids = [h.bury(NOW + i) for i in range(5)]
    assert h.cmd("RetryDlq", NOW + 10, count=2) == {"count": 2}
    assert h.listed(NOW + 10) == ids[2:]
    assert h.cmd("RetryDlq", NOW + 10) == {"count": 3}
    assert h.listed(NOW + 10) == []
    assert all(job in h.q.jobs for job in ids)


def test_retry_skips_an_entry_whose_unique_key_is_held(h: Harness) -> None:
    keyed = h.bury(NOW, uniqueKey="k")
    plain = h.bury(NOW)
    holder = h.push(NOW + 1, uniqueKey="k")  # the key is free once its job left
    assert holder != keyed
    assert h.cmd("RetryDlq", NOW + 2) == {"count": 1}  # not counted, not an error
    assert h.listed(NOW + 2) == [keyed]
    assert plain in h.q.jobs
    h.cmd("Cancel", NOW + 3, id=holder)
    assert h.cmd("RetryDlq", NOW + 3, jobId=keyed) == {"count": 1}


def test_retry_filtered(h: Harness) -> None:
    failed = h.bury(NOW)
    discarded = h.push(NOW)
    h.cmd("Discard", NOW, id=discarded)
    assert h.cmd("RetryDlq", NOW + 1, filter={"reason": "unknown"}) == {"count": 1}
    assert h.listed(NOW + 1) == [failed]


def test_purge_and_remove(h: Harness) -> None:
    ids = [h.bury(NOW + i) for i in range(3)]
    assert h.cmd("RemoveDlqJob", NOW, jobId=ids[0]) == {"data": {"removed": True}}
    assert h.cmd("RemoveDlqJob", NOW, jobId=ids[0]) == {"data": {"removed": False}}
    assert h.storage.get_finished(ids[0]) is None
    assert h.cmd("PurgeDlq", NOW) == {"count": 2}
    assert h.cmd("PurgeDlq", NOW) == {"count": 0}
    assert all(h.storage.get_finished(job) is None for job in ids)
    assert h.stats(NOW)["total"] == 0
    with pytest.raises(Refused, match="jobId is required"):
        h.cmd("RemoveDlqJob", NOW)


def test_bulk_commands_run_in_slices(h: Harness) -> None:
    ids = [h.bury(NOW) for _ in range(350)]
    assert len(h.listed(NOW, count=10_000)) == 350
    assert h.steps >= 3  # a read of 100 records a slice
    assert h.cmd("RetryDlq", NOW + 1) == {"count": 350}
    assert h.steps >= 3
    assert all(job in h.q.jobs for job in ids)
    for job in ids:
        h.cmd("Discard", NOW + 2, id=job)
    assert h.cmd("PurgeDlq", NOW + 3) == {"count": 350}
    assert h.steps >= 3


def test_retry_completed(h: Harness) -> None:
    done = []
    for i in range(3):
        job = h.push(NOW)
        h.call("pull", NOW, count=1, owner=None, lock_ttl=30_000, conn=None)
        h.call("ack", job, NOW + 10 * i, has_result=True, result=i)
        done.append(job)
    assert h.cmd("RetryCompleted", NOW + 50, timestamp=NOW + 10) == {"count": 2}
    assert done[0] in h.q.jobs and done[1] in h.q.jobs and done[2] not in h.q.jobs
    assert h.storage.get_result(done[0]) == (False, None)  # the old result went
    assert h.storage.get_result(done[2]) == (True, 2)
    assert h.cmd("RetryCompleted", NOW + 50, id=done[2]) == {"count": 1}
    assert h.cmd("RetryCompleted", NOW + 50, id=done[2]) == {"count": 0}
    assert h.q.jobs[done[2]].attempts == 0


# ------------------------------------------------------------------------ config


def test_config_defaults_coercion_and_garbage(h: Harness) -> None:
    assert h.cmd("GetDlqConfig", NOW) == {"config": DEFAULTS}
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": True, "autoRetryInterval": "5000",
                                       "maxAutoRetries": "x", "maxAge": None,
                                       "maxEntries": -3, "other": 1})
    assert h.cmd("GetDlqConfig", NOW) == {"config": {**DEFAULTS, "autoRetry": True,
                                                     "autoRetryInterval": 5000,
                                                     "maxAge": None}}
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": "yes", "maxAge": "60000"})
    assert h.cmd("GetDlqConfig", NOW)["config"]["autoRetry"] is True
    assert h.cmd("GetDlqConfig", NOW)["config"]["maxAge"] == 60_000
    with pytest.raises(Refused, match="config must be an object"):
        h.cmd("SetDlqConfig", NOW, config=[1])


def test_max_entries_evicts_the_oldest_at_bury(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"maxEntries": 2})
    ids = [h.bury(NOW + i) for i in range(3)]
    assert h.listed(NOW + 5) == ids[1:]
    assert h.storage.get_finished(ids[0]) is None


def test_a_lowered_max_entries_is_enforced_by_the_timer_in_slices(h: Harness) -> None:
    ids = [h.bury(NOW) for _ in range(250)]
    h.cmd("SetDlqConfig", NOW, config={"maxEntries": 10})
    assert h.q.next_deadline() is not None and h.q.next_deadline() <= NOW
    h.tick(NOW + 1)
    assert h.stats(NOW)["total"] == 150  # one slice per step
    h.tick(NOW + 1)
    h.tick(NOW + 1)
    assert h.listed(NOW + 1) == ids[-10:]
    assert h.storage.count_finished("q", "failed") == 10


def test_max_age_expires_entries_on_the_queue_timer(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"maxAge": 1_000})
    old = h.bury(NOW)
    young = h.bury(NOW + 500)
    assert h.q.next_deadline() == NOW + 1_000
    h.tick(NOW + 999)
    assert h.listed(NOW + 999) == [old, young]
    h.tick(NOW + 1_000)
    assert h.listed(NOW + 1_000) == [young]
    assert h.storage.get_finished(old) is None
    assert h.q.next_deadline() == NOW + 1_500
    h.cmd("SetDlqConfig", NOW, config={"maxAge": None})
    assert h.q.dlq.next_wakeup(h.q.settings.dlq) is None


def test_auto_retry_backs_off_and_stops_at_max(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": True, "autoRetryInterval": 1_000,
                                       "maxAutoRetries": 2, "maxAge": None})
    job = h.bury(NOW)
    [entry] = h.cmd("Dlq", NOW)["entries"]
    assert entry["nextRetryAt"] == NOW + 1_000
    assert h.q.next_deadline() == NOW + 1_000
    assert h.tick(NOW + 999) == 0
    assert h.tick(NOW + 1_000) == 1
    assert h.q.jobs[job].attempts == 0  # a fresh waiting job, same id
    h.call("pull", NOW + 1_100, count=1, owner=None, lock_ttl=30_000, conn=None)
    h.cmd("FAIL", NOW + 1_100, id=job, error="again")
    [entry] = h.cmd("Dlq", NOW + 1_100)["entries"]
    assert entry["retryCount"] == 1 and entry["lastRetryAt"] == NOW + 1_000
    assert entry["nextRetryAt"] == NOW + 1_100 + 2_000  # interval * 2^(2-1)
    assert h.tick(NOW + 3_099) == 0
    assert h.tick(NOW + 3_100) == 1
    h.call("pull", NOW + 3_200, count=1, owner=None, lock_ttl=30_000, conn=None)
    h.cmd("FAIL", NOW + 3_200, id=job, error="for good")
    [entry] = h.cmd("Dlq", NOW + 3_200)["entries"]
    assert entry["retryCount"] == 2 and entry["nextRetryAt"] is None
    # maxAutoRetries reached, and no expiry: the DLQ asks the timer for nothing
    assert h.q.dlq.next_wakeup(h.q.settings.dlq) is None
    assert h.stats(NOW + 3_200)["pendingRetry"] == 0


def test_an_auto_retry_that_cannot_run_waits_without_spinning(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": True, "autoRetryInterval": 0,
                                       "maxAge": None})
    keyed = h.bury(NOW, uniqueKey="k")
    h.push(NOW, uniqueKey="k")
    assert h.tick(NOW) == 1
    assert h.listed(NOW) == [keyed]
    deadline = h.q.next_deadline()
    assert deadline is not None and deadline >= NOW + 1_000
    assert h.tick(NOW + 1) == 0


# ----------------------------------------------------------- restart, obliterate


def test_entries_and_config_survive_a_restart(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"autoRetry": True, "autoRetryInterval": 1_000})
    first = h.bury(NOW, stack=python_trace(3))
    second = h.bury(NOW + 10)
    h.restart(NOW + 20)
    assert h.cmd("GetDlqConfig", NOW)["config"]["autoRetryInterval"] == 1_000
    reply = h.cmd("Dlq", NOW + 20)
    assert [e["job"]["id"] for e in reply["entries"]] == [first, second]
    assert reply["entries"][0]["stack"] == python_trace(3)
    assert h.q.next_deadline() == NOW + 1_000
    assert h.tick(NOW + 1_010) == 1
    assert first in h.q.jobs and second in h.q.jobs


def test_a_queue_known_only_by_its_dead_letters_is_rebuilt(h: Harness) -> None:
    job = h.bury(NOW)
    h.storage._queue_meta.clear()  # no meta row: never configured, never paused
    h.restart(NOW + 1)
    assert h.listed(NOW + 1) == [job]


def test_obliterate_resets_entries_and_config(h: Harness) -> None:
    h.cmd("SetDlqConfig", NOW, config={"maxEntries": 5})
    job = h.bury(NOW)
    h.cmd("Obliterate", NOW + 1)
    assert h.listed(NOW + 1) == [] and h.stats(NOW + 1)["total"] == 0
    assert h.cmd("GetDlqConfig", NOW + 1) == {"config": DEFAULTS}
    assert h.storage.get_finished(job) is None
    h.restart(NOW + 2)
    assert h.listed(NOW + 2) == []
    assert h.cmd("GetDlqConfig", NOW + 2) == {"config": DEFAULTS}


class _NoRoom:
    def refuses(self, frame_bytes: int | None, jobs: int = 1, request: object = None) -> bool:
        return True


def test_a_full_store_refuses_retries_as_it_refuses_pushes(h: Harness) -> None:
    job = h.bury(NOW)
    done = h.push(NOW)
    token = h.cmd("PULL", NOW, timeout=0, owner="w")["token"]
    h.cmd("ACK", NOW, id=done, token=token)
    h.q.room = _NoRoom()  # the store has no room (the actor's Admission says so)
    for name, msg in (("RetryDlq", {"jobId": job}), ("RetryDlq", {}),
                      ("RetryCompleted", {}), ("RetryCompleted", {"id": done})):
        with pytest.raises(Refused, match="Storage full"):
            h.cmd(name, NOW, **msg)
    assert h.listed(NOW) == [job]
    assert h.q.jobs == {}
