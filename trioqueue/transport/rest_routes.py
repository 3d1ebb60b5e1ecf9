"""bunqueue's REST routes (reference section 7.1), each built on the command it runs.

Routes are declared in :data:`ROUTES`; :mod:`.rest_api` says what a route is.
"""

from __future__ import annotations

from typing import Any

from .rest_api import Call, Route, command

# The PUSH fields ``POST /queues/{queue}/jobs`` forwards (bunqueue forwards these and
# ignores any other key of the body).
PUSH_FIELDS = ("data", "priority", "delay", "backoff", "timeout", "jobId",
               "removeOnComplete", "removeOnFail", "durable", "ttl", "uniqueKey",
               "groupId", "dependsOn", "tags", "lifo", "repeat")


def _push(call: Call) -> dict[str, Any]:
    body = call.object()
    msg: dict[str, Any] = {"cmd": "PUSH", "queue": call.params["queue"]}
    name = body.get("name")
    msg["name"] = name if isinstance(name, str) else "default"
    for key in PUSH_FIELDS:
        if key in body:
            msg[key] = body[key]
    attempts = body.get("maxAttempts", body.get("attempts"))
    if attempts is not None:
        msg["maxAttempts"] = attempts
    return msg


ROUTES: list[Route] = [
    Route("GET", "/jobs/{id}", command(lambda c: {"cmd": "GetJob", "id": c.params["id"]},
                                       lookup=True)),
    Route("POST", "/queues/{queue}/jobs", command(_push)),
]
