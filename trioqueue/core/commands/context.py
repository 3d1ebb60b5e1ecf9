"""What every queue handler receives besides the queue and the message, and the small
field readers the handler modules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import fields
from ..errors import STORAGE_FULL, Refused
from ..options import MAX_DATA_CHARS
from ..queue import AfterQueues, JobWaiter, PullWaiter, QueueState, Sliced

Reply = dict[str, Any]


@dataclass(slots=True)
class Ctx:
    """What a handler is told besides the message. The queue actor builds one per batch
    and sets the per-command fields before each handler runs: a handler must not keep it.
    """

    now: int
    conn: Any = None  # the connection that sent the command (for ownership)
    frame_bytes: int | None = None
    # An upper bound of the frame's JSON text, when the transport measured one (a large
    # frame, decoded in slices): data within the limit is then not measured again.
    json_bound: int | None = None
    max_data_bytes: int = MAX_DATA_CHARS
    max_wait_holds: int = 40
    # The store is nearly full: commands that would create a job must refuse (before
    # they change anything). Measured by the I/O shell, which owns the storage; only
    # the commands that admit jobs (``admits`` in core.commands.table) look at it.
    storage_full: bool = False


def _refuse_if_full(ctx: Ctx) -> None:
    if ctx.storage_full:
        raise Refused(STORAGE_FULL)


Handler = Callable[[QueueState, dict[str, Any], Ctx],
                   "Reply | PullWaiter | JobWaiter | Sliced | AfterQueues"]

def _token(msg: dict[str, Any]) -> str | None:
    token = msg.get("token")
    if token is not None and not isinstance(token, str):
        raise Refused("token must be a string")
    return token


def _opt_int(value: Any, field: str) -> int | None:
    number = fields.strict_number(value, field, integer=True)
    return None if number is None else int(number)
