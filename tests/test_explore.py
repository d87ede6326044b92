"""dagexec.testing.explore: undeclared dependencies found, named, shrunk and replayed.

The three bugs of docs/explore.md (tests/explore_bugs.py) are each found for 20
seeds within the default runs, with the message naming the missing edge; the
shrunk schedule is one pair, and the plain order (no pair) agrees. Random graphs
without a hidden dependency never diverge (hypothesis). The rest pins how
explore meets the other options: maps, retries, timeouts, resources,
priorities, process tasks, callbacks, on_error, and bad parameters.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import explore_bugs as eb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagexec
from dagexec.testing import (
    Exploration,
    Schedule,
    ScheduleDivergence,
    assert_within_bounds,
    explore,
    replay_schedule,
)


def _message(reader: Hashable, writer: Hashable) -> str:
    r, w = repr(reader), repr(writer)
    return (
        f"task {r} gave a different value when it started before {w} ended: does {r} read "
        f"something {w} writes? add deps=[{w}]"
    ) + (" to the map 'price'" if isinstance(reader, tuple) else "")


def _bug(kind: str, tmp_path: Path, fixed: bool = False) -> eb.Bug:
    if kind == "file":
        return eb.file_bug(tmp_path, fixed=fixed)
    if kind == "cache":
        return eb.cache_bug(fixed=fixed)
    return eb.database_bug(tmp_path, fixed=fixed)


@pytest.mark.parametrize("kind", ["file", "cache", "database"])
def test_each_bug_is_found_named_shrunk_and_replayed(kind: str, tmp_path: Path) -> None:
    bug = _bug(kind, tmp_path)
    # The plain order hides it: the writer goes first.
    bug.setup()
    plain = replay_schedule(bug.graph, Schedule(pairs=()), resources=bug.capacity)
    with dagexec.Executor(2) as ex:  # and so does every plain run, on two workers too
        for _ in range(20):
            bug.setup()
            assert dict(ex.run(bug.graph, resources=bug.capacity)) == dict(plain)
    for seed in range(20):
        with pytest.raises(ScheduleDivergence) as caught:
            explore(bug.graph, setup=bug.setup, seed=seed, resources=bug.capacity)
        e = caught.value
        assert isinstance(e, AssertionError)
        assert e.task in bug.readers
        assert str(e).splitlines()[0] == _message(e.task, bug.writer)
        # Shrunk to one pair, "reader before writer": minimal, since without it
        # (the plain order) the run agrees.
        assert e.shrunk.pairs == ((e.task, bug.writer),)
        assert Schedule.parse(str(e.shrunk)) == e.shrunk
        assert Schedule.parse(str(e.schedule)) == e.schedule
        assert e.orders[0] == plain_order(bug)
        assert e.seed >= seed
    # Replayed from its string, as often as wanted: the same wrong value each time.
    wrong = []
    for _ in range(3):
        bug.setup()
        wrong.append(dict(replay_schedule(bug.graph, str(e.shrunk), resources=bug.capacity)))
    assert wrong[0] != dict(plain)
    assert wrong == [wrong[0]] * 3
    # The fix the message names makes every schedule agree.
    fixed = _bug(kind, tmp_path, fixed=True)
    assert explore(fixed.graph, setup=fixed.setup, runs=30, resources=bug.capacity).runs == 30


def plain_order(bug: eb.Bug) -> tuple[Hashable, ...]:
    bug.setup()
    result = replay_schedule(bug.graph, Schedule(pairs=()), trace=True, resources=bug.capacity)
    return tuple(r.name for r in sorted(result.trace, key=lambda r: r.started))


@pytest.mark.parametrize("strategy", ["pct", "exhaustive"])
def test_other_strategies_find_the_bugs(strategy: str, tmp_path: Path) -> None:
    for kind in ("file", "cache", "database"):
        bug = _bug(kind, tmp_path)
        with pytest.raises(ScheduleDivergence) as caught:
            explore(bug.graph, setup=bug.setup, strategy=strategy, resources=bug.capacity)
        assert caught.value.shrunk.pairs == ((caught.value.task, bug.writer),)
        assert caught.value.task in bug.readers


def test_replaying_the_full_schedule_repeats_its_steps(tmp_path: Path) -> None:
    bug = eb.file_bug(tmp_path)
    with pytest.raises(ScheduleDivergence) as caught:
        explore(bug.graph, setup=bug.setup, workers=1, resources=bug.capacity)
    schedule = caught.value.schedule
    assert all(len(step) == 1 for step in schedule.steps)
    # Its seed runs the same schedule first.
    with pytest.raises(ScheduleDivergence) as again:
        explore(
            bug.graph,
            setup=bug.setup,
            workers=1,
            resources=bug.capacity,
            seed=caught.value.seed,
            runs=1,
        )
    assert again.value.schedule == schedule
    for _ in range(3):
        bug.setup()
        result = replay_schedule(bug.graph, str(schedule), trace=True, resources=bug.capacity)
        started = tuple(r.name for r in sorted(result.trace, key=lambda r: r.started))
        assert started == schedule.order == caught.value.orders[1]
        assert result["plan"] == "1 threads"


def test_process_tasks_are_explored(tmp_path: Path) -> None:
    bug = eb.file_bug(tmp_path, isolate="process")
    with pytest.raises(ScheduleDivergence) as caught:
        explore(bug.graph, setup=bug.setup, seed=0, resources=bug.capacity)
    assert caught.value.shrunk.pairs == (("load", "write_config"),)


@st.composite
def pure_graphs(draw: Any) -> dagexec.Graph:
    n = draw(st.integers(1, 7))
    g = dagexec.Graph()
    for i in range(n):
        deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        g.add(f"t{i}", _pure(i), deps=[f"t{d}" for d in deps])
    return g


def _pure(i: int) -> Any:
    def task(*values: int) -> int:
        return i * 31 + sum(v * (k + 2) for k, v in enumerate(values))

    return task


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pure_graphs(), st.integers(0, 1000), st.sampled_from(["random", "pct", "exhaustive"]))
def test_no_hidden_dependency_never_diverges(g: dagexec.Graph, seed: int, strategy: str) -> None:
    summary = explore(g, runs=8, seed=seed, strategy=strategy, check=assert_within_bounds)
    assert isinstance(summary, Exploration)
    assert 1 <= summary.runs <= 8
    assert summary.result is not None and summary.result.stats.tasks_run == len(g)


def test_exhaustive_covers_small_graphs_and_says_what_it_left() -> None:
    g = dagexec.Graph()
    for name in "abc":
        g.add(name, lambda: 1)
    # Serial orders of three independent tasks: 3! = 6.
    done = explore(g, strategy="exhaustive", workers=1, runs=100)
    assert (done.runs, done.distinct, done.uncovered) == (6, 6, 0)
    part = explore(g, strategy="exhaustive", workers=1, max_schedules=2)
    assert (part.runs, part.uncovered) == (2, 4)
    # With two workers pairs overlap too: 6 serial, 3 (a pair, then the last)
    # and 3 (one, then a pair).
    assert explore(g, strategy="exhaustive", runs=100).runs == 12


def test_setup_runs_before_each_schedule_and_check_in_each() -> None:
    calls = {"setup": 0, "check": 0}

    def setup() -> None:
        calls["setup"] += 1

    def check(result: dagexec.RunResult) -> None:
        calls["check"] += 1
        assert result["b"] == 2

    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    explore(g, runs=7, setup=setup, check=check)
    assert calls == {"setup": 8, "check": 8}


def test_a_check_that_fails_under_one_schedule_is_a_divergence() -> None:
    seen: list[str] = []
    g = dagexec.Graph()
    g.add("a", lambda: seen.append("a"))
    g.add("b", lambda: seen.append("b"))

    def check(result: dagexec.RunResult) -> bool:
        return seen[-2:] == ["a", "b"]

    with pytest.raises(ScheduleDivergence) as caught:
        explore(g, check=check, setup=seen.clear)
    assert caught.value.task is None
    assert caught.value.shrunk.pairs == (("b", "a"),)
    with pytest.raises(AssertionError, match="failed on the plain order") as plain:
        explore(g, check=lambda r: False)
    assert not isinstance(plain.value, ScheduleDivergence)


def test_errors_compare_by_type_and_message() -> None:
    box: dict[str, int] = {}
    g = dagexec.Graph()
    g.add("fill", lambda: box.setdefault("n", 1))
    g.add("use", lambda: 10 // box["n"])
    with pytest.raises(ScheduleDivergence) as caught:
        explore(g, setup=box.clear)
    first = str(caught.value).splitlines()[0]
    assert first.startswith(
        "task 'use' failed with KeyError: 'n' when it started before 'fill' ended"
    )
    # on_error="raise": the run's own exception is what is compared.
    with pytest.raises(ScheduleDivergence, match="KeyError"):
        explore(g, setup=box.clear, on_error="raise")


class _Elementwise:
    def __eq__(self, other: object) -> Any:
        return [True]

    __hash__ = object.__hash__


def test_equal_must_give_a_bool() -> None:
    g = dagexec.Graph()
    g.add("a", _Elementwise)
    with pytest.raises(TypeError, match=r"equal\(a, b\) gave list.*task 'a'.*array_equal"):
        explore(g, runs=1)
    assert explore(g, runs=3, equal=lambda a, b: True).runs == 3


class _Ambiguous:
    def __bool__(self) -> bool:
        raise ValueError("the truth value is ambiguous")


class _ArrayLike:
    def __eq__(self, other: object) -> Any:
        return _Ambiguous()

    __hash__ = object.__hash__


def test_an_equal_that_raises_is_named() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: {"k": _ArrayLike()})  # dict == calls bool() on each value's ==
    g.add("b", lambda: 1)
    with pytest.raises(TypeError, match=r"\(default ==\) raised ValueError .*task 'a'"):
        explore(g, runs=1)

    def broken(x: object, y: object) -> bool:
        return bool(_Ambiguous()) if isinstance(x, dict) else x == y

    with pytest.raises(TypeError, match=r"raised ValueError comparing the values of task 'a'") as e:
        explore(g, runs=1, equal=broken)
    assert isinstance(e.value.__cause__, ValueError)


def test_maps_retries_timeouts_and_callbacks_are_explored() -> None:
    tries: dict[int, int] = {}
    started: list[Hashable] = []

    class Starts:
        def on_task_start(self, name: Hashable, worker: int) -> None:
            started.append(name)

    def flaky(x: int) -> int:
        tries[x] = tries.get(x, 0) + 1
        if tries[x] == 1:
            raise OSError("first attempt fails")
        return x * 10

    g = dagexec.Graph()
    g.add("xs", lambda: [1, 2, 3])
    g.map("m", flaky, over="xs", retries=1, timeout=30.0)
    g.add("total", sum, deps=["m"])
    summary = explore(
        g, runs=25, setup=tries.clear, callbacks=[Starts()], check=assert_within_bounds
    )
    assert summary.result is not None and summary.result["total"] == 60
    assert summary.distinct > 1
    # Every attempt reported its start, held or not: 1 + 3 items twice + 1, per run.
    assert len(started) == 26 * 8


def test_resources_and_priorities_keep_their_bounds() -> None:
    running = {"gpu": 0, "peak": 0}
    lock = threading.Lock()

    def on_gpu() -> int:
        with lock:
            running["gpu"] += 1
            running["peak"] = max(running["peak"], running["gpu"])
        with lock:
            running["gpu"] -= 1
        return 1

    g = dagexec.Graph()
    for i in range(4):
        g.add(f"g{i}", on_gpu, resources={"gpu": 1}, priority=i)
        g.add(f"c{i}", lambda: 2, priority=-i)
    summary = explore(g, runs=40, workers=3, resources={"gpu": 1}, check=assert_within_bounds)
    assert summary.runs == 40
    assert running["peak"] == 1


def test_overlapping_steps_really_overlap() -> None:
    both = threading.Barrier(2, timeout=10)
    met: list[bool] = []

    def meet() -> int:
        both.wait()  # only returns if the other task runs at the same time
        met.append(True)
        return 1

    g = dagexec.Graph()
    g.add("a", meet)
    g.add("b", meet)
    result = replay_schedule(g, "a@0+b@1")
    assert dict(result) == {"a": 1, "b": 1} and met == [True, True]


def test_a_failure_in_an_overlap_stops_the_run_without_a_hang() -> None:
    def boom() -> int:
        raise ValueError("boom")

    g = dagexec.Graph()
    g.add("a", boom)
    g.add("b", lambda: 2)
    g.add("c", lambda b: b, deps=["b"])
    for _ in range(5):
        with pytest.raises(ValueError, match="boom"):
            replay_schedule(g, "a@0+b@1 c@0", on_error="raise")
        result = replay_schedule(g, "a@0+b@1 c@0")
        assert dict(result) == {"c": 2} and list(result.errors) == ["a"]
    # A run that fails the same way under every schedule agrees with itself; NaN too.
    g.add("nan", lambda: float("nan"))
    assert explore(g, runs=10).runs == 10
    assert explore(g, runs=10, on_error="raise").runs == 10


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"checkpoint": "x.db"}, ValueError, "checkpoint= is refused"),
        ({"bogus": 1}, TypeError, r"unknown options \['bogus'\]"),
        ({"runs": 0}, ValueError, "runs must be >= 1"),
        ({"runs": 1.5}, TypeError, "runs must be an int"),
        ({"seed": "1"}, TypeError, "seed must be an int"),
        ({"strategy": "dfs"}, ValueError, "strategy must be one of"),
        ({"max_schedules": 3}, ValueError, "bounds strategy='exhaustive' only"),
        ({"check": 3}, TypeError, "check must be a function"),
        ({"workers": 0}, ValueError, "workers must be >= 1"),
    ],
)
def test_bad_parameters_are_refused_before_anything_runs(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    ran: list[int] = []
    g = dagexec.Graph()
    g.add("a", lambda: ran.append(1))
    with pytest.raises(error, match=match):
        explore(g, **kwargs)
    assert ran == []


def _two_tasks(ran: list[Hashable]) -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("ab", lambda: ran.append("ab"))
    g.add("b", lambda: ran.append("b"))
    return g


@pytest.mark.parametrize(
    ("targets", "kwargs", "error", "match"),
    [
        (["zz"], {}, dagexec.UnknownTargetError, "unknown target 'zz'"),
        ("ab", {}, TypeError, "got the string 'ab'"),
        (None, {"resources": {"x": -1}}, ValueError, r"resources\['x'\] must be a number"),
        (None, {"timeout": "soon"}, TypeError, "timeout must be a number"),
        (None, {"on_error": "ignore"}, ValueError, "on_error must be 'raise' or 'continue'"),
        (None, {"callbacks": [3]}, TypeError, "callback"),
    ],
)
@pytest.mark.parametrize("call", ["explore", "replay_schedule"])
def test_what_a_run_refuses_explore_refuses_before_anything_runs(
    call: str, targets: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    ran: list[Hashable] = []
    g = _two_tasks(ran)
    with pytest.raises(error, match=match):
        if call == "explore":
            explore(g, targets, runs=3, **kwargs)
        else:
            replay_schedule(g, "ab@0 b@0", targets=targets, **kwargs)
    assert ran == []


def test_a_graph_a_run_refuses_is_refused_before_anything_runs() -> None:
    ran: list[Hashable] = []
    g = _two_tasks(ran)
    g.add("gpu", lambda: ran.append("gpu"), resources={"gpu": 1})
    with pytest.raises(ValueError, match="'gpu', which has no capacity"):
        explore(g, runs=3)
    g = _two_tasks(ran)
    g.add("c", lambda b: b, deps=["missing"])
    with pytest.raises(dagexec.MissingDependencyError, match="'missing'"):
        explore(g, runs=3)
    with pytest.raises(TypeError, match="graph must be a dagexec.Graph"):
        explore({"a": 1}, runs=3)  # type: ignore[arg-type]
    assert ran == []


def test_a_plain_order_that_raises_for_the_run_itself_is_raised() -> None:
    release = threading.Event()
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("slow", lambda a: release.wait(10), deps=["a"])
    try:
        with pytest.raises(TimeoutError, match="the run timed out") as caught:
            explore(g, runs=3, timeout=0.2)
    finally:
        release.set()
    assert "explore: raised by the run in the plain order" in caught.value.__notes__[-1]

    class Broken:
        def on_task_end(self, *args: object) -> None:
            raise RuntimeError("callback broke")

    with pytest.raises(RuntimeError, match="callback broke"):
        explore(g, runs=3, callbacks=[Broken()])


def test_a_task_failure_under_on_error_raise_is_a_state_unless_check_needs_the_result() -> None:
    checked: list[object] = []

    def boom() -> int:
        raise ValueError("boom")

    g = dagexec.Graph()
    g.add("a", boom)
    g.add("b", lambda: 2)
    # Every order raises the same task error: they agree.
    assert explore(g, runs=5, on_error="raise").result is None
    with pytest.raises(ValueError, match="boom") as caught:
        explore(g, runs=5, on_error="raise", check=checked.append)
    assert "check(result) could not be called" in caught.value.__notes__[-1]
    assert checked == []


def test_schedule_strings() -> None:
    s = Schedule(steps=(((("m", 0), 1), ("a b", 0)), (("x", 0), ("y", 1))))
    assert str(s) == "('m', 0)@1+'a b'@0 x@0+y@1"
    assert Schedule.parse(str(s)) == s
    assert str(Schedule.parse("a@0 b@1+c@0")) == "a@0 b@1+c@0"
    assert Schedule.parse("b<a ('m', 1)<c").pairs == (("b", "a"), (("m", 1), "c"))
    for bad in ("a", "a@", "a@0 b<c", "a@0b@1", "@0"):
        with pytest.raises(ValueError, match="Schedule.parse"):
            Schedule.parse(bad)
    with pytest.raises(TypeError):
        Schedule.parse(3)  # type: ignore[arg-type]
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with pytest.raises(ValueError, match="does not fit this graph: 'zz' is not a task"):
        replay_schedule(g, "zz@0")
    with pytest.raises(ValueError, match="Schedule.parse: an empty string"):
        Schedule.parse("  ")


def test_a_step_that_reuses_a_worker_or_repeats_a_task_is_refused_naming_it() -> None:
    ran: list[Hashable] = []
    g = dagexec.Graph()
    g.add("a", lambda: ran.append("a"))
    g.add("b", lambda: ran.append("b"))
    with pytest.raises(ValueError, match=r"step 1 \(a@0\+b@0\) puts two tasks on worker 0"):
        replay_schedule(g, "a@0+b@0")
    with pytest.raises(ValueError, match=r"step 1 \(a@0\+a@1\) starts task a twice"):
        replay_schedule(g, "a@0+a@1 b@0")
    with pytest.raises(ValueError, match=r"step 2 \(a@1\+b@1\)"):
        Schedule(steps=((("c", 0),), (("a", 1), ("b", 1))))
    assert ran == []


def test_a_schedule_that_does_not_fit_is_refused_before_anything_runs() -> None:
    ran: list[Hashable] = []
    g = dagexec.Graph()
    g.add("a", lambda: ran.append("a"))
    g.add("b", lambda: ran.append("b"))
    g.add("c", lambda a: ran.append("c"), deps=["a"])
    g.add("xs", lambda: [1, 2])
    g.map("m", lambda x: ran.append(x), over="xs")
    for schedule, match in [
        ("x@0 y@1", "'x' is not a task of this run"),
        ("c@0 a@0 b@0", r"step 1 starts 'c' before its dependency 'a' has run"),
        ("nope<a", "'nope' is not a task"),
        ("c<a", "the pair 'c<a' cannot hold: 'c' depends on 'a'"),
        ("('m', 0)<xs", "the pair .* cannot hold: .* depends on 'xs'"),
        ("a<a", "puts a task before itself"),
        ("a@0 a@0", "step 2 starts 'a' again: it runs at most 1 time"),
        ("m@0", "'m' is a map: its items run"),
    ]:
        with pytest.raises(ValueError, match=match):
            replay_schedule(g, schedule)
    assert ran == []


def test_a_replay_stops_at_the_first_step_that_does_not_fit() -> None:
    ran: list[Hashable] = []

    def boom() -> None:
        raise ValueError("boom")

    g = dagexec.Graph()
    g.add("a", boom)
    g.add("b", lambda: ran.append("b"))
    g.add("c", lambda a: ran.append("c"), deps=["a"])
    # 'a' fails, so 'c' is never ready: the run stops there, and 'b' never runs.
    with pytest.raises(ValueError, match=r"step 2 wants 'c'@0; ready were \['b'\]"):
        replay_schedule(g, "a@0 c@0 b@0")
    assert ran == []
    g = dagexec.Graph()
    g.add("a", lambda: ran.append("a"), retries=1)
    with pytest.raises(ValueError, match="the run ended after step 1; the schedule has 2"):
        replay_schedule(g, "a@0 a@0")


@pytest.mark.timeout(15)
def test_exhaustive_on_a_wide_graph_gives_a_lower_bound_quickly() -> None:
    from dagexec._engine.run.strategies import count_schedules

    assert count_schedules({f"t{i}": [] for i in range(20)}, True) is None  # was ~20 s
    assert count_schedules({f"t{i}": [] for i in range(3)}, True) == 12
    g = dagexec.Graph()
    for i in range(40):
        g.add(f"t{i}", lambda: 1)
    for workers in (2, 4):  # each was 26 s and 46 s
        summary = explore(g, strategy="exhaustive", runs=5, workers=workers)
        assert summary.runs == 5
        assert summary.uncovered is not None and summary.uncovered > 0


def test_exhaustive_branches_only_on_overlaps_the_resources_allow() -> None:
    g = dagexec.Graph()
    for i in range(4):
        g.add(f"r{i}", lambda: 1, resources={"disk": 1})
    # Capacity 1: no two overlap, so the walk is the 4! serial orders, not more.
    every = explore(g, strategy="exhaustive", resources={"disk": 1}, runs=1000)
    assert (every.runs, every.distinct, every.uncovered) == (24, 24, 0)
    part = explore(g, strategy="exhaustive", resources={"disk": 1}, max_schedules=5)
    assert (part.runs, part.uncovered) == (5, 19)
    # Capacity 2: every pair may overlap, as without resources.
    both = explore(g, strategy="exhaustive", resources={"disk": 2}, runs=1000)
    g2 = dagexec.Graph()
    for i in range(4):
        g2.add(f"r{i}", lambda: 1)
    free = explore(g2, strategy="exhaustive", runs=1000)
    assert both.runs == free.runs and both.uncovered == free.uncovered == 0


def test_a_task_that_differs_by_itself_is_not_blamed_on_a_missing_edge() -> None:
    import random

    g = dagexec.Graph()
    g.add("a", lambda: random.random())
    g.add("b", lambda: 1)
    g.add("c", lambda: 2)
    with pytest.raises(ScheduleDivergence) as caught:
        explore(g, runs=5)
    e = caught.value
    first = str(e).splitlines()[0]
    assert first.startswith("task 'a' gave a different value even in the plain order, run again")
    assert "pass equal=" in first and "add deps" not in str(e)
    assert e.task == "a" and e.shrunk == Schedule(pairs=())
    assert "shrunk: (none: the plain order alone differs)" in str(e)
    assert explore(g, runs=5, equal=lambda x, y: True).runs == 5


def test_a_run_that_raises_under_one_schedule_is_described_once() -> None:
    from dagexec._engine.front.divergence import Observed, describe_difference, first_difference

    steps = Schedule(steps=((("a", 0),), (("b", 0),)))
    timed_out = TimeoutError("the run timed out after 0.5 s with 1 of 3 tasks finished")
    ref = Observed(steps, {}, None)
    obs = Observed(steps, {}, None, raised=timed_out)
    found = first_difference(ref, obs, lambda x, y: x == y)
    assert found is not None and found[0] is None
    line = describe_difference(None, found[1], steps, obs, ref)
    assert line == (
        "the run raised TimeoutError: the run timed out after 0.5 s with 1 of 3 tasks "
        "finished (in the plain order it returned)"
    )


@pytest.mark.parametrize(
    "name",
    [
        None,
        True,
        False,
        b"x",
        float("inf"),
        float("-inf"),
        -1,
        2.5,
        ("m", 0),
        "None",
        "True",
        "inf",
        "if",
        "a b",
        "a.b:c/d-e",
        "x@1",
        "p+q",
        "it's",
        "1abc",
    ],
)
def test_every_literal_task_name_round_trips_through_a_schedule_string(name: Hashable) -> None:
    for schedule in (
        Schedule(steps=(((name, 0),), (("z", 1),))),
        Schedule(pairs=((name, "z"), ("z", name))),
    ):
        assert Schedule.parse(str(schedule)) == schedule
    back = Schedule.parse(str(Schedule(steps=(((name, 0),),)))).steps[0][0][0]
    assert type(back) is type(name)
    g = dagexec.Graph()
    g.add(name, lambda: 1)
    g.add("z", lambda: 2)
    assert dict(replay_schedule(g, str(Schedule(steps=(((name, 0),), (("z", 0),)))))) == {
        name: 1,
        "z": 2,
    }


def test_replay_schedule_names_itself_in_its_errors() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with pytest.raises(ValueError, match=r"^replay_schedule: workers must be >= 1, got 0"):
        replay_schedule(g, "a@0", workers=0)
    with pytest.raises(TypeError, match=r"^replay_schedule: workers must be an int"):
        replay_schedule(g, "a@0", workers="2")
