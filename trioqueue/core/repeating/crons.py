"""Cron schedules (bunqueue's ``Cron`` commands, reference 2.9 and 4.15): what a
schedule is, when it fires next, and what a firing pushes. Sans-IO: the scheduler task
(:mod:`trioqueue.actors.scheduler`) owns the timer, the queues push and store.

A schedule is a cron expression (:mod:`.expressions`, in ``timezone``) or ``repeatEvery``
ms; ``repeatEvery`` slots are anchored to the schedule (``anchor + k * every``), not to
the moment of the last firing, so a late firing does not shift the next slots. A
firing advances ``executions`` and ``nextRun`` and pushes one job; both are committed
in one commit with the job (the queue's ``__cron_fire__``), so a crash can neither fire
a slot twice nor lose one. The registry (:class:`CronRegistry`) keeps the schedules by
name and one heap of next runs: 10,000 crons cost one timer.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import fields
from ..errors import Refused
from ..job_data import MAX_DATA_CHARS
from ..options import parse_job_input
from .expressions import CronSchedule, parse_cron, zone

CRON_KIND = "cron"  # the kind of the broker records that hold the schedules
# In a cluster, the lease whose holder runs every schedule (cluster/crons.py):
# '#' is no character of a queue name (fields.queue_name), so no client queue has it.
SCHEDULER_LEASE = "#cron-scheduler"
CRON_NOT_FOUND = "Cron job not found"
MAX_REPEAT_EVERY_MS = 4_320_000_000_000_000
OVERLAP_FRACTION = 0.8  # bunqueue: no firing within 0.8 x the interval of the last one
OVERLAP_DEFAULT_MS = 60_000  # the interval assumed for cron expressions
# jobOptions a schedule passes to its jobs (others are ignored, as in bunqueue)
JOB_OPTIONS = ("maxAttempts", "backoff", "timeout", "delay", "stallTimeout",
               "removeOnComplete", "removeOnFail")

FIRE, SKIP, EXHAUSTED = "fire", "skip", "exhausted"


@dataclass(frozen=True, slots=True)
class CronLimits:
    """The broker's bounds on schedules (Config's ``cron_min_interval_ms``,
    ``max_cron_schedules``, ``max_data_bytes``): a schedule is work the broker does on
    its own, forever, so what a client may ask of it is bounded where it is asked."""

    min_interval_ms: float = 1
    max_schedules: int | None = None
    max_data_bytes: int = MAX_DATA_CHARS

    def check_count(self, schedules: int) -> None:
        """Refuse a new schedule when ``schedules`` are already kept."""
        if self.max_schedules is not None and schedules >= self.max_schedules:
            raise Refused(f"Too many cron schedules (max {self.max_schedules}; "
                          f"--max-cron-schedules)")

    def check_period(self, defn: CronDef) -> None:
        """Refuse a schedule that may fire more often than the minimum period."""
        minimum = self.min_interval_ms
        if defn.repeat_every is not None:
            if defn.repeat_every < minimum:
                raise Refused(f"repeatEvery must be at least {minimum:g} ms (the "
                              f"broker's minimum period; --cron-min-interval-ms)")
        elif defn.schedule is not None and minimum > 1000:  # (every expression passes 1 s)
            gap = shortest_gap_ms(parse_cron(defn.schedule, defn.timezone))
            if gap < minimum:
                raise Refused(f"Cron schedule fires {gap / 1000:g} s apart, more often "
                              f"than the broker's minimum period of {minimum:g} ms "
                              f"(--cron-min-interval-ms): {defn.schedule}")


def shortest_gap_ms(schedule: CronSchedule) -> int:
    """The shortest time between two firings of a cron expression within a day, and
    from one day's last to the next day's first (any two days taken as adjacent;
    daylight-saving shifts, which move a firing by an hour twice a year, left out).

    Built up a field at a time: the firings of a minute span its first to its last
    second, those of an hour its first minute's first to its last minute's last, and
    the shortest gap at each step is the previous one's, or the step from one matching
    minute (hour) to the next, from the last firing of one to the first of the other."""
    sets = schedule.fields_sets()
    if sets is None:
        return 1000  # (a parse this code does not know: the finest an expression has)
    seconds, minutes, hours = sets
    first, last = seconds[0], seconds[-1]
    gap = min((b - a for a, b in zip(seconds, seconds[1:], strict=False)),
              default=86_400)
    for values, unit in ((minutes, 60), (hours, 3600)):
        steps = (b - a for a, b in zip(values, values[1:], strict=False))
        gap = min([gap] + [step * unit - last + first for step in steps])
        first, last = values[0] * unit + first, values[-1] * unit + last
    return 1000 * min(gap, 86_400 - last + first)


@dataclass
class CronDef:
    name: str
    queue: str
    job_name: str
    data: Any
    schedule: str | None
    repeat_every: int | None
    timezone: str | None
    priority: float
    max_limit: int | None
    unique_key: str | None
    dedup: dict[str, Any] | None
    skip_missed_on_restart: bool
    skip_if_no_worker: bool
    prevent_overlap: bool
    job_options: dict[str, Any]
    anchor: int  # repeatEvery slots are anchor + k * every
    next_run: int
    executions: int = 0
    last_fired: int | None = None
    created_at: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # reserved
    # An upper bound of the template data's JSON text, at most the data limit, when
    # one was known at the Cron command (the transport's, for a large frame): a firing
    # trusts it rather than measuring the template again (None: each firing measures).
    data_chars: int | None = None

    def next_slot(self, after: int) -> int | None:
        """The first slot strictly after ``after`` (epoch ms); None: there is none."""
        if self.schedule is not None:
            return parse_cron(self.schedule, self.timezone).next_after(after)
        assert self.repeat_every is not None
        every = self.repeat_every
        if after < self.anchor:
            return self.anchor
        return self.anchor + ((after - self.anchor) // every + 1) * every

    def info(self) -> dict[str, Any]:
        """bunqueue's CronInfo."""
        return {
            "name": self.name, "jobName": self.job_name, "queue": self.queue,
            "schedule": self.schedule,
            "repeatEvery": None if self.repeat_every is None else float(self.repeat_every),
            "nextRun": float(self.next_run), "executions": self.executions,
            "maxLimit": self.max_limit, "timezone": self.timezone,
            "priority": self.priority,
        }

    def to_record(self) -> dict[str, Any]:
        """The stored record: the fields as they are (``asdict`` copied the template's
        data member by member, a million values at each firing); ``extra`` copied."""
        record = {name: getattr(self, name) for name in _FIELD_NAMES}
        record["extra"] = dict(self.extra)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> CronDef:
        known = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def job_message(self) -> dict[str, Any]:
        """The PUSH a firing sends (validated by the queue as any PUSH)."""
        msg: dict[str, Any] = {"queue": self.queue, "name": self.job_name,
                               "data": self.data, "priority": self.priority}
        msg.update(self.job_options)
        unique_key = self.unique_key
        if unique_key is None and self.prevent_overlap:
            unique_key = overlap_key(self.name)
        if unique_key is not None:
            msg["uniqueKey"] = unique_key
            if self.dedup is not None:
                msg["dedup"] = self.dedup
        return msg


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(CronDef))


def overlap_key(name: str) -> str:
    """The unique key of a preventOverlap schedule's jobs: a firing while the previous
    job is queued or active answers that job instead of pushing another."""
    return f"cron:{name}"


def _bool(msg: dict[str, Any], key: str, default: bool) -> bool:
    value = msg.get(key)
    return default if value is None else fields.lenient_bool(value)


def _job_options(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused("jobOptions must be an object")
    return {key: value[key] for key in JOB_OPTIONS if value.get(key) is not None}


def check_job_options(template: dict[str, Any]) -> None:
    """Validate the template as a PUSH would, errors prefixed ``jobOptions.``."""
    try:
        parse_job_input({"name": "x", "data": None, **template}, custom_id_key="jobId")
    except Refused as exc:
        raise Refused(f"jobOptions.{exc.message}") from None


def parse_cron_command(msg: dict[str, Any], now: int, existing: CronDef | None,
                       limits: CronLimits | None = None, frame_bytes: int | None = None,
                       json_bound: int | None = None) -> CronDef:
    """A ``Cron`` upsert: the schedule it describes (``executions`` kept from the one it
    replaces). Needs a valid ``schedule`` or ``repeatEvery``; the schedule wins if both.
    Then ``limits``' checks: the job a firing pushes is validated as a PUSH of it
    would be (its data, with the same error texts), so that a schedule is refused once
    here rather than at each firing; and its period. ``frame_bytes`` and
    ``json_bound`` are the command's, as for a PUSH: data the transport bounded is not
    measured again, and its bound is kept for the firings (``data_chars``)."""
    name = msg.get("name")
    if not isinstance(name, str) or not name:
        raise Refused("Cron name is required")
    if fields.js_length(name) > fields.MAX_NAME_LENGTH:
        raise Refused("Cron name too long (max 256 characters)")
    queue = fields.queue_name(msg.get("queue"))
    job_name = msg.get("jobName")
    if job_name is not None and (not isinstance(job_name, str) or not job_name):
        raise Refused("jobName must be a non-empty string")
    tz = msg.get("timezone")
    if tz is not None and not isinstance(tz, str):
        raise Refused("timezone must be a string")
    schedule = msg.get("schedule")
    every: int | None = None
    if schedule is not None:
        parse_cron(schedule, tz)  # validates both
    else:
        if tz is not None:
            zone(tz)
        number = fields.strict_number(msg.get("repeatEvery"), "repeatEvery", minimum=1,
                                      maximum=MAX_REPEAT_EVERY_MS)
        if number is None:
            raise Refused("Cron needs a schedule or repeatEvery")
        every = int(number)
    priority = fields.lenient_number(msg.get("priority"), "priority", default=0)
    max_limit = fields.lenient_number(msg.get("maxLimit"), "maxLimit")
    unique_key = msg.get("uniqueKey")
    if unique_key is not None and not isinstance(unique_key, str):
        raise Refused("uniqueKey must be a string")
    dedup = msg.get("dedup") if isinstance(msg.get("dedup"), dict) else None
    template = _job_options(msg.get("jobOptions"))
    check_job_options(template)
    defn = CronDef(
        name=name, queue=queue, job_name=job_name or name, data=msg.get("data"),
        schedule=schedule, repeat_every=every, timezone=tz,
        priority=priority or 0,
        max_limit=int(max_limit) if max_limit is not None and max_limit > 0 else None,
        unique_key=unique_key, dedup=dedup,
        skip_missed_on_restart=_bool(msg, "skipMissedOnRestart", True),
        skip_if_no_worker=_bool(msg, "skipIfNoWorker", False),
        prevent_overlap=_bool(msg, "preventOverlap", True),
        job_options=template, anchor=now, next_run=now, created_at=now,
    )
    if limits is not None:
        parse_job_input(defn.job_message(), custom_id_key="jobId",
                        max_data_bytes=limits.max_data_bytes, frame_bytes=frame_bytes,
                        json_bound=json_bound)
        limits.check_period(defn)
        if json_bound is not None and json_bound <= limits.max_data_bytes:
            defn.data_chars = json_bound
    if existing is not None:
        defn.executions, defn.last_fired = existing.executions, existing.last_fired
        defn.created_at = existing.created_at
    if existing is None and _bool(msg, "immediately", False):
        defn.next_run = now  # the first run now, only on creation
    else:
        # a repeatEvery schedule's first slot is one interval away
        defn.anchor = now + every if every is not None else now
        first = defn.next_slot(now if every is None else now - 1)
        if first is None:
            raise Refused(f"Cron schedule never fires: {schedule}")
        defn.next_run = first
    return defn


class CronRegistry:
    """The schedules by name, and one heap of (nextRun, seq, name) for the timer. Each
    schedule has one live entry, its latest ``put`` (``_live``: its seq); the others
    (a schedule replaced, deleted or advanced) are skipped when they come up. Two live
    entries of one schedule at one time would fire it twice in one pass: a firing undone
    to a time equal to its next slot used to make them."""

    def __init__(self) -> None:
        self.by_name: dict[str, CronDef] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, int] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self.by_name)

    def put(self, defn: CronDef) -> None:
        self.by_name[defn.name] = defn
        self._seq += 1
        self._live[defn.name] = self._seq
        heapq.heappush(self._heap, (defn.next_run, self._seq, defn.name))

    def delete(self, name: str) -> CronDef | None:
        self._live.pop(name, None)
        return self.by_name.pop(name, None)

    def next_due(self) -> int | None:
        """When the first schedule is due (stale entries are dropped first)."""
        heap = self._heap
        while heap:
            at, seq, name = heap[0]
            if self._live.get(name) == seq and self.by_name[name].next_run == at:
                return at
            heapq.heappop(heap)
        return None

    def due(self, now: int) -> Iterator[CronDef]:
        """The schedules due at ``now``, earliest first; each is taken off the heap (the
        caller puts it back with its next run)."""
        heap = self._heap
        while (at := self.next_due()) is not None and at <= now:
            _, _, name = heapq.heappop(heap)
            yield self.by_name[name]

    def listing(self) -> list[dict[str, Any]]:
        return [defn.info() for defn in sorted(self.by_name.values(), key=lambda d: d.name)]


def decide(defn: CronDef, now: int, has_worker: bool) -> tuple[str, str | None]:
    """What a due schedule does now: (FIRE, None), (SKIP, reason) or (EXHAUSTED, None).
    Skips do not consume ``maxLimit``."""
    if defn.max_limit is not None and defn.executions >= defn.max_limit:
        return EXHAUSTED, None
    if defn.skip_if_no_worker and not has_worker:
        return SKIP, "no-worker"
    interval = defn.repeat_every or OVERLAP_DEFAULT_MS
    if defn.last_fired is not None and now - defn.last_fired < OVERLAP_FRACTION * interval:
        return SKIP, "overlap"
    return FIRE, None


def advance(defn: CronDef, now: int, fired: bool) -> None:
    """After a due slot: counted if it fired, and the next slot after it (a slot that is
    already past is due at once: missed slots are caught up one by one, unless the
    overlap rule skips them)."""
    slot = defn.next_run
    if fired:
        defn.executions += 1
        defn.last_fired = now
    nxt = defn.next_slot(max(slot, now) if not fired else slot)
    defn.next_run = nxt if nxt is not None else slot + MAX_REPEAT_EVERY_MS


def retry_delay_ms(defn: CronDef, slot: int, refusals: int, first_ms: int,
                   max_ms: int) -> int:
    """How long after its ``refusals``-th refused firing in a row (of ``slot``) a
    schedule is tried again: ``first_ms``, doubled at each further refusal, at most
    ``max_ms`` or the schedule's own period, whichever is longer (its slots meanwhile
    are skipped: a schedule that cannot fire does not come back at its own rate to be
    refused)."""
    following = defn.next_slot(slot)
    period = 0 if following is None else following - slot
    return int(min(max(max_ms, period), first_ms * 2 ** min(refusals - 1, 40)))


def restored(defn: CronDef, now: int) -> CronDef:
    """A schedule loaded at startup: past runs are skipped (moved past ``now``) when it
    asks (``skipMissedOnRestart``, or ``skipIfNoWorker``: no worker is registered yet)."""
    if defn.next_run < now and (defn.skip_missed_on_restart or defn.skip_if_no_worker):
        nxt = defn.next_slot(now)
        if nxt is not None:
            defn.next_run = nxt
    return defn
