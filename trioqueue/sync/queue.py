"""A queue whose methods block: each one is the async
:class:`~trioqueue.client.Queue`'s coroutine method, run on the connection's loop."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ..client.job import Job
from ..client.queue import Queue
from .job import SyncJob

if TYPE_CHECKING:
    from .connection import SyncConnection

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class _Blocking(Generic[P, T]):
    """A blocking method made from one of :class:`~trioqueue.client.Queue`'s coroutine
    methods: the whole of SyncQueue's plumbing, so that every method is one line.

    A descriptor rather than a loop of ``setattr``: type checkers see each method's
    parameters (``P``, taken from the async method) and its converted result (``T``).
    """

    def __init__(self, method: Callable[Concatenate[Queue, P], Awaitable[Any]],
                 convert: Callable[[SyncQueue, Any], T]) -> None:
        self.method = method
        self.convert = convert
        self.__name__ = method.__name__
        self.__doc__ = method.__doc__
        signature = inspect.signature(method)
        self.signature = signature.replace(
            parameters=list(signature.parameters.values())[1:],
            return_annotation=inspect.Signature.empty)

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Blocking[P, T]: ...

    @overload
    def __get__(self, obj: SyncQueue, owner: type | None = None) -> Callable[P, T]: ...

    def __get__(self, obj: SyncQueue | None, owner: type | None = None
                ) -> _Blocking[P, T] | Callable[P, T]:
        if obj is None:
            return self
        method, convert, queue = self.method, self.convert, obj

        def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
            afn = functools.partial(method, queue.async_queue, *args, **kwargs)
            return convert(queue, queue.connection.run(afn))

        blocking.__name__ = blocking.__qualname__ = self.__name__
        blocking.__doc__ = self.__doc__
        blocking.__signature__ = self.signature  # type: ignore[attr-defined]
        return blocking


def _plain(method: Callable[Concatenate[Queue, P], Awaitable[R]]) -> _Blocking[P, R]:
    return _Blocking(method, lambda queue, value: value)


def _job(method: Callable[Concatenate[Queue, P], Awaitable[Job]]
         ) -> _Blocking[P, SyncJob]:
    return _Blocking(method, SyncJob)


def _job_or_none(method: Callable[Concatenate[Queue, P], Awaitable[Job | None]]
                 ) -> _Blocking[P, SyncJob | None]:
    return _Blocking(method, lambda queue, job: None if job is None else SyncJob(queue, job))


def _jobs(method: Callable[Concatenate[Queue, P], Awaitable[list[Job]]]
          ) -> _Blocking[P, list[SyncJob]]:
    return _Blocking(method, lambda queue, jobs: [SyncJob(queue, job) for job in jobs])


class SyncQueue:
    """:class:`~trioqueue.client.Queue`'s producer and query methods, blocking: the
    same names, parameters, results (jobs as :class:`SyncJob`) and exceptions; see
    each one's documentation there. Get one from :meth:`SyncConnection.queue`."""

    def __init__(self, name: str, connection: SyncConnection) -> None:
        self.name = name
        self.connection = connection
        # A Queue only validates its name and keeps the Connection; its methods run
        # on the loop (through ``connection.run``), never in the calling thread.
        self.async_queue = Queue(name, connection.connection)

    def __repr__(self) -> str:
        return f"<SyncQueue {self.name}>"

    # adding
    add = _job(Queue.add)
    add_bulk = _jobs(Queue.add_bulk)
    # reads
    get_job = _job_or_none(Queue.get_job)
    get_job_by_custom_id = _job_or_none(Queue.get_job_by_custom_id)
    get_jobs = _jobs(Queue.get_jobs)
    get_job_state = _plain(Queue.get_job_state)
    get_job_counts = _plain(Queue.get_job_counts)
    get_counts_per_priority = _plain(Queue.get_counts_per_priority)
    count = _plain(Queue.count)
    get_result = _plain(Queue.get_result)
    get_progress = _plain(Queue.get_progress)
    get_job_logs = _plain(Queue.get_job_logs)
    get_children_values = _plain(Queue.get_children_values)
    get_failed_children_values = _plain(Queue.get_failed_children_values)
    get_ignored_children_failures = _plain(Queue.get_ignored_children_failures)
    get_job_dependencies = _plain(Queue.get_job_dependencies)
    get_dependencies = _plain(Queue.get_dependencies)
    get_dependencies_count = _plain(Queue.get_dependencies_count)
    get_deduplication_job_id = _plain(Queue.get_deduplication_job_id)
    remove_deduplication_key = _plain(Queue.remove_deduplication_key)
    remove_job_deduplication_key = _plain(Queue.remove_job_deduplication_key)
    # the dead-letter queue
    get_dlq = _Blocking(Queue.get_dlq, lambda queue, entries: [
        replace(entry, job=SyncJob(queue, entry.job)) for entry in entries])
    get_dlq_stats = _plain(Queue.get_dlq_stats)
    retry_dlq = _plain(Queue.retry_dlq)
    purge_dlq = _plain(Queue.purge_dlq)
    remove_dlq_job = _plain(Queue.remove_dlq_job)
    retry_completed = _plain(Queue.retry_completed)
    set_dlq_config = _plain(Queue.set_dlq_config)
    get_dlq_config = _plain(Queue.get_dlq_config)
    # webhooks (the broker's)
    add_webhook = _plain(Queue.add_webhook)
    remove_webhook = _plain(Queue.remove_webhook)
    list_webhooks = _plain(Queue.list_webhooks)
    set_webhook_enabled = _plain(Queue.set_webhook_enabled)
    # progress, logs, job changes
    update_job_progress = _plain(Queue.update_job_progress)
    add_job_log = _plain(Queue.add_job_log)
    clear_job_logs = _plain(Queue.clear_job_logs)
    update_job_data = _plain(Queue.update_job_data)
    change_job_priority = _plain(Queue.change_job_priority)
    remove = _plain(Queue.remove)
    retry_job = _plain(Queue.retry_job)
    promote_job = _plain(Queue.promote_job)
    promote_jobs = _plain(Queue.promote_jobs)
    # control
    pause = _plain(Queue.pause)
    resume = _plain(Queue.resume)
    is_paused = _plain(Queue.is_paused)
    drain = _plain(Queue.drain)
    obliterate = _plain(Queue.obliterate)
    # queue-wide limits
    set_global_rate_limit = _plain(Queue.set_global_rate_limit)
    remove_global_rate_limit = _plain(Queue.remove_global_rate_limit)
    get_global_rate_limit = _plain(Queue.get_global_rate_limit)
    get_rate_limit_ttl = _plain(Queue.get_rate_limit_ttl)
    set_global_concurrency = _plain(Queue.set_global_concurrency)
    remove_global_concurrency = _plain(Queue.remove_global_concurrency)
    get_global_concurrency = _plain(Queue.get_global_concurrency)
    is_maxed = _plain(Queue.is_maxed)
    # job schedulers (cron)
    upsert_job_scheduler = _plain(Queue.upsert_job_scheduler)
    get_job_scheduler = _plain(Queue.get_job_scheduler)
    get_job_schedulers = _plain(Queue.get_job_schedulers)
    remove_job_scheduler = _plain(Queue.remove_job_scheduler)
    # job groups
    get_group_jobs_count = _plain(Queue.get_group_jobs_count)
    get_groups_jobs_count = _plain(Queue.get_groups_jobs_count)
    get_group_active_count = _plain(Queue.get_group_active_count)
    set_group_concurrency = _plain(Queue.set_group_concurrency)
    get_group_concurrency = _plain(Queue.get_group_concurrency)
    remove_group_concurrency = _plain(Queue.remove_group_concurrency)
    set_group_rate_limit = _plain(Queue.set_group_rate_limit)
    get_group_rate_limit = _plain(Queue.get_group_rate_limit)
    remove_group_rate_limit = _plain(Queue.remove_group_rate_limit)
    get_group_rate_limit_ttl = _plain(Queue.get_group_rate_limit_ttl)
    rate_limit_group = _plain(Queue.rate_limit_group)
    pause_group = _plain(Queue.pause_group)
    resume_group = _plain(Queue.resume_group)
    is_group_paused = _plain(Queue.is_group_paused)
    # maintenance
    clean = _plain(Queue.clean)
    get_queues = _plain(Queue.get_queues)
    list_queues = _plain(Queue.list_queues)
    trim_events = _plain(Queue.trim_events)
    compact_memory = _plain(Queue.compact_memory)

    def wait_job_until_finished(self, job_id: str, ttl: float | None = 30.0) -> Any:
        """The job's result once it completes; blocks this thread (only), for at most
        ``ttl`` seconds (0 or None: no limit). Raises as
        :meth:`trioqueue.client.Queue.wait_job_until_finished` does
        (:class:`~trioqueue.client.JobFailed`, :class:`~trioqueue.client.WaitTimeout`,
        :class:`~trioqueue.client.JobNotFound`). Without ``queue_events``: the async
        QueueEvents belongs in a trio program."""
        return self.connection.run(self.async_queue.wait_job_until_finished, job_id,
                                   None, ttl)
