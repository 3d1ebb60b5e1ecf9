"""Cron schedules and webhooks across three real brokers on one PostgreSQL database
(docs/scale-out.md, "Cron schedules and webhooks"): one broker runs every schedule and
each firing reaches its queue once, whichever broker serves it; the schedules survive
their broker's SIGKILL; a webhook added through any broker delivers the events of a
queue another serves, and stops within a beat of its removal through a third; and a
restart of every broker keeps them all.

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from tests.conftest import shared_cluster
from trioqueue.cluster.rendezvous import preferred_owner
from trioqueue.core.repeating.crons import SCHEDULER_LEASE
from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, cluster_status, queue_served_by
from trioqueue.testing.webhook_receiver import WebhookReceiver

IDS = ["b0", "b1", "b2"]
LEASE_S = 2.0  # (BrokerCluster's: a beat every 0.4 s)
# How soon a webhook change through one broker reaches the others: the next beat,
# then a read of the table (with room for a loaded machine).
WITHIN_A_BEAT_S = 2 * LEASE_S / 5 + 0.5
NOT_FOUND = "Cron job not found"


# (the receivers listen on loopback, which webhooks may reach only when allowed)
EXTRA_ARGS = ("--webhook-allow-private",)


@pytest.fixture
async def cluster(tmp_path: Path, pg_dsn: str) -> AsyncIterator[BrokerCluster]:
    brokers = BrokerCluster(pg_dsn, 3, tmp_path, lease_s=LEASE_S, extra_args=EXTRA_ARGS)
    try:
        await brokers.start()
        yield brokers
    finally:
        await brokers.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, module_pg_dsn: str
           ) -> Iterator[BrokerCluster]:
    """``cluster``, started once for the module: for the tests that neither stop nor
    kill a broker, and whose schedules and webhooks are of their own kind (the one
    lists the schedules, the other the webhooks)."""
    yield from shared_cluster(BrokerCluster(
        module_pg_dsn, 3, tmp_path_factory.mktemp("cluster"), lease_s=LEASE_S,
        extra_args=EXTRA_ARGS))


async def _clients(cluster: BrokerCluster) -> dict[str, RawClient]:
    """A client of each running broker, by id, once each sees the running ones live and
    agrees on who runs the schedules."""
    running = [f"b{i}" for i, b in enumerate(cluster.brokers) if b in cluster.running()]
    clients = {f"b{i}": await RawClient.connect(broker.tcp_port)
               for i, broker in enumerate(cluster.brokers) if f"b{i}" in running}
    scheduler = _scheduler(running)
    for client in clients.values():
        with trio.fail_after(10):
            while True:
                status = await cluster_status(client)
                if (sorted(b["brokerId"] for b in status["live"]) == running
                        and status["roles"] == {SCHEDULER_LEASE: scheduler}):
                    break
                await trio.sleep(0.05)
    return clients


def _scheduler(running: list[str]) -> str:
    """The broker that runs the schedules once ``running`` see each other."""
    owner = preferred_owner(SCHEDULER_LEASE, running)
    assert owner is not None
    return owner


async def _jobs(client: RawClient, queue: str) -> int:
    counts = (await client.ok("GetJobCounts", queue=queue))["counts"]
    return int(sum(counts.values()))


async def _until_exhausted(ask: RawClient, count: RawClient, queue: str, name: str,
                           timeout_s: float) -> None:
    """Until the schedule is gone (deleted at its maxLimit), checking on the way that
    the queue never holds more jobs than the schedule counts firings (the count read
    first: a firing's job comes after its count is committed). An error other than
    "not found" (the scheduler failing over) is waited out."""
    with trio.fail_after(timeout_s):
        while True:
            jobs = await _jobs(count, queue)
            reply = await ask.call("CronGet", name=name)
            if not reply["ok"]:
                if reply["error"] == NOT_FOUND:
                    return
            else:
                assert jobs <= reply["cron"]["executions"]
            await trio.sleep(0.05)


async def test_one_scheduler_fires_each_period_once_into_another_brokers_queue(
        shared: BrokerCluster) -> None:
    clients = await _clients(shared)
    scheduler = _scheduler(IDS)
    via, server = (b for b in IDS if b != scheduler)
    queue = queue_served_by(server, "cron-q")
    made = await clients[via].ok("Cron", name="every-second", queue=queue,
                                 repeatEvery=1000, maxLimit=3, preventOverlap=False,
                                 data={"from": "cron"})
    assert made["cron"]["executions"] == 0
    for client in clients.values():  # one registry, whichever broker is asked
        listed = (await client.ok("CronList"))["crons"]
        assert [c["name"] for c in listed] == ["every-second"]
    await _until_exhausted(clients[server], clients["b0"], queue, "every-second", 10)
    # three periods, three firings, three jobs: none twice, none lost
    with trio.fail_after(5):
        while await _jobs(clients["b0"], queue) < 3:
            await trio.sleep(0.05)
    jobs = (await clients["b0"].ok("GetJobs", queue=queue))["jobs"]
    assert [j["data"] for j in jobs] == [{"from": "cron"}] * 3
    assert queue in (await cluster_status(clients[server]))["queues"]


@pytest.mark.slow  # (CI runs the rest of the cluster suite: README)
async def test_the_schedules_survive_their_brokers_sigkill(cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    scheduler = _scheduler(IDS)
    survivors = [b for b in IDS if b != scheduler]
    asker, server = survivors
    queue = queue_served_by(server, "kill-q")
    assert preferred_owner(queue, survivors) == server  # (it stays where it is)
    await clients[asker].ok("Cron", name="steady", queue=queue, repeatEvery=1000,
                            maxLimit=6, preventOverlap=False)
    with trio.fail_after(10):
        while (await clients[asker].ok("CronGet", name="steady"))["cron"][
                "executions"] < 2:
            await trio.sleep(0.05)
    await cluster[IDS.index(scheduler)].kill(signal.SIGKILL)
    # a survivor takes the schedules once the lease runs out and fires the rest (the
    # slot due meanwhile late, once), none twice
    await _until_exhausted(clients[asker], clients[server], queue, "steady", 20)
    with trio.fail_after(5):
        while await _jobs(clients[server], queue) < 6:
            await trio.sleep(0.05)
    assert await _jobs(clients[asker], queue) == 6
    status = await cluster_status(clients[asker])
    assert status["roles"][SCHEDULER_LEASE] in survivors


class Probes:
    """Jobs pushed one at a time into a queue that two webhooks watch; each waits until
    the control webhook (never removed) has delivered it, so the other webhook's
    deliveries can be judged job by job."""

    def __init__(self, client: RawClient, queue: str, control: WebhookReceiver) -> None:
        self.client = client
        self.queue = queue
        self.control = control
        self.pushed: list[tuple[str, float]] = []  # (job id, trio time of its push)

    async def push(self, wait_s: float = 10) -> str:
        """Push a probe; its id once the control webhook delivered it (TooSlowError
        after ``wait_s``)."""
        at = trio.current_time()
        job_id = (await self.client.ok("PUSH", queue=self.queue, name="probe",
                                       data={}))["id"]
        self.pushed.append((job_id, at))
        with trio.fail_after(wait_s):
            while job_id not in _delivered(self.control):
                await self.control.wait_for(len(self.control.requests) + 1, wait_s)
        return job_id

    async def until_delivering(self) -> None:
        """Probes until the control webhook delivers one (its broker learnt of it)."""
        with trio.fail_after(10):
            while True:
                try:
                    await self.push(wait_s=0.5)
                    return
                except trio.TooSlowError:
                    continue


def _delivered(receiver: WebhookReceiver) -> set[str]:
    return {json.loads(r.body)["jobId"] for r in receiver.requests}


async def test_a_webhook_added_anywhere_delivers_where_its_queue_is_served(
        shared: BrokerCluster, nursery: trio.Nursery) -> None:
    clients = await _clients(shared)
    queue = queue_served_by("b1", "hooked-")
    control = await nursery.start(WebhookReceiver().run)
    watched = await nursery.start(WebhookReceiver().run)
    await clients["b2"].ok("AddWebhook", url=control.url, events=["job.pushed"],
                           queue=queue)
    probes = Probes(clients["b2"], queue, control)
    await probes.until_delivering()
    # added through b0: b1, where the queue's events happen, delivers them within a beat
    added_at = trio.current_time()
    hook = (await clients["b0"].ok("AddWebhook", url=watched.url, events=["job.pushed"],
                                   queue=queue))["data"]
    while True:
        job_id = await probes.push()
        if job_id in _delivered(watched):
            break
        assert trio.current_time() - added_at < WITHIN_A_BEAT_S
    listed = (await clients["b2"].ok("ListWebhooks"))["data"]
    counted = {h["id"]: h["successCount"] for h in listed["webhooks"]}
    assert counted[hook["webhookId"]] >= 1  # (b1's deliveries, asked through b2)
    # removed through b2 (which learns of it first): b1 stops within a beat
    await clients["b2"].ok("RemoveWebhook", webhookId=hook["webhookId"])
    removed_at = trio.current_time()
    while trio.current_time() - removed_at < WITHIN_A_BEAT_S + 1:
        await probes.push()
    late = [at - removed_at for job_id, at in probes.pushed
            if at > removed_at and job_id in _delivered(watched)]
    assert all(delay < WITHIN_A_BEAT_S for delay in late), late
    for client in clients.values():
        hooks = (await client.ok("ListWebhooks"))["data"]["webhooks"]
        assert [h["url"] for h in hooks] == [control.url]


@pytest.mark.slow  # (CI runs the rest of the cluster suite: README)
async def test_a_restart_of_every_broker_keeps_the_crons_and_webhooks(
        cluster: BrokerCluster, nursery: trio.Nursery) -> None:
    clients = await _clients(cluster)
    receiver = await nursery.start(WebhookReceiver().run)
    await clients["b1"].ok("Cron", name="kept", queue="kept-q", repeatEvery=1000,
                           preventOverlap=False)
    await clients["b2"].ok("AddWebhook", url=receiver.url, events=["job.pushed"],
                           queue="hooked")
    await cluster.stop()
    await cluster.start()
    clients = await _clients(cluster)
    for client in clients.values():
        assert [c["name"] for c in (await client.ok("CronList"))["crons"]] == ["kept"]
        hooks = (await client.ok("ListWebhooks"))["data"]["webhooks"]
        assert [h["url"] for h in hooks] == [receiver.url]
    before = (await clients["b0"].ok("CronGet", name="kept"))["cron"]["executions"]
    with trio.fail_after(10):  # it fires again, from its stored count
        while (await clients["b0"].ok("CronGet", name="kept"))["cron"][
                "executions"] <= before:
            await trio.sleep(0.05)
    job_id = (await clients["b0"].ok("PUSH", queue="hooked", name="n", data={}))["id"]
    delivered = await receiver.wait_for(1)
    assert json.loads(delivered[0].body)["jobId"] == job_id


async def test_the_cap_on_schedules_counts_the_whole_cluster(
        tmp_path: Path, pg_dsn: str) -> None:
    """``--max-cron-schedules`` bounds the cluster's schedules, not each broker's: those
    created through either broker count together, and after the scheduler's broker is
    killed its successor, which loads them from the store, refuses the next one too."""
    cluster = BrokerCluster(pg_dsn, 2, tmp_path, lease_s=LEASE_S,
                            extra_args=("--max-cron-schedules", "3"))
    try:
        await cluster.start()
        clients = await _clients(cluster)
        for name, via in (("s0", "b0"), ("s1", "b1"), ("s2", "b0")):
            await clients[via].ok("Cron", name=name, queue="cap-q", repeatEvery=60_000)
        full = "Too many cron schedules (max 3; --max-cron-schedules)"
        for via in ("b0", "b1"):
            refused = await clients[via].call("Cron", name="s3", queue="cap-q",
                                              repeatEvery=60_000)
            assert refused["error"] == full
        scheduler = _scheduler(["b0", "b1"])
        survivor = "b1" if scheduler == "b0" else "b0"
        await cluster[int(scheduler[1])].kill(signal.SIGKILL)
        with trio.fail_after(20):  # (the survivor takes the schedules over)
            while True:
                listed = await clients[survivor].call("CronList")
                if listed["ok"] and len(listed["crons"]) == 3:
                    break
                await trio.sleep(0.05)
        refused = await clients[survivor].call("Cron", name="s3", queue="cap-q",
                                               repeatEvery=60_000)
        assert refused["error"] == full
        await clients[survivor].ok("CronDelete", name="s0")
        await clients[survivor].ok("Cron", name="s3", queue="cap-q", repeatEvery=60_000)
    finally:
        await cluster.stop()
