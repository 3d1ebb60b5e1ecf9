"""The queue's limits and job groups against a small reference model (hypothesis,
stateful), with restarts in the middle.

Rules push jobs (ungrouped or in one of three groups, some delayed), pull (any count,
with or without owner), ACK, FAIL (retried later or dead-lettered), set and clear the
queue's concurrency and rate limit, set and remove a group's concurrency, pause and
resume groups, set the groups' default concurrency (a pull's ``group`` field), move
time, and crash: a fresh QueueState is rebuilt from storage (with and without charging
the active jobs) and the run goes on.

What the model checks is what the limits promise, not which of several allowed jobs
comes next:

- a pull never takes the queue past its concurrency limit, nor a group past its own or
  the default one, nor a paused group's job, nor the queue's rate window past ``max``
  jobs leased in the last ``duration`` ms;
- ungrouped ready jobs go before any grouped one;
- a pull that comes back short had a reason: the queue's limits bind, or every group
  with a ready job is paused, full or empty (no job is starved while another waits);
- the group counts (pending, active) and the queue counts match the model, also after a
  restart, and the settings survive it;
- pulls parked at the queue are served by its ticks under the same rules, and a tick
  never leaves the queue due again at once (``next_deadline`` after a tick at ``now``
  is later than ``now``: a wake-up that stayed in the past would make the actor spin).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trioqueue.core.commands import groups
from trioqueue.core.commands.context import Ctx
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import PullWaiter
from trioqueue.testing.queue import QueueHarness

QUEUE = "lq"
START = 1_700_000_000_000
GROUPS = ("a", "b", "c")
DT = st.sampled_from([0, 0, 1, 50, 400, 1000])


class LimitsMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.h = QueueHarness(QUEUE)
        self.h.call("set_stall_config", {"enabled": False})
        self.now = START
        self.live: dict[str, dict[str, Any]] = {}  # id -> {group, state, run_at, token}
        self.concurrency: int | None = None
        self.rate: tuple[int, int] | None = None  # (limit, duration)
        self.rate_starts: list[int] = []  # when each job leased under the limit started
        self.group_cap: dict[str, int] = {}
        self.paused: set[str] = set()
        self.default_cap: int | None = None
        self.parked = 0  # pulls parked (and not answered yet)

    # --------------------------------------------------------------- helpers

    def _cmd(self, handler: Any, **msg: Any) -> dict[str, Any]:
        reply: dict[str, Any] = handler(self.h.q, {"queue": QUEUE, **msg}, Ctx(now=self.now))
        self.h.commit()
        return reply

    def _active(self, group: str | None = None) -> int:
        return sum(1 for j in self.live.values() if j["state"] == "active"
                   and (group is None or j["group"] == group))

    def _ready(self, group: str | None) -> int:
        return sum(1 for j in self.live.values() if j["state"] == "queued"
                   and j["group"] == group and j["run_at"] <= self.now)

    def _cap(self, group: str) -> int | None:
        return self.group_cap.get(group, self.default_cap)

    def _group_blocked(self, group: str) -> bool:
        cap = self._cap(group)
        return group in self.paused or (cap is not None and self._active(group) >= cap)

    def _in_window(self) -> int:
        """Jobs leased in the rate window that ends now, ``(now - duration, now]``."""
        assert self.rate is not None
        return sum(1 for t in self.rate_starts if t > self.now - self.rate[1])

    # --------------------------------------------------------------- rules

    @rule(dt=DT, group=st.sampled_from([None, *GROUPS, "a"]), delay=st.sampled_from([0, 0, 500]),
          n=st.integers(1, 4))
    def push(self, dt: int, group: str | None, delay: int, n: int) -> None:
        self.now += dt
        fields: dict[str, Any] = {"data": None, "delay": delay, "backoff": 0}
        if group is not None:
            fields["groupId"] = group
        specs = [parse_job_input(dict(fields), custom_id_key="customId") for _ in range(n)]
        for job_id in self.h.call("push", specs, self.now):
            self.live[job_id] = {"group": group, "state": "queued",
                                 "run_at": self.now + delay, "token": None}
        self._tick()  # as the actor does after every batch

    @rule(dt=DT, count=st.integers(1, 6), owner=st.sampled_from([None, "w"]))
    def pull(self, dt: int, count: int, owner: str | None) -> None:
        self.now += dt
        jobs, tokens = self.h.call("pull", self.now, count=count, owner=owner,
                                   lock_ttl=600_000, conn=None)
        self._leased(jobs, tokens, count)

    def _leased(self, jobs: list[dict[str, Any]], tokens: list[str], count: int) -> None:
        """Check one pull's jobs (sent or parked) against the rules; mark them active."""
        got = [j["id"] for j in jobs]
        seen_grouped = False
        for job_id, token in zip(got, tokens, strict=True):
            job = self.live[job_id]
            group = job["group"]
            assert job["state"] == "queued" and job["run_at"] <= self.now
            if group is None:
                assert not seen_grouped, "an ungrouped job after a grouped one"
            else:
                seen_grouped = True
                assert not self._group_blocked(group), f"{group} was not to run"
            job["state"], job["token"] = "active", token or None
            if self.concurrency is not None:
                assert self._active() <= self.concurrency
        if self.rate is not None and got:
            self.rate_starts += [self.now] * len(got)
            assert self._in_window() <= self.rate[0], "the rate window went over max"
        if seen_grouped:
            assert self._ready(None) == 0, "a grouped job went before an ungrouped one"
        if len(got) < count:
            self._check_short_pull()

    def _check_short_pull(self) -> None:
        if self.concurrency is not None and self._active() >= self.concurrency:
            return
        if self.rate is not None:
            return  # the window may be full: bounded above, not asserted here
        assert self._ready(None) == 0, "an ungrouped ready job was left behind"
        for group in GROUPS:
            if self._ready(group):
                assert self._group_blocked(group), f"group {group} starved"

    def _pick_active(self, data: st.DataObject) -> str | None:
        active = sorted(i for i, j in self.live.items() if j["state"] == "active")
        return data.draw(st.sampled_from(active)) if active else None

    @rule(dt=DT, data=st.data())
    def ack(self, dt: int, data: st.DataObject) -> None:
        self.now += dt
        job_id = self._pick_active(data)
        if job_id is not None:
            self.h.call("ack", job_id, self.now, token=self.live[job_id]["token"])
            del self.live[job_id]
            self._tick()

    @rule(dt=DT, data=st.data())
    def fail(self, dt: int, data: st.DataObject) -> None:
        self.now += dt
        job_id = self._pick_active(data)
        if job_id is None:
            return
        job = self.live[job_id]
        self.h.call("fail", job_id, self.now, token=job["token"], error="x")
        record = self.h.q.jobs.get(job_id)
        if record is None:
            del self.live[job_id]  # dead-lettered (its attempts ran out)
        else:
            job.update(state="queued", run_at=record.run_at, token=None)
        self._tick()

    @rule(limit=st.one_of(st.none(), st.integers(0, 4)))
    def set_concurrency(self, limit: int | None) -> None:
        self.h.call("set_concurrency", limit, self.now)
        self.concurrency = limit
        self._tick()

    @rule(rate=st.one_of(st.none(), st.tuples(st.integers(0, 3), st.sampled_from([100, 1000]))))
    def set_rate_limit(self, rate: tuple[int, int] | None) -> None:
        if rate is None:
            self.h.call("clear_rate_limit", self.now)
        else:
            self.h.call("set_rate_limit", rate[0], rate[1], None, self.now)
        if rate != self.rate:
            # A new limit holds for the leases from now on (it also counts the ones of
            # the last window it replaces, but not those a shorter window forgot).
            self.rate_starts = []
        # (set again as it was, its recent leases still count: no new window opens)
        self.rate = rate
        self._tick()

    @rule(group=st.sampled_from(GROUPS), cap=st.one_of(st.none(), st.integers(1, 2)))
    def set_group_concurrency(self, group: str, cap: int | None) -> None:
        if cap is None:
            self._cmd(groups.remove_group_concurrency, groupId=group)
            self.group_cap.pop(group, None)
        else:
            self._cmd(groups.set_group_concurrency, groupId=group, concurrency=cap)
            self.group_cap[group] = cap
        self._tick()

    @rule(group=st.sampled_from(GROUPS), paused=st.booleans())
    def pause_group(self, group: str, paused: bool) -> None:
        self._cmd(groups.pause_group if paused else groups.resume_group, groupId=group)
        (self.paused.add if paused else self.paused.discard)(group)
        self._tick()

    @rule(cap=st.one_of(st.none(), st.integers(1, 2)))
    def set_default_group_concurrency(self, cap: int | None) -> None:
        groups.pull_group(self.h.q, {} if cap is None else {"concurrency": cap})
        self.h.commit()
        self.default_cap = cap

    @rule(count=st.integers(1, 3))
    def park(self, count: int) -> None:
        """A long-poll pull that found nothing waits at the queue (as the handler parks
        it); only when nothing could be pulled now, as in the broker."""
        jobs, tokens = self.h.call("pull", self.now, count=count, owner=None,
                                   lock_ttl=600_000, conn=None)
        if jobs:
            self._leased(jobs, tokens, count)  # it got some: answered, not parked
            return
        self.h.q.park(PullWaiter(handle=count, count=count, batch=True, owner=None,
                                 lock_ttl=600_000, conn=None, detach=False,
                                 deadline_ms=self.now + 60_000))
        self.parked += 1

    @rule(dt=st.sampled_from([1, 100, 1000, 5000]))
    def advance_time(self, dt: int) -> None:
        self.now += dt
        self._tick()

    def _tick(self) -> None:
        for answer in self.h.call("tick", self.now):
            assert answer.work is None  # the model's pulls are small
            self.parked -= 1
            jobs = answer.reply["jobs"]
            self._leased(jobs, [""] * len(jobs), answer.waiter.count)
        after = self.h.q.next_deadline()
        assert after is None or after > self.now, "due again at once: the actor would spin"

    @rule(dt=DT, charge_active=st.booleans())
    def crash_and_restore(self, dt: int, charge_active: bool) -> None:
        self.now += dt
        self.h.restart(self.now, charge_active=charge_active)
        self.parked = 0  # parked pulls live in memory: their clients poll again
        self.rate_starts = []  # a restarted queue starts its rate window empty
        for job_id, job in list(self.live.items()):
            if job["state"] != "active" or not charge_active:
                continue  # (an active job not charged keeps its lock and token)
            job["token"] = None
            record = self.h.q.jobs.get(job_id)
            if record is None:
                del self.live[job_id]  # charged and dead-lettered
            else:
                job.update(state="queued", run_at=record.run_at)

    # --------------------------------------------------------------- invariants

    @invariant()
    def counts_match(self) -> None:
        if not hasattr(self, "h"):
            return
        q = self.h.q
        assert q.c.active == self._active()
        for group in GROUPS:
            pending = sum(1 for j in self.live.values()
                          if j["group"] == group and j["state"] == "queued")
            assert self._cmd(groups.get_group_jobs_count, groupId=group)["data"]["count"] == pending
            active = self._cmd(groups.get_group_active_count, groupId=group)["data"]["count"]
            assert active == self._active(group)

    @invariant()
    def settings_match(self) -> None:
        if not hasattr(self, "h"):
            return
        q = self.h.q
        assert q.settings.concurrency == self.concurrency
        assert (q.settings.rate is None) == (self.rate is None)
        for group in GROUPS:
            paused = self._cmd(groups.is_group_paused, groupId=group)["data"]["paused"]
            assert paused == (group in self.paused)
            own = self._cmd(groups.get_group_concurrency, groupId=group)["data"]["concurrency"]
            assert own == self.group_cap.get(group)
        assert q.groups.defaults.concurrency == self.default_cap


MODEL_SCALE = int(os.environ.get("TRIOQUEUE_MODEL_SCALE", "1"))
LimitsMachine.TestCase.settings = settings(
    max_examples=200 * MODEL_SCALE,  # fast (~3 s); 60 missed a group one over its cap
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLimitsModel = LimitsMachine.TestCase
