"""Retries: a failed attempt that may be retried waits on a timer, then is ready again.

Part of the run state machine, and as pure: the timers are a heap of due times
on the driver's clock, which the driver passes in as ``now`` (the machine reads
no clock). A waiting task keeps its arguments (``RunState.kept_args``) and holds
no slot and no resource; the driver releases its item as for any end.
:func:`wake` is bound as ``RunState.wake``; :func:`retry` is called by
:func:`dagexec._state.ending.ended` alone.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from .._core.errors import TaskTimeout
from .._core.policy import backoff
from .._core.result import FAILED, WAITING
from .._core.safe import add_note, str_for_message, task_for_message
from .events import RETRY, TIMED_OUT, Event

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["retry", "wake"]


def retry(
    run: RunState, task: int, exc: BaseException, worker: int, started: float, ended: float
) -> bool:
    """Send ``task`` back to wait for another attempt, if its policy allows; True if so."""
    policy = run.policy[task]  # type: ignore[index]
    assert policy is not None
    attempt = run.attempt.get(task, 1)
    if (
        attempt > policy.retries
        or (run.stopping and not (run.cleanup is not None and run.cleanup[task]))
        or run.hard
        or not isinstance(exc, Exception)
        or not isinstance(exc, policy.retry_on)
    ):
        if attempt > 1:
            add_note(exc, f"dagexec: failed on attempt {attempt} (retries={policy.retries})")
        return False
    run.attempt[task] = attempt + 1
    run.retries += 1
    if worker >= 0:
        run.ran_on[worker] += 1
    delay = backoff(policy.retry_delay, attempt, run.rand)
    if run.log is not None:
        run.log(
            "task %s failed (attempt %d of %d: %s: %s); retrying in %.3g s",
            task_for_message(run.names[task]),
            attempt,
            policy.retries + 1,
            type(exc).__name__,
            str_for_message(exc),
            delay,
        )
    if run.events is not None:
        how = TIMED_OUT if isinstance(exc, TaskTimeout) else FAILED
        run.events.append(Event(RETRY, task, worker, how, started, ended, attempt))
    run.state[task] = WAITING  # holds no slot and no resource while it waits
    run.seq += 1
    heapq.heappush(run.timers, (run.now + delay, run.seq, task))
    return True


def wake(run: RunState, now: float) -> float | None:
    """Make ready the tasks whose retry is due at ``now``; return when the next one
    is due, or None if no task waits for a retry."""
    timers, state = run.timers, run.state
    run.now = now
    if run.gate is not None:
        run.gate.expire(now)
    while timers and timers[0][0] <= now:
        task = heapq.heappop(timers)[2]
        if state[task] == WAITING:  # not cancelled while it waited
            run.make_ready(task)
    return timers[0][0] if timers else None
