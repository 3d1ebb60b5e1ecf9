"""bunqueue's Python client 0.2.x (protocol v3: ``Hello`` v3, the job name beside the
data, never inside it) works against us unchanged, as 0.1.5 does
(test_bunqueue_client.py).

0.2.0 is not on the package index this project installs from (its newest release there
is 0.1.5), and its source is not vendored: this checkout ships none of bunqueue's code.
Point ``TRIOQUEUE_BUNQUEUE_CLIENT_SOURCE`` at a directory that holds its ``bunqueue``
package (``sdk/python`` of a checkout of bunqueue's repository) to run this test;
without it the test is skipped, saying so. The client runs in a subprocess of its own,
so its ``bunqueue`` package never meets the 0.1.5 one installed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

SOURCE_VARIABLE = "TRIOQUEUE_BUNQUEUE_CLIENT_SOURCE"
WANTED_VERSION = "0.2."

# Run by the subprocess: produce with Queue, process with Worker, read back; prints one
# JSON document. argv: source directory, port, wanted version prefix.
_SCRIPT = r"""
import json, sys, threading
sys.path.insert(0, sys.argv[1])
import bunqueue
from bunqueue import Queue, Worker
if not bunqueue.__version__.startswith(sys.argv[3]):
    print(json.dumps({"version": bunqueue.__version__}))
    sys.exit(0)
port = int(sys.argv[2])
queue = Queue("compat3", host="127.0.0.1", port=port)
first = queue.add("greet", {"who": "world", "name": "kept"}, priority=2, attempts=2)
ids = [first.id] + list(queue.add_bulk(
    [{"name": "sum", "data": {"a": i, "b": i}} for i in range(4)]))
done, seen, lock = threading.Event(), [], threading.Lock()
def processor(job):
    data = job.data
    with lock:
        seen.append(job.id)
        if len(seen) == len(ids):
            done.set()
    return "hello " + data["who"] if "who" in data else data["a"] + data["b"]
errors = []
worker = Worker("compat3", processor, host="127.0.0.1", port=port, concurrency=2,
                poll_timeout_ms=200)
worker.on("error", errors.append)
finished = done.wait(30)
worker.close(timeout=10)
results = {}
for job_id in ids:
    for _ in range(500):
        if queue.get_state(job_id) == "completed":
            break
        threading.Event().wait(0.01)
    results[job_id] = queue.get_result(job_id)
queue.close()
print(json.dumps({"version": bunqueue.__version__, "finished": finished, "ids": ids,
                  "results": results, "errors": [str(e) for e in errors]}))
"""


@pytest.fixture
def client_source() -> Path:
    configured = os.environ.get(SOURCE_VARIABLE)
    if not configured or not (Path(configured) / "bunqueue" / "__init__.py").is_file():
        pytest.skip(f"bunqueue-client 0.2.x is not installable here (the package index has "
                    f"0.1.5 at most) and its source is not in this checkout: set "
                    f"{SOURCE_VARIABLE} to a directory holding its bunqueue package")
    return Path(configured)


def _run_client(source: Path, port: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(source), str(port),
                           WANTED_VERSION], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


async def test_bunqueue_python_client_0_2_adds_reads_and_processes(
        client_source: Path, server: Server) -> None:
    source = client_source
    assert server.tcp_port is not None
    with trio.fail_after(120):
        out = await trio.to_thread.run_sync(_run_client, source, server.tcp_port)
    version = str(out["version"])
    assert version.startswith(WANTED_VERSION), f"the source holds bunqueue-client {version}"
    assert out["finished"] and out["errors"] == []
    ids = out["ids"]
    assert isinstance(ids, list) and isinstance(out["results"], dict)
    assert out["results"][ids[0]] == "hello world" and out["results"][ids[2]] == 2
    client = await RawClient.connect(server.tcp_port)
    job = (await client.ok("GetJob", id=ids[0]))["job"]
    await client.aclose()
    # protocol v3: the name travels beside the data, and data["name"] is the user's own
    assert job["name"] == "greet" and job["data"] == {"who": "world", "name": "kept"}
    assert (job["priority"], job["maxAttempts"]) == (2, 2)
