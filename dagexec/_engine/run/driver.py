"""The driver of one run: moves messages, and decides nothing itself.

It blocks for reports on the results queue (no longer than a timer or a full
inbox allows), hands them to :func:`~dagexec._engine.run.reports.handle`, and puts
batches of jobs into the workers' inboxes. Everything it asks along the way is
answered elsewhere: which tasks are ready, in what order, with which arguments,
:mod:`dagexec._state.runstate`; which worker gets how many, and which are
stalled, :mod:`dagexec._engine.run.balance`; what a job looks like,
:mod:`dagexec._engine.run.items`; what a report means, :mod:`dagexec._engine.run.reports`;
stopping, aborting, detaching and a stuck run, :mod:`dagexec._engine.run.run_stop`;
attempt timeouts, :mod:`dagexec._engine.run.timers`; how deep the inboxes go,
:mod:`dagexec._engine.run.depth`. The run (:mod:`dagexec._engine.run.scheduler`) is
one record of all of these, made once: :class:`Driver` is a layer of it, as the
stop (:mod:`dagexec._engine.run.run_stop`) is the layer below, and the run starts
and ends the loop. Everything here runs on the one thread that drives the run.
"""

from __future__ import annotations

import contextvars
import queue
from itertools import repeat
from time import perf_counter

from ..._core.plan import Plan
from ..workers.inbox import Inbox
from ..workers.wire import Item, Message
from . import clock
from .depth import Depth
from .items import chained_jobs, log_dispatch, plain_jobs, special_items, take_back
from .reports import handle
from .run_stop import RunStop

__all__ = ["Driver"]

# How long the driver waits for a worker to take its next item when it has
# ready tasks and room under the cap, but every inbox is momentarily full (a
# worker has reported but not yet picked up). Shorter re-checks sooner but
# wakes the driver more often; the wait ends early on any result anyway.
_PICKUP_RETRY_SECONDS = 0.001

# Longest the driver blocks while a retry or a timeout is pending: it then
# reads the clock again, so a timer is late by at most this much even if the
# clock jumps. Only runs with a task policy ever wait with a timer.
_TIMER_POLL_SECONDS = 0.05


class Driver(RunStop):
    """The message loop of one run: the middle layer of the run's one record, over
    its stop (:class:`RunStop`) and under :class:`~dagexec._engine.run.scheduler.Run`,
    which sets every field. The fields below are the ones read here besides the
    stop's; the item builders (:mod:`dagexec._engine.run.items`) read what every job
    carries."""

    __slots__ = (
        "cap",
        "context",
        "debug",
        "depth",
        "flags",
        "inboxes",
        "now",
        "plan",
        "started_at",
        "wake_every",
    )

    plan: Plan
    inboxes: list[Inbox[Item | None]]
    depth: Depth | None  # the memory-aware cap, when no bound was given
    cap: int  # the current limit on items in flight
    flags: int
    context: contextvars.Context | None  # the caller's contextvars, copied per task
    wake_every: float | None  # the longest wait for a report (see Run.main)
    started_at: float
    now: float  # when the current batch of reports arrived
    debug: bool  # log each dispatch

    def loop(self) -> bool:
        """Dispatch and take reports until the run is over; True if it returned
        early instead, aborted and detachable (see :meth:`RunStop.settle`)."""
        state, balance, events, timers = self.state, self.balance, self.state.events, self.timers
        depth, apply = self.depth, handle
        wait: float | None = None
        while state.unfinished:
            if (state.stopping or self.abort_requested) and self.settle():
                return True  # aborted, and nothing queued can start: the caller may go
            if events:
                self.observer.drain(events)
            if timers is not None:
                wait = timers.due()
                if not state.unfinished:  # the last task timed out: its attempt is
                    continue  # not waited for (see attempts.py)
            if not state.stopping and state.in_flight > 1:
                balance.steer(self.now, self.started_at, state.ran_on)
            # Cleanup tasks (run_if="all_done") are dispatched during a stop too.
            pickup = bool(state.ready) and self._dispatch()
            if not state.stopping and state.in_flight > 1:
                balance.feed_idle(self.now)
            if state.in_flight == 0 and not pickup and wait is None:
                over = self.at_rest()
                if over:
                    break  # nothing can report any more
                if over is not None:  # a stuck run failed: report the cancels; then end
                    continue
            if events:  # e.g. a timeout just now: the callbacks hear of it before
                continue  # the driver sleeps (the top of the loop halts first)
            batch = self._receive(pickup, wait)
            if batch:
                if depth is not None:
                    self.cap = depth.after(batch)
                apply(self, batch, self.now)
        return False

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
            batch = [results.get(True, wait)]  # positional: no keyword parsing
        except queue.Empty:
            batch = []
        self.now = perf_counter()
        if self.timers is not None:
            self.state.now = clock.now()  # a failed attempt's retry is due from now
        # What is queued by now (what comes later waits for the next round), taken
        # in a loop of C calls: no bytecode per report.
        queued = results.qsize()
        if queued:
            batch.extend(map(queue.SimpleQueue.get, repeat(results, queued)))
        return batch

    def _dispatch(self) -> bool:
        """Hand ready tasks to workers up to the cap; True if blocked by full inboxes.

        They go out in one batch per worker (``Balance.share`` says how many each
        gets), each put into its inbox under one lock with at most one wake-up, so
        a worker does not wake to contend for the GIL while its batch is built.
        """
        state = self.state
        wanted = self.cap - state.in_flight
        ready = len(state.ready)
        if ready < wanted:  # not min(): a call, and its keywords parsed in C
            wanted = ready
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
