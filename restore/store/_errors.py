"""The arrangement store's errors, and the one boundary where sqlite3 and OS
errors become them (``_translated``, which every call of the store runs inside).

A sqlite3 error whose code says the file is not what we wrote
(``_CORRUPT_CODES``) becomes ``StoreCorrupt``, which may get the file moved
aside. Errors that say nothing about the file (busy past the timeout, I/O,
permissions) become ``StoreError`` and never move anything.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from multiserver import MultiserverError

# Primary SQLite result codes that mean "this file is not what we wrote": a
# generic SQL error on our fixed statements (no such table or column), a
# malformed image, not a database, a type or constraint our schema would not
# produce. Anything else (busy, locked, I/O, read-only, full...) is about the
# moment or the machine, and must never get a file moved aside.
_CORRUPT_CODES = frozenset(
    {
        sqlite3.SQLITE_ERROR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_CONSTRAINT,
        sqlite3.SQLITE_MISMATCH,
        sqlite3.SQLITE_FORMAT,
        sqlite3.SQLITE_NOTADB,
    }
)


# What SQLite's -shm of a WAL file takes first (32 KiB).
_SHM_SIZE = 32 * 1024


class StoreError(MultiserverError):
    """The store cannot be used now (busy past the timeout, I/O, permissions).
    The file is left as it is."""


class StoreCorrupt(StoreError):
    """The file is not a store this code can read; move it aside."""


class StoreTooNew(StoreError):
    """The file was written by a newer multiserver: readable as far as this
    one understands it, never written by it."""


@contextlib.contextmanager
def _translated(path: Path) -> Iterator[None]:
    """sqlite3 and OS errors -> StoreCorrupt or StoreError, naming the file."""
    try:
        yield
    except StoreError as exc:
        if str(path) in str(exc):
            raise
        raise type(exc)(f"{path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        cls = StoreCorrupt if code in _CORRUPT_CODES else StoreError
        # SQLite says "disk I/O error" when it cannot grow its -shm or -wal.
        full = " (its file system is full)" if cls is StoreError and _full(path) else ""
        raise cls(f"{path}: {exc}{full}") from exc
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from exc


def _full(path: Path) -> bool:
    """Whether the file system of ``path`` has less room than a -shm takes."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _SHM_SIZE
