"""Python-typed job options (issue 13, item 3): wrong types and values are refused
before anything is sent, naming the Python argument; the package ships its hints."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest

from trioqueue.client import Connection, FlowProducer, Job, Queue, ValidationError
from trioqueue.client.options import JobOptions, job_options

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"attempts": "3"}, r"^attempts must be an integer of at least 1, not '3' \(str\)$"),
    ({"attempts": 0}, r"^attempts must be an integer of at least 1, not 0 \(int\)$"),
    ({"attempts": 2.0}, r"^attempts must be an integer"),
    ({"attempts": True}, r"^attempts must be an integer"),
    ({"delay": 1.5}, r"^delay must be whole milliseconds \(an int\) of at least 0, "
                     r"not 1\.5 \(float\)$"),
    ({"delay": -1}, r"^delay must be whole milliseconds .* not -1 \(int\)$"),
    ({"ttl": "5s"}, r"^ttl must be whole milliseconds"),
    ({"priority": "high"}, r"^priority must be an integer, not 'high' \(str\)$"),
    ({"job_id": ""}, r"^job_id must be a non-empty string"),
    ({"job_id": 7}, r"^job_id must be a non-empty string, not 7 \(int\)$"),
    ({"tags": "urgent"}, r"^tags must be a list of non-empty strings, not 'urgent'"),
    ({"lifo": 1}, r"^lifo must be True or False, not 1 \(int\)$"),
    ({"backoff": -5}, r"^backoff must be whole milliseconds"),
    ({"backoff": {"type": "linear"}}, r"^backoff\['type'\] must be 'fixed' or 'exponential'"),
    ({"backoff": {"delay": 0.5}}, r"^backoff\['delay'\] must be whole milliseconds"),
    ({"deduplication": {"id": "k", "ttl": 1.5}}, r"^deduplication\['ttl'\] must be whole"),
    ({"atempts": 3}, r"^unknown job option: atempts$"),
]


@pytest.mark.parametrize(("options", "message"), REFUSED)
def test_job_options_name_the_python_argument(options: dict[str, Any], message: str
                                              ) -> None:
    with pytest.raises(ValidationError, match=message):
        job_options(options)


def test_good_options_become_wire_fields() -> None:
    options: JobOptions = {"job_id": "a", "attempts": 3, "delay": 0, "priority": -2,
                           "backoff": {"type": "fixed", "delay": 10, "max_delay": 100},
                           "tags": ("x",), "lifo": False, "deduplication": {"id": "k"}}
    assert job_options(options) == {
        "jobId": "a", "maxAttempts": 3, "delay": 0, "priority": -2,
        "backoff": {"type": "fixed", "delay": 10, "maxDelay": 100}, "tags": ["x"],
        "lifo": False, "uniqueKey": "k"}
    assert job_options({"attempts": None, "job_id": "b"}, custom_id_key="customId") == {
        "customId": "b"}


async def test_add_and_friends_refuse_before_sending(conn: Connection) -> None:
    queue = Queue("o-typed", conn)
    with anyio.fail_after(2), pytest.raises(ValidationError, match="^attempts must be"):
        await queue.add("n", {}, attempts="3")  # type: ignore[typeddict-item]
    with pytest.raises(ValidationError, match="^delay must be"):
        await queue.add("n", {}, delay=1.5)  # type: ignore[typeddict-item]
    with pytest.raises(ValidationError, match=r"^jobs\[1\]\.opts: delay must be"):
        await queue.add_bulk([{"name": "a"}, {"name": "b", "opts": {"delay": -1}}])
    with pytest.raises(ValidationError, match="^attempts must be"):
        await FlowProducer(conn).add({"name": "p", "queue_name": "o-typed",
                                      "opts": {"attempts": 0}})
    assert await queue.count() == 0  # nothing was sent
    job = await queue.add("n", {}, attempts=3, delay=60_000)
    assert (job.max_attempts, await queue.get_job_state(job.id)) == (3, "delayed")


def test_py_typed_ships_as_package_data() -> None:
    assert (ROOT / "trioqueue" / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["trioqueue"]


def test_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """The examples as a user's code: strict, with trioqueue's own modules read for
    their types but not reported on (as mypy treats an installed typed package)."""
    mypy = shutil.which("mypy")
    command = [mypy] if mypy else [sys.executable, "-m", "mypy"]
    if not mypy and subprocess.run([*command, "--version"], capture_output=True).returncode:
        pytest.skip("mypy is not installed (pip install -e '.[test]' brings it)")
    done = subprocess.run(
        [*command, "--strict", "--follow-imports=silent", "--cache-dir",
         str(tmp_path / "cache"), "examples/"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- add's friends
# Every other Queue/Job method that takes a number checks it with add's rules, before
# sending, naming the Python argument (not the wire field: delay, duration, maxStalls).

MS = r" must be whole milliseconds \(an int\) of at least 0, not "
FRIENDS_REFUSED: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("change_job_delay", (1.5,), {}, r"^delay_ms" + MS + r"1\.5 \(float\)$"),
    ("change_job_delay", (-5,), {}, r"^delay_ms" + MS + r"-5 \(int\)$"),
    ("change_job_delay", ("x",), {}, r"^delay_ms" + MS + r"'x' \(str\)$"),
    ("change_job_delay", (True,), {}, r"^delay_ms" + MS + r"True \(bool\)$"),
    ("extend_job_lock", (1.5,), {}, r"^duration_ms" + MS + r"1\.5 \(float\)$"),
    ("extend_job_lock", (-1,), {}, r"^duration_ms" + MS + r"-1 \(int\)$"),
    ("extend_job_lock", ("1000",), {}, r"^duration_ms" + MS),
    ("move_job_to_delayed", (1.5,), {},
     r"^timestamp_ms must be an integer of at least 0, not 1\.5 \(float\)$"),
    ("move_job_to_delayed", (-1,), {}, r"^timestamp_ms must be an integer of at least 0"),
    ("move_job_to_delayed", ("x",), {}, r"^timestamp_ms must be an integer of at least 0"),
    ("change_job_priority", (1.5,), {}, r"^priority must be an integer, not 1\.5 \(float\)$"),
    ("change_job_priority", ("high",), {}, r"^priority must be an integer, not 'high'"),
    ("change_job_priority", (True,), {}, r"^priority must be an integer, not True"),
    ("change_job_priority", (1,), {"lifo": 1}, r"^lifo must be True or False, not 1 \(int\)$"),
    ("clear_job_logs", (-1,), {}, r"^keep must be an integer of at least 0, not -1 \(int\)$"),
    ("clear_job_logs", (1.5,), {}, r"^keep must be an integer of at least 0"),
    ("get_job_logs", (-1, 2), {}, r"^start must be an integer of at least 0, not -1 \(int\)$"),
    ("get_job_logs", (0, 1.5), {}, r"^end must be an integer of at least -1, not 1\.5"),
    ("get_dependencies", ("processed", "0"), {}, r"^start must be an integer of at least 0"),
    ("get_dependencies", ("processed", 0, -2), {}, r"^end must be an integer of at least -1"),
]
QUEUE_REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("set_stall_config", {"max_stalls": "x"},
     r"^max_stalls must be an integer of at least 0, not 'x' \(str\)$"),
    ("set_stall_config", {"max_stalls": -1}, r"^max_stalls must be an integer of at least 0"),
    ("set_stall_config", {"stall_interval": 1.5}, r"^stall_interval" + MS + r"1\.5"),
    ("set_stall_config", {"grace_period": -1}, r"^grace_period" + MS + r"-1 \(int\)$"),
    ("set_stall_config", {"enabled": 1}, r"^enabled must be True or False, not 1 \(int\)$"),
    ("promote_jobs", {"count": -1}, r"^count must be an integer of at least 0, not -1"),
    ("promote_jobs", {"count": "3"}, r"^count must be an integer of at least 0, not '3'"),
    ("get_jobs", {"start": -1}, r"^start must be an integer of at least 0, not -1 \(int\)$"),
    ("get_jobs", {"start": 1.5}, r"^start must be an integer of at least 0"),
    ("get_jobs", {"end": "x"}, r"^end must be an integer of at least -1, not 'x' \(str\)$"),
]
JOB_REFUSED: list[tuple[str, tuple[Any, ...], str]] = [
    ("change_delay", (1.5,), r"^delay_ms" + MS + r"1\.5 \(float\)$"),
    ("change_delay", (-5,), r"^delay_ms" + MS + r"-5 \(int\)$"),
    ("extend_lock", (2.5,), r"^duration_ms" + MS + r"2\.5 \(float\)$"),
    ("move_to_delayed", (1.5,), r"^timestamp_ms must be an integer of at least 0"),
    ("change_priority", ("1",), r"^priority must be an integer, not '1' \(str\)$"),
    ("clear_logs", (-1,), r"^keep must be an integer of at least 0"),
    ("get_logs", (0, -2), r"^end must be an integer of at least -1"),
]


async def _spied_job(conn: Connection, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[Queue, Job, list[str]]:
    """A queue with one delayed job, whose commands from now on are recorded."""
    queue = Queue("o-friends", conn)
    job = await queue.add("n", {}, delay=60_000)
    sent: list[str] = []
    call = queue._call

    async def spy(cmd: str, **fields: Any) -> dict[str, Any]:
        sent.append(cmd)
        return await call(cmd, **fields)

    monkeypatch.setattr(queue, "_call", spy)
    return queue, job, sent


@pytest.mark.parametrize(("method", "args", "kwargs", "message"), FRIENDS_REFUSED)
async def test_job_methods_of_queue_refuse_before_sending(
        conn: Connection, monkeypatch: pytest.MonkeyPatch, method: str,
        args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    queue, job, sent = await _spied_job(conn, monkeypatch)
    with anyio.fail_after(2), pytest.raises(ValidationError, match=message):
        await getattr(queue, method)(job.id, *args, **kwargs)
    assert sent == []  # nothing was sent
    assert await queue.get_job_state(job.id) == "delayed"


@pytest.mark.parametrize(("method", "kwargs", "message"), QUEUE_REFUSED)
async def test_queue_methods_refuse_before_sending(
        conn: Connection, monkeypatch: pytest.MonkeyPatch, method: str,
        kwargs: dict[str, Any], message: str) -> None:
    queue, _, sent = await _spied_job(conn, monkeypatch)
    with anyio.fail_after(2), pytest.raises(ValidationError, match=message):
        await getattr(queue, method)(**kwargs)
    assert sent == []  # nothing was sent


@pytest.mark.parametrize(("method", "args", "message"), JOB_REFUSED)
async def test_job_methods_refuse_before_sending(
        conn: Connection, monkeypatch: pytest.MonkeyPatch, method: str,
        args: tuple[Any, ...], message: str) -> None:
    _, job, sent = await _spied_job(conn, monkeypatch)
    with anyio.fail_after(2), pytest.raises(ValidationError, match=message):
        await getattr(job, method)(*args)
    assert sent == []  # nothing was sent


async def test_good_numbers_still_reach_the_broker(conn: Connection) -> None:
    queue = Queue("o-friends-ok", conn)
    job = await queue.add("n", {}, delay=60_000)
    await job.change_priority(5, lifo=False)
    await queue.change_job_priority(job.id, -1)
    await job.change_delay(0)
    assert await queue.get_job_state(job.id) == "waiting"
    await queue.change_job_delay(job.id, 60_000)
    assert await queue.get_job_state(job.id) == "delayed"
    assert await queue.promote_jobs(count=1) == 1
    assert [j.id for j in await queue.get_jobs("waiting", 0, -1)] == [job.id]
    await job.clear_logs(0)
    assert (await job.get_logs(0, -1))["count"] == 0
    await queue.set_stall_config(enabled=True, stall_interval=1000, max_stalls=0,
                                 grace_period=0)
    assert (await queue.get_stall_config())["maxStalls"] == 0
    reply = await conn.call("PULL", queue="o-friends-ok", owner="w")
    active = Job(queue, reply["job"], reply.get("token"))
    await active.extend_lock(30_000)
    await queue.extend_job_lock(active.id, 0, active.token)  # 0 ends the lease now
    reply = await conn.call("PULL", queue="o-friends-ok", owner="w")
    active = Job(queue, reply["job"], reply.get("token"))
    await active.move_to_delayed(int(time.time() * 1000) + 60_000)
    assert await queue.get_job_state(active.id) == "delayed"
