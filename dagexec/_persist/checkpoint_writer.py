"""The checkpoint's writer thread: queued values committed in batches, off the hot path.

Data flow::

    any thread                       writer thread ("dagexec-checkpoint-writer")
    ----------                       -------------------------------------------
    pickle_value(value)  (caller)
    Writer.put  --put-->  queue (unbounded) --get--> BEGIN; INSERT ...; COMMIT
                                                     then committed += n,
                                                     then on_commit(identities)

Ownership:

    ========================  ==================================================
    what                      who may touch it
    ========================  ==================================================
    the writer's connection   the writer thread only (opened and closed there)
    ``Writer.queue``          any thread puts (under ``Writer.lock``), writer gets
    ``Writer.committed``      writer writes, anyone reads, under ``Writer.lock``
    ========================  ==================================================

A value is counted committed (``committed``, ``on_commit``) only after
``COMMIT`` returned; with ``durable=True`` (``synchronous=FULL``) that also
survives a power cut, with ``durable=False`` (``NORMAL``) it survives the death
of the process but a power cut may lose the last commits. The writer never dies
silently: a failure is reported, and every ``flush`` waiting on it is released.
Nothing here relies on the GIL.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable

from .._core.errors import CheckpointError
from .checkpoint_format import Item, connect, insert_batch
from .checkpoint_values import describe_safely

__all__ = ["Flush", "StoreClosedError", "Writer"]

# A batch is one transaction. Larger batches mean fewer fsyncs (more values per
# second when tasks finish faster than the disk syncs) but a longer wait before
# the first of them is reported committed, and more memory held in one write.
_BATCH_MAX_ITEMS = 1000
_BATCH_MAX_BYTES = 64 * 1024 * 1024


class StoreClosedError(CheckpointError):
    """A save came after the store was closed, or after its writer failed (logged then)."""


class Flush:
    """A marker in the write queue: set once everything queued before it is done."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = None  # sentinel: the writer drains what is before it, then exits


class Writer:
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
        self.queue: queue.SimpleQueue[Item | Flush | None] = queue.SimpleQueue()
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

    def put(self, item: Item) -> None:
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
            if isinstance(item, Flush):
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
            conn = connect(self.path)
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
        batch: list[Item] = []
        flushes: list[Flush] = []
        size = 0
        item = self.queue.get()
        running = True
        while True:
            if item is _STOP:
                running = False
                break
            if isinstance(item, Flush):
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

    def _write(self, conn: sqlite3.Connection, batch: list[Item]) -> None:
        try:
            insert_batch(conn, batch)
        except sqlite3.Error as exc:
            if len(batch) > 1:
                # One bad value must not cost its batch-mates their place: write
                # each alone, so every failure names exactly its own task.
                for item in batch:
                    self._write(conn, [item])
                return
            _, name, data, _ = batch[0]
            with self.lock:
                self.failed += 1
                self.pending_bytes -= len(data)
            error = CheckpointError(
                f"checkpoint {self.path!r}: could not save the value of task "
                f"{describe_safely(name)} ({type(exc).__name__}: {exc}); it will be "
                "computed again on resume",
                task=name,
                path=self.path,
            )
            error.__cause__ = exc
            self.report(error)
            return
        with self.lock:
            self.committed += len(batch)
            self.pending_bytes -= sum(len(item[2]) for item in batch)
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
