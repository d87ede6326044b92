"""A run handed to the executor's scheduler thread, and the waits around it.

Every run that its caller does not drive itself (see :mod:`.caller_drives`) is
handed to the executor's scheduler thread (one per executor, started with the
first such run, reused by every later one), which takes them one at a time
(:func:`_scheduler_loop`). The caller waits for it with a timeout, so a
``KeyboardInterrupt`` is seen within :data:`_INTERRUPT_POLL_SECONDS` even when
it was raised with ``_thread.interrupt_main()``, which does not wake a thread
blocked on a lock. There the scheduler thread stays free of the caller: a
callback that blocks it cannot delay the caller's Ctrl-C. A run's ``timeout``
and a caller's Ctrl-C stop it from outside (:func:`_time_out`,
:func:`_stop_interrupted`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Protocol

from ..run.flag import Flag
from ..run.scheduler import Run
from .future import RunFuture

if TYPE_CHECKING:
    from ..._persist.checkpoint import CheckpointStore

log = logging.getLogger("dagexec")


# How often a waiting caller wakes to let a pending KeyboardInterrupt surface.
# Shorter notices Ctrl-C sooner; each wake costs a few microseconds of a thread
# that is otherwise asleep.
_INTERRUPT_POLL_SECONDS = 0.05

# How long to wait for the thread of a run interrupted inside Thread.start() to
# appear before concluding it never will (thread creation takes microseconds).
_LAUNCH_GRACE_SECONDS = 1.0

# How long an interrupted caller waits for the scheduler to take queued tasks
# back before re-raising anyway. The scheduler is never busy for long, so this
# only matters if it is stuck in a user callback.
_CANCEL_WAIT_SECONDS = 1.0


def _scheduler_loop(runs: queue.SimpleQueue[_Submission | None], slot: threading.Lock) -> None:
    """The scheduler thread: drive each run handed over, until None.

    Each waits for ``slot``, which a caller driving its own run holds meanwhile.
    It holds no reference to the executor, only to the queue (a queued run
    holds the executor, so that its workers outlive it).
    """
    while True:
        submission = runs.get()
        if submission is None:
            return
        with slot:
            submission.main()
        del submission  # do not keep a finished run's values alive while idle


class _Ending(Protocol):
    """A run as shutdown and the next run wait for it: a Run or a _Submission."""

    @property
    def cancelled(self) -> threading.Event: ...  # nothing of it queued will start

    @property
    def finished(self) -> threading.Event: ...  # nothing of it runs any more


class _Submission:
    """A queued run, its future and its checkpoint store, as the scheduler thread sees them."""

    __slots__ = ("__weakref__", "begun", "cancelled", "finished", "future", "owner", "run", "store")

    def __init__(
        self, owner: object, run: Run, future: RunFuture, store: CheckpointStore | None
    ) -> None:
        # The owner is held only so that an executor dropped with runs queued
        # stays alive (its workers with it) until they are over; never used.
        self.owner: object = owner
        self.run: Run | None = run  # None once over
        self.future, self.store = future, store
        self.begun = False
        # What Executor._abandoned and the stopper wait on: nothing queued will
        # start (the run's own event), and everything is over, store closed too.
        self.cancelled = run.cancelled
        self.finished = Flag()

    def main(self) -> None:
        """Drive the run (unless cancelled first), close its store, complete the future.

        A second call (``Executor.run`` queues it again after Ctrl-C) returns at once.
        """
        if self.begun:
            return
        self.begun = True
        run, future = self.run, self.future
        assert run is not None
        try:
            if future._start():
                run.main()  # returns once every task of the run has ended
            else:  # cancelled before it started: it never starts
                run.cancelled.set()
                run.finished.set()
        finally:
            if self.store is not None:
                # After the run: no task of it is running, all saves are queued.
                try:
                    self.store.close()
                except Exception:
                    log.exception("closing the checkpoint store failed")
                self.store = None
            outcome = run.outcome
            expired = None if run.expired is None else _timed_out_message(run, run.expired)
            # This frame stays reachable from a callback error's traceback (the
            # scheduler's frame's f_back): it must not keep the run alive from there.
            self.run = None
            del run
            self.owner = None
            if outcome is not None:
                future._finish(outcome.result, outcome.error)
                del outcome
            elif expired is not None:  # its timeout= stopped it: the timer may be late
                future._expire(expired)
            elif not future.done():  # only if the driver failed to publish anything
                future._finish(None, RuntimeError("dagexec: the run ended without an outcome"))
            self.finished.set()
            del future, self


def _stop_interrupted(
    submission: _Submission,
    run: Run,
    runs: queue.SimpleQueue[_Submission | None],
    exc: BaseException,
) -> None:
    """A caller waiting for its queued run was interrupted by ``exc``: cancel what
    is queued and wait until nothing of it will start (or, after a Ctrl-C, for
    its cleanup tasks); the tasks running finish in the background."""
    started = submission.future._cancel()
    # The interrupt may have come before the put: queue it again (a submission
    # that already began ignores the second call), so that it surely ends,
    # cancelling everything at once.
    runs.put(submission)
    if started:  # else it never starts: nothing to wait for (say, behind another
        # thread's run)
        if isinstance(exc, KeyboardInterrupt) and run.state.cleanup is not None:
            _stay_for_cleanup(run)
        else:
            run.cancelled.wait(_CANCEL_WAIT_SECONDS)


def _stay_for_cleanup(run: Run) -> None:
    """After a first Ctrl-C: wait while the run's cleanup tasks run (each within
    its own timeout); a second Ctrl-C raises at once and abandons them."""
    try:
        while not run.cancelled.wait(_INTERRUPT_POLL_SECONDS):
            pass
    except KeyboardInterrupt:
        run.abort(hard=True)
        raise


def _time_out(future: RunFuture, run: Run, timeout: float | None) -> None:
    """A run's ``timeout`` passed: stop it as a cancel does, fail it with TimeoutError.

    A run with cleanup tasks fails only once they have run (each within its own
    timeout): this call waits for them, on the timeout's own thread (or on the
    caller's, for ``Executor.run``, which then stays in the run meanwhile).
    """
    if future.done():
        return
    # Before the abort: a run with nothing running ends at once, and its end must
    # know that it was this (TimeoutError), not a driver that lost its outcome.
    run.expired = timeout
    run.abort()
    if run.state.cleanup is None:
        run.cancelled.wait(_CANCEL_WAIT_SECONDS)  # queued tasks taken back: the count settles
        future._expire(_timed_out_message(run, timeout))
    else:
        future._expire_after(_timed_out_message(run, timeout), run.cancelled)


def _timed_out_message(run: Run, timeout: float | None) -> str:
    finished = sum(run.state.ran_on)  # a read of ints the scheduler writes: a snapshot
    loaded = len(run.plan.loaded or ())
    total = len(run.plan)
    if loaded:
        finished = max(0, finished - loaded)
        total -= loaded
    return (
        f"the run timed out after {timeout:g} s with {finished} of {total} tasks finished; "
        "the rest were cancelled (tasks still running finish in the background and their "
        "values are dropped); raise timeout= or make the tasks faster"
    )


def _wait_unless_never_started(scheduler: threading.Thread, run: _Ending, event: str) -> None:
    """Wait for ``run``'s ``event``, unless its scheduler thread never started.

    A Ctrl-C inside ``Thread.start()`` can come before the thread exists; then
    the event would never be set. Creating a thread takes microseconds, so one
    that has no ident after the grace period never will.
    """
    flag: threading.Event = getattr(run, event)
    launch_deadline = time.monotonic() + _LAUNCH_GRACE_SECONDS
    while not flag.wait(_INTERRUPT_POLL_SECONDS):
        if scheduler.ident is None and time.monotonic() > launch_deadline:
            return
