"""The scheduler driver: moves messages between the inboxes, the results queue and
the run state machine. It decides nothing about tasks itself.

Data flow::

                      put_nowait (never blocks)          get (blocks)
    +-----------+  --> inbox 0  [queue_cap] ----------> worker 0 --+
    | scheduler |  --> inbox 1  [queue_cap] ----------> worker 1 --+
    |  thread   |  --> ...            Job | Chain                  |
    |           |  <-- results (unbounded SimpleQueue) <-----------+
    |  Run      |       Report | ABORT      put (never blocks)
    |   |       |
    |   v       |  take/dispatch/finish/release      events
    | RunState  | -------------------------------> Observer: trace Recorder,
    +-----------+   (pure: _runstate.py,             callbacks (one stream,
                     _fanout.py)                     in order: _observe.py)
          ^
      caller thread: hands the Run to the executor's scheduler thread (one per
      executor, reused by every run), waits for ``finished``; on Ctrl-C puts
      ABORT on ``results``

Ownership (nothing here relies on the GIL; every shared thing is either owned
by one thread or is a queue/Event, which has its own lock):

    =====================  ==========================  =========================
    what                   written by                  read by / ordered by
    =====================  ==========================  =========================
    runs queue (executor)  caller puts a Run           scheduler thread gets
                                                       (SimpleQueue lock)
    RunState, Observer,    the scheduler thread only   the caller, after
    Recorder, Balance,                                 ``finished`` is set
    Run fields
    inboxes                scheduler put/get_nowait    workers get (Queue lock)
    results                workers, caller (ABORT)     scheduler get (queue lock)
    ``stop`` Event         scheduler                   workers, between chain
                                                       members (Event lock)
    ``abort_requested``    caller (then puts ABORT)    scheduler; the ABORT on
                                                       ``results`` orders it
    outcome                scheduler, before           caller, after
                           ``finished.set()``          ``finished.wait()``
    =====================  ==========================  =========================

Why no circular wait can form: the scheduler never blocks on an inbox (it only
try-puts, and checks for space first because it is the only producer: the
executor's STOPs go in only once no run can put tasks any more), and a worker
never blocks on reporting (the results queue is unbounded). The one blocking
call of the scheduler is ``results.get``, and something is always on its way
there while any task is in flight.

Which worker gets a task, and rescuing tasks stuck behind a long one, is
:mod:`dagexec._balance`. Everything about tasks (order, readiness, resources,
values, skips and cancels) is :mod:`dagexec._runstate`. On a stop the driver
sets ``stop`` (chains stop between members), takes queued items back out of the
inboxes and cancels them; tasks already running finish; only then is the
outcome published.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Mapping
from time import perf_counter
from typing import Any

from ._balance import Balance
from ._events import Hooks
from ._messages import (
    CHAIN,
    DONE,
    FAILED,
    MEMBER,
    NOTIFY_START,
    START,
    STARTED,
    STOP,
    TIMED,
    Chain,
    Event,
    Item,
    Job,
)
from ._observe import OWN_FILES, Observer, release_frames
from ._outcome import Outcome, announce, conclude
from ._plan import Plan
from ._result import DONE as S_DONE
from ._result import FAILED as S_FAILED
from ._runstate import RunState
from ._safe import add_note, task_for_message
from ._trace import Recorder

__all__ = ["ABORT", "Outcome", "Run"]

log = logging.getLogger("dagexec")
OWN_FILES.add(__file__)  # callback errors' tracebacks reach these frames

# How long the scheduler waits for a worker to take its next item when it has
# ready tasks and room under the cap, but every inbox is momentarily full (a
# worker has reported but not yet picked up). Shorter re-checks sooner but
# wakes the scheduler more often; the wait ends early on any result anyway.
_PICKUP_RETRY_SECONDS = 0.001


def _nothing() -> None:
    return None


class _Abort:
    def __repr__(self) -> str:
        return "ABORT"


ABORT = _Abort()
"""Put on a run's results queue by the caller thread to stop the run (Ctrl-C)."""


class Run:
    """One run of a plan on a set of worker inboxes. :meth:`main` is the scheduler thread.

    ``abort`` may be called from any thread; everything else belongs to the
    scheduler thread until ``finished`` is set.
    """

    def __init__(
        self,
        plan: Plan,
        inboxes: list[queue.Queue[Item | None]],
        *,
        queue_cap: int,
        max_in_flight: int,
        on_error: str,
        hooks: Hooks,
        trace: bool,
        capacity: Mapping[str, float] | None = None,
        context: contextvars.Context | None = None,
    ) -> None:
        self.plan, self.inboxes, self.hooks = plan, inboxes, hooks
        self.queue_cap, self.max_in_flight = queue_cap, max_in_flight
        self.cap = min(max_in_flight, len(inboxes) * (queue_cap + 1))
        self.capacity = dict(capacity or {})
        self.context = context  # the caller's contextvars, copied per task (None: empty)
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.finished = threading.Event()  # outcome is ready
        self.stop = threading.Event()  # set by the scheduler on a stop; read by chains
        self.cancelled = threading.Event()  # after an abort: nothing queued will start
        self.outcome: Outcome | None = None
        self.abort_requested = False  # written by the caller thread, read here
        self.begun = self.aborted = False  # scheduler thread only, like all below
        observed = trace or bool(
            hooks.task_end or hooks.task_dispatch or hooks.task_start or hooks.map_expand
        )
        self.state = state = RunState(
            plan, on_error=on_error, workers=len(inboxes), observed=observed, capacity=capacity
        )
        self.trace = trace
        self.observer = Observer(hooks, state.names, None, state.fail)
        self.flags = (TIMED if trace or hooks.task_end else 0) | (
            NOTIFY_START if hooks.task_start else 0
        )
        self.balance = Balance(inboxes, queue_cap)
        self.now = 0.0  # when the current batch of reports arrived

    def abort(self) -> None:
        """Ask the run to stop; safe from any thread, including a signal handler.

        The flag stops the very next dispatch round (even one before the scheduler
        ever blocked on its results); the message wakes a scheduler that is blocked.
        """
        self.abort_requested = True
        self.results.put(ABORT)

    def main(self) -> None:
        """Drive the run to its end, on the scheduler thread. Never raises: errors go
        into ``outcome``. A second call (see ``Executor.run``) returns at once."""
        if self.begun:
            return
        self.begun = True
        try:
            self._run()
        except BaseException as exc:  # a bug here must still release the caller...
            add_note(exc, "dagexec: internal error in the scheduler; the run was stopped")
            self.outcome = Outcome(None, exc)
            # ...but only once none of this run's tasks is queued or running, so
            # that it cannot overlap the next run on these workers.
            self._drain_after_error()
        finally:
            for error in self.observer.errors:
                release_frames(error)
            self.observer.errors.clear()
            self.cancelled.set()
            # ``finished`` is set by the scheduler loop once it has let go of the
            # run (_executor._scheduler_loop). This frame stays reachable from a
            # callback error's traceback (through f_back) after it returns; it
            # must not keep the run alive from there.
            del self

    def _drain_after_error(self) -> None:
        """Stop the run without trusting its (possibly inconsistent) state; never raises.

        Takes every queued item back, then queues one probe per worker and waits
        for all of them: a worker answers its probe only after the item it was
        running, so once all have answered, nothing of this run runs any more.
        After an abort that already cancelled the queued tasks, STOPs may follow
        in the inboxes and a probe behind one would never be answered; then the
        items still on workers are all there is to wait on.
        """
        try:
            self.stop.set()  # chains stop between members
            results = self.results
            if self.cancelled.is_set():
                # The balancer's per-worker counts drop before a report reaches
                # the state machine, so they are right even if it failed mid-way.
                held = self.balance.held
                while sum(held) > 0:
                    msg = results.get()
                    if msg is not ABORT and msg[2] in (DONE, FAILED, CHAIN):
                        held[msg[0]] -= 1
                return
            for inbox in self.inboxes:
                while True:
                    try:
                        inbox.get_nowait()
                    except queue.Empty:
                        break
            probe = Job(results.put, -1, _nothing, (), 0, self.stop, None)
            for inbox in self.inboxes:
                inbox.put_nowait(probe)  # emptied above, and we are the only producer
            unanswered = len(self.inboxes)
            while unanswered:
                msg = results.get()
                if msg is not ABORT and msg[1] == -1:
                    unanswered -= 1
        except BaseException as exc:  # nothing better to do than to say so
            add_note(exc, "dagexec: the scheduler failed again while stopping the run")
            log.exception("stopping the run after an internal error failed")

    def _run(self) -> None:
        state, balance, workers = self.state, self.balance, len(self.inboxes)
        self.started_at = started_at = self.now = perf_counter()
        if self.trace:
            self.observer.recorder = Recorder(state, started_at)
        self.debug = log.isEnabledFor(logging.DEBUG)  # dispatch then pays one falsy test
        announce(self)
        get, empty, handle, events = (
            self.results.get,
            self.results.empty,
            self._handle,
            state.events,
        )
        while state.unfinished:
            if events:
                self.observer.drain(events)
            if state.stopping and not self.stop.is_set():
                self._halt()
            if self.abort_requested and not self.aborted:
                handle(ABORT)
            pickup = False
            if not state.stopping:
                if state.in_flight > 1:
                    done = sum(state.ran_on)
                    balance.steer(
                        self.now, (self.now - started_at) * workers / done if done else 0.0
                    )
                if state.ready:
                    pickup = self._dispatch()
                if state.in_flight > 1:
                    balance.feed_idle(self.now)
            if state.in_flight == 0 and not pickup:
                if not state.stopping:  # a bug: say so, never end as if it succeeded
                    state.fail(state.stuck_error())
                    continue  # report the cancels; the loop then ends
                break  # nothing can report any more
            try:
                msg = get(timeout=_PICKUP_RETRY_SECONDS) if pickup else get()
            except queue.Empty:
                self.now = perf_counter()
                continue
            self.now = perf_counter()
            handle(msg)
            del msg
            while not empty():
                handle(get())
        state.stop()  # a no-op unless the loop above broke out early
        if events:
            self.observer.drain(events)
        if self.aborted:
            log.info("interrupted run: its last running tasks have finished")
            return  # the caller has gone; nobody reads an outcome
        self.outcome = conclude(self, perf_counter() - started_at)

    def _dispatch(self) -> bool:
        """Hand ready tasks to workers up to the cap; True if blocked by full inboxes."""
        state, cap, inboxes = self.state, self.cap, self.inboxes
        fns, chain_next, events = state.fns, state.chain_next, state.events
        pick, placed = self.balance.pick, self.balance.dispatched
        report, flags, stop, context = self.results.put, self.flags, self.stop, self.context
        while state.ready and state.in_flight < cap:
            worker = pick()
            if worker < 0:
                return True
            task = state.take()
            if task < 0:
                return False  # every ready task waits for a resource
            args = state.dispatch(task, worker)
            item: Item
            if chain_next[task] < 0:
                item = Job(report, task, fns[task], args, flags, stop, context)
            else:
                members = [task]
                while chain_next[members[-1]] >= 0:
                    members.append(chain_next[members[-1]])
                unit = tuple([fns[m] for m in members])
                item = Chain(report, tuple(members), unit, args, flags, stop, context)
            del args
            if events:  # trace stamp and on_task_dispatch come before the put
                self.observer.drain(events)
                if state.stopping:  # a callback raised: this one never goes out
                    state.take_back(task)
                    return False
            inboxes[worker].put_nowait(item)  # room was checked; we are the only producer
            del item
            placed(worker, self.now)
            if self.debug:
                log.debug(
                    "dispatch %s to worker %d (in flight %d of %d)",
                    task_for_message(state.names[task]),
                    worker,
                    state.in_flight,
                    cap,
                )
        return False

    def _handle(self, msg: Any) -> None:
        state = self.state
        if msg is ABORT:
            if not self.aborted:  # else already handled, through abort_requested
                self.aborted = True
                unfinished = state.unfinished
                state.stop()
                self._halt()
                # Logged now, not when the loop ends: that can be much later, or never.
                log.warning(
                    "run interrupted: %d tasks cancelled, %d still running (they finish "
                    "in the background; their results are dropped)",
                    unfinished - state.unfinished,
                    state.in_flight,
                )
                self.cancelled.set()
            return
        worker, task, kind, payload, started, ended = msg
        if kind == MEMBER:  # a chain member ended; the chain is still in flight
            state.finish(task, S_DONE, None, worker, started, ended)
        elif kind == STARTED:
            if state.events is not None:
                state.events.append(Event(START, task, worker))
        else:  # a job or a chain is off its worker
            self.balance.held[worker] -= 1  # the balancer's view, updated once per item
            self.balance.last_seen[worker] = self.now
            if kind == CHAIN:
                state.chain_ended(task, payload, worker)
            else:
                outcome = S_DONE if kind == DONE else S_FAILED
                state.finish(task, outcome, payload, worker, started, ended)
                state.release(task)

    def _halt(self) -> None:
        """Stop chains between members and take back everything still queued."""
        self.stop.set()
        held = self.balance.held
        for w, inbox in enumerate(self.inboxes):
            while True:
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                assert item is not STOP  # STOPs go in only after a run's cancellation
                held[w] -= 1
                self.state.take_back(item.task if isinstance(item, Job) else item.tasks[0])
        if self.state.events:
            self.observer.drain(self.state.events)
