"""A run's trace as a self-contained SVG timeline: one lane per worker.

Built as plain strings (no dependency, no script, no external font), so the file
opens in any browser and renders on a repository page. Each executed task is a
bar coloured by its group (the step it belongs to: a map's name, or its
function's name; see :mod:`dagexec._observation.groups`), with a legend, so the steps of a
pipeline can be told apart at a glance; a failed task's bar has a red outline.
Its name and timings are in a ``<title>`` (the hover text).

A picture stays useful at any size by switching representation rather than
drawing what cannot be seen. When most bars would be narrower than a pixel
(and there are enough of them to matter), or there are more than
:data:`MAX_BARS` tasks, each worker lane is drawn per pixel column instead:
the column's share of busy time sets the opacity, and its colour is its main
group's (red or orange when a task failed there), and runs of equal columns
merge into one rectangle.
The file then grows with the width of the picture, not with the task count,
and the title and legend say that it is aggregated.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple
from xml.sax.saxutils import escape

from .._core.result import TaskState
from .chrome import require_trace
from .draw import attempt_label

if TYPE_CHECKING:
    from .._core.result import RunResult, TraceRecord

__all__ = ["GROUP_COLORS", "MAX_BARS", "gantt_svg", "group_colors", "write_gantt_svg"]

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

GROUP_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#9c755f",
    "#d4a017",
    "#ff9da7",
)
"""Colours of the task groups, dark enough for white labels; no red, which marks
failure. A run with more groups colours the biggest ones and draws the rest
grey, as "other": a legend of twenty near-identical hues helps nobody."""
OTHER_COLOR = "#9e9e9e"

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


def _attr(text: str) -> str:
    """``text`` as a quoted XML attribute value."""
    return '"' + _clean(text).replace('"', "&quot;") + '"'


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
    group = f"; group {rec.group}" if rec.group else ""
    took = _fmt_seconds(rec.ended - rec.started)
    return (
        f"{attempt_label(rec)}: {rec.outcome or rec.state.value} in {took} "
        f"on worker {rec.worker} (ready {_fmt_seconds(rec.ready)}, dispatched "
        f"{_fmt_seconds(rec.dispatched)}, started {_fmt_seconds(rec.started)}){group}"
    )


def _css(outcome: str) -> str:
    """An attempt's outcome as a class name: ``timed-out``."""
    return outcome.replace(" ", "-")


def group_colors(trace: Sequence[TraceRecord]) -> tuple[dict[str, str], int]:
    """A colour per group, in order of first start; and how many groups share "other".

    Groups beyond the palette's size-1 go to "other", the smallest first, so the
    steps that fill the picture keep their own colours.
    """
    sizes: dict[str, int] = {}
    for rec in trace:  # in start order: dicts keep first-seen order
        sizes[rec.group] = sizes.get(rec.group, 0) + 1
    if len(sizes) <= len(GROUP_COLORS):
        return dict(zip(sizes, GROUP_COLORS, strict=False)), 0
    keep = set(sorted(sizes, key=lambda g: -sizes[g])[: len(GROUP_COLORS) - 1])
    kept = [g for g in sizes if g in keep]
    colors = dict(zip(kept, GROUP_COLORS, strict=False))
    return colors, len(sizes) - len(kept)


def _detailed(
    trace: tuple[TraceRecord, ...],
    scale: float,
    lane_y: Sequence[float],
    colors: dict[str, str],
) -> list[str]:
    out = []
    for rec in trace:
        x = _LEFT + rec.started * scale
        w = max((rec.ended - rec.started) * scale, 1.0)
        y = lane_y[rec.worker] + 1
        color = colors.get(rec.group, OTHER_COLOR)
        failed = rec.state is TaskState.FAILED
        stroke = (
            f'stroke="{FAILED_COLOR}" stroke-width="2"'
            if failed
            else ('stroke="#ffffff" stroke-width="0.5"')
        )
        parts = [
            f"<g><title>{_clean(_bar_title(rec))}</title>",
            f'<rect class="task {rec.state.value} {_css(rec.outcome)}" '
            f"data-group={_attr(rec.group)} "
            f'x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{_LANE - 2}" fill="{color}" '
            f"{stroke}/>",
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


class _Columns(NamedTuple):
    """Per lane and pixel column: busy seconds by outcome, tasks started there,
    and the done busy seconds by group (made only for columns that have some)."""

    done_busy: list[list[float]]
    failed_busy: list[list[float]]
    started: list[list[int]]
    failed: list[list[int]]
    by_group: list[list[dict[str, float] | None]]


def _tally_columns(
    trace: tuple[TraceRecord, ...], workers: int, columns: int, col_dt: float
) -> _Columns:
    """Each record's busy time spread over the pixel columns it covers."""
    cols = _Columns(
        [[0.0] * columns for _ in range(workers)],
        [[0.0] * columns for _ in range(workers)],
        [[0] * columns for _ in range(workers)],
        [[0] * columns for _ in range(workers)],
        [[None] * columns for _ in range(workers)],
    )
    for rec in trace:
        is_done = rec.state is not TaskState.FAILED
        busy = cols.done_busy[rec.worker] if is_done else cols.failed_busy[rec.worker]
        groups = cols.by_group[rec.worker]
        first = min(int(rec.started / col_dt), columns - 1)
        last = min(int(rec.ended / col_dt), columns - 1)
        cols.started[rec.worker][first] += 1
        if not is_done:
            cols.failed[rec.worker][first] += 1
        # A worker runs one task at a time, so a lane's columns are visited
        # about (columns + tasks) times in all: linear, not columns x tasks.
        for c in range(first, last + 1):
            lo = max(rec.started, c * col_dt)
            hi = min(rec.ended, (c + 1) * col_dt)
            if hi > lo:
                busy[c] += hi - lo
                if is_done:
                    shares = groups[c]
                    if shares is None:
                        shares = groups[c] = {}
                    shares[rec.group] = shares.get(rec.group, 0.0) + hi - lo
    return cols


def _aggregated(
    trace: tuple[TraceRecord, ...],
    workers: int,
    columns: int,
    span: float,
    lane_y: Sequence[float],
    colors: dict[str, str],
) -> list[str]:
    col_dt = span / columns
    cols = _tally_columns(trace, workers, columns, col_dt)

    def key_of(w: int, c: int) -> tuple[str, str, float] | None:
        key = _column_key(cols.done_busy[w][c], cols.failed_busy[w][c], col_dt)
        if key is None:
            return None
        kind, level = key
        if kind != "done":
            return kind, FAILED_COLOR if kind == "failed" else MIXED_COLOR, level
        shares = cols.by_group[w][c] or {"": 0.0}
        group = max(shares, key=shares.__getitem__)  # the column's main group
        return kind, colors.get(group, OTHER_COLOR), level

    out = []
    for w in range(workers):
        y = lane_y[w] + 1
        c = 0
        while c < columns:  # runs of neighbouring columns that look alike: one rect
            key = key_of(w, c)
            end = c + 1
            while end < columns and key_of(w, end) == key:
                end += 1
            if key is not None:
                out.append(_aggregated_rect(cols, w, c, end, key, col_dt, y))
            c = end
    return out


def _aggregated_rect(
    cols: _Columns,
    w: int,
    c: int,
    end: int,
    key: tuple[str, str, float],
    col_dt: float,
    y: float,
) -> str:
    """One rect for columns ``c`` to ``end`` of lane ``w``, titled with what ran there."""
    kind, color, level = key
    n_started = sum(cols.started[w][c:end])
    n_failed = sum(cols.failed[w][c:end])
    busy = sum(cols.done_busy[w][c:end]) + sum(cols.failed_busy[w][c:end])
    busy_share = busy / ((end - c) * col_dt)
    title = (
        f"worker {w}, {_fmt_seconds(c * col_dt)} to {_fmt_seconds(end * col_dt)}: "
        f"{n_started} {'task' if n_started == 1 else 'tasks'} started "
        f"({n_failed} failed), busy {busy_share:.0%}"
    )
    return (
        f"<g><title>{_clean(title)}</title>"
        f'<rect class="agg {kind}" x="{_LEFT + c}" y="{y:.2f}" width="{end - c}" '
        f'height="{_LANE - 2}" fill="{color}" fill-opacity="{level:.2f}"/></g>'
    )


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
        aggregate = _too_many_to_draw(len(trace), narrow)
    lane_y = [_TOP + w * (_LANE + _LANE_GAP) for w in range(workers)]
    axis_y = _TOP + workers * (_LANE + _LANE_GAP) + 2
    legend_y = axis_y + 34
    colors, others = group_colors(trace)
    legend_rows = _legend_rows(_legend(colors, others, aggregate), width, failed_note=not aggregate)
    height = legend_y + 18 * (len(legend_rows) - 1) + 26
    mode = _mode(aggregate, narrow)
    headline = (
        f"dagexec run: {stats.tasks_run} tasks ran on {workers} workers in "
        f"{_fmt_seconds(stats.wall_seconds)}"
    )
    details = _details(result)

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
    out.extend(_time_axis(span, scale, axis_y, plot_w))
    if aggregate:
        out.extend(_aggregated(trace, workers, int(plot_w), span, lane_y, colors))
    else:
        out.extend(_detailed(trace, scale, lane_y, colors))
    y = legend_y
    for row in legend_rows:
        out.extend(_legend_row(row, y))
        y += 18
    out.append(f'<text x="{_MARGIN}" y="{y}" fill="#444444">{_clean(mode)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _too_many_to_draw(records: int, narrow: int) -> bool:
    """Whether to draw per pixel column: too many bars for a browser to show
    smoothly, or mostly bars narrower than a pixel (which would hide each other)."""
    return records > MAX_BARS or (narrow >= _MIN_NARROW_TO_AGGREGATE and 2 * narrow > records)


def _legend(colors: dict[str, str], others: int, aggregate: bool) -> list[tuple[str, str]]:
    """The legend's (label, colour) entries: each group, the groups beyond the
    palette as one, and for aggregated columns the colours that stand for failures."""
    legend = list(colors.items())
    if others:
        legend.append((f"other ({others} groups)", OTHER_COLOR))
    if aggregate:  # a column takes its main group's colour; any failure shows instead
        legend.append(("failed", FAILED_COLOR))
        legend.append(("done and failed in one column", MIXED_COLOR))
    return legend


def _mode(aggregate: bool, narrow: int) -> str:
    """How the picture is drawn, said under it: what a reader needs to read it right."""
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
    return mode


def _details(result: RunResult) -> str:
    """The counts by final state, and the peak in flight against the cap."""
    counts = dict.fromkeys(TaskState, 0)
    for state in result.status.values():
        counts[state] += 1
    stats = result.stats
    return (
        f"{counts[TaskState.DONE]} done, {counts[TaskState.FAILED]} failed, "
        f"{counts[TaskState.SKIPPED]} skipped, {counts[TaskState.CANCELLED]} cancelled "
        f"(skipped and cancelled tasks never ran and are not drawn); peak in flight "
        f"{stats.peak_in_flight} of cap {stats.effective_cap}"
    )


def _time_axis(span: float, scale: float, axis_y: float, plot_w: float) -> list[str]:
    """The time axis: a grid line and a label per tick, the axis line, its unit."""
    out = []
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
    return out


def _legend_row(row: list[tuple[int, str, str, bool]], y: int) -> list[str]:
    """One row of the legend: a swatch (red-outlined for the failed note) and its label."""
    out = []
    for x, label, color, outline in row:
        border = f' stroke="{FAILED_COLOR}" stroke-width="2"' if outline else ""
        out.append(
            f'<rect class="legend" x="{x}" y="{y - 10}" width="12" height="12" '
            f'fill="{color}"{border}/>'
        )
        out.append(f'<text x="{x + 16}" y="{y}">{_clean(label)}</text>')
    return out


def _legend_rows(
    legend: list[tuple[str, str]], width: int, *, failed_note: bool
) -> list[list[tuple[int, str, str, bool]]]:
    """Legend entries placed left to right, wrapped to the picture's width:
    rows of (x, label, colour, red outline)."""
    entries = [(label, color, False) for label, color in legend]
    if failed_note:
        entries.append(("failed (red outline)", "#ffffff", True))
    rows: list[list[tuple[int, str, str, bool]]] = [[]]
    x = _MARGIN
    for label, color, outline in entries:
        step = 16 + int(len(label) * _CHAR_PX) + 18
        if rows[-1] and x + step > width - _MARGIN:
            rows.append([])
            x = _MARGIN
        rows[-1].append((x, label, color, outline))
        x += step
    return rows


def write_gantt_svg(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`gantt_svg` of ``result`` to ``path``."""
    svg = gantt_svg(result)
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg)
