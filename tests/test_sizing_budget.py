"""The memory-aware depth's sampling budget: sizing values takes a bounded share of
the driving thread's CPU, costs small values nothing, and never opens the depth
without a sample (issue 33: a dask groupby-agg's samples took 9-12% of it)."""

from __future__ import annotations

from typing import Any

import pytest

import dagexec._engine.run.depth as depth_module
from dagexec._engine.run.depth import Depth
from dagexec._engine.workers.wire import DONE


class Array:
    """Duck-typed array: sized from its ``nbytes``, not looked inside."""

    nbytes = 8 << 20
    base = None


class Clocks:
    """The driving thread's CPU and a wall clock, both advanced by hand: a batch's
    work advances both, a size estimate advances both by what it costs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sizing_cost: float, size: int) -> None:
        self.now = 0.0
        self.estimates = 0
        self.sizing_cost, self.size = sizing_cost, size
        self.value: Any = [b"a record"]  # a container: its estimate is timed
        monkeypatch.setattr(depth_module, "thread_time", lambda: self.now)
        monkeypatch.setattr(depth_module, "estimate_bytes", self.estimate)

    def estimate(self, value: Any) -> int:
        self.estimates += 1
        self.now += self.sizing_cost
        return self.size

    def run(self, depth: Depth, batches: int, work: float) -> list[int]:
        """``batches`` batches of one report each, ``work`` seconds of driver CPU each."""
        caps = []
        for _ in range(batches):
            self.now += work
            caps.append(depth.after([(0, 0, DONE, self.value, 0.0, 0.0)]))
        return caps


def test_expensive_samples_take_a_bounded_share_of_the_driving_thread() -> None:
    """Today every batch was sampled while the depth doubled: 8 samples of 150 us
    each on 150 batches of 100 us (a dask groupby-agg's run: ~15 ms), 8% of the
    thread's CPU."""
    with pytest.MonkeyPatch.context() as mp:
        clocks = Clocks(mp, sizing_cost=150e-6, size=2000)  # a small frame, cold caches
        depth = Depth(workers=2, full=130)
        clocks.run(depth, batches=150, work=100e-6)
        sizing = clocks.estimates * clocks.sizing_cost
        assert clocks.estimates >= 1  # the first sample is always taken
        # One sample beyond the budget at most: the one that found it covered.
        allowed = depth_module._SHARE * clocks.now + depth_module._ALLOWANCE
        assert sizing <= allowed + clocks.sizing_cost
        assert sizing / clocks.now < 0.02
        assert depth.current < 130  # no sample, no widening


def test_a_put_off_sample_closes_the_depth_meanwhile() -> None:
    """dask's cumsum: a small row first (the depth doubles), 8 MB blocks next; a
    depth nobody looks at is not kept open while the second sample waits."""
    with pytest.MonkeyPatch.context() as mp:
        clocks = Clocks(mp, sizing_cost=150e-6, size=8000)
        depth = Depth(workers=2, full=130)
        assert clocks.run(depth, batches=1, work=100e-6) == [4]  # the first sample
        clocks.size = 8 << 20
        assert clocks.run(depth, batches=1, work=100e-6) == [2]  # put off: one per worker
        assert clocks.estimates == 1


def test_a_wide_depth_it_cannot_afford_to_watch_closes() -> None:
    """At the full depth every 8th batch is sampled: when that is over budget (dask
    bag word counts: 40 us dicts, 2.8% of the thread), the depth goes back to one
    task per worker until the budget covers a look, rather than stay wide unseen."""
    with pytest.MonkeyPatch.context() as mp:
        clocks = Clocks(mp, sizing_cost=0.0, size=2000)
        depth = Depth(workers=2, full=130)
        clocks.run(depth, batches=20, work=100e-6)
        assert depth.current == 130
        clocks.sizing_cost = 400e-6
        caps = clocks.run(depth, batches=3 * depth_module._SAMPLE_EVERY, work=100e-6)
        assert caps[-1] == 2


def test_cheap_samples_of_small_values_widen_as_fast_as_ever() -> None:
    """A number's estimate is not even timed: the budget never delays the doubling,
    however slow the machine makes an estimate look."""
    with pytest.MonkeyPatch.context() as mp:
        clocks = Clocks(mp, sizing_cost=500e-6, size=28)
        clocks.value = 7
        caps = clocks.run(Depth(workers=2, full=130), batches=8, work=30e-6)
        assert caps == [4, 8, 16, 32, 64, 128, 130, 130]


def test_big_values_close_the_depth_within_the_budget_too() -> None:
    """Arrays are sized from their header, untimed: a switch to big values is
    seen as soon as without a budget."""
    with pytest.MonkeyPatch.context() as mp:
        clocks = Clocks(mp, sizing_cost=500e-6, size=28)
        clocks.value = 7
        depth = Depth(workers=2, full=130)
        clocks.run(depth, batches=50, work=30e-6)
        assert depth.current == 130
        clocks.size, clocks.value = 8 << 20, Array()
        caps = clocks.run(depth, batches=depth_module._SAMPLE_EVERY, work=30e-6)
        assert caps[-1] == 2


def test_only_values_sizing_looks_inside_are_timed() -> None:
    from dagexec._engine.run.sizing import looks_inside

    for cheap in (7, 1.5, "text", b"bytes", None, Array()):
        assert not looks_inside(cheap), cheap
    for deep in ([1], (1,), {1: 2}, {1}, frozenset()):
        assert looks_inside(deep), deep
    pd = pytest.importorskip("pandas")
    assert looks_inside(pd.DataFrame({"v": [1]}))
