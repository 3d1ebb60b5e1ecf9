"""``cron add|list|rm`` against a real broker."""

from __future__ import annotations

import pytest

from trioqueue.cli import main

from .conftest import Cli


async def test_cron_add_list_rm(cli: Cli) -> None:
    added = (await cli("cron", "add", "nightly", "--queue", "reports", "--pattern",
                       "0 3 * * *", "--data", '{"kind": "daily"}', "--json")).json()["cron"]
    assert (added["name"], added["queue"], added["schedule"]) == ("nightly", "reports",
                                                                  "0 3 * * *")
    every = (await cli("cron", "add", "tick", "--queue", "t", "--every", "60000",
                       "--job-name", "beat", "--limit", "3", "--json")).json()["cron"]
    assert (every["repeatEvery"], every["jobName"], every["maxLimit"]) == (60000, "beat", 3)
    listed = (await cli("cron", "list", "--json")).json()["crons"]
    assert sorted(c["name"] for c in listed) == ["nightly", "tick"]
    table = (await cli("cron", "list")).out
    assert "0 3 * * *" in table and "every 60000 ms" in table, table
    removed = await cli("cron", "rm", "nightly")
    assert (removed.status, removed.out.strip()) == (0, "removed cron nightly")
    assert [c["name"] for c in (await cli("cron", "list", "--json")).json()["crons"]] == [
        "tick"]


async def test_cron_rm_unknown(cli: Cli) -> None:
    missing = await cli("cron", "rm", "nope")
    assert (missing.status, missing.err) == (1, "error: Cron job not found\n")


async def test_cron_add_refused_by_the_broker(cli: Cli) -> None:
    refused = await cli("cron", "add", "bad", "--queue", "q", "--pattern", "not a cron")
    assert refused.status == 1 and refused.err.startswith("error: ")
    assert len(refused.err.splitlines()) == 1


def test_cron_add_needs_one_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--pattern", "* * * * *", "--every", "5"]):
        with pytest.raises(SystemExit) as exited:
            main(["cron", "add", "x", "--queue", "q", *extra], {})
        assert exited.value.code == 2
    assert "--pattern" in capsys.readouterr().err
