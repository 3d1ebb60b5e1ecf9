"""A broker with its HTTP port and an httpx client on it, for the REST route tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from trioqueue.server.run import Server


@asynccontextmanager
async def rest_client(start_server: Callable[..., Any], **overrides: Any
                      ) -> AsyncIterator[httpx.AsyncClient]:
    """An in-memory broker (``overrides`` on its config) and a client on its HTTP port."""
    server: Server = await start_server(memory=True, **overrides)
    # Bodies are declared JSON, as the SDKs send them (another type is 415), so a
    # malformed body sent raw reaches the route's own check (400 Invalid JSON body).
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 headers={"Content-Type": "application/json"},
                                 timeout=10.0) as client:
        yield client


async def push(client: httpx.AsyncClient, queue: str = "q", **job: Any) -> str:
    """A job pushed over REST; its id."""
    reply = await client.post(f"/queues/{queue}/jobs", json={"name": "n", **job})
    assert reply.status_code == 200, reply.text
    job_id: str = reply.json()["id"]
    return job_id


async def pull(client: httpx.AsyncClient, queue: str = "q") -> tuple[str, str]:
    """One job claimed over REST with a lock: its id and lock token."""
    reply = await client.post(f"/queues/{queue}/jobs/pull-batch",
                              json={"count": 1, "owner": "w1"})
    body = reply.json()
    assert reply.status_code == 200 and body["jobs"], body
    return body["jobs"][0]["id"], body["tokens"][0]


def http_fixture(**overrides: Any) -> Callable[..., AsyncIterator[httpx.AsyncClient]]:
    """An ``http`` fixture: :func:`rest_client` on a broker with ``overrides``."""

    @pytest.fixture
    async def http(start_server: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
        async with rest_client(start_server, **overrides) as client:
            yield client

    return http
