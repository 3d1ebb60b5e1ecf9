"""``queues``, ``pause``/``resume`` and the deleting commands (``drain``, ``clean``,
``obliterate``), which ask first on a terminal and refuse without one unless --yes."""

from __future__ import annotations

import io

import pytest

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

from .conftest import Cli

NO_TTY_LINE = "error: {} deletes jobs: pass --yes to confirm (no terminal to ask on)\n"


class Terminal(io.StringIO):
    """A stdin that is a terminal, with a person's answer typed in."""

    def isatty(self) -> bool:
        return True


async def _seed(cli: Cli) -> None:
    for args in (("add", "mail", "send", "--data", '{"to": "a"}'),
                 ("add", "mail", "send", "--delay", "60000"),
                 ("add", "other", "x")):
        assert (await cli(*args)).status == 0


async def test_queues_lists_names_with_counts(cli: Cli) -> None:
    await _seed(cli)
    listed = (await cli("queues", "--json")).json()
    by_name = {row["name"]: row for row in listed["queues"]}
    assert sorted(by_name) == ["mail", "other"]
    assert by_name["mail"]["counts"]["waiting"] == 1
    assert by_name["mail"]["counts"]["delayed"] == 1
    assert by_name["mail"]["paused"] is False
    table = await cli("queues")
    assert table.status == 0 and "mail" in table.out and "other" in table.out
    assert not table.out.lstrip().startswith("{")


async def test_no_queues_is_said(cli: Cli) -> None:
    assert (await cli("queues")).out.strip() == "no queues"
    assert (await cli("queues", "--json")).json() == {"queues": []}


async def test_pause_and_resume(cli: Cli, broker: Server) -> None:
    await _seed(cli)
    assert (await cli("pause", "mail", "--json")).json() == {"queue": "mail", "paused": True}
    client = await RawClient.connect(broker.tcp_port or 0)
    assert (await client.ok("IsPaused", queue="mail"))["paused"] is True
    assert (await client.ok("PULL", queue="mail"))["job"] is None
    assert (await cli("resume", "mail")).out.strip() == "resumed mail"
    assert (await client.ok("IsPaused", queue="mail"))["paused"] is False
    await client.aclose()


@pytest.mark.parametrize("command", [("drain", "mail"), ("obliterate", "mail"),
                                     ("clean", "mail", "--state", "waiting")])
async def test_deleting_without_a_terminal_needs_yes(cli: Cli, command: tuple[str, ...]
                                                     ) -> None:
    await _seed(cli)
    refused = await cli(*command)
    assert (refused.status, refused.out, refused.err) == (2, "", NO_TTY_LINE.format(
        command[0]))
    counts = {row["name"]: row["counts"] for row in (await cli("queues", "--json")).json()[
        "queues"]}
    assert counts["mail"]["waiting"] == 1  # nothing was deleted


async def test_drain_with_yes(cli: Cli) -> None:
    await _seed(cli)
    assert (await cli("drain", "mail", "--yes", "--json")).json() == {"queue": "mail",
                                                                      "count": 2}
    assert (await cli("jobs", "mail", "--json")).json()["jobs"] == []


async def test_drain_asks_on_a_terminal(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    await _seed(cli)
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    declined = await cli("drain", "mail")
    assert declined.status == 2
    assert declined.err.endswith("error: not confirmed: nothing was changed\n")
    assert "Delete every waiting, prioritized and delayed job of 'mail'? [y/N]" in declined.err
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    done = await cli("drain", "mail")
    assert (done.status, done.out.strip()) == (0, "removed 2 jobs from mail")


async def test_clean_removes_old_completed_jobs(cli: Cli, broker: Server) -> None:
    client = await RawClient.connect(broker.tcp_port or 0)
    for _ in range(3):
        await client.ok("PUSH", queue="c", name="n", data=None)
        job = (await client.ok("PULL", queue="c"))["job"]
        await client.ok("ACK", id=job["id"])
    await client.aclose()
    cleaned = (await cli("clean", "c", "--grace", "0", "--limit", "2", "--yes",
                         "--json")).json()
    assert cleaned["count"] == 2 and len(cleaned["ids"]) == 2
    left = (await cli("jobs", "c", "--state", "completed", "--json")).json()["jobs"]
    assert [job["id"] for job in left] not in cleaned["ids"] and len(left) == 1


async def test_obliterate_deletes_the_queue(cli: Cli) -> None:
    await _seed(cli)
    done = await cli("obliterate", "mail", "-y")
    assert (done.status, done.out.strip()) == (0, "obliterated mail")
    names = [row["name"] for row in (await cli("queues", "--json")).json()["queues"]]
    assert names == ["other"]
