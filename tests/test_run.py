"""Run semantics: results, partial evaluation, failures, parameters, reuse."""

from __future__ import annotations

import gc
import threading
import traceback
import weakref
from collections.abc import Hashable

import pytest

import dagexec
from dagexec import TaskState, UnknownTargetError
from dagexec.testing import assert_within_bounds


def diamond(calls: list[Hashable] | None = None) -> dagexec.Graph:
    r"""
        raw
       /   \
    norm   side      unused (not an ancestor of anything asked for)
       \   /
       report
    """
    lock = threading.Lock()

    def record(name: Hashable, value: object) -> object:
        if calls is not None:
            with lock:
                calls.append(name)
        return value

    g = dagexec.Graph()
    g.add("raw", lambda: record("raw", 2))
    g.add("norm", lambda r: record("norm", r * 10), deps=["raw"])
    g.add("side", lambda r: record("side", r + 1), deps=["raw"])
    g.add("report", lambda n, s: record("report", (n, s)), deps=["norm", "side"])
    g.add("unused", lambda: record("unused", None))
    return g


def test_whole_graph_returns_every_sink() -> None:
    result = dagexec.run(diamond(), workers=2)
    assert dict(result) == {"report": (20, 3), "unused": None}
    assert set(result.status.values()) == {TaskState.DONE}
    assert result.stats.tasks_run == 5
    assert_within_bounds(result)


def test_partial_evaluation_runs_only_ancestors() -> None:
    calls: list[Hashable] = []
    result = dagexec.run(diamond(calls), targets=["norm"], workers=3)
    assert dict(result) == {"norm": 20}
    assert sorted(calls) == ["norm", "raw"]
    assert sorted(result.status) == ["norm", "raw"]
    assert result.stats.tasks_planned == 2


def test_dependency_results_arrive_positionally_in_deps_order() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: "A")
    g.add("b", lambda: "B")
    g.add("ab", lambda *xs: "".join(xs), deps=["a", "b", "a"])
    g.add("ba", lambda *xs: "".join(xs), deps=["b", "a"])
    assert dict(dagexec.run(g, workers=2)) == {"ab": "ABA", "ba": "BA"}


def test_targets_can_be_any_collection_and_duplicates_collapse() -> None:
    g = diamond()
    assert dict(dagexec.run(g, targets={"side"}, workers=1)) == {"side": 3}
    assert dict(dagexec.run(g, targets=("raw", "raw"), workers=1)) == {"raw": 2}
    assert dict(dagexec.run(g, targets=[], workers=1)) == {}


def test_a_single_string_target_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"got the string 'norm'; write targets=\['norm'\]"):
        dagexec.run(diamond(), targets="norm")


def test_unknown_targets_are_named_and_nothing_runs() -> None:
    calls: list[Hashable] = []
    with pytest.raises(UnknownTargetError, match="unknown targets 'nope', 'nada'") as info:
        dagexec.run(diamond(calls), targets=["norm", "nope", "nada"])
    assert info.value.targets == ("nope", "nada")
    assert isinstance(info.value, KeyError)
    assert calls == []


def test_a_bad_graph_runs_nothing() -> None:
    calls: list[Hashable] = []
    g = diamond(calls)
    g.add("loop1", lambda x: x, deps=["loop2"])
    g.add("loop2", lambda x: x, deps=["loop1"])
    with pytest.raises(dagexec.CycleError, match="loop1 -> loop2 -> loop1|loop2 -> loop1 -> loop2"):
        dagexec.run(g, targets=["norm"])
    g2 = diamond(calls)
    g2.add("orphan", lambda x: x, deps=["ghost"])
    with pytest.raises(dagexec.MissingDependencyError, match="'ghost'"):
        dagexec.run(g2)
    assert calls == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"queue_cap": 0}, ValueError, "queue_cap must be >= 1, got 0"),
        ({"max_in_flight": 0}, ValueError, "max_in_flight must be >= 1, got 0"),
        ({"workers": 0}, ValueError, "workers must be >= 1, got 0"),
        ({"workers": -3}, ValueError, "workers must be >= 1, got -3"),
        ({"queue_cap": 2.5}, TypeError, "queue_cap must be an int, got float 2.5"),
        ({"workers": True}, TypeError, "workers must be an int, got bool True"),
        (
            {"on_error": "ignore"},
            ValueError,
            "on_error must be 'raise' or 'continue', got 'ignore'",
        ),
    ],
)
def test_bad_parameters_are_named(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    calls: list[Hashable] = []
    with pytest.raises(error, match=message):
        dagexec.run(diamond(calls), **kwargs)  # type: ignore[arg-type]
    assert calls == []


def test_graph_argument_must_be_a_graph() -> None:
    with pytest.raises(TypeError, match="graph must be a dagexec.Graph, got dict"):
        dagexec.run({"a": 1})  # type: ignore[arg-type]


def test_defaults() -> None:
    import os

    with dagexec.Executor() as ex:
        assert ex.workers == (os.cpu_count() or 1)
        assert ex.queue_cap == 64
        assert ex.max_in_flight == ex.workers * 65  # all the inboxes can hold
        result = ex.run(diamond())
    assert result.stats.effective_cap == ex.workers * 65
    with dagexec.Executor(2, queue_cap=3) as ex:
        assert ex.max_in_flight == ex.effective_cap == 8


class Boom(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def boom_task(*_: object) -> None:
    raise Boom("custom attribute survives")


def test_task_exception_is_raised_as_itself_with_a_note() -> None:
    g = diamond()
    g.add("bad", boom_task, deps=["raw"])
    with pytest.raises(Boom) as info:
        dagexec.run(g, workers=2)
    exc = info.value
    assert exc.detail == "custom attribute survives"
    assert "dagexec: raised by task 'bad'" in exc.__notes__
    frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    assert "boom_task" in frames  # the original traceback is intact


def test_failure_stops_dispatch_and_cancels_the_rest() -> None:
    """'a' fails first; with cap 2, at most one task queued behind it may still start
    (its worker can take it before the scheduler hears of the failure); every
    other task is cancelled without running."""
    ran: list[int] = []
    ends: dict[Hashable, TaskState] = {}

    class Ends:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            ends[name] = state

    g = dagexec.Graph()
    g.add("a", boom_task)
    for i in range(100):
        g.add(i, lambda i=i: ran.append(i))
    with dagexec.Executor(workers=1, queue_cap=3, max_in_flight=2) as ex:
        with pytest.raises(Boom):
            ex.run(g, callbacks=[Ends()])
        assert len(ran) <= 1
        cancelled = [n for n, s in ends.items() if s is TaskState.CANCELLED]
        assert len(cancelled) == 100 - len(ran)
        assert not set(cancelled) & set(ran)
        result = ex.run(g, targets=[7])  # the executor is idle and usable again
    assert result.status[7] is TaskState.DONE


def test_failing_task_always_raises_and_never_hangs_200_times() -> None:
    g = dagexec.Graph()
    for i in range(6):
        g.add(("ok", i), lambda: 1)
    g.add("bad", boom_task, deps=[("ok", 0)])
    for i in range(6):
        g.add(("after", i), lambda x: x, deps=["bad"])
    with dagexec.Executor(workers=2, queue_cap=1, max_in_flight=3) as ex:
        for _ in range(200):
            with pytest.raises(Boom):
                ex.run(g)


def test_continue_runs_everything_not_downstream_and_skips_the_rest() -> None:
    r"""
    ok1 -> bad -> down1 -> down2
    ok1 -> fine
    """
    g = dagexec.Graph()
    g.add("ok1", lambda: 1)
    g.add("bad", lambda x: 1 / 0, deps=["ok1"])
    g.add("down1", lambda x: x, deps=["bad"])
    g.add("down2", lambda x, y: x, deps=["down1", "ok1"])
    g.add("fine", lambda x: x + 1, deps=["ok1"])
    result = dagexec.run(g, on_error="continue", workers=2)
    assert dict(result) == {"fine": 2}
    assert result.status == {
        "ok1": TaskState.DONE,
        "bad": TaskState.FAILED,
        "down1": TaskState.SKIPPED,
        "down2": TaskState.SKIPPED,
        "fine": TaskState.DONE,
    }
    assert isinstance(result.errors["bad"], ZeroDivisionError)
    with pytest.raises(KeyError, match="target 'down2' has no value: it is SKIPPED"):
        result["down2"]
    with pytest.raises(ExceptionGroup) as info:
        result.raise_for_errors()
    assert info.group_contains(ZeroDivisionError)  # type: ignore[attr-defined]
    dagexec.run(g, targets=["fine"], on_error="continue").raise_for_errors()  # no failure


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt()])
@pytest.mark.parametrize("on_error", ["raise", "continue"])
def test_base_exception_in_a_task_is_reraised_after_a_clean_stop(
    error: BaseException, on_error: str
) -> None:
    def fatal() -> None:
        raise error

    g = dagexec.Graph()
    g.add("fatal", fatal)
    for i in range(5):
        g.add(i, lambda x: x, deps=["fatal"])
    with dagexec.Executor(workers=2) as ex:
        with pytest.raises(type(error)) as info:
            ex.run(g, on_error=on_error)  # type: ignore[arg-type]
        assert info.value is error
        assert "dagexec: raised by task 'fatal'" in error.__notes__
        assert dict(ex.run(diamond(), targets=["raw"])) == {"raw": 2}  # workers alive


def test_callback_that_raises_fails_the_run_after_draining() -> None:
    class Bad:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            if name == "norm":
                raise RuntimeError("callback broke")

    with dagexec.Executor(workers=2) as ex:
        with pytest.raises(RuntimeError, match="callback broke") as info:
            ex.run(diamond(), callbacks=[Bad()])
        assert any("raised by callback" in n for n in info.value.__notes__)
        assert dict(ex.run(diamond(), targets=["raw"])) == {"raw": 2}


def test_callbacks_see_every_task_once_on_the_scheduler_thread() -> None:
    seen: dict[str, list[object]] = {"start": [], "dispatch": [], "end": [], "run_end": []}
    threads: set[str] = set()

    class Recorder(dagexec.Callback):
        def on_run_start(self, plan: dagexec.PlanInfo) -> None:
            seen["start"].append(plan.tasks)
            threads.add(threading.current_thread().name)

        def on_task_dispatch(self, name: Hashable, worker: int) -> None:
            seen["dispatch"].append(name)
            threads.add(threading.current_thread().name)

        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            seen["end"].append((name, state))
            assert seconds >= 0.0

        def on_run_end(self, result: dagexec.RunResult) -> None:
            seen["run_end"].append(dict(result))

    g = diamond()
    g.add("bad", lambda r: 1 / 0, deps=["raw"])
    g.add("after", lambda b: b, deps=["bad"])
    dagexec.run(g, callbacks=[Recorder()], on_error="continue", workers=2)
    assert threads == {"dagexec-scheduler"}
    assert sorted(map(str, seen["dispatch"])) == ["bad", "norm", "raw", "report", "side", "unused"]
    ends = dict(seen["end"])  # type: ignore[arg-type]
    assert len(seen["end"]) == 7
    assert ends["after"] is TaskState.SKIPPED and ends["bad"] is TaskState.FAILED
    assert seen["run_end"] == [{"report": (20, 3), "unused": None}]


def test_intermediate_values_are_released_as_soon_as_consumed() -> None:
    """A 300-long chain of objects: at most a few may be alive at any time."""
    lock = threading.Lock()
    alive = 0
    peak = 0

    class Big:
        def __init__(self) -> None:
            nonlocal alive, peak
            with lock:
                alive += 1
                peak = max(peak, alive)
            weakref.finalize(self, self._gone)

        @staticmethod
        def _gone() -> None:
            nonlocal alive
            with lock:
                alive -= 1

    g = dagexec.Graph()
    g.add(0, Big)
    for i in range(1, 300):
        g.add(i, lambda prev: Big(), deps=[i - 1])
    gc.disable()  # only reference counting may free them: no lucky collections
    try:
        result = dagexec.run(g, workers=2)
    finally:
        gc.enable()
    assert isinstance(result[299], Big)
    assert peak <= 3, f"{peak} chain values were alive at once"


def test_a_200000_task_chain_runs() -> None:
    g = dagexec.Graph()
    g.add(0, lambda: 0)
    for i in range(1, 200_000):
        g.add(i, lambda x: x + 1, deps=[i - 1])
    assert dagexec.run(g, workers=2)[199_999] == 199_999


def test_executor_reuse_and_graph_changes_are_revalidated() -> None:
    g = diamond()
    with dagexec.Executor(workers=2) as ex:
        assert dict(ex.run(g, targets=["norm"])) == {"norm": 20}
        g.add("late", lambda x: x, deps=["missing"])
        with pytest.raises(dagexec.MissingDependencyError):
            ex.run(g, targets=["norm"])
        g.add("missing", lambda: 5)
        assert dict(ex.run(g, targets=["late"])) == {"late": 5}


def test_runs_from_several_threads_are_serialised_and_never_mix() -> None:
    barrier = threading.Barrier(4, timeout=10)
    errors: list[BaseException] = []

    def graph_for(k: int) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("x", lambda: k)
        for i in range(50):
            g.add(i, lambda x, i=i: x * 1000 + i, deps=["x"])
        return g

    with dagexec.Executor(workers=2, queue_cap=2) as ex:

        def caller(k: int) -> None:
            try:
                g = graph_for(k)
                barrier.wait()
                for _ in range(5):
                    result = ex.run(g)
                    assert dict(result) == {i: k * 1000 + i for i in range(50)}
                    assert_within_bounds(result)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_shut_down_executor_refuses_to_run() -> None:
    ex = dagexec.Executor(workers=1)
    ex.shutdown()
    ex.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        ex.run(diamond())


def test_result_repr_and_missing_key() -> None:
    result = dagexec.run(diamond(), workers=1)
    assert "RunResult" in repr(result)
    with pytest.raises(KeyError):
        result["nope"]


def test_stats_fields_each_hold_their_own_value() -> None:
    """The engine hands RunResult the RunStats fields in order (the dataclass is
    made at the first read): every field must land under its own name, and a
    field added to RunStats must be added there too (a wrong count fails here)."""
    import dataclasses
    import pickle

    g = dagexec.Graph()
    g.add("a", lambda: 1, resources={"slot": 1})
    g.add("b", lambda a: a + 1, deps=["a"])
    with dagexec.Executor(workers=2, queue_cap=3, max_in_flight=5) as ex:
        result = ex.run(g, resources={"slot": 2})
    stats = result.stats
    assert result.stats is stats  # made once
    assert type(stats) is dagexec.RunStats
    assert dataclasses.asdict(stats) == {
        "tasks_planned": 2,
        "tasks_run": 2,
        "wall_seconds": stats.wall_seconds,
        "workers": 2,
        "queue_cap": 3,
        "max_in_flight": 5,
        "effective_cap": 5,
        "peak_in_flight": 1,
        "peak_queue_depth": stats.peak_queue_depth,
        "tasks_per_worker": stats.tasks_per_worker,
        "resources": {"slot": 2},
        "peak_resources": {"slot": 1},
        "tasks_loaded": 0,
        "retries": 0,
        "abandoned": 0,
        "timeouts": 0,
    }
    assert isinstance(stats.wall_seconds, float) and stats.wall_seconds > 0
    assert len(stats.peak_queue_depth) == len(stats.tasks_per_worker) == 2
    assert sum(stats.tasks_per_worker) == 2
    # A result pickled before its stats were read keeps them, and its pickle names
    # ``stats`` as before they were made lazily, so either version loads the other's.
    g2 = dagexec.Graph()
    g2.add("x", int)
    fresh = dagexec.run(g2, workers=1)
    _, state = fresh.__getstate__()
    assert "_stats" not in state and type(state["stats"]) is dagexec.RunStats
    back = pickle.loads(pickle.dumps(fresh))
    assert back.stats == fresh.stats and dict(back) == dict(fresh) == {"x": 0}
    old_style = dagexec.RunResult.__new__(dagexec.RunResult)
    for name, value in state.items():  # what unpickling an older result does
        setattr(old_style, name, value)
    assert old_style.stats == fresh.stats and old_style["x"] == 0
