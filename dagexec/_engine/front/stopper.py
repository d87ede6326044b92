"""Ending an executor's workers: the STOPs, put once no run can put tasks any more."""

from __future__ import annotations

import contextlib
import queue
import threading

from ..workers.crew import Crew
from ..workers.wire import STOP
from .submission import _Ending, _Submission, _wait_unless_never_started


class _Stopper:
    """Puts the STOPs that end an executor's workers, once no run can put tasks.

    Shared by the executor and its finalizer, so it must not refer to the executor:
    an executor dropped without ``shutdown()`` must become unreachable. Calling it
    again after an interrupted call puts only the STOPs still missing; once they
    are all in (or a helper thread will put them), calling it does nothing.
    """

    __slots__ = ("abandoned", "crew", "done", "posted", "runs", "scheduler")

    def __init__(
        self,
        crew: Crew,
        runs: queue.SimpleQueue[_Submission | None],
    ) -> None:
        self.crew = crew  # its lists change in place: a replaced worker's new thread
        # The executor's scheduler thread, once it makes one (with its first queued run).
        self.scheduler: threading.Thread | None = None
        self.runs = runs
        self.abandoned: tuple[threading.Thread, _Ending] | None = None
        self.posted = 0  # inboxes[:posted] have their STOP
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        abandoned = self.abandoned
        if abandoned is None or abandoned[1].cancelled.is_set():
            here = threading.current_thread()
            if here not in self.crew.threads and here is not self.scheduler:
                _post_stops(self)
                return
            # Only as the finalizer, run by a garbage collection on one of our
            # own workers, which might hold its inbox's (non-reentrant) lock at
            # this moment: post from another thread.
            abandoned = None
        # An interrupted run may still put tasks into the inboxes until it has
        # taken its queued ones back; STOPs go in after that, so the scheduler
        # stays the inboxes' only producer while it could produce (the caller
        # does not wait).
        threading.Thread(
            target=_post_stops,
            args=(self, *(abandoned or ())),
            name="dagexec-stop",
            daemon=True,
        ).start()
        self.done = True


def _post_stops(
    stopper: _Stopper,
    scheduler: threading.Thread | None = None,
    run: _Ending | None = None,
) -> None:
    """Put a STOP in every inbox still without one, after ``run`` (if any) took its tasks back.

    Each inbox is empty by then (every run is over or has cancelled what it
    queued), so the non-blocking put has room, unless an interrupted earlier call
    already put this very STOP.
    """
    if scheduler is not None and run is not None:
        _wait_unless_never_started(scheduler, run, "cancelled")
    stopper.crew.stopping = True  # a worker never started stays so: no STOP starts it
    inboxes = stopper.crew.inboxes
    while stopper.posted < len(inboxes):
        with contextlib.suppress(queue.Full):  # see above: this STOP is in already
            inboxes[stopper.posted].put_nowait(STOP)
        stopper.posted += 1
    if stopper.posted == len(inboxes):
        # The scheduler thread exits once idle (after an abandoned run's end). A
        # second None, after an interrupted call, finds it gone and is harmless.
        stopper.runs.put(None)
        stopper.posted += 1
    stopper.done = True
