"""WebSocket sessions carry the same commands: JSON text or CBOR binary messages."""

from __future__ import annotations

import json

import cbor2
import pytest
from trio_websocket import ConnectionRejected, open_websocket_url

from trioqueue.server import Server


async def test_json_commands_over_websocket(server: Server) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "wsq", "name": "n",
                                          "data": {"a": 1}, "reqId": "1"}))
        pushed = json.loads(await ws.get_message())
        assert pushed["ok"] is True and pushed["reqId"] == "1"
        await ws.send_message(json.dumps({"cmd": "PULL", "queue": "wsq", "owner": "w",
                                          "reqId": "2"}))
        pulled = json.loads(await ws.get_message())
        assert pulled["job"]["id"] == pushed["id"] and pulled["job"]["data"] == {"a": 1}
        await ws.send_message(json.dumps({"cmd": "ACK", "id": pushed["id"],
                                          "token": pulled["token"], "result": 7, "reqId": "3"}))
        assert json.loads(await ws.get_message())["ok"] is True
        await ws.send_message(json.dumps({"cmd": "GetResult", "id": pushed["id"]}))
        assert json.loads(await ws.get_message())["result"] == 7
        await ws.send_message("{not json")
        assert json.loads(await ws.get_message()) == {
            "ok": False, "error": "Invalid command format"}
        await ws.send_message(json.dumps({"cmd": "Nope", "reqId": "4"}))
        assert json.loads(await ws.get_message())["error"] == "Unknown command: Nope"


async def test_cbor_commands_over_websocket(server: Server) -> None:
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(cbor2.dumps({"cmd": "PUSHB", "queue": "wsc", "reqId": 1,
                                           "jobs": [{"name": "a"}, {"name": "b"}]}))
        reply = cbor2.loads(await ws.get_message())
        assert reply["ok"] is True and reply["reqId"] == 1 and len(reply["ids"]) == 2
        await ws.send_message(cbor2.dumps({"cmd": "GetJobCounts", "queue": "wsc"}))
        assert cbor2.loads(await ws.get_message())["counts"]["waiting"] == 2


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
        replies = [await ws.get_message(), await ws.get_message()]
        kinds = {}
        for message in replies:
            if isinstance(message, str):
                kinds[json.loads(message)["reqId"]] = "json"
            else:
                kinds[cbor2.loads(message)["reqId"]] = "cbor"
        assert kinds == {"json-pull": "json", "cbor-push": "cbor"}
