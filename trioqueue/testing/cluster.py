"""Several real brokers on one PostgreSQL database, as subprocesses on loopback.

The cluster tests (tests/e2e/test_cluster.py, tests/faults/test_cluster_faults.py) and
the scale-out benchmark start their brokers through this: each is
``trioqueue serve --cluster --storage URL`` with its own name and free ports, and each
can be killed, paused (SIGSTOP) and resumed like any :class:`BrokerProcess`.
"""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from .process import BrokerProcess


class BrokerCluster:
    """``size`` brokers named ``b0``, ``b1``... sharing the database at ``dsn``."""

    def __init__(self, dsn: str, size: int, workdir: str | Path, *, lease_s: float = 2.0,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.dsn = dsn
        self.lease_s = lease_s
        self.brokers = [
            BrokerProcess(Path(workdir) / f"b{i}", "--cluster", "--broker-id", f"b{i}",
                          "--cluster-lease-s", str(lease_s), *extra_args, storage_url=dsn)
            for i in range(size)]

    def __getitem__(self, index: int) -> BrokerProcess:
        return self.brokers[index]

    def __len__(self) -> int:
        return len(self.brokers)

    async def start(self, timeout_s: float = 30.0) -> None:
        """Start every broker, one after the other (each is ready once it has joined)."""
        for broker in self.brokers:
            await broker.start(timeout_s)

    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers
                if b.process is not None and b.process.returncode is None]

    async def stop(self, timeout_s: float = 20.0) -> None:
        """Stop every broker still running (SIGTERM: each commits, then leaves); one
        that does not stop in time is killed."""
        for broker in self.running():
            if broker.paused:
                broker.resume()
            try:
                await broker.kill(signal.SIGTERM, timeout_s)
            except trio.TooSlowError:
                await broker.kill(signal.SIGKILL, timeout_s)
