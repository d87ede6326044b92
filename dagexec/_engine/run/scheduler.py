"""One run: its one record, its start and end, and surviving its own errors.

A run is one record, made once here (:class:`Run`), in three layers, a module
each, each a subclass of the one below and importing nothing above it: the
stop (:mod:`dagexec._engine.run.run_stop`), the driver, the message loop
(:mod:`dagexec._engine.run.driver`), and the run itself, which sets every field
the layers read. The parts that keep state of their own (the run state, the
balancer, the depth, the attempt timers) are made here and held by it; a part
that keeps nothing is a function of it (:func:`~dagexec._engine.run.reports.handle`).

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
    +-----------+   (pure: _state/runstate.py,       callbacks (one stream, in
                     _state/fanout.py)               order: _observation/observer.py)
          ^
      the "scheduler thread" is whichever thread drives the run: the caller's
      own for a plain Executor.run (Ctrl-C then becomes ``abort()``, see
      _engine/front/caller_drives.py), else the executor's scheduler thread, with the caller
      waiting for ``finished`` and putting ABORT on ``results`` on Ctrl-C

Ownership: nothing here relies on the GIL; every shared thing is either owned
by one thread or is a queue/Event, which has its own lock. The one table of what
each thread writes and reads, and what orders it, is docs/thread-safety.md
("Engine: executor, scheduler, workers"); this docstring does not repeat it.

Why no circular wait can form: the scheduler never blocks on an inbox (it only
try-puts, and checks for space first because it is the only producer: the
executor's STOPs go in only once no run can put tasks any more), and a worker
never blocks on reporting (the results queue is unbounded). The one blocking
call of the scheduler is ``results.get``, and something is always on its way
there while any task is in flight.

Which worker gets a task, and rescuing tasks stuck behind a long one, is
:mod:`dagexec._engine.run.balance`. Everything about tasks (order, readiness, resources,
values, skips and cancels) is :mod:`dagexec._state.runstate`; what each report
means for it, :mod:`dagexec._engine.run.reports`. On a stop
(:mod:`dagexec._engine.run.run_stop`) the driver sets ``stop`` (chains stop between
members), takes queued items back out of the inboxes and cancels them, and sets
the token of every running attempt; tasks already running finish; only then is
the outcome published.

Per-task policy (only in runs whose plan has one): retry waits are timers in
the state machine, attempt timeouts are :mod:`dagexec._engine.run.timers`, and both set
the timeout of ``results.get``.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import weakref
from collections.abc import Hashable, Mapping
from functools import partial
from time import perf_counter
from typing import Any

from ..._core.hooks import Hooks
from ..._core.isolate import inbox_depth
from ..._core.plan import Plan
from ..._core.safe import add_note, task_for_message
from ..._observation.capture import Capture
from ..._observation.capture import release as release_capture
from ..._observation.capture import start as start_capture
from ..._observation.observer import OWN_FILES, SILENT, Observer, release_frames
from ..._observation.trace import Recorder
from ..._state.runstate import RunState
from ..workers.crew import Crew
from ..workers.inbox import Inbox
from ..workers.wire import (
    ABORT,
    CHAIN,
    DONE,
    FAILED,
    FREED,
    NOT_STARTED,
    NOTIFY_START,
    R_KIND,
    R_TASK,
    R_WORKER,
    TIMED,
    Item,
    Job,
    Message,
)
from .attempts import AttemptBook, LiveAttempt
from .balance import Balance
from .depth import Depth
from .driver import Driver
from .flag import Flag
from .outcome import Outcome, announce, build_result, conclude
from .timers import AttemptTimers

__all__ = ["ABORT", "Outcome", "Run"]

log = logging.getLogger("dagexec")
OWN_FILES.add(__file__)  # callback errors' tracebacks reach these frames
# Made once, not per run: no attempt abandoned, no worker's thread hung, the warning sink.
_NONE_ABANDONED: frozenset[tuple[int, int]] = frozenset()
_NO_SLOTS: frozenset[int] = frozenset()
_warn = log.warning


def _nothing() -> None:
    return None


def _name_of(state: weakref.ref[RunState], task: int) -> Hashable:
    """How ``current_task()`` names a plain task of the run whose state is ``state``
    (bound to it with ``partial``, made in C: no call of ours per run)."""
    alive = state()
    return task if alive is None else alive.names[task]


class Run(Driver):
    """One run of a plan on a set of worker inboxes. :meth:`main` drives it.

    ``abort`` and ``request_abort`` (those of the stop's layer) may be called from any
    thread; everything else belongs to the thread that drives the run until
    ``finished`` is set.
    """

    __slots__ = (
        "__weakref__",  # the executor's last run is held weakly
        "abandoned",
        "abandoned_attempts",
        "begun",
        "book",
        "bound",
        "capacity",
        "capture",
        "capturing",
        "control",  # an explored run's controller (explore_driver.py); unset otherwise
        "crew",
        "detached",
        "escaped",
        "expired",
        "finished",
        "hooks",
        "info",
        "lingering",
        "max_in_flight",
        "outcome",
        "queue_cap",
        "subscribed",
        "trace",
    )

    def __init__(
        self,
        plan: Plan,
        inboxes: list[Inbox[Item | None]],
        queue_cap: int,
        max_in_flight: int,
        on_error: str,
        hooks: Hooks,
        trace: bool,
        capacity: Mapping[str, float] | None = None,
        context: contextvars.Context | None = None,
        crew: Crew | None = None,
        book: AttemptBook | None = None,
        adaptive: bool = False,
        logs: tuple[int, str | None] | None = None,
    ) -> None:
        self.plan, self.inboxes, self.hooks = plan, inboxes, hooks
        self.crew = crew  # replaces a worker blocked by a timed-out attempt
        self.book = book if book is not None else AttemptBook()  # the executor's
        self.lent: dict[LiveAttempt, tuple[tuple[int, Any], ...]] = {}
        self.subscribed = False  # to the book's news of abandoned attempts (_borrow)
        self.abandoned = 0  # attempts still running when the run ended (RunStats)
        self.abandoned_attempts = _NONE_ABANDONED  # (task, attempt), for the trace
        self.queue_cap, self.max_in_flight = queue_cap, max_in_flight
        # The most ever in flight (RunStats.effective_cap); the driver's ``cap`` is
        # the current limit, below it while the memory-aware depth says so.
        # (Compared, not min(): a builtin that parses keywords; ~700 instructions.)
        full = len(inboxes) * (queue_cap + 1)
        self.bound = max_in_flight if max_in_flight < full else full
        self.capacity = dict(capacity) if capacity else {}  # a literal: no type call
        self.results: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.finished = Flag()  # outcome is ready
        self.stop = Flag()  # no item carrying it starts once set; see abort
        self.cancelled = Flag()  # after an abort: nothing queued will start
        self.outcome: Outcome | None = None
        self.capturing = False  # capture.start() called; release() owed at the end
        self.lingering: list[threading.Event] = []  # abandoned attempts' done flags
        self.expired: float | None = None  # its timeout= passed (set before abort())
        self.begun = self.detached = False  # the driving thread only, like all below
        self.escaped: BaseException | None = None  # see main()
        self.info = False  # asked when the run starts (a queued run starts later): _run
        # Positional, as _new_run makes this run: keywords to a class make a dict in C.
        self.state = RunState(
            plan,
            on_error,
            len(inboxes),
            trace or hooks.per_task,
            capacity,
            None,  # the state's log: set in _run, if INFO is on then
            _warn,
        )
        self.trace = trace
        # What only some runs need is made by a method that a plain run never
        # enters: the observer and the items' flags of a watched run (_watch); the
        # attempt timers of a plan with task policies (_timers), whose process tasks
        # fill inboxes one deep (else the driver takes full inboxes for a moment's and
        # re-checks every 1 ms).
        self.observer, self.flags = SILENT, 0  # SILENT: shared; nothing to record or tell
        if trace or hooks.any:
            self._watch()
        # logs=: the run's capture rides on the flags every item carries, which a
        # worker's Running holds while it runs the item (see _observation/capture.py).
        self.capture: Capture | None = None
        if logs is not None:
            self.capture = self.stop.capture = Capture(*logs)
        # hard_stop (cleanup tasks' items' stop) only for a plan with any: _policies.
        depth, self.timers, self.hard_stop = queue_cap, None, None
        if plan.policy is not None:
            depth = inbox_depth(plan.policy, queue_cap)
            self._policies()
        # Hung threads of earlier runs' timed-out attempts get no work.
        dead = _NO_SLOTS if crew is None or not crew.blocked else crew.blocked_slots()
        self.balance = Balance(inboxes, depth, dead)
        # The stop's fields (run_stop.py).
        self.abort_requested = self.hard_requested = False  # written by abort(), any thread
        self.aborted = self.hard_aborted = self.detachable = False
        # The driver's (driver.py). No bound given: the cap follows the size of the
        # values made (depth.py); but not in a plan no bigger than one task per worker
        # and without maps, whose tasks all go out at once whatever the depth (it
        # never starts below that): a small run then sizes nothing.
        cap = len(inboxes) * (depth + 1)
        self.cap = self.bound if self.bound < cap else cap
        self.depth = None
        if adaptive and (len(plan.names) > len(inboxes) or plan.maps is not None):
            self.depth = Depth(len(inboxes), self.cap, plan.first_depth)
            self.cap = self.depth.start
        # The caller's contextvars, copied per task; None if empty (_new_run), and each task
        # then runs in its worker's own empty Context, not a copy (worker.py's _loop).
        self.context = context
        self.wake_every = None
        self.started_at = self.now = 0.0
        self.debug = False

    def _watch(self) -> None:
        """The observer of a run with a trace or callbacks, and what its items ask of
        their workers: times for the trace and ``on_task_end``, a STARTED report for
        the start hooks."""
        hooks, state = self.hooks, self.state
        self.observer = Observer(hooks, state.names, None, state.fail)
        state.tell_release = bool(hooks.attempt_release)
        timed = self.trace or hooks.task_end
        self.flags = (TIMED if timed else 0) | (NOTIFY_START if hooks.starts else 0)

    def _policies(self) -> None:
        """A task policy's attempt timers; and cleanup tasks' hard stop, if any."""
        timers = self.timers = AttemptTimers(self.state, self.book, self._replace_worker)
        timers.lend = self._lend
        if self.state.cleanup is not None:
            self.hard_stop = Flag()
            self.hard_stop.mate = weakref.ref(self.stop)  # weak: the run alone holds its stop
            self.hard_stop.capture = self.capture  # logs=: as on the stop

    def main(self, *, detachable: bool = False, wake_every: float | None = None) -> None:
        """Drive the run to its end. Never raises: errors go into ``outcome``. A second
        call (see ``Executor.run``) returns at once.

        On the executor's scheduler thread it is called with the defaults. A caller
        that drives its own run (``Executor.run`` on a plain run, see
        :mod:`dagexec._engine.front.executor`) passes ``detachable``: after an abort the call
        returns as soon as nothing queued can start (``detached`` is then True),
        and another thread finishes the run with :meth:`take_over`, so that Ctrl-C
        stays prompt. The same happens when an exception escapes the driver on
        the main thread (``escaped``), where a signal handler of the program's
        may raise anywhere (a SIGALRM deadline, say): the caller raises it at
        once and the thread that takes over trusts nothing of the run state.
        Elsewhere such an exception can only be a bug of ours, and the caller
        gets it once nothing of the run runs any more, as on the scheduler thread.

        ``wake_every`` bounds each blocking wait, so that an interrupt raised with
        ``_thread.interrupt_main()`` (which wakes no lock wait) is handled in time.
        """
        if self.begun:
            return
        self.begun = True
        self.detachable, self.wake_every = detachable, wake_every
        try:
            self._run()
        except BaseException as exc:  # a bug here must still release the caller...
            if detachable and threading.current_thread() is threading.main_thread():
                self.escaped, self.detached = exc, True
            else:
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
            if self.escaped is not None:  # the state may be half updated: trust none of it
                self.escaped = None
                self._drain_after_error()
            else:
                self.loop()
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
        # The run is over: no part of it refers back to another any more (its
        # state and all it holds then go with the last reference, not at the
        # next cyclic collection: tests/test_run_garbage.py).
        if not self.state.plain:  # a plain run's state holds no part that refers back
            self.state.close()
        if self.capturing:
            self.capturing = False
            release_capture(self.lingering)
        if self.timers is not None:
            self.timers.close()
        if self.subscribed:
            self.book.unsubscribe(self._freed)
        for error in self.observer.errors:
            release_frames(error)
        self.observer.errors.clear()
        self.cancelled.set()
        self.finished.set()
        # A queued run's caller is released by the run's future, once the
        # scheduler thread has let go of the run (submission._Submission.main).

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
                balance = self.balance
                while sum(balance.held) > 0:
                    msg = results.get()
                    if msg is not ABORT and msg[R_KIND] in (DONE, FAILED, CHAIN, NOT_STARTED):
                        balance.off(msg[R_WORKER], self.now)
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
                if msg is not ABORT and msg[R_TASK] == -1:
                    unanswered -= 1
        except BaseException as exc:  # nothing better to do than to say so
            add_note(exc, "dagexec: the scheduler failed again while stopping the run")
            log.exception("stopping the run after an internal error failed")

    def _run(self) -> None:
        state = self.state
        self.started_at = self.now = perf_counter()
        if self.trace:
            self.observer.recorder = Recorder(state, self.started_at)
        # Once per run, for its start and end logs and the state's (all after this);
        # dispatch then pays one falsy test. DEBUG is off whenever INFO is.
        self.info = log.isEnabledFor(logging.INFO)
        state.log = log.info if self.info else None
        self.debug = self.info and log.isEnabledFor(logging.DEBUG)
        # current_task() in a plain task names it through this: the names grow as
        # maps expand, and were written before the task was handed out. Weakly:
        # a task may keep its token (this flag) after the run, and the run's values
        # must not live on through it.
        self.stop.name_of = partial(_name_of, weakref.ref(state))
        if self.capture is not None:
            start_capture()
            self.capturing = True
        # Each only where it has something to do: a run that no attempt of an
        # earlier run can report to (see _borrow), a start nobody hears of.
        if self.timers is not None or self.book.overrunning:
            self._borrow()
        else:
            self.book.runs += 1  # numbered all the same; one run drives at a time
        if self.info or self.hooks.run_start:
            announce(self)
        self.detached = self.loop()
        if not self.detached:
            self._end()

    def _end(self) -> None:
        """After the loop: end what is left, publish the outcome."""
        state = self.state
        if state.unfinished:  # the loop above broke out early: end what is left
            state.stop(hard=True)
        if self.timers is not None:
            left = self.timers.abandon()
            self.abandoned = len(left)
            self.abandoned_attempts = frozenset({(task, live.number) for live, task in left})
            self.lingering = [live.done for live, _ in left]
            for attempt, _ in left:
                log.warning(
                    "task %s: its attempt %d timed out and still runs; the run ends "
                    "without it (abandoned: its value will be dropped, it keeps its "
                    "resources until it returns)",
                    task_for_message(attempt.name),
                    attempt.number,
                )
        if state.events:
            self.observer.drain(state.events)
        if self.aborted:
            log.info("interrupted run: its last running tasks have finished")
            return  # the caller has gone; nobody reads an outcome
        result = build_result(self, perf_counter() - self.started_at)
        if self.info or self.hooks.run_end:
            conclude(self, result)
        # (tuple.__new__: a named tuple's own __new__ is Python code, ~1,400 more.)
        self.outcome = tuple.__new__(Outcome, (result, self.state.first_error))

    def _borrow(self) -> None:
        """Start the run owing what abandoned attempts of earlier runs still hold.

        Tasks that need it wait until those attempts return (a FREED message),
        so that no capacity is exceeded on this executor across runs. Called only
        for a run that may hear of such an attempt: one still runs, or the run has
        timers, which may abandon one (only they do).
        """
        self.subscribed = True
        number, still = self.book.subscribe(self._freed)
        if self.timers is not None:
            self.timers.run = number
        for attempt in still:
            lent = self.state.lend(attempt.needs)
            if lent:
                self.lent[attempt] = lent
                log.warning(
                    "tasks that need %s wait for attempt %d of task %s (run %d), which timed "
                    "out and still runs, to let go of them",
                    ", ".join(f"{amount:g} {name!r}" for name, amount in attempt.needs),
                    attempt.number,
                    task_for_message(attempt.name),
                    attempt.run,
                )

    def _freed(self, attempt: LiveAttempt) -> None:
        """An abandoned attempt returned (on its own thread): tell the driver."""
        self.results.put((-1, attempt, FREED, None, 0.0, 0.0))

    def _replace_worker(self, slot: int, why: str, done: threading.Event) -> bool:
        """Give ``slot`` a new thread: its own is blocked in a timed-out attempt
        (``done`` is set when that returns). If none may be started, the slot gets
        no more work and what waits in its inbox goes to the other workers."""
        if self.crew is None:
            return False
        if not self.crew.replace(slot, why, done):
            self.balance.lost(slot, self.crew.blocked_slots(), self.now)
            return False
        self.balance.replaced(slot)
        return True

    def _lend(self, attempt: LiveAttempt) -> None:
        """The run let go of a timed-out ``attempt`` that still runs: what it holds is
        lent to it from outside the run until it returns (a FREED message)."""
        lent = self.state.lend(attempt.needs)
        if lent:
            self.lent[attempt] = lent
