"""The workers registry: who says it is processing which queues (bunqueue's §4.17).

Registrations live in memory only, tied to the connection that made them (a closed
connection unregisters its workers), and are reported ``active`` while their last
heartbeat is younger than ``timeout_ms``; entries silent for three times that are
reaped. The registry is for monitoring: it never affects which job goes where.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import fields
from .broker_events import broker_event
from .errors import Refused
from .ids import uuid7

WORKER_TIMEOUT_MS = 30_000
WORKER_NOT_FOUND = "Worker not found"
# The failure counts at which a worker's failures are told (worker:error), as bunqueue.
FAILURE_MARKS = (5, 10, 25, 50, 100)


@dataclass
class WorkerEntry:
    id: str
    name: str
    queues: list[str]
    concurrency: int
    hostname: str
    pid: int
    registered_at: int
    last_seen: int
    conn: Any
    active_jobs: int = 0
    processed: int = 0
    failed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # Since when its heartbeats report it at its concurrency (None: below it), and
    # whether worker:overloaded was told for that spell.
    full_since: int | None = None
    full_told: bool = False

    def wire(self, now: int, timeout_ms: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "workerId": self.id,
            "name": self.name,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "hostname": self.hostname,
            "pid": self.pid,
            "status": "active" if now - self.last_seen < timeout_ms else "stale",
            "registeredAt": float(self.registered_at),
            "lastSeen": float(self.last_seen),
            "activeJobs": self.active_jobs,
            "processedJobs": self.processed,
            "failedJobs": self.failed,
            "currentJob": None,
            "uptime": float(now - self.registered_at),
        }


def _count(value: Any, field_name: str, default: int) -> int:
    number = fields.strict_number(value, field_name, minimum=0, default=default)
    return int(number) if number is not None else default


class WorkerRegistry:
    def __init__(self, timeout_ms: int = WORKER_TIMEOUT_MS, overload_ms: int = 0) -> None:
        self.timeout_ms = timeout_ms
        # worker:overloaded once a worker was at its concurrency this long (0: never).
        self.overload_ms = overload_ms
        self.workers: dict[str, WorkerEntry] = {}
        # The dashboard events of the changes (core/broker_events.py), taken by the
        # router after each command and each closed connection.
        self.events: list[dict[str, Any]] = []

    def take_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events

    def register(self, msg: dict[str, Any], now: int, conn: Any) -> dict[str, Any]:
        name = msg.get("name")
        if not isinstance(name, str) or not name:
            raise Refused("name is required")
        queues = fields.str_list(msg.get("queues"), "queues")
        concurrency = _count(msg.get("concurrency"), "concurrency", 1)
        hostname = msg.get("hostname")
        pid = _count(msg.get("pid"), "pid", 0)
        worker_id = msg.get("workerId")
        if worker_id is not None and (not isinstance(worker_id, str) or not worker_id):
            raise Refused("workerId must be a non-empty string")
        worker = self.workers.get(worker_id) if worker_id else None
        if worker is None:
            worker = WorkerEntry(
                id=worker_id or uuid7(now), name=name, queues=queues,
                concurrency=concurrency,
                hostname=hostname if isinstance(hostname, str) else "unknown",
                pid=pid, registered_at=now, last_seen=now, conn=conn,
            )
            self.workers[worker.id] = worker
        else:
            # Re-registering (after a reconnect) updates in place and keeps the counters.
            worker.name, worker.queues, worker.concurrency = name, queues, concurrency
            if isinstance(hostname, str):
                worker.hostname = hostname
            worker.pid, worker.last_seen, worker.conn = pid, now, conn
        self.events.append(broker_event(
            "worker:connected", now, workerId=worker.id, name=worker.name,
            queues=list(worker.queues), hostname=worker.hostname, pid=worker.pid))
        wire = worker.wire(now, self.timeout_ms)
        del wire["id"], wire["uptime"]
        return {"data": wire}

    def unregister(self, msg: dict[str, Any], now: int) -> dict[str, Any]:
        worker_id = msg.get("workerId")
        worker = self.workers.pop(worker_id, None) if isinstance(worker_id, str) else None
        if worker is None:
            raise Refused(WORKER_NOT_FOUND)
        self.events.append(broker_event("worker:disconnected", now, workerId=worker.id,
                                        name=worker.name))
        return {"data": {"removed": True}}

    def heartbeat(self, msg: dict[str, Any], now: int) -> dict[str, Any]:
        worker_id = msg.get("id")
        worker = self.workers.get(worker_id) if isinstance(worker_id, str) else None
        if worker is None:
            raise Refused(WORKER_NOT_FOUND)
        # absolute values, as the worker counts them
        was_busy, failed_before = worker.active_jobs > 0, worker.failed
        worker.active_jobs = _count(msg.get("activeJobs"), "activeJobs", worker.active_jobs)
        worker.processed = _count(msg.get("processed"), "processed", worker.processed)
        worker.failed = _count(msg.get("failed"), "failed", worker.failed)
        worker.last_seen = now
        self.events.append(broker_event("worker:heartbeat", now, workerId=worker.id))
        self._tell_load(worker, now, was_busy, failed_before)
        if self.overload_ms:
            self._tell_overload(worker, now)
        return {"data": {"ok": True}}

    def _tell_overload(self, worker: WorkerEntry, now: int) -> None:
        """``worker:overloaded`` at the first heartbeat that finds the worker at its
        concurrency for ``overload_ms`` (bunqueue looks every ten seconds); once per
        spell at capacity, where bunqueue tells it again every threshold."""
        if not (worker.concurrency and worker.active_jobs >= worker.concurrency):
            worker.full_since, worker.full_told = None, False
        elif worker.full_since is None:
            worker.full_since = now
        elif not worker.full_told and now - worker.full_since >= self.overload_ms:
            worker.full_told = True
            self.events.append(broker_event(
                "worker:overloaded", now, workerId=worker.id, name=worker.name,
                activeJobs=worker.active_jobs, concurrency=worker.concurrency,
                overloadedSeconds=(now - worker.full_since) // 1000))

    def _tell_load(self, worker: WorkerEntry, now: int, was_busy: bool,
                   failed_before: int) -> None:
        """What a heartbeat's numbers say (our workers report them, where bunqueue's
        broker counts its own deliveries): ``worker:idle`` when the last active job is
        done, ``worker:error`` when the failures pass 5, 10, 25, 50 or 100."""
        if was_busy and not worker.active_jobs:
            self.events.append(broker_event("worker:idle", now, workerId=worker.id,
                                            processedJobs=worker.processed))
        total = worker.processed + worker.failed
        if total >= 5 and any(failed_before < mark <= worker.failed
                              for mark in FAILURE_MARKS):
            self.events.append(broker_event(
                "worker:error", now, workerId=worker.id, name=worker.name,
                failedJobs=worker.failed, processedJobs=worker.processed,
                failureRate=round(worker.failed / total, 3)))

    def list(self, now: int) -> dict[str, Any]:
        self.reap(now)
        workers = [w.wire(now, self.timeout_ms) for w in self.workers.values()]
        active = [w for w in workers if w["status"] == "active"]
        return {"data": {"workers": workers, "stats": {
            "total": len(workers),
            "active": len(active),
            "totalProcessed": sum(w["processedJobs"] for w in workers),
            "totalFailed": sum(w["failedJobs"] for w in workers),
            "activeJobs": sum(w["activeJobs"] for w in workers),
            "concurrencySlots": sum(w["concurrency"] for w in active),
        }}}

    def has_active_worker(self, queue: str, now: int) -> bool:
        """Whether a registered worker that names ``queue`` is active (a cron's
        ``skipIfNoWorker``); O(workers), a handful."""
        return any(queue in w.queues and now - w.last_seen < self.timeout_ms
                   for w in self.workers.values())

    def connection_closed(self, conn: Any, now: int) -> None:
        for worker in [w for w in self.workers.values() if w.conn is conn]:
            del self.workers[worker.id]
            self.events.append(broker_event("worker:disconnected", now,
                                            workerId=worker.id, name=worker.name))

    def reap(self, now: int) -> None:
        """Forget workers silent for three timeouts (their connection may be half-open)."""
        limit = 3 * self.timeout_ms
        for worker in [w for w in self.workers.values() if now - w.last_seen >= limit]:
            del self.workers[worker.id]
            self.events.append(broker_event("worker:removed-stale", now,
                                            workerId=worker.id, name=worker.name))
