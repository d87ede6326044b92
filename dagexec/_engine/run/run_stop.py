"""How one run stops: an abort from outside, a halt from inside, cancel and detach.

A run stops from inside (a failure with on_error="raise", a callback's error: the
run state says ``stopping``) or from outside (a cancel, the run's timeout,
Ctrl-C: :meth:`RunStop.abort` or, from a signal handler, :meth:`RunStop.request_abort`).
Either way every queued item is taken back and the run's ``stop`` flag set
(:meth:`RunStop.halt`); an abort also cancels what was not handed out, sets
``cancelled`` once no queued task can start (after the run's cleanup tasks,
unless a second Ctrl-C abandoned them), and then lets a caller that drives its
own run go (``detachable``). The driver (:mod:`dagexec._engine.run.driver`) asks
:meth:`RunStop.settle` once per round while any of this is pending, and
:meth:`RunStop.at_rest` when nothing is in flight.

``abort`` and ``request_abort`` may be called from any thread; everything else
belongs to the thread that drives the run.
"""

from __future__ import annotations

import queue
from typing import Any

from ..._observation.observer import Observer
from ..._state.runstate import RunState
from ..workers.wire import ABORT, J_ARGS, STOP, Message
from .attempts import LiveAttempt
from .balance import Balance
from .flag import Flag
from .items import head
from .outcome import log_interrupted
from .timers import AttemptTimers

__all__ = ["RunStop"]


class RunStop:
    """The stop of one run: its requests and what the driver does about them.

    The bottom layer of the run's one record (:class:`~dagexec._engine.run.driver.Driver`
    over it, :class:`~dagexec._engine.run.scheduler.Run` on top, which sets every
    field): the fields below are the ones read here. Every field of the run is a
    slot: it has too many for an instance dict whose keys are shared (30 in
    CPython), so each run would build a dict of its own, key by key.
    """

    __slots__ = (
        "abort_requested",
        "aborted",
        "balance",
        "cancelled",
        "detachable",
        "hard_aborted",
        "hard_requested",
        "hard_stop",
        "lent",
        "observer",
        "results",
        "state",
        "stop",
        "timers",
    )

    state: RunState
    observer: Observer
    balance: Balance
    timers: AttemptTimers | None  # only in runs whose plan has a task policy
    results: queue.SimpleQueue[Message]
    lent: dict[LiveAttempt, tuple[tuple[int, Any], ...]]  # see Run._borrow
    stop: Flag  # no item carrying it starts once it is set (see abort)
    hard_stop: Flag | None  # what cleanup tasks' items carry instead (None: no such task)
    cancelled: Flag  # nothing queued will start any more
    abort_requested: bool  # written by abort(), on any thread
    hard_requested: bool  # likewise: a second Ctrl-C
    aborted: bool  # the driving thread only, like all below
    hard_aborted: bool
    detachable: bool  # see Run.main

    def abort(self, hard: bool = False) -> None:
        """Stop the run (a cancel, the run's timeout); safe from any thread but
        not from a signal handler (see :meth:`request_abort`).

        Once this returns no task of the run starts any more, but for one per
        worker already past its stop check: the stop flag every queued item
        carries is set here, not later by the driver, so a worker refuses what
        it takes from its inbox even while the driver is busy (in a callback,
        say). Cleanup tasks (run_if="all_done") still run, unless ``hard``: their
        items carry ``hard_stop`` instead.
        """
        if hard and self.hard_stop is not None:
            self.hard_stop.set()
        self.stop.set()
        self.request_abort(hard)

    def request_abort(self, hard: bool = False) -> None:
        """Ask the driver to stop the run; safe from a signal handler on any thread.

        Only a flag and a put on a ``SimpleQueue`` (reentrant): setting an Event
        here could deadlock on its lock, held by the very thread the handler
        interrupted. The driver sets the stop flags itself when it handles the
        request. The flag stops the very next dispatch round (even one before
        the driver ever blocked on its results); the message wakes a driver
        that is blocked. ``hard`` (a second Ctrl-C) abandons cleanup tasks too.
        """
        if hard:
            self.hard_requested = True
        self.abort_requested = True
        self.results.put(ABORT)

    def settle(self) -> bool:
        """One round's part of a stop (the run is stopping, or an abort was asked
        for); True once an aborted run may let its caller go (``detachable``).

        A stop takes effect (chains stop between members) before any callback
        hears of it: a callback may be what lets a running task go on.
        """
        state = self.state
        if state.stopping and not self.stop.is_set():
            self.halt()
        if state.events:
            self.observer.drain(state.events)
        if self.abort_requested:
            self.apply_abort()
        if not self.aborted:
            return False
        if not self.cancelled.is_set() and (self.hard_aborted or not state.cleanup_pending()):
            self.cancelled.set()  # the last cleanup task ended: nothing more goes out
        return self.detachable and self.cancelled.is_set()  # nothing queued can start

    def apply_abort(self) -> None:
        """The caller asked to stop (Ctrl-C, a cancel, the run's timeout): cancel what
        is queued, drop what runs; cleanup tasks still run, unless this is a hard
        abort (a second Ctrl-C), which abandons them too."""
        hard = self.hard_requested
        if self.aborted and (self.hard_aborted or not hard):
            return  # already handled, through abort_requested
        first = not self.aborted
        self.aborted = True
        if hard:
            self.hard_aborted = True
            if self.hard_stop is not None:
                self.hard_stop.set()
        state = self.state
        unfinished = state.unfinished
        state.stop(hard=hard)
        self.halt()
        if first:  # logged now, not when the loop ends: that can be much later, or never
            log_interrupted(unfinished - state.unfinished, state.in_flight)
        # A cleanup task still to run holds the caller (a first Ctrl-C); after a
        # hard abort none starts any more, and the running ones are abandoned.
        if hard or not state.cleanup_pending():
            self.cancelled.set()

    def refused(self) -> None:
        """A worker refused an item: the run had stopped.

        Only :meth:`abort` sets the flags outside a stop: its request may still
        be on its way to the driver, and the run must stop now, not cancel tasks
        one by one as if nothing happened.
        """
        hard_stop = self.hard_stop is not None and self.hard_stop.is_set()
        if not self.state.stopping or (hard_stop and not self.hard_aborted):
            self.hard_requested = self.hard_requested or hard_stop
            self.apply_abort()

    def halt(self) -> None:
        """Set the stop flag and take back everything still queued: cancelled, but
        for cleanup tasks in a soft stop, which go back to wait for dispatch."""
        self.stop.set()
        state, timers = self.state, self.timers
        if timers is not None:
            timers.stop_all(spare_cleanup=not state.hard)  # running attempts see the stop
        for item in self.balance.take_back_all():
            assert item is not STOP  # STOPs go in only after a run's cancellation
            task = head(item)
            if state.put_back(task, item[J_ARGS]):  # a cleanup task: it still runs
                if timers is not None:
                    timers.forget(task)
            else:
                state.take_back(task)
        if state.events:
            self.observer.drain(state.events)

    def at_rest(self) -> bool | None:
        """Nothing is in flight, dispatch is not waiting for room and no timer is
        pending: may the driver still wait for a report?

        None: yes, an attempt let go at its timeout, or one of an earlier run, is
        still to return (a FREED report). True: no, and the run is over. False: no,
        yet the run was not stopping: it was stuck, a bug, and it fails here (never
        ends as if it succeeded); the driver goes round once more to report the
        cancels.
        """
        if self.lent or (self.timers is not None and self.timers.holds):
            return None
        state = self.state
        if state.stopping:
            return True
        state.fail(state.stuck_error())
        return False
