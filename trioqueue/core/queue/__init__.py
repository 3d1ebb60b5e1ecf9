"""One queue's state machine, one module per concern (see ``docs/architecture.md``).

:class:`QueueState` is assembled in :mod:`.state` from the rule groups of the other
modules; this package re-exports what the rest of the broker imports, so
``from trioqueue.core.queue import QueueState`` keeps working.
"""

from ..fields import normalise_progress
from .dependencies import ADOPT, REMOVE_CHILD, SET_PARENT, SETTLED
from .finished import FinishedView
from .finished import FinishedView as FinishedReader  # its former name, kept for callers
from .leases import Lock
from .ports import JobIndex
from .settings import DEFAULT_MAX_STALLS, DEFAULT_STALL_CONFIG, QueueSettings
from .slices import Sliced
from .stalls import STALL_CHECK_MS
from .state import QueueState
from .views import completed_reply, failed_reply, finished_wire
from .waiters import AfterQueues, JobWaiter, PullWaiter, WaiterAnswer

__all__ = [
    "ADOPT", "AfterQueues", "DEFAULT_MAX_STALLS", "DEFAULT_STALL_CONFIG", "REMOVE_CHILD", "SETTLED",
    "SET_PARENT", "STALL_CHECK_MS", "FinishedReader", "FinishedView", "JobIndex", "JobWaiter",
    "Lock", "PullWaiter", "QueueSettings", "QueueState", "Sliced", "WaiterAnswer",
    "completed_reply", "failed_reply", "finished_wire", "normalise_progress",
]
