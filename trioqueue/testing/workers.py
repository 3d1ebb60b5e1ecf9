"""Running the Python client's workers in a test: started together, closed once the
test's own event says the work is done (never a sleep standing in for it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import anyio

if TYPE_CHECKING:
    from ..client import Worker


class Awaited(Protocol):
    async def wait(self) -> object: ...


async def run_workers_until(workers: Sequence[Worker], done: Awaited,
                            timeout_s: float = 30.0) -> None:
    """Start ``workers``, wait for ``done`` (``fail_after(timeout_s)``), close them
    gracefully; works on trio and asyncio (anyio)."""
    async with anyio.create_task_group() as nursery:
        for worker in workers:
            await nursery.start(worker.run)
        with anyio.fail_after(timeout_s):
            await done.wait()
        for worker in workers:
            await worker.close()
