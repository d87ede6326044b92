"""Retries: a failed attempt that may be retried waits on a timer, then is ready again.

Part of the run state machine, and as pure: the timers are a heap of due times
on the driver's clock, which the driver passes in as ``now`` (the machine reads
no clock). A waiting task keeps its arguments (``RunState.kept_args``) and holds
no slot and no resource; the driver releases its item as for any end.
A layer of ``RunState`` over :class:`~dagexec._state.core.RunCore`: the driver
calls :meth:`Retrying.wake`; :meth:`Retrying.retry` is called by ``ended`` alone.
"""

from __future__ import annotations

import heapq

from .._core.errors import TaskTimeout
from .._core.policy import backoff
from .._core.result import FAILED, WAITING
from .._core.safe import add_note, str_for_message, task_for_message
from .core import RunCore
from .events import RETRY, TIMED_OUT, Event

__all__ = ["Retrying"]


class Retrying(RunCore):
    """A run whose failed attempts may wait on a timer for their retry."""

    __slots__ = ()

    def retry(
        self, task: int, exc: BaseException, worker: int, started: float, ended: float
    ) -> bool:
        """Send ``task`` back to wait for another attempt, if its policy allows; True if so."""
        policy = self.policy[task]  # type: ignore[index]
        assert policy is not None
        attempt = self.attempt.get(task, 1)
        if (
            attempt > policy.retries
            or (self.stopping and not (self.cleanup is not None and self.cleanup[task]))
            or self.hard
            or not isinstance(exc, Exception)
            or not isinstance(exc, policy.retry_on)
        ):
            if attempt > 1:
                add_note(exc, f"dagexec: failed on attempt {attempt} (retries={policy.retries})")
            return False
        self.attempt[task] = attempt + 1
        self.retries += 1
        if worker >= 0:
            self.ran_on[worker] += 1
        delay = backoff(policy.retry_delay, attempt, self.rand)
        if self.log is not None:
            self.log(
                "task %s failed (attempt %d of %d: %s: %s); retrying in %.3g s",
                task_for_message(self.names[task]),
                attempt,
                policy.retries + 1,
                type(exc).__name__,
                str_for_message(exc),
                delay,
            )
        if self.events is not None:
            how = TIMED_OUT if isinstance(exc, TaskTimeout) else FAILED
            self.events.append(Event(RETRY, task, worker, how, started, ended, attempt))
        self.state[task] = WAITING  # holds no slot and no resource while it waits
        self.seq += 1
        heapq.heappush(self.timers, (self.now + delay, self.seq, task))
        return True

    def wake(self, now: float) -> float | None:
        """Make ready the tasks whose retry is due at ``now``; return when the next one
        is due, or None if no task waits for a retry."""
        timers, state = self.timers, self.state
        self.now = now
        if self.gate is not None:
            self.gate.expire(now)
        while timers and timers[0][0] <= now:
            task = heapq.heappop(timers)[2]
            if state[task] == WAITING:  # not cancelled while it waited
                self.make_ready(task)
        return timers[0][0] if timers else None
