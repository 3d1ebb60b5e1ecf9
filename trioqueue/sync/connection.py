"""The loop behind a :class:`SyncConnection`: one thread running ``trio.run``, an
ordinary async connection inside it, and blocking calls into it (the contract is in
:mod:`trioqueue.sync`)."""

from __future__ import annotations

import atexit
import functools
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import trio

from ..client.connection import DEFAULT_PORT, Connection, open_connection
from ..client.errors import ConnectionLost, TrioqueueError
from ..config import Config
from .flow import SyncFlowProducer
from .queue import SyncQueue

R = TypeVar("R")

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
