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

**Layout.** :mod:`.connection` (:func:`connect`, :class:`SyncConnection` and its loop
thread), :mod:`.job` (:class:`SyncJob`), :mod:`.queue` (:class:`SyncQueue`, made of the
async Queue's methods) and :mod:`.flow` (:class:`SyncFlowProducer` and its
:class:`SyncFlowNode` trees); everything is imported from ``trioqueue.sync``.
"""

from .connection import THREAD_NAME as THREAD_NAME  # the loop thread's name
from .connection import SyncConnection, connect
from .flow import SyncFlowNode, SyncFlowProducer
from .job import SyncJob
from .queue import SyncQueue

__all__ = ["SyncConnection", "SyncFlowNode", "SyncFlowProducer", "SyncJob", "SyncQueue",
           "connect"]
