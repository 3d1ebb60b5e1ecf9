"""The broker's part in a cluster (docs/scale-out.md), a mixin of
:class:`~trioqueue.actors.broker.Broker`: joining once the listener is bound, the peer
links, claiming and rebuilding queues, handing them over, reading the inboxes, the cron
scheduler's lease and the webhooks that follow the table, and leaving at shutdown. Kept
apart from broker.py, which stays about one broker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ..config import Config
from ..core.repeating.crons import SCHEDULER_LEASE
from ..core.webhooks.registry import RECORD_KIND as WEBHOOK_RECORDS
from ..storage.port import LIVE, THEIRS, Claimed, Recovered, Storage
from .cluster import Cluster, HeldLeases
from .cluster_clients import ClusterClients
from .cluster_crons import ClusterRecords, CronFirings, SchedulerRole
from .cluster_inbox import ClusterInbox
from .cluster_routes import Wanted
from .cluster_webhooks import WebhookSync
from .events import EventHub
from .peer_events import PeerEvents
from .peer_links import PeerLinks
from .router import Router
from .writer import StorageWriter

log = logging.getLogger("trioqueue.broker")


class ClusterMember:
    """What the cluster's hooks use of the broker."""

    config: Config
    storage: Storage
    router: Router
    writer: StorageWriter
    cluster: Cluster | None
    peers: PeerLinks | None
    recovered_jobs: int
    events: EventHub
    _nursery: trio.Nursery | None
    # In a cluster: the scheduler's lease, the firings, the webhooks following the table
    scheduler_role: SchedulerRole | None
    firings: CronFirings | None
    webhook_sync: WebhookSync | None

    if TYPE_CHECKING:  # (the class that mixes this in has them)
        def spawn(self, fn: Any, *args: Any) -> None: ...

        def _rebuild(self, recovered: Recovered, names: set[str] | None, *,
                     charge_active: bool) -> None: ...

    def _join_cluster(self, held: HeldLeases) -> tuple[Cluster, PeerLinks, ClusterClients]:
        """The cluster's runtime, the peer links to the other brokers, and the clients
        whose commands go over them (named to the peers, released there when they go)."""
        config = self.config
        cluster_of = getattr(self.storage, "cluster", None)
        if cluster_of is None:
            raise ValueError("a cluster needs a PostgreSQL store (--storage)")
        self.scheduler_role = SchedulerRole(self.writer, config.cluster_lease_s)
        cluster = Cluster(cluster_of(), held=held, address=config.advertised(),
                          lease_s=config.cluster_lease_s, adopt=self._adopt,
                          retire=self._retire_queue, forget=self._forget_queue,
                          roles={SCHEDULER_LEASE: self.scheduler_role},
                          on_lost=self._fenced_off)
        clients = ClusterClients(lambda address, reqs: peers.forward(address, reqs))
        peers = PeerLinks(hello=self._peer_hello,
                          connect_timeout_s=config.peer_connect_timeout_s,
                          max_in_flight=config.peer_max_in_flight,
                          origin_of=clients.origin_of,
                          reply_timeout_s=config.peer_reply_timeout_s)
        return cluster, peers, clients

    async def _fenced_off(self, why: str) -> None:
        """This broker is dead to the others, or lost a lease it held: from now on it
        commits nothing, and answers every command waiting for a commit, and those
        that come, with an error that names ``why`` and says to retry (the writer's
        refusal), for ``cluster_fenced_grace_s``; then it stops (exit status 5). Its
        clients, and the brokers that forwarded to it, get an answer rather than a
        dropped connection."""
        self.writer.refuse(why)
        await trio.sleep(self.config.cluster_fenced_grace_s)

    def _wire_inbox(self) -> None:
        """The reader of this broker's queues' inboxes, on the router (a cluster); the
        cron firings, and the webhooks that follow the table."""
        cluster, peers = self.cluster, self.peers
        assert cluster is not None and peers is not None
        router = self.router
        router.inbox = ClusterInbox(cluster.store, cluster.owned, router.send_if_served,
                                    router.remote_parents, cluster.prepare)
        self.firings = CronFirings(self.writer, cluster, peers.forward,
                                   router.inbox.poked, self.spawn)
        self.webhook_sync = WebhookSync(router.webhooks, cluster.store,
                                        self.writer.read_committed)
        router.records = ClusterRecords(cluster, self.webhook_sync)

    def _cluster_records(self) -> Recovered:
        """What a cluster's broker loads at its start: the webhooks alone (a queue is
        rebuilt by the broker that claims it; the schedules by the scheduler's)."""
        assert self.cluster is not None
        records = self.cluster.store.load_broker_records([WEBHOOK_RECORDS])
        return Recovered(broker_records=records)

    def _peer_hello(self) -> list[dict[str, Any]]:
        """The first frames of a peer link: the cluster's token (the brokers of a
        cluster share their tokens), then ClusterPeer, which tells the other broker
        not to forward these commands again."""
        assert self.cluster is not None
        frames: list[dict[str, Any]] = []
        if self.config.auth_tokens:
            frames.append({"cmd": "Auth", "token": self.config.auth_tokens[0]})
        frames.append({"cmd": "ClusterPeer", "broker": self.cluster.broker_id})
        return frames

    async def _cluster_queues(self, job_ids: list[str]) -> dict[str, str | None]:
        """In a cluster: the queues of jobs, live or finished, that no local queue
        holds (most are other brokers'), read from the database in a worker thread.
        The live ones are noted for the batch's queues to see (Router.locate): a push
        whose custom id or dependency is another broker's live job."""
        assert self.cluster is not None
        store = self.cluster.store
        found = await self.writer.read_committed(lambda: store.locate_jobs(job_ids))
        remote_live = self.router.remote_live
        for job_id in job_ids:
            where = found.get(job_id)
            if where is not None and where[1]:
                remote_live.note(job_id, where[0])
            else:
                remote_live.forget(job_id)
        return {job_id: (found[job_id][0] if job_id in found else None)
                for job_id in job_ids}

    async def _claim_ids(self, wanted: Wanted) -> dict[str, Claimed]:
        """In a cluster: claim the new custom ids a batch admits here and look them and
        its pushes' dependencies up, in one read in a worker thread (storage/
        pg_cluster.py). An id another broker's live job or claim has is noted for the
        batch's queues (Router.locate): a push of it gets the duplicate answer, as for a
        live job on one broker."""
        cluster = self.cluster
        assert cluster is not None
        store = cluster.store
        claims = list(wanted.claims.items())
        where = await self.writer.read_committed(lambda: store.claim_ids(
            cluster.broker_id, cluster.lease_s, claims, wanted.looks))
        remote_live = self.router.remote_live
        for job_id in (*wanted.claims, *wanted.looks):
            seen = where.get(job_id)
            if seen is not None and seen.kind in (LIVE, THEIRS):
                remote_live.note(job_id, seen.queue)
            else:
                remote_live.forget(job_id)
        return where

    def _adopt(self, recovered: Recovered, names: list[str],
               waits: list[tuple[str, str, str]]) -> None:
        """In a cluster: rebuild queues this broker just claimed. Their active jobs stay
        active with their locks (a worker holding one may be connected to a surviving
        broker, and renew or acknowledge it through any broker); only a lock that then
        expires is charged, by the attempt rules (docs/scale-out.md). ``waits``: their
        children's parents served elsewhere, to be told when those children settle."""
        self.router.remote_parents.learn(waits, self.router.dependents)
        self._rebuild(recovered, set(names), charge_active=False)
        self.recovered_jobs += len(recovered.live_jobs)

    async def _retire_queue(self, name: str) -> bool:
        """In a cluster, handing queue ``name`` over: once its actor is quiet (what it
        accepted is applied), retire it and commit what it wrote. False when it is
        still busy after the shutdown grace (a later beat tries again)."""
        actor = self.router.actors.get(name)
        if actor is None:
            return True
        with trio.move_on_after(self.config.shutdown_grace_s):
            while not actor.quiet:
                await trio.sleep(0.005)  # (a poll, as settle's: the actor has no signal)
        if not actor.quiet:
            return False
        # (past this point the handover goes on: a retired actor kept as the queue's
        # would leave every command sent to it unanswered)
        actor.retire()
        await self.writer.commit()
        return True

    def _forget_queue(self, name: str) -> None:
        """In a cluster, after queue ``name`` was handed over: its actor, its jobs in
        the live index, its retained results and its counts go (O(its jobs))."""
        router = self.router
        actor = router.actors.pop(name, None)
        if actor is not None:
            for job_id in list(actor.state.jobs):
                router.remove(job_id)
        router.forget_retained(name)
        forget = getattr(self.storage, "forget_queue", None)
        if forget is not None:
            forget(name)

    async def join_cluster(self, tcp_port: int) -> None:
        """In a cluster: start the peer links and join, once the TCP listener is bound
        (``tcp_port``: the port it got, which the others are told when the configuration
        says neither ``advertise`` nor a fixed port), then relay the other brokers'
        events to this one's clients (PeerEvents). Commands that arrive meanwhile
        wait for the first beat's view (Cluster.prepare). The tasks are the broker's,
        so they stop with it."""
        cluster, peers = self.cluster, self.peers
        if cluster is None or peers is None:
            return
        assert self._nursery is not None
        if self.config.advertise is None and self.config.tcp_port == 0:
            host = self.config.advertised().rpartition(":")[0]
            cluster.address = f"{host}:{tcp_port}"
        await self._nursery.start(peers.run)
        await self._nursery.start(cluster.run)
        self._nursery.start_soon(self._read_inboxes, cluster)
        self._nursery.start_soon(self._listen_inboxes, cluster)
        self._nursery.start_soon(self._drop_departed, cluster, peers)
        if self.webhook_sync is not None:
            self._nursery.start_soon(self.webhook_sync.follow, cluster)
        me = cluster.broker_id
        events = PeerEvents(
            self.events, peers=lambda: {b: a for b, a in cluster.live.items() if b != me},
            changed=lambda: cluster.live_changed, hello=self._peer_hello,
            connect_timeout_s=self.config.peer_connect_timeout_s)
        cluster.status_extra = events.status
        await self._nursery.start(events.run)

    @staticmethod
    async def _drop_departed(cluster: Cluster, peers: PeerLinks) -> None:
        """Give up the link to each broker that left the live set (dead, or frozen
        past its lease), at the beat that sees it gone: what was forwarded to it is
        answered with an error that says to retry (peer_links.py), instead of waiting
        for a broker that will never answer or, frozen, will find itself fenced off
        when it wakes. Its queues are the survivors' from that beat on."""
        while True:
            await cluster.live_changed.wait()
            live = set(cluster.live.values())
            for address in peers.addresses():
                if address not in live:
                    peers.drop(address)

    async def _listen_inboxes(self, cluster: Cluster) -> None:
        """Read this broker's queues' inboxes whenever a commit notifies (LISTEN:
        another broker's batch wrote messages, one notification per batch). The wait
        runs in a worker thread, a second at a time; at shutdown it is abandoned (it
        ends within that second on its own, and its connection with the process)."""
        inbox = self.router.inbox
        assert inbox is not None
        while True:
            if await trio.to_thread.run_sync(cluster.store.wait_inbox, 1.0,
                                             abandon_on_cancel=True):
                await inbox.take()

    async def _read_inboxes(self, cluster: Cluster) -> None:
        """At every beat, apply the inbox messages other brokers committed for this
        broker's queues (their pokes apply them sooner; this catches a lost poke)."""
        inbox = self.router.inbox
        assert inbox is not None
        while True:
            await cluster.next_beat()
            # (a queue with messages and no owner yet, whose sender's poke was lost:
            # the broker that wins it claims it, and applies them)
            waiting = await trio.to_thread.run_sync(cluster.store.inbox_queues)
            await cluster.prepare([q for q in waiting if cluster.route(q) is None])
            await inbox.take()

    async def _leave_cluster(self) -> None:
        """Give this broker's leases back once its last commit is in, so the others
        take its queues at their next beat rather than after the lease. Not after a
        failed flush: writes of those queues may be missing, and the lease then runs
        out as for a crash."""
        cluster = self.cluster
        if cluster is None or self.writer.failed:
            return
        try:
            await trio.to_thread.run_sync(cluster.leave_now)
        except Exception as exc:  # (a database gone: the lease runs out instead)
            log.warning("could not leave the cluster: %s", exc)
