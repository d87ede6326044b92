"""The caller-driven path: a plain :meth:`Executor.run` driven on the calling thread.

A plain run (no callbacks, no ``timeout``, no checkpoint, nothing queued before
it) is driven by the calling thread itself: handing the run to another thread
and waiting for it cost two thread hand-offs, about a third of a small run.
Ctrl-C must not raise inside the driver, so on the main thread SIGINT is turned
into a stop request meanwhile (:class:`SigintToAbort`); after one, the caller
raises ``KeyboardInterrupt`` at once (once the run's cleanup tasks have run, if
it has any: a second Ctrl-C abandons them) and a thread of the run's own waits
for the tasks still running.

**Ctrl-C as a message.** Python raises ``KeyboardInterrupt`` in the main thread
between any two bytecodes. Inside the driver that could leave the run state, or
a worker's inbox, half updated (an inbox whose sleeping worker is never woken).
So while the main thread drives a run, SIGINT goes to a handler that only asks
the run to stop (``Run.request_abort``: a flag and a message on the results
queue, both safe from a signal handler); the driver handles that at its next
step, leaves the running tasks to another thread, and the caller raises
``KeyboardInterrupt`` itself, at once. The previous handler is put back
afterwards. Only Python's own handler is swapped. A program that installed its
own SIGINT handler keeps it: :attr:`SigintToAbort.stops_runs` is then False and
its runs go to the executor's scheduler thread, as every run did before, where
no signal handler ever runs.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stubs
import contextvars
import signal
import threading
import weakref
from collections.abc import Callable, Mapping
from operator import methodcaller
from types import FrameType

from ..._core.result import RunResult
from ..._core.safe import add_note
from ..run.scheduler import Run
from .host import Host
from .run_checks import Job
from .submission import _INTERRUPT_POLL_SECONDS

_DONE = methodcaller("done")

# The C module under ``signal``: its ``signal`` and ``getsignal`` are the same
# calls without ``signal``'s enum conversions, which cost ~4-6 us a call here
# (they raise and catch a ValueError for a handler that is a function), against
# ~0.7 and ~0.2 us; a run swaps the handler twice. Same on 3.11 to 3.13t.
_getsignal: Callable[[int], object] = _signal.getsignal
_setsignal: Callable[[int, object], object] = _signal.signal

# How long the driver may block before it looks for an interrupt. A real SIGINT
# wakes its wait at once; ``_thread.interrupt_main()`` wakes nothing, so its
# handler runs only when the wait times out. The same as Executor.run's
# waiting caller (submission._INTERRUPT_POLL_SECONDS).
_WAKE_EVERY_SECONDS = 0.05

_ESCAPED_NOTE = (
    "dagexec: raised while this thread drove a run, which was stopped: queued tasks "
    "never start, running ones finish in the background and their values are dropped"
)


class SigintToAbort:
    """From its making until :meth:`put_back`, a SIGINT calls ``abort`` instead of
    raising (see the module's docstring).

    ``stops_runs``: whether a Ctrl-C can be turned into a stop while this thread
    drives a run (``on_main``: this is the main thread; the caller knows, and asks
    once). Threads other than the main thread never see a SIGINT. In the main
    thread it raises only through Python's default handler, which is swapped
    here; a SIGINT that is ignored or kills the process needs nothing. If False,
    nothing was swapped and the run goes to the scheduler thread.

    ``fired`` says whether a SIGINT came. ``wake_every`` is how long the driver may
    block (None: forever, off the main thread, where no handler runs).
    """

    __slots__ = ("abort", "fired", "previous", "stops_runs", "wake_every")

    def __init__(self, on_main: bool) -> None:
        # Set once the run exists; a Ctrl-C before that is only ``fired``.
        # ``Run.request_abort`` (signal-safe); its argument: a second Ctrl-C.
        self.abort: Callable[[bool], None] | None = None
        self.fired = False
        self.previous: object = None
        self.wake_every: float | None = None
        self.stops_runs = True
        if on_main:
            handler = _getsignal(signal.SIGINT)
            if handler is signal.default_int_handler:  # Python's own: ours to swap
                self.wake_every = _WAKE_EVERY_SECONDS
                self.previous = _setsignal(signal.SIGINT, self._handle)
            else:
                self.stops_runs = handler in (signal.SIG_IGN, signal.SIG_DFL)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        again = self.fired  # a second Ctrl-C abandons the run's cleanup tasks too
        self.fired = True
        if self.abort is not None:
            self.abort(again)

    def put_back(self) -> None:
        """Put the handler that was there before back; drop the run."""
        if self.previous is not None:
            # A SIGINT still pending now runs the handler put back: it raises
            # KeyboardInterrupt, as it would have without us.
            _setsignal(signal.SIGINT, self.previous)
            self.previous = None
        # A bound Run.request_abort would keep the run (its values) alive from the
        # caller's frame, which a task error's traceback holds.
        self.abort = None


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
    (:class:`SigintToAbort`); and without callbacks, so that no user code
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
    sigint = SigintToAbort(here is threading.main_thread())
    if not sigint.stops_runs:
        return None
    run: Run | None = None
    interrupted, escaped = False, None
    try:  # from here on Ctrl-C only asks runs to stop
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
    finally:
        sigint.put_back()
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
            or (executor._pending and not all(map(_DONE, executor._pending)))
            # (Positional: a keyword to a C method is gathered into a dict first.)
            or not executor._slot.acquire(False)
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
