"""Turning a finished run's state into the RunResult the caller gets. Pure.

Kept apart from the scheduler loop: this runs once per run, after every worker
is idle, and only reads what the scheduler thread left behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._result import DONE, RunResult, RunStats, StatusMap

if TYPE_CHECKING:
    from ._scheduler import Run

__all__ = ["build_result"]


def build_result(run: Run, wall: float) -> RunResult:
    """The result of ``run``: target values, every task's state, errors, stats, trace."""
    state = run.state
    plan, codes = run.plan, state.state
    names = tuple(state.names)  # the plan's, and the items of its maps
    values = {names[t]: state.values[t] for t in plan.targets if codes[t] == DONE}
    status = StatusMap(names, state.index, codes)
    errors = {names[t]: e for t, e in state.errors.items()}
    stats = RunStats(
        tasks_planned=len(plan),
        tasks_run=sum(state.ran_on),
        wall_seconds=wall,
        workers=len(run.inboxes),
        queue_cap=run.queue_cap,
        max_in_flight=run.max_in_flight,
        effective_cap=run.cap,
        peak_in_flight=state.peak_in_flight,
        peak_queue_depth=tuple(run.balance.peak_depth),
        tasks_per_worker=tuple(state.ran_on),
        resources=run.capacity,
        peak_resources=state.peak_resources(run.capacity),
    )
    trace = run.recorder.records(status, codes) if run.recorder is not None else ()
    return RunResult(values, status, errors, stats, trace)
