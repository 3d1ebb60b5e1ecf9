"""Broker-wide reads across a cluster (cluster/fanout.py): the read forwarded to
every other live broker, their answers merged with this broker's own, a broker that
does not answer within the bound left out and named. Peer links are a fake here that
records what is forwarded; tests/e2e/test_cluster_reads.py runs three real brokers.
Time is trio's MockClock (autojump): the bound passes when every task waits."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trioqueue.actors.request import Request
from trioqueue.cluster.fanout import ClusterReads

TIMEOUT_S = 2.0


class Members:
    def __init__(self, me: str, live: dict[str, str]) -> None:
        self.broker_id = me
        self.live = live


class Links:
    """The peer links as the fan-out uses them: requests by address, answered by hand."""

    def __init__(self) -> None:
        self.sent: dict[str, list[Request]] = {}

    def forward(self, address: str, reqs: list[Request]) -> None:
        self.sent.setdefault(address, []).extend(reqs)

    def answer(self, address: str, reply: dict[str, Any]) -> None:
        [req] = self.sent[address]
        req.replier.deliver(req.reply(reply) if "ok" not in reply else reply)


class Client:
    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []

    def deliver(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply)


class PeerSession:
    peer_broker = "b1"


THREE = {"b0": "h:0", "b1": "h:1", "b2": "h:2"}


def _stats(waiting: int) -> dict[str, Any]:
    return {"stats": {"waiting": waiting, "uptime": waiting * 1000}}


def _reads(nursery: trio.Nursery, live: dict[str, str] = THREE) -> tuple[ClusterReads, Links]:
    links = Links()
    return ClusterReads(Members("b0", live), links.forward, nursery.start_soon,
                        TIMEOUT_S), links


def _stats_request(**msg: Any) -> tuple[Request, Client]:
    client = Client()
    return Request("Stats", {"cmd": "Stats", "reqId": "r1", **msg}, client), client


async def test_every_broker_answers_and_the_client_gets_one_merged_reply() -> None:
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery)
        req, client = _stats_request()
        assert reads.take(req, _stats(1))
        assert sorted(links.sent) == ["h:1", "h:2"]
        forwarded = links.sent["h:1"][0]
        assert forwarded.cmd == "Stats" and "reqId" not in forwarded.msg
        links.answer("h:1", _stats(10))
        assert client.replies == []
        links.answer("h:2", _stats(100))
    assert client.replies == [{"ok": True, "stats": {"waiting": 111, "uptime": 1000},
                               "brokers": {"answered": 3, "missing": []}, "reqId": "r1"}]


async def test_a_broker_that_does_not_answer_in_time_is_left_out(
        autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery)
        req, client = _stats_request()
        reads.take(req, _stats(1))
        links.answer("h:1", _stats(10))
        with trio.fail_after(TIMEOUT_S * 2):
            while not client.replies:
                await trio.sleep(0.01)
        assert trio.current_time() - start >= TIMEOUT_S
        links.answer("h:2", _stats(100))  # late: dropped
    [reply] = client.replies
    assert reply["stats"]["waiting"] == 11
    assert reply["brokers"] == {"answered": 2, "missing": ["b2"]}


async def test_an_error_from_a_broker_leaves_it_out_without_waiting(
        autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery)
        req, client = _stats_request()
        reads.take(req, _stats(1))
        links.answer("h:1", {"ok": False, "error": "broker at h:1 unreachable"})
        links.answer("h:2", _stats(100))
    assert trio.current_time() == start
    [reply] = client.replies
    assert reply["stats"]["waiting"] == 101
    assert reply["brokers"] == {"answered": 2, "missing": ["b1"]}


async def test_a_lone_broker_answers_at_once() -> None:
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery, {"b0": "h:0"})
        req, client = _stats_request()
        assert reads.take(req, _stats(4))
        assert client.replies[0]["brokers"] == {"answered": 1, "missing": []}
        assert links.sent == {}


async def test_reads_answered_by_this_broker_alone() -> None:
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery)
        peer = Request("Stats", {"cmd": "Stats"}, Client(), conn=PeerSession())
        local, _ = _stats_request(local=True)
        other = Request("ListQueues", {"cmd": "ListQueues"}, Client())
        for req in (peer, local, other):
            assert not reads.take(req, {"queues": []})
        assert links.sent == {}


async def test_an_answer_that_cannot_be_merged_gives_this_brokers_own() -> None:
    own = {"data": {"metrics": "# TYPE a gauge\na 1\n"}}
    async with trio.open_nursery() as nursery:
        reads, links = _reads(nursery)
        client = Client()
        reads.take(Request("Prometheus", {"cmd": "Prometheus"}, client), own)
        links.answer("h:1", own)
        links.answer("h:2", {"data": {"metrics": "a{broken 1\n"}})
    [reply] = client.replies
    assert reply["data"] == own["data"]
    assert reply["brokers"] == {"answered": 1, "missing": ["b1", "b2"]}
