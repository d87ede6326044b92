"""The closing summary of ``python -m dagexec run``: every task counted once.

The table is built from the run's callbacks rather than from the RunResult,
because a run stopped by Ctrl-C or ``--timeout`` hands back no result, and the
summary matters most then. Its rows add up to the tasks planned (map items
included): each task is in exactly one of done, loaded, failed, skipped,
cancelled and running. "Running" tasks are those a stopped run left behind:
dispatched to a worker and not ended (a stop takes back and reports what was
still queued), so they had started, and they finish in the background with
their values dropped. A task with no report at all never started: cancelled
(a stopped run may report a task waiting on a running one only once that one
ends, which can be never).

The per-task hooks only count: a run pays two short calls per task for the
table (no start hook, which would make every worker report each start). They
run on the run's scheduler thread, and after a stop that thread may still
report the tasks it left running while the main thread prints the table, so
:meth:`RunTally.freeze` takes the snapshot the table is made of and later
reports change nothing. No lock: there is one writer, and a count read while
it moves is off by that one task, shown as running rather than ended.
"""

from __future__ import annotations

import time
from collections.abc import Container, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._core.result import TaskState

if TYPE_CHECKING:
    from .._core.hooks import PlanInfo
    from .._core.result import RunResult

__all__ = ["RunTally", "Snapshot", "summary_table"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The tally at one moment; ``planned`` equals the sum of the state counts."""

    planned: int
    from_maps: int
    done: int
    loaded: int
    failed: int
    skipped: int
    cancelled: int
    running: int
    retries: int
    timed_out: int
    seconds: float
    checkpoint: bool

    def rows(self) -> list[tuple[str, str]]:
        maps = f" ({self.planned - self.from_maps} in the graph, {self.from_maps} map items)"
        rows = [
            ("tasks planned", f"{self.planned}{maps if self.from_maps else ''}"),
            ("  done", str(self.done)),
        ]
        if self.loaded or self.checkpoint:
            rows.append(("  loaded", str(self.loaded)))  # from the checkpoint, not run
        rows += [
            ("  failed", str(self.failed)),
            ("  skipped", str(self.skipped)),
            ("  cancelled", str(self.cancelled)),
        ]
        if self.running:
            rows.append(
                (
                    "  running",
                    f"{self.running} (abandoned when the run stopped: they finish in the "
                    "background and their values are dropped)",
                )
            )
        rows += [
            ("retries", str(self.retries)),
            ("timed out", f"{self.timed_out} attempt{'' if self.timed_out == 1 else 's'}"),
        ]
        return rows


class RunTally:
    """A run callback that counts every task's fate, retries and timeouts."""

    def __init__(self) -> None:
        self._frozen: Snapshot | None = None
        self._started_at = time.monotonic()
        self.planned = 0
        self.from_maps = 0
        self.ended = dict.fromkeys(TaskState, 0)
        self.loaded = 0
        self.retries = 0
        self.timed_out = 0
        self._loaded_names: frozenset[Hashable] = frozenset()
        # Tasks decided on their workers during the run (downstream of a map or of
        # a checkpoint=False task, and map items): RunStats.tasks_loaded counts them.
        self._loaded_during: Container[Hashable] = frozenset()
        self._out: set[Hashable] = set()  # dispatched, not ended
        self.checkpoint = False
        self.started = False  # a run started: there is something to sum up

    def on_run_start(self, plan: PlanInfo) -> None:
        self._started_at = time.monotonic()
        self.planned = len(plan.tasks)
        inner = plan._plan
        self._loaded_names = frozenset()
        self._loaded_during = frozenset()
        if inner is not None and inner.loaded:
            self._loaded_names = frozenset(inner.names[t] for t in inner.loaded)
        if inner is not None and inner.loaded_during is not None:
            self._loaded_during = inner.loaded_during
        self.started = True

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        self._out.add(name)

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self._out.discard(name)
        if state is TaskState.DONE and (name in self._loaded_names or name in self._loaded_during):
            self.loaded += 1  # as RunStats.tasks_loaded counts it
        else:
            self.ended[state] += 1

    def on_task_retry(self, name: Hashable, attempt: int) -> None:
        self.retries += 1

    def on_task_timeout(self, name: Hashable, attempt: int) -> None:
        self.timed_out += 1

    def on_map_expand(self, name: Hashable, items: int) -> None:
        self.planned += items
        self.from_maps += items

    def freeze(self) -> Snapshot:
        """The counts now, for good: reports that come later (a stopped run's
        running tasks ending in the background) are not in it."""
        if self._frozen is None:
            planned, ended = self.planned, dict(self.ended)
            loaded, running = self.loaded, len(self._out)
            self._frozen = Snapshot(
                planned=planned,
                from_maps=self.from_maps,
                done=ended[TaskState.DONE],
                loaded=loaded,
                failed=ended[TaskState.FAILED],
                skipped=ended[TaskState.SKIPPED],
                # What was never reported never started: the run stopped first.
                cancelled=max(planned - sum(ended.values()) - loaded - running, 0)
                + ended[TaskState.CANCELLED],
                running=running,
                retries=self.retries,
                timed_out=self.timed_out,
                seconds=time.monotonic() - self._started_at,
                checkpoint=self.checkpoint,
            )
        return self._frozen


def _wall(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def summary_table(snapshot: Snapshot, result: RunResult | None) -> str:
    """The summary: the task counts, then the bounds the run reached (with a result)."""
    rows = snapshot.rows()
    if result is None:
        rows.append(("wall time", f"{_wall(snapshot.seconds)} (stopped before the end)"))
    else:
        stats = result.stats
        depth = max(stats.peak_queue_depth, default=0)
        rows += [
            ("wall time", _wall(stats.wall_seconds)),
            ("workers", str(stats.workers)),
            ("peak in flight", f"{stats.peak_in_flight} of cap {stats.effective_cap}"),
            ("peak queue depth", f"{depth} of cap {stats.queue_cap}"),
            ("tasks per worker", " ".join(map(str, stats.tasks_per_worker))),
        ]
        for resource, capacity in stats.resources.items():
            peak = stats.peak_resources.get(resource, 0)
            rows.append((f"peak {resource}", f"{peak:g} of capacity {capacity:g}"))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
