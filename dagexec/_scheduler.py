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
    | RunState  | -------------------------------> trace Recorder, callbacks
    +-----------+   (pure: _runstate.py)            (one stream, in order)
          ^
      caller thread: waits for ``finished``; on Ctrl-C puts ABORT on ``results``

Ownership (nothing here relies on the GIL; every shared thing is either owned
by one thread or is a queue/Event, which has its own lock):

    =====================  ==========================  =========================
    what                   written by                  read by / ordered by
    =====================  ==========================  =========================
    RunState, Recorder,    the scheduler thread only   the caller, after
    Balance, Run fields                                ``finished`` is set
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

import contextlib
import contextvars
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from ._balance import Balance
from ._events import Hooks, PlanInfo
from ._messages import (
    CHAIN,
    DISPATCH,
    DONE,
    END,
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
from ._outcome import build_result
from ._plan import Plan
from ._result import _FINAL, RunResult
from ._result import DONE as S_DONE
from ._result import FAILED as S_FAILED
from ._runstate import RunState
from ._trace import Recorder

__all__ = ["ABORT", "Outcome", "Run"]

log = logging.getLogger("dagexec")

# How long the scheduler waits for a worker to take its next item when it has
# ready tasks and room under the cap, but every inbox is momentarily full (a
# worker has reported but not yet picked up). Shorter re-checks sooner but
# wakes the scheduler more often; the wait ends early on any result anyway.
_PICKUP_RETRY_SECONDS = 0.001


class _Abort:
    def __repr__(self) -> str:
        return "ABORT"


ABORT = _Abort()
"""Put on a run's results queue by the caller thread to stop the run (Ctrl-C)."""


class Outcome:
    """What the scheduler hands the caller: the result, and what to raise if anything."""

    __slots__ = ("error", "result")

    def __init__(self, result: RunResult | None, error: BaseException | None) -> None:
        self.result = result
        self.error = error


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
        self.plan = plan
        # The caller's context, copied into every task (None: it was empty).
        self.context = context
        self.inboxes = inboxes
        self.queue_cap = queue_cap
        self.max_in_flight = max_in_flight
        self.cap = min(max_in_flight, len(inboxes) * (queue_cap + 1))
        self.hooks = hooks
        self.capacity = dict(capacity or {})
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.finished = threading.Event()  # outcome is ready
        self.stop = threading.Event()  # set by the scheduler on a stop; read by chains
        self.cancelled = threading.Event()  # after an abort: nothing queued will start
        self.outcome: Outcome | None = None
        self.abort_requested = False  # written by the caller thread, read here
        self.begun = False  # scheduler thread only
        self.aborted = False
        self.callback_errors: list[BaseException] = []  # scheduler thread only
        observed = trace or bool(hooks.task_end or hooks.task_dispatch or hooks.task_start)
        self.state = RunState(
            plan, on_error=on_error, workers=len(inboxes), observed=observed, capacity=capacity
        )
        self.recorder: Recorder | None = None
        self.trace = trace
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
        except BaseException as exc:  # a bug here must still release the caller
            self.outcome = Outcome(None, exc)
        finally:
            for error in self.callback_errors:
                _release_scheduler_frames(error)
            self.callback_errors.clear()
            self.cancelled.set()
            self.finished.set()
            # This frame stays reachable from a callback error's traceback (through
            # f_back) after it returns; it must not keep the run alive from there.
            del self

    def _run(self) -> None:
        plan, state, hooks, balance = self.plan, self.state, self.hooks, self.balance
        workers = len(self.inboxes)
        self.started_at = started_at = self.now = perf_counter()
        if self.trace:
            self.recorder = Recorder(state, started_at)
        self.debug = log.isEnabledFor(logging.DEBUG)  # dispatch then pays one falsy test
        log.info(
            "run start: %d tasks, %d targets, %d workers, effective cap %d",
            len(plan),
            len(plan.targets),
            workers,
            self.cap,
        )
        if hooks.run_start:
            info = PlanInfo(
                tasks=plan.names,
                targets=tuple(plan.names[t] for t in plan.targets),
                workers=workers,
                queue_cap=self.queue_cap,
                max_in_flight=self.max_in_flight,
                effective_cap=self.cap,
            )
            self._call(hooks.run_start, info)
        get, empty, handle = self.results.get, self.results.empty, self._handle
        events = state.events
        while state.unfinished:
            if events:
                self._observe()
            if state.stopping and not self.stop.is_set():
                self._halt()
            if self.abort_requested and not self.aborted:
                handle(ABORT)
            pickup = False
            if not state.stopping:
                if state.in_flight > 1:
                    done = sum(state.ran_on)
                    mean = (self.now - started_at) * workers / done if done else 0.0
                    balance.steer(self.now, mean)
                if state.ready:
                    pickup = self._dispatch()
                if state.in_flight > 1:
                    balance.feed_idle(self.now)
            if state.in_flight == 0 and not pickup:
                break  # nothing can report any more: only reachable when stopping
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
            self._observe()

        if self.aborted:
            log.info("interrupted run: its last running tasks have finished")
            return  # the caller has gone; nobody reads an outcome
        result = build_result(self, perf_counter() - started_at)
        if log.isEnabledFor(logging.INFO):
            counts = Counter(s.name.lower() for s in result.status.values())
            log.info(
                "run end: %s in %.3f s; peak in flight %d of %d",
                ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                result.stats.wall_seconds,
                state.peak_in_flight,
                self.cap,
            )
        if hooks.run_end:
            self._call(hooks.run_end, result)
        self.outcome = Outcome(result, state.first_error)

    def _dispatch(self) -> bool:
        """Hand ready tasks to workers up to the cap; True if blocked by full inboxes."""
        state, cap = self.state, self.cap
        fns, chain_next, inboxes = state.fns, state.chain_next, self.inboxes
        pick, placed = self.balance.pick, self.balance.dispatched
        report, flags, stop, events = self.results.put, self.flags, self.stop, state.events
        context = self.context
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
                self._observe()
                if state.stopping:  # a callback raised: this one never goes out
                    state.take_back(task)
                    return False
            inboxes[worker].put_nowait(item)  # room was checked; we are the only producer
            del item
            placed(worker, self.now)
            if self.debug:
                log.debug(
                    "dispatch %r to worker %d (in flight %d of %d)",
                    state.names[task],
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
        if kind <= FAILED:  # DONE or FAILED: a job ended
            self.balance.held[worker] -= 1  # the balancer's view, updated once per item
            self.balance.last_seen[worker] = self.now
            state.finish(
                task, S_DONE if kind == DONE else S_FAILED, payload, worker, started, ended
            )
            state.release(task)
        elif kind == MEMBER:  # a chain member ended; the chain is still in flight
            state.finish(task, S_DONE, None, worker, started, ended)
        elif kind == STARTED:
            if state.events is not None:
                state.events.append(Event(START, task, worker))
        else:
            assert kind == CHAIN
            self.balance.held[worker] -= 1
            self.balance.last_seen[worker] = self.now
            done, ok, outcome, times = payload
            del payload
            last = len(task) - 1
            for k in range(done if ok else done + 1):
                member = task[k]
                if state.state[member] == S_DONE:  # reported as it ended (MEMBER)
                    continue
                t0, t1 = (times[2 * k], times[2 * k + 1]) if times is not None else (0.0, 0.0)
                if k == done:
                    state.finish(member, S_FAILED, outcome, worker, t0, t1)
                else:
                    value = outcome if k == last else None
                    state.finish(member, S_DONE, value, worker, t0, t1)
            del outcome
            state.release(task[0])

    def _observe(self) -> None:
        """Feed the trace and the callbacks from the run's events, in order."""
        events = self.state.events
        assert events is not None
        hooks, names, recorder = self.hooks, self.state.names, self.recorder
        now = perf_counter()
        for event in events:  # a callback error appends the cancels it causes
            if recorder is not None:
                recorder.record(event, now)
            kind = event.kind
            if kind == END:
                if hooks.task_end:
                    seconds = event.ended - event.started
                    self._call(hooks.task_end, names[event.task], _FINAL[event.state], seconds)
            elif kind == DISPATCH:
                if hooks.task_dispatch:
                    self._call(hooks.task_dispatch, names[event.task], event.worker)
            elif kind == START and hooks.task_start:
                self._call(hooks.task_start, names[event.task], event.worker)
        events.clear()

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
            self._observe()

    def _call(self, hooks: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each hook; one that raises stops the run like a failing task."""
        for hook in hooks:
            try:
                hook(*args)
            except BaseException as exc:
                note = f"dagexec: raised by callback {getattr(hook, '__qualname__', hook)!s}"
                exc.add_note(note)
                # Drop this frame from the traceback; main() clears the rest of the
                # scheduler's frames it links to once the run is over.
                if exc.__traceback__ is not None and exc.__traceback__.tb_next is not None:
                    exc.__traceback__ = exc.__traceback__.tb_next
                self.callback_errors.append(exc)
                self.state.fail(exc)


def _release_scheduler_frames(exc: BaseException) -> None:
    """Clear this module's finished frames that a callback error's traceback reaches.

    The callback's frame links to its caller's frame (``f_back``), and so on up
    the scheduler thread's stack, and those frames hold the run (``self``): all
    its values would live as long as the user keeps the exception. Frames still
    executing (``main`` itself) cannot be cleared and drop their locals as they return.
    """
    tb = exc.__traceback__
    # From the innermost frame we kept: _call's own when the hook is C code.
    frame = tb.tb_frame if tb is not None else None
    while frame is not None:
        if frame.f_code.co_filename == __file__:
            with contextlib.suppress(RuntimeError):  # still executing
                frame.clear()
        frame = frame.f_back
