"""What every client connection does, whatever carries it (TCP frames or WebSocket).

A :class:`Session` turns decoded messages into requests: it answers ``Auth``, ``Hello``
and ``Ping`` itself, refuses bad input with bunqueue's error texts, and hands the rest
to the router as ONE batch per read. Replies come back through :meth:`deliver` in any
order (a parked PULL does not hold up the commands behind it), a batch's replies
together: TCP writes them at once with one write; otherwise (or when the socket is
full) they wait, encoded and bounded in bytes, for the sender task.

At most ``max_inflight_per_connection`` commands run at once; past that the session
stops taking new frames until replies free a slot, which stops reading the socket and
lets TCP push back on the client.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from ..actors.request import OnReply, Request
from ..config import Config
from ..core.broker_events import broker_event
from ..core.commands.registry import SESSION, Command
from ..core.errors import Refused
from ..core.job_data import DATA_TOO_LARGE
from .large.data_sizes import DataTooLarge
from .large.reply_slices import is_long
from .large.value_slices import heavy
from .sent_marks import SentCount
from .wire.codec import DecodeError
from .wire.commands import AFTER_RELAYS, COMMANDS

log = logging.getLogger("trioqueue.session")

_WIRE = COMMANDS.wire  # what a client may send, by name

BAD_FORMAT = "Invalid command format"
_NEVER = 1 << 62  # a frame size no frame reaches (an int: compared with ints)
BAD_COMMAND = "Invalid command"


# What a transport's immediate send did with a group of replies.
SENT = "sent"  # all bytes are on the socket
KEPT = "queued"  # the transport kept (some of) them; the sender task must flush

SendNow = Callable[[list[dict[str, Any]]], str]
# One decoded message: its value (a DecodeError for a bad payload), its frame's size in
# bytes, and an upper bound of its JSON text measured by the transport (or None).
Message = tuple[Any, int, "int | None"]
EventSubscriber = Callable[[list[dict[str, Any]]], None]


class SessionRouter(Protocol):
    """Where a session sends the commands it does not answer itself."""

    async def dispatch(self, routed: list[tuple[Command, Request]]) -> None: ...
    def connection_closed(self, conn: Any, queues: set[str]) -> None: ...
    def holds_jobs(self, conn: Any, queues: set[str]) -> bool: ...
    def announce(self, events: list[dict[str, Any]]) -> None: ...
    # A peer link's clients (ClusterPeer): their stand-ins on this broker.
    def peer_clients(self, broker_id: str) -> PeerClients: ...
    # The cluster as ClusterStatus shows it (None: not in one).
    def cluster_status(self) -> dict[str, Any] | None: ...


class PeerClients(Protocol):
    """The stand-ins of a peer link's clients (the router's, actors/stand_ins.py)."""

    def conn_of(self, session: Any, msg: dict[str, Any]) -> Any: ...
    def hold_jobs(self, router: Any) -> bool: ...


class EventSource(Protocol):  # (the broker's EventHub, actors/events.py)
    def subscribe(self, subscriber: EventSubscriber, *, stream: bool = False) -> None: ...
    def unsubscribe(self, subscriber: EventSubscriber) -> None: ...
    def when_relayed(self, done: Callable[[], None]) -> bool: ...


class AheadWrites(Protocol):
    """Writes a PUSH's large data (a long string, or many values) to the store before
    the command runs (actors/ahead_writes.py)."""

    @property
    def min_chars(self) -> int: ...
    def data_of(self, request: Request) -> Any: ...
    async def write(self, request: Request, data: Any) -> bool: ...


class LargeValues(Protocol):
    """Makes an ACK's result or a progress of many values ready before the command
    runs, a slice at a time (actors/large_values.py)."""

    @property
    def min_chars(self) -> int: ...
    def value_of(self, request: Request) -> Any: ...
    async def prepare(self, request: Request, value: Any) -> None: ...


class SessionHost(Protocol):
    """What a session needs of the broker: its config, its router, its events, its
    writer of long data ahead (None: the store takes none) and its maker of large
    values ready (None: none)."""

    @property
    def config(self) -> Config: ...
    @property
    def router(self) -> SessionRouter: ...
    @property
    def events(self) -> EventSource: ...
    @property
    def ahead(self) -> AheadWrites | None: ...
    @property
    def large_values(self) -> LargeValues | None: ...


OVERFLOW_NOTICE = "Too slow: unread replies and events passed max_write_queue_bytes"


def overflow_notice(limit_bytes: int) -> dict[str, Any]:
    """The last frame a client that fell too far behind gets before it is cut."""
    return {"type": "event", "event": {"eventType": "overflow", "error": OVERFLOW_NOTICE,
                                       "limitBytes": limit_bytes}}


class Session:
    def __init__(
        self,
        broker: SessionHost,
        send_now: SendNow | None = None,
        encode: Callable[[Any, dict[str, Any]], Any] | None = None,
        on_overflow: Callable[[], None] | None = None,
        on_outbox_bytes: Callable[[int], None] | None = None,
        encode_later: Callable[[Any, dict[str, Any]], Any] | None = None,
    ) -> None:
        self.config = broker.config
        self.router = broker.router
        self.events = broker.events
        self._ahead = broker.ahead
        # the smallest frame that may carry data to write ahead (never, without one)
        self._ahead_min = _NEVER if self._ahead is None else self._ahead.min_chars
        self._values = broker.large_values
        # the smallest frame whose command may need work first (either of the two)
        self._first_min = min(self._ahead_min, _NEVER if self._values is None
                              else self._values.min_chars)
        # a frame at least this large refused for too much job data counts as a bad
        # frame (read_pacing): a flood of them would otherwise cost the broker their
        # sliced decoding at full rate (docs/guarantees.md, "Hostile clients")
        self._large_min = broker.config.large_frame_bytes or _NEVER
        self.authenticated = not broker.config.auth_tokens
        # Which transport carries it, as the dashboard's auth:failed tells it.
        self.transport = "tcp"
        # In a cluster, when this connection is another broker's peer link (ClusterPeer):
        # that broker's id (its commands are never forwarded on: cluster/routes.py)
        # and the stand-ins of its clients (actors/stand_ins.py).
        self.peer_broker: str | None = None
        self.peer_clients: PeerClients | None = None
        # A transport that can write without blocking (TCP) answers in the same pass of
        # the scheduler as the commit; otherwise replies wait for the sender task.
        self._send_now = send_now
        # Encoded replies waiting for the sender task (transports without send_now, i.e.
        # WebSocket); bounded by max_write_queue_bytes like TCP's unsent bytes. The tag
        # of a reply picks its encoding (WebSocket answers each message in its kind).
        self._encode = encode
        # A long reply (reply_slices.is_long) that waits behind nothing is not encoded
        # here, in the step that released it: ``encode_later`` gives what the sender
        # task encodes a slice per pass (WebSocket; TCP does this in its send_now).
        self._encode_later = encode_later
        self._on_overflow = on_overflow
        self._outbox: list[Any] = []
        self._answers: list[dict[str, Any]] = []  # of the read being handled
        # Frames answered as malformed, unknown or sent before Auth since the transport
        # last looked: it paces such a connection (transport/read_pacing.py).
        self.refused_frames = 0
        self._outbox_bytes = 0
        # The outbox's frames, queued and done with (transport/sent_marks.py: shutdown
        # waits for its notice to leave).
        self.sent = SentCount()
        # Told the bytes this session holds for the sender (queued plus being sent)
        # whenever they change: the broker-wide bound (max_write_queue_total_bytes).
        self._on_outbox_bytes = on_outbox_bytes
        self._sending_bytes = 0
        self.overflowed = False
        self._tagged: dict[Any, _Tagged] = {}
        self._wake = trio.Event()
        self.inflight = 0
        self._slot = trio.Event()
        self.pulled_queues: set[str] = set()
        self.closed = False
        # SubscribeEvents: at most one queue per connection, as in bunqueue; and
        # ClusterEvents, on another broker's events connection.
        self._subscriber: EventSubscriber | None = None
        self._cluster_stream: EventSubscriber | None = None

    # ------------------------------------------------------------------ replies

    def deliver(self, reply: dict[str, Any]) -> None:
        """Send one reply; called by the writer, actors and router."""
        self.deliver_many([reply])

    def deliver_many(self, replies: list[dict[str, Any]], tag: Any = None) -> None:
        """Send replies together (one write when the transport allows it)."""
        self.inflight -= len(replies)
        self._slot.set()
        self.send_frames(replies, tag)

    def send_frames(self, replies: list[dict[str, Any]], tag: Any = None) -> None:
        """Frames out, in order, never interleaved: replies and event frames alike.

        Event frames come here directly: they hold no in-flight slot.
        """
        if self.closed:
            return
        if self._send_now is not None:
            if self._send_now(replies) != SENT:
                self._wake.set()
            return
        encode = self._encode
        assert encode is not None, "a transport without send_now must give encode"
        later = self._encode_later
        limit = self.config.max_write_queue_bytes
        for reply in replies:
            if self.overflowed:
                break  # closing (or cut): nothing more is queued behind the notice
            if later is not None and (not self._outbox and is_long(reply) or heavy(reply)):
                # Nothing waits before it (or it holds so many values that one call
                # encoding it would hold the loop): encoded by the sender when it comes
                # to it, counted whole (its estimate) from now, as on TCP; not against
                # max_write_queue_bytes (one large reply to a reader is no overflow).
                sliced = later(tag, reply)
                self._outbox.append(sliced)
                self.sent.queued += 1
                self._outbox_bytes += sliced.estimate_bytes
                self._report_outbox()
                continue
            message = encode(tag, reply)
            self._outbox.append(message)
            self.sent.queued += 1
            self._outbox_bytes += len(message)
            # Looked at after each reply, not after the batch: a batch of large replies
            # for a client that reads nothing is not all encoded before it is cut.
            if limit and self._outbox_bytes > limit and self._on_overflow is not None:
                # As on TCP: drop what was not read, queue one notice in its place, and
                # let the transport close once it is out (or after overflow_notice_s).
                log.info("closing a connection that does not read its replies")
                self.overflowed = True
                self.sent.settle(len(self._outbox))  # (dropped)
                self.sent.queued += 1
                self._outbox = [encode(tag, overflow_notice(limit))]
                self._outbox_bytes = 0
                self._on_overflow()
            self._report_outbox()  # (the broker-wide budget may cut it here)
        self._wake.set()

    def sending(self, nbytes: int) -> None:
        """What the sender is sending changed by ``nbytes`` (a long reply, once whole:
        its bytes for its estimate): counted against the broker-wide bound until the
        send is done."""
        self._sending_bytes += nbytes
        self._report_outbox()

    def _report_outbox(self) -> None:
        if self._on_outbox_bytes is not None:
            self._on_outbox_bytes(self._outbox_bytes + self._sending_bytes)

    def drop_unsent(self) -> None:
        """Forget every reply and event waiting for the sender; queue nothing more."""
        self.overflowed = True
        self.sent.settle(len(self._outbox))
        self._outbox = []
        self._outbox_bytes = 0

    def flush_soon(self) -> None:
        """Wake the sender task (a transport queued bytes of its own)."""
        self._wake.set()

    def holds_anything(self) -> bool:
        """Whether the idle timeout must spare this connection: a command in flight (a
        parked pull or WaitJob included), an event subscription, or a job delivered
        over it that is still active."""
        if self.inflight > 0 or self._subscriber or self._cluster_stream or (
                self.peer_clients is not None and self.peer_clients.hold_jobs(self.router)):
            return True
        return bool(self.pulled_queues) and self.router.holds_jobs(self, self.pulled_queues)

    @property
    def outbox_pending(self) -> bool:
        return bool(self._outbox)

    def replier_for(self, tag: Any) -> _Tagged:
        """A replier whose replies carry ``tag`` to the sender (see ``_outbox``)."""
        replier = self._tagged.get(tag)
        if replier is None:
            replier = self._tagged[tag] = _Tagged(self, tag)
        return replier

    def _answer(self, replier: Any, reply: dict[str, Any]) -> None:
        """Answer a message of the read being handled; sent with the read's other answers
        (see :meth:`handle`). An answer holds no in-flight slot: it is no work left to
        do, and a read holds at most a read's worth of them."""
        self._answers.append(reply)

    def _refuse(self, replier: Any, reply: dict[str, Any]) -> None:
        """Answer a frame no working client sends (malformed, unknown, before Auth)."""
        self.refused_frames += 1
        self._answers.append(reply)

    def _flush_answers(self, replier: Any) -> None:
        if self._answers:
            answers, self._answers = self._answers, []
            self.inflight += len(answers)  # (deliver_many gives back a slot per reply)
            replier.deliver_many(answers)

    async def run_sender(self, send: Callable[[list[Any]], Awaitable[None]]) -> None:
        """Send what the immediate path could not: all that is waiting, in one go.

        ``send`` gets the waiting replies (maybe none, when the transport only has
        leftover bytes of an immediate send to flush) and may block on a slow client;
        meanwhile new replies queue up behind it, never interleaved.
        """
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            out, self._outbox = self._outbox, []
            self._sending_bytes = self._outbox_bytes
            self._outbox_bytes = 0
            await send(out)
            self.sent.settle(len(out))
            if self._sending_bytes:
                self._sending_bytes = 0
                self._report_outbox()

    # ------------------------------------------------------------------ requests

    async def handle(self, messages: list[Message], tag: Any = None) -> None:
        """Process every message of one read: ``(value, frame bytes, JSON bound or
        None)``, where a value that is a DecodeError marks a bad payload."""
        routed: list[tuple[Command, Request]] = []
        # Another broker's peer link carries many clients' commands: it is bounded by
        # the sender's own in-flight limit, not by one client's.
        limit = (self.config.max_inflight_per_connection if self.peer_broker is None
                 else self.config.peer_max_in_flight)
        first_min = self._first_min
        large_min = self._large_min
        replier: Any = self if tag is None else self.replier_for(tag)
        # The answers given here (bad frames, session commands) leave together, in one
        # write, before anything awaits: a read of 200 malformed frames cost 200 writes.
        for msg, size, bound in messages:
            if self.inflight >= limit:
                self._flush_answers(replier)  # (before anything awaits)
                if routed:
                    await self.router.dispatch(routed)
                    routed = []
                while self.inflight >= limit:
                    self._slot = trio.Event()
                    await self._slot.wait()
            item = self._prepare(msg, size, bound, replier)
            if item is None:
                continue
            if size >= large_min:
                item[1].replier = OnReply(item[1].replier, self._count_oversize)
            # (the frame's size first: a frame too small to carry such data costs
            # one comparison)
            if size >= first_min and (work := self._work_first(item[1], size)) is not None:
                # its large data is written (or made ready) first, a slice at a time;
                # what came before it goes now, so it does not wait for that
                self._flush_answers(replier)
                if routed:
                    await self.router.dispatch(routed)
                    routed = []
                await work
            self.inflight += 1
            routed.append(item)
        self._flush_answers(replier)
        if routed:
            await self.router.dispatch(routed)

    def _work_first(self, request: Request, size: int) -> Awaitable[Any] | None:
        """The work a large frame's command needs before it runs, if any: its job data
        written ahead, or its result or progress of many values made ready."""
        if size >= self._ahead_min and (ahead := self._ahead) is not None and (
                data := ahead.data_of(request)) is not None:
            return ahead.write(request, data)
        if (values := self._values) is not None and size >= values.min_chars and (
                value := values.value_of(request)) is not None:
            return values.prepare(request, value)
        return None

    def _prepare(self, msg: Any, size: int, bound: int | None, replier: Any
                 ) -> tuple[Command, Request] | None:
        if isinstance(msg, DecodeError):
            # a large frame's job data refused for its size while it was decoded
            # (data_sizes.py) gets the core's answer (a refused frame too, as the
            # core's refusal is: _count_oversize)
            error = str(msg) if isinstance(msg, DataTooLarge) else BAD_FORMAT
            refusal: dict[str, Any] = {"ok": False, "error": error}
            if msg.req_id is not None:
                refusal["reqId"] = msg.req_id
            self._refuse(replier, refusal)
            return None
        if not isinstance(msg, dict):
            self._refuse(replier, {"ok": False, "error": BAD_COMMAND})
            return None
        cmd = msg.get("cmd")
        request = Request(cmd if isinstance(cmd, str) else "", msg, replier, conn=self if (
            self.peer_clients is None) else self.peer_clients.conn_of(self, msg),
            frame_bytes=size, json_bound=bound)
        if not isinstance(cmd, str) or not cmd:
            self._refuse(replier, request.error_reply(BAD_COMMAND))
            return None
        command = _WIRE.get(cmd)
        if not self.authenticated and (command is None or not command.before_auth):
            self._refuse(replier, request.error_reply("Not authenticated"))
            return None
        if command is None:
            self._refuse(replier, request.error_reply(f"Unknown command: {cmd}"))
            return None
        if command.route == SESSION:
            assert command.handler is not None  # the registry checked it
            try:
                answer = command.handler(self, msg, replier)
            except Refused as exc:
                self._answer(replier, request.error_reply(exc.message))
                return None
            if answer is not AFTER_RELAYS:
                self._answer(replier, request.reply(answer))
            elif self.events.when_relayed(self._answer_later(request, replier)):
                self._answer(replier, request.reply({}))
            return None
        if command.pull:
            queue = msg.get("queue")
            if isinstance(queue, str):  # (a peer's client's: its stand-in's)
                request.conn.pulled_queues.add(queue)
        return command, request

    def _answer_later(self, request: Request, replier: Any) -> Callable[[], None]:
        """What answers ``request`` once a cluster's relays are up (AFTER_RELAYS)."""
        reply = request.reply({})

        def answer() -> None:
            self.inflight += 1  # (deliver_many gives back a slot per reply)
            replier.deliver_many([reply])

        return answer

    def _count_oversize(self, reply: dict[str, Any]) -> None:
        """A large frame's reply: a refusal for too much job data (PUSH, or a PUSHB's
        ``jobs[i]: ...``) counts as a refused frame (read_pacing)."""
        error = reply.get("error")
        if type(error) is str and error.endswith(DATA_TOO_LARGE):
            self.refused_frames += 1

    # ------------------------------------------------------------------ session commands

    def authenticate(self, token: Any) -> bool:
        """Auth: with no tokens configured every connection is already in."""
        if token_accepted(self.config.auth_tokens, token):
            self.authenticated = True
            return True
        self.router.announce([broker_event("auth:failed", int(time.time() * 1000),
                                           transport=self.transport)])
        return False

    def become_peer(self, broker_id: str) -> None:
        """ClusterPeer: this connection carries another broker's forwarded commands."""
        self.peer_broker = broker_id
        # (kept if sent again)
        self.peer_clients = self.peer_clients or self.router.peer_clients(broker_id)

    def stream_cluster_events(self, replier: Any) -> None:
        """ClusterEvents: the events of this broker's own queues, as SubscribeEvents'
        frames (same path, same byte bound: a peer that falls behind is cut)."""
        if self._cluster_stream is None:
            tag = getattr(replier, "tag", None)
            self._cluster_stream = lambda events: self.send_frames(
                [{"type": "event", "event": e} for e in events], tag)
            self.events.subscribe(self._cluster_stream, stream=True)

    def cluster_status(self) -> dict[str, Any]:
        return {"cluster": self.router.cluster_status()}

    def subscribe(self, queue: str, replier: Any) -> None:
        """Push every event of ``queue`` to this connection as ``{type: "event", event}``.

        Event frames share the reply path (so they never interleave with replies) and
        its byte bound: a subscriber that does not read is cut off like any client
        that does not read its replies; the queues never wait for it.
        """
        self.unsubscribe()
        tag = getattr(replier, "tag", None)

        def on_events(events: list[dict[str, Any]]) -> None:
            # (a dashboard event's type has a colon: those are for WebSocket and SSE)
            frames = [{"type": "event", "event": e} for e in events
                      if e.get("queue") == queue and ":" not in e["eventType"]]
            if frames:
                self.send_frames(frames, tag)

        self._subscriber = on_events
        self.events.subscribe(on_events)

    def unsubscribe(self) -> None:
        if self._subscriber is not None:
            self.events.unsubscribe(self._subscriber)
            self._subscriber = None

    def close(self) -> None:
        """The connection is gone: its parked pulls claim nothing, its jobs go back."""
        if self.closed:
            return
        self.closed = True
        self.sent.close()
        self.unsubscribe()
        if self._cluster_stream is not None:
            self.events.unsubscribe(self._cluster_stream)
        self.router.connection_closed(self, self.pulled_queues)
        # Nothing is sent after the close (send_frames returns at once), so the
        # transport's callbacks and the tagged repliers can go: they are the cycles
        # between a session and its transport (send_now is the transport's bound
        # method), which would otherwise wait for a full collection of the cyclic GC,
        # a pause that grows with every live job (see server/run.py, young_gc).
        self._send_now = None
        self._encode = None
        self._on_overflow = None
        self._on_outbox_bytes = None
        self._tagged.clear()


def token_accepted(tokens: list[str], token: Any) -> bool:
    """Whether ``token`` lets a client in: with no tokens configured every one does;
    otherwise it must be one of ``tokens``, trimmed and compared in constant time (a
    blank or non-string token never matches). Auth on every transport, and HTTP's
    bearer tokens."""
    if not tokens:
        return True
    if not isinstance(token, str) or not token.strip():
        return False
    given = token.strip().encode()
    ok = False
    for expected in tokens:
        if expected.strip() and hmac.compare_digest(given, expected.strip().encode()):
            ok = True
    return ok


class _Tagged:
    """Replies for one kind of message of a session (see :meth:`Session.replier_for`)."""

    __slots__ = ("session", "tag")

    def __init__(self, session: Session, tag: Any) -> None:
        self.session = session
        self.tag = tag

    def deliver(self, reply: dict[str, Any]) -> None:
        self.session.deliver_many([reply], self.tag)

    def deliver_many(self, replies: list[dict[str, Any]]) -> None:
        self.session.deliver_many(replies, self.tag)
