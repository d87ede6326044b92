"""The scheduler: one thread per run that owns all of the run's mutable state.

Data flow::

                      put_nowait (never blocks)          get (blocks)
    +-----------+  --> inbox 0  [queue_cap] ----------> worker 0 --+
    | scheduler |  --> inbox 1  [queue_cap] ----------> worker 1 --+
    |  thread   |  --> ...                                         |
    +-----------+  <-- results (unbounded SimpleQueue) <-----------+
          ^  get: the scheduler's only blocking call        put (never blocks)
          |
      caller thread: waits for ``finished``; on Ctrl-C puts ABORT on ``results``

Ownership:

    =====================  ==========================================
    what                   who may touch it
    =====================  ==========================================
    every ``Run`` field    the scheduler thread only (marked below)
    inboxes                scheduler puts/drains, worker gets
    results                workers and the caller put, scheduler gets
    outcome, finished      written by the scheduler, then read by the
                           caller after ``finished`` is set
    =====================  ==========================================

Why no circular wait can form: the scheduler never blocks on an inbox (it only
try-puts, and checks for space first because it is the only producer: the
executor's STOPs go in only once no run can put tasks any more), and a worker
never blocks on reporting (the results queue is unbounded). The one blocking
call of the scheduler is ``results.get``, and something is always on its way
there while any task is in flight. Nothing here relies on the GIL.

Policies, each written down once:

* Ready tasks are dispatched first-in first-out, to the worker holding the
  fewest tasks (queued + running) whose inbox has room; :mod:`dagexec._balance`
  steers work away from a worker stuck on a long task and moves tasks waiting
  behind it, so a ready task is never stuck while a worker has nothing to do.
* A value is dropped as soon as the last task that needs it has been handed
  its arguments (targets are kept), so a long chain of large values holds O(1)
  of them, not O(n).
* A linear run of tasks (``Plan.chain_next``) is dispatched as one unit: it
  takes one in-flight slot and one hand-off, and its members still end one by
  one in ``status``, ``trace`` and the callbacks (``on_task_dispatch`` is called
  for its first task only, since the unit is what occupies the slot).
* On a stop (a failure with ``on_error="raise"``, a ``BaseException`` from a
  task, a callback error, or an abort): nothing more is dispatched, tasks still
  in inboxes are taken back and cancelled, units stop between members (the
  ``stop`` flag), tasks already running finish, and only then is the outcome
  published.
* Names, exceptions and callbacks are user objects: rendering them for a note
  or a log line never raises (a hostile ``__repr__``, ``__str__`` or
  ``__notes__`` gets a stand-in). Should the scheduler fail anyway (a bug), it
  still stops the run, takes queued tasks back and waits for the running ones
  before the caller gets the error (:meth:`Run._drain_after_error`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import queue
import threading
from collections import Counter, deque
from collections.abc import Callable, Hashable
from time import perf_counter
from typing import Any

from ._balance import Balance
from ._errors import describe
from ._events import Hooks, PlanInfo
from ._outcome import build_result
from ._plan import Plan
from ._result import CANCELLED as S_CANCELLED
from ._result import DONE as S_DONE
from ._result import FAILED as S_FAILED
from ._result import (
    IN_FLIGHT,
    READY,
    WAITING,
    RunResult,
    TaskState,
)
from ._result import SKIPPED as S_SKIPPED
from ._worker import (
    DONE,
    FAILED,
    IS_UNIT,
    MEMBER_DONE,
    NOTIFY_START,
    STARTED,
    STOP,
    TIMED,
    UNIT,
    WorkItem,
)

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
        inboxes: list[queue.Queue[WorkItem | None]],
        *,
        queue_cap: int,
        max_in_flight: int,
        on_error: str,
        hooks: Hooks,
        trace: bool,
        context: contextvars.Context | None = None,
    ) -> None:
        self.plan = plan
        # The caller's context, copied into every task (None: it was empty).
        self.context = context
        self.inboxes = inboxes
        self.queue_cap = queue_cap
        self.max_in_flight = max_in_flight
        self.cap = min(max_in_flight, len(inboxes) * (queue_cap + 1))
        self.on_error = on_error
        self.hooks = hooks
        self.trace = trace
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.finished = threading.Event()  # outcome is ready
        self.stop = threading.Event()  # set by the scheduler on a stop; read by units
        self.cancelled = threading.Event()  # after an abort: nothing queued will start
        self.outcome: Outcome | None = None
        self.abort_requested = False  # written by the caller thread, read here
        self.callback_errors: list[BaseException] = []  # scheduler thread only

    def abort(self) -> None:
        """Ask the run to stop; safe from any thread, including a signal handler.

        The flag stops the very next dispatch round (even one before the scheduler
        ever blocked on its results); the message wakes a scheduler that is blocked.
        """
        self.abort_requested = True
        self.results.put(ABORT)

    # ------------------------------------------------------------------ thread
    def main(self) -> None:
        """The scheduler thread's body. Never raises: errors go into ``outcome``."""
        try:
            self._run()
        except BaseException as exc:  # a bug here must still release the caller...
            _add_note(exc, "dagexec: internal error in the scheduler; the run was stopped")
            self.outcome = Outcome(None, exc)
            # ...but only once none of this run's tasks is queued or running, so
            # that it cannot overlap the next run on these workers.
            self._drain_after_error()
        finally:
            for error in self.callback_errors:
                _release_scheduler_frames(error)
            self.callback_errors.clear()
            self.cancelled.set()
            self.finished.set()
            # This frame stays reachable from a callback error's traceback (through
            # f_back) after it returns; it must not keep the run alive from there.
            del self

    def _drain_after_error(self) -> None:
        """Stop the run without trusting its (possibly inconsistent) state; never raises.

        Takes every queued item back, then queues one probe per worker and waits
        for all of them: a worker answers its probe only after the item it was
        running, so once all have answered, nothing of this run runs any more.
        After an abort that already cancelled the queued tasks, STOPs may follow
        in the inboxes and a probe behind one would never be answered; then the
        in-flight count is all there is to wait on.
        """
        try:
            self.stop.set()  # units stop between members
            if self.cancelled.is_set():
                while getattr(self, "in_flight", 0) > 0:
                    msg = self.results.get()
                    if msg is not ABORT and msg[2] in (DONE, FAILED, UNIT):
                        self.in_flight -= 1
                return
            for inbox in self.inboxes:
                while True:
                    try:
                        inbox.get_nowait()
                    except queue.Empty:
                        break
            probe: WorkItem = (self.results.put, _PROBE, _nothing, (), 0, self.stop, None)
            for inbox in self.inboxes:
                inbox.put_nowait(probe)  # emptied above, and we are the only producer
            unanswered = len(self.inboxes)
            while unanswered:
                msg = self.results.get()
                if msg is not ABORT and msg[1] is _PROBE:
                    unanswered -= 1
        except BaseException as exc:  # nothing better to do than to say so
            _add_note(exc, "dagexec: the scheduler failed again while stopping the run")
            log.exception("stopping the run after an internal error failed")

    def _run(self) -> None:
        plan = self.plan
        n = len(plan)
        hooks = self.hooks
        started_at = perf_counter()
        workers = len(self.inboxes)

        # --- run state: scheduler thread only -------------------------------------
        self.state = state = bytearray(n)
        self.values: list[Any] = [None] * n
        self.remaining = [len(d) for d in plan.deps]
        self.consumers = [len(d) for d in plan.dependents]
        self.is_target = bytearray(n)
        for t in plan.targets:
            self.is_target[t] = 1
        self.ready: deque[int] = deque(plan.roots)
        self.balance = Balance(self.inboxes, self.queue_cap)
        self.held = self.balance.held  # tasks queued or running, per worker
        self.last_seen = self.balance.last_seen  # when each worker last reported
        self.now = started_at  # when the current batch of reports arrived
        self.ran_on = [0] * workers  # tasks finished, per worker
        self.in_flight = 0
        self.peak_in_flight = 0
        self.unfinished = n
        self.stopping = False
        self.aborted = False
        self.first_error: BaseException | None = None
        self.errors: dict[int, BaseException] = {}
        self.observed = self.trace or bool(hooks.task_end)  # anyone to tell a task ended?
        self.flags = (TIMED if self.observed else 0) | (NOTIFY_START if hooks.task_start else 0)
        self.times: dict[int, list[float]] | None = None
        if self.trace:
            self.times = {}
            for r in plan.roots:
                self.times[r] = [0.0]
        for r in plan.roots:
            state[r] = READY
        self.started_at = started_at
        # Checked once: with debug logging off, dispatch pays one falsy test.
        self.debug = log.isEnabledFor(logging.DEBUG)
        # -------------------------------------------------------------------------
        log.info(
            "run start: %d tasks, %d targets, %d workers, effective cap %d",
            n,
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
                _plan=plan,
            )
            self._call(hooks.run_start, info)

        get = self.results.get
        empty = self.results.empty
        handle = self._handle
        while self.unfinished:
            waiting_for_pickup = False
            if self.abort_requested and not self.aborted:
                handle(ABORT)
            if not self.stopping:
                if self.in_flight > 1:
                    done = sum(self.ran_on)
                    mean = (self.now - started_at) * workers / done if done else 0.0
                    self.balance.steer(self.now, mean)
                if self.ready:
                    waiting_for_pickup = self._dispatch()
                if self.in_flight > 1:
                    self.balance.feed_idle(self.now)
            if self.in_flight == 0 and not waiting_for_pickup:
                # Nothing can report any more: only reachable when stopping.
                self._cancel_rest()
                break
            if waiting_for_pickup:
                try:
                    msg = get(timeout=_PICKUP_RETRY_SECONDS)
                except queue.Empty:
                    self.now = perf_counter()
                    continue
            else:
                msg = get()
            self.now = perf_counter()
            handle(msg)
            del msg
            while not empty():
                handle(get())

        if self.aborted:
            log.info("interrupted run: its last running tasks have finished")
            return  # the caller has gone; nobody reads an outcome
        result = build_result(self, perf_counter() - started_at)
        if log.isEnabledFor(logging.INFO):
            counts = Counter(state.name.lower() for state in result.status.values())
            log.info(
                "run end: %s in %.3f s; peak in flight %d of %d",
                ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                result.stats.wall_seconds,
                self.peak_in_flight,
                self.cap,
            )
        if hooks.run_end:
            self._call(hooks.run_end, result)
        self.outcome = Outcome(result, self.first_error)

    # ---------------------------------------------------------------- dispatch
    def _dispatch(self) -> bool:
        """Hand ready tasks to workers up to the cap; True if blocked by full inboxes."""
        plan = self.plan
        fns, deps, chain_next = plan.fns, plan.deps, plan.chain_next
        inboxes, values, consumers = self.inboxes, self.values, self.consumers
        pick, dispatched, now = self.balance.pick, self.balance.dispatched, self.now
        state, is_target, ready = self.state, self.is_target, self.ready
        cap = self.cap
        report = self.results.put
        flags, stop, context = self.flags, self.stop, self.context
        hooks = self.hooks.task_dispatch
        times = self.times
        while ready and self.in_flight < cap:
            best = pick()
            if best < 0:
                return True
            task = ready[0]
            task_deps = deps[task]
            args = tuple([values[d] for d in task_deps])
            if times is not None:
                # Stamped before the put: once queued, the worker may start it at once.
                times[task].append(perf_counter() - self.started_at)
            follower = chain_next[task]
            is_unit = follower >= 0
            if not is_unit:
                item: WorkItem = (report, task, fns[task], args, flags, stop, context)
            else:
                members = [task]
                while follower >= 0:
                    members.append(follower)
                    follower = chain_next[follower]
                unit_fns = tuple([fns[m] for m in members])
                item = (report, tuple(members), unit_fns, args, flags | IS_UNIT, stop, context)
            del args
            inboxes[best].put_nowait(item)  # room was checked; we are the only producer
            del item
            ready.popleft()
            # Handed over: each dependency now has one consumer fewer.
            for d in task_deps:
                left = consumers[d] - 1
                consumers[d] = left
                if not left and not is_target[d]:
                    values[d] = None
            if is_unit:  # its members are in flight too
                for m in members[1:]:
                    state[m] = IN_FLIGHT
                del members
            state[task] = IN_FLIGHT
            dispatched(best, now)
            self.in_flight += 1
            if self.in_flight > self.peak_in_flight:
                self.peak_in_flight = self.in_flight
            if hooks:
                self._call(hooks, plan.names[task], best)
            if self.debug:
                log.debug(
                    "dispatch %s to worker %d (in flight %d of %d)",
                    _task_for_message(plan.names[task]),
                    best,
                    self.in_flight,
                    cap,
                )
        return False

    # ------------------------------------------------------------------ results
    def _handle(self, msg: Any) -> None:
        if msg is ABORT:
            if self.aborted:
                return  # already handled, through abort_requested
            self.aborted = True
            unfinished = self.unfinished
            self._stop()
            # Logged now, not when the loop ends: that can be much later, or never.
            log.warning(
                "run interrupted: %d tasks cancelled, %d still running (they finish "
                "in the background; their results are dropped)",
                unfinished - self.unfinished,
                self.in_flight,
            )
            self.cancelled.set()
            return
        worker, task, kind, payload, t0, t1 = msg
        if kind == STARTED:
            self._call(self.hooks.task_start, self.plan.names[task], worker)
            return
        if kind == MEMBER_DONE:  # a unit member ended; the unit is still in flight
            self._member_done(task, worker, payload, t0, t1)
            return
        self.held[worker] -= 1  # the balancer's view, updated inline: once per task
        self.last_seen[worker] = self.now
        self.in_flight -= 1
        if kind == DONE:
            self.ran_on[worker] += 1
            self._done(task, payload)
            del payload
            if self.observed:
                self._ended(task, worker, TaskState.DONE, t0, t1)
        elif kind == FAILED:
            self.ran_on[worker] += 1
            self._failed(task, payload, worker, t0, t1)
            del payload
        else:
            self._unit_ended(worker, task, payload)

    def _member_done(
        self, task: int, worker: int, ready_at: float | None, t0: float, t1: float
    ) -> None:
        """A unit member other than the last ended; its value stays on the worker."""
        self.state[task] = S_DONE
        self.unfinished -= 1
        self.ran_on[worker] += 1
        if self.times is not None and ready_at is not None:
            # It became ready, and was as good as dispatched, when the member
            # before it ended, on the same worker.
            self.times[task] = [ready_at - self.started_at] * 2
        self._ended(task, worker, TaskState.DONE, t0, t1)

    def _unit_ended(self, worker: int, members: tuple[int, ...], payload: Any) -> None:
        """Account for each member of a finished (or stopped, or failed) unit in order.

        In a timed run the members before the last were already accounted for as
        they ended (MEMBER_DONE), and are skipped here.
        """
        done, ok, outcome, times = payload
        del payload
        ran = done if ok else done + 1
        # Members that never ran wait again; the failure or stop handled below
        # finalises them (skipped downstream of a failure, or cancelled).
        never_ran = members[ran:]
        for m in never_ran:
            self.state[m] = WAITING
        ready_at = self.times[members[0]][1] if self.times is not None else 0.0
        last = len(members) - 1
        for k in range(ran):
            m = members[k]
            t0, t1 = (times[2 * k], times[2 * k + 1]) if times is not None else (0.0, 0.0)
            if self.state[m] == S_DONE:  # reported as it ended
                ready_at = t1 - self.started_at
                continue
            self.ran_on[worker] += 1
            if self.times is not None and k:
                # A member became ready, and was as good as dispatched, when the
                # member before it ended, on the same worker.
                self.times[m] = [ready_at, ready_at]
            if k == done:  # the member that raised
                self._failed(m, outcome, worker, t0, t1)
            else:
                if k == last:
                    self._done(m, outcome)  # only the last member's value is needed
                else:
                    self.state[m] = S_DONE
                    self.unfinished -= 1
                self._ended(m, worker, TaskState.DONE, t0, t1)
            ready_at = t1 - self.started_at
        del outcome
        if self.stopping:
            for m in never_ran:
                if self.state[m] == WAITING:
                    self.unfinished -= 1
                    self._cancel(m)

    def _done(self, task: int, value: Any) -> None:
        """Keep the value if anyone needs it, and make its dependents ready."""
        self.state[task] = S_DONE
        self.unfinished -= 1
        if self.consumers[task] or self.is_target[task]:
            self.values[task] = value
        del value
        if self.stopping:
            return
        remaining, state, ready = self.remaining, self.state, self.ready
        for d in self.plan.dependents[task]:
            left = remaining[d] - 1
            remaining[d] = left
            if not left and state[d] == WAITING:
                state[d] = READY
                ready.append(d)
                if self.times is not None:
                    self.times[d] = [perf_counter() - self.started_at]

    def _failed(self, task: int, exc: BaseException, worker: int, t0: float, t1: float) -> None:
        self.state[task] = S_FAILED
        self.unfinished -= 1
        # The task's own exception must reach the caller even when its name or
        # the exception itself is hostile (a raising __repr__ or __str__, odd
        # __notes__): nothing here may raise.
        name = _task_for_message(self.plan.names[task])
        _add_note(exc, f"dagexec: raised by task {name}")
        self.errors[task] = exc
        if log.isEnabledFor(logging.INFO):
            log.info("task %s failed: %s: %s", name, type(exc).__name__, _str_for_message(exc))
        # Its end is reported before the ends its failure causes (skips, cancels).
        self._ended(task, worker, TaskState.FAILED, t0, t1)
        if self.on_error == "raise" or not isinstance(exc, Exception):
            self._fail(exc)
        else:
            self._skip_downstream(task)

    def _ended(self, task: int, worker: int, state: TaskState, t0: float, t1: float) -> None:
        """Record a task that ran: its trace timings and the ``on_task_end`` hooks."""
        if self.times is not None:
            self.times[task] += (t0 - self.started_at, t1 - self.started_at, worker)
        if self.hooks.task_end:
            self._call(self.hooks.task_end, self.plan.names[task], state, t1 - t0)

    def _skip_downstream(self, failed: int) -> None:
        plan, state = self.plan, self.state
        names, deps, dependents = plan.names, plan.deps, plan.dependents
        consumers, values, is_target = self.consumers, self.values, self.is_target
        stack = list(dependents[failed])
        while stack:
            d = stack.pop()
            if state[d] != WAITING:
                continue
            state[d] = S_SKIPPED
            self.unfinished -= 1
            for p in deps[d]:  # a skipped task will never consume these values
                consumers[p] -= 1
                if not consumers[p] and not is_target[p]:
                    values[p] = None
            if self.hooks.task_end:
                self._call(self.hooks.task_end, names[d], TaskState.SKIPPED, 0.0)
            stack.extend(dependents[d])

    # ------------------------------------------------------------------- stop
    def _fail(self, exc: BaseException) -> None:
        """Stop the run; ``exc`` is what the caller gets unless an earlier error is.

        A fatal exception (``KeyboardInterrupt``, ``SystemExit``: not an
        ``Exception``) outranks an ordinary one that came first, since the caller
        must not lose it.
        """
        first = self.first_error
        if first is None or (isinstance(first, Exception) and not isinstance(exc, Exception)):
            self.first_error = exc
        self._stop()

    def _stop(self) -> None:
        """Stop dispatching and cancel everything that has not started."""
        if self.stopping:
            return
        self.stopping = True
        self.stop.set()
        for w, inbox in enumerate(self.inboxes):
            while True:
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                assert item is not STOP  # STOPs go in only after a run's cancellation
                self.held[w] -= 1
                self.in_flight -= 1
                for task in item[1] if item[4] & IS_UNIT else (item[1],):
                    self.unfinished -= 1
                    self._cancel(task)
        self._cancel_rest()

    def _cancel_rest(self) -> None:
        state = self.state
        self.ready.clear()
        for task in range(len(state)):
            if state[task] <= READY:
                self.unfinished -= 1
                self._cancel(task)

    def _cancel(self, task: int) -> None:
        self.state[task] = S_CANCELLED
        if self.hooks.task_end:
            self._call(self.hooks.task_end, self.plan.names[task], TaskState.CANCELLED, 0.0)

    def _call(self, hooks: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each hook; one that raises stops the run like a failing task."""
        for hook in hooks:
            try:
                hook(*args)
            except BaseException as exc:
                _add_note(exc, f"dagexec: raised by callback {_hook_for_message(hook)}")
                # Drop this frame from the traceback; main() clears the rest of the
                # scheduler's frames it links to once the run is over.
                if exc.__traceback__ is not None and exc.__traceback__.tb_next is not None:
                    exc.__traceback__ = exc.__traceback__.tb_next
                self.callback_errors.append(exc)
                self._fail(exc)


class _Probe:
    def __repr__(self) -> str:
        return "PROBE"


_PROBE = _Probe()
"""The task of a probe item, queued to every worker when a run must wait for them all."""


def _nothing() -> None:
    return None


def _task_for_message(name: Hashable) -> str:
    """``describe(name)``, or a stand-in when the name's ``__repr__`` raises."""
    try:
        return describe(name)
    except Exception:
        return f"<{type(name).__qualname__} object at {id(name):#x} (its repr raised)>"


def _str_for_message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__qualname__} (its str raised)>"


def _hook_for_message(hook: Callable[..., Any]) -> str:
    try:
        name = getattr(hook, "__qualname__", None)
        return name if isinstance(name, str) else repr(hook)
    except Exception:
        return f"<{type(hook).__qualname__} object at {id(hook):#x}>"


def _add_note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc`` unless it is there; never raises.

    ``add_note`` refuses an exception whose ``__notes__`` is not a list (a task may
    have set a tuple); such notes are copied into a list with ours at the end.
    """
    try:
        notes = getattr(exc, "__notes__", None)
        if notes is None:
            exc.add_note(note)
        elif note not in notes:
            if isinstance(notes, list):
                exc.add_note(note)
            else:
                exc.__notes__ = [*notes, note]
    except Exception:
        log.debug("could not add the note %r to a %s", note, type(exc).__qualname__)


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
