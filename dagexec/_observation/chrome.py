"""A run's trace as Chrome trace-event JSON, for Perfetto and chrome://tracing.

The format is the "JSON Object Format" of the Trace Event spec: complete ("X")
events with microsecond ``ts``/``dur``, one thread track per worker named by
metadata ("M") events, and a counter ("C") track of tasks in flight. Ready and
dispatch times ride along in ``args`` rather than as extra events, so a track
holds exactly one slice per executed task and the file stays one event per task.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

from .draw import attempt_label

if TYPE_CHECKING:
    from .._core.result import RunResult

__all__ = ["chrome_trace", "write_chrome_trace"]

_PID = 1


def _us(seconds: float) -> float:
    # Nanosecond resolution is all perf_counter offers; more digits only bloat the file.
    return round(seconds * 1e6, 3)


def require_trace(result: RunResult) -> None:
    """Refuse a result that ran tasks without tracing: an empty picture would look like idle."""
    if not result.trace and result.stats.tasks_run:
        raise ValueError("this result has no trace: run with trace=True to record task timings")


def chrome_trace(result: RunResult) -> dict[str, Any]:
    """The trace-event document for ``result`` (see the module docstring).

    Raises:
        ValueError: ``result`` ran tasks but was not traced.
    """
    require_trace(result)
    stats = result.stats
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": _PID, "tid": 0, "name": "process_name", "args": {"name": "dagexec run"}}
    ]
    for w in range(stats.workers):
        events.append(
            {
                "ph": "M",
                "pid": _PID,
                "tid": w,
                "name": "thread_name",
                "args": {"name": f"worker {w}"},
            }
        )
        events.append(
            {
                "ph": "M",
                "pid": _PID,
                "tid": w,
                "name": "thread_sort_index",
                "args": {"sort_index": w},
            }
        )
    # +1 at dispatch, -1 at end: the scheduler's in-flight count as seen from the trace.
    changes: list[tuple[float, int]] = []
    for rec in result.trace:
        events.append(
            {
                "ph": "X",
                "pid": _PID,
                "tid": rec.worker,
                "name": attempt_label(rec),
                "cat": rec.outcome or rec.state.value,
                "ts": _us(rec.started),
                "dur": _us(rec.ended - rec.started),
                "args": {
                    "state": rec.state.value,
                    "attempt": rec.attempt,
                    "outcome": rec.outcome or rec.state.value,
                    "ready_ms": round(rec.ready * 1e3, 6),
                    "dispatched_ms": round(rec.dispatched * 1e3, 6),
                    "queued_ms": round((rec.started - rec.dispatched) * 1e3, 6),
                },
            }
        )
        changes.append((rec.dispatched, 1))
        changes.append((rec.ended, -1))
    changes.sort()
    in_flight = 0
    for t, delta in changes:
        in_flight += delta
        events.append(
            {
                "ph": "C",
                "pid": _PID,
                "tid": 0,
                "name": "in flight",
                "ts": _us(t),
                "args": {"tasks": in_flight},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "dagexec",
            **dataclasses.asdict(stats),
        },
    }


def write_chrome_trace(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`chrome_trace` of ``result`` to ``path`` as compact JSON."""
    doc = chrome_trace(result)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
