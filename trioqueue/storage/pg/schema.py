"""Creating and migrating trioqueue's tables in PostgreSQL (``trioqueue migrate``).

Migrations (:data:`.layout.MIGRATIONS`) are explicit, ordered and each applied once:
the version table records which ran. All pending ones run in ONE transaction that
first takes a transaction-level advisory lock, so two brokers starting at once (or a
broker and ``trioqueue migrate``) never run the same migration twice: the second waits
for the lock, then finds nothing left to do. PostgreSQL's DDL is transactional, so a
migration that fails leaves the schema as it was.

A database migrated by a newer trioqueue than this one is refused
(:class:`SchemaTooNew`) rather than used with a layout this code does not know.
"""

from __future__ import annotations

from typing import Any

import psycopg

from . import layout as L


class SchemaTooNew(Exception):
    """The database's schema is newer than this trioqueue knows."""


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The database's schema version (0: never migrated)."""
    row = conn.execute(L.HAS_VERSION_TABLE).fetchone()
    if not row or not row[0]:
        return 0
    version = conn.execute(L.CURRENT_VERSION).fetchone()
    return int(version[0]) if version else 0


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Bring the schema to :data:`.layout.LATEST_VERSION`; the versions applied
    (empty when it was current). Raises :class:`SchemaTooNew`."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute(L.LOCK_MIGRATIONS, (L.MIGRATION_LOCK_KEY,))
        conn.execute(L.CREATE_VERSION_TABLE)
        row = conn.execute(L.CURRENT_VERSION).fetchone()
        current = int(row[0]) if row else 0
        if current > L.LATEST_VERSION:
            raise SchemaTooNew(
                f"the database's trioqueue schema is version {current}, newer than this "
                f"trioqueue's {L.LATEST_VERSION}: upgrade trioqueue")
        for migration in L.MIGRATIONS:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                conn.execute(statement)  # type: ignore[arg-type]  # (our constants)
            conn.execute(L.RECORD_VERSION, (migration.version, migration.description))
            applied.append(migration.version)
    return applied
