"""Check that a PostgreSQL store is consistent with itself (the PostgreSQL side of
:mod:`.store_check`): after a crash of the broker or of the server, every table must
agree with the others, as one batch's statement either happened whole or not at all.

- every live record is stored under its own id and queue, in a live state; every
  finished record under its own id, queue, state and creation time, in a finished
  state; no id is both live and finished;
- each finished count equals the number of finished rows of its queue and state;
- a stored result belongs to a finished job.
"""

from __future__ import annotations

from typing import Any

from ..core.job import FINISHED_STATES, LIVE_STATES
from ..storage import keys as K


def check_pg_store(dsn: str) -> list[str]:
    """What is wrong in the store at ``dsn`` (empty: consistent). Reads one snapshot."""
    import psycopg

    problems: list[str] = []
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        live = conn.execute("SELECT id, queue, record FROM tq_live").fetchall()
        finished = conn.execute(
            "SELECT id, queue, state, created_at, record, result IS NOT NULL "
            "FROM tq_finished").fetchall()
        counts = conn.execute("SELECT queue, state, n FROM tq_finished_counts").fetchall()
        rows = conn.execute("SELECT queue, state, count(*) FROM tq_finished "
                            "GROUP BY queue, state").fetchall()
    live_ids = set()
    for key, queue, raw in live:
        job_id = K.decode_job_key(bytes(key))
        live_ids.add(job_id)
        problems += _record_problems("live", job_id, K.decode_value(raw), LIVE_STATES,
                                     queue=queue)
    for key, queue, state, created, raw, _has_result in finished:
        job_id = K.decode_job_key(bytes(key))
        record = K.decode_value(raw)
        problems += _record_problems("finished", job_id, record, FINISHED_STATES,
                                     queue=queue, state=state, createdAt=created)
        if job_id in live_ids:
            problems.append(f"{job_id}: both live and finished")
    stored = {(q, s): n for q, s, n in counts if n}
    actual = {(q, s): n for q, s, n in rows}
    if stored != actual:
        problems.append(f"finished counts {stored} but rows {actual}")
    return problems


def _record_problems(kind: str, job_id: str, record: dict[str, Any],
                     states: frozenset[str], **columns: Any) -> list[str]:
    problems = []
    if record.get("id") != job_id:
        problems.append(f"{kind} {job_id}: record of {record.get('id')!r}")
    if record.get("state") not in states:
        problems.append(f"{kind} {job_id}: state {record.get('state')!r}")
    for field, value in columns.items():
        if record.get(field) != value:
            problems.append(f"{kind} {job_id}: {field} {record.get(field)!r}, column {value!r}")
    return problems
