"""A map of many keys in a large frame, made and let go of without one long step of the
event loop: sized beforehand from its header's count (core/presized.py), its keys not
interned by msgpack (large/msgpack_steps.py), and, refused, its values taken apart a slice at
a time (core/large_values/graveyard.py) rather than freed in one call; with the broker's own garbage
collector settings, its passes of every generation (server/gc_passes.py) running meanwhile.

Steps are measured in the broker's thread CPU time, per task, leaving out the test's own
task (it encodes the frame and decodes the reply), as in test_large_data_steps.py.
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep

from .large_data import NO_PIECES, NO_PRESIZED, held_to

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms), a map's table made (2-6 ms for
#: a million keys) or a pass of the collector over what was made since the last one.
#: Before: 12-14 ms for 600,000 keys, 14-27 ms for a million, each a resize of a dict,
#: and the refused map freed in one call at the next full collection.
STEP_CPU_MS = 10.0


pytestmark = pytest.mark.usefixtures("served_gc")  # (tests/conftest.py)


@pytest.fixture
async def served(start_server: StartServer, nursery: trio.Nursery) -> AsyncIterator[Server]:
    """A broker as ``serve`` runs it for the collector: what was loaded before frozen,
    and its passes of every generation running beside it (their steps are counted)."""
    server = await start_server(ws_max_message_bytes=64 << 20)
    gc.collect()
    gc.freeze()
    config = Config()
    server.collections.interval_s = config.gc_full_interval_s
    server.collections.after_objects = config.gc_full_after_young_objects
    nursery.start_soon(server.collections.run)
    try:
        yield server
    finally:
        server.collections.close()
        gc.unfreeze()


async def _longest_step(client: RawClient, frame: bytes, server: Server
                        ) -> tuple[dict[str, Any], LongestStep]:
    """The reply to ``frame`` (made beforehand), then until the broker has taken
    apart what it let go of; the longest step meanwhile."""
    steps = LongestStep(skip=trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        await client.send_raw(frame)
        with trio.fail_after(60):
            reply: dict[str, Any] = await client.receive()
            graveyard = server.broker.dismantler.graveyard
            while graveyard.pending:
                await trio.sleep(0.01)
    finally:
        trio.lowlevel.remove_instrument(steps)
    return reply, steps


@pytest.mark.parametrize("codec", ["msgpack", pytest.param("cbor", marks=pytest.mark.slow)])
async def test_a_push_of_a_map_of_600k_keys_holds_no_long_step(
        served: Server, codec: str) -> None:
    client = await RawClient.connect(served.tcp_port, codec)
    data = {str(i): i for i in range(600_000)}
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "p"})

    # up to three pushes: a step of the shared host's (or of this long-lived test
    # process's) own, seen in whole-suite runs only, is not the broker's; a push whose
    # map grew by resizes fails every time
    for _ in range(3):
        reply, steps = await _longest_step(client, frame, served)
        assert reply["ok"] is True, reply
        if steps.worst_ms < STEP_CPU_MS:
            break
    got = await client.ok("GetJob", id=reply["id"])
    assert got["job"]["data"] == data
    await client.aclose()
    held_to(steps, f"PUSH of 600,000 keys ({codec})", STEP_CPU_MS, NO_PRESIZED)


@pytest.mark.parametrize("codec", ["msgpack", pytest.param("cbor", marks=pytest.mark.slow)])
async def test_a_refused_push_of_a_map_of_a_million_keys_holds_no_long_step(
        served: Server, codec: str) -> None:
    client = await RawClient.connect(served.tcp_port, codec)
    # 11M characters of JSON: decoded, measured in slices, then refused
    data = {str(i): 0 for i in range(1_000_000)}
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "big"})
    del data
    graveyard = served.broker.dismantler.graveyard
    freed = graveyard.freed

    reply, steps = await _longest_step(client, frame, served)
    assert reply["ok"] is False and "too large" in reply["error"], reply
    assert reply["reqId"] == "big"
    assert graveyard.freed > freed  # taken apart in slices, not freed in one call
    assert (await client.ok("Ping"))["ok"] is True  # the connection goes on
    await client.aclose()
    held_to(steps, f"refused PUSH of a million keys ({codec})", STEP_CPU_MS, NO_PRESIZED)


async def test_a_malformed_large_frame_leaves_what_it_made_to_the_graveyard(
        served: Server) -> None:
    client = await RawClient.connect(served.tcp_port, "msgpack")
    frame = bytearray(client.frame({"cmd": "PUSH", "queue": "q", "reqId": "bad",
                                    "data": {"rows": list(range(300_000)), "end": 1}}))
    frame[-3:] = b"\xc1\xc1\xc1"  # (0xc1: never used) in place of the last entry
    graveyard = served.broker.dismantler.graveyard
    freed = graveyard.freed

    reply, steps = await _longest_step(client, bytes(frame), served)
    assert reply["ok"] is False and "Invalid command format" in reply["error"], reply
    steps.check("malformed large frame", STEP_CPU_MS)
    assert graveyard.freed > freed
    await client.aclose()


# ------------------------------------------------------------------------------ JSON
# A REST body or a WebSocket text message: an object has no count ahead (its members
# are counted from the text before it is made), and what a refused text made is taken
# apart as a refused frame's is.


def _push_text(transport: str, fields: str) -> str:
    """The JSON text of a PUSH to queue ``q`` of ``fields`` (an object's text): a REST
    body, or a WebSocket command."""
    if transport == "rest":
        return fields
    return '{"cmd":"PUSH","queue":"q",' + fields[1:]


async def _json_reply(server: Server, transport: str, text: str
                      ) -> tuple[dict[str, Any], LongestStep]:
    """The reply to ``text`` (made beforehand) sent over ``transport``, once the broker
    has taken apart what it let go of; the longest step meanwhile (the test's own task
    left out)."""
    base = f"127.0.0.1:{server.ws_port}"
    graveyard = server.broker.dismantler.graveyard
    async with httpx.AsyncClient(base_url=f"http://{base}", timeout=60.0) as http, \
            open_websocket_url(f"ws://{base}/ws", max_message_size=64 << 20) as ws:
        steps = LongestStep(skip=trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(steps)
        try:
            with trio.fail_after(60):
                if transport == "rest":
                    answer = await http.post("/queues/q/jobs", content=text, headers={
                        "content-type": "application/json"})
                    reply: dict[str, Any] = answer.json()
                    # (a refusal is the command's: 400, with its text)
                    assert answer.status_code == (200 if reply["ok"] else 400), reply
                else:
                    await ws.send_message(text)
                    reply = json.loads(await ws.get_message())
                while graveyard.pending:
                    await trio.sleep(0.01)
        finally:
            trio.lowlevel.remove_instrument(steps)
    return reply, steps


@pytest.fixture(params=["rest", "websocket"])
def json_transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# each transport and each layout once by default; the other two pairs under -m slow
@pytest.mark.parametrize(("json_transport", "indent"), [
    ("rest", None), ("websocket", 2),
    pytest.param("rest", 2, marks=pytest.mark.slow),
    pytest.param("websocket", None, marks=pytest.mark.slow)],
    ids=["rest-compact", "websocket-indented", "rest-indented", "websocket-compact"])
async def test_a_json_push_of_an_object_of_700k_keys_holds_no_long_step(
        served: Server, json_transport: str, indent: int | None) -> None:
    # (700,000 keys: a dict grown to them copies 700,000 entries at its last resize)
    # compact, as JSON.stringify writes it: 7.6M characters, bounded by its text;
    # indented: 11.8M, over the data limit by its text, so its data is measured exactly
    data = {str(i): 0 for i in range(700_000)}
    text = _push_text(json_transport, json.dumps(
        {"data": data, "reqId": "p"}, indent=indent,
        separators=(",", ":") if indent is None else None))

    reply, steps = await _json_reply(served, json_transport, text)
    assert reply["ok"] is True, reply
    client = await RawClient.connect(served.tcp_port)
    got = await client.ok("GetJob", id=reply["id"])
    assert got["job"]["data"] == data
    await client.aclose()
    held_to(steps, f"JSON PUSH of 700,000 keys ({json_transport}, indent {indent})",
            STEP_CPU_MS, NO_PRESIZED)


@pytest.mark.parametrize("json_transport", [
    "websocket", pytest.param("rest", marks=pytest.mark.slow)])
async def test_a_refused_json_push_of_a_million_keys_holds_no_long_step(
        served: Server, json_transport: str) -> None:
    # 11M characters of JSON: over the data limit
    text = _push_text(json_transport, json.dumps(
        {"data": {str(i): 0 for i in range(1_000_000)}, "reqId": "big"}))
    graveyard = served.broker.dismantler.graveyard
    freed = graveyard.freed

    reply, steps = await _json_reply(served, json_transport, text)
    assert reply["ok"] is False and reply["error"] == "Job data too large (max 10MB)", reply
    if json_transport == "websocket":
        assert reply["reqId"] == "big"
    assert graveyard.freed > freed  # taken apart in slices, not freed in one call
    held_to(steps, f"refused JSON PUSH of a million keys ({json_transport})", STEP_CPU_MS,
            NO_PRESIZED)


async def test_a_malformed_large_json_text_leaves_what_it_made_to_the_graveyard(
        served: Server, json_transport: str) -> None:
    # the object is made, then a member without its value ends the text
    text = _push_text(json_transport, json.dumps(
        {"data": {str(i): i for i in range(300_000)}})[:-1] + ', "reqId": }')
    graveyard = served.broker.dismantler.graveyard
    freed = graveyard.freed

    reply, steps = await _json_reply(served, json_transport, text)
    assert reply["ok"] is False, reply
    steps.check(f"malformed JSON text ({json_transport})", STEP_CPU_MS)
    assert graveyard.freed > freed


async def test_a_rest_body_of_60_mib_is_joined_in_slices(served: Server) -> None:
    # (its pieces joined in one call held the loop 32-35 ms)
    text = json.dumps({"data": ["x" * 1000] * 60_000})

    reply, steps = await _json_reply(served, "rest", text)
    assert reply["ok"] is False and "too large" in reply["error"], reply
    held_to(steps, "REST body of 60 MiB", STEP_CPU_MS, NO_PIECES)
