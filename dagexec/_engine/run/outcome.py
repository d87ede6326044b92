"""A run's start and end as the outside sees them: logs, run hooks, the RunResult.

Kept apart from the scheduler loop: this runs twice per run, and the end only
after every worker is idle, reading what the scheduler thread left behind.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ..._core.errors import TaskTimeout
from ..._core.hooks import Hooks, PlanInfo
from ..._core.plan import Plan
from ..._core.result import DONE, RunResult, StatusMap
from ..._core.task_logs import NO_LOGS
from ..._observation.capture import Capture
from ..._observation.observer import Observer
from ..._observation.trace import Recorder
from ..._state.runstate import RunState
from .balance import Balance

__all__ = ["Outcome", "announce", "build_result", "conclude"]

log = logging.getLogger("dagexec")


class Run(Protocol):
    """What a run's start and end read of it (:class:`~dagexec._engine.run.scheduler.Run`
    holds it; named here by what is read, as the run imports this module)."""

    @property
    def plan(self) -> Plan: ...
    @property
    def inboxes(self) -> Sequence[Any]: ...
    @property
    def info(self) -> bool: ...
    @property
    def bound(self) -> int: ...
    @property
    def hooks(self) -> Hooks: ...
    @property
    def queue_cap(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def observer(self) -> Observer: ...
    @property
    def state(self) -> RunState: ...
    @property
    def balance(self) -> Balance: ...
    @property
    def capacity(self) -> Mapping[str, float]: ...
    @property
    def abandoned(self) -> int: ...
    @property
    def abandoned_attempts(self) -> frozenset[tuple[int, int]]: ...
    @property
    def capture(self) -> Capture | None: ...


class Outcome(NamedTuple):
    """What the scheduler hands the caller: the result, and what to raise if anything.
    A tuple; a run's end makes it with ``tuple.__new__``, without the Python-level
    ``__new__`` of a named tuple."""

    result: RunResult | None
    error: BaseException | None


def announce(run: Run) -> None:
    """Log the run's start and call ``on_run_start``."""
    plan, workers = run.plan, len(run.inboxes)
    if run.info:
        log.info(
            "run start: %d tasks, %d targets, %d workers, effective cap %d",
            len(plan),
            len(plan.targets),
            workers,
            run.bound,
        )
    if run.hooks.run_start:
        info = PlanInfo(
            tasks=plan.names,
            targets=plan.target_names,
            workers=workers,
            queue_cap=run.queue_cap,
            max_in_flight=run.max_in_flight,
            effective_cap=run.bound,
            _plan=plan,
        )
        run.observer.call(run.hooks.run_start, info)


def log_interrupted(cancelled: int, running: int) -> None:
    """Say that a run was stopped from outside (Ctrl-C, cancel, its timeout)."""
    log.warning(
        "run interrupted: %d tasks cancelled, %d still running (they finish "
        "in the background; their results are dropped)",
        cancelled,
        running,
    )


def conclude(run: Run, result: RunResult) -> None:
    """Log the run's end and call ``on_run_end`` (called only where either is asked
    for, as :func:`announce` is at the start)."""
    if run.info:
        counts = Counter(s.name.lower() for s in result.status.values())
        log.info(
            "run end: %s in %.3f s; peak in flight %d of %d",
            ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
            result.stats.wall_seconds,
            run.state.peak_in_flight,
            run.bound,
        )
    if run.hooks.run_end:
        run.observer.call(run.hooks.run_end, result)


def build_result(run: Run, wall: float) -> RunResult:
    """The result of ``run``: target values, every task's state, errors, stats, trace."""
    state = run.state
    plan, codes = run.plan, state.state
    names = state.names  # the plan's, and the items of its maps (then a list)
    if type(names) is not tuple:
        names = tuple(names)
    # One C-level pass per column, not a Python loop per target: a big graph can
    # have a hundred thousand targets (its sinks). Targets are the plan's tasks,
    # never a map's items, so their names are the plan's.
    targets, target_names = plan.targets, plan.target_names
    target_codes = bytes(map(codes.__getitem__, targets))
    if target_codes.count(DONE) == len(targets):  # the usual case: every target done
        # Not strict=True: the two are the plan's, one name per target, and the
        # keyword alone costs ~1,600 instructions per run (parsed in C; cachegrind).
        values = dict(zip(target_names, map(state.values.__getitem__, targets)))  # noqa: B905
    else:
        values = _done_values(target_names, targets, target_codes, state.values)
    status = StatusMap(names, state.index, codes)
    errors = _named_errors(names, state.errors) if state.errors else {}
    loaded = 0
    if plan.loaded:
        loaded = sum(1 for t in plan.loaded if codes[t] == DONE)
    if plan.loaded_during is not None:  # decided on their workers (dagexec._core.loads)
        index = state.index
        loaded += sum(1 for n in plan.loaded_during.names() if codes[index[n]] == DONE)
    # RunStats' fields in order: the result makes the RunStats when first read.
    stats = (
        len(names),  # tasks_planned, with the items of the maps that expanded
        sum(state.ran_on) - loaded,  # tasks_run
        wall,  # wall_seconds
        len(run.inboxes),  # workers
        run.queue_cap,
        run.max_in_flight,
        run.bound,  # effective_cap
        state.peak_in_flight,
        tuple(run.balance.peak_depth),  # peak_queue_depth
        tuple(state.ran_on),  # tasks_per_worker
        run.capacity,  # resources
        state.peak_resources(run.capacity) if run.capacity else {},
        loaded,  # tasks_loaded
        state.retries,
        run.abandoned,
        state.timeouts,
    )
    recorder = run.observer.recorder
    logs = NO_LOGS if run.capture is None else run.capture.close(names, state.index)
    result = RunResult(values, status, errors, stats, (), target_names, logs)
    if recorder is not None:
        _add_trace(result, recorder, run, status)
    return result


# The two comprehensions of a result that is not the usual one, each a function of
# its own: in build_result, each made a cell for a name it reads at every call.


def _done_values(
    names: Sequence[Hashable], targets: Sequence[int], codes: bytes, values: Sequence[Any]
) -> dict[Hashable, Any]:
    """The values of the targets that are DONE (``codes``: the targets' states)."""
    return {
        name: values[t] for name, t, code in zip(names, targets, codes, strict=True) if code == DONE
    }


def _named_errors(
    names: Sequence[Hashable], errors: Mapping[int, BaseException]
) -> dict[Hashable, BaseException]:
    """The run's errors by task name."""
    return {names[t]: e for t, e in errors.items()}


def _add_trace(result: RunResult, recorder: Recorder, run: Run, status: StatusMap) -> None:
    """A traced run's records, and what each task needed (for the pictures)."""
    state = run.state
    names = state.names
    timed_out = {t for t, e in state.errors.items() if isinstance(e, TaskTimeout)}
    result.trace = recorder.records(status, state.state, timed_out, run.abandoned_attempts)
    if state.needs is not None:
        rnames, needs = state.resource_names, state.needs
        result._needs = {
            names[t]: tuple((rnames[r], amount) for r, amount in need)
            for t, need in enumerate(needs)
            if need
        }
