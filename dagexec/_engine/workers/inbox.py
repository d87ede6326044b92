"""A worker's bounded inbox: a ``queue.Queue`` whose hot calls cost one lock each.

Every task passes through one ``put_nowait`` (scheduler) and one ``get`` (its
worker). ``queue.Queue`` routes both through ``threading.Condition``, whose
``notify``, ``__enter__`` and ``wait`` are Python code (``wait`` allocates a new
lock each time): a put and a get cost ~0.9 us together, against ~0.05 us for
a ``SimpleQueue`` (measured on the project machine, CPython 3.11). On no-op
graphs that was about a sixth of all the work per task.

Here a put appends under the mutex (which makes its bound check exact), and a
get that finds an item just pops it: ``deque.popleft`` is atomic on its own,
with or without a GIL. Only a consumer about to sleep takes the mutex, to say
so; it then sleeps on a lock of its own (``_wake``, held while nobody is
asleep) that the next put releases. So a put pays for a wake-up only when
someone sleeps, and a get that finds an item pays for no lock at all.

The contract is ``queue.Queue``'s for ``put_nowait``/``get``/``get_nowait``/
``qsize``/``empty``/``full``: bounded (``maxsize`` >= 1), FIFO, ``queue.Full``/
``queue.Empty`` as usual, timeouts honoured. Limits, all fine for a worker's
inbox: ``put`` never waits for room (it raises ``queue.Full``, as the scheduler,
the only producer, never puts into a full inbox), at most one thread may
*block* in ``get`` at a time (its worker; anyone may ``get_nowait``), and
``join()``/``task_done()`` are not supported.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from time import monotonic
from typing import TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(queue.Queue[T]):
    """A bounded ``queue.Queue`` for one blocking consumer; see the module docstring."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"an Inbox must be bounded: maxsize={maxsize!r}, need >= 1")
        # Not queue.Queue.__init__: its three Conditions (each ~5 us to make, a
        # sixth of what a fresh executor costs before its threads) serve only
        # the waits of put/get/join, which an Inbox replaces or does not support.
        # What the methods it keeps (qsize, empty, full) use is made here.
        self.maxsize = maxsize
        self._init(maxsize)
        self.mutex = threading.Lock()
        # Held whenever no consumer is asleep; released by the put that wakes it.
        self._wake = threading.Lock()
        self._wake.acquire()
        self._sleeping = False  # a consumer is about to wait, or waits, on _wake
        self._start: Callable[[], None] | None = None  # see start_on_put
        self._watch = -1  # a pipe's write end the next put writes to (see watch)

    def start_on_put(self, start: Callable[[], None]) -> None:
        """Have the first put call ``start`` (which starts the consumer) instead of
        waking one; before any put or get.

        The producer's put pays for the wake-up of a sleeping consumer anyway, so
        the check costs nothing on the path where the consumer is awake. A new
        consumer finds the items already there: it never sleeps to be woken
        for them (a worker started before the run would, one wake-up more).
        If ``start`` raises, the next put calls it again: it must start the
        consumer at most once however often it is called.
        """
        self._start = start
        self._sleeping = True  # the first put takes the branch that wakes or starts

    def put_nowait(self, item: T) -> None:
        """Append ``item`` or raise ``queue.Full``; never blocks."""
        self.put_all((item,))

    def put_all(self, items: Sequence[T]) -> None:
        """Append all of ``items`` (one lock, at most one wake-up), or none of them and
        raise ``queue.Full`` if they do not all fit; never blocks."""
        start = None
        with self.mutex:
            if len(self.queue) + len(items) > self.maxsize:
                raise queue.Full
            self.queue.extend(items)
            if self._sleeping:
                if self._watch < 0:
                    # Release first: an exception raised between the two (a signal
                    # handler's, on a main thread that drives its own run) must not
                    # leave the worker asleep with items in its deque. A release
                    # then repeated by the next put is a spurious wake-up, which
                    # get() takes in its stride.
                    try:  # noqa: SIM105 (no contextlib.suppress object on the hot path)
                        self._wake.release()
                    except RuntimeError:  # released already
                        pass
                    self._sleeping = False
                    # No consumer yet (see start_on_put): start it. The release
                    # above is then a spurious wake-up for its first sleep; it
                    # wakes a consumer that a start cut short by an exception did make.
                    start = self._start
                else:  # watched, not asleep in get(): see watch
                    self._tell_watcher()
        if start is not None:  # outside the lock: the new consumer may take it at once
            try:
                start()
            except BaseException:
                with self.mutex:
                    self._sleeping = True  # the next put tries again
                raise
            self._start = None  # the producer's only: no consumer reads it

    def _tell_watcher(self) -> None:
        """Write the byte a watching consumer waits for (the mutex held)."""
        self._sleeping = False
        watch, self._watch = self._watch, -1
        os.write(watch, b"\0")  # one byte per watch: never fills the pipe

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        """Append ``item`` or raise ``queue.Full``: an inbox never makes its producer
        wait (the scheduler only try-puts, and checks for room first)."""
        self.put_nowait(item)

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the oldest item, waiting for one if ``block``."""
        items, mutex = self.queue, self.mutex
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            if items:  # looked at first: a raised IndexError costs more than the test
                try:
                    item: T = items.popleft()  # atomic on its own, like a thief's (get_nowait)
                    return item
                except IndexError:
                    pass
            with mutex:
                if items:  # a put came in meanwhile
                    continue
                if not block:
                    raise queue.Empty
                self._sleeping = True  # a put from now on sees this and wakes us
            if deadline is None:
                self._wake.acquire()
            elif not self._wake.acquire(timeout=max(0.0, deadline - monotonic())):
                with mutex:
                    if self._sleeping:  # nobody woke us: time is up
                        self._sleeping = False
                        raise queue.Empty
                # A put woke us just as we gave up: take its release, then the item.
                self._wake.acquire()

    def watch(self, fd: int) -> bool:
        """Have the next put write a byte to ``fd`` (a pipe's write end), for a
        consumer that waits on something else (its child: a call sent early, see
        dagexec._engine.process.early); True, and nothing watched, if an item is
        here already. The consumer's thread only, not while it blocks in get;
        :meth:`unwatch` when done. A put pays for it only while watched."""
        with self.mutex:
            if self.queue:
                return True
            self._watch = fd
            self._sleeping = True  # the put takes its wake-up branch, and writes
        return False

    def unwatch(self) -> None:
        """Undo :meth:`watch` if no put has written yet."""
        with self.mutex:
            if self._watch >= 0:
                self._watch = -1
                self._sleeping = False

    def take_first(self, wanted: Callable[[T], bool]) -> T | None:
        """Remove and return the oldest item if ``wanted(item)`` (called under the
        mutex: it must be quick and take no lock), else None; never blocks. A thief
        (``get_nowait``, which pops without the mutex) may take that item in
        between: the next one is then returned, which the caller checks again."""
        with self.mutex:
            items = self.queue
            if not items or not wanted(items[0]):
                return None
            try:
                item: T = items.popleft()
            except IndexError:
                return None
            return item

    def get_nowait(self) -> T:
        """Remove and return the oldest item, or raise ``queue.Empty``."""
        return self.get(block=False)
