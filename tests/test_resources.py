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
import dagexec._state.runstate
from dagexec import Graph
from dagexec._state.resources import Resources
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
        ({"gpu": True}, TypeError, r"must be a number \(int or float\), got bool"),
        ({"gpu": "1"}, TypeError, r"must be a number \(int or float\), got str"),
        ({"gpu": 10**400}, ValueError, "positive finite"),
        ({"gpu": float("inf")}, ValueError, "positive finite"),
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
        ({"gpu": "2"}, TypeError, "must be a number"),
        ({"gpu": 10**400}, ValueError, "write math.inf for no limit"),
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


@pytest.mark.parametrize("targets", [None, ["B", "C"]])
def test_a_chain_follower_of_lower_priority_waits_for_a_ready_higher_one(
    targets: list[str] | None,
) -> None:
    """A -> B is a chain by shape, but B (priority -100) must not run right after A
    while C (priority 5) is ready too: fused, B jumped ahead of C."""
    order: list[str] = []
    g = Graph()
    g.add("root", lambda: order.append("root"))
    g.add("A", lambda _: order.append("A"), deps=["root"], priority=10)
    g.add("C", lambda _: order.append("C"), deps=["root"], priority=5)
    g.add("B", lambda _: order.append("B"), deps=["A"], priority=-100)
    dagexec.run(g, targets=targets, workers=1, max_in_flight=1)
    assert order == ["root", "A", "C", "B"]


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
    monkeypatch.setattr(dagexec._state.runstate, "DEPTH_FIRST", False)
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

    page = (Path(__file__).resolve().parent.parent / "docs" / "graphs.md").read_text("utf-8")
    section = page[page.index("## Priorities") : page.index("## Dynamic fan-out")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 4  # priorities (two: the order guarantees), resources (two)
    for block in blocks:
        namespace: dict[str, Any] = {}
        exec(compile(block, "docs/graphs.md", "exec"), namespace)
    namespace["test_gpu_limit_is_reached_exactly"]()


def test_fractional_amounts_are_freed_exactly_whatever_the_release_order() -> None:
    """0.1, 0.2 and 0.7 of a capacity 1.0 released in the order 0.2, 0.7, 0.1: in
    floats 1.0 then came back as 0.9999999999999999 and a task needing 1.0 was
    cancelled as if the run succeeded."""
    released = {name: threading.Event() for name in ("a", "b", "c")}
    barrier = threading.Barrier(3, timeout=30)

    def part(name: str, after: str | None) -> Callable[[], str]:
        def fn() -> str:
            barrier.wait()  # all three hold their share at once
            if after is not None:
                assert released[after].wait(30)
            return name

        return fn

    class Order:
        def on_task_end(self, name: Hashable, state: dagexec.TaskState, seconds: float) -> None:
            if name in released:
                released[name].set()

    g = Graph()
    g.add("a", part("a", "c"), resources={"mem": 0.1})  # ends last
    g.add("b", part("b", None), resources={"mem": 0.2})  # ends first
    g.add("c", part("c", "b"), resources={"mem": 0.7})
    g.add("all", lambda *parts: parts, deps=["a", "b", "c"], resources={"mem": 1.0})
    result = dagexec.run(g, workers=3, resources={"mem": 1.0}, callbacks=[Order()])
    assert result.status["all"] is dagexec.TaskState.DONE
    assert result["all"] == ("a", "b", "c")
    assert result.stats.peak_resources == {"mem": 1}


def test_three_tenths_fill_a_capacity_of_three_tenths() -> None:
    """0.1 + 0.1 + 0.1 is 0.30000000000000004 in floats: the third never fitted."""
    gate = Gate()
    g = Graph()
    for i in range(3):
        g.add(i, gate.gated(lambda i=i: i), resources={"mem": 0.1})
    recorder = ResourceRecorder(g)
    with dagexec.Executor(workers=3, resources={"mem": 0.3}) as ex:
        future = run_in_thread(ex.run, g, callbacks=[recorder])
        assert recorder.wait_for_held("mem", 0.3)
        assert gate.wait_for_waiting(3)
        assert recorder.held == {"mem": 0.3}
        gate.open()
        result = future.result(timeout=30)
    assert dict(result) == {0: 0, 1: 1, 2: 2}
    assert recorder.peak == {"mem": 0.3} == result.stats.peak_resources
    assert_resource_reached(result, "mem")


def test_a_task_that_can_never_start_is_an_error_not_a_silent_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the state machine ever leaves a task unable to start with nothing running
    (a bug), the run must fail naming the task, not return as if it succeeded."""

    def never_fits(self: Resources, entry: tuple[Any, ...], need: Any) -> bool:
        self._park(entry, need[0][0])  # as if its first resource were never free
        return False

    monkeypatch.setattr(Resources, "try_hold", never_fits)
    g = Graph()
    g.add("free", lambda: 1)
    g.add("stuck", lambda: 2, resources={"mem": 1})
    with pytest.raises(
        RuntimeError,
        match=r"internal error.*'stuck' \(ready, waits for 1 of "
        r"resource 'mem', 1 free of 1\)",
    ):
        dagexec.run(g, workers=2, resources={"mem": 1})
