"""What an *attempt* is, from dispatch to the return of its function: the one place.

An attempt is one call of a task's function on a worker thread. Only attempts of
tasks with a ``timeout=`` can outlive their task (a thread cannot be killed), so
only they get a :class:`LiveAttempt`; every other attempt ends for the run when
its function returns, and the run waits for that. The lifecycle::

    dispatched --> started --+--> returned   (in time: its value or error is used)
       |                     |
       |                     +--> timed out  (its deadline, counted from the
       |                             |        worker's own start stamp, passed
       |                             |        first; the task fails with
       |                             |        TaskTimeout, maybe retried; its
       |                             |        worker slot gets a new thread and
       |                             |        the run lets go of its slot, see
       |                             |        _engine/workers/crew.py)
       |                             +--> returned late (value dropped; its
       |                             |        resources are free again)
       |                             +--> abandoned (its run ended while it ran;
       |                                      the executor holds its resources)
       |                                      --> returned late (resources freed,
       |                                          the run then going is told)
       +--> taken back (a stop, before it started: it never runs)

Who decides "in time" or "timed out" is a race between the worker (its function
returned) and the driver (its deadline passed): :meth:`LiveAttempt.settle` lets
exactly one of them win, so a value is used only if the worker settled first,
and the worker settles "late" by itself when its own clock says so, however late
the driver heard of the start (a slow callback, CPU load).

What the rest of the engine may assume:

* a run's end: every task is final; attempts still running are timed-out ones,
  and become *abandoned* (:meth:`AttemptBook.abandon`): the caller does not wait
  for them, their worker was replaced when they timed out, and their resources
  stay held on the executor until they return (:meth:`AttemptBook.subscribe`
  tells the next run what is still held and when it comes back);
* a cancel or a stop: sets every running attempt's token; a timed-out attempt
  keeps running until its function returns, like any thread;
* a cleanup task: may ask :meth:`AttemptBook.running` which attempts of its
  ancestors still run, and wait on each one's ``done`` Event;
* a checkpoint: only a value the worker settled "in time" reaches the run state,
  so only such a value can be saved.

Threads: a LiveAttempt is made by the driver, stamped and settled by its worker,
settled or abandoned by the driver; the fields each writes are listed on the
class. The book's sets and the ``returned``/``abandoned`` flags are guarded by
the book's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable
from operator import attrgetter
from typing import Any

from ..._core.policy import Attempt, CurrentTask
from . import clock

__all__ = ["AttemptBook", "LiveAttempt", "Overran", "TimedAttempt"]

# What settle() records: who won the race.
IN_TIME, LATE, TIMED_OUT = "in time", "late", "timed out"


class LiveAttempt:
    """One attempt of a task with a ``timeout``, as long as its function runs.

    ``name``, ``number``, ``worker``, ``timeout``, ``needs`` (resource name ->
    amount) and ``run`` (the book's number of its run) are set by the driver
    before dispatch. ``started`` (the policy clock, None until it starts) and
    ``thread`` are written once by the worker when the function is entered.
    ``done`` is set once the function has returned (or raised).
    """

    __slots__ = (
        "_claim",
        "abandoned",
        "book",
        "decided",
        "done",
        "name",
        "needs",
        "number",
        "outcome",
        "returned",
        "run",
        "started",
        "thread",
        "timeout",
        "worker",
    )

    def __init__(
        self,
        book: AttemptBook,
        name: Hashable,
        number: int,
        worker: int,
        timeout: float,
        needs: tuple[tuple[str, float], ...],
        run: int,
    ) -> None:
        self.book = book
        self.name, self.number, self.worker = name, number, worker
        self.timeout, self.needs, self.run = timeout, needs, run
        self.started: float | None = None
        self.thread: threading.Thread | None = None
        self.outcome: str | None = None  # IN_TIME, LATE or TIMED_OUT, once settled
        self._claim = threading.Lock()
        # Set by the driver once it has dealt with a timeout it won (its worker
        # replaced or not): a late function waits for it before its thread goes
        # back to an inbox, so it never takes work from the slot's new thread.
        self.decided = threading.Event()
        self.done = threading.Event()
        self.returned = False  # the book's lock
        self.abandoned = False  # the book's lock

    def settle(self, outcome: str) -> bool:
        """Record ``outcome`` if nobody settled this attempt yet; True if this call did."""
        if not self._claim.acquire(blocking=False):
            return False
        self.outcome = outcome
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the attempt's function has returned; False if ``timeout`` passed."""
        return self.done.wait(timeout)

    def __repr__(self) -> str:
        return f"<attempt {self.number} of task {self.name!r} on worker {self.worker}>"


class Overran(Exception):  # a report's payload, never raised to users
    """What a worker reports instead of an attempt's value once the attempt is late.

    ``by_worker`` is True when the worker judged it late by its own clock before
    the driver's timer fired: the driver then times the task out on receipt.
    """

    def __init__(self, attempt: LiveAttempt, by_worker: bool) -> None:
        super().__init__(f"{attempt!r} returned after its timeout")
        self.attempt = attempt
        self.by_worker = by_worker


class TimedAttempt(Attempt):
    """A task's function wrapped for one attempt with a timeout (see the module doc)."""

    __slots__ = ("live",)

    def __init__(self, fn: Callable[..., Any], info: CurrentTask, live: LiveAttempt) -> None:
        super().__init__(fn, info)
        self.live = live

    def __call__(self, *args: Any) -> Any:
        live = self.live
        live.thread = threading.current_thread()
        live.started = clock.now()
        try:
            value = super().__call__(*args)
        except BaseException:
            in_time = self._in_time()
            live.book.returned(live)
            if in_time:
                raise
            value = None  # its error comes too late to count
        else:
            in_time = self._in_time()
            live.book.returned(live)
            if in_time:
                return value
        del value
        raise Overran(live, live.outcome == LATE)

    def _in_time(self) -> bool:
        live = self.live
        assert live.started is not None  # stamped on entry
        late = clock.now() - live.started > live.timeout
        if live.settle(LATE if late else IN_TIME):
            return not late
        # The driver timed it out first: wait until it has replaced this thread's
        # worker (or decided not to), so this thread never takes the new one's work.
        live.decided.wait()
        return False


_ABANDONED = attrgetter("abandoned")  # a filter made in C: no frame per run


class AttemptBook:
    """The executor's live attempts that outlived their deadline, across its runs.

    ``subscribe`` is called by the driver at a run's start and hands it what
    abandoned attempts still hold; while subscribed, the run is told (through
    its ``notify``) when one of them returns. Any thread may call
    :meth:`running`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Timed out, function not returned. Read without the lock by a run deciding
        # whether to subscribe: it only shrinks meanwhile (only a driver adds, and
        # one drives at a time), so a stale read costs a needless subscription.
        self.overrunning: set[LiveAttempt] = set()
        self._notify: Callable[[LiveAttempt], None] | None = None
        self.runs = 0  # numbers the runs, for LiveAttempt.run

    def subscribe(self, notify: Callable[[LiveAttempt], None]) -> tuple[int, list[LiveAttempt]]:
        """A run starts: its number, and the abandoned attempts still running.

        ``notify(attempt)`` is called (on the attempt's thread) when one of those,
        or one abandoned later, returns, until :meth:`unsubscribe`.
        """
        with self._lock:
            self.runs += 1
            self._notify = notify
            return self.runs, list(filter(_ABANDONED, self.overrunning))

    def unsubscribe(self, notify: Callable[[LiveAttempt], None]) -> None:
        with self._lock:
            if self._notify == notify:  # bound methods: equal, not the same object
                self._notify = None

    def timed_out(self, attempt: LiveAttempt) -> None:
        """The driver timed ``attempt`` out; it counts as running until it returns."""
        with self._lock:
            if not attempt.returned:
                self.overrunning.add(attempt)

    def returned(self, attempt: LiveAttempt) -> None:
        """``attempt``'s function returned (its own thread)."""
        with self._lock:
            attempt.returned = True
            self.overrunning.discard(attempt)
            notify = self._notify if attempt.abandoned else None
        attempt.done.set()
        if notify is not None:
            notify(attempt)

    def abandon(self, attempts: Collection[LiveAttempt]) -> list[LiveAttempt]:
        """A run let go of ``attempts`` (at their timeout, their worker replaced; or
        at its end): those still running are the executor's now, and whichever run
        is subscribed hears when they return. Returns those."""
        with self._lock:
            left = [a for a in attempts if not a.returned]
            for a in left:
                a.abandoned = True
                self.overrunning.add(a)
            return left

    def running(self, names: Collection[Hashable] | None = None) -> list[LiveAttempt]:
        """Attempts that outlived their deadline and still run (of tasks ``names``, if
        given, matched by task name; ``LiveAttempt.run`` tells runs apart). Each
        one's ``done`` Event (or ``wait()``) says when its function returns. For
        cleanup tasks, which wait for their ancestors' attempts."""
        with self._lock:
            found = list(self.overrunning)
        if names is None:
            return found
        return [a for a in found if a.name in names]
