"""RunResult.trace: every executed task once, with consistent, causally ordered times."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Hashable

import pytest

import dagexec
from dagexec import Graph, TaskState, TraceRecord


def _random_dag(n: int, seed: int) -> Graph:
    """Edges only from lower to higher index: acyclic by construction."""
    rng = random.Random(seed)
    g = Graph()
    for i in range(n):
        deps = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3))))
        g.add(f"t{i}", lambda *args: sum(args) + 1, deps=[f"t{d}" for d in deps])
    return g


def _check_consistent(graph: Graph, result: dagexec.RunResult) -> dict[Hashable, TraceRecord]:
    """The properties every trace must have; returns the records by name."""
    trace = result.trace
    by_name = {r.name: r for r in trace}
    assert len(by_name) == len(trace), "a task appears twice"
    ran = {n for n, s in result.status.items() if s in (TaskState.DONE, TaskState.FAILED)}
    assert set(by_name) == ran
    assert len(trace) == result.stats.tasks_run
    for r in trace:
        assert 0 <= r.worker < result.stats.workers
        assert r.state is result.status[r.name]
        assert 0.0 <= r.ready <= r.dispatched <= r.started <= r.ended
        assert r.ended <= result.stats.wall_seconds
        # A task becomes ready only after every dependency has ended.
        for dep in graph[r.name].deps:
            assert by_name[dep].ended <= r.ready
    assert [r.started for r in trace] == sorted(r.started for r in trace)
    # A worker runs one task at a time: its records never overlap.
    for w in range(result.stats.workers):
        mine = [r for r in trace if r.worker == w]
        for a, b in itertools.pairwise(mine):
            assert a.ended <= b.started
    return by_name


def test_trace_off_by_default() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    result = dagexec.run(g, workers=2)
    assert result.trace == ()


@pytest.mark.parametrize("seed", range(5))
def test_random_dag_trace_is_consistent(seed: int) -> None:
    g = _random_dag(60, seed)
    result = dagexec.run(g, workers=3, queue_cap=2, max_in_flight=5, trace=True)
    by_name = _check_consistent(g, result)
    assert len(by_name) == 60


def test_trace_uses_every_worker_when_tasks_overlap() -> None:
    """Two tasks that wait for each other must run on two different workers at once."""
    barrier = threading.Barrier(2, timeout=10)
    g = Graph()
    g.add("x", barrier.wait)
    g.add("y", barrier.wait)
    result = dagexec.run(g, workers=2, trace=True)
    by_name = _check_consistent(g, result)
    assert {by_name["x"].worker, by_name["y"].worker} == {0, 1}
    # Each started before the other ended: they overlapped in time.
    assert by_name["x"].started < by_name["y"].ended
    assert by_name["y"].started < by_name["x"].ended


def test_continue_traces_failures_but_not_skipped_tasks(failing_graph: Graph) -> None:
    g = failing_graph
    result = dagexec.run(g, workers=2, on_error="continue", trace=True)
    by_name = _check_consistent(g, result)
    assert set(by_name) == {"a", "bad", "ok"}
    assert by_name["bad"].state is TaskState.FAILED
    assert result.status["after"] is TaskState.SKIPPED


def test_raise_traces_only_tasks_that_ran() -> None:
    """With on_error="raise", tasks cancelled before starting have no record."""

    def bad() -> None:
        raise RuntimeError("stop")

    g = Graph()
    g.add("bad", bad)
    for i in range(20):
        g.add(f"later{i}", lambda _: None, deps=["bad"])
    keep: list[dagexec.RunResult] = []

    class Keep(dagexec.Callback):
        def on_run_end(self, result: dagexec.RunResult) -> None:
            keep.append(result)

    with pytest.raises(RuntimeError, match="stop"):
        dagexec.run(g, workers=2, trace=True, callbacks=[Keep()])
    (result,) = keep
    assert [r.name for r in result.trace] == ["bad"]
    assert all(result.status[f"later{i}"] is TaskState.CANCELLED for i in range(20))


def test_fused_chain_members_each_get_a_record() -> None:
    """
    c0 -> c1 -> ... -> c9 (a chain the scheduler may hand over as one unit)
    side
    """
    g = Graph()
    g.add("c0", lambda: 0)
    for i in range(1, 10):
        g.add(f"c{i}", lambda x: x + 1, deps=[f"c{i - 1}"])
    g.add("side", lambda: 0)
    result = dagexec.run(g, workers=2, trace=True)
    assert result["c9"] == 9
    by_name = _check_consistent(g, result)
    assert set(by_name) == {*(f"c{i}" for i in range(10)), "side"}
    for i in range(1, 10):
        assert by_name[f"c{i - 1}"].ended <= by_name[f"c{i}"].started
