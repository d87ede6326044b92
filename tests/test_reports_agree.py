"""Every report of a run tells the same story (issue 32): RunStats, the trace, the
callbacks (the event stream), dagexec.testing's recorder, the command line's
tally and the progress bar's final line, on random graphs of thread and process
tasks, with maps, retries, timeouts, failures, cancels and resumes.

A few seconds by default; ``DAGEXEC_STRESS=N`` runs N times as many examples.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections import Counter
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import process_tasks
import report_tasks
from common import LastResult
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagexec
from dagexec import Callback, Graph, ProgressBar, TaskState
from dagexec._integrations.cli_tally import RunTally
from dagexec.testing import InFlightRecorder

STRESS = int(os.environ.get("DAGEXEC_STRESS") or 0)

KINDS = ("ok", "ok", "flaky", "fail", "hang", "proc", "proc_flaky", "proc_hang")


class Stream(Callback):
    """The event stream as the callbacks hear it."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        self.events.append(("dispatch", name))

    def on_task_start(self, name: Hashable, worker: int) -> None:
        self.events.append(("task_start", name, worker))

    def on_attempt_start(self, name: Hashable, attempt: int, worker: int) -> None:
        self.events.append(("start", name, attempt, worker))

    def on_task_retry(self, name: Hashable, attempt: int) -> None:
        self.events.append(("retry", name, attempt))

    def on_task_timeout(self, name: Hashable, attempt: int) -> None:
        self.events.append(("timeout", name, attempt))

    def on_attempt_release(self, name: Hashable, attempt: int, how: str) -> None:
        self.events.append(("release", name, attempt, how))

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.events.append(("end", name, state))

    def on_map_expand(self, name: Hashable, items: int) -> None:
        self.events.append(("expand", name, items))


class Releaser(Callback):
    """Lets the timed-out thread attempts return once the run is over: a one-shot
    run's shutdown waits for its threads."""

    def on_run_end(self, result: dagexec.RunResult) -> None:
        report_tasks.RELEASE.set()


class StopAt(Callback):
    """Stops the run (a cancel) when task ``name`` ends, by raising."""

    def __init__(self, name: Hashable | None) -> None:
        self.name = name

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        if name == self.name:
            raise RuntimeError("stop here")


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 7))
    tasks = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=2, unique=True)) if i else []
        kind = draw(st.sampled_from(KINDS))
        tasks.append((i, kind, deps))
    return {
        "tasks": tasks,
        "map": draw(st.booleans()),
        "workers": draw(st.integers(1, 3)),
        "stop_at": draw(st.none() | st.integers(0, n - 1)),
        "resume": draw(st.booleans()),
    }


def build(job: dict[str, Any]) -> Graph:
    g = Graph()
    for i, kind, deps in job["tasks"]:
        names = [f"t{d}" for d in deps]
        if kind == "ok":
            g.add(f"t{i}", report_tasks.add_one, deps=names)
        elif kind == "flaky":
            g.add(f"t{i}", report_tasks.flaky, deps=names, retries=1)
        elif kind == "fail":
            g.add(f"t{i}", report_tasks.boom, deps=names)
        elif kind == "hang":
            g.add(f"t{i}", report_tasks.hang, deps=names, timeout=0.05, retries=1)
        elif kind == "proc":
            g.add(f"t{i}", process_tasks.pid, deps=names, isolate="process")
        elif kind == "proc_flaky":
            g.add(
                f"t{i}", process_tasks.fail_first_attempt, deps=names, isolate="process", retries=1
            )
        else:
            g.add(f"t{i}", process_tasks.sleep_forever, deps=names, isolate="process", timeout=0.2)
    if job["map"]:
        g.add("src", report_tasks.items)
        g.map("m", report_tasks.item_flaky, over="src", retries=1)
    return g


def run_once(g: Graph, job: dict[str, Any], checkpoint: Path | None) -> None:
    stream, last, tally, recorder = Stream(), LastResult(), RunTally(), InFlightRecorder()
    bar_out = io.StringIO()
    bar = ProgressBar(bar_out, is_tty=False)
    stop = StopAt(None if job["stop_at"] is None else f"t{job['stop_at']}")
    options: dict[str, Any] = {"workers": job["workers"], "on_error": "continue", "trace": True}
    if checkpoint is not None:
        options["checkpoint"] = checkpoint
    try:
        with contextlib.suppress(RuntimeError):
            callbacks = [stream, last, tally, recorder, bar, stop, Releaser()]
            dagexec.run(g, callbacks=callbacks, **options)
    finally:
        report_tasks.RELEASE.set()
    result = last.result
    assert result is not None
    check(stream.events, result, tally, recorder, bar_out.getvalue())


def check(
    events: list[tuple[Any, ...]],
    result: dagexec.RunResult,
    tally: RunTally,
    recorder: InFlightRecorder,
    bar_line: str,
) -> None:
    stats = result.stats
    kinds = Counter(e[0] for e in events)
    # Each attempt is one record: starts number 1, 2, ... per task, and each
    # started attempt is closed once, by its retry or its task's end.
    starts = [(e[1], e[2]) for e in events if e[0] == "start"]
    assert len(starts) == len(set(starts)), starts
    per_task: dict[Hashable, list[int]] = {}
    for name, attempt in starts:
        per_task.setdefault(name, []).append(attempt)
    for name, numbers in per_task.items():
        assert numbers == list(range(1, len(numbers) + 1)), (name, numbers)
    assert kinds["task_start"] == kinds["start"]  # on_task_start is per attempt too
    retries = [(e[1], e[2]) for e in events if e[0] == "retry"]
    timeouts = [(e[1], e[2]) for e in events if e[0] == "timeout"]
    assert set(retries) <= set(starts) and set(timeouts) <= set(starts)
    ends = {e[1]: e[2] for e in events if e[0] == "end"}
    assert len(ends) == kinds["end"]  # one end per task
    # RunStats agrees with the stream.
    expanded = sum(e[2] for e in events if e[0] == "expand")
    assert stats.tasks_planned == len(ends) == len(result.status)
    assert stats.retries == len(retries)
    assert stats.timeouts == len(timeouts)
    # A task cancelled while its last attempt ran; not one whose last attempt had
    # ended and scheduled a retry that the stop then cancelled (that one ran).
    started_then_cancelled = sum(
        1
        for name, attempt in starts
        if ends.get(name) is TaskState.CANCELLED
        and attempt == len(per_task[name])
        and (name, attempt) not in set(retries)
    )
    assert len(starts) == stats.tasks_run + stats.tasks_loaded + started_then_cancelled, (
        len(starts),
        stats,
        started_then_cancelled,
    )
    # Releases: one per dispatch; killed ones are process timeouts.
    releases = [e for e in events if e[0] == "release"]
    assert len(releases) == kinds["dispatch"]
    killed = {(e[1], e[2]) for e in releases if e[3] == "killed"}
    assert killed <= set(timeouts)
    assert recorder.in_flight == 0 and recorder.peak <= stats.effective_cap
    # The trace: one record per attempt that ran, its outcome as the stream says.
    records = {(r.name, r.attempt): r for r in result.trace}
    assert len(records) == len(result.trace)
    assert set(records) <= set(starts)
    for key in killed:
        assert records[key].outcome == "killed", records[key]
    for key in set(timeouts) - killed:
        assert records[key].outcome in ("timed out", "abandoned"), records[key]
    for key in set(retries) - set(timeouts):
        assert records[key].outcome == "retried", records[key]
    # The command line's tally and the progress bar's final line.
    counts = Counter(result.status.values())
    snap = tally.freeze()
    assert snap.planned == stats.tasks_planned
    assert snap.from_maps == expanded
    assert snap.loaded == stats.tasks_loaded
    assert snap.done + snap.loaded == counts[TaskState.DONE]
    assert snap.failed == counts[TaskState.FAILED]
    assert snap.skipped == counts[TaskState.SKIPPED]
    assert snap.cancelled == counts[TaskState.CANCELLED]
    assert snap.retries == stats.retries and snap.timed_out == stats.timeouts
    assert f"{stats.tasks_planned} tasks: {counts[TaskState.DONE]} done," in bar_line, bar_line
    if stats.timeouts:
        assert f"{stats.timeouts} timed out" in bar_line, bar_line
    if stats.retries:
        assert f"{stats.retries} retries" in bar_line, bar_line


@settings(
    max_examples=8 if not STRESS else 100 * STRESS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(jobs())
def test_every_report_agrees_with_the_event_stream(job: dict[str, Any]) -> None:
    report_tasks.RELEASE.clear()
    g = build(job)
    if not job["resume"]:
        run_once(g, job, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.sqlite"
        run_once(g, job, path)
        report_tasks.RELEASE.clear()
        run_once(g, {**job, "stop_at": None}, path)  # the resume: what is stored loads


def test_the_cli_tally_counts_tasks_loaded_during_the_run(tmp_path: Path) -> None:
    """The command line's resume summary said "loaded 0" (or only the plan's) on a
    rerun whose map items and downstream tasks were loaded during the run."""
    g = Graph()
    g.add("src", report_tasks.items, checkpoint=False)  # runs every time
    g.map("m", report_tasks.add_one, over="src")  # its items load during the run
    g.add("total", report_tasks.add_one, deps=["m"])  # downstream of a map: decided then too
    g.add("k", report_tasks.add_one)  # the plan loads it
    path = tmp_path / "c.sqlite"
    dagexec.run(g, checkpoint=path)
    tally = RunTally()
    again = dagexec.run(g, checkpoint=path, callbacks=[tally])
    assert again.stats.tasks_loaded == 5  # 3 items, total, k
    snap = tally.freeze()
    assert snap.loaded == again.stats.tasks_loaded
    assert snap.done == 2  # src ran, m gathered its items
