"""QueueState against a small reference model of queue semantics (hypothesis, stateful).

A :class:`QueueMachine` drives one queue through a harness that commits every command's
writes to a real :class:`MemoryStorage` (as the queue actor does) and keeps a plain model
of what each job should be: where it lives, its attempts, stalls, lock and connection.
Rules push (single and batch, with random priority, delay, lifo, ttl, custom id,
uniqueKey and dedup policy), pull (with or without owner, count, connection, detach),
ACK/ACKB/FAIL with right, wrong or missing tokens, renew locks, advance time (lock
expiry), release connections, pause/resume, and crash: a fresh QueueState is rebuilt from
``storage.load()`` through ``restore()`` (the broker's restart path, or the actor's with
``charge_active=False``) and the run carries on.

After every step: counts match the model and add up to live + finished jobs; every id is
in exactly one place (memory, index and storage agree); no job is active twice; live
jobs in storage equal the in-memory ones (ids, states, attempts, stalls); attempts and
stallCount never decrease; a job acked successfully is never delivered again; finished
counts in storage equal the model's.

Where the model sees several correct answers (the order among jobs that tie on priority,
lifo and runAt; a random backoff) it checks the answer is one of them and follows the
implementation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import DEFAULT_MAX_STALLS
from trioqueue.testing.queue import QueueHarness

QUEUE = "q"
START = 1_700_000_000_000
MAX_BACKOFF_MS = 3_600_000
ALL_STATES = ("waiting", "prioritized", "delayed", "active", "completed", "failed",
              "waiting-children", "paused")
CONNS = ("c1", "c2")
NOT_PROCESSING = "Job not found or not in processing state: {}"


# ----------------------------------------------------------------------------- harness


class Harness(QueueHarness):
    """The model covers lock expiry, not the heartbeat stall detector (tested in
    test_queue.py), so the detector is switched off; the setting is stored, so it
    stays off across the model's restarts."""

    def __init__(self) -> None:
        super().__init__(QUEUE)
        self.call("set_stall_config", {"enabled": False})


# ----------------------------------------------------------------------------- model


@dataclass
class MJob:
    id: str
    gen: int
    priority: float
    lifo: bool
    created_at: int
    run_at: int
    ttl: int | None
    max_attempts: int
    backoff: Any
    unique_key: str | None
    dedup_ttl: int | None
    remove_on_complete: bool
    remove_on_fail: bool
    state: str = "queued"  # or "active"
    attempts: int = 0
    stall_count: int = 0
    token: str | None = None  # set while a lock exists
    lock_expires: int | None = None
    renewals: int = 0
    lock_span: int = 0  # the longest lease granted (the pull's, or a longer renewal)
    conn: str | None = None  # the connection it would be released with
    dedup_lost: bool = False  # its uniqueKey went to a newer job (replace, expired key)

    def rank(self) -> tuple[float, int, float]:
        """The part of the queue order the model knows: ties are resolved by admission."""
        return (-self.priority, 0 if self.lifo else 1, 0 if self.lifo else self.run_at)

    def visible(self, now: int) -> str:
        if self.state == "active":
            return "active"
        if self.run_at > now:
            return "delayed"
        return "prioritized" if self.priority > 0 else "waiting"


def backoff_bounds(option: Any, attempts: int) -> tuple[int, int]:
    """The range of bunqueue's jittered backoff for the attempt just charged."""
    base, fixed = 1000.0, False
    if isinstance(option, dict):
        base = option.get("delay", 1000)
        fixed = option.get("type") == "fixed"
    elif option is not None:
        base = option
    if base <= 0:
        return 0, 0
    if fixed:
        lo, hi = base * 0.8, base * 1.2
    else:
        lo, hi = base * 2.0**attempts * 0.5, base * 2.0**attempts * 1.5
    return int(min(lo, MAX_BACKOFF_MS)), int(min(hi, MAX_BACKOFF_MS))


# ----------------------------------------------------------------------------- strategies

job_inputs = st.fixed_dictionaries(
    {
        "priority": st.sampled_from([0, 0, 0, 1, 5, -1]),
        "delay": st.sampled_from([0, 0, 0, 500, -100, 3000]),
        "lifo": st.sampled_from([False, False, True]),
        "jobId": st.sampled_from([None, None, None, "c0", "c1", "c2"]),
        "uniqueKey": st.sampled_from([None, None, "k0", "k1"]),
        "dedup": st.sampled_from([None, None, {"ttl": 2000},
                                  {"ttl": 2000, "extend": True}, {"replace": True}]),
        "maxAttempts": st.sampled_from([1, 2, 3, 5]),
        "backoff": st.sampled_from([None, 0, 100, {"type": "fixed", "delay": 200}]),
        "ttl": st.sampled_from([None, None, None, 1000, 20_000]),
        "removeOnComplete": st.sampled_from([False, False, False, True]),
        "removeOnFail": st.sampled_from([False, False, False, True]),
    }
).map(lambda d: {k: v for k, v in d.items() if v is not None})

TOKEN_KINDS = st.sampled_from(["right", "right", "wrong", "missing"])
# Time passing before a command (0: same millisecond). Every rule takes one, so that lock
# expiry and delays play a part even in runs where swarm testing disables advance_time.
DT = st.sampled_from([0, 0, 0, 1, 100, 999, 1000, 5000, 30_000])


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.now = START
        self.live: dict[str, MJob] = {}
        self.finished: dict[str, str] = {}  # id -> "completed" | "failed"
        self.dedup: dict[str, tuple[str, float | None]] = {}
        self.paused = False
        self.gens: dict[str, int] = {}
        self.acked: set[tuple[str, int]] = set()
        self.seen: dict[tuple[str, int], tuple[int, int]] = {}

    # --------------------------------------------------------------- model helpers

    def _drop(self, job: MJob) -> None:
        """A live job leaves the queue: forget it and release its unique key."""
        del self.live[job.id]
        if job.unique_key is not None:
            holder = self.dedup.get(job.unique_key)
            if holder is not None and holder[0] == job.id:
                del self.dedup[job.unique_key]

    def _finish(self, job: MJob, state: str, reason: str | None = None) -> None:
        self._drop(job)
        self.finished[job.id] = state
        record = self.h.storage.get_finished(job.id)
        assert record is not None and record["state"] == state
        if reason is not None:
            assert record["dlq"]["reason"] == reason

    def _requeue(self, job: MJob, run_at: int | None = None) -> None:
        job.state = "queued"
        job.token = job.lock_expires = job.conn = None
        job.renewals = 0
        if run_at is not None:
            job.run_at = run_at

    def _retry_at(self, job: MJob) -> int:
        """The impl's (random) retry time after a charged attempt, checked against the range."""
        run_at: int = self.h.q.jobs[job.id].run_at
        lo, hi = backoff_bounds(job.backoff, job.attempts)
        assert lo <= run_at - self.now <= hi, (run_at - self.now, lo, hi)
        return run_at

    def _pick(self, data: st.DataObject, likely: list[str]) -> str:
        """Mostly a job the command can apply to; sometimes any job, or an unknown id."""
        if likely and data.draw(st.integers(0, 3), label="likely") > 0:
            return data.draw(st.sampled_from(sorted(likely)), label="job")
        anything = sorted({*self.live, *self.finished, "ghost"})
        return data.draw(st.sampled_from(anything), label="job")

    def _processing(self) -> list[str]:
        return [i for i, j in self.live.items() if j.state == "active"]

    # --------------------------------------------------------------- producing

    def _model_push(self, fields: dict[str, Any], got: str) -> None:
        now = self.now
        cid = fields.get("jobId")
        if cid is not None and cid in self.live:
            assert got == cid
            return
        key = fields.get("uniqueKey")
        policy = fields.get("dedup") or {}
        replaced: MJob | None = None
        if key is not None:
            holder = self.dedup.get(key)
            if holder is not None and (holder[1] is None or holder[1] > now) and (
                    holder[0] in self.live):
                owner = self.live[holder[0]]
                if policy.get("replace"):
                    event(f"push: dedup replace of {owner.state} owner")
                    if owner.state == "queued":
                        replaced = owner
                elif policy.get("extend") and policy.get("ttl"):
                    event("push: dedup extend")
                    self.dedup[key] = (owner.id, now + policy["ttl"])
                    assert got == owner.id
                    return
                else:
                    event("push: dedup reject")
                    assert got == owner.id
                    return
        if cid is not None:
            assert got == cid
            if self.finished.pop(cid, None) is not None:  # a finished generation is retired
                event("push: custom id replaces a finished job")
        else:
            assert got not in self.live and got not in self.finished
        if replaced is not None:
            self._drop(replaced)
        gen = self.gens.get(got, 0) + 1
        self.gens[got] = gen
        ttl = policy.get("ttl") if key is not None else None
        self.live[got] = MJob(
            id=got, gen=gen, priority=fields.get("priority", 0),
            lifo=fields.get("lifo", False), created_at=now,
            run_at=now + fields.get("delay", 0), ttl=fields.get("ttl"),
            max_attempts=fields.get("maxAttempts", 3), backoff=fields.get("backoff"),
            unique_key=key, dedup_ttl=ttl,
            remove_on_complete=fields.get("removeOnComplete", False),
            remove_on_fail=fields.get("removeOnFail", False),
        )
        if key is not None:
            holder = self.dedup.get(key)
            if holder is not None and holder[0] != got and holder[0] in self.live:
                self.live[holder[0]].dedup_lost = True  # a newer job takes the key over
            self.dedup[key] = (got, None if ttl is None else now + ttl)

    @initialize(items=st.lists(job_inputs, min_size=1, max_size=6), taken=st.integers(0, 3),
                owner=st.sampled_from([None, "w0", "w0"]),
                conn=st.sampled_from([None, *CONNS, *CONNS]),
                lock_ttl=st.sampled_from([1000, 30_000]), renew=st.booleans())
    def initial_jobs(self, items: list[dict[str, Any]], taken: int, owner: str | None,
                     conn: str | None, lock_ttl: int, renew: bool) -> None:
        """Some work to start from (swarm testing may switch the push or pull rule off)."""
        self.push(0, items)
        if taken:
            self.pull(0, taken, owner, conn, False, lock_ttl, renew)

    @rule(dt=DT, items=st.lists(job_inputs, min_size=1, max_size=3))
    def push(self, dt: int, items: list[dict[str, Any]]) -> None:
        self._advance(dt)
        specs = [parse_job_input({"data": n, **i}, custom_id_key="jobId")
                 for n, i in enumerate(items)]
        ids = self.h.call("push", specs, self.now)
        assert len(ids) == len(items)
        for fields, got in zip(items, ids, strict=True):
            self._model_push(fields, got)

    # --------------------------------------------------------------- consuming

    @rule(dt=DT, count=st.integers(1, 3), owner=st.sampled_from([None, "w1", "w1"]),
          conn=st.sampled_from([None, *CONNS]), detach=st.booleans(),
          lock_ttl=st.sampled_from([1000, 5000, 30_000]), renew=st.booleans())
    def pull(self, dt: int, count: int, owner: str | None, conn: str | None, detach: bool,
             lock_ttl: int, renew: bool = False) -> None:
        """PULL/PULLB; with ``renew`` the worker heartbeats its new locks at once."""
        self._advance(dt)
        now = self.now
        ready = [j for j in self.live.values() if j.state == "queued" and j.run_at <= now]
        expired = {j.id for j in ready if j.ttl is not None and now > j.created_at + j.ttl}
        runnable = {j.id: j for j in ready if j.id not in expired}
        jobs, tokens = self.h.call("pull", now, count=count, owner=owner, lock_ttl=lock_ttl,
                                   conn=conn, detach=detach)
        ids = [j["id"] for j in jobs]
        if self.paused:
            assert ids == [] and tokens == []
            return
        assert len(set(ids)) == len(ids), "a job delivered twice in one pull"
        assert len(ids) == min(count, len(runnable))
        for job_id in ids:
            assert job_id in runnable, f"{job_id} was not a runnable queued job"
            assert (job_id, self.live[job_id].gen) not in self.acked
        ranks = [runnable[i].rank() for i in ids]
        assert ranks == sorted(ranks), "delivered out of order"
        dropped = {i for i in expired if i not in self.h.q.jobs}
        if ids:
            last = ranks[-1]
            for job_id, job in runnable.items():
                if job_id not in ids:
                    assert job.rank() >= last, f"{job_id} should have gone first"
        if len(ids) < count:
            assert dropped == expired  # the pull went through the whole ready queue
        else:
            for job_id in expired:
                if self.live[job_id].rank() < ranks[-1]:
                    assert job_id in dropped, f"expired {job_id} was passed over"
            for job_id in dropped:
                assert self.live[job_id].rank() <= ranks[-1]
        for job_id in dropped:
            event("pull: ttl drop")
            self._drop(self.live[job_id])
        if owner is None:
            assert tokens == [""] * len(ids)
        else:
            assert all(tokens) and len(set(tokens)) == len(tokens)
        for job_id, token in zip(ids, tokens, strict=True):
            job = self.live[job_id]
            job.state = "active"
            if owner is not None:
                job.token, job.lock_expires, job.renewals = token, now + lock_ttl, 0
                job.lock_span = lock_ttl
            tracked = conn is not None and not (detach and owner is None)
            job.conn = conn if tracked else None
            if renew and owner is not None:
                assert self.h.call("heartbeat", job_id, now, token=token, duration=None)
                job.lock_expires = now + lock_ttl
                job.renewals += 1

    def _token(self, job: MJob | None, kind: str) -> str | None:
        if kind == "missing":
            return None
        if kind == "wrong":
            return "not-a-token"
        return job.token if job is not None else None

    def _probe_lock(self, job_id: str, command: str, bad: str) -> None:
        """A locked job refuses ``command`` without its exact token, changing nothing."""
        job = self.live.get(job_id)
        if job is None or job.state != "active" or job.token is None:
            return
        token = self._token(job, bad)
        try:
            self.h.call(command, job_id, self.now, token=token)
        except Refused as exc:
            assert exc.message == self._token_error(job, token)
        else:
            raise AssertionError(f"{command} of a locked job took token {token!r}")

    def _token_error(self, job: MJob, token: str | None) -> str | None:
        if job.token is None:
            return None
        if token is None:
            return f"Lock token required for job {job.id}"
        if token != job.token:
            return f"Invalid or expired lock token for job {job.id}"
        return None

    def _complete(self, job: MJob, remove: bool) -> None:
        self.acked.add((job.id, job.gen))
        if remove or job.remove_on_complete:
            self._drop(job)
            assert self.h.storage.get_finished(job.id) is None
        else:
            self._finish(job, "completed")

    def _expect_ack(self, job_id: str, token: str | None) -> str | None:
        """None when the ACK completes the job, else bunqueue's error text."""
        job = self.live.get(job_id)
        if job is not None and job.state == "queued" and job.attempts > 0:
            return None  # late ACK: completes the requeued copy
        if job is None or job.state != "active":
            return NOT_PROCESSING.format(job_id)
        return self._token_error(job, token)

    @rule(dt=DT, data=st.data(), kind=TOKEN_KINDS, remove=st.sampled_from([False, False, True]),
          bad=st.sampled_from(["wrong", "missing"]))
    def ack(self, dt: int, data: st.DataObject, kind: str, remove: bool, bad: str) -> None:
        self._advance(dt)
        late = [i for i, j in self.live.items() if j.state == "queued" and j.attempts > 0]
        job_id = self._pick(data, self._processing() + late)
        self._probe_lock(job_id, "ack", bad)
        token = self._token(self.live.get(job_id), kind)
        expected = self._expect_ack(job_id, token)
        try:
            self.h.call("ack", job_id, self.now, token=token, remove=True if remove else None)
        except Refused as exc:
            assert exc.message == expected
            return
        assert expected is None, f"ACK should have failed: {expected}"
        event("ack: late, of a requeued job" if self.live[job_id].state == "queued"
              else "ack: completes an active job")
        self._complete(self.live[job_id], remove)

    @rule(dt=DT, data=st.data(), wrong_at=st.one_of(st.none(), st.integers(0, 2)),
          with_tokens=st.booleans())
    def ackb(self, dt: int, data: st.DataObject, wrong_at: int | None,
             with_tokens: bool) -> None:
        self._advance(dt)
        ids = [self._pick(data, self._processing()) for _ in range(data.draw(st.integers(1, 3)))]
        tokens: list[Any] | None = None
        if with_tokens:
            tokens = [self._token(self.live.get(i), "right") or "" for i in ids]
            if wrong_at is not None and wrong_at < len(ids):
                tokens[wrong_at] = "not-a-token"
        error: str | None = None
        ignored: list[int] = []
        for n, job_id in enumerate(ids):
            if job_id in ids[:n]:
                ignored.append(n)  # a repeated id is acknowledged once
                continue
            job = self.live.get(job_id)
            if job is not None and job.state == "queued" and job.attempts > 0:
                continue
            if job is None or job.state != "active":
                ignored.append(n)
                continue
            error = self._token_error(job, tokens[n] if tokens is not None else None)
            if error is not None:
                break
        try:
            got = self.h.call("ackb", ids, self.now, tokens=tokens, results=None, removes=None)
        except Refused as exc:
            event("ackb: refused")
            assert exc.message == error
            return
        assert error is None, f"ACKB should have failed: {error}"
        assert got == ignored
        if len(ignored) < len(ids):
            event("ackb: completes jobs")
        for n, job_id in enumerate(ids):
            if n not in ignored:
                self._complete(self.live[job_id], False)

    @rule(dt=DT, data=st.data(), kind=TOKEN_KINDS,
          unrecoverable=st.sampled_from([False, False, True]),
          remove=st.sampled_from([False, False, True]), bad=st.sampled_from(["wrong", "missing"]))
    def fail(self, dt: int, data: st.DataObject, kind: str, unrecoverable: bool,
             remove: bool, bad: str) -> None:
        self._advance(dt)
        late = [i for i, j in self.live.items() if j.state == "queued" and j.attempts > 0]
        job_id = self._pick(data, self._processing() + late)
        self._probe_lock(job_id, "fail", bad)
        job = self.live.get(job_id)
        token = self._token(job, kind)
        if job_id in late:
            expected = None
        elif job is None or job.state != "active":
            expected = NOT_PROCESSING.format(job_id)
        else:
            expected = self._token_error(job, token)
        try:
            applied = self.h.call("fail", job_id, self.now, token=token, error="boom",
                                  unrecoverable=unrecoverable,
                                  remove_on_fail=True if remove else None)
        except Refused as exc:
            assert exc.message == expected
            return
        if job is not None and job.state == "queued" and job.attempts > 0:
            # a late FAIL (lock expiry or a retry already charged the attempt) is
            # answered "already-finalized" and changes nothing (protocol §4.5)
            assert applied is False
            event("fail: late, already finalized")
            return
        assert applied is True
        assert expected is None and job is not None, f"FAIL should have failed: {expected}"
        job.attempts += 1
        if not unrecoverable and job.attempts < job.max_attempts:
            self._requeue(job, self._retry_at(job))
        elif remove or job.remove_on_fail:
            self._drop(job)
            assert self.h.storage.get_finished(job_id) is None
        else:
            self._finish(job, "failed", "max_attempts_exceeded")

    # --------------------------------------------------------------- leases, time, conns

    @rule(dt=DT, data=st.data(), kind=TOKEN_KINDS, duration=st.sampled_from([1000, 10_000]))
    def extend_lock(self, dt: int, data: st.DataObject, kind: str, duration: int) -> None:
        self._advance(dt)
        job_id = self._pick(data, self._processing())
        job = self.live.get(job_id)
        token = self._token(job, kind)
        ok = self.h.call("extend_lock", job_id, self.now, token=token, duration=duration)
        renews = job is not None and job.token is not None and token in (None, job.token)
        assert ok == renews
        if renews:
            assert job is not None
            job.lock_expires = self.now + duration
            job.renewals += 1
            job.lock_span = max(job.lock_span, duration)

    @rule(dt=st.sampled_from([1, 100, 999, 1000, 5000, 30_000]))
    def advance_time(self, dt: int) -> None:
        self._advance(dt)

    def _advance(self, dt: int) -> None:
        """Time passes; the actor's timer runs tick() (locks due now are swept).

        ``lock_expires`` is a lease's nominal end; the clock's readings are floors of
        real time, so a lease has surely run out only at a reading past its end."""
        if not dt:
            return
        self.now += dt
        assert self.h.call("tick", self.now) == []  # nobody is parked
        for job in list(self.live.values()):
            if job.lock_expires is None or job.lock_expires >= self.now:
                continue
            job.attempts += 1
            job.stall_count += 1
            if job.attempts >= job.max_attempts:
                event("lock expiry: buried at max attempts")
                self._finish(job, "failed", "max_attempts_exceeded")
            elif job.stall_count >= DEFAULT_MAX_STALLS:
                event("lock expiry: buried at max stalls")
                self._finish(job, "failed", "stalled")
            else:
                event("lock expiry: requeued")
                self._requeue(job)  # runAt unchanged

    @rule(dt=DT, data=st.data())
    def release_connection(self, dt: int, data: st.DataObject) -> None:
        self._advance(dt)
        used = sorted({j.conn for j in self.live.values() if j.conn is not None})
        if used and data.draw(st.integers(0, 3), label="used") > 0:
            conn = data.draw(st.sampled_from(used), label="conn")
        else:
            conn = data.draw(st.sampled_from(CONNS), label="conn")
        expected = 0
        for job in self.live.values():
            if job.conn != conn:
                continue
            if job.state == "active" and (job.token is None or job.renewals == 0):
                self._requeue(job)
                expected += 1
            job.conn = None
        if expected:
            event("release: jobs requeued")
        assert self.h.call("release_connection", conn, self.now) == expected

    @rule(dt=DT, paused=st.booleans())
    def set_paused(self, dt: int, paused: bool) -> None:
        self._advance(dt)
        self.h.call("set_paused", paused, self.now)
        self.paused = paused

    # --------------------------------------------------------------- crash

    @rule(dt=DT, charge_active=st.booleans())
    def crash_and_restore(self, dt: int, charge_active: bool) -> None:
        self._advance(dt)
        before = list(self.live.values())
        self.h.restart(self.now, charge_active=charge_active)
        assert self.h.q.paused == self.paused
        for job in before:
            job.conn = None
            job.renewals = 0
            if job.state == "active" and not charge_active and job.token is not None:
                # its lock kept, to a whole lease after the rebuild (renewals are not
                # stored: the holder may have renewed just before)
                job.lock_expires = self.now + job.lock_span
                continue
            job.token = job.lock_expires = None
            if job.state != "active" or not charge_active:
                continue
            job.attempts += 1
            job.stall_count += 1
            event("restore: active job charged")
            if job.attempts >= job.max_attempts:
                self._finish(job, "failed", "max_attempts_exceeded")
            elif job.stall_count >= DEFAULT_MAX_STALLS:
                event("restore: buried at max stalls")
                self._finish(job, "failed", "stalled")
            else:
                self._requeue(job, self._retry_at(job))
        # Unique keys come back with their holders (jobs that gave theirs to a newer job
        # do not take it back) and their remaining TTL, extensions included.
        self.dedup = {key: held for key, held in self.dedup.items() if held[0] in self.live}

    # --------------------------------------------------------------- invariants

    def expected_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(ALL_STATES, 0)
        for job in self.live.values():
            counts[job.visible(self.now)] += 1
        if self.paused:
            counts["paused"] = counts["waiting"] + counts["prioritized"]
            counts["waiting"] = counts["prioritized"] = 0
        for state in self.finished.values():
            counts[state] += 1
        return counts

    @invariant()
    def counts_match(self) -> None:
        counts = self.h.call("counts", self.now)
        assert counts == self.expected_counts()
        assert sum(counts.values()) == len(self.live) + len(self.finished)

    @invariant()
    def every_job_in_exactly_one_place(self) -> None:
        q, storage = self.h.q, self.h.storage
        assert set(q.jobs) == set(self.live)
        assert set(self.h.index) == set(self.live)
        completed = set(storage.iter_finished_ids(QUEUE, "completed"))
        failed = set(storage.iter_finished_ids(QUEUE, "failed"))
        assert completed == {i for i, s in self.finished.items() if s == "completed"}
        assert failed == {i for i, s in self.finished.items() if s == "failed"}
        assert not (completed & failed) and not (set(self.live) & (completed | failed))
        recovered = storage.load()
        assert recovered.finished_counts.get((QUEUE, "completed"), 0) == len(completed)
        assert recovered.finished_counts.get((QUEUE, "failed"), 0) == len(failed)

    @invariant()
    def memory_and_storage_agree(self) -> None:
        q = self.h.q
        stored = {r["id"]: r for r in self.h.storage.load().live_jobs}
        assert set(stored) == set(q.jobs)
        for job_id, job in self.live.items():
            mem, rec = q.jobs[job_id], stored[job_id]
            assert mem.state == rec["state"] == job.state
            assert mem.attempts == rec.get("attempts", 0) == job.attempts
            assert mem.stall_count == rec.get("stallCount", 0) == job.stall_count
            assert mem.dedup_lost == rec.get("dedup_lost", False)
            if job.state == "queued":
                assert mem.run_at == rec["runAt"] == job.run_at
            assert q.state_of(job_id, self.now) == job.visible(self.now)

    @invariant()
    def locks_and_keys_match(self) -> None:
        q = self.h.q
        locks = {i: lock.token for i, lock in q.leases.locks.items()}
        assert locks == {i: j.token for i, j in self.live.items() if j.token is not None}
        for job_id in q.leases.locks:
            assert q.jobs[job_id].state == "active", "a lock on a job that is not active"
        assert {k: (d.owner, d.expires_at) for k, d in q.dedup.holders.items()} == self.dedup

    @invariant()
    def every_unique_key_has_one_holder(self) -> None:
        q = self.h.q
        for job_id, job in self.live.items():
            assert q.jobs[job_id].dedup_lost == job.dedup_lost
            if job.unique_key is not None and not job.dedup_lost:
                assert self.dedup.get(job.unique_key, ("",))[0] == job_id

    @invariant()
    def attempts_and_stalls_never_decrease(self) -> None:
        for job in self.live.values():
            key = (job.id, job.gen)
            attempts, stalls = self.seen.get(key, (0, 0))
            assert job.attempts >= attempts and job.stall_count >= stalls
            self.seen[key] = (job.attempts, job.stall_count)
            assert key not in self.acked


# TRIOQUEUE_MODEL_SCALE=10 runs the machine ten times as many examples (README).
MODEL_SCALE = int(os.environ.get("TRIOQUEUE_MODEL_SCALE", "1"))
QueueMachine.TestCase.settings = settings(
    max_examples=60 * MODEL_SCALE,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueModel = QueueMachine.TestCase
