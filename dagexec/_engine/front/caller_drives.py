"""The caller-driven path: a plain :meth:`Executor.run` driven on the calling thread.

A plain run (no callbacks, no ``timeout``, no checkpoint, nothing queued before
it) is driven by the calling thread itself: handing the run to another thread
and waiting for it cost two thread hand-offs, about a third of a small run.
Ctrl-C must not raise inside the driver, so on the main thread SIGINT is turned
into a stop request meanwhile (:mod:`dagexec._engine.front.sigint`); after one, the
caller raises ``KeyboardInterrupt`` at once (once the run's cleanup tasks have
run, if it has any: a second Ctrl-C abandons them) and a thread of the run's
own waits for the tasks still running.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Mapping
from operator import methodcaller

from ..._core.result import RunResult
from ..._core.safe import add_note
from ..run.scheduler import Run
from .host import Host
from .run_checks import Job
from .sigint import SigintToAbort
from .submission import _INTERRUPT_POLL_SECONDS

_DONE = methodcaller("done")

_ESCAPED_NOTE = (
    "dagexec: raised while this thread drove a run, which was stopped: queued tasks "
    "never start, running ones finish in the background and their values are dropped"
)


def _plain(job: Job) -> bool:
    """Whether the caller may drive this run itself, as far as its options go
    (:func:`run_here` also asks about the thread and its SIGINT handler)."""
    return job.timeout is None and job.checkpoint is None and not job.hooks.any


def _take_over(run: Run, slot: threading.Lock) -> None:
    """Finish an interrupted run handed over by its caller, then let the next run in."""
    try:
        run.take_over()
    finally:
        slot.release()


def run_here(
    executor: Host, job: Job, capacity: Mapping[str, float], here: threading.Thread
) -> RunResult | None:
    """Drive a plain run on the calling thread (``here``); None if it must be queued
    instead.

    A run handed to the scheduler thread costs two thread hand-offs more
    (there and back), about a third of a small run (docs/performance.md, "Small runs").
    The caller may drive its own run only where nothing can raise inside
    the driver: not on the main thread, or on it with Python's own SIGINT
    handler, which is swapped meanwhile for one that asks the run to stop
    (:mod:`dagexec._engine.front.sigint`); and without callbacks, so that no user code
    runs on the caller's thread and delays its Ctrl-C. After Ctrl-C the run
    is left to a thread of its own, which waits for the running tasks, and
    KeyboardInterrupt is raised here at once, as on the queued path (after
    the run's cleanup tasks, if it has any, unless a second Ctrl-C came).

    The handler is swapped before ``_slot`` is taken and put back after it
    is let go: a KeyboardInterrupt raised between taking the slot and the
    ``try`` that lets it go would keep it (and ``_driver``) forever. The run
    is made and recorded as ``_last`` under ``_run_lock``, as a queued run
    is, so that a shutdown or a submit from another thread sees it.
    """
    on_main = here is threading.main_thread()
    sigint = SigintToAbort(on_main)
    if not sigint.stops_runs:
        return None
    run: Run | None = None
    interrupted, escaped = False, None
    with sigint:  # from here on Ctrl-C only asks runs to stop
        # Polled, so that a Ctrl-C while another thread holds the lock still raises.
        while not executor._run_lock.acquire(True, _INTERRUPT_POLL_SECONDS):
            if sigint.fired:
                raise KeyboardInterrupt
        run = _take_slot(executor, job, capacity, here)
        if run is not None:
            try:
                sigint.abort = run.request_abort
                if sigint.fired:  # Ctrl-C while taking the slot: stop at once
                    run.request_abort()
                run.main(detachable=True, wake_every=sigint.wake_every)
                if run.detached:  # Ctrl-C: queued tasks are cancelled, some still run
                    escaped = run.escaped  # or raised in the driver (a signal handler)
                    _finish_elsewhere(executor, run)
                    interrupted = True
            finally:
                _let_slot_go(executor, run)
    if run is None:
        if sigint.fired:  # while waiting for the lock
            raise KeyboardInterrupt
        return None
    outcome = run.outcome
    del run  # an error's traceback holds this frame: it must not pin the run
    if escaped is not None:
        add_note(escaped, _ESCAPED_NOTE)
        raise escaped
    if interrupted or sigint.fired:  # even one after the last task ended
        raise KeyboardInterrupt
    assert outcome is not None
    if outcome.error is not None:
        try:
            raise outcome.error
        finally:
            del outcome  # the caller's traceback should not pin the run's state
    result = outcome.result
    assert result is not None
    return result


def _let_slot_go(executor: Host, run: Run) -> None:
    """After driving ``run`` (or failing to start it): let ``_slot`` go, unless it
    was handed to the thread that finishes an interrupted run."""
    if not run.begun:  # never started: nothing of it will (shutdown waits)
        run.cancelled.set()
        run.finished.set()
    if not executor._slot_passed:
        executor._driver = None
        executor._slot.release()
    executor._slot_passed = False


def _take_slot(
    executor: Host, job: Job, capacity: Mapping[str, float], here: threading.Thread
) -> Run | None:
    """With ``_run_lock`` held: take ``_slot`` and make the run, recorded as the
    executor's last; or None if a queued or interrupted run must go first.
    Lets ``_run_lock`` go either way."""
    try:
        if executor._closed:
            raise RuntimeError("this Executor is shut down; create a new one to run")
        if (
            executor._stopper.abandoned is not None
            or not all(map(_DONE, executor._pending))
            or not executor._slot.acquire(blocking=False)
        ):
            return None  # a queued or interrupted run goes first: queue behind it
        try:
            run = executor._new_run(job, job.plan, capacity, contextvars.copy_context())
            executor._last = (here, weakref.ref(run))
            executor._driver = threading.get_ident()
        except BaseException:
            executor._slot.release()
            raise
        return run
    finally:
        executor._run_lock.release()


def _finish_elsewhere(executor: Host, run: Run) -> None:
    """Hand an interrupted run, and ``_slot``, to a thread that waits for its tasks."""
    thread = threading.Thread(
        target=_take_over, args=(run, executor._slot), name="dagexec-interrupted", daemon=True
    )
    executor._abandoned = (thread, run)
    executor._driver = None
    executor._slot_passed = True
    try:
        thread.start()  # SIGINT cannot raise here: it still only stops runs
    except BaseException:
        if thread.ident is None:  # no thread (say, none can be made): finish here
            executor._abandoned, executor._slot_passed = None, False
            run.take_over()
        raise
