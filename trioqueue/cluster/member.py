"""The broker's part in a cluster (docs/scale-out.md), held by
:class:`~trioqueue.actors.broker.Broker` as its membership (made through
:class:`Joining`, given to the broker from above): joining once the listener
is bound, the peer links, claiming and rebuilding queues, handing them over, reading
the inboxes, the cron scheduler's lease and the webhooks that follow the table, and
leaving at shutdown. On one broker the broker holds a
:class:`~trioqueue.actors.ports.LocalMembership` instead, so broker.py stays about one
broker."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ..actors.events import EventHub
from ..actors.ports import Rebuild, Spawn
from ..actors.router import Router
from ..actors.writer import StorageWriter
from ..config import Config
from ..core.repeating.crons import SCHEDULER_LEASE, CronDef
from ..core.webhooks.registry import RECORD_KIND as WEBHOOK_RECORDS
from ..storage.port import LIVE, THEIRS, Claimed, Recovered, Storage
from .crons import ClusterRecords, CronFirings, SchedulerRole
from .fanout import ClusterReads
from .inbox import ClusterInbox
from .peers.events import PeerEvents
from .peers.links import PeerLinks
from .placement import ClusterPlacement
from .routes import Wanted
from .view import Cluster, ClusterStore, HeldLeases, new_broker_id
from .webhooks import WebhookSync

log = logging.getLogger("trioqueue.broker")


def cluster_tables(storage: Storage) -> ClusterStore:
    """The cluster's membership and lease operations, composed around the broker's
    PostgreSQL store (on its connections): a cluster needs one."""
    if getattr(storage, "link", None) is None:
        raise ValueError("a cluster needs a PostgreSQL store (--storage)")
    from .pg import tables_of  # (psycopg is optional: imported for a cluster only)

    return tables_of(storage)  # type: ignore[arg-type]  # (a PgStorage, or one wrapping it)


class ClusterMember:
    """This broker as a member of its cluster: the cluster's view, the peer links,
    the placement the router asks, and the tasks that follow the others. Given the
    broker's parts at construction; the router is attached once it is made
    (:meth:`attach`), since it asks this member's placement."""

    def __init__(self, config: Config, storage: Storage, writer: StorageWriter,
                 events: EventHub, held: HeldLeases, *, spawn: Spawn,
                 rebuild: Rebuild) -> None:
        tables = cluster_tables(storage)
        self.config = config
        self.storage = storage
        self.writer = writer
        self.events = events
        self._spawn = spawn
        self._rebuild = rebuild
        self.scheduler_role = SchedulerRole(writer, config.cluster_lease_s)
        self.cluster = Cluster(tables, held=held, address=config.advertised(),
                               lease_s=config.cluster_lease_s, adopt=self._adopt,
                               retire=self._retire_queue, forget=self._forget_queue,
                               roles={SCHEDULER_LEASE: self.scheduler_role},
                               on_lost=self._fenced_off)
        # What the router asks (which queues are served here, and how the others'
        # requests go there), with the clients whose commands go over the peer links.
        self.placement = ClusterPlacement(
            self.cluster, lambda address, reqs: self.peers.forward(address, reqs),
            writer, spawn, claim_ids=self._claim_ids)
        self.peers = PeerLinks(hello=self._peer_hello,
                               connect_timeout_s=config.peer_connect_timeout_s,
                               max_in_flight=config.peer_max_in_flight,
                               origin_of=self.placement.clients.origin_of,
                               reply_timeout_s=config.peer_reply_timeout_s)
        self.placement.reads = ClusterReads(self.cluster, self.peers.forward, spawn,
                                            config.cluster_read_timeout_s)
        self._router: Router | None = None
        # Set by attach: the cron firings, the webhooks following the table.
        self.firings: CronFirings | None = None
        self.webhook_sync: WebhookSync | None = None

    @property
    def router(self) -> Router:
        assert self._router is not None, "attached once the router is made"
        return self._router

    async def _fenced_off(self, why: str) -> None:
        """This broker is dead to the others, or lost a lease it held: from now on it
        commits nothing, and answers every command waiting for a commit, and those
        that come, with an error that names ``why`` and says to retry (the writer's
        refusal), for ``cluster_fenced_grace_s``; then it stops (exit status 5). Its
        clients, and the brokers that forwarded to it, get an answer rather than a
        dropped connection."""
        self.writer.refuse(why)
        await trio.sleep(self.config.cluster_fenced_grace_s)

    def attach(self, router: Router) -> None:
        """The router made: the reader of this broker's queues' inboxes, the cron
        firings, and the webhooks that follow the table."""
        self._router = router
        cluster, placement = self.cluster, self.placement
        inbox = placement.inbox = ClusterInbox(
            cluster.store, cluster.owned, router.send_if_served, placement.remote_parents,
            cluster.prepare)
        self.firings = CronFirings(self.writer, cluster, self.peers.forward, inbox.poked,
                                   self._spawn)
        self.webhook_sync = WebhookSync(router.webhooks, cluster.store,
                                        self.writer.read_committed)
        placement.records = ClusterRecords(cluster, self.webhook_sync)

    def load(self) -> Recovered:
        """What a cluster's broker loads at its start: the webhooks alone (a queue is
        rebuilt by the broker that claims it; the schedules by the scheduler's)."""
        records = self.cluster.store.load_broker_records([WEBHOOK_RECORDS])
        return Recovered(broker_records=records)

    def cron_firing(self) -> tuple[Callable[[CronDef], None] | None, str | None]:
        """How the scheduler fires a schedule (into a queue maybe served elsewhere),
        and the lease it fires under (only the holder's scheduler fires)."""
        assert self.firings is not None
        return self.firings.fire, SCHEDULER_LEASE

    def scheduler_made(self, scheduler: Any) -> None:
        self.scheduler_role.scheduler = scheduler

    def _peer_hello(self) -> list[dict[str, Any]]:
        """The first frames of a peer link: the cluster's token (the brokers of a
        cluster share their tokens), then ClusterPeer, which tells the other broker
        not to forward these commands again."""
        frames: list[dict[str, Any]] = []
        if self.config.auth_tokens:
            frames.append({"cmd": "Auth", "token": self.config.auth_tokens[0]})
        frames.append({"cmd": "ClusterPeer", "broker": self.cluster.broker_id})
        return frames

    async def queues_of(self, job_ids: list[str]) -> dict[str, str | None]:
        """In a cluster: the queues of jobs, live or finished, that no local queue
        holds (most are other brokers'), read from the database in a worker thread.
        The live ones are noted for the batch's queues to see (Router.locate): a push
        whose custom id or dependency is another broker's live job."""
        store = self.cluster.store
        found = await self.writer.read_committed(lambda: store.locate_jobs(job_ids))
        remote_live = self.placement.remote_live
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
        its pushes' dependencies up, in one read in a worker thread
        (cluster/pg.py). An id another broker's live job or claim has is noted for the
        batch's queues (Router.locate): a push of it gets the duplicate answer, as for a
        live job on one broker."""
        cluster = self.cluster
        store = cluster.store
        claims = list(wanted.claims.items())
        where = await self.writer.read_committed(lambda: store.claim_ids(
            cluster.broker_id, cluster.lease_s, claims, wanted.looks))
        remote_live = self.placement.remote_live
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
        self.placement.remote_parents.learn(waits, self.router.dependents)
        self._rebuild(recovered, set(names))

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

    async def join(self, tcp_port: int, nursery: trio.Nursery) -> None:
        """In a cluster: start the peer links and join, once the TCP listener is bound
        (``tcp_port``: the port it got, which the others are told when the configuration
        says neither ``advertise`` nor a fixed port), then relay the other brokers'
        events to this one's clients (PeerEvents). Commands that arrive meanwhile
        wait for the first beat's view (Cluster.prepare). The tasks are the broker's,
        so they stop with it."""
        cluster, peers = self.cluster, self.peers
        if self.config.advertise is None and self.config.tcp_port == 0:
            host = self.config.advertised().rpartition(":")[0]
            cluster.address = f"{host}:{tcp_port}"
        await nursery.start(peers.run)
        await nursery.start(cluster.run)
        nursery.start_soon(self._read_inboxes, cluster)
        nursery.start_soon(self._listen_inboxes, cluster)
        nursery.start_soon(self._drop_departed, cluster, peers)
        if self.webhook_sync is not None:
            nursery.start_soon(self.webhook_sync.follow, cluster)
        me = cluster.broker_id
        events = PeerEvents(
            self.events, peers=lambda: {b: a for b, a in cluster.live.items() if b != me},
            changed=lambda: cluster.live_changed, hello=self._peer_hello,
            connect_timeout_s=self.config.peer_connect_timeout_s)
        cluster.status_extra = events.status
        await nursery.start(events.run)

    @staticmethod
    async def _drop_departed(cluster: Cluster, peers: PeerLinks) -> None:
        """Give up the link to each broker that left the live set (dead, or frozen
        past its lease), at the beat that sees it gone: what was forwarded to it is
        answered with an error that says to retry (peers/links.py), instead of waiting
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
        inbox = self.placement.inbox
        assert inbox is not None
        while True:
            if await trio.to_thread.run_sync(cluster.store.wait_inbox, 1.0,
                                             abandon_on_cancel=True):
                await inbox.take()

    async def _read_inboxes(self, cluster: Cluster) -> None:
        """At every beat, apply the inbox messages other brokers committed for this
        broker's queues (their pokes apply them sooner; this catches a lost poke)."""
        inbox = self.placement.inbox
        assert inbox is not None
        while True:
            await cluster.next_beat()
            # (a queue with messages and no owner yet, whose sender's poke was lost:
            # the broker that wins it claims it, and applies them)
            waiting = await trio.to_thread.run_sync(cluster.store.inbox_queues)
            await cluster.prepare([q for q in waiting if cluster.route(q) is None])
            await inbox.take()

    async def leave(self) -> None:
        """Give this broker's leases back once its last commit is in, so the others
        take its queues at their next beat rather than after the lease. Not after a
        failed flush: writes of those queues may be missing, and the lease then runs
        out as for a crash."""
        cluster = self.cluster
        if self.writer.failed:
            return
        try:
            await trio.to_thread.run_sync(cluster.leave_now)
        except Exception as exc:  # (a database gone: the lease runs out instead)
            log.warning("could not leave the cluster: %s", exc)


class Joining:
    """How a broker joins its cluster, given to :class:`~trioqueue.actors.broker.Broker`
    (which imports nothing of the cluster): the leases it holds, which fence every
    commit of its store, and its :class:`ClusterMember`, made once the broker's parts
    are."""

    def __init__(self, config: Config) -> None:
        self.fence = HeldLeases(config.broker_id or new_broker_id())

    def member(self, config: Config, storage: Storage, writer: StorageWriter,
               events: EventHub, *, spawn: Spawn, rebuild: Rebuild) -> ClusterMember:
        return ClusterMember(config, storage, writer, events, self.fence, spawn=spawn,
                             rebuild=rebuild)
