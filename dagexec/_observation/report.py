"""``RunResult.report_html``: a run as one self-contained HTML page, for the morning after.

One file that opens from disk in any browser, with nothing fetched: the page's
style and script are inlined (``report.css`` and ``report.js`` beside this
module, read when a report is written), and the run is a JSON document in a
``<script type="application/json">`` element that the script draws from. The
page shows the summary, the failures with their tracebacks, a zoomable timeline
of every attempt (grouped by map or function, coloured by how it ended), each
resource's use over time, and a sortable, filterable table of every task (a
map's items folded under it) whose rows open a task's attempts, traceback and
captured logs.

The data is columnar and its times are rounded to the microsecond, so that a
100,000-task run stays a file of some megabytes that the page reads at once;
the table draws only the rows on screen and the timeline is a canvas, so
neither grows the page with the task count (docs/performance.md has the
figures).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Hashable
from importlib import resources
from typing import TYPE_CHECKING, Any

from .._core.result import DONE, StatusMap
from .._core.version import __version__
from .draw import display_name
from .groups import task_group

if TYPE_CHECKING:
    from .._core.result import RunResult

__all__ = ["report_data", "report_page", "write_report"]

# A traceback longer than this is cut (its end kept: the raising frames and the
# exception); a recursion error's can be megabytes of the same frame.
MAX_TRACEBACK = 20_000

_STATES = ("done", "failed", "skipped", "cancelled")


def write_report(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write ``result`` as an HTML page to ``path``.

    Raises:
        ValueError: ``result`` ran tasks but was not traced.
    """
    page = report_page(result)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def report_page(result: RunResult) -> str:
    """The page for ``result``: the template with the run's data in it."""
    data = json.dumps(report_data(result), separators=(",", ":"), ensure_ascii=False)
    # Inside <script>, "</" (a closing tag) and "<!--" could end the element early;
    # "<" only occurs in JSON strings, where \u003c is the same character.
    data = data.replace("<", "\\u003c")
    folder = resources.files(__package__)
    css = folder.joinpath("report.css").read_text(encoding="utf-8")
    script = folder.joinpath("report.js").read_text(encoding="utf-8")
    return _TEMPLATE.format(css=css, data=data, script=script)


def report_data(result: RunResult) -> dict[str, Any]:
    """The run as the page reads it (see the module docstring).

    Raises:
        ValueError: ``result`` ran tasks but was not traced.
    """
    if not result.trace and result.stats.tasks_run:
        raise ValueError(
            "report_html draws from the run's trace, and this run has none: run it "
            "with trace=True (dagexec.run(graph, trace=True); the command line's "
            "--report does that)"
        )
    names = list(result.status)
    index = {name: k for k, name in enumerate(names)}
    groups: list[str] = []
    group_ids: dict[str, int] = {}

    def group_id(group: str) -> int:
        found = group_ids.get(group)
        if found is None:
            found = group_ids[group] = len(groups)
            groups.append(group)
        return found

    outcomes: list[str] = []
    attempts: list[int] = []  # 8 numbers per attempt, see the page's script
    task_group_id = [-1] * len(names)
    for rec in result.trace:
        t = index[rec.name]
        task_group_id[t] = group_id(rec.group)
        if rec.outcome not in outcomes:
            outcomes.append(rec.outcome)
        attempts += (
            t,
            rec.attempt,
            rec.worker,
            round(rec.ready * 1e6),  # microseconds: ints encode shorter and faster
            round(rec.dispatched * 1e6),
            round(rec.started * 1e6),
            round(rec.ended * 1e6),
            outcomes.index(rec.outcome),
        )
    tasks = _tasks(result, names, index, task_group_id, group_id)
    return {
        "summary": _summary(result),
        "names": [display_name(n) for n in names],
        "groups": groups,
        "outcomes": outcomes,
        "states": list(_STATES),
        "tasks": tasks,
        "attempts": attempts,
        "tracebacks": {str(index[n]): _traceback(e) for n, e in result.errors.items()},
        "errors": {
            str(index[n]): traceback.format_exception_only(e)[0].strip()
            for n, e in result.errors.items()
        },
        "logs": {str(index[n]): _logs(result.logs[n]) for n in result.logs},
        "needs": {
            str(index[n]): [[r, a] for r, a in need]
            for n, need in result._needs.items()
            if n in index
        },
    }


def _tasks(
    result: RunResult,
    names: list[Hashable],
    index: dict[Hashable, int],
    task_group_id: list[int],
    group_id: Any,
) -> dict[str, list[int]]:
    """Per task, in status order: state, group, and the map it is an item of (-1)."""
    states = _state_codes(result)
    parent = [-1] * len(names)
    for k, name in enumerate(names):
        # A map's item is named (map, i), the map being a task of the run.
        if (
            isinstance(name, tuple)
            and len(name) == 2
            and isinstance(name[1], int)
            and name[0] in index
        ):
            parent[k] = index[name[0]]
        if task_group_id[k] < 0:  # never ran: its group as its name says it
            task_group_id[k] = group_id(task_group(name, None, map_item=parent[k] >= 0))
    return {"state": states, "group": task_group_id, "parent": parent}


def _state_codes(result: RunResult) -> list[int]:
    """Each task's state as its index in ``_STATES``, in status order."""
    status = result.status
    if isinstance(status, StatusMap):  # a view over the run's state bytes: read them
        first = DONE  # the final codes are DONE, FAILED, SKIPPED, CANCELLED in order
        return [code - first for code in status._codes]
    state_of = {s: k for k, s in enumerate(_STATES)}
    return [state_of[s.value] for s in status.values()]


def _summary(result: RunResult) -> dict[str, Any]:
    stats = result.stats
    codes = _state_codes(result)
    counts = {s: codes.count(k) for k, s in enumerate(_STATES)}
    return {
        "version": __version__,
        "written": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "counts": counts,
        "planned": stats.tasks_planned,
        "run": stats.tasks_run,
        "loaded": stats.tasks_loaded,
        "retries": stats.retries,
        "abandoned": stats.abandoned,
        "wall": stats.wall_seconds,
        "workers": stats.workers,
        "peak_in_flight": stats.peak_in_flight,
        "effective_cap": stats.effective_cap,
        "resources": dict(stats.resources),
        "peak_resources": dict(stats.peak_resources),
        "logged": len(result.logs),
        "logs_captured": bool(getattr(result.logs, "_enabled", result.logs)),
    }


def _traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_TRACEBACK:
        cut = len(text) - MAX_TRACEBACK
        text = f"[... {cut} characters cut ...]\n" + text[cut:]
    return text


def _logs(attempts: Any) -> list[Any]:
    """Per attempt: [attempt, dropped, [[clock, level, logger, message], ...]]."""
    out = []
    for attempt in attempts:
        rows = []
        for r in attempt.records:
            clock = time.strftime("%H:%M:%S", time.localtime(r.created)) + f".{int(r.msecs):03d}"
            message = r.getMessage()
            if r.exc_text:
                message += "\n" + r.exc_text
            if r.stack_info:
                message += "\n" + r.stack_info
            rows.append([clock, r.levelname, r.name, message])
        out.append([attempt.attempt, attempt.dropped, rows])
    return out


_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dagexec run report</title>
<style>
{css}
</style>
</head>
<body>
<header><h1>dagexec run report</h1><p id="written"></p></header>
<main>
<section id="summary" aria-label="summary"></section>
<section id="failures-section"><h2>Failures</h2><ul id="failures"></ul></section>
<section id="timeline-section">
<h2>Timeline of attempts</h2>
<div class="controls">
<button type="button" id="zoom-in" title="zoom in (or the mouse wheel)">+</button>
<button type="button" id="zoom-out" title="zoom out">&minus;</button>
<button type="button" id="zoom-reset">whole run</button>
<span id="zoom-range"></span>
<span id="legend"></span>
</div>
<div id="timeline-wrap"><canvas id="timeline"></canvas><div id="tip" hidden></div></div>
</section>
<section id="resources-section"><h2>Resources over time</h2><div id="resources"></div></section>
<section id="tasks-section">
<h2>Tasks</h2>
<div class="controls">
<input id="filter" type="search" placeholder="filter: name, group, worker" aria-label="filter">
<select id="state-filter" aria-label="state"><option value="">every state</option></select>
<span id="shown"></span>
</div>
<div id="table-head" class="row head"></div>
<div id="table-scroll"><div id="table-spacer"><div id="table-rows"></div></div></div>
</section>
</main>
<aside id="detail" hidden>
<button type="button" id="detail-close" aria-label="close">&times;</button>
<div id="detail-body"></div>
</aside>
<script type="application/json" id="report-data">{data}</script>
<script>
{script}
</script>
</body>
</html>
"""
