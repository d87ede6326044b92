"""What a run hands back: values, per-task states, failures and the observed bounds."""

from __future__ import annotations

import enum
import os
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import describe

__all__ = ["RunResult", "RunStats", "StatusMap", "TaskState", "TraceRecord"]


class TaskState(enum.Enum):
    """How a task of a run ended."""

    DONE = "done"
    """It ran and returned a value."""
    FAILED = "failed"
    """It ran and raised; the exception is in ``RunResult.errors``."""
    SKIPPED = "skipped"
    """It never ran because a task it depends on (directly or not) failed."""
    CANCELLED = "cancelled"
    """It never started because the run stopped (a failure, an interrupt)."""

    def __repr__(self) -> str:
        return f"TaskState.{self.name}"


# A task's state during a run is one byte (a million tasks cost a megabyte):
# WAITING, READY and IN_FLIGHT are the scheduler's; a finished run holds only the
# four final codes, which map onto TaskState in this order.
WAITING, READY, IN_FLIGHT, DONE, FAILED, SKIPPED, CANCELLED = range(7)
# A chain member handed out with its chain, not yet running: the state machine's
# too (dagexec._state), and not final.
HELD = 7
_FINAL = {
    DONE: TaskState.DONE,
    FAILED: TaskState.FAILED,
    SKIPPED: TaskState.SKIPPED,
    CANCELLED: TaskState.CANCELLED,
}


class StatusMap(Mapping[Hashable, TaskState]):
    """Read-only map of every planned task to its final state.

    A view over the run's one-byte-per-task state array instead of a dict, so the
    status of a million-task run costs a megabyte, not a hundred.
    """

    __slots__ = ("_codes", "_index", "_names")

    def __init__(
        self, names: tuple[Hashable, ...], index: Mapping[Hashable, int], codes: bytearray
    ) -> None:
        self._names = names
        self._index = index
        self._codes = codes

    def __getitem__(self, name: Hashable) -> TaskState:
        return _FINAL[self._codes[self._index[name]]]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._index
        except TypeError:
            return False

    def __repr__(self) -> str:
        return f"StatusMap({dict(self)!r})"

    def state_of(self, code: int) -> TaskState:
        return _FINAL[code]


@dataclass(frozen=True, slots=True)
class RunStats:
    """The bounds a run actually reached, as observed by the scheduler thread.

    ``peak_in_flight`` counts tasks queued or running at once and never exceeds
    ``effective_cap``; ``peak_queue_depth[w]`` is the most tasks seen waiting in
    worker ``w``'s inbox right after a dispatch and never exceeds ``queue_cap``.
    ``resources`` are the run's capacities, ``peak_resources[r]`` the most of
    ``r`` held at once by tasks out (dispatched and not ended); never above its
    capacity. ``retries`` counts retry attempts (``retries=`` of a task): a task
    that failed twice and then succeeded adds 2 (and ``tasks_run``, which counts
    attempts that ran, 3). ``abandoned`` counts attempts that timed out and were
    still running when the run ended: the run did not wait for them (see
    docs/attempts.md). ``timeouts`` counts attempts that ran past their
    ``timeout=``, on threads and in child processes (whose child was killed):
    one ``on_task_timeout`` each.

    With a checkpoint, ``tasks_loaded`` counts the tasks whose value came from
    the file, whether loaded before the run or decided during it (downstream of
    a map or a ``checkpoint=False`` task, and map items); they are in
    ``tasks_planned`` but not in ``tasks_run`` (each is handed to a worker as a
    task that returns its stored value, so it does count in
    ``tasks_per_worker``: their sum is ``tasks_run + tasks_loaded``).
    """

    tasks_planned: int
    tasks_run: int
    wall_seconds: float
    workers: int
    queue_cap: int
    max_in_flight: int
    effective_cap: int
    peak_in_flight: int
    peak_queue_depth: tuple[int, ...]
    tasks_per_worker: tuple[int, ...]
    resources: Mapping[str, float] = field(default_factory=dict)
    peak_resources: Mapping[str, float] = field(default_factory=dict)
    tasks_loaded: int = 0
    retries: int = 0
    abandoned: int = 0
    timeouts: int = 0


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One executed task's timeline, in seconds since the run started.

    ``ready`` and ``dispatched`` are taken on the scheduler thread, ``started`` and
    ``ended`` on the worker that ran it, all from :func:`time.perf_counter`.
    There is one record per attempt: a task with ``retries=`` has one for each
    attempt that ran, ``attempt`` says which (1 without retries). ``group`` is the
    step it belongs to, which the Gantt chart colours by: the map's name for a
    map's item, else its function's name (see :mod:`dagexec._observation.groups`).

    ``outcome`` says how the attempt ended: ``"done"``, ``"failed"``,
    ``"cancelled"`` (the task's final state, for its last attempt),
    ``"retried"`` (it failed and the task was tried again), ``"timed out"`` (it
    ran past its ``timeout=``: ``ended`` is when the run stopped waiting for
    it), ``"killed"`` (it ran past its ``timeout=`` in a child process, which
    was killed: ``isolate="process"``) or ``"abandoned"`` (it timed out and
    still ran when the run ended). A failed attempt's ``state`` is FAILED.
    """

    name: Hashable
    worker: int
    state: TaskState
    ready: float
    dispatched: float
    started: float
    ended: float
    attempt: int = 1
    group: str = ""
    outcome: str = ""


class RunResult(Mapping[Hashable, Any]):
    """The values of a run's targets, plus what happened to every task in it.

    As a mapping it holds each target that produced a value. ``status`` has every
    task the run planned, ``errors`` every task that raised, ``stats`` the observed
    bounds and ``trace`` per-task timings (empty unless the run had ``trace=True``).
    """

    __slots__ = ("_stats", "_targets", "_values", "errors", "status", "trace")

    def __init__(
        self,
        values: dict[Hashable, Any],
        status: Mapping[Hashable, TaskState],
        errors: dict[Hashable, BaseException],
        stats: RunStats | tuple[Any, ...],
        trace: tuple[TraceRecord, ...] = (),
        targets: tuple[Hashable, ...] | None = None,
    ) -> None:
        self._values = values
        # The run's targets, only for explaining a missing value; None: the
        # values' keys (every target produced one).
        self._targets = targets
        self.status: Mapping[Hashable, TaskState] = status
        self.errors: Mapping[Hashable, BaseException] = errors
        # A RunStats, or its fields in order, made into one when first read: the
        # engine passes the fields, since most callers of a small run never read
        # them and the frozen dataclass costs ~4 us to make (15 object.__setattr__
        # calls), ~5% of a 1-task run's Python work (benchmarks/small_runs.py).
        self._stats = stats
        self.trace = trace

    @property
    def stats(self) -> RunStats:
        """The bounds the run reached: :class:`RunStats`."""
        stats = self._stats
        if type(stats) is tuple:
            stats = self._stats = RunStats(*stats)  # two threads may both: equal values
        return stats  # type: ignore[return-value]  # a RunStats, as checked above

    @stats.setter
    def stats(self, stats: RunStats) -> None:
        # An attribute it always was: a result pickled before the stats were made
        # lazily comes back through here (its state names ``stats``).
        self._stats = stats

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        """Pickled as before the stats were made lazily: ``stats`` a RunStats, so
        that a result pickled here loads where ``stats`` is a plain slot too."""
        state = {name: getattr(self, name) for name in self.__slots__ if name != "_stats"}
        state["stats"] = self.stats
        return None, state

    def __getitem__(self, name: Hashable) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(self._why_no_value(name)) from None

    def _why_no_value(self, name: Hashable) -> str:
        """Why ``name`` has no value here, and what to do about it."""
        what = describe(name)
        state = self.status.get(name)
        if state is None:
            return (
                f"{what} is not a task of this run: it is not in the graph, or not "
                "needed by the run's targets; check the spelling, or pass it in targets=[...]"
            )
        why = {
            TaskState.FAILED: f"it raised; the exception is result.errors[{what}]",
            TaskState.SKIPPED: "a task it depends on failed (see result.errors)",
            TaskState.CANCELLED: "the run stopped before it started (see result.errors)",
        }.get(state, "see result.status and result.errors")
        targets = self._values.keys() if self._targets is None else self._targets
        if name in targets:
            return f"target {what} has no value: it is {state.name}: {why}"
        if state is TaskState.DONE:
            return (
                f"{what} is not a target of this run: it ran, as an ancestor of a target, "
                f"but only targets keep their values; pass it in targets=[..., {what}] "
                "to get its value"
            )
        return (
            f"{what} is not a target of this run, and has no value anyway: "
            f"it is {state.name}: {why}"
        )

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def raise_for_errors(self) -> None:
        """Raise an ``ExceptionGroup`` of every task failure; do nothing if none failed."""
        if self.errors:
            failures = list(self.errors.values())
            n = len(failures)
            message = f"dagexec: {n} task{'s' if n != 1 else ''} failed"
            if all(isinstance(e, Exception) for e in failures):
                raise ExceptionGroup(message, failures)  # type: ignore[type-var]
            raise BaseExceptionGroup(message, failures)

    def trace_to_chrome(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as Chrome trace-event JSON (Perfetto, chrome://tracing)."""
        from .._observation.chrome import write_chrome_trace

        write_chrome_trace(self, path)

    def gantt_svg(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as a self-contained SVG timeline, one lane per worker."""
        from .._observation.gantt import write_gantt_svg

        write_gantt_svg(self, path)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for state in self.status.values():
            counts[state.name] = counts.get(state.name, 0) + 1
        summary = ", ".join(f"{k}={v}" for k, v in counts.items())
        return f"<dagexec.RunResult {len(self)} values; {summary}>"
