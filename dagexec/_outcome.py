"""Turning a finished run's state into the RunResult the caller gets. Pure.

Kept apart from the scheduler loop: this runs once per run, after every worker
is idle, and only reads what the scheduler thread left behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._result import DONE, RunResult, RunStats, StatusMap, TraceRecord

if TYPE_CHECKING:
    from ._scheduler import Run

__all__ = ["build_result"]


def build_result(run: Run, wall: float) -> RunResult:
    """The result of ``run``: target values, every task's state, errors, stats, trace."""
    plan, state = run.plan, run.state
    names = plan.names
    values = {names[t]: run.values[t] for t in plan.targets if state[t] == DONE}
    status = StatusMap(names, plan.index, state)
    errors = {names[t]: e for t, e in run.errors.items()}
    stats = RunStats(
        tasks_planned=len(plan),
        tasks_run=sum(run.ran_on),
        wall_seconds=wall,
        workers=len(run.inboxes),
        queue_cap=run.queue_cap,
        max_in_flight=run.max_in_flight,
        effective_cap=run.cap,
        peak_in_flight=run.peak_in_flight,
        peak_queue_depth=tuple(run.balance.peak_depth),
        tasks_per_worker=tuple(run.ran_on),
    )
    targets = tuple(names[t] for t in plan.targets)
    return RunResult(values, status, errors, stats, _trace(run, status), targets)


def _trace(run: Run, status: StatusMap) -> tuple[TraceRecord, ...]:
    if run.times is None:
        return ()
    names, state = run.plan.names, run.state
    records = [
        TraceRecord(
            name=names[task],
            worker=int(t[4]),
            state=status.state_of(state[task]),
            ready=t[0],
            dispatched=t[1],
            started=t[2],
            ended=t[3],
        )
        for task, t in run.times.items()
        if len(t) == 5  # ready, dispatched, started, ended, worker: the task ran
    ]
    records.sort(key=lambda r: r.started)
    return tuple(records)
