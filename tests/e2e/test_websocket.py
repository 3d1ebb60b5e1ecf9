"""WebSocket sessions carry the same commands: JSON text or CBOR binary messages."""

from __future__ import annotations

import json
from typing import Any

import cbor2
import pytest
from trio_websocket import ConnectionRejected, open_websocket_url

from trioqueue.server.run import Server


async def next_json(ws: Any) -> Any:
    """The next reply, skipping the job events /ws also streams (bunqueue's legacy mode)."""
    while True:
        message = json.loads(await ws.get_message())
        if "eventType" not in message:
            return message


async def next_cbor(ws: Any) -> Any:
    while True:
        message = await ws.get_message()
        if isinstance(message, bytes):  # events are JSON text unless ?format=cbor
            return cbor2.loads(message)


async def test_json_commands_over_websocket(server: Server) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "wsq", "name": "n",
                                          "data": {"a": 1}, "reqId": "1"}))
        pushed = await next_json(ws)
        assert pushed["ok"] is True and pushed["reqId"] == "1"
        await ws.send_message(json.dumps({"cmd": "PULL", "queue": "wsq", "owner": "w",
                                          "reqId": "2"}))
        pulled = await next_json(ws)
        assert pulled["job"]["id"] == pushed["id"] and pulled["job"]["data"] == {"a": 1}
        await ws.send_message(json.dumps({"cmd": "ACK", "id": pushed["id"],
                                          "token": pulled["token"], "result": 7, "reqId": "3"}))
        assert (await next_json(ws))["ok"] is True
        await ws.send_message(json.dumps({"cmd": "GetResult", "id": pushed["id"]}))
        assert (await next_json(ws))["result"] == 7
        await ws.send_message("{not json")
        assert await next_json(ws) == {
            "ok": False, "error": "Invalid command format"}
        await ws.send_message(json.dumps({"cmd": "Nope", "reqId": "4"}))
        assert (await next_json(ws))["error"] == "Unknown command: Nope"


@pytest.mark.parametrize("text", [
    '{"cmd": "PUSH", "queue": "wsr", "data": {"x": NaN}, "reqId": "mine"}',
    '{"cmd": "PUSH", "queue": "wsr", "data": ' + "[" * 100 + "]" * 100 + ', "reqId": "mine"}',
])
async def test_a_refused_json_message_is_answered_on_its_req_id(server: Server, text: str
                                                                 ) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(text)
        reply = await next_json(ws)
        assert reply["ok"] is False and reply["reqId"] == "mine"
        await ws.send_message(json.dumps({"cmd": "Ping", "reqId": "after"}))
        assert (await next_json(ws))["reqId"] == "after"  # the session goes on


async def test_cbor_commands_over_websocket(server: Server) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(cbor2.dumps({"cmd": "PUSHB", "queue": "wsc", "reqId": 1,
                                           "jobs": [{"name": "a"}, {"name": "b"}]}))
        reply = await next_cbor(ws)
        assert reply["ok"] is True and reply["reqId"] == 1 and len(reply["ids"]) == 2
        await ws.send_message(cbor2.dumps({"cmd": "GetJobCounts", "queue": "wsc"}))
        assert (await next_cbor(ws))["counts"]["waiting"] == 2


async def test_websocket_unknown_path_is_rejected(server: Server) -> None:
    with pytest.raises(ConnectionRejected):
        async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/elsewhere"):
            pass


async def test_each_websocket_reply_uses_the_kind_of_its_message(server: Server) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        # a JSON long-poll, answered only after a later CBOR message
        await ws.send_message(json.dumps({"cmd": "PULL", "queue": "mix", "timeout": 5000,
                                          "reqId": "json-pull"}))
        await ws.send_message(cbor2.dumps({"cmd": "PUSH", "queue": "mix", "name": "n",
                                           "reqId": "cbor-push"}))
        kinds: dict[str, str] = {}
        while len(kinds) < 2:
            message = await ws.get_message()
            decoded = json.loads(message) if isinstance(message, str) else cbor2.loads(message)
            if "reqId" in decoded:  # job events (JSON) carry no reqId
                kinds[decoded["reqId"]] = "json" if isinstance(message, str) else "cbor"
        assert kinds == {"json-pull": "json", "cbor-push": "cbor"}


async def test_websocket_events_legacy_and_subscribed(server: Server) -> None:
    base = f"ws://127.0.0.1:{server.ws_port}"
    async with open_websocket_url(f"{base}/ws/queues/live") as ws, \
            open_websocket_url(f"{base}/ws/queues/live?format=cbor") as binary:
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "other", "name": "n"}))
        assert (await next_json(ws))["ok"] is True  # another queue: no event for it
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "live", "name": "n",
                                          "reqId": "p"}))
        pushed = await next_json(ws)
        raw = json.loads(await ws.get_message())  # legacy mode: the raw job event
        assert raw["eventType"] == "pushed" and raw["jobId"] == pushed["id"]
        as_cbor = cbor2.loads(await binary.get_message())
        assert as_cbor["eventType"] == "pushed" and as_cbor["queue"] == "live"

        bad = {"cmd": "Subscribe", "events": ["job:completed", "nope"], "reqId": 1}
        await ws.send_message(json.dumps(bad))
        assert json.loads(await ws.get_message()) == {
            "ok": False, "error": "Invalid: nope", "reqId": 1}
        await ws.send_message(json.dumps({"cmd": "Subscribe", "events": ["job:completed"],
                                          "reqId": 2}))
        assert json.loads(await ws.get_message()) == {
            "ok": True, "subscribed": ["job:completed"], "reqId": 2}
        for cmd in ({"cmd": "PULL", "queue": "live"}, {"cmd": "ACK", "id": pushed["id"],
                                                        "result": 9}):
            await ws.send_message(json.dumps(cmd))
            assert json.loads(await ws.get_message())["ok"] is True
        event = json.loads(await ws.get_message())  # only the matching event, new shape
        assert event["event"] == "job:completed" and event["data"]["jobId"] == pushed["id"]
        assert event["data"]["data"] == 9 and isinstance(event["ts"], float)


async def test_websocket_queue_path_must_name_a_valid_queue(server: Server) -> None:
    with pytest.raises(ConnectionRejected):
        async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws/queues/bad!name"):
            pass
