"""Resource limits and priorities through the real executor: gates, never sleeps."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dagexec
import dagexec._runstate
from dagexec import Graph
from dagexec.testing import (
    ConcurrencyProbe,
    Gate,
    ResourceRecorder,
    assert_resource_reached,
    assert_within_bounds,
    run_in_thread,
)


def test_gpu_limit_is_reached_exactly_and_never_exceeded() -> None:
    """Six gated tasks need one gpu each; two gpus: exactly two run at once."""
    gate, probe = Gate(), ConcurrencyProbe()
    g = Graph()
    for i in range(6):
        g.add(i, probe.wrap(gate.gated(lambda i=i: i)), resources={"gpu": 1})
    recorder = ResourceRecorder(g)
    with dagexec.Executor(workers=4, resources={"gpu": 2}) as ex:
        future = run_in_thread(ex.run, g, callbacks=[recorder])
        assert recorder.wait_for_held("gpu", 2)
        assert gate.wait_for_waiting(2)
        assert probe.active == 2  # workers are free, yet only two tasks started
        gate.open()
        result = future.result(timeout=30)
    assert dict(result) == {i: i for i in range(6)}
    assert probe.peak == 2
    assert recorder.peak == {"gpu": 2} == result.stats.peak_resources
    assert_resource_reached(result, "gpu")
    assert_within_bounds(result)


def test_amounts_add_up_against_the_capacity() -> None:
    """mem capacity 10: a 6 and a 4 fit together, a second 6 does not."""
    gate = Gate()
    g = Graph()
    g.add("six", gate.gated(lambda: 6), resources={"mem": 6})
    g.add("four", gate.gated(lambda: 4), resources={"mem": 4})
    g.add("six_again", gate.gated(lambda: 6), resources={"mem": 6})
    recorder = ResourceRecorder(g)
    with dagexec.Executor(workers=3, resources={"mem": 10}) as ex:
        future = run_in_thread(ex.run, g, callbacks=[recorder])
        assert recorder.wait_for_held("mem", 10)
        assert gate.wait_for_waiting(2)
        assert recorder.held == {"mem": 10}
        gate.open()
        result = future.result(timeout=30)
    assert result.stats.peak_resources == {"mem": 10}
    assert_resource_reached(result, "mem")


def test_tasks_without_resources_run_beside_a_full_resource() -> None:
    gate = Gate()
    g = Graph()
    g.add("gpu0", gate.gated(lambda: 0), resources={"gpu": 1})
    g.add("gpu1", gate.gated(lambda: 1), resources={"gpu": 1})
    g.add("cpu", lambda: "free")
    g.add("after_cpu", lambda c: c, deps=["cpu"])
    ran = threading.Event()
    g.add("signal", lambda a: ran.set(), deps=["after_cpu"])
    recorder = ResourceRecorder(g)
    with dagexec.Executor(workers=3, resources={"gpu": 1}) as ex:
        future = run_in_thread(ex.run, g, callbacks=[recorder])
        assert ran.wait(10)  # one gpu task waits for the other, cpu work goes on
        assert gate.wait_for_waiting(1)
        assert recorder.held == {"gpu": 1}
        gate.open()
        result = future.result(timeout=30)
    assert result.stats.peak_resources == {"gpu": 1}


def test_run_resources_override_the_executors() -> None:
    probe = ConcurrencyProbe()
    barrier = threading.Barrier(3, timeout=10)
    g = Graph()
    for i in range(3):
        g.add(i, probe.wrap(barrier.wait), resources={"gpu": 1})
    with dagexec.Executor(workers=3, resources={"gpu": 1}) as ex:
        result = ex.run(g, resources={"gpu": 3})  # three must overlap to pass the barrier
    assert result.stats.resources == {"gpu": 3}
    assert_resource_reached(result, "gpu")


def test_unknown_resource_is_rejected_before_anything_runs() -> None:
    ran: list[str] = []
    g = Graph()
    g.add("fine", lambda: ran.append("fine"))
    g.add("train", lambda: ran.append("train"), resources={"gpu": 1})
    with pytest.raises(ValueError, match=r"task 'train' needs resource 'gpu', which has no"):
        dagexec.run(g, workers=1, resources={"mem": 4})
    with (
        dagexec.Executor(workers=1) as ex,
        pytest.raises(ValueError, match="declared: none"),
    ):
        ex.run(g)
    assert ran == []


def test_need_above_capacity_is_rejected_naming_task_and_resource() -> None:
    g = Graph()
    g.add("big", lambda: 1, resources={"mem": 16})
    with pytest.raises(ValueError, match=r"task 'big' needs 16 of resource 'mem', more than"):
        dagexec.run(g, workers=1, resources={"mem": 8})


@pytest.mark.parametrize(
    ("resources", "error", "match"),
    [
        (["gpu"], TypeError, "resources must be a mapping"),
        ({1: 1}, TypeError, "resource names must be strings"),
        ({"gpu": 0}, ValueError, r"resources\['gpu'\] must be a positive finite number"),
        ({"gpu": float("nan")}, ValueError, "positive finite"),
        ({"gpu": True}, ValueError, "positive finite"),
    ],
)
def test_bad_task_resources_are_rejected_at_add(resources: Any, error: type, match: str) -> None:
    g = Graph()
    with pytest.raises(error, match=match):
        g.add("t", lambda: 1, resources=resources)
    assert "t" not in g


@pytest.mark.parametrize(
    ("capacity", "error", "match"),
    [
        (5, TypeError, "resources must be a mapping"),
        ({"gpu": -1}, ValueError, r"resources\['gpu'\] must be a number >= 0"),
        ({"gpu": "2"}, ValueError, "must be a number"),
    ],
)
def test_bad_capacities_are_rejected_before_threads_start(
    capacity: Any, error: type, match: str
) -> None:
    g = Graph()
    g.add("t", lambda: 1)
    with pytest.raises(error, match=match):
        dagexec.run(g, workers=1, resources=capacity)
    with pytest.raises(error, match=match):
        dagexec.Executor(workers=1, resources=capacity)


def test_bad_priority_is_rejected_at_add() -> None:
    g = Graph()
    with pytest.raises(TypeError, match=r"task 't': priority must be an int, got str 'high'"):
        g.add("t", lambda: 1, priority="high")  # type: ignore[arg-type]


def test_higher_priority_runs_first_among_ready_tasks() -> None:
    """One slot: the order tasks start is the order they are taken."""
    order: list[Hashable] = []
    g = Graph()
    priorities = {"low": -1, "mid": 0, "high": 5, "mid2": 0, "top": 9}
    for name, p in priorities.items():
        g.add(name, lambda name=name: order.append(name), priority=p)
    dagexec.run(g, workers=1, max_in_flight=1)
    # Equal priorities keep the order they were added in.
    assert order == ["top", "high", "mid", "mid2", "low"]


def test_priority_in_the_decorator() -> None:
    order: list[str] = []
    g = Graph()

    @g.task(priority=1)
    def second() -> None:
        order.append("second")

    @g.task(priority=2, resources={"gpu": 1})
    def first() -> None:
        order.append("first")

    dagexec.run(g, workers=1, max_in_flight=1, resources={"gpu": 1})
    assert order == ["first", "second"]


def test_default_order_finishes_a_branch_before_opening_the_next() -> None:
    """load_i -> use_i, load_i -> log_i for each i: with one slot, each load's users
    run right after it, before the next load (first-in first-out would run all
    the loads first, holding four values at once)."""
    order: list[str] = []
    g = Graph()
    for i in range(4):
        g.add(f"load{i}", lambda i=i: order.append(f"load{i}"))
        g.add(f"use{i}", lambda _, i=i: order.append(f"use{i}"), deps=[f"load{i}"])
        g.add(f"log{i}", lambda _, i=i: order.append(f"log{i}"), deps=[f"load{i}"])
    dagexec.run(g, workers=1, max_in_flight=1)
    assert order == [f"{step}{i}" for i in range(4) for step in ("load", "use", "log")]


def test_first_in_first_out_is_what_the_default_order_avoids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test above pins the default, not chance: FIFO gives another order."""
    monkeypatch.setattr(dagexec._runstate, "DEPTH_FIRST", False)
    order: list[str] = []
    g = Graph()
    for i in range(2):
        g.add(f"load{i}", lambda i=i: order.append(f"load{i}"))
        g.add(f"use{i}", lambda _, i=i: order.append(f"use{i}"), deps=[f"load{i}"])
        g.add(f"log{i}", lambda _, i=i: order.append(f"log{i}"), deps=[f"load{i}"])
    dagexec.run(g, workers=1, max_in_flight=1)
    assert order == ["load0", "load1", "use0", "log0", "use1", "log1"]


def _value(name: int, args: tuple[int, ...]) -> int:
    return (name * 31 + sum(args)) % 1_000_003


class Holding:
    """Sums the resources of tasks inside their function, from inside them."""

    def __init__(self, capacity: dict[str, float]) -> None:
        self.lock = threading.Lock()
        self.capacity = capacity
        self.held = dict.fromkeys(capacity, 0.0)
        self.peak = dict.fromkeys(capacity, 0.0)
        self.over: list[str] = []

    def wrap(self, name: int, need: dict[str, float]) -> Callable[..., int]:
        def task(*args: int) -> int:
            with self.lock:
                for r, a in need.items():
                    self.held[r] += a
                    self.peak[r] = max(self.peak[r], self.held[r])
                    if self.held[r] > self.capacity[r]:
                        self.over.append(r)
            try:
                return _value(name, args)
            finally:
                with self.lock:
                    for r, a in need.items():
                        self.held[r] -= a

        return task


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_dags_with_priorities_and_resources_match_a_serial_run(data: Any) -> None:
    n = data.draw(st.integers(1, 40))
    capacity = {"gpu": data.draw(st.integers(1, 2)), "mem": data.draw(st.integers(1, 8))}
    holding = Holding({k: float(v) for k, v in capacity.items()})
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    g = Graph()
    deps_of: dict[int, list[int]] = {}
    for i in range(n):
        deps_of[i] = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3))))
        need = {}
        if rng.random() < 0.5:
            need["gpu"] = rng.randint(1, capacity["gpu"])
        if rng.random() < 0.5:
            need["mem"] = rng.randint(1, capacity["mem"])
        g.add(
            i,
            holding.wrap(i, need),
            deps=deps_of[i],
            priority=rng.randint(-2, 2),
            resources=need,
        )
    workers = data.draw(st.integers(1, 4))
    result = dagexec.run(g, workers=workers, queue_cap=2, resources=capacity)
    expected: dict[int, int] = {}
    for i in range(n):
        expected[i] = _value(i, tuple(expected[d] for d in deps_of[i]))
    assert dict(result) == {t: expected[t] for t in g.sinks()}
    assert holding.over == []
    assert_within_bounds(result)
    for r, peak in holding.peak.items():
        assert peak <= result.stats.peak_resources[r] <= capacity[r]


def test_readme_resource_examples_run_as_written() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8")
    section = readme[readme.index("## Priorities") : readme.index("## Dynamic fan-out")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 3
    for block in blocks:
        namespace: dict[str, Any] = {}
        exec(compile(block, "README.md", "exec"), namespace)
    namespace["test_gpu_limit_is_reached_exactly"]()
