"""The TCP listener: accepts connections, refuses those past ``max_connections`` or past
their address's cap (:mod:`..doors`), and serves each as a :class:`~.connection.TcpConnection`."""

from __future__ import annotations

from typing import Any

import trio

from ..context import ListenerContext
from ..doors import client_address, too_many_from_address
from ..limits import Shell, too_many_connections
from ..wire.codec import MSGPACK, encode_frames
from .connection import DISCARD_ON_CLOSE_BYTES, TcpConnection
from .sockio import discard_unread, write_now


async def _refuse(stream: trio.SocketStream, error: str) -> None:
    """Past ``max_connections`` (or the address's cap): one error frame (msgpack,
    bunqueue's codec), then close."""
    fd = stream.socket.fileno()
    refusal = {"ok": False, "error": error}
    write_now(fd, encode_frames(MSGPACK, [refusal]))
    discard_unread(fd, DISCARD_ON_CLOSE_BYTES)
    await stream.aclose()


async def serve_tcp(
    context: ListenerContext,
    host: str,
    port: int,
    *,
    shell: Shell | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections until cancelled.

    Connections run in ``handler_nursery`` when given, so that cancelling the accept
    loop (the first step of shutdown) does not cut the connections that are still
    waiting for the replies of commands already accepted. ``shell`` is shared with the
    WebSocket listener; without one, a shell of this listener's own is made (and its
    timers run here).
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    limit = context.connection_slots

    async def serve(shell: Shell) -> None:
        doors = shell.doors

        async def handler(stream: trio.SocketStream) -> None:
            address = client_address(stream.socket)
            if not doors.enter(address):
                await _refuse(stream, too_many_from_address(doors.per_address))
                return
            try:
                if not await doors.slot(limit):
                    shell.refusals.note("TCP")
                    await _refuse(stream, too_many_connections(shell.limits.max_connections))
                    return
                client_id = context.open_connections.open("tcp")
                try:
                    await TcpConnection(context.session_host, stream, shell).serve()
                finally:
                    context.open_connections.close("tcp", client_id)
                    limit.release()
            finally:
                doors.leave(address)

        task_status.started(listeners)
        await trio.serve_listeners(handler, listeners, handler_nursery=handler_nursery)

    if shell is not None:
        await serve(shell)
        return
    own = Shell(context.config)
    async with trio.open_nursery() as nursery:
        await nursery.start(own.timers.run)
        await serve(own)
