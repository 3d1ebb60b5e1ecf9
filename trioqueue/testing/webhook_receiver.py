"""A tiny HTTP server for webhook tests: records every request, answers as told.

Run in the test's nursery (``receiver = await nursery.start(WebhookReceiver().run)``);
``await receiver.wait_for(n)`` returns once ``n`` requests arrived (an event per
request, no polling). ``statuses`` are the answers of the first requests in order
(then 200); ``hang=True`` reads each request and never answers (a dead receiver).
Built on h11, one connection per task, keep-alive honoured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import h11
import trio


@dataclass
class ReceivedRequest:
    method: str
    target: str
    headers: dict[str, str]  # names in lower case
    body: bytes


class WebhookReceiver:
    def __init__(self, statuses: list[int] | None = None, *, hang: bool = False) -> None:
        self.statuses = list(statuses or [])
        self.hang = hang
        self.requests: list[ReceivedRequest] = []
        self.port = 0
        self._arrived = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1"))
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[ReceivedRequest]:
        with trio.fail_after(timeout_s):
            while len(self.requests) < count:
                await self._arrived.wait()
        return self.requests[:count]

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._read_request(conn, stream)
                if request is None:
                    return
                self.requests.append(request)
                self._arrived.set()
                self._arrived = trio.Event()
                if self.hang:
                    await trio.sleep_forever()
                status = self.statuses.pop(0) if self.statuses else 200
                data = conn.send(h11.Response(status_code=status,
                                              headers=[("content-length", "2")]))
                data += conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage())
                await stream.send_all(data)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            return
        finally:
            await stream.aclose()

    @staticmethod
    async def _read_request(conn: h11.Connection,
                            stream: trio.SocketStream) -> ReceivedRequest | None:
        head: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                chunk = await stream.receive_some(65536)
                conn.receive_data(chunk)
                if not chunk and head is None:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return ReceivedRequest(
                    method=head.method.decode(), target=head.target.decode(),
                    headers={k.decode().lower(): v.decode() for k, v in head.headers},
                    body=body)
            elif isinstance(event, h11.ConnectionClosed):
                return None
