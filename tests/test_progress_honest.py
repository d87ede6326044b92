"""An honest progress bar (issue 32): time left per group, and its redraw rate in
real runs."""

from __future__ import annotations

import io
import itertools
import time

from test_progress import FakeClock, _lines, plan_info

import dagexec
from dagexec import Graph, PlanInfo, ProgressBar, TaskState


def _fast_then_slow() -> PlanInfo:
    """100 quick ``load`` tasks and 10 slow ``upload`` s."""
    g = Graph()
    for i in range(100):
        g.add(f"load{i}", load)
    for i in range(10):
        g.add(f"upload{i}", upload)
    return plan_info(g)


def load() -> None:
    pass


def upload() -> None:
    pass


def test_time_left_is_per_group_and_unknown_until_a_group_has_a_rate() -> None:
    """The overnight job: the bar said 0:01 left with 17 s to go, from the rate of
    the quick tasks that went first."""
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.0, clock=clock)
    bar.on_run_start(_fast_then_slow())
    for i in range(100):  # 100 loads in 1 s
        clock.now += 0.01
        bar.on_task_end(f"load{i}", TaskState.DONE, 0.01)
    assert "ETA unknown" in _lines(out.getvalue())[-1]  # no upload has ended yet
    clock.now += 1.9
    bar.on_task_end("upload0", TaskState.DONE, 1.9)
    line = _lines(out.getvalue())[-1]
    # 9 uploads left at 1.9 s each: 17 s (one rate for all said 9/101 per s: 0:00).
    assert "ETA 0:17" in line, line


def parse(item: int) -> int:
    return item


def test_a_maps_items_go_at_their_own_rate() -> None:
    g = Graph()
    g.add("files", lambda: list(range(3)))
    g.add("setup", load)
    g.map("parse", parse, over="files")
    info = plan_info(g)
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.0, clock=clock)
    bar.on_run_start(info)
    clock.now += 0.1
    bar.on_task_end("setup", TaskState.DONE, 0.1)
    bar.on_task_end("files", TaskState.DONE, 0.0)
    assert "ETA unknown" in _lines(out.getvalue())[-1]  # how long does an item take?
    bar.on_map_expand("parse", 3)
    clock.now += 4.0
    bar.on_task_end(("parse", 0), TaskState.DONE, 4.0)
    # 2 items and the map's own end left, at an item's rate, not the quick setup's.
    assert "ETA 0:12" in _lines(out.getvalue())[-1]


class _RealDrawTimes(io.StringIO):
    """A terminal that notes, for each redraw, the bar's clock reading it drew at:
    when the bar decided, which load on the machine cannot move (the time of the
    write itself can lag it by a descheduled thread's slice)."""

    def __init__(self) -> None:
        super().__init__()
        self.bar: ProgressBar | None = None
        self.times: list[float] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if "\r" in text and self.bar is not None:
            self.times.append(self.bar._last_draw)
        return super().write(text)


def work() -> None:
    """About a millisecond of work (the run must last for its redraws to be timed)."""
    end = time.perf_counter() + 0.001
    while time.perf_counter() < end:
        pass


def test_a_real_run_keeps_min_interval_between_redraws() -> None:
    """Issue 32: in a real run, a start right after a regular redraw redrew at once,
    so redraws came in pairs ~0.1 ms apart (the fake-clock tests did not see it)."""
    out = _RealDrawTimes()
    bar = ProgressBar(out, is_tty=True, min_interval=0.1, keep_logs_apart=False)
    out.bar = bar
    g = Graph()
    for i in range(1200):
        g.add(i, work)
    dagexec.run(g, workers=4, callbacks=[bar])
    times = out.times[:-1]  # the final draw comes when the run ends, whenever that is
    assert len(times) >= 3, times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.1 - 1e-3, sorted(gaps)[:5]
