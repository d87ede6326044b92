"""Attempt timeouts and cancellation tokens of per-task policies, for the driver.

Only runs whose plan has a policy (``Run.timed``) create one. Retry waits are
timers in the state machine (``RunState.timers``); attempt timeouts live here,
because they count from each attempt's STARTED report, which only the driver
sees. A timed-out attempt ends for the state machine at once (failed with
TaskTimeout, maybe retried) but keeps its in-flight slot and resources until its
worker reports; that late report is recognised by (task, worker), since a
worker reports in order, and dropped.

Owned by the thread that drives the run, like the run state; tokens are Events,
which the running attempt reads through ``current_task()``.
"""

from __future__ import annotations

import heapq
import logging
import threading
from time import monotonic, perf_counter

from .._core.errors import TaskTimeout
from .._core.policy import Attempt, CurrentTask, Policy
from .._core.result import FAILED, IN_FLIGHT
from .._state.runstate import RunState

__all__ = ["AttemptTimers"]

log = logging.getLogger("dagexec")

# The clock of retry waits and timeouts (the trace and the balancer use
# perf_counter). A module global so that tests can drive it by hand.
_clock = monotonic


def clock() -> float:
    """The policy clock's now (through the module global, which tests replace)."""
    return _clock()


class AttemptTimers:
    """Tokens of running attempts, their deadlines, and timed-out attempts' late reports."""

    __slots__ = ("deadlines", "running_on", "seq", "stale", "state", "tokens")

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.tokens: dict[int, threading.Event] = {}  # task -> its running attempt's token
        self.deadlines: list[tuple[float, int, int, int]] = []  # (due, seq, task, attempt)
        self.running_on: dict[int, tuple[int, float]] = {}  # task -> (worker, started)
        # (task, worker) -> reports still to come from timed-out attempts: they are
        # discarded, and free their slot and resources only then.
        self.stale: dict[tuple[int, int], int] = {}
        self.seq = 0

    def attempt(self, task: int, policy: Policy, flag_start: int) -> tuple[Attempt, int]:
        """The function of ``task``'s next attempt, wrapped so that it can see
        itself (``current_task()``), and the extra flags its job needs."""
        state = self.state
        token = threading.Event()  # a cleanup task sent out during a stop starts clear
        self.tokens[task] = token
        info = CurrentTask(state.names[task], state.attempt.get(task, 1), token)
        # A process task times itself (see started): it needs no STARTED report.
        timed_here = policy.timeout is not None and policy.isolate is None
        return Attempt(state.fns[task], info), flag_start if timed_here else 0

    def forget(self, task: int) -> None:
        """``task``'s attempt was taken back before it was handed out."""
        self.tokens.pop(task, None)

    def stop_all(self) -> None:
        """A stop: every running attempt sees it through its token."""
        for token in self.tokens.values():
            token.set()

    def started(self, task: int, worker: int, now: float) -> None:
        """An attempt began on ``worker``: its timeout counts from now."""
        policies = self.state.policy
        policy = None if policies is None else policies[task]
        if policy is None or policy.timeout is None:
            return
        if policy.isolate is not None:
            # Its worker thread times the child from when the child starts the
            # call, kills it past the timeout and reports TaskTimeout itself:
            # nothing is left running, so nothing needs to be abandoned here.
            return
        self.running_on[task] = (worker, now)
        self.seq += 1
        attempt = self.state.attempt.get(task, 1)
        heapq.heappush(self.deadlines, (_clock() + policy.timeout, self.seq, task, attempt))

    def ended(self, task: int, worker: int) -> bool:
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

    def due(self) -> float | None:
        """Wake the retries that are due, time out the attempts that ran too long;
        return the seconds until the next timer, or None if there is none."""
        state, deadlines = self.state, self.deadlines
        now = _clock()
        state.wake(now)
        while deadlines and (deadlines[0][0] <= now or self._over(deadlines[0])):
            _, _, task, attempt = heapq.heappop(deadlines)
            self._time_out(task, attempt)
        state.wake(now)  # a timed-out attempt retried at once
        times = [q[0][0] for q in (state.timers, deadlines) if q]
        return min(times) - now if times else None

    def _over(self, deadline: tuple[float, int, int, int]) -> bool:
        """True if the attempt this deadline was for has ended: it need not wake us."""
        task, attempt = deadline[2], deadline[3]
        state = self.state
        return state.state[task] != IN_FLIGHT or state.attempt.get(task, 1) != attempt

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
        state.finish(task, FAILED, exc, worker, started, perf_counter())
