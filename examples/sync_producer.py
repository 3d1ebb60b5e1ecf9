"""From code without an event loop (a Flask or Django view, a script): add jobs and
read results with ``trioqueue.sync``. Needs a running broker (``trioqueue serve``).

    python examples/sync_producer.py --port 6789
"""

from __future__ import annotations

import argparse

from trioqueue import sync


def main(host: str, port: int) -> dict[str, object]:
    with sync.connect(host, port) as conn:
        queue = conn.queue("signups")
        job = queue.add("welcome-mail", {"user": 42}, attempts=5)
        counts = queue.get_job_counts()
        print("added", job.id, "state", job.get_state(), "counts", counts)
        return {"id": job.id, "state": job.get_state(), "waiting": counts["waiting"]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6789)
    args = parser.parse_args()
    main(args.host, args.port)
