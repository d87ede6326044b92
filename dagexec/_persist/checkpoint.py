"""The checkpoint store: finished tasks' values in SQLite, written off the hot path.

A run with a checkpoint saves each finished task's pickled value under the task's
identity (:mod:`dagexec._persist.identity`); a later run loads the values whose identity
is stored instead of computing them again. The store must never slow the
scheduler down and must survive ``kill -9`` with nothing lost that it reported
committed, so it is four parts, each in its own module:

    ==========================  ==================================================
    module                      its job
    ==========================  ==================================================
    ``checkpoint`` (this)       the store: save, flush, close, load; any thread
    ``checkpoint_writer``       the writer thread: queued values committed in
                                batches, the counters, the errors it reports
    ``checkpoint_format``       the file: tables, format version, the one write
    ``checkpoint_values``       a value as bytes: pickled on the caller's thread,
                                its digest checked on every load
    ``checkpoint_file``         whether a file may be opened at all
    ==========================  ==================================================

Data flow::

    any thread                       writer thread ("dagexec-checkpoint-writer")
    ----------                       -------------------------------------------
    pickle_value(value)  (caller)
    save_pickled_nowait  --put-->  queue (unbounded) --get--> BEGIN; INSERT ...; COMMIT
    load / load_many / stored  ----> reader connection (WAL snapshot: committed rows only)

The reader connection may be used by any thread, under
``CheckpointStore._read_lock``; the writer's ownership table is in
:mod:`dagexec._persist.checkpoint_writer`. Nothing here relies on the GIL.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .._core.errors import CheckpointError
from .checkpoint_file import damaged, resolve_link
from .checkpoint_format import open_checked
from .checkpoint_values import pickle_value, unpickle_checked
from .checkpoint_writer import Flush, Writer

__all__ = ["CheckpointStore"]

# Parameters per "IN (...)" query when reading; SQLite allows 32766 since 3.32,
# older builds 999. Smaller costs more round trips, larger risks the old limit.
_READ_CHUNK = 900


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
        # A link is followed once, here: the reader, the writer and the checks all
        # use the file it pointed to then (see checkpoint_file).
        self.path = resolve_link(self.path)
        self._reader = open_checked(self.path)
        self._read_lock = threading.Lock()
        max_value = self._reader.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        self._writer = Writer(self.path, durable, on_commit, on_error, max_value)
        # Dropped without close(): stop the writer (after it writes what is
        # queued). Also runs at interpreter exit, while the daemon writer is
        # still alive, so nothing queued is lost on a normal exit either.
        # Registered before the thread starts, so no thread exists without it.
        self._finalizer = weakref.finalize(self, _shutdown, self._writer, self._reader)
        self._writer.thread.start()

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
        marker = Flush()
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
                ok, value = unpickle_checked(self.path, name, digest, data)
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


def _shutdown(writer: Writer, reader: sqlite3.Connection) -> None:
    # The finalizer of a store dropped without close(): must not reference the store.
    writer.stop()
    reader.close()
