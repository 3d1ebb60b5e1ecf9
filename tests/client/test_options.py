"""Python-typed job options (issue 13, item 3): wrong types and values are refused
before anything is sent, naming the Python argument; the package ships its hints."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest

from trioqueue.client import Connection, FlowProducer, Queue, ValidationError
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
