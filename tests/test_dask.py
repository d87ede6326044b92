"""dagexec.dask: dagexec as a dask scheduler, and dagexec graphs on a dask cluster.

Everything but the first test needs the ``dask`` extra and is skipped, with the
reason, without it. Results are compared with dask's own threaded scheduler on
the same graphs, so a conversion mistake shows up as a wrong value.
"""

from __future__ import annotations

import _thread
import contextvars
import io
import logging
import operator
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any

import pytest

import dagexec
from dagexec.testing import Gate

REPO = Path(__file__).resolve().parents[1]
EXTRA = "needs the dask extra: pip install -e '.[dask]' from a clone"

pytestmark = [
    # ResourceProfiler forks a tracker process; on Python >= 3.12 fork() in a
    # process with threads (ours, dask's) warns, which filterwarnings=error
    # would turn into a failure of a test that has nothing to do with fork.
    pytest.mark.filterwarnings(
        r"ignore:This process \(pid=\d+\) is multi-threaded:DeprecationWarning"
    ),
]


def test_import_dagexec_does_not_import_dask() -> None:
    code = (
        "import dagexec, sys; "
        "assert 'dask' not in sys.modules, 'dask imported'; "
        "assert 'distributed' not in sys.modules, 'distributed imported'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def dd() -> Any:
    pytest.importorskip("dask", reason=EXTRA)
    pytest.importorskip("distributed", reason=EXTRA)
    pytest.importorskip("numpy", reason=EXTRA)
    import dagexec.dask

    return dagexec.dask


@pytest.fixture(autouse=True)
def _stop_cached_workers() -> Iterator[None]:
    # get() keeps its worker threads between calls, as dask.threaded keeps its
    # pool; the suite's leak check (conftest) wants every test to end without them.
    yield
    module = sys.modules.get("dagexec.dask")
    if module is not None:
        module.shutdown()


def threaded(dsk: Any, keys: Any) -> Any:
    """dask.threaded.get on a pool of its own, which is stopped before returning."""
    from dask.threaded import get

    with ThreadPoolExecutor(2) as pool:
        return get(dsk, keys, pool=pool)


def compute_threads(*exprs: Any) -> Any:
    """dask.compute with scheduler="threads", on a pool stopped before returning."""
    import dask

    with ThreadPoolExecutor(2) as pool:
        return dask.compute(*exprs, scheduler="threads", pool=pool)


def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int) -> int:
    return x + y


# ------------------------------------------------------------------ collections


@pytest.mark.dask
def test_lazy_attribute_is_the_module(dd: Any) -> None:
    assert dagexec.dask is dd
    assert dagexec.dask.get is dd.get


@pytest.mark.dask
def test_array_reduction_with_thousands_of_chunks_matches_threads(dd: Any) -> None:
    import dask
    import dask.array as da
    import numpy as np

    x = da.random.default_rng(42).random((600, 600), chunks=(10, 10))  # 3600 chunks
    expr = (x + x.T).sum(axis=0)
    ours = dask.compute(expr, scheduler=dd.get)[0]
    theirs = compute_threads(expr)[0]
    assert x.npartitions == 3600
    assert ours.shape == (600,)
    np.testing.assert_allclose(ours, theirs)


@pytest.mark.dask
def test_blockwise_and_config_scheduler(dd: Any) -> None:
    import dask
    import dask.array as da
    import numpy as np

    x = da.arange(10_000, chunks=50).reshape(100, 100).rechunk(10)
    expr = x.map_blocks(lambda b: b * 2 + 1).mean(axis=1)
    with dask.config.set(scheduler=dd.get):
        ours = expr.compute()
    np.testing.assert_array_equal(ours, compute_threads(expr)[0])


@pytest.mark.dask
def test_bag_fold_matches_threads(dd: Any) -> None:
    import dask.bag as db

    bag = db.from_sequence(range(2000), npartitions=40)
    folded = bag.map(lambda v: v * 3).filter(lambda v: v % 2).fold(operator.add, initial=0)
    assert folded.compute(scheduler=dd.get) == compute_threads(folded)[0]
    frequencies = bag.map(lambda v: v % 7).frequencies()
    assert sorted(frequencies.compute(scheduler=dd.get)) == sorted(compute_threads(frequencies)[0])


@pytest.mark.dask
def test_delayed_diamond_matches_threads_and_runs_each_task_once(dd: Any) -> None:
    import dask

    calls: list[str] = []
    lock = threading.Lock()

    def node(name: str, *parts: int) -> int:
        with lock:
            calls.append(name)
        return sum(parts) + len(name)

    top = dask.delayed(node)("top")
    left = dask.delayed(node)("left", top)
    right = dask.delayed(node)("right", top)
    bottom = dask.delayed(node)("bottom", left, right)
    ours = dask.compute(bottom, left, scheduler=dd.get)
    assert sorted(calls) == ["bottom", "left", "right", "top"]
    assert ours == compute_threads(bottom, left)


# ------------------------------------------------------------ legacy tuple graphs

LEGACY: dict[Any, Any] = {
    "x": 1,
    "y": 2,
    "z": (inc, "x"),
    "w": (add, "z", "y"),
    "nested": (add, (inc, "x"), (inc, (inc, "y"))),
    "keylist": (sum, ["x", "y", "z"]),
    "literal": (add, "w", 10),
    "alias": "w",
    "alias2": "alias",
    "aset": {3, 1, 2},
    "setlen": (len, "aset"),
    "strarg": (operator.add, "not-a-key-", "suffix"),
    ("tuple", 0): (inc, "w"),
    ("tuple", 1): (add, ("tuple", 0), "nested"),
    "dictarg": (dict, [["a", "x"], ["b", "y"]]),
}


@pytest.mark.dask
@pytest.mark.parametrize(
    "keys",
    [
        "w",
        "x",
        "alias2",
        "setlen",
        "aset",
        "strarg",
        "dictarg",
        ("tuple", 1),
        ["w", "y"],
        [["w", "nested"], ["keylist", ["literal", ("tuple", 1)]]],
        [],
    ],
    ids=repr,
)
def test_legacy_graph_matches_threaded_get(dd: Any, keys: Any) -> None:
    assert dd.get(LEGACY, keys) == threaded(LEGACY, keys)


@pytest.mark.dask
def test_task_spec_graph_matches_threaded_get(dd: Any) -> None:
    from dask.task_spec import Alias, DataNode, List, Task, TaskRef

    dsk = {
        "a": DataNode("a", 5),
        "b": Task("b", inc, TaskRef("a")),
        "c": Task("c", add, TaskRef("b"), y=TaskRef("a")),
        "d": Task("d", sum, List(TaskRef("a"), TaskRef("b"), Task(None, inc, TaskRef("c")))),
        "e": Alias("e", "d"),
        "f": Task("f", add, TaskRef("e"), 100),
        "g": Task("g", max, TaskRef("b"), TaskRef("b")),
    }
    keys = ["f", ["c", "e", "a"], "g"]
    assert dd.get(dsk, keys) == threaded(dsk, keys) == (123, (11, 23, 5), 6)


@pytest.mark.dask
def test_deep_chain_does_not_recurse(dd: Any) -> None:
    n = 10_000
    dsk: dict[Any, Any] = {"link-0": 0}
    for i in range(1, n + 1):
        dsk[f"link-{i}"] = (inc, f"link-{i - 1}")
    assert dd.get(dsk, f"link-{n}") == n


@pytest.mark.dask
def test_only_ancestors_of_requested_keys_run(dd: Any) -> None:
    ran: list[str] = []

    def side(name: str) -> str:
        ran.append(name)
        return name

    dsk = {
        "wanted": (side, "w"),
        "other": (side, "o"),
        "broken": (operator.truediv, 1, 0),
        "after": (add, "wanted", "broken"),
    }
    assert dd.get(dsk, "wanted") == "w"
    assert ran == ["w"]


@pytest.mark.dask
def test_missing_key_raises_key_error(dd: Any) -> None:
    with pytest.raises(KeyError, match="nope"):
        dd.get({"x": 1}, ["x", "nope"])


@pytest.mark.dask
def test_task_exception_reaches_caller_as_itself(dd: Any) -> None:
    err = ValueError("the original")

    def boom(_: int) -> int:
        raise err

    with pytest.raises(ValueError) as info:
        dd.get({"x": 1, "y": (boom, "x"), "z": (inc, "y")}, "z")
    assert info.value is err
    assert "dagexec: raised by task 'y'" in info.value.__notes__


@pytest.mark.dask
def test_on_error_continue_finishes_independent_work_then_raises(dd: Any) -> None:
    finished: list[str] = []
    err = KeyError("first")

    def boom() -> int:
        raise err

    def independent() -> int:
        finished.append("independent")
        return 1

    dsk = {"bad": (boom,), "good": (independent,), "both": (add, "bad", "good")}
    with pytest.raises(KeyError) as info:
        dd.get(dsk, "both", on_error="continue", num_workers=1)
    assert info.value is err
    assert finished == ["independent"]


@pytest.mark.dask
@pytest.mark.parametrize(
    ("kwarg", "ours", "bad"),
    [
        ("num_workers", "workers", -1),  # 0 means "the default" in dask: see below
        ("queue_cap", "queue_cap", 0),
        ("max_in_flight", "max_in_flight", 0),
    ],
)
def test_bound_kwargs_reach_the_executor(dd: Any, kwarg: str, ours: str, bad: int) -> None:
    with pytest.raises(ValueError, match=f"{ours} must be >= 1, got {bad}"):
        dd.get({"x": (inc, 1)}, "x", **{kwarg: bad})


@pytest.mark.dask
def test_num_workers_zero_means_the_default_as_in_dask(dd: Any) -> None:
    assert dd.get({"x": (inc, 1)}, "x", num_workers=0) == 2


@pytest.mark.dask
def test_one_cached_executor_per_calling_thread_whatever_the_bounds(dd: Any) -> None:
    before = set(threading.enumerate())
    for workers in range(1, 6):
        assert dd.get({"x": (inc, 1)}, "x", num_workers=workers) == 2
    # Other bounds replace the thread's executor instead of adding one.
    assert list(dd._executors) == [threading.current_thread()]
    started = set(threading.enumerate()) - before
    dd.shutdown()
    for t in started:
        t.join(timeout=10)
    assert not [t.name for t in started if t.is_alive()]  # the replaced ones stopped too


@pytest.mark.dask
def test_num_workers_one_runs_every_task_on_one_worker_thread(dd: Any) -> None:
    threads: set[int] = set()

    def where(*_: Any) -> int:
        threads.add(threading.get_ident())
        return 0

    dsk = {f"t{i}": (where,) for i in range(50)}
    dsk["all"] = (where, *[f"t{i}" for i in range(50)])
    dd.get(dsk, "all", num_workers=1, queue_cap=3, max_in_flight=4)
    assert len(threads) == 1
    assert threading.get_ident() not in threads


@pytest.mark.dask
def test_unknown_kwargs_are_ignored(dd: Any) -> None:
    assert dd.get(LEGACY, "w", pool=None, chunksize=4, optimize_graph=False) == 4


@pytest.mark.dask
def test_cache_supplies_values_and_receives_results(dd: Any) -> None:
    cache: dict[Any, Any] = {"x": 41}
    assert dd.get({"x": (operator.truediv, 1, 0), "y": (inc, "x")}, "y", cache=cache) == 42
    assert cache["y"] == 42


@pytest.mark.dask
@pytest.mark.parametrize("how", ["keyword", "config"])
def test_the_cache_is_the_live_value_store_during_the_run(dd: Any, how: str) -> None:
    """dask's test_cache_options, and what else ``dask.local`` does with the cache::

    d (data) --> a1 --> b
    d (data) --> a2 --> b
    """
    import dask

    cache: dict[Any, Any] = {}
    seen: dict[str, list[str]] = {}

    def look(name: str) -> Any:
        def task(*values: int) -> int:
            seen[name] = sorted(cache)
            return sum(values) + 1

        return task

    dsk = {"d": 10, "a1": (look("a1"), "d"), "a2": (look("a2"), "d"), "b": (look("b"), "a1", "a2")}
    if how == "config":
        with dask.config.set(cache=cache):
            assert dd.get(dsk, "b") == 23
    else:
        assert dd.get(dsk, "b", cache=cache) == 23
    assert "d" in seen["a1"] and "d" in seen["a2"]  # data nodes are there from the start
    assert seen["b"] == ["a1", "a2"]  # values arrive as tasks end; d left once used
    assert cache == {"b": 23}  # the requested keys stay


@pytest.mark.dask
@pytest.mark.parametrize(
    ("dsk", "keys", "given"),
    [
        ({"x": 1, "y": (inc, "x"), "z": (add, "y", "x")}, ["x", "z"], {"other": 0}),
        ({"x": 1, "y": (inc, "x"), "z": (inc, "y")}, ["y", "z"], {}),
    ],
    ids=["requested data node", "requested middle"],
)
def test_the_cache_ends_as_with_dask_local(dd: Any, dsk: Any, keys: Any, given: Any) -> None:
    from dask.local import get_sync

    ours, theirs = dict(given), dict(given)
    assert dd.get(dsk, keys, cache=ours) == get_sync(dsk, keys, cache=theirs)
    assert ours == theirs


@pytest.mark.dask
def test_a_cached_input_is_used_and_then_released_as_with_dask_local(dd: Any) -> None:
    from dask._task_spec import Task, TaskRef
    from dask.local import get_sync

    dsk = {"y": Task("y", inc, TaskRef("x")), "z": Task("z", inc, TaskRef("y"))}
    ours, theirs = {"x": 41, "other": 0}, {"x": 41, "other": 0}
    assert dd.get(dsk, "z", cache=ours) == get_sync(dsk, "z", cache=theirs) == 43
    assert ours == theirs == {"z": 43, "other": 0}


@pytest.mark.dask
def test_callbacks_see_the_given_cache_as_their_state(dd: Any) -> None:
    from dask.callbacks import Callback

    cache: dict[Any, Any] = {}
    states: list[Any] = []
    with Callback(posttask=lambda key, value, dsk, state, worker: states.append(state["cache"])):
        assert dd.get(LEGACY, "w", cache=cache) == 4
    assert states and all(s is cache for s in states)


@pytest.mark.dask
def test_a_missing_dependency_is_a_dagexec_error_in_dasks_words(dd: Any) -> None:
    """dask's test_detect_malformed_graph: nothing runs, the message says what to do."""
    from dask._task_spec import Task, TaskRef

    ran: list[str] = []
    dsk = {
        "first": (ran.append, "first"),
        "y": Task("y", add, TaskRef("x"), TaskRef("w")),
        "z": (inc, "y"),
    }
    with pytest.raises(dagexec.MissingDependencyError) as info:
        dd.get(dsk, ["first", "z"])
    assert isinstance(info.value, ValueError)
    assert str(info.value) == (
        "Missing dependency 'w', 'x' for dependents 'y': they are neither in the dask "
        "graph nor in cache; add the missing key to the graph or pass its value in cache="
    )
    assert (info.value.task, info.value.missing) == ("y", ("w", "x"))
    assert ran == []
    assert dd.get(dsk, "z", cache={"x": 1, "w": 2}) == 4


@pytest.mark.dask
def test_nested_compute_inside_a_task_does_not_deadlock(dd: Any) -> None:
    import dask

    def inner(n: int) -> int:
        return dask.compute(dask.delayed(inc)(n), scheduler=dd.get)[0]

    dsk = {f"i{k}": (inner, k) for k in range(8)}
    dsk["total"] = (sum, [f"i{k}" for k in range(8)])
    assert dd.get(dsk, "total", num_workers=2) == sum(range(1, 9))


# ---------------------------------------------------------- pools and Ctrl-C


class Records(logging.Handler):
    """Collects the ``dagexec`` log records and lets a test wait for one, without sleeping."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.messages.append((record.levelno, record.getMessage()))
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: any(re.search(pattern, m) for _, m in self.messages), timeout
            )


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("dagexec")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def all_at_once(n: int) -> tuple[dict[Any, Any], list[str]]:
    """n tasks that can only finish if all n run at once, and the names of their threads."""
    barrier = threading.Barrier(n, timeout=10)  # broken, not hung, with fewer workers
    names: list[str] = []

    def task() -> int:
        barrier.wait()
        names.append(threading.current_thread().name)
        return threading.get_ident()

    dsk: dict[Any, Any] = {("t", i): (task,) for i in range(n)}
    dsk["threads"] = (lambda *ids: len(set(ids)), *[("t", i) for i in range(n)])
    return dsk, names


@pytest.mark.dask
@pytest.mark.parametrize("pool_type", [ThreadPoolExecutor, ThreadPool])
@pytest.mark.parametrize("how", ["keyword", "config", "keyword over num_workers"])
def test_a_thread_pools_size_decides_the_workers_and_tasks_never_run_on_it(
    dd: Any, pool_type: Any, how: str
) -> None:
    import dask

    dsk, names = all_at_once(5)
    with pool_type(5) as pool:
        if how == "config":
            with dask.config.set(pool=pool):
                assert dd.get(dsk, "threads") == 5
        else:
            workers = {"num_workers": 1} if how == "keyword over num_workers" else {}
            assert dd.get(dsk, "threads", pool=pool, **workers) == 5
    assert len(names) == 5 and all(n.startswith("dagexec-worker-") for n in names)


@pytest.mark.dask
def test_num_workers_decides_the_workers(dd: Any) -> None:
    dsk, names = all_at_once(5)
    assert dd.get(dsk, "threads", num_workers=5) == 5
    assert len(names) == 5


@pytest.mark.dask
def test_a_process_pool_or_another_object_as_pool_is_a_clear_type_error(dd: Any) -> None:
    from concurrent.futures import ProcessPoolExecutor

    process_pool = r"pool=.*ProcessPoolExecutor.* is a process pool"
    with ProcessPoolExecutor(1) as pool, pytest.raises(TypeError, match=process_pool):
        dd.get(LEGACY, "w", pool=pool)  # (a pool that starts no process until used)
    with pytest.raises(TypeError, match=r"pool must be a .*ThreadPoolExecutor.*got int 4"):
        dd.get(LEGACY, "w", pool=4)


def sigint_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


@pytest.mark.dask
@pytest.mark.parametrize(
    "interrupt", [sigint_main_thread, _thread.interrupt_main], ids=["SIGINT", "interrupt_main"]
)
def test_ctrl_c_comes_back_while_tasks_block_and_the_next_get_runs(
    dd: Any, interrupt: Any, records: Records
) -> None:
    """dask's test_interrupt: 19 tasks block, the 20th interrupts the caller."""
    assert threading.current_thread() is threading.main_thread()
    gate = Gate()
    barrier = threading.Barrier(20, timeout=10)

    def block() -> None:
        barrier.wait()
        gate.wait()

    def interrupt_caller() -> None:
        barrier.wait()
        interrupt()

    dsk: dict[Any, Any] = {("f", i): (block,) for i in range(19)}
    dsk["interrupt"] = (interrupt_caller,)
    with ThreadPoolExecutor(20) as pool:  # only its size is used: it starts no thread
        try:
            with pytest.raises(KeyboardInterrupt):
                dd.get(dsk, list(dsk), pool=pool)
            # Back while the tasks still block (the gate is shut: none can end).
            assert gate.wait_for_waiting(19) and not gate.is_open
            # Logged as it happens, and saying what is true now.
            assert records.wait_for(r"run interrupted: 0 tasks cancelled, (19|20) still running")
            assert not [m for _, m in records.messages if "finished" in m]
            # The next call with the same bounds does not wait for the blocked tasks.
            assert dd.get({"x": (inc, 1)}, "x", pool=pool) == 2
            assert gate.waiting == 19
        finally:
            gate.open()
    assert records.wait_for(r"interrupted run: its last running tasks have finished")
    warnings = [m for level, m in records.messages if level >= logging.WARNING]
    assert len(warnings) == 1


# ------------------------------------------------------------------ contextvars

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


@pytest.mark.dask
@pytest.mark.parametrize("num_workers", [None, 1])
def test_tasks_see_the_callers_contextvars_on_warm_workers(dd: Any, num_workers: Any) -> None:
    """dask's test_contextvars, plus a fused chain and a task whose set() must not leak."""

    def set_and_read() -> str:
        before = request_id.get()
        request_id.set("task")
        return before

    dsk = {
        "single": (request_id.get,),
        "setter": (set_and_read,),
        "a": (lambda: [request_id.get()],),
        "b": (lambda xs: [*xs, request_id.get()], "a"),
        "c": (lambda xs: [*xs, request_id.get()], "b"),
    }
    keys = ["single", "setter", "c"]
    assert dd.get(dsk, keys, num_workers=num_workers) == ("unset", "unset", ["unset"] * 3)

    def in_caller() -> tuple[Any, Any, str]:
        request_id.set("req-7")
        first = dd.get(dsk, keys, num_workers=num_workers)  # the workers are warm by now
        return first, dd.get(dsk, keys, num_workers=num_workers), request_id.get()

    first, second, after = contextvars.Context().run(in_caller)
    assert first == second == ("req-7", "req-7", ["req-7"] * 3)
    assert after == "req-7"


# -------------------------------------------------------------------- callbacks


@pytest.mark.dask
def test_progress_bar_reaches_100_percent(dd: Any) -> None:
    import dask
    import dask.array as da
    from dask.diagnostics import ProgressBar

    out = io.StringIO()
    with ProgressBar(out=out):
        dask.compute(da.ones((100, 100), chunks=10).sum(), scheduler=dd.get)
    assert "100% Completed" in out.getvalue()


@pytest.mark.dask
def test_profiler_sees_the_same_tasks_as_with_threads(dd: Any) -> None:
    import dask.array as da
    from dask.diagnostics import Profiler

    x = da.ones((60, 60), chunks=10)
    expr = (x + x.T).sum()
    dsk, keys = dict(expr.__dask_graph__()), expr.__dask_keys__()
    with Profiler() as ours:
        assert dd.get(dsk, keys) == threaded(dsk, keys)
    with Profiler() as theirs:
        threaded(dsk, keys)
    assert len(ours.results) > 36
    assert {r.key for r in ours.results} == {r.key for r in theirs.results}
    main = threading.get_ident()
    for r in ours.results:
        assert r.start_time <= r.end_time
        assert r.worker_id != main  # the thread that ran it, as dask reports


@pytest.mark.dask
def test_resource_profiler_is_started_and_stopped_by_the_run(dd: Any) -> None:
    import dask
    import dask.array as da
    from dask.diagnostics import ResourceProfiler

    pytest.importorskip("psutil", reason="ResourceProfiler needs psutil")
    rprof = ResourceProfiler(dt=0.01)
    rprof.register()  # not entered: only our start/finish calls collect anything
    try:
        dask.compute(da.ones((50, 50), chunks=10).sum(), scheduler=dd.get)
    finally:
        rprof.unregister()
        rprof.close()
    assert rprof.results


@pytest.mark.dask
def test_local_callbacks_get_dask_protocol_calls(dd: Any) -> None:
    from dask.callbacks import Callback

    events: list[tuple[str, Any]] = []
    values: dict[Any, Any] = {}
    states: list[dict[str, Any]] = []

    def start_state(dsk: Any, state: dict[str, Any]) -> None:
        states.append({k: len(v) for k, v in state.items()})

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        events.append(("post", key))
        values[key] = result
        assert key in state["finished"]

    def finish(dsk: Any, state: Any, failed: bool) -> None:
        events.append(("finish", failed))

    with Callback(
        start=lambda dsk: events.append(("start", len(dsk))),
        start_state=start_state,
        pretask=lambda key, dsk, state: events.append(("pre", key)),
        posttask=posttask,
        finish=finish,
    ):
        result = dd.get(LEGACY, ["literal", ("tuple", 1)])
    assert result == threaded(LEGACY, ["literal", ("tuple", 1)])
    assert events[0] == ("start", len(LEGACY))
    assert events[-1] == ("finish", False)
    assert states[0]["ready"] >= 1 and states[0]["finished"] == 0
    for key, value in values.items():
        assert value == threaded(LEGACY, key)
        assert events.index(("pre", key)) < events.index(("post", key))
    # the tasks that ran are the ancestors of the keys that are not data
    assert set(values) == {"z", "w", "nested", "literal", ("tuple", 0), ("tuple", 1)}


@pytest.mark.dask
def test_callbacks_hear_about_a_failure(dd: Any) -> None:
    from dask.callbacks import Callback

    finished: list[bool] = []
    with (
        Callback(finish=lambda dsk, state, failed: finished.append(failed)),
        pytest.raises(ZeroDivisionError),
    ):
        dd.get({"x": (operator.truediv, 1, 0)}, "x")
    assert finished == [True]


# -------------------------------------------------------------- graph -> dask


def sample_graph() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("a", lambda: 2)
    g.add(("b", 1), lambda a: a + 1, deps=["a"])
    g.add(frozenset({"not", "a", "dask", "key"}), lambda a, b: a * 10 + b, deps=["a", ("b", 1)])
    g.add("sink", lambda b: -b, deps=[("b", 1)])
    g.add("unused", lambda: "unused")
    return g


@pytest.mark.dask
def test_to_dask_runs_on_dask_threaded_get_like_on_dagexec(dd: Any) -> None:
    g = sample_graph()
    odd = frozenset({"not", "a", "dask", "key"})
    targets = ["sink", odd]
    dsk, keys = dd.to_dask(g, targets)
    assert len(keys) == 2 and keys[0].startswith("sink-")  # unique to the call
    assert "unused" not in dsk  # only ancestors of the targets
    assert dict(zip(targets, threaded(dsk, keys))) == dict(dagexec.run(g, targets))


@pytest.mark.dask
def test_to_dask_defaults_to_sinks(dd: Any) -> None:
    g = sample_graph()
    dsk, keys = dd.to_dask(g)
    assert len(keys) == len(g.sinks())
    assert list(threaded(dsk, keys)) == [dagexec.run(g)[s] for s in g.sinks()]


class RecordingClient:
    """Stands in for a Client to prove that nothing is sent for a bad graph."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args)
        raise AssertionError("nothing should be sent")

    def nthreads(self) -> dict[str, int]:
        return {}

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": {"tcp://w1": {"resources": {"gpu": 1}}}}


@pytest.mark.dask
def test_bad_graphs_are_rejected_before_anything_is_sent(dd: Any) -> None:
    client = RecordingClient()
    cyclic = dagexec.Graph()
    cyclic.add("p", inc, deps=["q"])
    cyclic.add("q", inc, deps=["p"])
    with pytest.raises(dagexec.CycleError):
        dd.run_on(client, cyclic)
    missing = dagexec.Graph()
    missing.add("p", inc, deps=["ghost"])
    with pytest.raises(dagexec.MissingDependencyError):
        dd.run_on(client, missing)
    with pytest.raises(dagexec.UnknownTargetError):
        dd.run_on(client, sample_graph(), ["nope"])
    with pytest.raises(TypeError, match="write targets="):
        dd.to_dask(sample_graph(), "sink")
    assert client.calls == []


@pytest.fixture(scope="module")
def offload_thread(dd: Any) -> None:
    # distributed keeps one process-wide "Dask-Offload" thread, started on first
    # use and never stopped. Start it before any test's thread snapshot, so the
    # leak check does not blame the first test that happens to use a cluster.
    from distributed.utils import _offload_executor

    _offload_executor.submit(int).result(timeout=30)


@pytest.fixture
def client(dd: Any, offload_thread: None) -> Iterator[Any]:
    from distributed import Client, LocalCluster

    # processes=False keeps the cluster in this process, so it is fast and dies
    # with it; protocol tcp on 127.0.0.1 makes it a real loopback cluster (the
    # in-process default, inproc://, has no host and rejects one).
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            # ":0": a free port. None still binds the scheduler's HTTP server to
            # 8787, and warns (an error here) when another program holds it.
            dashboard_address=":0",
            host="127.0.0.1",
            protocol="tcp://",
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster, timeout=30) as c,
    ):
        yield c


@pytest.mark.dask
def test_run_on_cluster_matches_threads(dd: Any, client: Any) -> None:
    g = sample_graph()
    odd = frozenset({"not", "a", "dask", "key"})
    on_cluster = dd.run_on(client, g, ["sink", odd])
    on_threads = dagexec.run(g, ["sink", odd])
    assert isinstance(on_cluster, dagexec.RunResult)
    assert dict(on_cluster) == dict(on_threads)
    assert dict(on_cluster.status) == dict(on_threads.status)
    assert on_cluster.stats.workers == 2
    assert on_cluster.errors == {}


@pytest.mark.dask
def test_run_on_cluster_defaults_to_sinks_and_raises_task_errors(dd: Any, client: Any) -> None:
    g = sample_graph()
    assert dict(dd.run_on(client, g)) == dict(dagexec.run(g))
    g.add("bad", lambda a: a / 0, deps=["a"])
    with pytest.raises(ZeroDivisionError):
        dd.run_on(client, g, ["bad"])
