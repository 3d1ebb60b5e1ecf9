"""Job groups: fair round-robin claims across a queue's groups (BullMQ Pro's groups, as
bunqueue serves them), with per-group pause, concurrency and rate limits.

A job with a ``groupId`` waits in its group's own heap, ordered by priority ascending
(0 first) and then admission order; ungrouped ready jobs are always served first (they
stay in the queue's ready heap). A claim takes the group at the front of the rotation,
leases its best job and puts the group at the back: one job per group per turn.

**A claim is O(log jobs), whatever the number of groups.** Every group is in exactly one
place, :attr:`Group.where`:

- ``ROTATION``: it may have a job to hand out; it is in the rotation deque;
- ``FULL``: at its concurrency limit; back in the rotation when one of its jobs leaves
  ``active`` (``lifecycle.count`` tells :meth:`Groups.left_active`);
- ``TIMED``: out of its rate window or under ``RateLimitGroup``'s deadline; in a heap
  by the time it may run again, released by the first claim after that time (and the
  queue wakes then while pulls are parked: ``next_deadline``);
- ``IDLE``: nothing to hand out, or paused; scheduled again by the next job that
  becomes ready in it, or by ResumeGroup.

Whether a group may run is checked when it reaches the front of the rotation, not when
something changes (a group paused or limited while in the rotation is set aside the
next time it comes up). Each check moves the group out of the rotation, so a group is
checked at most once per change: amortised O(1), never a scan of the groups.

Limits: a group's own (``SetGroupConcurrency``, ``SetGroupRateLimit``, stored with the
queue) or else the queue's group defaults, which the pulls' ``group`` field sets
(``{concurrency, limit: {max, duration}}``, stored when it changes). The rate limit is
the queue's rule (:class:`~.limits.RateLimit`): at most ``max`` claims in any
``duration`` ms, the first window included, kept per group as the times of its recent
claims (not durable: a restart starts with none). ``RateLimitGroup`` holds the group
until ``now + duration``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Refused
from ..job import QUEUED
from . import dependencies
from .limits import RateLimit

if TYPE_CHECKING:
    from ..job import JobRecord
    from .state import QueueState

IDLE, ROTATION, FULL, TIMED = "idle", "rotation", "full", "timed"


@dataclass(slots=True)
class GroupSettings:
    """What a group keeps across restarts (in the queue's meta row)."""

    paused: bool = False
    concurrency: int | None = None
    rate: tuple[int, int] | None = None  # (max, duration ms)

    def empty(self) -> bool:
        return not self.paused and self.concurrency is None and self.rate is None

    def to_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.paused:
            meta["paused"] = True
        if self.concurrency is not None:
            meta["concurrency"] = self.concurrency
        if self.rate is not None:
            meta["rate"] = list(self.rate)
        return meta

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> GroupSettings:
        rate = meta.get("rate")
        return cls(bool(meta.get("paused")), meta.get("concurrency"),
                   None if rate is None else (int(rate[0]), int(rate[1])))


@dataclass(slots=True, eq=False)
class Group:
    name: str
    settings: GroupSettings
    ready: list[tuple[int, int, str]] = field(default_factory=list)  # (priority, seq, id)
    pending: int = 0  # queued jobs of the group (waiting, prioritized, delayed)
    active: int = 0
    where: str = IDLE
    starts: RateLimit | None = None  # its recent claims, while a rate limit applies
    held_until: int = 0  # RateLimitGroup's deadline
    timed_until: int = 0  # when a TIMED group may run again
    dead: bool = False  # forgotten (nothing queued, active or set): stale references


class Groups:
    """The groups of one queue and their schedule."""

    __slots__ = ("by_name", "rotation", "_timed", "_seq", "settings", "defaults",
                 "pending")

    def __init__(self, settings: dict[str, GroupSettings],
                 defaults: GroupSettings) -> None:
        self.by_name: dict[str, Group] = {}
        self.rotation: deque[Group] = deque()
        self._timed: list[tuple[int, int, Group]] = []
        self._seq = 0
        # the stored settings (QueueSettings.groups / group_defaults): shared, not copied
        self.settings = settings
        self.defaults = defaults
        self.pending = 0  # queued grouped jobs of the queue (GetGroupsJobsCount)

    # ------------------------------------------------------------------ membership

    def group(self, name: str) -> Group:
        g = self.by_name.get(name)
        if g is None:
            conf = self.settings.get(name) or GroupSettings()
            g = self.by_name[name] = Group(name, conf)
        return g

    def _forget_if_unused(self, g: Group) -> None:
        if not g.pending and not g.active and g.settings.empty() and not g.held_until:
            g.dead = True
            g.ready.clear()
            del self.by_name[g.name]

    def counted(self, job: JobRecord, delta: int, active: bool) -> None:
        """A grouped job entered (+1) or left (-1) the queued or active place
        (``lifecycle.count``, the one choke point)."""
        g = self.group(job.group_id)  # type: ignore[arg-type]
        if active:
            g.active += delta
            if delta < 0 and g.where == FULL and not self._full(g):
                self._schedule(g)
        else:
            g.pending += delta
            self.pending += delta
        if delta < 0:
            self._forget_if_unused(g)

    def push(self, job: JobRecord) -> None:
        """A grouped job became ready (``lifecycle._push_ready``)."""
        g = self.group(job.group_id)  # type: ignore[arg-type]
        heapq.heappush(g.ready, (int(job.priority), job.seq, job.id))
        if g.where == IDLE:
            self._schedule(g)

    # ------------------------------------------------------------------ claims

    @property
    def scheduled(self) -> bool:
        return bool(self.rotation or self._timed)

    def claim(self, q: QueueState, now: int) -> JobRecord | None:
        """The next grouped job to lease, round robin over the groups that may run."""
        self.release_due(now)
        rotation = self.rotation
        while rotation:
            g = rotation.popleft()
            if g.dead or g.where != ROTATION:
                continue
            g.where = IDLE
            if g.settings.paused:
                continue
            if self._full(g):
                g.where = FULL
                continue
            wait_until = self._wait_until(g, now)
            if wait_until:
                self._park_timed(g, wait_until)
                continue
            job = self._pop_ready(q, g, now)
            if job is None:
                continue
            if g.starts is not None and self._rate(g) is not None:
                g.starts.spend(1, now)
            if g.ready:
                g.where = ROTATION
                rotation.append(g)
            return job
        return None

    def _pop_ready(self, q: QueueState, g: Group, now: int) -> JobRecord | None:
        jobs = q.jobs
        while g.ready:
            _, seq, job_id = heapq.heappop(g.ready)
            job = jobs.get(job_id)
            if job is None or job.state != QUEUED or job.seq != seq:
                continue  # stale: the job moved or left since
            if job.ttl is not None and now > job.created_at + job.ttl:
                dependencies.drop_queued(q, job, now)  # expired waiting, as in the ready heap
                continue
            return job
        return None

    def _schedule(self, g: Group) -> None:
        """Into the rotation (checked when it comes up)."""
        if g.dead or not g.ready or g.settings.paused:
            g.where = IDLE
            return
        g.where = ROTATION
        self.rotation.append(g)

    def _park_timed(self, g: Group, until: int) -> None:
        g.where = TIMED
        g.timed_until = until
        self._seq += 1
        heapq.heappush(self._timed, (until, self._seq, g))

    def release_due(self, now: int) -> None:
        """Groups whose time came back into the rotation (and stale entries dropped):
        by every claim, and by the queue's tick, so the wake-up ``next_release`` names
        is used up even when no claim runs (the queue at its concurrency limit)."""
        timed = self._timed
        while timed and timed[0][0] <= now:
            until, _, g = heapq.heappop(timed)
            if g.where == TIMED and g.timed_until == until and not g.dead:
                self._schedule(g)

    def next_release(self) -> int | None:
        """When the first group held by time may run again (stale entries make it
        early at worst: a claim then finds nothing new)."""
        return self._timed[0][0] if self._timed else None

    # ------------------------------------------------------------------ limits

    def _concurrency(self, g: Group) -> int | None:
        own = g.settings.concurrency
        return own if own is not None else self.defaults.concurrency

    def _rate(self, g: Group) -> tuple[int, int] | None:
        own = g.settings.rate
        return own if own is not None else self.defaults.rate

    def _full(self, g: Group) -> bool:
        cap = self._concurrency(g)
        return cap is not None and g.active >= cap

    def _wait_until(self, g: Group, now: int) -> int:
        """0 when the group may hand out a job now; else when it may (epoch ms)."""
        if g.held_until:
            if now < g.held_until:
                return g.held_until
            g.held_until = 0
        rate = self._rate(g)
        if rate is not None:
            wait = self._starts(g, rate, now).wait_ms(now)
            if wait is None:  # (a limit of 0: looked at again a window later)
                return now + rate[1]
            if wait:
                return now + wait
        return 0

    @staticmethod
    def _starts(g: Group, rate: tuple[int, int], now: int) -> RateLimit:
        """The group's recent claims under ``rate``; a changed limit keeps them, so
        setting it again opens no new burst."""
        starts = g.starts
        if starts is None or (starts.max, starts.duration) != rate:
            starts = g.starts = RateLimit.new(rate[0], rate[1], None, now, before=starts)
        return starts

    def rate_ttl(self, g: Group, now: int, max_jobs: int) -> int:
        """GetGroupRateLimitTtl: ms until ``max_jobs`` more may start; -2 with no limit."""
        if g.held_until > now:
            return g.held_until - now
        rate = self._rate(g)
        if rate is None:
            return -2
        wait = self._starts(g, rate, now).wait_ms(now, max_jobs)
        return rate[1] if wait is None else wait

    def reconsider(self) -> None:
        """A limit was raised or removed: the groups set aside by it may run now.
        Only the groups held FULL or TIMED are looked at (a change of limits, not a
        claim); the rest are checked when they come up, as always."""
        for g in list(self.by_name.values()):
            if g.where in (FULL, TIMED):
                self._schedule(g)

    # ------------------------------------------------------------------ settings

    def configure(self, name: str) -> GroupSettings:
        """The group's stored settings, made if it has none (to be changed, then
        :meth:`configured`)."""
        conf = self.settings.get(name)
        if conf is None:
            conf = self.settings[name] = GroupSettings()
            g = self.by_name.get(name)
            if g is not None:
                g.settings = conf
        return conf

    def configured(self, name: str) -> None:
        """A setting of the group changed: a group held by the old value is looked at
        again when it comes up, and settings back to the defaults are forgotten."""
        g = self.by_name.get(name)
        conf = self.settings.get(name)
        if conf is not None and conf.empty():
            del self.settings[name]
            if g is not None:
                g.settings = GroupSettings()
        if g is not None:
            if g.where in (FULL, TIMED, IDLE):
                self._schedule(g)
            self._forget_if_unused(g)

    def set_defaults(self, concurrency: int | None, rate: tuple[int, int] | None) -> bool:
        """The pulls' ``group`` field; True when it changed the defaults."""
        defaults = self.defaults
        if (defaults.concurrency, defaults.rate) == (concurrency, rate):
            return False
        defaults.concurrency, defaults.rate = concurrency, rate
        self.reconsider()
        return True

    def hold(self, name: str, until: int) -> None:
        """RateLimitGroup: no job of the group starts before ``until``."""
        self.group(name).held_until = until

    def admit(self, specs: Sequence[dict[str, Any]]) -> None:
        """``groupMaxSize``: a push that would take a group past it is refused whole
        (every item of a PUSHB), before anything is admitted. Consumes the field."""
        adding: dict[str, int] = {}
        bounds: list[tuple[str, int]] = []
        for spec in specs:
            group_id = spec.get("group_id")
            max_size = spec.pop("group_max_size", None)
            if group_id is None:
                continue
            adding[group_id] = adding.get(group_id, 0) + 1
            if max_size is not None:
                bounds.append((group_id, max_size))
        for group_id, max_size in bounds:
            g = self.by_name.get(group_id)
            if (g.pending if g is not None else 0) + adding[group_id] > max_size:
                raise Refused(f"Group {group_id} is full (maxSize {max_size})")
