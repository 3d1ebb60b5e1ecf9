"""Flows from the synchronous client: the async
:class:`~trioqueue.client.FlowProducer`'s methods, blocking, with trees of
:class:`~trioqueue.sync.SyncJob`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..client.flow import FlowNode, FlowProducer
from ..client.job import Job
from .job import SyncJob

if TYPE_CHECKING:
    from .connection import SyncConnection


class SyncFlowNode(FlowNode[SyncJob]):
    """A :class:`~trioqueue.client.flow.FlowNode` whose jobs are :class:`SyncJob`."""

    __slots__ = ()


class SyncFlowProducer:
    """:class:`~trioqueue.client.FlowProducer`, blocking: ``add``, ``add_bulk``,
    ``add_chain``, ``add_bulk_then`` and ``get_flow`` with the same arguments."""

    def __init__(self, connection: SyncConnection) -> None:
        self.connection = connection
        self.async_producer = FlowProducer(connection.connection)

    def _job(self, job: Job) -> SyncJob:
        return SyncJob(self.connection.queue(job.queue_name), job)

    def _node(self, node: FlowNode[Job]) -> SyncFlowNode:
        return SyncFlowNode(self._job(node.job), [self._node(c) for c in node.children])

    def add(self, tree: Mapping[str, Any]) -> SyncFlowNode:
        return self._node(self.connection.run(self.async_producer.add, tree))

    def add_bulk(self, trees: Iterable[Mapping[str, Any]]) -> list[SyncFlowNode]:
        nodes = self.connection.run(self.async_producer.add_bulk, list(trees))
        return [self._node(node) for node in nodes]

    def add_chain(self, steps: Iterable[Mapping[str, Any]]) -> list[SyncJob]:
        jobs = self.connection.run(self.async_producer.add_chain, list(steps))
        return [self._job(job) for job in jobs]

    def add_bulk_then(self, parallel: Iterable[Mapping[str, Any]],
                      final: Mapping[str, Any]) -> tuple[list[SyncJob], SyncJob]:
        jobs, last = self.connection.run(self.async_producer.add_bulk_then,
                                         list(parallel), final)
        return [self._job(job) for job in jobs], self._job(last)

    def get_flow(self, job_id: str, depth: int | None = None,
                 max_children: int | None = None) -> SyncFlowNode | None:
        node = self.connection.run(self.async_producer.get_flow, job_id, depth,
                                   max_children)
        return None if node is None else self._node(node)
