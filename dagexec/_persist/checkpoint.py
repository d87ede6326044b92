"""The checkpoint store: finished tasks' values in SQLite, written off the hot path.

A run with a checkpoint saves each finished task's pickled value under the task's
identity (:mod:`dagexec._persist.identity`); a later run loads the values whose identity
is stored instead of computing them again. The store must never slow the
scheduler down and must survive ``kill -9`` with nothing lost that it reported
committed, so:

Data flow::

    any thread                       writer thread ("dagexec-checkpoint-writer")
    ----------                       -------------------------------------------
    pickle_value(value)  (caller)
    save_pickled_nowait  --put-->  queue (unbounded) --get--> BEGIN; INSERT ...; COMMIT
                                                              then committed_count += n,
                                                              then on_commit(identities)
    load / load_many / stored  ----> reader connection (WAL snapshot: committed rows only)

Ownership:

    ========================  ==================================================
    what                      who may touch it
    ========================  ==================================================
    the writer's connection   the writer thread only (opened and closed there)
    ``_Writer.queue``         any thread puts (under ``_Writer.lock``), writer gets
    ``_Writer.committed``     writer writes, anyone reads, under ``_Writer.lock``
    the reader connection     any thread, under ``CheckpointStore._read_lock``
    ========================  ==================================================

Durability, and why a half-written value is never read back: the database is in
WAL mode and every batch of values is one transaction. After ``kill -9`` SQLite
replays only the committed frames of the log, so a row is either all there or
not there. A value is counted committed (``committed_count``, ``on_commit``) only
after ``COMMIT`` returned; with ``durable=True`` (the default, ``synchronous=FULL``)
that also survives a power cut, with ``durable=False`` (``NORMAL``) it survives
the death of the process but a power cut may lose the last commits. Each row also
carries a BLAKE2b digest of its bytes, so damage below SQLite (a bad disk, a file
copied while written) is detected on load: such a value, or one that no longer
unpickles (its class was renamed), is treated as missing with a warning, never
as a crash.

Where pickling happens: on the thread that calls :meth:`CheckpointStore.save_nowait`
(or :func:`pickle_value`), not on the writer. Pickling on the writer would take
the cost off the caller, but the value would have to stay alive and unchanged
until the writer reached it, and a task that mutates its argument in place would
race with the writer: the store could hold a value the task never returned, or
pickling could fail with "dictionary changed size during iteration". Pickling at
the moment the task ends takes a snapshot, and the error for an unpicklable value
is raised right there, naming the task. The engine should therefore pickle on
the *worker* thread, right after the task returns and before its value is handed
to any other task, and pass the bytes along (see ``benchmarks/bench_checkpoint.py``
for what each side costs).

Nothing here relies on the GIL. Unpickling a checkpoint runs code named in it,
so a file that anyone but its owner could have written is refused before it is
read, and a new file is created private (see :mod:`dagexec._persist.checkpoint_file`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .._core.errors import CheckpointError
from .checkpoint_file import (
    check_contents,
    check_private,
    check_writable,
    create_private,
    damaged,
)

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "StoreClosedError",
    "describe_safely",
    "pickle_value",
]

log = logging.getLogger("dagexec")

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

# A batch is one transaction. Larger batches mean fewer fsyncs (more values per
# second when tasks finish faster than the disk syncs) but a longer wait before
# the first of them is reported committed, and more memory held in one write.
_BATCH_MAX_ITEMS = 1000
_BATCH_MAX_BYTES = 64 * 1024 * 1024

# Parameters per "IN (...)" query when reading; SQLite allows 32766 since 3.32,
# older builds 999. Smaller costs more round trips, larger risks the old limit.
_READ_CHUNK = 900

_BUSY_TIMEOUT_SECONDS = 30.0
_NAME_TEXT_MAX = 1000

_PICKLE_PROTOCOL = 5


class StoreClosedError(CheckpointError):
    """A save came after the store was closed, or after its writer failed (logged then)."""


def describe_safely(name: object) -> str:
    """``repr(name)`` for a message, even when the name's ``__repr__`` raises."""
    try:
        text = repr(name)
    except Exception:
        return f"<{type(name).__name__} name whose repr() raised>"
    if len(text) > _NAME_TEXT_MAX:
        text = text[: _NAME_TEXT_MAX - 3] + "..."
    return text


def pickle_value(value: Any, name: Hashable) -> bytes:
    """Pickle a task's value for the store; safe to call on any thread.

    Raises:
        CheckpointError: the value cannot be pickled; the message names the task
            and the value's type, ``__cause__`` is pickle's own error.
    """
    try:
        return pickle.dumps(value, protocol=_PICKLE_PROTOCOL)
    except Exception as exc:
        raise CheckpointError(
            f"task {describe_safely(name)} returned a {type(value).__name__} that cannot "
            f"be pickled for the checkpoint ({type(exc).__name__}: {exc}); return a "
            "picklable value, or run this graph without a checkpoint",
            task=name,
        ) from exc


def _digest(data: bytes) -> bytes:
    # hashlib releases the GIL for buffers over 2 KiB, so checking a large value
    # does not hold up the scheduler.
    return hashlib.blake2b(data, digest_size=16).digest()


def _connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is
    # exactly one batch and nothing is left open by the sqlite3 module's own rules.
    conn = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
    )
    return conn


class _Flush:
    """A marker in the write queue: set once everything queued before it is done."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = None  # sentinel: the writer drains what is before it, then exits
# (identity, task name, pickled value, parts): parts are the name key, code and
# constants digests, then (name key, identity) per dependency; b"" for none.
_Item = tuple[bytes, Hashable, bytes, bytes]


class _Writer:
    """All the writer thread touches. It holds no reference to the store, so a store
    that is dropped without ``close()`` can be collected, and its finalizer stops this.
    """

    def __init__(
        self,
        path: str,
        durable: bool,
        on_commit: Callable[[list[bytes]], None] | None,
        on_error: Callable[[CheckpointError], None] | None,
        max_value: int,
    ) -> None:
        self.path = path
        self.durable = durable
        self.on_commit = on_commit
        self.on_error = on_error
        self.queue: queue.SimpleQueue[_Item | _Flush | None] = queue.SimpleQueue()
        self.lock = threading.Lock()  # guards closed, the counters, errors, dead
        self.closed = False  # no more puts once True; the STOP is then in the queue
        self.committed = 0
        self.failed = 0
        self.errors: list[CheckpointError] = []  # kept for close() when no on_error
        self.dead = ""  # why the writer thread stopped on its own, if it did
        # Pickled bytes queued and not yet written: the backlog the unbounded
        # queue lets grow when tasks finish faster than the disk takes them.
        self.pending_bytes = 0
        self.peak_pending_bytes = 0
        self.max_value = max_value  # SQLite's SQLITE_LIMIT_LENGTH for this file
        self.thread = threading.Thread(
            target=self.loop, name="dagexec-checkpoint-writer", daemon=True
        )

    def put(self, item: _Item) -> None:
        if type(item[0]) is not bytes:
            # SQLite would accept None as a primary key and store it, unreachable.
            raise TypeError(
                f"task {describe_safely(item[1])}: identity must be bytes from "
                f"dagexec._persist.identity, got {type(item[0]).__name__}"
            )
        if len(item[2]) > self.max_value:
            # Refused here, so the caller hears of it at once, not later from the writer.
            raise CheckpointError(
                f"task {describe_safely(item[1])}: its pickled value is {len(item[2]):,} "
                f"bytes, more than the {self.max_value:,} SQLite stores in one value; return "
                "something smaller (a path to a file you write), or run without a checkpoint",
                task=item[1],
                path=self.path,
            )
        with self.lock:
            if self.closed:
                why = self.dead or "save before closing it"
                raise StoreClosedError(
                    f"checkpoint {self.path!r} is closed; {why}", task=item[1], path=self.path
                )
            self.queue.put(item)
            self.pending_bytes += len(item[2])
            if self.pending_bytes > self.peak_pending_bytes:
                self.peak_pending_bytes = self.pending_bytes

    def stop(self) -> None:
        """Queue the STOP (once) and wait for the writer, unless called from it.

        Used by ``close()`` and by the finalizer of a store dropped without
        closing, including at interpreter exit, so values already queued are
        written before the process ends.
        """
        with self.lock:
            if not self.closed:
                self.closed = True
                self.queue.put(_STOP)
        if threading.current_thread() is not self.thread and self.thread.is_alive():
            self.thread.join()

    def _drop_queued(self) -> None:
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Flush):
                item.done.set()
            elif item is not _STOP:
                with self.lock:
                    self.pending_bytes -= len(item[2])

    def report(self, error: CheckpointError) -> None:
        if self.on_error is not None:
            try:
                self.on_error(error)
                return
            except Exception as exc:
                error = CheckpointError(
                    f"checkpoint {self.path!r}: on_error raised {type(exc).__name__}: {exc}",
                    path=self.path,
                )
                error.__cause__ = exc
        with self.lock:
            self.errors.append(error)

    def loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(self.path)
            conn.execute("PRAGMA synchronous=" + ("FULL" if self.durable else "NORMAL"))
            while self._one_batch(conn):
                pass
        except BaseException as exc:
            # The writer must never die silently: whoever waits on a flush is
            # released below, and close() raises this.
            error = CheckpointError(
                f"checkpoint {self.path!r}: the writer thread failed "
                f"({type(exc).__name__}: {exc}); values queued after this were not saved",
                path=self.path,
            )
            error.__cause__ = exc
            with self.lock:
                self.dead = f"its writer failed ({type(exc).__name__}: {exc})"
            self.report(error)
        finally:
            with self.lock:
                self.closed = True
            self._drop_queued()  # releases any flush() still waiting
            if conn is not None:
                conn.close()

    def _one_batch(self, conn: sqlite3.Connection) -> bool:
        """Write one batch (blocking for its first item); False once STOP was seen."""
        batch: list[_Item] = []
        flushes: list[_Flush] = []
        size = 0
        item = self.queue.get()
        running = True
        while True:
            if item is _STOP:
                running = False
                break
            if isinstance(item, _Flush):
                flushes.append(item)
            else:
                batch.append(item)
                size += len(item[2])
                if len(batch) >= _BATCH_MAX_ITEMS or size >= _BATCH_MAX_BYTES:
                    break
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
        if batch:
            self._write(conn, batch)
        for flush in flushes:
            flush.done.set()
        return running

    def _write(self, conn: sqlite3.Connection, batch: list[_Item]) -> None:
        now = time.time()
        rows = [
            (identity, describe_safely(name), len(data), now, _digest(data), data)
            for identity, name, data, _ in batch
        ]
        names = [
            (parts[:16], row[1], row[0], parts)
            for row, (_, _, _, parts) in zip(rows, batch, strict=True)
            if parts
        ]
        try:
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
        except sqlite3.Error as exc:
            if len(batch) > 1:
                # One bad value must not cost its batch-mates their place: write
                # each alone, so every failure names exactly its own task.
                for item in batch:
                    self._write(conn, [item])
                return
            with self.lock:
                self.failed += 1
                self.pending_bytes -= rows[0][2]
            error = CheckpointError(
                f"checkpoint {self.path!r}: could not save the value of task {rows[0][1]} "
                f"({type(exc).__name__}: {exc}); it will be computed again on resume",
                task=batch[0][1],
                path=self.path,
            )
            error.__cause__ = exc
            self.report(error)
            return
        with self.lock:
            self.committed += len(batch)
            self.pending_bytes -= sum(row[2] for row in rows)
        if self.on_commit is not None:
            try:
                self.on_commit([item[0] for item in batch])
            except Exception as exc:
                error = CheckpointError(
                    f"checkpoint {self.path!r}: on_commit raised {type(exc).__name__}: {exc}",
                    path=self.path,
                )
                error.__cause__ = exc
                self.report(error)


class CheckpointStore:
    """Task values saved by identity in a SQLite file; see the module docstring.

    ``save_nowait``/``save_pickled_nowait`` never wait on disk and may be called
    from any thread; a dedicated writer thread commits them in batches. Reads
    (``load``, ``load_many``, ``stored``) see committed values only and may also
    be called from any thread. Use it as a context manager, or call ``close()``;
    a store dropped without either is closed by a finalizer (its queued values
    are still written).

    Args:
        path: the SQLite file; created if missing. Not ``":memory:"`` (the writer
            and the readers need to share it).
        durable: True (default): each commit is synced to disk (``synchronous=FULL``),
            so a reported commit survives a power cut. False: ``NORMAL``, which
            survives the process being killed but not a power cut; faster on
            slow disks.
        on_commit: called on the writer thread with the identities of each batch
            right after its ``COMMIT`` returned. Keep it short; it must not call
            ``close()`` or ``flush()``.
        on_error: called on the writer thread with a :class:`CheckpointError`
            (``.task`` set) for each value that could not be written (disk full,
            file locked by another process for longer than 30 s); the value is
            then simply not in the file. Without it, errors are kept and
            ``close()`` raises the first.

    Raises:
        CheckpointError: the file is not a database, is of another format
            version, or cannot be opened.
        ValueError: ``path`` is ``":memory:"`` or empty.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durable: bool = True,
        on_commit: Callable[[list[bytes]], None] | None = None,
        on_error: Callable[[CheckpointError], None] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise ValueError(
                f"checkpoint path must be a file, got {self.path!r}; an in-memory database "
                "cannot be shared by the writer thread and the readers"
            )
        self._reader = self._open()
        self._read_lock = threading.Lock()
        max_value = self._reader.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        self._writer = _Writer(self.path, durable, on_commit, on_error, max_value)
        # Dropped without close(): stop the writer (after it writes what is
        # queued). Also runs at interpreter exit, while the daemon writer is
        # still alive, so nothing queued is lost on a normal exit either.
        # Registered before the thread starts, so no thread exists without it.
        self._finalizer = weakref.finalize(self, _shutdown, self._writer, self._reader)
        self._writer.thread.start()

    def _open(self) -> sqlite3.Connection:
        # Before SQLite reads a byte: a file someone else could write is refused,
        # since loading unpickles (see _checkpoint_file).
        check_private(self.path)
        check_writable(self.path)
        create_private(self.path)
        try:
            conn = _connect(self.path)
        except sqlite3.Error as exc:
            raise CheckpointError(
                f"cannot open checkpoint {self.path!r} ({exc}); check that the directory "
                "exists and is writable",
                path=self.path,
            ) from exc
        try:
            check_contents(conn, self.path)
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
            (found,) = conn.execute(
                "SELECT value FROM dagexec_meta WHERE key = 'format'"
            ).fetchone()
        except sqlite3.Error as exc:
            conn.close()
            raise damaged(self.path, exc) from exc
        if found != FORMAT:
            conn.close()
            raise CheckpointError(
                f"checkpoint {self.path!r} has format {found!r}, this dagexec reads format "
                f"{FORMAT!r}; give another path or delete the file",
                path=self.path,
            )
        return conn

    # -- writing (any thread, never blocks on disk) --------------------------------

    def save_nowait(
        self, identity: bytes, value: Any, *, name: Hashable, parts: bytes = b""
    ) -> None:
        """Pickle ``value`` now, on this thread, and queue it for the writer.

        Raises:
            CheckpointError: the value cannot be pickled (nothing is queued), or the
                store is closed.
        """
        self._writer.put((identity, name, pickle_value(value, name), parts))

    def save_pickled_nowait(
        self, identity: bytes, data: bytes, *, name: Hashable, parts: bytes = b""
    ) -> None:
        """Queue bytes from :func:`pickle_value` for the writer; O(1), never blocks.

        ``parts`` (from :mod:`dagexec._persist.resume`) are what the identity was made of,
        kept per task name so that :func:`dagexec.explain` can say what changed.

        Raises:
            CheckpointError: the store is closed.
        """
        self._writer.put((identity, name, data, parts))

    @property
    def committed_count(self) -> int:
        """How many values this store has committed so far; safe from any thread."""
        with self._writer.lock:
            return self._writer.committed

    @property
    def pending_bytes(self) -> int:
        """Pickled bytes queued but not yet committed or failed; any thread.

        The write queue is unbounded so that no caller ever waits on the disk;
        this (and ``peak_pending_bytes``) is how to see what that costs in memory.
        """
        with self._writer.lock:
            return self._writer.pending_bytes

    @property
    def peak_pending_bytes(self) -> int:
        """The most ``pending_bytes`` has been since the store opened; any thread."""
        with self._writer.lock:
            return self._writer.peak_pending_bytes

    @property
    def failed_count(self) -> int:
        """How many queued values could not be written (each was reported); any thread."""
        with self._writer.lock:
            return self._writer.failed

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every value queued before this call is committed or failed.

        Returns False if ``timeout`` passed first. Must not be called on the
        writer thread (from ``on_commit``/``on_error``).
        """
        if threading.current_thread() is self._writer.thread:
            raise RuntimeError("flush() called from on_commit/on_error would wait for itself")
        marker = _Flush()
        with self._writer.lock:
            if self._writer.closed:
                return True  # the writer has drained, or is draining everything queued
            self._writer.queue.put(marker)
        return marker.done.wait(timeout)

    def close(self) -> None:
        """Write what is queued, stop the writer thread, close the file.

        Idempotent. Blocks until the writer thread has exited. If that wait is
        interrupted (a second Ctrl-C), the writer still finishes what was queued on
        its own and then exits; the interpreter does not wait for it.

        Raises:
            CheckpointError: the first write error, when no ``on_error`` was given.
        """
        if self._finalizer.alive:
            try:
                # Stopped before the finalizer is detached: if the interpreter exits
                # while this waits (close() called on a daemon thread, as a run's
                # driver does after Ctrl-C raised in the caller), the finalizer
                # still runs at exit and waits for the writer, so values queued
                # before are written, not lost with the daemon writer.
                self._writer.stop()
            finally:
                self._finalizer.detach()
                with self._read_lock:
                    self._reader.close()
        with self._writer.lock:
            errors, self._writer.errors = self._writer.errors, []
        if errors:
            raise errors[0]

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reading (any thread; committed values only) -------------------------------

    def stored(self, identities: Iterable[bytes]) -> set[bytes]:
        """Which of ``identities`` have a committed value; reads no values."""
        found: set[bytes] = set()
        for chunk in _chunks(identities):
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT identity FROM dagexec_values WHERE identity IN ({marks})", chunk
            )
            found.update(row[0] for row in rows)
        return found

    def load_many(self, identities: Iterable[bytes]) -> dict[bytes, Any]:
        """The committed, readable values among ``identities``, unpickled on this thread.

        A value that is damaged or no longer unpickles is left out, with a warning
        on the ``dagexec`` logger: the task is then simply computed again.
        """
        values: dict[bytes, Any] = {}
        for chunk in _chunks(identities):
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT identity, name, digest, value FROM dagexec_values"
                f" WHERE identity IN ({marks})",
                chunk,
            )
            for identity, name, digest, data in rows:
                if type(digest) is not bytes or type(data) is not bytes:
                    raise CheckpointError(
                        f"checkpoint {self.path!r}: the row of task {name} is unreadable "
                        f"(its value is a {type(data).__name__}, not bytes): the file was "
                        "changed by something other than dagexec. Delete it to start "
                        "afresh, or restore a copy",
                        path=self.path,
                    )
                ok, value = self._unpickle(name, digest, data)
                if ok:
                    values[identity] = value
        return values

    def load(self, identity: bytes) -> Any:
        """The committed value saved under ``identity``.

        Raises:
            KeyError: nothing readable is stored under it (missing, damaged, or no
                longer unpicklable; the last two are also logged as a warning).
        """
        values = self.load_many((identity,))
        try:
            return values[identity]
        except KeyError:
            raise KeyError(identity) from None

    def __len__(self) -> int:
        """How many values the file holds (committed by any process)."""
        ((count,),) = self._read("SELECT count(*) FROM dagexec_values", ())
        return int(count)

    def _read(self, sql: str, parameters: Sequence[object]) -> list[Any]:
        """Rows of a query on the reader; a file SQLite cannot read is a CheckpointError."""
        try:
            with self._read_lock:
                return self._reader.execute(sql, parameters).fetchall()
        except sqlite3.DatabaseError as exc:
            raise damaged(self.path, exc) from exc

    def _unpickle(self, name: str, digest: bytes, data: bytes) -> tuple[bool, Any]:
        if _digest(data) != digest:
            log.warning(
                "checkpoint %r: the stored value of task %s is damaged (digest mismatch); "
                "it will be computed again",
                self.path,
                name,
            )
            return False, None
        try:
            return True, pickle.loads(data)
        except Exception as exc:
            log.warning(
                "checkpoint %r: the stored value of task %s cannot be unpickled (%s: %s); "
                "it will be computed again",
                self.path,
                name,
                type(exc).__name__,
                exc,
            )
            return False, None


def _chunks(identities: Iterable[bytes]) -> Iterable[list[bytes]]:
    chunk: list[bytes] = []
    for identity in identities:
        if type(identity) is not bytes:
            raise TypeError(
                f"a task identity is bytes (see _persist.identity), got {type(identity).__name__}"
            )
        chunk.append(identity)
        if len(chunk) == _READ_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _shutdown(writer: _Writer, reader: sqlite3.Connection) -> None:
    # The finalizer of a store dropped without close(): must not reference the store.
    writer.stop()
    reader.close()
