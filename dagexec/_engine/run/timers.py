"""Attempt timeouts and cancellation tokens of per-task policies, for the driver.

Only runs whose plan has a policy (``Run.timed``) create one. Retry waits are
timers in the state machine (``RunState.timers``); attempt timeouts live here,
because they count from each attempt's STARTED report, which only the driver
sees. A timed-out attempt ends for the state machine at once (failed with
TaskTimeout, maybe retried) but keeps its in-flight slot and resources until its
function returns; its worker reports an :class:`~dagexec._engine.run.attempts.Overran`
instead of the value, which frees them (see :mod:`dagexec._engine.run.attempts`).

Owned by the thread that drives the run, like the run state; tokens are Flags
(cheap ``threading.Event`` objects: ``flag.py``), which the running attempt reads
through ``current_task()``.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Sequence
from time import perf_counter

from ..._core.errors import TaskTimeout
from ..._core.policy import Attempt, CurrentTask, Policy
from ..._core.result import IN_FLIGHT
from ..._core.safe import task_for_message
from ..._state.events import ABANDONED, LET_GO, R_TASK, Report
from ..._state.runstate import RunState
from . import clock
from .attempts import TIMED_OUT, AttemptBook, LiveAttempt, Overran, TimedAttempt
from .flag import Flag

__all__ = ["AttemptTimers"]

log = logging.getLogger("dagexec")


class AttemptTimers:
    """Tokens of running attempts, their deadlines, and timed-out attempts still running.

    What an attempt with a timeout is, and who decides whether it ended in time,
    is :mod:`dagexec._engine.run.attempts`; this is the driver's side of it.
    """

    __slots__ = (
        "book",
        "deadlines",
        "lend",
        "let_go",
        "live",
        "overdue",
        "replace",
        "run",
        "running_on",
        "seq",
        "state",
        "tokens",
    )

    def __init__(
        self,
        state: RunState,
        book: AttemptBook | None = None,
        replace: Callable[[int, str, threading.Event], object] | None = None,
        run: int = 0,
    ) -> None:
        self.state = state
        self.book = book if book is not None else AttemptBook()
        self.replace = replace  # gives a worker slot a new thread (the executor's crew)
        self.run = run  # the book's number for this run
        self.tokens: dict[int, threading.Event] = {}  # task -> its running attempt's token
        self.live: dict[int, LiveAttempt] = {}  # task -> its attempt out, if it has a timeout
        self.deadlines: list[tuple[float, int, int, int]] = []  # (due, seq, task, attempt)
        self.running_on: dict[int, tuple[int, float]] = {}  # task -> (worker, started)
        # Timed-out attempts of this run whose function has not returned: they keep
        # their slot and resources until it does, or are abandoned when the run ends.
        self.overdue: dict[LiveAttempt, int] = {}
        # Timed-out attempts whose worker got a new thread: the run let go of them.
        self.let_go: dict[LiveAttempt, int] = {}
        self.lend: Callable[[LiveAttempt], object] | None = None  # the run's, see _time_out
        self.seq = 0

    def close(self) -> None:
        """The run is over: drop the run's callbacks (bound methods of the run, which
        holds these timers), so that the run goes by reference counting, not at
        the next cyclic collection."""
        self.replace = self.lend = None

    @property
    def holds(self) -> bool:
        """Whether attempts the run let go of at their timeout still run: their return
        (a FREED report) may free resources or let a cleanup task through its gate,
        so the run waits for it even with nothing in flight."""
        return bool(self.let_go)

    def attempt(self, task: int, policy: Policy, flag_start: int) -> tuple[Attempt, int]:
        """The function of ``task``'s next attempt, wrapped so that it can see
        itself (``current_task()``), and the extra flags its job needs."""
        state = self.state
        # A cleanup task sent out during a stop starts clear. A Flag, not an Event: an
        # Event builds its Condition, ~4 us of the driving thread's CPU per process task
        # (docs/performance.md, "Process tasks"; flag.py says why it behaves the same).
        token = Flag()
        self.tokens[task] = token
        number = state.attempt.get(task, 1)
        info = CurrentTask(state.names[task], number, token)
        # A process task times itself (its worker thread kills the child past the
        # timeout and reports TaskTimeout): no STARTED report, nothing to abandon.
        if not policy.timeout or policy.isolate is not None:
            return Attempt(state.fns[task], info), 0
        needs: tuple[tuple[str, float], ...] = ()
        if state.needs is not None:
            names = state.resource_names
            needs = tuple((names[r], amount) for r, amount in state.needs[task])
        live = LiveAttempt(
            self.book, state.names[task], number, -1, policy.timeout, needs, self.run
        )
        self.live[task] = live
        return TimedAttempt(state.fns[task], info, live), flag_start

    def forget(self, task: int) -> None:
        """``task``'s attempt was taken back before it was handed out."""
        self.tokens.pop(task, None)
        self.live.pop(task, None)

    def stop_all(self, spare_cleanup: bool = False) -> None:
        """A stop: every running attempt sees it through its token; with
        ``spare_cleanup`` (any stop but a hard abort) cleanup tasks' attempts do
        not, since they are meant to run to their end after a stop."""
        cleanup = self.state.cleanup if spare_cleanup else None
        for task, token in self.tokens.items():
            if cleanup is None or task >= len(cleanup) or not cleanup[task]:
                token.set()

    def started(self, task: int, worker: int, now: float) -> None:
        """An attempt began on ``worker``: its deadline counts from the worker's own
        stamp (taken as its function was entered), however late we hear of it."""
        live = self.live.get(task)
        if live is None:
            return
        live.worker = worker
        self.running_on[task] = (worker, now)
        begun = live.started
        if begun is None:  # not stamped yet: it starts after now
            begun = clock.now()
        self.seq += 1
        heapq.heappush(self.deadlines, (begun + live.timeout, self.seq, task, live.number))

    def ended(self, reports: Sequence[Report]) -> None:
        """The attempts of ``reports`` (their tasks' ends: values returned, in a batch,
        or a failure) returned in time: their tokens and deadlines are let go of."""
        tokens, live, running_on = self.tokens, self.live, self.running_on
        for report in reports:
            task = report[R_TASK]
            tokens.pop(task, None)
            live.pop(task, None)
            running_on.pop(task, None)

    def overran(self, task: int, late: Overran, worker: int, started: float, ended: float) -> bool:
        """A report of an attempt that returned after its deadline: its value is never
        used. Times the task out now if the worker was first to notice. Frees the
        attempt's slot and resources unless the run let go of them at its timeout
        (its worker was replaced: see :meth:`_time_out`); True if it did here, so
        that the report still counts as off its worker."""
        state, live = self.state, late.attempt
        if late.by_worker:  # the driver's timer had not fired: time it out now
            self.tokens.pop(task, None)
            self.live.pop(task, None)
            self.running_on.pop(task, None)
            state.release(task, live.number)  # first: a retry may take the slot
            self._fail(task, live.number, worker, started, ended)
            return True
        if self.overdue.pop(live, None) is None:
            return False  # let go at its timeout; its resources came back as FREED
        state.release(task, live.number)
        return True

    def freed(self, live: LiveAttempt) -> None:
        """An attempt this run let go of at its timeout has returned on its thread."""
        task = self.let_go.pop(live, None)
        if task is not None:
            self.state.let_go_returned(task)

    def due(self) -> float | None:
        """Wake the retries that are due, time out the attempts that ran too long;
        return the seconds until the next timer, or None if there is none."""
        state, deadlines = self.state, self.deadlines
        if not deadlines and not state.timers and state.gate is None:
            # Nothing timed (a run of process tasks, which time themselves): no clock,
            # no wake, no list, on every round of such a run (~2 us a task of its
            # driving thread; the state's clock is read as reports arrive, Driver._receive).
            return None
        now = clock.now()
        state.wake(now)
        while deadlines and (deadlines[0][0] <= now or self._over(deadlines[0])):
            _, _, task, attempt = heapq.heappop(deadlines)
            self._time_out(task, attempt)
        state.wake(now)  # a timed-out attempt retried at once
        times = [q[0][0] for q in (state.timers, deadlines) if q]
        if state.gate is not None:  # a cleanup task waiting for its ancestors, timed
            held_until = state.gate.next_deadline()
            if held_until is not None:
                times.append(held_until)
        return min(times) - now if times else None

    def abandon(self) -> list[tuple[LiveAttempt, int]]:
        """The run ends: its timed-out attempts still running are abandoned; returns
        them with their tasks. The run lets go of the slots of those it still held
        (the executor keeps their resources until they return)."""
        overdue, book = self.overdue, self.book
        held = [(live, overdue[live]) for live in book.abandon(list(overdue))]
        overdue.clear()
        for live, task in held:
            self.state.release(task, live.number, ABANDONED)
        let_go = [(live, task) for live, task in self.let_go.items() if not live.done.is_set()]
        self.let_go.clear()
        return held + let_go

    def _over(self, deadline: tuple[float, int, int, int]) -> bool:
        """True if the attempt this deadline was for has ended: it need not wake us."""
        task, attempt = deadline[2], deadline[3]
        state = self.state
        return state.state[task] != IN_FLIGHT or state.attempt.get(task, 1) != attempt

    def _fail(self, task: int, attempt: int, worker: int, started: float, ended: float) -> None:
        """``task``'s attempt ``attempt`` timed out: the one place the driver says so
        to the run (a process task's is the report of its worker: see reports.handle)."""
        self.state.timed_out(task, attempt, self._error(task, attempt), worker, started, ended)

    def _error(self, task: int, attempt: int) -> TaskTimeout:
        policies = self.state.policy
        assert policies is not None
        policy = policies[task]
        assert policy is not None and policy.timeout is not None
        exc = TaskTimeout(self.state.names[task], policy.timeout, attempt)
        log.info("%s", exc)
        return exc

    def _time_out(self, task: int, attempt: int) -> None:
        """``task``'s attempt ran past its timeout: it fails now with TaskTimeout.

        Its thread runs on (it cannot be stopped). Its worker slot gets a new
        thread, and then the run lets go of it: its in-flight slot is free, and
        its resources are lent to it from outside the run (``lend``) until its
        function returns (a FREED message, to this run or a later one). If no new
        thread may be started, it keeps its slot and resources in the run until
        its function returns or the run ends.
        """
        if self._over((0.0, 0, task, attempt)):
            return  # that attempt ended in time
        live = self.live.get(task)
        if live is None or not live.settle(TIMED_OUT):
            return  # it returned in time: its report is on its way
        del self.live[task]
        worker, started = self.running_on.pop(task)
        token = self.tokens.pop(task, None)
        if token is not None:
            token.set()
        self.book.timed_out(live)
        state = self.state
        try:
            why = f"attempt {live.number} of task {task_for_message(live.name)}"
            replaced = self.replace is not None and bool(self.replace(worker, why, live.done))
            if replaced:
                # Its thread waits for `decided` before it can return: not returned yet.
                self.book.abandon([live])
                self.let_go[live] = task
                state.release(task, live.number, LET_GO)
                if self.lend is not None:
                    self.lend(live)
            else:
                self.overdue[live] = task
        finally:
            live.decided.set()  # its thread may go back to an inbox now
        self._fail(task, attempt, worker, started, perf_counter())
