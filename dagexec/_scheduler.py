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
      the "scheduler thread" is whichever thread drives the run: the caller's
      own for a plain Executor.run (Ctrl-C then becomes ``abort()``, see
      _sigint.py), else the executor's scheduler thread, with the caller
      waiting for ``finished`` and putting ABORT on ``results`` on Ctrl-C

Ownership (nothing here relies on the GIL; every shared thing is either owned
by one thread or is a queue/Event, which has its own lock):

    =====================  ==========================  =========================
    what                   written by                  read by / ordered by
    =====================  ==========================  =========================
    runs queue (executor)  caller puts a Run           scheduler thread gets
                                                       (SimpleQueue lock)
    ``_slot`` (executor)   held by the thread that     the next driver waits
                           drives a run                for it
    RunState, Observer,    the scheduler thread only   the caller, after
    Recorder, Balance,                                 ``finished`` is set
    Run fields
    inboxes                scheduler put_all (mutex),  workers pop (atomic deque
                           get_nowait                  ops; mutex only to sleep)
    results                workers, caller (ABORT)     scheduler get (queue lock)
    ``stop`` Event         scheduler                   workers, between chain
                                                       members (Event lock)
    ``abort_requested``    caller, or a SIGINT         scheduler; the ABORT on
                           handler on the driving      ``results`` orders it
                           thread (then puts ABORT)
    outcome                scheduler, before           caller, after
                           ``finished.set()``          ``finished.wait()``
    an attempt's token     scheduler sets it (timeout, the task, through
    (``current_task()``)   a stop)                     ``current_task()`` (Event
                                                       lock); one per attempt
    ``_policy._local``     each worker, around a       that worker's task only
                           task with a policy          (thread-local)
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
inboxes and cancels them, and sets the token of every running attempt; tasks
already running finish; only then is the outcome published.

Per-task policy (only in runs whose plan has one, ``timed``): retry waits are
timers in the state machine, attempt timeouts are timers here (from each
attempt's STARTED report), and both set the timeout of ``results.get``. A
timed-out attempt ends for the state machine at once (failed with TaskTimeout,
maybe retried) but keeps its in-flight slot and resources until its worker
reports; that late report is recognised by (task, worker), since a worker
reports in order, and dropped.
"""

from __future__ import annotations

import contextvars
import heapq
import logging
import queue
import threading
from collections.abc import Mapping
from time import monotonic, perf_counter
from typing import Any

from ._balance import Balance
from ._errors import Cancelled, TaskTimeout
from ._events import Hooks
from ._inbox import Inbox
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
from ._policy import Attempt, CurrentTask, Policy
from ._result import CANCELLED as S_CANCELLED
from ._result import DONE as S_DONE
from ._result import FAILED as S_FAILED
from ._result import IN_FLIGHT as S_IN_FLIGHT
from ._runstate import RunState
from ._safe import add_note, task_for_message
from ._trace import Recorder
from ._worker import register_run

__all__ = ["ABORT", "Outcome", "Run"]

log = logging.getLogger("dagexec")
OWN_FILES.add(__file__)  # callback errors' tracebacks reach these frames

# How long the scheduler waits for a worker to take its next item when it has
# ready tasks and room under the cap, but every inbox is momentarily full (a
# worker has reported but not yet picked up). Shorter re-checks sooner but
# wakes the scheduler more often; the wait ends early on any result anyway.
_PICKUP_RETRY_SECONDS = 0.001

# The clock of retry waits and timeouts (the trace and the balancer use
# perf_counter). A module global so that tests can drive it by hand.
_clock = monotonic

# Longest the scheduler blocks while a retry or a timeout is pending: it then
# reads the clock again, so a timer is late by at most this much even if the
# clock jumps. Only runs with a task policy ever wait with a timer.
_TIMER_POLL_SECONDS = 0.05


def _nothing() -> None:
    return None


def _head(item: Item) -> int:
    """The task an item stands for in the run state: a job's, or a chain's first."""
    return item.tasks[0] if isinstance(item, Chain) else item[1]


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
        inboxes: list[Inbox[Item | None]],
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
        self.detachable = self.detached = False  # see main()
        self.wake_every: float | None = None
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
        # Per-task policy: timers, cancellation tokens, timed-out attempts. Only
        # runs whose plan has a policy (``timed``) ever touch these.
        self.timed = plan.policy is not None
        self.tokens: dict[int, threading.Event] = {}  # task -> its running attempt's token
        self.deadlines: list[tuple[float, int, int, int]] = []  # (due, seq, task, attempt)
        self.running_on: dict[int, tuple[int, float]] = {}  # task -> (worker, started)
        # (task, worker) -> reports still to come from timed-out attempts: they are
        # discarded, and free their slot and resources only then.
        self.stale: dict[tuple[int, int], int] = {}
        self.seq = 0

    def abort(self) -> None:
        """Ask the run to stop; safe from any thread, including a signal handler.

        The flag stops the very next dispatch round (even one before the scheduler
        ever blocked on its results); the message wakes a scheduler that is blocked.
        """
        self.abort_requested = True
        self.results.put(ABORT)

    def main(self, *, detachable: bool = False, wake_every: float | None = None) -> None:
        """Drive the run to its end. Never raises: errors go into ``outcome``. A second
        call (see ``Executor.run``) returns at once.

        On the executor's scheduler thread it is called with the defaults. A caller
        that drives its own run (``Executor.run`` on a plain run, see
        :mod:`dagexec._executor`) passes ``detachable``: after an abort the call
        returns as soon as nothing queued can start (``detached`` is then True),
        and another thread finishes the run with :meth:`take_over`, so that Ctrl-C
        stays prompt. ``wake_every`` bounds each blocking wait, so that an
        interrupt raised with ``_thread.interrupt_main()`` (which wakes no lock
        wait) is handled in time.
        """
        if self.begun:
            return
        self.begun = True
        self.detachable, self.wake_every = detachable, wake_every
        try:
            self._run()
        except BaseException as exc:  # a bug here must still release the caller...
            self._failed(exc)
        finally:
            if not self.detached:
                self._let_go()
            # This frame stays reachable from a callback error's traceback (through
            # f_back) after it returns; it must not keep the run alive from there.
            del self

    def take_over(self) -> None:
        """Finish a detached run on this thread: wait for its running tasks. Never raises."""
        assert self.detached
        self.detachable = self.detached = False
        self.wake_every = None
        try:
            self._loop()
            self._end()
        except BaseException as exc:
            self._failed(exc)
        finally:
            self._let_go()
            del self  # as in main()

    def _failed(self, exc: BaseException) -> None:
        add_note(exc, "dagexec: internal error in the scheduler; the run was stopped")
        self.outcome = Outcome(None, exc)
        self.detached = False
        # ...but only once none of this run's tasks is queued or running, so
        # that it cannot overlap the next run on these workers.
        self._drain_after_error()

    def _let_go(self) -> None:
        for error in self.observer.errors:
            release_frames(error)
        self.observer.errors.clear()
        self.cancelled.set()
        self.finished.set()
        # A queued run's caller is released by the run's future, once the
        # scheduler thread has let go of the run (_executor._Submission.main).

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
            probe: Job = (results.put, -1, _nothing, (), 0, self.stop, None)
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
        state = self.state
        self.started_at = self.now = perf_counter()
        if self.trace:
            self.observer.recorder = Recorder(state, self.started_at)
        self.debug = log.isEnabledFor(logging.DEBUG)  # dispatch then pays one falsy test
        # current_task() in a plain task names it through this: the names grow as
        # maps expand, and were written before the task was handed out.
        register_run(self.stop, lambda task: state.names[task])
        announce(self)
        self._loop()
        if not self.detached:
            self._end()

    def _loop(self) -> None:
        """Dispatch and take reports until the run is over (or, detachable, aborted)."""
        state, balance, started_at = self.state, self.balance, self.started_at
        workers = len(self.inboxes)
        get, empty, handle, events = (
            self.results.get,
            self.results.empty,
            self._handle,
            state.events,
        )
        timed, wake_every = self.timed, self.wake_every
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
            if self.aborted and self.detachable:
                self.detached = True  # nothing queued can start: the caller may go
                return
            if timed:
                wait = self._timers()
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
            elif state.ready:  # cleanup tasks (run_if="all_done") run during a stop
                pickup = self._dispatch()
            if state.in_flight == 0 and not pickup and wait is None:
                if not state.stopping:  # a bug: say so, never end as if it succeeded
                    state.fail(state.stuck_error())
                    continue  # report the cancels; the loop then ends
                break  # nothing can report any more
            try:
                if wait is not None:
                    wait = min(wait, _PICKUP_RETRY_SECONDS if pickup else _TIMER_POLL_SECONDS)
                    msg = get(timeout=max(wait, 0.0))
                elif pickup:
                    msg = get(timeout=_PICKUP_RETRY_SECONDS)
                else:
                    msg = get(timeout=wake_every)
            except queue.Empty:
                self.now = perf_counter()
                continue
            self.now = perf_counter()
            if timed:
                state.now = _clock()  # a failed attempt's retry is due from now
            batch = [msg]
            del msg
            while not empty():
                batch.append(get())
            handle(batch)

    def _end(self) -> None:
        """After the loop: end what is left, publish the outcome."""
        state = self.state
        state.stop(hard=True)  # a no-op unless the loop above broke out early
        if state.events:
            self.observer.drain(state.events)
        if self.aborted:
            log.info("interrupted run: its last running tasks have finished")
            return  # the caller has gone; nobody reads an outcome
        self.outcome = conclude(self, perf_counter() - self.started_at)

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
        fns, chain_next, chained = state.fns, state.chain_next, self.plan.chained
        report, flags, stop, context = self.results.put, self.flags, self.stop, self.context
        policies, events = state.policy, state.events
        stopping = state.stopping  # cleanup tasks are dispatched during a stop
        for worker, count in enumerate(counts):
            if not count:
                continue
            tasks, arguments = state.hand_out(count, worker)
            if len(tasks) < count:  # the other ready tasks wait for resources
                wanted = 0
            items: list[Item]
            if policies is None and not chained:  # each a plain job
                items = [
                    (report, task, fns[task], args, flags, stop, context)
                    for task, args in zip(tasks, arguments, strict=True)
                ]
            else:
                items = []
                for task, args in zip(tasks, arguments, strict=True):
                    policy = None if policies is None else policies[task]
                    if policy is not None:
                        fn, job_flags = self._attempt(task, policy)
                        items.append((report, task, fn, args, flags | job_flags, stop, context))
                        del fn
                    elif chain_next[task] < 0:
                        items.append((report, task, fns[task], args, flags, stop, context))
                    else:
                        items.append(self._chain(task, args))
            del arguments
            if not items:
                continue
            if events:  # trace stamps and on_task_dispatch come before the put
                self.observer.drain(events)
                if state.stopping and not stopping:  # a callback raised: none goes out
                    for item in items:
                        task = _head(item)
                        self.tokens.pop(task, None)
                        state.take_back(task)
                    return False
            self.inboxes[worker].put_all(items)  # room was checked; we are the only producer
            self.balance.dispatched(worker, self.now, len(items))
            if self.debug:
                log.debug(
                    "dispatch %s to worker %d (in flight %d of %d)",
                    ", ".join(task_for_message(state.names[_head(item)]) for item in items),
                    worker,
                    state.in_flight,
                    self.cap,
                )
            del items
        return sum(counts) < wanted

    def _chain(self, task: int, args: tuple[Any, ...]) -> Chain:
        """The chain headed by ``task``, as one item."""
        chain_next, fns = self.state.chain_next, self.state.fns
        members = [task]
        while chain_next[members[-1]] >= 0:
            members.append(chain_next[members[-1]])
        unit = tuple([fns[m] for m in members])
        return Chain(
            self.results.put, tuple(members), unit, args, self.flags, self.stop, self.context
        )

    def _handle(self, batch: list[Any]) -> None:
        """Apply what arrived on the results queue, in order, and let go of it.

        Jobs that returned a value (the bulk, on a graph of small tasks) go to the
        state machine together, in runs between the other messages.
        """
        state, balance, now, timed = self.state, self.balance, self.now, self.timed
        finish, release, held, last_seen = (
            state.finish,
            state.release,
            balance.held,
            balance.last_seen,
        )
        returned: list[Any] = []
        for msg in batch:
            if msg is not ABORT and msg[2] == DONE and not timed:
                held[msg[0]] -= 1  # the balancer's view, updated once per item (as below)
                last_seen[msg[0]] = now
                returned.append(msg)
                continue
            if returned:  # the ones before this message come first
                state.returned(returned)
                returned.clear()
            if msg is ABORT:
                self._abort()
                continue
            worker, task, kind, payload, started, ended = msg
            if kind == MEMBER:  # a chain member ended; the chain is still in flight
                finish(task, S_DONE, None, worker, started, ended)
            elif kind == STARTED:
                if state.events is not None:
                    state.events.append(Event(START, task, worker))
                if timed:
                    self._started(task, worker)
            else:  # a job or a chain is off its worker
                held[worker] -= 1
                last_seen[worker] = now
                if kind == CHAIN:
                    state.chain_ended(task, payload, worker)
                elif timed and self._ended(task, worker):
                    pass  # a timed-out attempt returned at last: its slot is free now
                else:
                    outcome = S_DONE if kind == DONE else S_FAILED
                    if outcome == S_FAILED and state.stopping and isinstance(payload, Cancelled):
                        outcome = S_CANCELLED  # it obeyed the stop: not a failure of its own
                    finish(task, outcome, payload, worker, started, ended)
                    release(task)
        if returned:
            state.returned(returned)
        batch.clear()

    def _abort(self) -> None:
        """The caller asked to stop (Ctrl-C): cancel what is queued, drop what runs."""
        if self.aborted:  # already handled, through abort_requested
            return
        self.aborted = True
        state = self.state
        unfinished = state.unfinished
        state.stop(hard=True)
        self._halt()
        # Logged now, not when the loop ends: that can be much later, or never.
        log.warning(
            "run interrupted: %d tasks cancelled, %d still running (they finish "
            "in the background; their results are dropped)",
            unfinished - state.unfinished,
            state.in_flight,
        )
        self.cancelled.set()

    def _halt(self) -> None:
        """Stop chains between members and take back everything still queued."""
        self.stop.set()
        for token in self.tokens.values():  # running attempts see the stop
            token.set()
        held = self.balance.held
        for w, inbox in enumerate(self.inboxes):
            while True:
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                assert item is not STOP  # STOPs go in only after a run's cancellation
                held[w] -= 1
                self.state.take_back(_head(item))
        if self.state.events:
            self.observer.drain(self.state.events)

    # ------------------------------------------------------------ task policy
    def _attempt(self, task: int, policy: Policy) -> tuple[Attempt, int]:
        """The function of ``task``'s next attempt, wrapped so that it can see
        itself (``current_task()``), and the extra flags its job needs."""
        state = self.state
        token = threading.Event()  # a cleanup task sent out during a stop starts clear
        self.tokens[task] = token
        info = CurrentTask(state.names[task], state.attempt.get(task, 1), token)
        return Attempt(state.fns[task], info), NOTIFY_START if policy.timeout else 0

    def _started(self, task: int, worker: int) -> None:
        """An attempt began on ``worker``: its timeout counts from now."""
        policies = self.state.policy
        policy = None if policies is None else policies[task]
        if policy is None or policy.timeout is None:
            return
        self.running_on[task] = (worker, self.now)
        self.seq += 1
        attempt = self.state.attempt.get(task, 1)
        heapq.heappush(self.deadlines, (_clock() + policy.timeout, self.seq, task, attempt))

    def _ended(self, task: int, worker: int) -> bool:
        """An attempt is off ``worker``; True if it had timed out (its report is dropped,
        its slot and resources are freed)."""
        stale = self.stale
        key = (task, worker)
        left = stale.get(key, 0)
        if left:
            if left == 1:
                del stale[key]
            else:
                stale[key] = left - 1
            self.state.release(task)
            return True
        self.tokens.pop(task, None)
        self.running_on.pop(task, None)
        return False

    def _timers(self) -> float | None:
        """Wake the retries that are due, time out the attempts that ran too long;
        return the seconds until the next timer, or None if there is none."""
        state, deadlines = self.state, self.deadlines
        now = _clock()
        state.wake(now)
        while deadlines and (deadlines[0][0] <= now or self._over(deadlines[0])):
            _, _, task, attempt = heapq.heappop(deadlines)
            self._time_out(task, attempt)
        state.wake(now)  # a timed-out attempt retried at once
        due = [q[0][0] for q in (state.timers, deadlines) if q]
        return min(due) - now if due else None

    def _over(self, deadline: tuple[float, int, int, int]) -> bool:
        """True if the attempt this deadline was for has ended: it need not wake us."""
        task, attempt = deadline[2], deadline[3]
        state = self.state
        return state.state[task] != S_IN_FLIGHT or state.attempt.get(task, 1) != attempt

    def _time_out(self, task: int, attempt: int) -> None:
        """``task``'s attempt ran past its timeout: it fails now with TaskTimeout. Its
        thread runs on; its worker, slot and resources stay held until it returns."""
        state = self.state
        if self._over((0.0, 0, task, attempt)):
            return  # that attempt ended in time
        worker, started = self.running_on.pop(task)
        key = (task, worker)
        self.stale[key] = self.stale.get(key, 0) + 1
        token = self.tokens.pop(task, None)
        if token is not None:
            token.set()
        policies = state.policy
        assert policies is not None
        policy = policies[task]
        assert policy is not None and policy.timeout is not None
        exc = TaskTimeout(state.names[task], policy.timeout, attempt)
        log.info("%s", exc)
        state.finish(task, S_FAILED, exc, worker, started, perf_counter())
