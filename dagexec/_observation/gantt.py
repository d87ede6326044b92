"""A run's trace as a self-contained SVG timeline: one lane per worker.

Built as plain strings (no dependency, no script, no external font), so the file
opens in any browser and renders on a repository page. Each executed task is a
bar coloured by outcome, its name and timings in a ``<title>`` (the hover text).

A picture stays useful at any size by switching representation rather than
drawing what cannot be seen. When most bars would be narrower than a pixel
(and there are enough of them to matter), or there are more than
:data:`MAX_BARS` tasks, each worker lane is drawn per pixel column instead:
the column's share of busy time sets the opacity and its outcome mix the colour
(done, failed, or both), and runs of equal columns merge into one rectangle.
The file then grows with the width of the picture, not with the task count,
and the title and legend say that it is aggregated.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from .._core.result import TaskState
from .chrome import require_trace
from .draw import attempt_label

if TYPE_CHECKING:
    from .._core.result import RunResult, TraceRecord

__all__ = ["MAX_BARS", "gantt_svg", "write_gantt_svg"]

MAX_BARS = 5000
"""Above this many tasks, always aggregate: a bigger SVG gets slow to open and
no longer shows single tasks anyway. Raising it keeps per-task hover text for
bigger runs at the cost of file size (about 250 bytes per task)."""

_MIN_NARROW_TO_AGGREGATE = 200
"""Sub-pixel bars are still drawn one by one (1 px wide) while there are fewer
than this many; below it the overlap hides little and every task keeps its
hover text."""

DONE_COLOR = "#43a047"
FAILED_COLOR = "#e53935"
MIXED_COLOR = "#fb8c00"

_WIDTH = 1000
_MARGIN = 12
_LEFT = 80
_RIGHT = 24
_TOP = 56
_LANE = 22
_LANE_GAP = 4
_CHAR_PX = 6.6  # average width of an 11 px sans-serif character, for fitting labels
_OPACITY_LEVELS = 4  # busy share is shown in quarters, so equal columns can merge


def _clean(text: str) -> str:
    """Escape for XML text and drop the control characters XML 1.0 cannot hold at all."""
    return escape("".join(ch if ch >= " " or ch in "\t\n" else "\ufffd" for ch in text))


def _fmt_seconds(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _ticks(span: float) -> tuple[list[float], float, str]:
    """About 5-10 round tick positions over ``[0, span]``, and the unit to label them in."""
    raw = span / 8
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if span >= 2:
        factor, unit = 1.0, "s"
    elif span >= 2e-3:
        factor, unit = 1e3, "ms"
    else:
        factor, unit = 1e6, "us"
    count = int(span / step + 1e-9)
    return [i * step for i in range(count + 1)], factor, unit


def _bar_title(rec: TraceRecord) -> str:
    return (
        f"{attempt_label(rec)}: {rec.outcome or rec.state.value} in "
        f"{_fmt_seconds(rec.ended - rec.started)} "
        f"on worker {rec.worker} (ready {_fmt_seconds(rec.ready)}, dispatched "
        f"{_fmt_seconds(rec.dispatched)}, started {_fmt_seconds(rec.started)})"
    )


def _css(outcome: str) -> str:
    """An attempt's outcome as a class name: ``timed-out``."""
    return outcome.replace(" ", "-")


def _detailed(trace: tuple[TraceRecord, ...], scale: float, lane_y: Sequence[float]) -> list[str]:
    out = []
    for rec in trace:
        x = _LEFT + rec.started * scale
        w = max((rec.ended - rec.started) * scale, 1.0)
        y = lane_y[rec.worker] + 1
        color = FAILED_COLOR if rec.state is TaskState.FAILED else DONE_COLOR
        parts = [
            f"<g><title>{_clean(_bar_title(rec))}</title>",
            f'<rect class="task {rec.state.value} {_css(rec.outcome)}" x="{x:.2f}" y="{y:.2f}" '
            f'width="{w:.2f}" height="{_LANE - 2}" fill="{color}" stroke="#ffffff" '
            f'stroke-width="0.5"/>',
        ]
        label = attempt_label(rec)
        if w >= len(label) * _CHAR_PX + 6:
            parts.append(
                f'<text x="{x + 3:.2f}" y="{y + _LANE / 2 + 3:.2f}" class="label">'
                f"{_clean(label)}</text>"
            )
        parts.append("</g>")
        out.append("".join(parts))
    return out


def _aggregated(
    trace: tuple[TraceRecord, ...],
    workers: int,
    columns: int,
    span: float,
    lane_y: Sequence[float],
) -> list[str]:
    col_dt = span / columns
    # Per lane and pixel column: busy seconds by outcome, tasks started there.
    done_busy = [[0.0] * columns for _ in range(workers)]
    failed_busy = [[0.0] * columns for _ in range(workers)]
    started = [[0] * columns for _ in range(workers)]
    failed = [[0] * columns for _ in range(workers)]
    for rec in trace:
        busy = failed_busy[rec.worker] if rec.state is TaskState.FAILED else done_busy[rec.worker]
        first = min(int(rec.started / col_dt), columns - 1)
        last = min(int(rec.ended / col_dt), columns - 1)
        started[rec.worker][first] += 1
        if rec.state is TaskState.FAILED:
            failed[rec.worker][first] += 1
        # A worker runs one task at a time, so a lane's columns are visited
        # about (columns + tasks) times in all: linear, not columns x tasks.
        for c in range(first, last + 1):
            lo = max(rec.started, c * col_dt)
            hi = min(rec.ended, (c + 1) * col_dt)
            if hi > lo:
                busy[c] += hi - lo
    out = []
    for w in range(workers):
        y = lane_y[w] + 1
        c = 0
        while c < columns:
            key = _column_key(done_busy[w][c], failed_busy[w][c], col_dt)
            end = c + 1
            while (
                end < columns and _column_key(done_busy[w][end], failed_busy[w][end], col_dt) == key
            ):
                end += 1
            if key is not None:
                kind, level = key
                n_started = sum(started[w][c:end])
                n_failed = sum(failed[w][c:end])
                busy_share = (sum(done_busy[w][c:end]) + sum(failed_busy[w][c:end])) / (
                    (end - c) * col_dt
                )
                title = (
                    f"worker {w}, {_fmt_seconds(c * col_dt)} to {_fmt_seconds(end * col_dt)}: "
                    f"{n_started} {'task' if n_started == 1 else 'tasks'} started "
                    f"({n_failed} failed), busy {busy_share:.0%}"
                )
                color = {"done": DONE_COLOR, "failed": FAILED_COLOR, "mixed": MIXED_COLOR}[kind]
                out.append(
                    f"<g><title>{_clean(title)}</title>"
                    f'<rect class="agg {kind}" x="{_LEFT + c}" y="{y:.2f}" width="{end - c}" '
                    f'height="{_LANE - 2}" fill="{color}" fill-opacity="{level:.2f}"/></g>'
                )
            c = end
    return out


def _column_key(done: float, failed: float, col_dt: float) -> tuple[str, float] | None:
    busy = done + failed
    if busy <= 0:
        return None
    kind = "mixed" if done and failed else ("failed" if failed else "done")
    level = min(math.ceil(busy / col_dt * _OPACITY_LEVELS - 1e-9), _OPACITY_LEVELS)
    return kind, max(level, 1) / _OPACITY_LEVELS


def gantt_svg(result: RunResult, *, width: int = _WIDTH, aggregate: bool | None = None) -> str:
    """The SVG document for ``result``'s trace (see the module docstring).

    ``aggregate`` forces per-pixel-column drawing on or off; None decides by size.

    Raises:
        ValueError: ``result`` ran tasks but was not traced.
    """
    require_trace(result)
    trace = result.trace
    stats = result.stats
    workers = stats.workers
    plot_w = max(width - _LEFT - _RIGHT, 50)
    span = max([stats.wall_seconds, *(r.ended for r in trace)])
    if span <= 0:
        span = 1e-6
    scale = plot_w / span
    narrow = sum(1 for r in trace if (r.ended - r.started) * scale < 1)
    if aggregate is None:
        aggregate = len(trace) > MAX_BARS or (
            narrow >= _MIN_NARROW_TO_AGGREGATE and 2 * narrow > len(trace)
        )
    lane_y = [_TOP + w * (_LANE + _LANE_GAP) for w in range(workers)]
    axis_y = _TOP + workers * (_LANE + _LANE_GAP) + 2
    legend_y = axis_y + 34
    height = legend_y + 26

    counts = dict.fromkeys(TaskState, 0)
    for state in result.status.values():
        counts[state] += 1
    mode = (
        "aggregated per pixel column (tasks narrower than a pixel); opacity = busy share"
        if aggregate
        else "one bar per task; hover a bar for its name and timings"
    )
    if narrow:
        tasks = "task was" if narrow == 1 else "tasks were"
        mode += f"; {narrow} {tasks} too short to draw to scale (under a pixel): " + (
            "merged into the columns" if aggregate else "each drawn 1 px wide"
        )
    headline = (
        f"dagexec run: {stats.tasks_run} tasks ran on {workers} workers in "
        f"{_fmt_seconds(stats.wall_seconds)}"
    )
    details = (
        f"{counts[TaskState.DONE]} done, {counts[TaskState.FAILED]} failed, "
        f"{counts[TaskState.SKIPPED]} skipped, {counts[TaskState.CANCELLED]} cancelled "
        f"(skipped and cancelled tasks never ran and are not drawn); peak in flight "
        f"{stats.peak_in_flight} of cap {stats.effective_cap}"
    )

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f"<title>{_clean(headline)}; {_clean(mode)}</title>",
        "<style>.label{font-size:11px;fill:#ffffff;pointer-events:none}"
        ".axis{font-size:10px;fill:#555555}</style>",
        '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
        f'<text x="{_MARGIN}" y="20" font-size="14" font-weight="bold">{_clean(headline)}</text>',
        f'<text x="{_MARGIN}" y="38" fill="#444444">{_clean(details)}</text>',
    ]
    for w, y in enumerate(lane_y):
        out.append(
            f'<rect class="lane" x="{_LEFT}" y="{y}" width="{plot_w}" height="{_LANE}" '
            'fill="#f3f3f3"/>'
        )
        out.append(
            f'<text x="{_LEFT - 8}" y="{y + _LANE / 2 + 4}" text-anchor="end">worker {w}</text>'
        )
    ticks, factor, unit = _ticks(span)
    for t in ticks:
        x = _LEFT + t * scale
        out.append(
            f'<line x1="{x:.2f}" y1="{_TOP - 4}" x2="{x:.2f}" y2="{axis_y + 4}" '
            'stroke="#dddddd" stroke-width="1"/>'
        )
        out.append(
            f'<text class="axis" x="{x:.2f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{round(t * factor, 9):g}</text>"
        )
    out.append(
        f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_LEFT + plot_w}" y2="{axis_y}" stroke="#888888"/>'
    )
    out.append(
        f'<text class="axis" x="{_LEFT - 8}" y="{axis_y + 16}" text-anchor="end">'
        f"time ({unit})</text>"
    )
    if aggregate:
        out.extend(_aggregated(trace, workers, int(plot_w), span, lane_y))
    else:
        out.extend(_detailed(trace, scale, lane_y))
    legend = [("done", DONE_COLOR), ("failed", FAILED_COLOR)]
    if aggregate:
        legend.append(("done and failed in one column", MIXED_COLOR))
    x = _MARGIN
    for label, color in legend:
        out.append(f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 16}" y="{legend_y}">{_clean(label)}</text>')
        x += 16 + int(len(label) * _CHAR_PX) + 18
    out.append(f'<text x="{_MARGIN}" y="{legend_y + 18}" fill="#444444">{_clean(mode)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_gantt_svg(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`gantt_svg` of ``result`` to ``path``."""
    svg = gantt_svg(result)
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg)
