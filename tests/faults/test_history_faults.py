"""Every fault at once, judged by the history checker (trioqueue.testing.history).

Each scenario runs the recorded workload of trioqueue.testing.workload (producers
pushing with custom ids, workers pulling under a lock, renewing it with heartbeats,
acknowledging or failing with the delivery's token), injects its faults at random
moments, drains what is left and reads every job's final record. The checker then
wants 0 violations: nothing acknowledged lost, nothing unexpected, every job terminal,
no double completion, no redelivery after an acknowledged completion, counters never
going back, no stale token applied, no two live holders, no live holder refused.

The default suite runs a bounded sample of each (a few seconds of load, one or two
fault cycles); ``-m slow`` runs the full variants.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.testing.history import History, check
from trioqueue.testing.process import BrokerProcess
from trioqueue.testing.small_disk import CannotMount, small_tmpfs
from trioqueue.testing.store_check import check_lmdb_store
from trioqueue.testing.workload import Workload, drain_and_read, running_ports

LOCK_TTL_MS = 1000
QUEUES = ("h0", "h1")


def judge(history: History, final: dict[str, dict[str, Any] | None],
          lock_ttl_ms: int = LOCK_TTL_MS) -> dict[str, int]:
    history.pending_as_unknown("cut off by a fault")
    result = check(history, final, lock_ttl_ms=lock_ttl_ms)
    result.assert_valid()
    assert result.stats["adds acknowledged"] > 0, result.report()
    assert result.stats["completions acknowledged"] > 0, result.report()
    return result.stats


# ---------------------------------------------------------------- (a) LMDB: kill -9, SIGSTOP


async def lmdb_kills_and_pauses(tmp_path: Path, *, cycles: int, load_s: float, seed: int
                                ) -> dict[str, int]:
    """Under load, ``cycles`` faults of the broker at random moments, alternating a
    kill -9 (the store checked, then a restart on it) and a SIGSTOP longer than the
    workers' locks, then SIGCONT: the workers that renewed through the pause keep
    their jobs (the broker's pause grace)."""
    rng = random.Random(seed)
    data = tmp_path / "data"
    broker = BrokerProcess(data, "--lease-grace-after-pause-s", "3")
    history = History()
    load = Workload(history, running_ports([broker]), QUEUES, producers=3,
                    jobs_per_producer=1_000_000, push_interval_s=0.01, deadline_s=load_s,
                    lock_ttl_ms=LOCK_TTL_MS, seed=seed)
    await broker.start()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(load.run)
            for cycle in range(cycles):
                await trio.sleep(rng.uniform(0.2, 0.6))  # (a random moment under load)
                if cycle % 2 == 0:
                    assert await broker.kill(signal.SIGKILL) == -signal.SIGKILL
                    assert check_lmdb_store(data) == [], f"cycle {cycle}"
                    await broker.start()
                else:
                    broker.pause()
                    await trio.sleep(LOCK_TTL_MS / 1000 * 1.5)  # (the pause itself)
                    broker.resume()
            with trio.fail_after(load_s + 30):
                await load.producers_done.wait()
            load.stop()
        final = await drain_and_read(history, running_ports([broker]), QUEUES,
                                     lock_ttl_ms=LOCK_TTL_MS)
    finally:
        await broker.stop()
    return judge(history, final)


async def test_lmdb_kill_9_and_sigstop_under_load_sample(tmp_path: Path) -> None:
    stats = await lmdb_kills_and_pauses(tmp_path, cycles=2, load_s=2.5, seed=1)
    assert stats["heartbeats acknowledged"] > 0


@pytest.mark.slow
async def test_lmdb_kill_9_and_sigstop_under_load_full(tmp_path: Path) -> None:
    await lmdb_kills_and_pauses(tmp_path, cycles=20, load_s=30, seed=2)


# ---------------------------------------------------------------- (b) a full store while draining


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test (a disk that fills), unmounted after it;
    skipped, saying why, where mounting is not permitted."""
    try:
        with small_tmpfs(tmp_path / "disk", 16 * 1024 * 1024) as mount_point:
            yield mount_point
    except CannotMount as exc:
        pytest.skip(str(exc))


async def full_store_while_draining(data: Path, *extra_args: str, load_s: float, seed: int
                                    ) -> dict[str, int]:
    """Producers push large jobs faster than the workers drain them, into a store that
    fills up and stays full: each refusal is a refused add (``Storage full``), never a
    loss; the broker keeps running and finishes every job it accepted."""
    broker = BrokerProcess(data, *extra_args)
    history = History()
    load = Workload(history, running_ports([broker]), QUEUES, producers=3,
                    jobs_per_producer=1_000_000, push_interval_s=0.005, payload_bytes=8000,
                    deadline_s=load_s, workers=1, concurrency=2, lock_ttl_ms=LOCK_TTL_MS,
                    seed=seed)
    await broker.start()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(load.run)
            with trio.fail_after(load_s + 30):
                await load.producers_done.wait()
            load.stop()
        assert broker.process is not None and broker.process.returncode is None, (
            f"the broker stopped on a full store:\n{broker.log.decode()[-2000:]}")
        final = await drain_and_read(history, running_ports([broker]), QUEUES,
                                     lock_ttl_ms=LOCK_TTL_MS)
    finally:
        await broker.stop()
    stats = judge(history, final)
    assert stats["adds refused"] > 0, stats  # the store was full
    refusals = {op.error for op in history.ops if op.kind == "add" and op.status == "fail"}
    assert all("Storage full" in (e or "") for e in refusals), refusals
    return stats


async def test_a_full_disk_while_draining_refuses_new_jobs_and_finishes_the_old_sample(
        small_disk: Path) -> None:
    await full_store_while_draining(small_disk / "data", load_s=3, seed=3)


@pytest.mark.slow
async def test_a_full_disk_while_draining_full(small_disk: Path) -> None:
    await full_store_while_draining(small_disk / "data", load_s=20, seed=4)


async def test_a_store_at_its_limit_while_draining_refuses_new_jobs_and_finishes_the_old(
        tmp_path: Path) -> None:
    await full_store_while_draining(tmp_path / "data", "--store-max-bytes", "16MiB",
                                    load_s=3, seed=5)


@pytest.mark.slow
async def test_a_store_at_its_limit_while_draining_full(tmp_path: Path) -> None:
    await full_store_while_draining(tmp_path / "data", "--store-max-bytes", "16MiB",
                                    load_s=20, seed=6)


# ---------------------------------------------------------------- (c) PostgreSQL


async def postgres_kills_and_restarts(tmp_path: Path, dsn: str, server: Any, *,
                                      cycles: int, load_s: float, seed: int
                                      ) -> dict[str, int]:
    """Under load on PostgreSQL, ``cycles`` faults at random moments, alternating a
    kill -9 of the broker (then a restart of it) and a restart of the PostgreSQL
    server under it (the broker rides the outage)."""
    from trioqueue.testing.pg_store_check import check_pg_store

    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data", "--pg-outage-s", "60", storage_url=dsn)
    history = History()
    load = Workload(history, running_ports([broker]), QUEUES, producers=3,
                    jobs_per_producer=1_000_000, push_interval_s=0.01, deadline_s=load_s,
                    lock_ttl_ms=LOCK_TTL_MS, seed=seed)
    await broker.start()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(load.run)
            for cycle in range(cycles):
                await trio.sleep(rng.uniform(0.2, 0.6))  # (a random moment under load)
                if cycle % 2 == 0:
                    assert await broker.kill(signal.SIGKILL) == -signal.SIGKILL
                    assert await trio.to_thread.run_sync(check_pg_store, dsn) == []
                    await broker.start()
                else:
                    await trio.to_thread.run_sync(server.restart)
            with trio.fail_after(load_s + 60):
                await load.producers_done.wait()
            load.stop()
        assert broker.process is not None and broker.process.returncode is None, (
            broker.log.decode()[-2000:])
        final = await drain_and_read(history, running_ports([broker]), QUEUES,
                                     lock_ttl_ms=LOCK_TTL_MS)
    finally:
        await broker.stop()
    assert await trio.to_thread.run_sync(check_pg_store, dsn) == []
    return judge(history, final)


async def test_postgres_kill_9_of_the_broker_and_a_server_restart_under_load_sample(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    await postgres_kills_and_restarts(tmp_path, pg_dsn, restartable_postgres, cycles=2,
                                      load_s=3, seed=7)


@pytest.mark.slow
async def test_postgres_kill_9_of_the_broker_and_server_restarts_under_load_full(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    await postgres_kills_and_restarts(tmp_path, pg_dsn, restartable_postgres, cycles=12,
                                      load_s=30, seed=8)


# ---------------------------------------------------------------- (d) a three-broker cluster

LEASE_S = 2.0
CLUSTER_IDS = ("b0", "b1", "b2")
# Locks longer than a broker's pause past its lease: a worker that holds a job across
# the takeover still holds it live, and must keep it through the queue's new broker.
CLUSTER_LOCK_TTL_MS = 6000


class ClusterFaults:
    """Three brokers on one database under a recorded load, and the faults a cluster
    must survive: kill -9 of a broker (restarted under its id), SIGSTOP of one past its
    lease then SIGCONT (fenced off: it exits with status 5, then restarts), and a
    fourth broker started on the same database without ``--cluster`` (it must refuse:
    two owners of one store lose writes)."""

    def __init__(self, tmp_path: Path, dsn: str, seed: int) -> None:
        from trioqueue.testing.cluster import BrokerCluster, queues_served_by

        self.tmp_path = tmp_path
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.cluster = BrokerCluster(dsn, 3, tmp_path, lease_s=LEASE_S)
        self.queues = [q for owner in CLUSTER_IDS for q in queues_served_by(owner, 1, "hq-")]
        self.intruders: list[BrokerProcess] = []
        self.intruders_started: list[str] = []
        self.history = History()

    def targets(self) -> list[int]:
        return running_ports([*self.cluster.brokers, *self.intruders])()

    async def prepare(self) -> None:
        from trioqueue.testing.cluster import connect_all

        await self.cluster.start()
        clients = await connect_all(self.cluster)
        # An active job whose worker went with its broker is retried by the stall watch
        # of the broker that takes its queue over (docs/scale-out.md): after 2 s here.
        for queue in self.queues:
            await clients[0].ok("SetStallConfig", queue=queue, config={
                "stallInterval": 2000, "gracePeriod": 0, "maxStalls": 50})
        for client in clients:
            await client.aclose()

    async def kill_one(self) -> None:
        broker = self.rng.choice(self.cluster.running())
        assert await broker.kill(signal.SIGKILL) == -signal.SIGKILL
        await broker.start(timeout_s=60)  # it rejoins under its id

    async def pause_one_past_its_lease(self) -> None:
        from trioqueue.server.serve_exit import EXIT_LOST_OWNERSHIP

        broker = self.rng.choice(self.cluster.running())
        broker.pause()
        await trio.sleep(LEASE_S + 1.5)  # (the pause itself: past the lease)
        broker.resume()
        code = await broker.wait_exit(timeout_s=30)
        assert code == EXIT_LOST_OWNERSHIP, broker.log.decode()[-2000:]
        await broker.start(timeout_s=60)

    async def start_without_cluster(self, hold_s: float) -> None:
        """Try a broker without ``--cluster`` on the database; should it start, it takes
        its share of the load for ``hold_s`` (what it does to the history is judged)
        before it is stopped."""
        intruder = BrokerProcess(self.tmp_path / f"intruder{len(self.intruders)}",
                                 storage_url=self.dsn)
        self.intruders.append(intruder)
        try:
            await intruder.start(timeout_s=60)
        except RuntimeError:
            return  # refused to start, as it must
        self.intruders_started.append(intruder.log.decode()[-500:])
        await trio.sleep(hold_s)  # (load through it meanwhile)
        await intruder.kill(signal.SIGTERM)

    async def run(self, faults: list[str], load_s: float) -> dict[str, int]:
        load = Workload(self.history, self.targets, self.queues, producers=3,
                        jobs_per_producer=1_000_000, push_interval_s=0.02,
                        deadline_s=load_s, lock_ttl_ms=CLUSTER_LOCK_TTL_MS,
                        workers=4, hold_ratio=0.3, max_hold_s=3.0,
                        heartbeat_every_s=0.2,
                        seed=self.rng.randrange(1 << 30))
        await self.prepare()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(load.run)
                for fault in faults:
                    await trio.sleep(self.rng.uniform(0.2, 0.6))  # (a random moment)
                    if fault == "kill":
                        await self.kill_one()
                    elif fault == "pause":
                        await self.pause_one_past_its_lease()
                    else:
                        await self.start_without_cluster(hold_s=1.0)
                with trio.fail_after(load_s + 60):
                    await load.producers_done.wait()
                load.stop()
            final = await drain_and_read(self.history, self.targets, self.queues,
                                         lock_ttl_ms=CLUSTER_LOCK_TTL_MS)
        finally:
            for intruder in self.intruders:
                await intruder.stop()
            await self.cluster.stop()
        stats = judge(self.history, final, CLUSTER_LOCK_TTL_MS)
        assert self.intruders_started == [], (
            "a broker without --cluster started on the cluster's database:\n"
            + "\n".join(self.intruders_started))
        return stats


async def test_cluster_sigstop_past_the_lease_under_load_sample(
        tmp_path: Path, pg_dsn: str) -> None:
    await ClusterFaults(tmp_path, pg_dsn, seed=9).run(["pause"], load_s=3)


async def test_cluster_a_broker_without_cluster_on_its_database_refuses_to_start_sample(
        tmp_path: Path, pg_dsn: str) -> None:
    await ClusterFaults(tmp_path, pg_dsn, seed=10).run(["intruder"], load_s=2)


@pytest.mark.slow
async def test_cluster_every_fault_under_load_full(tmp_path: Path, pg_dsn: str) -> None:
    faults = ["kill", "pause", "intruder"] * 4
    random.Random(11).shuffle(faults)
    await ClusterFaults(tmp_path, pg_dsn, seed=11).run(faults, load_s=60)


@pytest.mark.slow
async def test_cluster_kill_9_and_sigstop_under_load_full(tmp_path: Path, pg_dsn: str
                                                          ) -> None:
    await ClusterFaults(tmp_path, pg_dsn, seed=12).run(["kill", "pause"] * 4, load_s=40)
