"""What the messages on a run's results queue mean, applied a batch at a time.

Workers report each item's start (only when asked), its end (a value, an error,
a chain's end, a chain member's end) or that they refused it (the run had
stopped); an abandoned attempt's thread reports that it returned (FREED); the
caller puts ABORT. :func:`handle` turns each into what the run state, the
balancer and the attempt timers must hear. The driver
(:mod:`dagexec._engine.run.driver`) only hands it the batches. It keeps nothing
of its own, so it is a function of the run's one record, of which it reads the
stop's layer (:class:`~dagexec._engine.run.run_stop.RunStop`). Driving thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ..._core.errors import Cancelled, TaskTimeout
from ..._core.result import CANCELLED as S_CANCELLED
from ..._core.result import DONE as S_DONE
from ..._core.result import FAILED as S_FAILED
from ..._state.events import KILLED, Report
from ..._state.runstate import RunState
from ..workers.wire import (
    ABORT,
    CHAIN,
    FAILED,
    FREED,
    MEMBER,
    NOT_STARTED,
    STARTED,
    Message,
)
from .attempts import Overran
from .run_stop import RunStop
from .timers import AttemptTimers

__all__ = ["handle"]


# Over ruff's complexity limit on purpose: one branch per report kind, for every report: a split
# adds a call per report.
def handle(run: RunStop, batch: list[Message], now: float) -> None:  # noqa: C901
    """Apply what arrived on the results queue by ``now``, in order, and let go of it.

    Jobs that returned a value (the bulk, on a graph of small tasks) go to the
    state machine together, in runs between the other messages, which alone
    are looked at one by one. In a run with a task policy (process tasks have
    one), the attempt timers hear of each run of values first (:func:`_returned`);
    such values used to go one by one, through ``finish`` and ``release``, ~5 us
    more per process task on the driving thread (docs/performance.md, "Process tasks").
    """
    state, timers = run.state, run.timers
    # A plain run calls the state machine itself: no call more per batch (the speed
    # gate counts them, and the wide graph's batches are mostly of one report).
    returned = state.ended if timers is None else partial(_returned, state, timers)
    others: Sequence[int] = run.balance.off_workers(batch, now)
    if not others:  # the usual batch: every job returned a value
        returned(batch)  # type: ignore[arg-type]  # only DONE reports, as others says
        batch.clear()
        return
    start = 0  # the first returned value not yet applied
    for i in others:
        if start < i:  # the returned values before this message come first
            returned(batch[start:i])  # type: ignore[arg-type]  # DONE reports only
        start = i + 1
        msg = batch[i]
        if msg is ABORT:
            run.apply_abort()
            continue
        worker, task, kind, payload, started, ended = msg
        if kind == NOT_STARTED:  # refused by its worker: the run had stopped
            run.refused()
            run.balance.off(worker, now)
            if timers is not None:
                timers.forget(task)
            state.take_back(task)
        elif kind == MEMBER:  # a chain member ended; the chain is still in flight
            state.finish(task, S_DONE, None, worker, started, ended)
        elif kind == FREED:  # an attempt this run or an earlier one let go returned
            lent = run.lent.pop(task, None)
            if lent is not None:
                state.give_back(lent)
            if timers is not None:
                timers.freed(task)
        elif kind == STARTED:
            state.started(task, worker)
            if timers is not None:
                timers.started(task, worker, now)
        elif timers is not None and kind == FAILED and type(payload) is Overran:
            # Its value is never used; it was off its worker already if the
            # run let go of it at its timeout (its worker got a new thread).
            if timers.overran(task, payload, worker, started, ended):
                run.balance.off(worker, now)
        elif kind == CHAIN:  # off its worker already (Balance.off_workers)
            state.chain_ended(task, payload, worker)
        else:  # a job failed, and is off its worker (values returned go in runs, above)
            run.balance.off(worker, now)
            if timers is not None:
                timers.ended((msg,))  # a failure's report
            outcome = S_FAILED
            if state.stopping and isinstance(payload, Cancelled):
                outcome = S_CANCELLED  # it obeyed the stop: not a failure of its own
            number = state.attempt.get(task, 1)  # before a retry counts on
            if type(payload) is TaskTimeout and payload.killed:
                # A process task's worker timed it out and killed its child.
                state.timed_out(task, number, payload, worker, started, ended, killed=True)
                state.release(task, number, KILLED)
                continue
            state.finish(task, outcome, payload, worker, started, ended)
            state.release(task, number)
    if start < len(batch):
        returned(batch[start:])  # type: ignore[arg-type]  # DONE reports only
    batch.clear()


def _returned(state: RunState, timers: AttemptTimers, reports: list[Report]) -> None:
    """Jobs that returned a value, in a row of the batch: the state machine's in one
    call (each is off its worker: released there, see ``Ending.ended``), after the
    timers have heard that each attempt ended in time (an attempt past its deadline
    reports FAILED with an :class:`Overran`, never DONE)."""
    timers.ended(reports)
    state.ended(reports)
