"""The checkpoint file's layout: its tables, its format version, and the one write.

The database is in WAL mode and every batch of values is one transaction
(:func:`insert_batch`). After ``kill -9`` SQLite replays only the committed
frames of the log, so a row is either all there or not there. Whether a
commit also survives a power cut is the writer's ``synchronous`` setting (see
:mod:`dagexec._persist.checkpoint_writer`).

A file of another :data:`FORMAT` is refused, not guessed at. Before SQLite
reads a byte of it, :mod:`dagexec._persist.checkpoint_file` checks that the
file is private and is a dagexec checkpoint at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Hashable, Sequence

from .._core.errors import CheckpointError
from .checkpoint_file import (
    check_contents,
    check_private,
    check_writable,
    create_private,
    damaged,
)
from .checkpoint_values import describe_safely, digest

__all__ = ["FORMAT", "Item", "connect", "insert_batch", "open_checked"]

FORMAT = "1"
"""Version of the file layout below; a file of another version is refused, not guessed at."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dagexec_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dagexec_values (
    identity BLOB PRIMARY KEY,   -- 16-byte task identity, see dagexec._persist.identity
    name     TEXT NOT NULL,      -- repr of the task name, for people reading the file
    size     INTEGER NOT NULL,   -- len(value)
    created  REAL NOT NULL,      -- time.time() when written
    digest   BLOB NOT NULL,      -- BLAKE2b-128 of value, checked on every load
    value    BLOB NOT NULL       -- the pickled value
);
CREATE TABLE IF NOT EXISTS dagexec_names (
    key      BLOB PRIMARY KEY,   -- 16-byte digest of the task name, see dagexec._persist.identity
    name     TEXT NOT NULL,      -- repr of the task name, for people reading the file
    identity BLOB NOT NULL,      -- the identity last saved under this name
    parts    BLOB NOT NULL       -- what it was made of, for dagexec.explain
);
"""

_BUSY_TIMEOUT_SECONDS = 30.0

# (identity, task name, pickled value, parts): parts are the name key, code and
# constants digests, then (name key, identity) per dependency; b"" for none.
Item = tuple[bytes, Hashable, bytes, bytes]


def connect(path: str) -> sqlite3.Connection:
    """A connection to ``path`` that any thread may use (callers hold their own lock)."""
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is
    # exactly one batch and nothing is left open by the sqlite3 module's own rules.
    return sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
    )


def open_checked(path: str) -> sqlite3.Connection:
    """Open (creating it private if missing) the checkpoint at ``path``, in WAL mode.

    Raises:
        CheckpointError: the file may not be read (not private, not ours), is
            damaged, is of another format version, or cannot be opened.
    """
    # Before SQLite reads a byte: a file someone else could write is refused,
    # since loading unpickles (see checkpoint_file).
    check_private(path)
    check_writable(path)
    create_private(path)
    try:
        conn = connect(path)
    except sqlite3.Error as exc:
        raise CheckpointError(
            f"cannot open checkpoint {path!r} ({exc}); check that the directory "
            "exists and is writable",
            path=path,
        ) from exc
    try:
        check_contents(conn, path)
    except BaseException:
        conn.close()
        raise
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise sqlite3.OperationalError(f"journal_mode is {mode!r}, WAL is required")
        conn.executescript(_SCHEMA)
        conn.execute(
            "INSERT OR IGNORE INTO dagexec_meta (key, value) VALUES ('format', ?)", (FORMAT,)
        )
        (found,) = conn.execute("SELECT value FROM dagexec_meta WHERE key = 'format'").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise damaged(path, exc) from exc
    if found != FORMAT:
        conn.close()
        raise CheckpointError(
            f"checkpoint {path!r} has format {found!r}, this dagexec reads format "
            f"{FORMAT!r}; give another path or delete the file",
            path=path,
        )
    return conn


def insert_batch(conn: sqlite3.Connection, batch: Sequence[Item]) -> None:
    """Write ``batch`` as one transaction: all of it is committed, or none.

    Raises:
        sqlite3.Error: the transaction was rolled back (a value too large for
            this connection, disk full, the file locked for too long).
    """
    now = time.time()
    rows = [
        (identity, describe_safely(name), len(data), now, digest(data), data)
        for identity, name, data, _ in batch
    ]
    names = [
        (parts[:16], row[1], row[0], parts)
        for row, (_, _, _, parts) in zip(rows, batch, strict=True)
        if parts
    ]
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "INSERT OR REPLACE INTO dagexec_values"
            " (identity, name, size, created, digest, value) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        if names:
            conn.executemany(
                "INSERT OR REPLACE INTO dagexec_names (key, name, identity, parts)"
                " VALUES (?, ?, ?, ?)",
                names,
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
