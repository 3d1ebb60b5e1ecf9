"""The command table: every command the core answers, each declared once.

Adding a command is one :class:`~.registry.Command` here plus its handler (in the
module of this package named for what it acts on: :mod:`.jobs` for a job's life). Commands
the session answers itself are declared beside their handlers in
:mod:`trioqueue.transport.commands`, which adds them to this table to make the whole wire
table.

The names below the table (``QUEUE_HANDLERS``, ``MISSING_JOB``, ...) are views of it,
built once at import, for the queue actor and the router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from .. import cluster_handlers, states
from ..errors import JOB_NOT_FOUND
from ..queue import QueueState, Sliced, completed_reply, slices
from . import crons, dashboard, dlq, groups, jobs, limits, maintenance, queries, stats, webhooks
from .context import Ctx, Handler
from .maintenance import BrokerScope
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


def _release_connection(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    work = q.release_connection_work(ctx.conn, ctx.now)
    if slices.is_long(len(q.leases.held_by(ctx.conn) or ())):
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
    batch = msg.get("jobs")
    return len(batch) if isinstance(batch, list) else 1


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
    _by_queue("PUSH", jobs.push, admits=_one_job),
    _by_queue("PUSHB", jobs.pushb, admits=_batch_jobs),
    _by_queue("PULL", jobs.pull, pull=True),
    _by_queue("PULLB", jobs.pullb, pull=True),
    _by_queue("GetJobs", queries.get_jobs),
    _by_queue("GetJobCounts", queries.get_job_counts),
    _by_queue("GetCountsPerPriority", queries.get_counts_per_priority),
    _by_queue("Count", queries.count),
    _by_queue("GetDeduplicationJobId", queries.get_deduplication_job_id),
    _by_queue("RemoveDeduplicationKey", queries.remove_deduplication_key),
    _by_queue("GetQueueLimits", limits.get_queue_limits),
    _by_queue("RateLimit", limits.rate_limit),
    _by_queue("RateLimitClear", limits.rate_limit_clear),
    _by_queue("SetConcurrency", limits.set_concurrency),
    _by_queue("ClearConcurrency", limits.clear_concurrency),
    _by_queue("GetGroupJobsCount", groups.get_group_jobs_count),
    _by_queue("GetGroupsJobsCount", groups.get_groups_jobs_count),
    _by_queue("GetGroupActiveCount", groups.get_group_active_count),
    _by_queue("SetGroupRateLimit", groups.set_group_rate_limit),
    _by_queue("GetGroupRateLimit", groups.get_group_rate_limit),
    _by_queue("RemoveGroupRateLimit", groups.remove_group_rate_limit),
    _by_queue("GetGroupRateLimitTtl", groups.get_group_rate_limit_ttl),
    _by_queue("SetGroupConcurrency", groups.set_group_concurrency),
    _by_queue("GetGroupConcurrency", groups.get_group_concurrency),
    _by_queue("RemoveGroupConcurrency", groups.remove_group_concurrency),
    _by_queue("PauseGroup", groups.pause_group),
    _by_queue("ResumeGroup", groups.resume_group),
    _by_queue("IsGroupPaused", groups.is_group_paused),
    _by_queue("RateLimitGroup", groups.rate_limit_group),
    _by_queue("PromoteJobs", jobs.promote_jobs),
    _by_queue("SetStallConfig", jobs.set_stall_config),
    _by_queue("GetStallConfig", jobs.get_stall_config),
    _by_queue("Pause", jobs.pause),
    _by_queue("Resume", jobs.resume),
    _by_queue("IsPaused", jobs.is_paused),
    _by_queue("Drain", jobs.drain),
    _by_queue("Obliterate", jobs.obliterate),
    _by_queue("Clean", maintenance.clean),
    _by_queue("Dlq", dlq.dlq),
    _by_queue("GetDlqStats", dlq.get_dlq_stats),
    _by_queue("RetryDlq", dlq.retry_dlq),
    _by_queue("PurgeDlq", dlq.purge_dlq),
    _by_queue("RemoveDlqJob", dlq.remove_dlq_job),
    _by_queue("RetryCompleted", dlq.retry_completed),
    _by_queue("SetDlqConfig", dlq.set_dlq_config),
    _by_queue("GetDlqConfig", dlq.get_dlq_config),
    _by_queue("DashboardQueue", dashboard.dashboard_queue),
    # ---- addressed by job id; the reply when no queue (nor storage) knows the id
    _by_id("ACK", jobs.ack, _NOT_ACTIVE),
    _by_id("FAIL", jobs.fail, _NOT_ACTIVE),
    _by_id("ExtendLock", jobs.extend_lock, not_found("Lock not found or invalid token")),
    _by_id("JobHeartbeat", jobs.job_heartbeat,
           not_found("Job not found or not active (or invalid token)")),
    _by_id("Cancel", jobs.cancel, not_found("Job not found or cannot be cancelled")),
    _by_id("Update", jobs.update, not_found("Job not found or cannot be updated")),
    _by_id("ChangePriority", jobs.change_priority, not_found("Job not found or not in queue")),
    _by_id("Promote", jobs.promote, not_found("Job not found or not delayed")),
    _by_id("ChangeDelay", jobs.change_delay, not_found("Job not found or cannot change delay")),
    # A job removed on completion is gone from storage; its retained result answers.
    _by_id("WaitJob", queries.wait_job, not_found("Job {id} not found"),
           retained=completed_reply),
    _by_id("MoveToWait", jobs.move_to_wait),
    _by_id("GetState", queries.get_state, not_found(id=JOB_ID, state=states.UNKNOWN)),
    _by_id("GetResult", queries.get_result, not_found(id=JOB_ID)),
    # a job no queue knows holds no key
    _by_id("RemoveJobDeduplicationKey", queries.remove_job_deduplication_key,
           lambda job_id: {"data": {"removed": False}}),
    _by_id("ClearLogs", jobs.clear_logs, not_found()),
    _by_id("GetLogs", jobs.get_logs, lambda job_id: {"data": {"logs": [], "count": 0}}),
    _by_id("GetChildrenValues", queries.get_children_values,
           lambda job_id: {"data": {"values": {}}}),
    _by_id("GetFailedChildrenValues", queries.get_failed_children_values,
           lambda job_id: {"values": {}}),
    _by_id("GetIgnoredChildrenFailures", queries.get_ignored_children_failures,
           lambda job_id: {"values": {}}),
    # ... and "Job not found"
    _by_id("Progress", jobs.progress),
    _by_id("GetProgress", jobs.get_progress),
    _by_id("AddLog", jobs.add_log),
    _by_id("GetJob", queries.get_job),
    _by_id("MoveToDelayed", jobs.move_to_delayed),
    _by_id("Discard", jobs.discard),
    _by_id("MoveToWaitingChildren", queries.move_to_waiting_children),
    _by_id("GetDependencies", queries.get_dependencies),
    _by_id("GetDependenciesCount", queries.get_dependencies_count),
    _by_id("RemoveChildDependency", queries.remove_child_dependency),
    _by_id("RemoveUnprocessedChildren", queries.remove_unprocessed_children),
    # ---- addressed by another id field
    Command("GetJobByCustomId", BY_CUSTOM_ID, queries.get_job_by_custom_id, missing=_NOT_FOUND),
    Command("UpdateParent", BY_PARENT_ID, queries.update_parent,
            missing=not_found("Parent job {id} not found")),
    # ---- addressed by a list of job ids, maybe in several queues
    Command("ACKB", BY_IDS, jobs.ackb, multi=MultiId(
        jobs.ackb_args, ("tokens", "results", "removeOnCompletes"), _merge_acks)),
    Command("ExtendLocks", BY_IDS, jobs.extend_locks, multi=MultiId(
        jobs.extend_locks_args, ("tokens", "durations"), _merge_lock_counts)),
    Command("JobHeartbeatB", BY_IDS, jobs.job_heartbeat_b, multi=MultiId(
        jobs.heartbeat_b_args, ("tokens",), _merge_heartbeats)),
    # ---- answered by the router: a flow across queues, the workers registry
    Command("PUSHF", FLOW),
    Command("RegisterWorker", BROKER, _register_worker),
    Command("UnregisterWorker", BROKER, _unregister_worker),
    Command("Heartbeat", BROKER, _heartbeat),
    Command("ListWorkers", BROKER, _list_workers),
    Command("Cron", BROKER, crons.cron, admits=_no_job, sized=True),
    Command("CronGet", BROKER, crons.cron_get),
    Command("CronList", BROKER, crons.cron_list),
    Command("CronDelete", BROKER, crons.cron_delete),
    Command("ListQueues", BROKER, maintenance.list_queues),
    Command("TrimEvents", BROKER, maintenance.trim_events),
    Command("CompactMemory", BROKER, maintenance.compact_memory),
    Command("AddWebhook", BROKER, webhooks.add_webhook),
    Command("RemoveWebhook", BROKER, webhooks.remove_webhook),
    Command("ListWebhooks", BROKER, webhooks.list_webhooks),
    Command("SetWebhookEnabled", BROKER, webhooks.set_webhook_enabled),
    # ---- the broker's numbers (stats, dashboard)
    Command("Stats", BROKER, stats.stats),
    Command("Metrics", BROKER, stats.metrics),
    Command("StorageStatus", BROKER, stats.storage_status),
    Command("Prometheus", BROKER, stats.prometheus),
    Command("DashboardOverview", BROKER, dashboard.dashboard_overview),
    Command("DashboardQueues", BROKER, dashboard.dashboard_queues),
    # ---- the broker's own, never from a client
    Command(RELEASE_CONNECTION, INTERNAL, _release_connection),
    Command(maintenance.COMPACT_QUEUE, INTERNAL, maintenance.compact_queue),
    Command(crons.CRON_FIRE, INTERNAL, crons.cron_fire, admits=_one_job),
    # ---- between the brokers of a cluster (docs/scale-out.md)
    Command(cluster_handlers.CLUSTER_INBOX, INTERNAL, cluster_handlers.apply_inbox),
    Command("ClusterPoke", BROKER, cluster_handlers.cluster_poke),
    Command(cluster_handlers.CLUSTER_RELEASE, BY_QUEUE, cluster_handlers.cluster_release),
    Command(cluster_handlers.RELEASE_CLAIMS, INTERNAL, cluster_handlers.release_claims),
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
