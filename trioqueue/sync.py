"""A synchronous client for producers and queries, for code without an event loop.

Flask views, Django commands, scripts and notebooks add jobs and look at them; they
should not need to learn trio for that::

    import trioqueue.sync

    with trioqueue.sync.connect("127.0.0.1", 6789) as conn:
        emails = conn.queue("emails")
        job = emails.add("send", {"to": "a@b.c"}, attempts=5)
        print(job.id, job.get_state())
        result = emails.wait_job_until_finished(job.id, ttl=30)

Processing jobs (a Worker) and listening to events stay on the async client: they are
long-running loops, and the place for those is a trio program.

**How it works.** :func:`connect` starts ONE background thread that runs ``trio.run``,
opens an ordinary :func:`~trioqueue.client.open_connection` inside that loop, and
hands back the loop's :class:`trio.lowlevel.TrioToken`. Every synchronous call is
``trio.from_thread.run(afn, trio_token=token)``: the async client's own method runs on
the loop, in a task of its own, while the calling thread blocks on the answer. So
there is one implementation of every command (the async one), and:

- **Any number of threads may call at once.** ``from_thread`` is thread-safe; each call
  is a separate task on the loop and the connection pipelines them (a slow
  ``wait_job_until_finished`` in one thread does not hold up an ``add`` in another).
- **Errors are the async client's**, the same exception objects
  (:class:`~trioqueue.client.JobNotFound`, :class:`~trioqueue.client.ValidationError`,
  ...), raised in the calling thread.
- **Results are plain data**, except jobs: a :class:`~trioqueue.client.Job`'s methods
  are coroutines for that loop, useless to a caller here, so a job comes back as a
  :class:`SyncJob` (the same attributes, plus blocking versions of the usual job
  methods). Flows come back as :class:`SyncFlowNode` trees of them.

**Why a thread of our own, and a daemon one.** The loop must outlive any single call
(the connection, its sockets and their reader tasks live in it), and a web server's
request threads come and go. A daemon thread cannot keep the interpreter alive if
someone forgets :meth:`SyncConnection.close`; an ``atexit`` hook closes forgotten
connections before daemon threads are frozen, so that an embedded broker still commits
and shuts down properly at exit.

**Shutdown.** :meth:`SyncConnection.close` (or leaving the ``with`` block) refuses new
calls, sets an event the loop's main task waits on, and joins the thread. The main task
then leaves ``open_connection``, which closes the sockets (and drains an embedded
broker). Calls still in flight at that moment end with
:class:`~trioqueue.client.ConnectionLost` - like any lost connection, an ``add`` caught
that way may or may not have been applied - and then ``trio.run`` returns and the
thread ends: nothing is left running.

**Fail fast.** :func:`connect` sends a ``Ping`` before it returns, so an unreachable
broker (after ``connect_timeout_s`` of retries) or a refused token raises there, not at
the first ``add`` inside a request handler.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import trio

from .client.connection import DEFAULT_PORT, Connection, open_connection
from .client.errors import ConnectionLost, TrioqueueError
from .client.flow import FlowNode, FlowProducer
from .client.job import Job, delay_of
from .client.queue import Queue
from .config import Config

__all__ = ["SyncConnection", "SyncFlowNode", "SyncFlowProducer", "SyncJob", "SyncQueue",
           "connect"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

THREAD_NAME = "trioqueue-sync"


def connect(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
            token: str | None = None, pool_size: int = 4, codec: str = "cbor",
            connect_timeout_s: float = 5.0, embedded: bool = False,
            config: Config | None = None, close_timeout_s: float = 30.0
            ) -> SyncConnection:
    """Connect to a broker (or, ``embedded=True``, run one in this process) and return a
    :class:`SyncConnection`; the arguments are :func:`~trioqueue.client.open_connection`'s.

    Raises what the first contact raises: :class:`~trioqueue.client.ConnectionLost`
    when the broker cannot be reached within ``connect_timeout_s``,
    :class:`~trioqueue.client.AuthenticationError` for a refused token.
    ``close_timeout_s`` bounds how long :meth:`SyncConnection.close` waits for the loop
    thread (an embedded broker commits its last writes then).
    """
    return SyncConnection(
        dict(host=host, port=port, token=token, pool_size=pool_size, codec=codec,
             connect_timeout_s=connect_timeout_s, embedded=embedded, config=config),
        close_timeout_s=close_timeout_s)


class SyncConnection:
    """A connection whose methods block; one trio loop in a thread of its own behind it.

    Use :func:`connect` to get one. Thread-safe: share one per process (a pool of
    ``pool_size`` pipelined sockets is behind it), rather than one per request.
    """

    def __init__(self, connect_args: Mapping[str, Any], *, close_timeout_s: float = 30.0
                 ) -> None:
        self._args = dict(connect_args)
        self.close_timeout_s = close_timeout_s
        self._ready = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._connection: Connection | None = None
        self._startup_error: BaseException | None = None
        self._crash: BaseException | None = None
        self._queues: dict[str, SyncQueue] = {}
        self._thread = threading.Thread(target=self._thread_main, name=THREAD_NAME,
                                        daemon=True)
        self._thread.start()
        self._ready.wait()  # always set: by the loop once connected, or on its way out
        if self._token is None:
            self._thread.join(close_timeout_s)
            error = self._startup_error or ConnectionLost("the client loop did not start")
            raise error
        atexit.register(self.close)

    # ------------------------------------------------------------------ the loop thread

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # the thread's last word: keep it for the caller
            error = _unwrap(exc)
            if self._token is None:
                self._startup_error = error
            else:
                self._crash = error
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with open_connection(**self._args) as conn:
            # Handled here rather than left to propagate: an error raised in the body
            # would come out of open_connection's nursery wrapped in an exception group.
            try:
                await conn.call("Ping")
            except TrioqueueError as exc:
                self._startup_error = exc
                return
            self._connection = conn
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()

    # ------------------------------------------------------------------ calls

    @property
    def connection(self) -> Connection:
        """The async :class:`~trioqueue.client.Connection` inside the loop: only for
        coroutines handed to :meth:`run`."""
        if self._connection is None:
            raise ConnectionLost("connection closed")
        return self._connection

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, afn: Callable[..., Awaitable[R]], *args: Any) -> R:
        """Run ``afn(*args)`` on the connection's loop and block until it returns; its
        result, or its exception raised here.

        Raises :class:`~trioqueue.client.ConnectionLost` once the connection is closed,
        also for a call that was still running when it closed. Calling from a trio
        program raises ``RuntimeError`` (it would block its loop: use the async client
        there).
        """
        token = self._token
        if self._closed or token is None:
            raise ConnectionLost("connection closed")
        try:
            return trio.from_thread.run(afn, *args, trio_token=token)
        except trio.RunFinishedError:
            raise self._lost() from None
        except trio.Cancelled:  # the loop shut down while this call was running
            raise self._lost() from None

    def _lost(self) -> ConnectionLost:
        if self._crash is not None:
            return ConnectionLost(f"the client loop stopped: {self._crash!r}")
        return ConnectionLost("connection closed")

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one raw command (bunqueue's protocol); its reply, or the typed refusal
        raised. See :meth:`trioqueue.client.Connection.call`."""
        return self.run(functools.partial(self.connection.call, cmd, **fields))

    def queue(self, name: str) -> SyncQueue:
        """The queue ``name`` on this connection (one object per name)."""
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues.setdefault(name, SyncQueue(name, self))
        return queue

    def flow_producer(self) -> SyncFlowProducer:
        return SyncFlowProducer(self)

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Close the connection and stop the loop thread; idempotent, thread-safe.

        Waits up to ``close_timeout_s`` for the thread (an embedded broker commits what
        it accepted first); warns if it is still running then.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        token, stop = self._token, self._stop
        if token is not None and stop is not None:
            try:
                # run_sync_soon, not from_thread: it does not wait, so close() works
                # from any thread, even one running a trio loop of its own.
                token.run_sync_soon(stop.set)
            except trio.RunFinishedError:
                pass  # the loop already ended (it crashed): nothing to stop
        if threading.current_thread() is not self._thread:
            self._thread.join(self.close_timeout_s)
            if self._thread.is_alive():
                warnings.warn(f"trioqueue.sync: the client loop thread is still running "
                              f"{self.close_timeout_s} s after close()",
                              RuntimeWarning, stacklevel=2)

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "embedded" if self._args.get("embedded") else (
            f"{self._args.get('host')}:{self._args.get('port')}")
        return f"<SyncConnection {where}{' closed' if self._closed else ''}>"


def _unwrap(exc: BaseException) -> BaseException:
    """The one exception inside (nested) single-exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# ---------------------------------------------------------------------------- jobs


class SyncJob:
    """A job as :class:`~trioqueue.client.Job` describes it (the same attributes, read
    when the job was fetched), with blocking methods instead of coroutines.

    The attributes are a snapshot: :meth:`get_state` and
    :meth:`SyncQueue.get_job` read the job again.
    """

    id: str
    name: str
    data: Any
    queue_name: str
    priority: float
    attempts_made: int
    max_attempts: int
    timestamp: int | None
    run_at: int | None
    processed_on: int | None
    finished_on: int | None
    progress: float
    progress_message: str | None
    stacktrace: list[str] | None
    stalled_counter: int
    custom_id: str | None
    parent_id: str | None
    children_ids: list[str]
    depends_on: list[str]
    tags: list[str]
    group_id: str | None
    unique_key: str | None
    timeline: list[dict[str, Any]]
    state: str | None
    token: str | None
    raw: dict[str, Any]

    def __init__(self, queue: SyncQueue, job: Job) -> None:
        # Every instance attribute of the async Job but its Queue (which belongs to the
        # loop): copied, so that a new Job attribute reaches SyncJob without a change.
        for key, value in vars(job).items():
            if key != "queue":
                setattr(self, key, value)
        self.queue = queue

    @property
    def delay(self) -> int:
        return delay_of(self.run_at, self.timestamp)

    def __repr__(self) -> str:
        return f"<SyncJob {self.id} {self.name!r} in {self.queue_name}>"

    def get_state(self) -> str:
        self.state = self.queue.get_job_state(self.id)
        return self.state

    def get_children_values(self) -> dict[str, Any]:
        return self.queue.get_children_values(self.id)

    def get_dependencies(self, type: str | None = None, start: int = 0, end: int = -1
                         ) -> dict[str, Any]:
        return self.queue.get_dependencies(self.id, type, start, end)

    def get_logs(self, start: int = 0, end: int = -1) -> dict[str, Any]:
        return self.queue.get_job_logs(self.id, start, end)

    def update_progress(self, progress: Any, message: str | None = None) -> None:
        self.queue.update_job_progress(self.id, progress, message)

    def log(self, message: str, level: str = "info") -> None:
        self.queue.add_job_log(self.id, message, level)

    def update_data(self, data: Any) -> None:
        self.queue.update_job_data(self.id, data)
        self.data = data

    def promote(self) -> None:
        self.queue.promote_job(self.id)

    def remove(self) -> None:
        self.queue.remove(self.id)

    def retry(self) -> None:
        self.queue.retry_job(self.id)

    def wait_until_finished(self, ttl: float | None = 30.0) -> Any:
        """The job's result once it completes (see
        :meth:`SyncQueue.wait_job_until_finished`)."""
        return self.queue.wait_job_until_finished(self.id, ttl)


# ---------------------------------------------------------------------------- queues


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

    def wait_job_until_finished(self, job_id: str, ttl: float | None = 30.0) -> Any:
        """The job's result once it completes; blocks this thread (only), for at most
        ``ttl`` seconds (0 or None: no limit). Raises as
        :meth:`trioqueue.client.Queue.wait_job_until_finished` does
        (:class:`~trioqueue.client.JobFailed`, :class:`~trioqueue.client.WaitTimeout`,
        :class:`~trioqueue.client.JobNotFound`). Without ``queue_events``: the async
        QueueEvents belongs in a trio program."""
        return self.connection.run(self.async_queue.wait_job_until_finished, job_id,
                                   None, ttl)


# ---------------------------------------------------------------------------- flows


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
