"""A consistent, compacted copy of an LMDB store, taken while a broker keeps writing it.

The copy is LMDB's own (``mdb_env_copy2`` with ``MDB_CP_COMPACT``) from an environment
this process opens read-only: it runs in one read transaction, so it is the store as
of one commit (every job acknowledged before the copy began is in it; later commits
are not, and none is half in), and it writes only the pages in use, renumbered, so
the copy is as small as the data. LMDB lets a reader in another process share the
environment with the broker's writer through the lock file; while the copy reads,
the broker cannot reuse the pages it frees, so its file may grow by what it writes
meanwhile.

Opened as :class:`~.store.LmdbStorage` opens it (a directory environment, the
same ``max_dbs``), never creating anything in the source.
"""

from __future__ import annotations

import os
from pathlib import Path

import lmdb

from .store import MAX_DBS

DATA_FILE = "data.mdb"
# The broker may grow its map between our open and our read transaction; LMDB then
# refuses the transaction (MDB_MAP_RESIZED) and a fresh open sees the new size.
_RESIZE_RETRIES = 5


class BackupError(Exception):
    """The copy cannot be taken; the message says why in one line."""


def copy_store(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> int:
    """Copy the LMDB store at ``source`` into the directory ``dest`` (created if
    missing; refused when it exists and holds anything). Returns the copy's size in
    bytes. A failed copy leaves no data file behind."""
    source_dir, dest_dir = Path(source), Path(dest)
    if not (source_dir / DATA_FILE).is_file():
        raise BackupError(f"no LMDB store at {source_dir} (no {DATA_FILE})")
    if dest_dir.exists() and (not dest_dir.is_dir() or any(dest_dir.iterdir())):
        raise BackupError(f"{dest_dir} exists and is not an empty directory")
    if dest_dir.resolve() == source_dir.resolve():
        raise BackupError(f"{dest_dir} is the store itself")
    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        _copy(source_dir, dest_dir)
    except BaseException:
        (dest_dir / DATA_FILE).unlink(missing_ok=True)
        raise
    return (dest_dir / DATA_FILE).stat().st_size


def _copy(source_dir: Path, dest_dir: Path) -> None:
    for attempt in range(_RESIZE_RETRIES + 1):
        try:
            env = lmdb.open(str(source_dir), readonly=True, lock=True, subdir=True,
                            create=False, max_dbs=MAX_DBS, readahead=False)
        except lmdb.Error as exc:
            raise BackupError(f"cannot open the store at {source_dir}: {exc}") from None
        try:
            env.copy(str(dest_dir), compact=True)
            return
        except lmdb.MapResizedError:
            if attempt == _RESIZE_RETRIES:
                raise BackupError(f"the store at {source_dir} kept growing while it was "
                                  f"copied; try again") from None
            (dest_dir / DATA_FILE).unlink(missing_ok=True)
        except lmdb.Error as exc:
            raise BackupError(f"cannot copy the store at {source_dir}: {exc}") from None
        finally:
            env.close()
