"""Several real brokers on one PostgreSQL database, as subprocesses on loopback.

The cluster tests (tests/e2e/test_cluster.py, tests/faults/test_cluster_faults.py) and
the scale-out benchmark start their brokers through this: each is
``trioqueue serve --cluster --storage URL`` with its own name and free ports, and each
can be killed, paused (SIGSTOP) and resumed like any :class:`BrokerProcess`.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from ..cluster.rendezvous import preferred_owner
from .process import BrokerProcess
from .wire import RawClient


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

    async def __aenter__(self) -> BrokerCluster:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # (the brokers that did start)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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


BROKER_IDS = ("b0", "b1", "b2")


def queue_served_by(broker: str, prefix: str, among: Sequence[str] = BROKER_IDS) -> str:
    """A queue name that ``broker`` wins among the brokers ``among`` (the brokers' own
    rendezvous), so a test knows which broker serves it."""
    return queues_served_by(broker, 1, prefix, among)[0]


def queues_served_by(broker: str, count: int, prefix: str,
                     among: Sequence[str] = BROKER_IDS) -> list[str]:
    names = (f"{prefix}{i}" for i in itertools.count())
    return list(itertools.islice((q for q in names if preferred_owner(q, among) == broker),
                                 count))


async def cluster_status(client: RawClient) -> dict[str, Any]:
    """The ClusterStatus of the broker at the other end of ``client``."""
    status: dict[str, Any] = (await client.ok("ClusterStatus"))["data"]["cluster"]
    return status


async def connect_all(cluster: BrokerCluster, *, timeout_s: float = 15.0) -> list[RawClient]:
    """A client of each running broker, once each sees every running broker live."""
    running = cluster.running()
    clients = [await RawClient.connect(broker.tcp_port) for broker in running]
    with trio.fail_after(timeout_s):
        for client in clients:
            while len((await cluster_status(client))["live"]) != len(running):
                await trio.sleep(0.02)  # (polling ClusterStatus, under the deadline)
    return clients
