"""The cron schedules of a cluster (docs/scale-out.md): one scheduler for all brokers,
and the router's hook for the broker records' commands.

**One scheduler.** The schedules are run by one live broker: the holder of the lease
:data:`~trioqueue.core.repeating.crons.SCHEDULER_LEASE`, a name no client queue can have. It is
a role of the cluster (cluster/view.py, "Roles") and moves as a queue does: the
rendezvous winner claims it, a broker that joins and wins it gets it handed over, the
survivors take it over once its holder's heartbeat is older than the lease. The holder
loads the schedules from the table after its claim committed (:class:`SchedulerRole`),
so it sees every firing its predecessor committed, and goes on from there (a slot missed
while the lease moved fires late). Every other broker's registry stays empty: each
schedule is counted once in the broker-wide reads, and fires once.

**Writes fenced by the lease.** Each write of a schedule (Cron, CronDelete, a firing's
new ``executions`` and ``nextRun``, a deletion at ``maxLimit``) is committed only while
this broker holds the lease at the epoch it claimed (``Writes(SCHEDULER_LEASE)``). A
scheduler that lost it (paused past the lease while another took over) has its commit
refused and stops (exit 5): it never writes a firing twice over its successor's.

**A firing** (:class:`CronFirings`) goes to its queue through the queue's inbox: the
schedule's new count and a ``push`` message for the queue (core/cluster_handlers.py)
are one commit, after which the queue's broker is poked over the peer links (a
ClusterPoke, its reply ignored), or the queue applies it here when this broker serves
it. So a firing is counted exactly when its job will be pushed: the scheduler killed
before that commit loses both (its successor fires the slot), killed after it neither
(the message waits in the inbox, and the queue's broker reads it at its next beat if
the poke was lost). Forwarding the PUSH itself (router.post to another broker) would
lose the job when the scheduler dies, or the link is down, after the count was
committed; pushing before the count, fire a slot twice when it dies in between.

**The commands** (:class:`ClusterRecords`): Cron, CronGet, CronList and CronDelete
received by any broker are forwarded to the scheduler's broker (the holder, or the
rendezvous winner, which claims the lease first), so there is one registry: the one
that fires. Written through the table by whichever broker received them, and reloaded
by the holder, they would race its firings: the holder's registry runs ahead of the
table by the firings in flight, and a Cron keeps the schedule's ``executions``, which a
write from another broker would take from a stale row (a count lost, a slot fired
again after a takeover). A forward costs one hop for a command that is rare. The
webhook commands reload the webhooks from the table first (cluster/webhooks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

from ..actors.ports import Committer
from ..actors.request import Request
from ..actors.scheduler import CronScheduler
from ..core.cluster_handlers import push_message
from ..core.commands.registry import Command
from ..core.errors import Refused
from ..core.repeating.crons import CRON_KIND, SCHEDULER_LEASE, CronDef
from ..core.writes import Writes
from .routes import Forward, from_peer
from .webhooks import Records, WebhookSync

log = logging.getLogger("trioqueue.cron")

CRON_COMMANDS = frozenset({"Cron", "CronGet", "CronList", "CronDelete"})
WEBHOOK_COMMANDS = frozenset({"AddWebhook", "RemoveWebhook", "SetWebhookEnabled",
                              "ListWebhooks"})
MOVING = "The cron scheduler is moving between brokers; retry"
ELSEWHERE = "The cron scheduler runs on another broker; retry"

Spawn = Callable[..., None]  # start fn(*args) as a task of the broker's nursery


class SchedulerRouting(Protocol):
    """What this module asks of the cluster (cluster/view.py)."""

    @property
    def owned(self) -> Collection[str]: ...
    def route(self, queue: str) -> str | None: ...
    def held_elsewhere(self, queue: str) -> bool: ...
    def prepare(self, queues: Iterable[str], asked: Collection[str] = ()
                ) -> Awaitable[None]: ...


class SchedulerRole:
    """The cluster's role of the scheduler's lease: the scheduler's registry loaded when
    this broker takes it, emptied (and what fired committed) before a handover.

    A slot that fell due while the lease moved (a handover takes a beat or two, a
    takeover the lease and a beat) fires late rather than being skipped: that is no
    restart, and a schedule of a second would lose a firing each time a broker joins.
    One missed for longer than twice the lease (every broker down) is skipped as after
    a restart, where the schedule asks."""

    kinds = (CRON_KIND,)

    def __init__(self, committer: Committer, lease_s: float) -> None:
        self._committer = committer
        self._late_ms = int(2 * lease_s * 1000)
        self.scheduler: CronScheduler | None = None  # set once the broker runs

    def take(self, records: Records) -> None:
        assert self.scheduler is not None, "the lease is claimed once the broker runs"
        self.scheduler.take(records.get(CRON_KIND, {}), self._late_ms)

    async def retire(self) -> None:
        assert self.scheduler is not None
        self.scheduler.drop()
        # (the firings and commands already applied: committed while the lease is
        # still ours; after the release the fence would refuse them, and stop us)
        await self._committer.commit()


class CronFirings:
    """A cluster's firings: the count and the job's message in one commit fenced by the
    scheduler's lease, then the queue's broker poked (see the module docstring)."""

    def __init__(self, committer: Committer, cluster: SchedulerRouting,
                 forward: Forward,
                 apply_here: Callable[[Sequence[str]], Awaitable[None]],
                 spawn: Spawn) -> None:
        self._committer = committer
        self._cluster = cluster
        self._forward = forward
        self._apply_here = apply_here
        self._spawn = spawn
        self.fired = 0

    def fire(self, defn: CronDef) -> None:
        writes = Writes(SCHEDULER_LEASE)
        writes.put_broker_record(CRON_KIND, defn.name, defn.to_record())
        writes.cluster.messages.append(
            (defn.queue, push_message(defn.name, defn.job_message(), defn.data_chars)))
        self._committer.submit(writes)
        self._committer.release([(_Poke(self, defn.queue), {})])
        self.fired += 1

    def poke(self, queue: str) -> None:
        """After the commit: have the queue's broker apply its inbox now."""
        address = self._cluster.route(queue)
        if address is None:
            self._spawn(self._apply_here, [queue])
        else:
            self._forward(address, [Request("ClusterPoke", {"queues": [queue]}, _IGNORED)])


class _Poke:
    """The replier of a firing's commit: it pokes once the commit is in."""

    __slots__ = ("_firings", "_queue")

    def __init__(self, firings: CronFirings, queue: str) -> None:
        self._firings = firings
        self._queue = queue

    def deliver(self, reply: dict[str, Any]) -> None:
        self._firings.poke(self._queue)


class _Ignored:
    """A poke's answer: nobody waits for it (a lost poke costs a beat of latency)."""

    def deliver(self, reply: dict[str, Any]) -> None:
        if not reply.get("ok"):
            log.info("a firing's poke was not answered: %s", reply.get("error"))


_IGNORED = _Ignored()


def scheduler_address(cluster: SchedulerRouting, req: Request) -> str | None:
    """Where a cron command goes: None for this broker (it holds the scheduler's lease),
    else the address of the broker that does (or wins it). Refused when neither can
    take it now (a claim just lost; a peer's guess that only a beat settles)."""
    address = cluster.route(SCHEDULER_LEASE)
    if address is None:
        if SCHEDULER_LEASE not in cluster.owned:
            raise Refused(MOVING)
        return None
    if from_peer(req) and not cluster.held_elsewhere(SCHEDULER_LEASE):
        raise Refused(ELSEWHERE)  # (never bounced between two brokers' guesses)
    return address


class ClusterRecords:
    """The router's hook for the broker records' commands in a cluster: cron commands
    to the scheduler's broker, and the webhooks reloaded before a webhook command."""

    def __init__(self, cluster: SchedulerRouting, webhooks: WebhookSync) -> None:
        self._cluster = cluster
        self._webhooks = webhooks

    async def prepare(self, routed: list[tuple[Command, Request]]) -> None:
        """Before a batch is routed: claim the scheduler's lease when it names a cron
        command and this broker should hold it (as a queue is claimed on its first
        command), or wait while it is handed over; reload the webhooks when it names a
        webhook command."""
        crons = asked = hooks = False
        for command, req in routed:
            name = command.name
            if name in CRON_COMMANDS:
                crons = True
                asked = asked or from_peer(req)
            elif name in WEBHOOK_COMMANDS:
                hooks = True
        if hooks:
            await self._webhooks.refresh()
        if crons:  # (last: the batch is routed right after it, with no wait between
            # in which the lease could be handed over under a command routed here)
            await self._cluster.prepare([SCHEDULER_LEASE],
                                        (SCHEDULER_LEASE,) if asked else ())

    def take(self, command: Command, req: Request,
             remote: dict[str, list[Request]] | None) -> bool:
        """Whether ``req`` is a cron command for another broker (added to ``remote``);
        False: answered here."""
        if command.name not in CRON_COMMANDS or remote is None:
            return False
        address = scheduler_address(self._cluster, req)
        if address is None:
            return False
        remote.setdefault(address, []).append(req)
        return True
