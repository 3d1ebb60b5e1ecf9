"""A long reply is encoded in slices, to the same bytes (transport/large/reply_slices.py), and
a large PULLB leases in slices (core/queue/slices.py): other clients are served
meanwhile."""

from __future__ import annotations

import math
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from trio_websocket import open_websocket_url

from trioqueue.core.queue import slices
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport.large import reply_slices
from trioqueue.transport.large.reply_slices import (
    SlicedFrame,
    SlicedJson,
    SlicedPayload,
    array_header,
    map_header,
)
from trioqueue.transport.tcp.send_queue import SendQueue
from trioqueue.transport.wire.codec import CBOR, JSON, MSGPACK, Codec, encode_frames

StartServer = Callable[..., Awaitable[Server]]
CODECS = [CBOR, MSGPACK]
# Around every width change of both codecs' headers.
SIZES = [0, 1, 15, 16, 23, 24, 255, 256, 65_535, 65_536]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("n", SIZES)
def test_headers_are_what_the_codec_writes(codec: Codec, n: int) -> None:
    items = list(range(n))
    whole = codec.encode(items)
    assert whole == array_header(codec, n) + b"".join(codec.encode(i) for i in items)
    mapping = {str(i): i for i in items}
    assert codec.encode(mapping) == map_header(codec, n) + b"".join(
        codec.encode(k) + codec.encode(v) for k, v in mapping.items())


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
# A few distinct job maps, repeated to a long list (hypothesis draws little data).
job_pool = st.lists(st.dictionaries(st.sampled_from(["id", "data", "createdAt"]), values),
                    min_size=1, max_size=4)
lengths = st.integers(reply_slices.LONG_LIST_ITEMS + 1,
                      reply_slices.LONG_LIST_ITEMS + 2 * reply_slices.SLICE_ITEMS)


@settings(max_examples=40, deadline=None)
@given(pool=job_pool, n=lengths,
       before=st.dictionaries(st.sampled_from(["ok", "a"]), values),
       after=st.dictionaries(st.sampled_from(["reqId", "tokens"]), values))
def test_a_long_reply_in_slices_is_what_encoding_it_at_once_gives(
    pool: list[dict[str, Any]], n: int, before: dict[str, Any], after: dict[str, Any],
) -> None:
    # TCP frames (both codecs), WebSocket binary payloads (both) and JSON text.
    items = [pool[i % len(pool)] for i in range(n)]
    reply = {**before, "jobs": items, **after}
    assert reply_slices.is_long(reply)
    sliced: list[Any] = ([SlicedFrame(c, reply) for c in CODECS]
                         + [SlicedPayload(c, reply) for c in CODECS] + [SlicedJson(reply)])
    wholes: list[Any] = ([encode_frames(c, [reply]) for c in CODECS]
                         + [c.encode(reply) for c in CODECS] + [JSON.encode_text(reply)])
    for message, whole in zip(sliced, wholes, strict=True):
        steps = 1
        while (out := message.step()) is None:
            steps += 1
        if isinstance(message, SlicedFrame):  # then the frame's other pieces
            pieces = [out]
            while not message.sent:
                piece = message.step()
                assert piece is not None
                pieces.append(piece)
            # a piece per slice of jobs
            assert len(pieces) == math.ceil(len(items) / reply_slices.SLICE_ITEMS)
            out = b"".join(pieces)
        assert out == whole
        assert steps == math.ceil(len(items) / reply_slices.SLICE_ITEMS)


def test_what_queues_behind_a_long_reply_goes_after_it() -> None:
    reply = {"jobs": [{"i": i} for i in range(reply_slices.LONG_LIST_ITEMS + 1)]}
    queue = SendQueue()
    queue.push(b"first")
    queue.push(SlicedFrame(CBOR, reply))
    queue.push(b"last")
    head = queue.bytes - len(b"first") - len(b"last")
    # the long one, counted whole before it is encoded: its jobs' maps cost more than
    # their bytes here, and are counted so
    assert head >= len(encode_frames(CBOR, [reply]))
    sent = []
    while queue.chunks:
        chunk = queue.next_chunk()
        if chunk is not None:
            sent.append(bytes(chunk))
    # the long frame a piece per slice, the small reply behind it joined to its last
    pieces = math.ceil(len(reply["jobs"]) / reply_slices.SLICE_ITEMS)
    assert len(sent) == 1 + pieces
    assert sent[0] == b"first"
    assert b"".join(sent[1:]) == encode_frames(CBOR, [reply]) + b"last"
    assert queue.bytes == 0


def test_a_long_reply_is_counted_whole_before_it_is_encoded() -> None:
    """A client that reads nothing never takes the first piece of a long reply: its
    bytes must count from the moment it is queued, before the sender encodes it (which
    it does only when it comes to it), not once it is whole or given. Until then each
    job is counted as the first one encoded, then exactly."""
    reply = {"jobs": [{"i": "x" * 1000} for i in range(3 * reply_slices.SLICE_ITEMS)]}
    frame = encode_frames(CBOR, [reply])
    queue = SendQueue()
    queue.push(SlicedFrame(CBOR, reply))
    counted = [queue.bytes]
    while (first := queue.next_chunk()) is None:
        counted.append(queue.bytes)
    assert len(counted) == 3
    assert all(len(frame) - 16 <= c <= len(frame) + 16 for c in counted)
    assert queue.bytes + len(first) == len(frame)  # whole: exactly what is left to give


def test_a_long_reply_is_counted_at_least_as_its_jobs_maps() -> None:
    """Jobs with little data hold more memory as maps than as encoded bytes: a long
    reply not yet encoded is counted for what its maps hold."""
    reply = {"jobs": [{str(k): k for k in range(40)} for _ in range(3 * reply_slices.SLICE_ITEMS)]}
    queue = SendQueue()
    queue.push(SlicedFrame(CBOR, reply))
    assert queue.bytes >= sum(map(sys.getsizeof, reply["jobs"]))
    assert queue.bytes > len(encode_frames(CBOR, [reply]))


def test_a_long_frame_begun_on_the_wire_is_finished_when_the_unsent_are_dropped() -> None:
    reply = {"jobs": [{"i": i} for i in range(3 * reply_slices.SLICE_ITEMS)]}
    frame = encode_frames(CBOR, [reply])
    queue = SendQueue()
    queue.push(SlicedFrame(CBOR, reply))
    queue.push(b"dropped")
    while (first := queue.next_chunk()) is None:
        pass
    assert queue.bytes == len(frame) - len(first) + len(b"dropped")  # counted once encoded
    queue.drop_unsent()
    assert queue.bytes == len(frame) - len(first)
    rest = []
    while queue.chunks:
        chunk = queue.next_chunk()
        assert chunk is not None
        rest.append(bytes(chunk))
    assert bytes(first) + b"".join(rest) == frame  # whole, and nothing after it
    assert queue.bytes == 0


def test_a_long_frame_not_begun_is_dropped_whole() -> None:
    reply = {"jobs": [{"i": i} for i in range(3 * reply_slices.SLICE_ITEMS)]}
    queue = SendQueue()
    queue.push(SlicedFrame(CBOR, reply))
    assert queue.next_chunk() is None  # a slice encoded, nothing given yet
    queue.drop_unsent()
    assert not queue.chunks and queue.bytes == 0


async def connect(server: Server, codec: str) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port, codec)


async def pings_until_reply(worker: RawClient, other: RawClient, req_id: Any
                            ) -> tuple[int, dict[str, Any]]:
    """The round trips ``other`` made while ``worker`` waited for ``req_id``'s reply
    (how often the broker served another client meanwhile), and that reply."""
    round_trips = 0
    with trio.fail_after(30):
        while not worker.ready_now():
            await other.ok("Ping")
            round_trips += 1
    return round_trips, await worker.reply_to(req_id)


@pytest.mark.parametrize("sliced", [True, False], ids=["sliced", "at-once"])
@pytest.mark.parametrize("codec", ["cbor", "msgpack"])
async def test_other_clients_are_served_while_a_large_pullb_is_leased_and_encoded(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, sliced: bool, codec: str,
) -> None:
    # Slices of 10 jobs: a PULLB of 1,000 is 100 lease steps and 100 encode passes, so
    # a client doing round trips meanwhile gets many in (about 100 here); done at once,
    # it gets one or two in (before or after the PULLB's single step, and while the
    # rest of the reply is read), never many.
    lease, encode = (10, 10) if sliced else (10_000, 10_000)
    monkeypatch.setattr(slices, "SLICE_JOBS", lease)
    monkeypatch.setattr(reply_slices, "SLICE_ITEMS", encode)
    monkeypatch.setattr(reply_slices, "LONG_LIST_ITEMS", 200 if sliced else 10_000)
    # No slice budget: the slices go by count alone (with one, the queue's clock would
    # end the "at once" lease early on a slow machine).
    server = await start_server(slice_budget_ms=0)
    worker, other = await connect(server, codec), await connect(server, codec)
    for start in range(0, 1000, 250):
        await worker.ok("PUSHB", queue="big", jobs=[{"name": "n", "data": i}
                                                    for i in range(start, start + 250)])
    await other.ok("Ping")
    req_id = await worker.send("PULLB", queue="big", count=1000, timeout=0, owner="w",
                               lockTtl=60_000)
    round_trips, reply = await pings_until_reply(worker, other, req_id)
    assert reply["ok"] is True, reply
    assert [job["data"] for job in reply["jobs"]] == list(range(1000))
    assert len(set(reply["tokens"])) == 1000
    counts = (await other.ok("GetJobCounts", queue="big"))["counts"]
    assert counts["active"] == 1000 and counts["waiting"] == 0
    if sliced:
        assert round_trips >= 20, round_trips
    else:
        assert round_trips < 10, round_trips
    await worker.aclose()
    await other.aclose()


@pytest.mark.parametrize("sliced", [True, False], ids=["sliced", "at-once"])
async def test_other_clients_are_served_while_a_large_ackb_completes(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, sliced: bool,
) -> None:
    # As for PULLB above: an ACKB of 1,000 in slices of 10 jobs is 100 steps, between
    # which another client's round trips are answered; at once, one step.
    monkeypatch.setattr(slices, "SLICE_JOBS", 10 if sliced else 10_000)
    monkeypatch.setattr(reply_slices, "SLICE_ITEMS", 10_000)
    monkeypatch.setattr(reply_slices, "LONG_LIST_ITEMS", 10_000)
    server = await start_server(slice_budget_ms=0)  # by count alone, as above
    worker, other = await connect(server, "msgpack"), await connect(server, "msgpack")
    for start in range(0, 1000, 250):
        await worker.ok("PUSHB", queue="big", jobs=[{"name": "n", "data": i}
                                                    for i in range(start, start + 250)])
    leased = await worker.ok("PULLB", queue="big", count=1000, timeout=0, owner="w")
    ids = [job["id"] for job in leased["jobs"]]
    await other.ok("Ping")
    req_id = await worker.send("ACKB", ids=ids, tokens=leased["tokens"],
                               results=[{"n": i} for i in range(1000)])
    round_trips, reply = await pings_until_reply(worker, other, req_id)
    assert reply["ok"] is True, reply
    counts = (await other.ok("GetJobCounts", queue="big"))["counts"]
    assert counts["active"] == 0 and counts["completed"] == 1000
    assert (await other.ok("GetResult", id=ids[-1]))["result"] == {"n": 999}
    if sliced:
        assert round_trips >= 20, round_trips
    else:
        assert round_trips < 10, round_trips
    await worker.aclose()
    await other.aclose()


@pytest.mark.parametrize("kind", ["text", "binary"])
async def test_other_clients_are_served_while_a_websocket_pullb_is_encoded(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, kind: str,
) -> None:
    # As the TCP test above, for a WebSocket's JSON text and CBOR binary replies: their
    # sender task encodes a long reply a slice per pass. A client pings the broker until
    # a PULLB of 1,000 jobs has come back over a WebSocket, encoded in 200 slices of 5
    # jobs; the pings answered between the first slice and the last are those the
    # broker served while it encoded. (Counting every ping until the reply arrives, as
    # the TCP test does, is no measure here: the in-process WebSocket client's own
    # reading of the reply lets 900-1,100 through, more than the slices change.)
    monkeypatch.setattr(slices, "SLICE_JOBS", 10_000)  # leased in one step
    monkeypatch.setattr(reply_slices, "SLICE_ITEMS", 5)
    monkeypatch.setattr(reply_slices, "LONG_LIST_ITEMS", 200)
    round_trips = 0
    at_steps: list[int] = []  # round_trips at each slice the broker encodes
    sliced = reply_slices.SlicedJson if kind == "text" else reply_slices.SlicedPayload
    step = sliced.step_parts  # (what the WebSocket sender calls: its parts, not joined)

    def counted_step(self: Any) -> Any:
        at_steps.append(round_trips)
        return step(self)

    monkeypatch.setattr(sliced, "step_parts", counted_step)
    server = await start_server(slice_budget_ms=0)  # (no clock to end that step early)
    other = await connect(server, "cbor")
    codec: Codec = JSON if kind == "text" else CBOR
    for start in range(0, 1000, 250):
        await other.ok("PUSHB", queue="big", jobs=[{"name": "n", "data": i}
                                                   for i in range(start, start + 250)])
    request = {"cmd": "PULLB", "queue": "big", "count": 1000, "timeout": 0,
               "owner": "w", "lockTtl": 60_000, "reqId": "pull"}
    replied = trio.Event()
    reply: dict[str, Any] = {}

    async def await_reply(ws: Any) -> None:
        while True:  # (a WebSocket may get event frames too)
            message = await ws.get_message()
            if isinstance(message, str) != (kind == "text"):
                continue
            decoded = codec.decode(message)
            if decoded.get("reqId") == "pull":
                reply.update(decoded)
                replied.set()
                return

    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=64 << 20) as ws:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(await_reply, ws)
            await other.ok("Ping")
            await ws.send_message(JSON.encode_text(request) if kind == "text"
                                  else CBOR.encode(request))
            with trio.fail_after(30):
                while not replied.is_set():
                    await other.ok("Ping")
                    round_trips += 1
    assert reply["ok"] is True, reply
    assert [job["data"] for job in reply["jobs"]] == list(range(1000))
    assert len(at_steps) == 200, len(at_steps)
    # Encoded in one pass, no ping would be answered between the first slice and the
    # last; a slice per pass lets about one through every other slice.
    assert at_steps[-1] - at_steps[0] >= 50, (at_steps[0], at_steps[-1])
    await other.aclose()
