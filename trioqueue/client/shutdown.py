"""Warm shutdown of a :class:`~trioqueue.client.worker.Worker` on SIGTERM or Ctrl-C.

Used by ``Worker.run(signals=True)`` and by ``trioqueue worker`` (:mod:`.runner`):

1. **the first signal** stops pulling and lets the running jobs finish within
   ``grace_s`` seconds; their results are acknowledged, then the worker unregisters
   and ``run`` returns. Jobs still running when the grace period ends are handed back;
2. **a second signal** hands the running jobs back at once: their processors are
   cancelled and each job goes back to waiting with ``MoveToWait`` and its lock token,
   which charges no attempt (a thread processor is abandoned, its result dropped).

Each step is one log line on ``trioqueue.client.worker``, so an operator sees what the
worker is doing while it stops.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .lease import log

if TYPE_CHECKING:
    from .worker import Worker

SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: A grace period that fits inside a supervisor's usual stop timeout (Kubernetes and
#: systemd wait 30 s and 90 s before SIGKILL), leaving time to acknowledge.
DEFAULT_GRACE_S = 25.0


async def watch_signals(worker: Worker, grace_s: float) -> None:
    """React to SIGTERM/SIGINT for as long as this task runs (``Worker.run`` runs it
    beside its loops when ``signals=True``)."""
    with anyio.open_signal_receiver(*SIGNALS) as received:
        await react(worker, received, grace_s)


async def react(worker: Worker, received: AsyncIterator[int], grace_s: float) -> None:
    """The first signal closes ``worker`` gracefully within ``grace_s``; the second
    forces it. Returns when the signals stop (the task is cancelled with the worker)."""
    count = 0
    async with anyio.create_task_group() as closing:
        async for signum in received:
            count += 1
            name = signal.Signals(signum).name
            if worker.is_closed:
                continue
            if count == 1:
                log.info("worker %s: %s: stopping: no more pulls; %d running job(s) get "
                         "%g s to finish (send it again to hand them back now)",
                         worker.name, name, worker.active_count, grace_s)
                # (the worker logs it if the grace period runs out with jobs running)
                closing.start_soon(partial(worker.close, timeout=grace_s))
            elif count == 2:
                log.warning("worker %s: %s again: handing back %d running job(s) now "
                            "(no attempt charged)", worker.name, name, worker.active_count)
                closing.start_soon(partial(worker.close, force=True))

