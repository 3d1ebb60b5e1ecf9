"""The cron commands: ``Cron``, ``CronGet``, ``CronList``, ``CronDelete`` (broker-wide,
answered by the router from the scheduler's registry), and the internal queue command
that fires a schedule (rules: :mod:`trioqueue.core.repeating.crons`).

A change of a schedule is a broker record, answered once committed (:class:`Committed`);
a firing is the queue's ``__cron_fire__``: the job pushed and the schedule's new
``executions`` and ``nextRun`` in one commit.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..broker_events import broker_event
from ..committed import Committed
from ..errors import Refused
from ..options import parse_job_input
from ..queue import QueueState
from ..repeating.crons import CRON_KIND, CRON_NOT_FOUND, CronDef, CronLimits, parse_cron_command
from ..writes import Writes
from .context import Ctx, Reply, _refuse_if_full

CRON_FIRE = "__cron_fire__"  # {name, record, job}: push the job, store the record


class Schedules(Protocol):
    """What the cron commands use of the scheduler (actors/scheduler.py); ``lease``:
    in a cluster, the lease that fences the schedules' writes (None: no fence);
    ``limits``: the broker's bounds on schedules."""

    lease: str | None
    limits: CronLimits

    def __len__(self) -> int: ...

    def get(self, name: str) -> CronDef | None: ...
    def upsert(self, defn: CronDef) -> None: ...
    def remove(self, name: str) -> CronDef | None: ...
    def listing(self) -> list[dict[str, Any]]: ...


class CronScope(Protocol):
    @property
    def crons(self) -> Schedules: ...


def _name(msg: dict[str, Any]) -> str:
    name = msg.get("name")
    if not isinstance(name, str) or not name:
        raise Refused("Cron name is required")
    return name


def stored(name: str, record: dict[str, Any] | None, lease: str | None = None) -> Writes:
    """The write that stores (None: deletes) the schedule ``name``; in a cluster,
    committed only while this broker holds ``lease`` (the scheduler's)."""
    writes = Writes(lease)
    writes.put_broker_record(CRON_KIND, name, record)
    return writes


def cron(scope: CronScope, msg: dict[str, Any], now: int, conn: Any,
         frame_bytes: int | None = None, json_bound: int | None = None) -> Committed:
    """Upsert by name (keeps ``executions``); answered ``{cron: CronInfo}`` once stored.
    A new name past ``max_cron_schedules`` is refused (the schedules counted are the
    scheduler's: in a cluster, every schedule of the store). ``frame_bytes`` and
    ``json_bound``: the request's (the command is declared ``sized``)."""
    crons = scope.crons
    existing = crons.get(_name(msg))
    defn = parse_cron_command(msg, now, existing, crons.limits, frame_bytes, json_bound)
    if existing is None:
        crons.limits.check_count(len(crons))
    crons.upsert(defn)
    if existing is None:
        event = broker_event("cron:created", now, name=defn.name, queue=defn.queue,
                             pattern=defn.schedule, every=defn.repeat_every,
                             nextRun=float(defn.next_run))
    else:
        event = broker_event("cron:updated", now, name=defn.name, queue=defn.queue,
                             nextRun=float(defn.next_run))
    return Committed({"cron": defn.info()},
                     stored(defn.name, defn.to_record(), scope.crons.lease), (event,))


def cron_get(scope: CronScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    defn = scope.crons.get(_name(msg))
    if defn is None:
        raise Refused(CRON_NOT_FOUND)
    return {"cron": defn.info()}


def cron_list(scope: CronScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    return {"crons": scope.crons.listing()}


def cron_delete(scope: CronScope, msg: dict[str, Any], now: int, conn: Any) -> Committed:
    defn = scope.crons.remove(_name(msg))
    if defn is None:
        raise Refused(CRON_NOT_FOUND)
    return Committed({}, stored(defn.name, None, scope.crons.lease),
                     (broker_event("cron:deleted", now, name=defn.name, queue=defn.queue),))


# ------------------------------------------------------------------ in the queue actor


def _internal(msg: dict[str, Any], *keys: str) -> list[Any]:
    """The scheduler's own fields: refused, not trusted, when malformed (the handler
    table is fuzzed with any input, and a handler never raises anything else)."""
    values = [msg.get(key) for key in keys]
    name, record = values[0], values[1]
    if not isinstance(name, str) or not name or not (record is None
                                                     or isinstance(record, dict)):
        raise Refused("malformed internal cron message")
    for value in values[2:]:
        if not isinstance(value, dict):
            raise Refused("malformed internal cron message")
    return values


def cron_fire(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """Push the schedule's job, then store its advanced record: one commit. A push the
    queue refuses (a full store, a template gone bad) stores nothing, so the slot is
    fired again after a restart rather than counted without its job."""
    name, record, job = _internal(msg, "name", "record", "job")
    _refuse_if_full(ctx)
    # (the scheduler's request carries the bound the template was measured by at its
    # Cron command, if any: a firing does not measure it again)
    spec = parse_job_input(job, custom_id_key="jobId", max_data_bytes=ctx.max_data_bytes,
                           json_bound=ctx.json_bound)
    [job_id] = q.push([spec], ctx.now)
    q.writes.put_broker_record(CRON_KIND, name, record)
    q.announce("cron:fired", ctx.now, name=name, jobId=job_id)
    return {"id": job_id}
