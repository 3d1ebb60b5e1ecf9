"""The command table: every command the core answers, each declared once.

Adding a command is one :class:`~trioqueue.core.registry.Command` here plus its handler
(in :mod:`trioqueue.core.handlers` for a queue command). Commands the session answers
itself are declared beside their handlers in :mod:`trioqueue.transport.commands`, which
adds them to this table to make the whole wire table.

The names below the table (``QUEUE_HANDLERS``, ``MISSING_JOB``, ...) are views of it,
built once at import, for the queue actor and the router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from . import cluster_handlers as cl
from . import cron_handlers as ch
from . import dashboard as db
from . import dlq_handlers as dlq
from . import group_handlers as gh
from . import handlers as h
from . import limit_handlers as lh
from . import maintenance as mt
from . import query_handlers as qh
from . import states as st
from . import stats_handlers as sh
from . import webhook_handlers as wh
from .context import Handler
from .errors import JOB_NOT_FOUND
from .maintenance import BrokerScope
from .queue import QueueState, Sliced, completed_reply, slices
from .registry import (
    BROKER,
    BY_CUSTOM_ID,
    BY_ID,
    BY_IDS,
    BY_PARENT_ID,
    BY_QUEUE,
    FLOW,
    INTERNAL,
    JOB_ID,
    Command,
    CommandTable,
    MissingReply,
    MultiId,
    Reply,
    not_found,
)

# Sent by the router to each queue a closed connection pulled from: its parked pulls
# claim nothing and the jobs it was given go back (see QueueState.release_connection).
RELEASE_CONNECTION = "__release_connection__"


def _release_connection(q: QueueState, msg: dict[str, Any], ctx: h.Ctx) -> Reply | Sliced:
    work = q.release_connection_work(ctx.conn, ctx.now)
    if slices.is_long(len(q.conn_jobs.get(ctx.conn, ()))):
        return work  # long work: a slice a step (queue/leases.py)
    work.run()
    return {}


# ------------------------------------------------------------------ workers registry
# Broker handlers get the router's broker-wide state (maintenance.BrokerScope).


def _register_worker(scope: BrokerScope, msg: dict[str, Any], now: int,
                     conn: Any) -> Reply:
    return scope.workers.register(msg, now, conn)


def _unregister_worker(scope: BrokerScope, msg: dict[str, Any], now: int,
                       conn: Any) -> Reply:
    return scope.workers.unregister(msg, now)


def _heartbeat(scope: BrokerScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    return scope.workers.heartbeat(msg, now)


def _list_workers(scope: BrokerScope, msg: dict[str, Any], now: int,
                  conn: Any) -> Reply:
    return scope.workers.list(now)


# ------------------------------------------------------------------ job-creating


def _one_job(msg: dict[str, Any]) -> int:
    return 1


def _no_job(msg: dict[str, Any]) -> int:
    """A command that stores the client's data in a broker record (a schedule's job
    template) and makes no job: admitted by its size all the same."""
    return 0


def _batch_jobs(msg: dict[str, Any]) -> int:
    jobs = msg.get("jobs")
    return len(jobs) if isinstance(jobs, list) else 1


# ------------------------------------------------------------------ multi-id replies


def _merge_acks(ids: list[str], parts: list[tuple[list[int], Reply]],
                unknown: list[int]) -> Reply:
    ignored = list(unknown)
    for positions, reply in parts:
        for i in reply.get("data", {}).get("ignoredIndices", []):
            ignored.append(positions[i])
    ignored.sort()
    if not ignored:
        return {}
    return {"data": {"ignoredIds": [ids[i] for i in ignored], "ignoredIndices": ignored}}


def _merge_lock_counts(ids: list[str], parts: list[tuple[list[int], Reply]],
                       unknown: list[int]) -> Reply:
    return {"count": sum(reply.get("count", 0) for _, reply in parts)}


def _merge_heartbeats(ids: list[str], parts: list[tuple[list[int], Reply]],
                      unknown: list[int]) -> Reply:
    total = sum(reply.get("data", {}).get("count", 0) for _, reply in parts)
    return {"data": {"ok": True, "count": total}}


# ------------------------------------------------------------------ the table

_NOT_ACTIVE = not_found("Job not found or not in processing state: {id}")
_NOT_FOUND = not_found(JOB_NOT_FOUND)


def _by_id(name: str, handler: Handler, missing: MissingReply = _NOT_FOUND,
           **facets: Any) -> Command:
    return Command(name, BY_ID, handler, missing=missing, **facets)


def _by_queue(name: str, handler: Handler, **facets: Any) -> Command:
    return Command(name, BY_QUEUE, handler, **facets)


CORE_COMMANDS = CommandTable([
    # ---- addressed by queue name
    _by_queue("PUSH", h.push, admits=_one_job),
    _by_queue("PUSHB", h.pushb, admits=_batch_jobs),
    _by_queue("PULL", h.pull, pull=True),
    _by_queue("PULLB", h.pullb, pull=True),
    _by_queue("GetJobs", qh.get_jobs),
    _by_queue("GetJobCounts", qh.get_job_counts),
    _by_queue("GetCountsPerPriority", qh.get_counts_per_priority),
    _by_queue("Count", qh.count),
    _by_queue("GetDeduplicationJobId", qh.get_deduplication_job_id),
    _by_queue("RemoveDeduplicationKey", qh.remove_deduplication_key),
    _by_queue("GetQueueLimits", lh.get_queue_limits),
    _by_queue("RateLimit", lh.rate_limit),
    _by_queue("RateLimitClear", lh.rate_limit_clear),
    _by_queue("SetConcurrency", lh.set_concurrency),
    _by_queue("ClearConcurrency", lh.clear_concurrency),
    _by_queue("GetGroupJobsCount", gh.get_group_jobs_count),
    _by_queue("GetGroupsJobsCount", gh.get_groups_jobs_count),
    _by_queue("GetGroupActiveCount", gh.get_group_active_count),
    _by_queue("SetGroupRateLimit", gh.set_group_rate_limit),
    _by_queue("GetGroupRateLimit", gh.get_group_rate_limit),
    _by_queue("RemoveGroupRateLimit", gh.remove_group_rate_limit),
    _by_queue("GetGroupRateLimitTtl", gh.get_group_rate_limit_ttl),
    _by_queue("SetGroupConcurrency", gh.set_group_concurrency),
    _by_queue("GetGroupConcurrency", gh.get_group_concurrency),
    _by_queue("RemoveGroupConcurrency", gh.remove_group_concurrency),
    _by_queue("PauseGroup", gh.pause_group),
    _by_queue("ResumeGroup", gh.resume_group),
    _by_queue("IsGroupPaused", gh.is_group_paused),
    _by_queue("RateLimitGroup", gh.rate_limit_group),
    _by_queue("PromoteJobs", h.promote_jobs),
    _by_queue("SetStallConfig", h.set_stall_config),
    _by_queue("GetStallConfig", h.get_stall_config),
    _by_queue("Pause", h.pause),
    _by_queue("Resume", h.resume),
    _by_queue("IsPaused", h.is_paused),
    _by_queue("Drain", h.drain),
    _by_queue("Obliterate", h.obliterate),
    _by_queue("Clean", mt.clean),
    _by_queue("Dlq", dlq.dlq),
    _by_queue("GetDlqStats", dlq.get_dlq_stats),
    _by_queue("RetryDlq", dlq.retry_dlq),
    _by_queue("PurgeDlq", dlq.purge_dlq),
    _by_queue("RemoveDlqJob", dlq.remove_dlq_job),
    _by_queue("RetryCompleted", dlq.retry_completed),
    _by_queue("SetDlqConfig", dlq.set_dlq_config),
    _by_queue("GetDlqConfig", dlq.get_dlq_config),
    _by_queue("DashboardQueue", db.dashboard_queue),
    # ---- addressed by job id; the reply when no queue (nor storage) knows the id
    _by_id("ACK", h.ack, _NOT_ACTIVE),
    _by_id("FAIL", h.fail, _NOT_ACTIVE),
    _by_id("ExtendLock", h.extend_lock, not_found("Lock not found or invalid token")),
    _by_id("JobHeartbeat", h.job_heartbeat,
           not_found("Job not found or not active (or invalid token)")),
    _by_id("Cancel", h.cancel, not_found("Job not found or cannot be cancelled")),
    _by_id("Update", h.update, not_found("Job not found or cannot be updated")),
    _by_id("ChangePriority", h.change_priority, not_found("Job not found or not in queue")),
    _by_id("Promote", h.promote, not_found("Job not found or not delayed")),
    _by_id("ChangeDelay", h.change_delay, not_found("Job not found or cannot change delay")),
    # A job removed on completion is gone from storage; its retained result answers.
    _by_id("WaitJob", qh.wait_job, not_found("Job {id} not found"),
           retained=completed_reply),
    _by_id("MoveToWait", h.move_to_wait),
    _by_id("GetState", qh.get_state, not_found(id=JOB_ID, state=st.UNKNOWN)),
    _by_id("GetResult", qh.get_result, not_found(id=JOB_ID)),
    # a job no queue knows holds no key
    _by_id("RemoveJobDeduplicationKey", qh.remove_job_deduplication_key,
           lambda job_id: {"data": {"removed": False}}),
    _by_id("ClearLogs", h.clear_logs, not_found()),
    _by_id("GetLogs", h.get_logs, lambda job_id: {"data": {"logs": [], "count": 0}}),
    _by_id("GetChildrenValues", qh.get_children_values,
           lambda job_id: {"data": {"values": {}}}),
    _by_id("GetFailedChildrenValues", qh.get_failed_children_values,
           lambda job_id: {"values": {}}),
    _by_id("GetIgnoredChildrenFailures", qh.get_ignored_children_failures,
           lambda job_id: {"values": {}}),
    # ... and "Job not found"
    _by_id("Progress", h.progress),
    _by_id("GetProgress", h.get_progress),
    _by_id("AddLog", h.add_log),
    _by_id("GetJob", qh.get_job),
    _by_id("MoveToDelayed", h.move_to_delayed),
    _by_id("Discard", h.discard),
    _by_id("MoveToWaitingChildren", qh.move_to_waiting_children),
    _by_id("GetDependencies", qh.get_dependencies),
    _by_id("GetDependenciesCount", qh.get_dependencies_count),
    _by_id("RemoveChildDependency", qh.remove_child_dependency),
    _by_id("RemoveUnprocessedChildren", qh.remove_unprocessed_children),
    # ---- addressed by another id field
    Command("GetJobByCustomId", BY_CUSTOM_ID, qh.get_job_by_custom_id, missing=_NOT_FOUND),
    Command("UpdateParent", BY_PARENT_ID, qh.update_parent,
            missing=not_found("Parent job {id} not found")),
    # ---- addressed by a list of job ids, maybe in several queues
    Command("ACKB", BY_IDS, h.ackb, multi=MultiId(
        h.ackb_args, ("tokens", "results", "removeOnCompletes"), _merge_acks)),
    Command("ExtendLocks", BY_IDS, h.extend_locks, multi=MultiId(
        h.extend_locks_args, ("tokens", "durations"), _merge_lock_counts)),
    Command("JobHeartbeatB", BY_IDS, h.job_heartbeat_b, multi=MultiId(
        h.heartbeat_b_args, ("tokens",), _merge_heartbeats)),
    # ---- answered by the router: a flow across queues, the workers registry
    Command("PUSHF", FLOW),
    Command("RegisterWorker", BROKER, _register_worker),
    Command("UnregisterWorker", BROKER, _unregister_worker),
    Command("Heartbeat", BROKER, _heartbeat),
    Command("ListWorkers", BROKER, _list_workers),
    Command("Cron", BROKER, ch.cron, admits=_no_job, sized=True),
    Command("CronGet", BROKER, ch.cron_get),
    Command("CronList", BROKER, ch.cron_list),
    Command("CronDelete", BROKER, ch.cron_delete),
    Command("ListQueues", BROKER, mt.list_queues),
    Command("TrimEvents", BROKER, mt.trim_events),
    Command("CompactMemory", BROKER, mt.compact_memory),
    Command("AddWebhook", BROKER, wh.add_webhook),
    Command("RemoveWebhook", BROKER, wh.remove_webhook),
    Command("ListWebhooks", BROKER, wh.list_webhooks),
    Command("SetWebhookEnabled", BROKER, wh.set_webhook_enabled),
    # ---- the broker's numbers (stats_handlers, dashboard)
    Command("Stats", BROKER, sh.stats),
    Command("Metrics", BROKER, sh.metrics),
    Command("StorageStatus", BROKER, sh.storage_status),
    Command("Prometheus", BROKER, sh.prometheus),
    Command("DashboardOverview", BROKER, db.dashboard_overview),
    Command("DashboardQueues", BROKER, db.dashboard_queues),
    # ---- the broker's own, never from a client
    Command(RELEASE_CONNECTION, INTERNAL, _release_connection),
    Command(mt.COMPACT_QUEUE, INTERNAL, mt.compact_queue),
    Command(ch.CRON_FIRE, INTERNAL, ch.cron_fire, admits=_one_job),
    # ---- between the brokers of a cluster (docs/scale-out.md)
    Command(cl.CLUSTER_INBOX, INTERNAL, cl.apply_inbox),
    Command("ClusterPoke", BROKER, cl.cluster_poke),
    Command(cl.CLUSTER_RELEASE, BY_QUEUE, cl.cluster_release),
    Command(cl.RELEASE_CLAIMS, INTERNAL, cl.release_claims),
])

# ------------------------------------------------------------------ views

QUEUE_HANDLERS = cast(dict[str, Handler], CORE_COMMANDS.queue_handlers)
MISSING_JOB = CORE_COMMANDS.missing_job
MULTI_IDS = CORE_COMMANDS.multi_ids
MULTI_ARGS: dict[str, Callable[[dict[str, Any]], Any]] = {
    name: multi.args for name, multi in MULTI_IDS.items()}
PARALLEL_ARRAYS = {name: multi.parallel for name, multi in MULTI_IDS.items()}
# Commands that can create a live job: the ones a nearly full store refuses, with the
# number of jobs each may create. PUSHF is admitted by the router, which checks itself.
ADMITS = CORE_COMMANDS.admits
ADMITTING = CORE_COMMANDS.admitting
