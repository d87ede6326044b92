"""The scheduler driver: moves messages between the inboxes, the results queue and
the run state machine, and decides nothing about tasks itself.

Which tasks are ready, in what order, with which arguments, and what a report
means for them is :mod:`dagexec._state.runstate`; which worker gets how many is
:mod:`dagexec._engine.balance`; what a job with a policy or a chain looks like is
:mod:`dagexec._engine.items`; attempt timeouts are :mod:`dagexec._engine.timers`. Starting,
ending, and surviving its own errors is the run's (:mod:`dagexec._engine.scheduler`).
Everything here runs on the one thread that drives the run.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from time import perf_counter
from typing import Any

from .._core.errors import Cancelled
from .._core.plan import Plan
from .._core.result import CANCELLED as S_CANCELLED
from .._core.result import DONE as S_DONE
from .._core.result import FAILED as S_FAILED
from .._observation.observer import Observer
from .._state.events import START, Event
from .._state.runstate import RunState
from . import clock
from .attempts import LiveAttempt, Overran
from .balance import Balance
from .depth import Depth
from .inbox import Inbox
from .items import chained_jobs, head, log_dispatch, plain_jobs, special_items, take_back
from .outcome import log_interrupted
from .timers import AttemptTimers
from .wire import (
    ABORT,
    CHAIN,
    DONE,
    FAILED,
    FREED,
    J_ARGS,
    MEMBER,
    NOT_STARTED,
    R_KIND,
    R_WORKER,
    STARTED,
    STOP,
    Item,
    Message,
    Report,
)

__all__ = ["ABORT", "Driver"]

log = logging.getLogger("dagexec")

# How long the driver waits for a worker to take its next item when it has
# ready tasks and room under the cap, but every inbox is momentarily full (a
# worker has reported but not yet picked up). Shorter re-checks sooner but
# wakes the driver more often; the wait ends early on any result anyway.
_PICKUP_RETRY_SECONDS = 0.001

# Longest the driver blocks while a retry or a timeout is pending: it then
# reads the clock again, so a timer is late by at most this much even if the
# clock jumps. Only runs with a task policy ever wait with a timer.
_TIMER_POLL_SECONDS = 0.05


class Driver:
    """The message loop of one run; its fields are set up by ``Run.__init__``."""

    plan: Plan
    inboxes: list[Inbox[Item | None]]
    results: queue.SimpleQueue[Message]
    state: RunState
    observer: Observer
    balance: Balance
    timers: AttemptTimers | None  # only in runs whose plan has a task policy
    # Resources of abandoned attempts of earlier runs, not free in this run until
    # their functions return (a FREED message): attempt -> what it holds here.
    lent: dict[LiveAttempt, tuple[tuple[int, Any], ...]]
    stop: threading.Event  # no item carrying it starts once it is set (see abort)
    hard_stop: threading.Event  # what cleanup tasks' items carry instead (see abort)
    cancelled: threading.Event  # nothing queued will start any more
    cap: int  # the current limit on items in flight
    bound: int  # the most it can be (RunStats.effective_cap)
    depth: Depth | None  # the memory-aware cap, when no bound was given
    flags: int
    context: contextvars.Context | None
    abort_requested: bool
    hard_requested: bool  # a second Ctrl-C: cleanup tasks are abandoned too
    aborted: bool
    hard_aborted: bool
    detachable: bool
    detached: bool
    wake_every: float | None
    started_at: float
    now: float  # when the current batch of reports arrived
    debug: bool

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
        if hard:
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

    def _loop(self) -> None:
        """Dispatch and take reports until the run is over (or, detachable, aborted)."""
        state, balance, events, timers = self.state, self.balance, self.state.events, self.timers
        wait: float | None = None
        while state.unfinished:
            # A stop takes effect (chains stop between members) before any callback
            # hears of it: a callback may be what lets a running task go on.
            if state.stopping and not self.stop.is_set():
                self._halt()
            if events:
                self.observer.drain(events)
            if self.abort_requested:
                self._abort()
            if (
                self.aborted
                and not self.cancelled.is_set()
                and (self.hard_aborted or not state.cleanup_pending())
            ):
                self.cancelled.set()  # the last cleanup task ended: nothing more goes out
            if self.aborted and self.detachable and self.cancelled.is_set():
                self.detached = True  # nothing queued can start: the caller may go
                return
            if timers is not None:
                wait = timers.due()
                if not state.unfinished:  # the last task timed out: its attempt is
                    continue  # not waited for (see _attempts.py)
            if not state.stopping and state.in_flight > 1:
                balance.steer(self.now, self.started_at, sum(state.ran_on))
            # Cleanup tasks (run_if="all_done") are dispatched during a stop too.
            pickup = bool(state.ready) and self._dispatch()
            if not state.stopping and state.in_flight > 1:
                balance.feed_idle(self.now)
            # Attempts let go at their timeout still run: their return (FREED) may
            # free resources or let a cleanup task through its gate.
            let_go = timers is not None and bool(timers.let_go)
            if (
                state.in_flight == 0
                and not pickup
                and wait is None
                and not self.lent
                and not let_go
            ):
                if not state.stopping:  # a bug: say so, never end as if it succeeded
                    state.fail(state.stuck_error())
                    continue  # report the cancels; the loop then ends
                break  # nothing can report any more
            if events:  # e.g. a timeout just now: the callbacks hear of it before
                continue  # the driver sleeps (the top of the loop halts first)
            batch = self._receive(pickup, wait)
            if batch:
                self._handle(batch)

    def _receive(self, pickup: bool, wait: float | None) -> list[Message]:
        """Block for reports, at most until a timer is due (``wait``) or an inbox
        may have room again (``pickup``); everything queued by then, or []."""
        if wait is not None:
            wait = max(0.0, min(wait, _PICKUP_RETRY_SECONDS if pickup else _TIMER_POLL_SECONDS))
        elif pickup:
            wait = _PICKUP_RETRY_SECONDS
        else:
            wait = self.wake_every  # None: until a report comes
        results = self.results
        try:
            batch = [results.get(timeout=wait)]
        except queue.Empty:
            batch = []
        self.now = perf_counter()
        if self.timers is not None:
            self.state.now = clock.now()  # a failed attempt's retry is due from now
        while not results.empty():
            batch.append(results.get())
        return batch

    def _dispatch(self) -> bool:
        """Hand ready tasks to workers up to the cap; True if blocked by full inboxes.

        They go out in one batch per worker (``Balance.share`` says how many each
        gets), each put into its inbox under one lock with at most one wake-up, so
        a worker does not wake to contend for the GIL while its batch is built.
        """
        state = self.state
        wanted = min(len(state.ready), self.cap - state.in_flight)
        if wanted <= 0:
            return False
        counts = self.balance.share(wanted)
        if state.policy is not None:
            build = special_items
        else:
            build = chained_jobs if self.plan.chained else plain_jobs
        events, stopping = state.events, state.stopping
        held = self.balance.held
        for worker, count in enumerate(counts):
            if not count:
                continue
            tasks, arguments = state.hand_out(count, worker, not held[worker])
            if len(tasks) < count:  # the other ready tasks wait for resources
                wanted = 0
            items = build(self, tasks, arguments)
            del arguments
            if not items:
                continue
            if events:  # trace stamps and on_task_dispatch come before the put
                self.observer.drain(events)
                if state.stopping and not stopping:  # a callback raised: none goes out
                    take_back(self, items)
                    return False
            self.inboxes[worker].put_all(items)  # room was checked; we are the only producer
            self.balance.dispatched(worker, self.now, len(items))
            if self.debug:
                log_dispatch(self, items, worker)
            del items
        return sum(counts) < wanted

    # Over ruff's complexity limit on purpose: one branch per report kind, for every report: a split
    # adds a call per report.
    def _handle(self, batch: list[Message]) -> None:  # noqa: C901
        """Apply what arrived on the results queue, in order, and let go of it.

        Jobs that returned a value (the bulk, on a graph of small tasks) go to the
        state machine together, in runs between the other messages.
        """
        state, timers, now = self.state, self.timers, self.now
        if self.depth is not None:
            self.cap = self.depth.after(batch)
        held, last_seen = self.balance.held, self.balance.last_seen
        returned: list[Report] = []
        for msg in batch:
            if msg is not ABORT and msg[R_KIND] == DONE and timers is None:
                held[msg[R_WORKER]] -= 1  # the balancer's view, updated once per item (as below)
                last_seen[msg[R_WORKER]] = now
                returned.append(msg)
                continue
            if returned:  # the ones before this message come first
                state.ended(returned)
                returned.clear()
            if msg is ABORT:
                self._abort()
                continue
            worker, task, kind, payload, started, ended = msg
            if kind == NOT_STARTED:  # refused by its worker: the run had stopped
                if not state.stopping or (self.hard_stop.is_set() and not self.hard_aborted):
                    # Only abort() sets the flags outside a stop: its request may
                    # still be on its way here, and the run must stop now, not
                    # cancel tasks one by one as if nothing happened.
                    self.hard_requested = self.hard_requested or self.hard_stop.is_set()
                    self._abort()
                held[worker] -= 1
                last_seen[worker] = now
                if timers is not None:
                    timers.forget(task)
                state.take_back(task)
            elif kind == MEMBER:  # a chain member ended; the chain is still in flight
                state.finish(task, S_DONE, None, worker, started, ended)
            elif kind == FREED:  # an attempt this run or an earlier one let go returned
                lent = self.lent.pop(task, None)
                if lent is not None:
                    state.give_back(lent)
                if timers is not None:
                    timers.freed(task)
            elif kind == STARTED:
                if state.events is not None:
                    state.events.append(Event(START, task, worker))
                if timers is not None:
                    timers.started(task, worker, now)
            elif timers is not None and kind == FAILED and type(payload) is Overran:
                # Its value is never used; it was off its worker already if the
                # run let go of it at its timeout (its worker got a new thread).
                if timers.overran(task, payload, worker, started, ended):
                    held[worker] -= 1
                    last_seen[worker] = now
            else:  # a job or a chain is off its worker
                held[worker] -= 1
                last_seen[worker] = now
                if kind == CHAIN:
                    state.chain_ended(task, payload, worker)
                else:
                    if timers is not None:
                        timers.ended(task)
                    outcome = S_DONE if kind == DONE else S_FAILED
                    if outcome == S_FAILED and state.stopping and isinstance(payload, Cancelled):
                        outcome = S_CANCELLED  # it obeyed the stop: not a failure of its own
                    number = state.attempt.get(task, 1)  # before a retry counts on
                    state.finish(task, outcome, payload, worker, started, ended)
                    state.release(task, number)
        if returned:
            state.ended(returned)
        batch.clear()

    def _abort(self) -> None:
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
            self.hard_stop.set()
        state = self.state
        unfinished = state.unfinished
        state.stop(hard=hard)
        self._halt()
        if first:  # logged now, not when the loop ends: that can be much later, or never
            log_interrupted(unfinished - state.unfinished, state.in_flight)
        # A cleanup task still to run holds the caller (a first Ctrl-C); after a
        # hard abort none starts any more, and the running ones are abandoned.
        if hard or not state.cleanup_pending():
            self.cancelled.set()

    def _halt(self) -> None:
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
