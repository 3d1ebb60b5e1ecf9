"""This broker's place in a cluster: its membership, the queues it owns, who owns the rest.

Several brokers share one PostgreSQL database (docs/scale-out.md). Each queue is still
one actor that owns its state; what the cluster decides is which broker runs it:

* **Membership.** Each broker has a row with a heartbeat written with the database's
  clock, renewed every ``lease_s / 5``; a broker whose heartbeat is older than
  ``lease_s`` is dead to the others. No broker trusts its own clock for that.
* **Placement.** The live broker that should own a queue is the rendezvous winner
  (:mod:`trioqueue.cluster.rendezvous`) among the live ones.
* **Ownership.** A queue's lease row names its owner and an epoch, which every commit of
  the queue's writes checks in the same transaction (the store's fence, which asks
  :meth:`Cluster.epoch`). Taking a queue raises its epoch, so a broker that lost it can
  never write for it again, whatever it believes.

**Roles.** A lease may name a task of the cluster's instead of a queue: one live broker
runs it at a time (the cron scheduler, cluster/crons.py). Its name is one no
client queue can have, and it moves as a queue does (claimed by the rendezvous winner,
handed over when a broker joins, taken over when its holder dies), with its writes
fenced by it; instead of a queue's rebuild, the :class:`Role` is given the broker
records it runs on, read after its claim committed, and is retired before a handover.

A broker owns a queue once it has claimed its lease and rebuilt it from the database:
on the first command for it (:meth:`Cluster.prepare`, which the router awaits before it
routes a batch), or when the beat finds the queue orphaned (its owner dead or gone) and
this broker is the winner (:meth:`_take_orphans`: failover without waiting for a
client). A command for a queue another live broker owns is forwarded there.

**Why a stale heartbeat stops the broker.** When a beat finds this broker's own heartbeat
older than the lease (the process was paused, or cut off from the database), the others
may already have taken its queues: its memory of them is then stale, and the fence would
refuse its commits anyway. :class:`LostMembership` ends the broker (exit status 5) rather
than leave it answering from state it no longer owns; a supervisor restarts it as a new
member, which claims queues afresh. A broker that cannot reach the database at all
learns nothing from its beats, so it goes by its own clock too: when no beat has
succeeded for ``OWN_LEASE_FRACTION`` of the lease since the last one was sent, the
others may soon take its queues, so it stops the same way before they can. Otherwise
it would go on renewing its workers' locks from memory while a takeover re-leases
those jobs to other workers: two live holders.

All database calls run in worker threads (``trio.to_thread``): a beat or a claim is a
network round trip and the event loop keeps serving meanwhile.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import trio

from ..storage.port import Claimed, Recovered
from .rendezvous import preferred_owner

log = logging.getLogger("trioqueue.cluster")

# Orphaned queues claimed per worker-thread hop by the takeover task: a few hundred
# queues' claims and loads at a time, so a large failover never holds a claim lock for
# long and the beats keep coming.
TAKEOVER_STEP = 100

# How much of the lease may pass, from the moment a successful beat was sent, before a
# broker that has had no beat since stops itself (the others may take its queues once
# the lease has passed by the database's clock, which stamped that beat no earlier).
OWN_LEASE_FRACTION = 0.8


class LostMembership(Exception):
    """This broker's heartbeat went stale, or a lease it held moved: it stops (exit 5)."""


class Lease(NamedTuple):
    owner: str | None
    epoch: int


class BeatView(Protocol):
    """What a beat returns: the live brokers (id -> address), every lease, and the
    versions of the broker records (kind -> version)."""

    @property
    def live(self) -> Mapping[str, str]: ...
    @property
    def leases(self) -> Mapping[str, tuple[str | None, int]]: ...
    @property
    def versions(self) -> Mapping[str, int]: ...


# The broker's records by kind: kind -> {name: record} (Recovered.broker_records).
Records = dict[str, dict[str, dict[str, Any]]]


class Role(Protocol):
    """A lease that names a task one live broker of the cluster runs, not a queue (see
    the module docstring)."""

    @property
    def kinds(self) -> Sequence[str]:
        """The kinds of broker records the role runs on (read when it is claimed)."""

    def take(self, records: Records) -> None:
        """This broker holds the role from now on, with ``records`` (read after the
        claim committed: every write of the previous holder is in them)."""

    async def retire(self) -> None:
        """Before a handover: stop, and commit what was written under the lease."""


class ClusterStore(Protocol):
    """The named membership and lease operations (cluster/pg.py, and
    cluster/memory.py for tests); each blocks for one round trip."""

    def join(self, broker_id: str, address: str) -> None: ...
    def beat(self, broker_id: str, lease_s: float) -> BeatView | None: ...
    def claim(self, queue: str, broker_id: str, lease_s: float) -> int | None: ...
    def release(self, queue: str, broker_id: str, epoch: int) -> bool: ...
    def leave(self, broker_id: str) -> None: ...
    def load_queues(self, queues: Sequence[str]) -> Recovered: ...
    def load_broker_records(self, kinds: Sequence[str]) -> Records: ...
    def queues_of(self, job_ids: Sequence[str]) -> dict[str, str]: ...
    def locate_jobs(self, job_ids: Sequence[str]) -> dict[str, tuple[str, bool]]: ...
    def claim_ids(self, broker_id: str, lease_s: float, wanted: Sequence[tuple[str, str]],
                  looks: Sequence[str]) -> dict[str, Claimed]: ...
    def inbox(self, queues: Sequence[str], limit: int) -> list[tuple[int, str, Any]]: ...
    def waits_of(self, queues: Sequence[str]) -> list[tuple[str, str, str]]: ...
    def inbox_queues(self) -> list[str]: ...
    def wait_inbox(self, timeout_s: float) -> bool: ...


# Rebuild the named queues into this broker's actors from what was loaded, with the
# (child, parent, parent's queue) rows of their children's parents elsewhere.
Adopt = Callable[[Recovered, list[str], list[tuple[str, str, str]]], None]
# Handing a queue over: wait until its actor is quiet, retire it and commit what it
# wrote (False: still busy after the grace; kept for a later beat); then, once the
# lease is released, forget what is left of it here.
Retire = Callable[[str], Awaitable[bool]]
Forget = Callable[[str], None]
# This broker found itself fenced off (the reason): what it does before it stops.
OnLost = Callable[[str], Awaitable[None]]


class _Claimed(NamedTuple):
    epochs: dict[str, int]
    recovered: Recovered | None
    waits: list[tuple[str, str, str]]
    view: BeatView | None  # a fresh view when some claim lost to a live broker
    records: Records  # for the roles claimed


def new_broker_id() -> str:
    """A fresh id for a broker started without ``--broker-id``: a restarted broker is a
    new member (it lost what it held in memory), so it takes a new name."""
    return f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"


class HeldLeases:
    """The leases this broker holds: queue -> epoch. The store's fence asks it at every
    commit (:meth:`epoch`), so it is made before the store opens and the cluster fills
    it as it claims queues."""

    def __init__(self, broker_id: str) -> None:
        self.broker_id = broker_id
        self.owned: dict[str, int] = {}

    def epoch(self, queue: str) -> int | None:
        return self.owned.get(queue)


class Cluster:
    """Membership, leases and routes of one broker (see the module docstring)."""

    def __init__(self, store: ClusterStore, *, held: HeldLeases, address: str,
                 lease_s: float, adopt: Adopt, retire: Retire | None = None,
                 forget: Forget | None = None,
                 roles: Mapping[str, Role] | None = None,
                 on_lost: OnLost | None = None) -> None:
        self.broker_id = held.broker_id
        self.held = held
        self.address = address
        self.lease_s = lease_s
        self.beat_s = lease_s / 5
        self.store = store
        self._adopt = adopt
        self._retire = retire
        self._forget = forget
        self._on_lost = on_lost
        self.roles: Mapping[str, Role] = roles or {}  # by their leases' names
        self._moving: dict[str, trio.Event] = {}  # queues being handed over, by queue
        self.handovers = 0  # queues handed to a broker that joined
        self.owned = held.owned  # queue -> the epoch this broker holds
        self.live: dict[str, str] = {}  # broker id -> address, as of the last beat
        # Set (and replaced by a fresh one) by each beat that changed ``live``: how
        # PeerEvents follows the brokers that join and leave.
        self.live_changed = trio.Event()
        # More of ClusterStatus, from the parts that follow the cluster (PeerEvents).
        self.status_extra: Callable[[], dict[str, Any]] | None = None
        self.leases: dict[str, Lease] = {}  # every lease, as of the last beat
        # kind -> version of the broker records, as of the last beat (followed by
        # cluster/webhooks.py)
        self.versions: Mapping[str, int] = {}
        self._claiming: dict[str, trio.Event] = {}  # claims in flight, by queue
        self._orphans_seen = trio.Event()  # set by a beat that saw queues to take
        self.joined = trio.Event()  # set once the first beat gave a view of the cluster
        self._beaten = trio.Event()  # set (then replaced) by each beat
        self.takeovers = 0  # queues taken over from dead or departed brokers
        # trio time until which this broker may still believe itself a member: a
        # successful beat's sending time plus OWN_LEASE_FRACTION of the lease
        self.member_until = float("-inf")  # (set by the first beat, before run() watches)

    def status(self) -> dict[str, Any]:
        """What ClusterStatus answers: this broker, the live ones, what it serves."""
        return {
            "brokerId": self.broker_id, "address": self.address, "leaseS": self.lease_s,
            "live": [{"brokerId": b, "address": a} for b, a in sorted(self.live.items())],
            "queues": sorted(q for q in self.owned if q not in self.roles),
            "roles": {name: self.owner(name) for name in sorted(self.roles)},
            "takeovers": self.takeovers, "handovers": self.handovers,
            **(self.status_extra() if self.status_extra is not None else {}),
        }

    def queue_names(self) -> list[str]:
        """Every queue of the cluster, as the last beat's leases name them."""
        return [name for name in self.leases if name not in self.roles]

    # --- routes -----------------------------------------------------------------------

    def owner(self, queue: str) -> str | None:
        """The broker that serves ``queue`` now: its lease's owner while that one is
        live, else the rendezvous winner among the live brokers (None: none known)."""
        if queue in self.owned:
            return self.broker_id
        lease = self.leases.get(queue)
        if lease is not None and lease.owner is not None and lease.owner in self.live:
            return lease.owner
        return preferred_owner(queue, self.live)

    def held_elsewhere(self, queue: str) -> bool:
        """Whether a live broker other than this one holds ``queue``'s lease (as of the
        last beat, or of a claim that lost to it)."""
        lease = self.leases.get(queue)
        return (lease is not None and lease.owner is not None
                and lease.owner != self.broker_id and lease.owner in self.live)

    def moving(self, queue: str) -> bool:
        """Whether ``queue`` is being handed over now: its actor may be retired already,
        while this broker still holds the lease, until :meth:`moved`."""
        return queue in self._moving

    async def moved(self) -> None:
        """Wait until the handovers in progress now are done (their leases released,
        or kept when the queue was too busy to retire)."""
        for event in list(self._moving.values()):
            await event.wait()

    def route(self, queue: str) -> str | None:
        """None: this broker serves ``queue`` (it owns it, or :meth:`prepare` claims
        it); else the address of the broker that does."""
        owner = self.owner(queue)
        if owner is None or owner == self.broker_id:
            return None
        return self.live[owner]

    async def prepare(self, queues: Iterable[str], asked: Collection[str] = ()) -> None:
        """Own every queue of ``queues`` that this broker should serve but does not
        yet, before a batch naming them is routed: claim, load and rebuild each (or
        wait for the claim another batch started). A queue whose claim loses to a live
        broker is routed there afterwards (the view is refreshed).

        ``asked``: queues another broker sent commands for, believing this one serves
        them. Views differ for a beat when a broker joins; rather than bounce the
        command, this broker claims such a queue when its lease is free (never from a
        live holder), and hands it to the rendezvous winner once the views agree."""
        if not self.joined.is_set():
            await self.joined.wait()
        queues = list(queues)
        for queue in queues:
            moving = self._moving.get(queue)
            if moving is not None:  # routed once the new owner may claim it
                await moving.wait()
        wanted = [q for q in dict.fromkeys(queues)
                  if q not in self.owned and (q in asked or self.route(q) is None)]
        if wanted:
            await self._claim_all(wanted)

    async def _claim_all(self, queues: list[str]) -> None:
        waits: list[trio.Event] = []
        mine: list[str] = []
        for queue in queues:
            event = self._claiming.get(queue)
            if event is not None:
                waits.append(event)
            elif queue not in self.owned:
                self._claiming[queue] = trio.Event()
                mine.append(queue)
        try:
            if mine:
                claimed = await trio.to_thread.run_sync(self._claim_in_thread, mine)
                self._took(claimed)
        finally:
            # (whatever happened: a batch waiting on these claims goes on, and routes
            # the queues by the view as it is)
            for queue in mine:
                self._claiming.pop(queue).set()
        for event in waits:
            await event.wait()

    def _claim_in_thread(self, queues: list[str]) -> _Claimed:
        """Worker thread: claim each queue, then load the claimed ones in one snapshot
        taken after every claim committed (so it holds every commit of the previous
        owner, whose later commits the new epochs refuse)."""
        store = self.store
        epochs: dict[str, int] = {}
        lost = False
        for queue in queues:
            epoch = store.claim(queue, self.broker_id, self.lease_s)
            if epoch is None:
                lost = True
            else:
                epochs[queue] = epoch
        names = [q for q in epochs if q not in self.roles]
        recovered = store.load_queues(names) if epochs else None
        waits = store.waits_of(names) if names else []
        kinds = sorted({k for q in epochs if q in self.roles for k in self.roles[q].kinds})
        records = store.load_broker_records(kinds) if kinds else {}
        view = store.beat(self.broker_id, self.lease_s) if lost else None
        return _Claimed(epochs, recovered, waits, view, records)

    def _took(self, claimed: _Claimed) -> None:
        if claimed.view is not None:
            self._see(claimed.view)
        if not claimed.epochs:
            return
        for queue, epoch in claimed.epochs.items():
            self.owned[queue] = epoch
            self.leases[queue] = Lease(self.broker_id, epoch)
        for name in claimed.epochs:
            role = self.roles.get(name)
            if role is not None:
                role.take(claimed.records)
                log.info("holding %s from now on (epoch %d)", name, claimed.epochs[name])
        names = [q for q in claimed.epochs if q not in self.roles]
        if not names:
            return
        assert claimed.recovered is not None
        self._adopt(claimed.recovered, names, claimed.waits)
        log.info("serving %d queue(s) from now on: %s", len(names),
                 ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""))

    # --- the beat ---------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Join, then beat every ``lease_s / 5`` until cancelled (the broker's shutdown:
        it then calls :meth:`leave` once its last commit is flushed). A beat that finds
        this broker dead to the others raises :class:`LostMembership`."""
        store = self.store
        await trio.to_thread.run_sync(store.join, self.broker_id, self.address)
        await self._beat()
        self.joined.set()
        log.info("joined the cluster as %s (%s); %d broker(s) live", self.broker_id,
                 self.address, len(self.live))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._take_orphans)
            nursery.start_soon(self._watch_own_lease)
            task_status.started()
            while True:
                await trio.sleep(self.beat_s)
                await self._beat()

    async def beat(self) -> None:
        """One beat now (run() beats every beat_s)."""
        await self._beat()

    async def _beat(self) -> None:
        sent = trio.current_time()
        # (abandoned when cancelled: a beat stuck on an unreachable database must not
        # keep a broker that stopped itself from exiting)
        view = await trio.to_thread.run_sync(self.store.beat, self.broker_id, self.lease_s,
                                             abandon_on_cancel=True)
        try:
            if view is None:
                raise LostMembership(
                    f"broker {self.broker_id} missed its heartbeat for more than "
                    f"{self.lease_s:g} s: the other brokers may have taken its queues")
            self._see(view)
        except LostMembership as exc:
            await self._lost(exc)
            raise
        self.member_until = max(self.member_until,
                                sent + self.lease_s * OWN_LEASE_FRACTION)
        self._beaten.set()
        self._beaten = trio.Event()

    async def _lost(self, exc: LostMembership) -> None:
        if self._on_lost is not None:
            await self._on_lost(str(exc))

    async def _watch_own_lease(self) -> None:
        """Stop this broker once no beat has succeeded for most of the lease (see the
        module docstring): a beat stuck on an unreachable database says nothing."""
        while True:
            await trio.sleep_until(self.member_until)
            if trio.current_time() >= self.member_until:
                exc = LostMembership(
                    f"broker {self.broker_id} has reached no database for "
                    f"{self.lease_s * OWN_LEASE_FRACTION:g} s of its {self.lease_s:g} s "
                    "lease: the other brokers may take its queues")
                await self._lost(exc)
                raise exc

    async def next_beat(self) -> None:
        """Wait for the next beat (the inbox reader's pace)."""
        await self._beaten.wait()

    def _see(self, view: BeatView) -> None:
        live = dict(view.live)
        if live != self.live:
            self.live = live
            changed, self.live_changed = self.live_changed, trio.Event()
            changed.set()
        self.leases = {q: Lease(*lease) for q, lease in view.leases.items()}
        self.versions = view.versions
        for queue, epoch in self.owned.items():
            lease = self.leases.get(queue)
            if lease is None or lease.epoch < epoch:
                # a view read before this broker's claim committed (a beat and a claim
                # run in threads of their own): the claim is the newer word
                self.leases[queue] = Lease(self.broker_id, epoch)
                continue
            if lease != (self.broker_id, epoch):
                raise LostMembership(
                    f"the lease of queue {queue!r} moved to {lease.owner} (epoch "
                    f"{lease.epoch}) while broker {self.broker_id} held epoch {epoch}")
        if self._orphans() or self._leaving():
            self._orphans_seen.set()

    def _orphans(self) -> list[str]:
        """Queues with no live owner that this broker wins, and does not own."""
        live = self.live
        # (a role's lease is one from its first claim: before that, it has no row)
        unheld = [(q, Lease(None, 0)) for q in self.roles if q not in self.leases]
        return [queue for queue, lease in [*self.leases.items(), *unheld]
                if queue not in self.owned and queue not in self._claiming
                and (lease.owner is None or lease.owner not in live)
                and preferred_owner(queue, live) == self.broker_id]

    async def _take_orphans(self) -> None:
        """Failover: claim and rebuild the orphaned queues this broker wins as the
        beats find them, a step at a time (a claim is a round trip; the beat goes on
        meanwhile in its own task)."""
        while True:
            await self._orphans_seen.wait()
            self._orphans_seen = trio.Event()
            await self.take_orphans()
            await self.hand_over()

    def _leaving(self) -> list[str]:
        """Queues this broker owns that a live broker now wins (one joined)."""
        if self._retire is None:
            return []
        live = self.live
        return [queue for queue in self.owned if queue not in self._moving
                and preferred_owner(queue, live) not in (None, self.broker_id)]

    async def hand_over(self) -> None:
        """Rebalancing: give the queues another live broker now wins to it, a step at
        a time. Each is drained first (commands sent to it before are applied and
        committed; commands for it that arrive meanwhile wait in :meth:`prepare`),
        then its lease released, then its remains forgotten; the new owner claims it
        at its next beat or first command."""
        for queue in self._leaving()[:TAKEOVER_STEP]:
            await self._hand_over(queue)

    async def _hand_over(self, queue: str) -> None:
        assert self._retire is not None and self._forget is not None
        moving = self._moving[queue] = trio.Event()
        role = self.roles.get(queue)
        try:
            if role is not None:
                await role.retire()
            elif not await self._retire(queue):
                return  # (busy past the grace: a later beat tries again)
            epoch = self.owned[queue]
            # (a lease not released, the database gone: it then runs out with this
            # broker's heartbeat, and the beat stops the broker)
            await trio.to_thread.run_sync(self.store.release, queue, self.broker_id, epoch)
            del self.owned[queue]
            self.leases[queue] = Lease(None, epoch)
            if role is None:
                self._forget(queue)
            self.handovers += 1
        finally:
            del self._moving[queue]
            moving.set()

    async def take_orphans(self) -> None:
        """Claim and rebuild the orphans of the last view, TAKEOVER_STEP at a time."""
        orphans = self._orphans()
        for start in range(0, len(orphans), TAKEOVER_STEP):
            before = self._queues_owned()
            await self._claim_all(orphans[start:start + TAKEOVER_STEP])
            self.takeovers += self._queues_owned() - before

    def _queues_owned(self) -> int:
        return sum(1 for name in self.owned if name not in self.roles)

    # --- leaving ----------------------------------------------------------------------

    def leave_now(self) -> None:
        """Give every lease back and remove this broker's row (blocking; the broker's
        shutdown calls it in a worker thread after its last commit), so the others
        take its queues at their next beat instead of after the lease."""
        self.store.leave(self.broker_id)
        self.owned.clear()

