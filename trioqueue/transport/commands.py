"""The command table: every command the broker answers and how it finds its target.

``SESSION`` commands are answered by the session itself; the others go through the
router, addressed by queue name, job id, custom id or a list of job ids.
"""

from __future__ import annotations

from ..actors.router import BROKER, BY_CUSTOM_ID, BY_ID, BY_IDS, BY_PARENT_ID, BY_QUEUE, FLOW

SESSION = "session"

ROUTES: dict[str, str] = {
    # session
    "Auth": SESSION,
    "Hello": SESSION,
    "Ping": SESSION,
    "SubscribeEvents": SESSION,
    "UnsubscribeEvents": SESSION,
    # producing
    "PUSH": BY_QUEUE,
    "PUSHB": BY_QUEUE,
    "PUSHF": FLOW,
    # consuming
    "PULL": BY_QUEUE,
    "PULLB": BY_QUEUE,
    "ACK": BY_ID,
    "ACKB": BY_IDS,
    "FAIL": BY_ID,
    "ExtendLock": BY_ID,
    "ExtendLocks": BY_IDS,
    "JobHeartbeat": BY_ID,
    "JobHeartbeatB": BY_IDS,
    # progress and logs
    "Progress": BY_ID,
    "GetProgress": BY_ID,
    "AddLog": BY_ID,
    "GetLogs": BY_ID,
    "ClearLogs": BY_ID,
    # queries
    "GetJob": BY_ID,
    "GetJobByCustomId": BY_CUSTOM_ID,
    "GetState": BY_ID,
    "GetResult": BY_ID,
    "GetChildrenValues": BY_ID,
    "WaitJob": BY_ID,
    "GetJobs": BY_QUEUE,
    "GetJobCounts": BY_QUEUE,
    "GetCountsPerPriority": BY_QUEUE,
    "Count": BY_QUEUE,
    "GetDeduplicationJobId": BY_QUEUE,
    "GetQueueLimits": BY_QUEUE,
    # manual moves
    "Cancel": BY_ID,
    "Update": BY_ID,
    "ChangePriority": BY_ID,
    "Promote": BY_ID,
    "PromoteJobs": BY_QUEUE,
    "ChangeDelay": BY_ID,
    "MoveToDelayed": BY_ID,
    "MoveToWait": BY_ID,
    "Discard": BY_ID,
    "MoveToWaitingChildren": BY_ID,
    # dependencies and flows
    "GetFailedChildrenValues": BY_ID,
    "GetIgnoredChildrenFailures": BY_ID,
    "GetDependencies": BY_ID,
    "GetDependenciesCount": BY_ID,
    "RemoveChildDependency": BY_ID,
    "RemoveUnprocessedChildren": BY_ID,
    "UpdateParent": BY_PARENT_ID,
    # stall detection
    "SetStallConfig": BY_QUEUE,
    "GetStallConfig": BY_QUEUE,
    # queue control
    "Pause": BY_QUEUE,
    "Resume": BY_QUEUE,
    "IsPaused": BY_QUEUE,
    "Drain": BY_QUEUE,
    "Obliterate": BY_QUEUE,
    # workers registry
    "RegisterWorker": BROKER,
    "UnregisterWorker": BROKER,
    "Heartbeat": BROKER,
    "ListWorkers": BROKER,
}

# Commands whose deliveries are tied to the connection (released when it closes).
PULLS = frozenset({"PULL", "PULLB"})

PROTOCOL_VERSION = 3
CAPABILITIES = ["pipelining", "separate-job-name"]
