"""bunqueue's REST routes (reference section 7.1), each built on the command it runs.

This module holds the ``/jobs`` routes and collects every route into :data:`ROUTES`
(the queue routes are :mod:`.queue_routes`, the cron, webhook, worker and
monitoring routes :mod:`.admin_routes`); :mod:`.api` says what a route is and
:mod:`.requests` how one reads its request.

Statuses follow bunqueue: 200, 400 when the command answers ``ok: false``, and 404
when a GET looks a job up and the command says it is not found. Commands that act on
a job (ack, cancel, move...) answer 400 on any refusal, "not found" included: the
refusal names the state the job was in as often as its absence.
"""

from __future__ import annotations

from .admin_routes import ADMIN_ROUTES
from .api import Route, command
from .queue_routes import QUEUE_ROUTES
from .requests import forward

_JOB = "/jobs/{id}"


def _lookup(method: str, suffix: str, cmd: str) -> Route:
    """A GET of one job's view (404 when the job is not found)."""
    return Route(method, _JOB + suffix, command(forward(cmd, "id"), lookup=True))


def _action(method: str, suffix: str, cmd: str, *body: str) -> Route:
    """A change to one job: its id from the path, ``body``'s fields from the body."""
    return Route(method, _JOB + suffix, command(forward(cmd, "id", body=body)))


JOB_ROUTES: list[Route] = [
    # Batches, declared before /jobs/{id}/... (literal paths are found first anyway).
    Route("POST", "/jobs/ack-batch", command(forward(
        "ACKB", body=("ids", "results", "tokens", "removeOnCompletes")))),
    Route("POST", "/jobs/extend-locks", command(forward(
        "ExtendLocks", body=("ids", "tokens", "durations")))),
    Route("POST", "/jobs/heartbeat-batch", command(forward(
        "JobHeartbeatB", body=("ids", "tokens")))),
    # Before the /jobs/{id}/... patterns, which /jobs/custom/state would also match.
    Route("GET", "/jobs/custom/{customId}",
          command(forward("GetJobByCustomId", "customId"), lookup=True)),
    _lookup("GET", "", "GetJob"),
    _action("DELETE", "", "Cancel"),
    _action("POST", "/ack", "ACK", "result", "token", "removeOnComplete"),
    _action("POST", "/fail", "FAIL", "error", "token", "stack", "unrecoverable",
            "removeOnFail"),
    _action("POST", "/promote", "Promote"),
    _action("POST", "/discard", "Discard", "token"),
    _action("POST", "/move-to-delayed", "MoveToDelayed", "delay", "token"),
    _action("POST", "/move-to-wait", "MoveToWait", "token"),
    _action("POST", "/progress", "Progress", "progress", "message"),
    _action("POST", "/heartbeat", "JobHeartbeat", "token", "duration"),
    _action("POST", "/wait", "WaitJob", "timeout"),
    _action("POST", "/extend-lock", "ExtendLock", "duration", "token"),
    _action("PUT", "/data", "Update", "data"),
    _action("PUT", "/priority", "ChangePriority", "priority", "lifo"),
    _action("PUT", "/delay", "ChangeDelay", "delay", "token"),
    _lookup("GET", "/state", "GetState"),
    _lookup("GET", "/result", "GetResult"),
    _lookup("GET", "/progress", "GetProgress"),
    _lookup("GET", "/children", "GetChildrenValues"),
    Route("GET", _JOB + "/logs", command(forward("GetLogs", "id", ints=("start", "end")),
                                         lookup=True)),
    _action("POST", "/logs", "AddLog", "message", "level"),
    _action("DELETE", "/logs", "ClearLogs", "keepLogs"),
]

ROUTES: list[Route] = [*JOB_ROUTES, *QUEUE_ROUTES, *ADMIN_ROUTES]
