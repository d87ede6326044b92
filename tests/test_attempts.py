"""Attempts that outlive their timeout (issue 19): the caller is never held by one.

Every overrunning task blocks on an Event the test releases at its end (never a
spin, never a sleep); the fake policy clock of test_policy.py stands in for time
where a test needs an attempt to be "late" without waiting for it.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dagexec
from dagexec import Executor, Graph, TaskState, TaskTimeout, current_task
from dagexec._engine.run import clock as _clock
from dagexec.testing import assert_within_bounds

WAIT = 30.0  # a safety net for gates: a hang fails here, a pass never waits this long
CALLER = 20.0  # how long a test lets a caller take before calling it held


class FakeClock:
    """The policy clock (deadlines, retry waits), moved only by the test's tasks."""

    def __init__(self) -> None:
        self.t = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(_clock, "now", fake)
    monkeypatch.setattr(random, "random", lambda: 0.0)
    yield fake


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What hung tasks wait on; opened when the test ends, pass or fail."""
    event = threading.Event()
    yield event
    event.set()


def hanging(gate: threading.Event, returned: threading.Event | None = None) -> Callable[[], str]:
    def hang() -> str:
        gate.wait(WAIT)
        if returned is not None:
            returned.set()
        return "late"

    return hang


def within(seconds: float, fn: Callable[[], object]) -> object:
    """``fn()`` on another thread; fail if it has not returned within ``seconds``."""
    returned: list[object] = []
    raised: list[BaseException] = []

    def target() -> None:
        try:
            returned.append(fn())
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=target, name="test-caller", daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the caller was held by an attempt that overran"
    if raised:
        raise raised[0]
    return returned[0]


# ------------------------------------------------------------ 1. the worker's clock
def test_a_late_value_is_never_used_even_when_the_start_is_heard_late(clock: FakeClock) -> None:
    """The driver is held in a callback while 'slow' starts and returns 10 s (on the
    fake clock) into a 1 s timeout: it hears of the start only afterwards. Today the
    deadline counted from then, and the late value fed 'use'."""
    in_callback, slow_returned = threading.Event(), threading.Event()

    def wait_for_driver() -> int:
        assert in_callback.wait(WAIT)
        return 0

    def slow() -> str:
        clock.advance(10.0)
        slow_returned.set()
        return "late"

    class HoldDriver:
        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            if name == "first":
                in_callback.set()
                assert slow_returned.wait(WAIT)

    g = Graph()
    g.add("first", lambda: 1)
    g.add("hold", wait_for_driver)
    g.add("slow", slow, timeout=1.0)
    g.add("use", lambda s: s.upper(), deps=["slow"])
    # queue_cap: all three go into the one inbox at once (the memory-aware default
    # would hand out one at a time, and 'slow' would wait behind the held driver).
    result = dagexec.run(g, workers=1, queue_cap=16, on_error="continue", callbacks=[HoldDriver()])
    assert isinstance(result.errors["slow"], TaskTimeout)
    assert result.status["use"] is TaskState.SKIPPED
    assert result.stats.abandoned == 0  # it returned before the run ended


# ---------------------------------------------------- 2. the run does not wait
def _graph(gate: threading.Event) -> Graph:
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    g.add("other", lambda: 1)
    return g


class Quiet:
    def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
        pass


OPTIONS: dict[str, Callable[[Path], dict[str, object]]] = {
    "plain": lambda tmp: {},
    "callbacks": lambda tmp: {"callbacks": [Quiet()]},
    "progress": lambda tmp: {"progress": True},
    "trace": lambda tmp: {"trace": True},
    "checkpoint": lambda tmp: {"checkpoint": tmp / "c.sqlite"},
    "timeout": lambda tmp: {"timeout": 600},
    "logs": lambda tmp: {"logs": True},
}


@pytest.mark.parametrize("options", sorted(OPTIONS))
@pytest.mark.parametrize("entry", ["Executor.run", "dagexec.run", "submit", "shutdown"])
def test_a_run_ends_without_its_abandoned_attempt(
    entry: str,
    options: str,
    gate: threading.Event,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every way in returns while 'hang' still runs; the attempt is counted and named.
    Today dagexec.run joined the stuck worker forever."""
    g = _graph(gate)
    kw = OPTIONS[options](tmp_path)
    caplog.set_level(logging.WARNING, logger="dagexec")

    def go() -> dagexec.RunResult:
        if entry == "dagexec.run":
            return dagexec.run(g, workers=2, on_error="continue", **kw)  # type: ignore[arg-type]
        ex = Executor(workers=2)
        try:
            if entry == "submit":
                return ex.submit(g, None, on_error="continue", **kw).result()
            return ex.run(g, on_error="continue", **kw)  # type: ignore[arg-type]
        finally:
            ex.shutdown(wait=True)

    result = within(CALLER, go)
    assert isinstance(result, dagexec.RunResult)
    assert result.stats.abandoned == 1
    assert isinstance(result.errors["hang"], TaskTimeout)
    assert result["other"] == 1
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'hang'" in m and "abandoned" in m for m in warned), warned


def test_raise_mode_raises_the_timeout_without_waiting(gate: threading.Event) -> None:
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    with pytest.raises(TaskTimeout, match="'hang'"):
        within(CALLER, lambda: dagexec.run(g, workers=1))


# ------------------------------------------------- 3. workers are replaced, bounded
def test_an_abandoned_attempt_holds_no_worker_after_its_run(gate: threading.Event) -> None:
    """One worker: the next run on the executor runs at once (today it queued behind
    the hung attempt forever)."""
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    after = Graph()
    after.add("x", lambda: 41)
    after.add("y", lambda x: x + 1, deps=["x"])
    with Executor(workers=1) as ex:
        first = within(CALLER, lambda: ex.run(g, on_error="continue"))
        assert isinstance(first, dagexec.RunResult) and first.stats.abandoned == 1
        second = within(CALLER, lambda: ex.run(after))
        assert isinstance(second, dagexec.RunResult) and second["y"] == 42
        assert second.stats.tasks_per_worker == (2,)
        assert second.stats.peak_in_flight <= ex.effective_cap


def test_a_retry_does_not_queue_behind_its_hung_attempt(gate: threading.Event) -> None:
    """One worker, two slots: attempt 2 runs on the slot's new thread."""

    def task() -> str:
        if current_task().attempt == 1:
            gate.wait(WAIT)
            return "late"
        return "fresh"

    g = Graph()
    g.add("t", task, timeout=0.05, retries=1)
    result = within(CALLER, lambda: dagexec.run(g, workers=1, max_in_flight=2))
    assert isinstance(result, dagexec.RunResult)
    assert result["t"] == "fresh" and result.stats.abandoned == 1


def test_replacements_are_bounded_by_workers(
    gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """One worker: the first hung attempt's slot gets a new thread, the second's
    does not (one let-go thread is alive already): a WARNING says so."""
    caplog.set_level(logging.WARNING, logger="dagexec")
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    released: list[list[str]] = []

    class Watch:
        def on_attempt_release(self, name: object, attempt: int, how: str) -> None:
            released[-1].append(how)

    def workers() -> int:
        return sum(t.name.startswith("dagexec-worker") for t in threading.enumerate())

    before = workers()
    with Executor(workers=1) as ex:
        for _ in range(2):
            released.append([])
            result = within(CALLER, lambda: ex.run(g, on_error="continue", callbacks=[Watch()]))
            assert isinstance(result, dagexec.RunResult) and result.stats.abandoned == 1
        assert workers() - before == 2  # the worker and one replacement, both hung
        warned = " ".join(r.getMessage() for r in caplog.records)
        assert "a new worker thread takes its place" in warned
        assert "no new thread is started" in warned
        # The first let go at its timeout; the second kept its slot to the run's end.
        assert released == [["timed out"], ["abandoned"]]
        gate.set()


# ----------------------------------------------------- 4. bounds across runs
def test_an_abandoned_attempt_keeps_its_resources_for_the_next_run(
    gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """gpu capacity 1: the next run's gpu task starts only once the abandoned attempt
    returned (today it ran beside it), and a WARNING names what it waits for."""
    caplog.set_level(logging.WARNING, logger="dagexec")
    returned = threading.Event()
    g = Graph()
    g.add("hang", hanging(gate, returned), timeout=0.05, resources={"gpu": 1})
    nxt = Graph()

    def gpu_task() -> str:
        assert returned.is_set(), "the gpu was used twice at once"
        return "ok"

    nxt.add("use", gpu_task, resources={"gpu": 1})
    nxt.add("free", lambda: 1)
    with Executor(workers=2, resources={"gpu": 1}) as ex:
        within(CALLER, lambda: ex.run(g, on_error="continue"))
        future = ex.submit(nxt)
        with pytest.raises(TimeoutError):  # it waits for the gpu...
            future.result(timeout=0.2)
        assert any("'hang'" in r.getMessage() and "gpu" in r.getMessage() for r in caplog.records)
        gate.set()  # ...until the attempt returns
        result = future.result(timeout=WAIT)
        assert result["use"] == "ok"
        assert_within_bounds(result)


def test_waiting_for_an_abandoned_attempts_resources_is_bounded_by_the_run_timeout(
    gate: threading.Event,
) -> None:
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05, resources={"gpu": 1})
    nxt = Graph()
    nxt.add("use", lambda: 1, resources={"gpu": 1})
    with Executor(workers=2, resources={"gpu": 1}) as ex:
        within(CALLER, lambda: ex.run(g, on_error="continue"))
        with pytest.raises(TimeoutError, match="timed out after 0.2 s"):
            within(CALLER, lambda: ex.run(nxt, timeout=0.2))
        gate.set()


# -------------------------------------------------------- 5. the run's timeout=
def test_a_run_timeout_during_a_retry_wait_raises_timeout_error() -> None:
    """Nothing runs while 'flaky' waits an hour for its retry: today the run ended
    with RuntimeError("the run ended without an outcome")."""

    def flaky() -> None:
        raise OSError("down")

    g = Graph()
    g.add("flaky", flaky, retries=1, retry_delay=3600)
    for _ in range(3):  # the race it lost was timing-dependent
        with pytest.raises(TimeoutError, match="timed out after"):
            within(CALLER, lambda: dagexec.run(g, timeout=0.1))
        with Executor(workers=1) as ex, pytest.raises(TimeoutError, match="timed out after"):
            future = ex.submit(g, timeout=0.1)
            within(CALLER, future.result)


def test_timeouts_beyond_timeout_max_mean_no_limit() -> None:
    huge = threading.TIMEOUT_MAX * 2
    died: list[BaseException] = []
    old_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            died.append(args.exc_value)

    threading.excepthook = hook
    try:
        g = Graph()
        g.add("t", lambda: 1, timeout=huge)
        assert dagexec.run(g, timeout=huge)["t"] == 1
        with Executor(workers=1) as ex:
            assert ex.submit(g, timeout=huge).result(timeout=WAIT)["t"] == 1
    finally:
        threading.excepthook = old_hook
    assert died == []


# ------------------------------------------- 6. resources held while tasks run
def test_a_task_holding_a_resource_is_not_queued_behind_other_work() -> None:
    """One worker: 'upload' (db 1) goes out only once 'before' has ended, so its db
    slot is never held while it waits in an inbox (today both went out together)."""
    seen: list[tuple[str, object]] = []

    class Watch:
        def on_task_dispatch(self, name: object, worker: int) -> None:
            seen.append(("dispatch", name))

        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            seen.append(("end", name))

    g = Graph()
    g.add("before", lambda: 1)
    g.add("upload", lambda: 2, resources={"db": 1})
    g.add("after", lambda: 3)
    result = dagexec.run(g, workers=1, resources={"db": 1}, callbacks=[Watch()])
    assert seen.index(("end", "before")) < seen.index(("dispatch", "upload"))
    # ...and what needs nothing may still queue behind it.
    assert seen.index(("dispatch", "after")) < seen.index(("end", "upload"))
    assert result.stats.peak_resources == {"db": 1}
    assert_within_bounds(result)


# --------------------------------------------------------- 7. the recorders
def test_the_recorders_stay_exact_with_retries_timeouts_and_abandoned_attempts(
    gate: threading.Event,
) -> None:
    """gpu capacity 1. 'flaky' fails twice, then answers; 'hang' times out on every
    attempt, and its last one is abandoned. Today: peak gpu 3, 'held' 2 after."""
    from dagexec.testing import InFlightRecorder, ResourceRecorder

    def flaky() -> str:
        if current_task().attempt < 3:
            raise OSError("flaky")
        return "ok"

    def hang() -> None:
        me = current_task()
        if me.attempt == 1:
            assert me.cancelled.wait(WAIT)  # returns once timed out: releases in the run
            return
        gate.wait(WAIT)

    g = Graph()
    g.add("flaky", flaky, retries=2, resources={"gpu": 1})
    g.add("hang", hang, retries=1, timeout=0.05, resources={"gpu": 1})
    in_flight, held = InFlightRecorder(), ResourceRecorder(g)
    result = within(
        CALLER,
        lambda: dagexec.run(
            g, workers=2, resources={"gpu": 1}, on_error="continue", callbacks=[in_flight, held]
        ),
    )
    assert isinstance(result, dagexec.RunResult)
    assert result.stats.abandoned == 1 and result["flaky"] == "ok"
    assert held.peak == {"gpu": 1} == result.stats.peak_resources
    assert held.held == {"gpu": 0}
    assert in_flight.in_flight == 0
    assert in_flight.peak == result.stats.peak_in_flight
    assert len(in_flight.dispatched) == 5  # 3 of flaky, 2 of hang


def test_on_attempt_release_says_how_each_attempt_let_go(gate: threading.Event) -> None:
    got: list[tuple[object, int, str]] = []

    class Watch:
        def on_attempt_release(self, name: object, attempt: int, how: str) -> None:
            got.append((name, attempt, how))

    def hang() -> None:
        if current_task().attempt == 1:
            assert current_task().cancelled.wait(WAIT)
            return
        gate.wait(WAIT)

    g = Graph()
    g.add("hang", hang, retries=1, timeout=0.05)
    g.add("ok", lambda: 1)
    within(CALLER, lambda: dagexec.run(g, workers=2, on_error="continue", callbacks=[Watch()]))
    # Each timed-out attempt's worker got a new thread: the run let go of it then.
    assert sorted(got, key=repr) == sorted(
        [("hang", 1, "timed out"), ("hang", 2, "timed out"), ("ok", 1, "returned")], key=repr
    )


def test_the_trace_chrome_export_and_gantt_show_every_attempt(gate: threading.Event) -> None:
    """'hang' times out on attempt 1 (it returns when told), is retried, and its
    attempt 2 times out for good and is abandoned: three bars, each with its number
    and outcome; the timed-out ones drawn, not hidden."""
    from dagexec._observation.chrome import chrome_trace
    from dagexec._observation.gantt import gantt_svg

    def hang() -> None:
        me = current_task()
        if me.attempt == 1:
            assert me.cancelled.wait(WAIT)
            return
        gate.wait(WAIT)

    def flaky() -> int:
        if current_task().attempt == 1:
            raise OSError("once")
        return 1

    g = Graph()
    g.add("hang", hang, retries=1, timeout=0.05)
    g.add("flaky", flaky, retries=1)
    result = within(CALLER, lambda: dagexec.run(g, workers=2, on_error="continue", trace=True))
    assert isinstance(result, dagexec.RunResult)
    got = sorted((r.name, r.attempt, r.outcome) for r in result.trace)
    assert got == [
        ("flaky", 1, "retried"),
        ("flaky", 2, "done"),
        ("hang", 1, "timed out"),
        ("hang", 2, "abandoned"),
    ]
    assert all(r.worker >= 0 and r.ended >= r.started for r in result.trace)
    names = {e["name"] for e in chrome_trace(result)["traceEvents"] if e.get("ph") == "X"}
    assert names == {
        "flaky (attempt 1, retried)",
        "flaky (attempt 2)",
        "hang (attempt 1, timed out)",
        "hang (attempt 2, abandoned)",
    }
    svg = gantt_svg(result, aggregate=False)
    assert "hang (attempt 1, timed out)" in svg and "timed-out" in svg
    assert "hang (attempt 2, abandoned)" in svg


def test_the_recorders_count_each_retry_once() -> None:
    """Retries only (no hang): today a retried task's attempts were each added at
    dispatch and removed once at its end: peak gpu 3 and 'held' 2 after the run."""
    from dagexec.testing import InFlightRecorder, ResourceRecorder

    def flaky() -> str:
        if current_task().attempt < 3:
            raise OSError("flaky")
        return "ok"

    g = Graph()
    g.add("flaky", flaky, retries=2, resources={"gpu": 1})
    in_flight, held = InFlightRecorder(), ResourceRecorder(g)
    result = dagexec.run(g, workers=2, resources={"gpu": 1}, callbacks=[in_flight, held])
    assert held.peak == {"gpu": 1} == result.stats.peak_resources
    assert held.held == {"gpu": 0}
    assert in_flight.peak == 1 == result.stats.peak_in_flight and in_flight.in_flight == 0


# ----------------------------------------------------- meetings with other options
def test_map_items_that_hang_are_abandoned_and_the_rest_of_the_map_runs(
    gate: threading.Event, tmp_path: Path
) -> None:
    """A map with a timeout, a db resource of 2 and a checkpoint: item 1 hangs (and
    keeps its db slot), the others answer on the other; the run returns, the hung
    item is never saved, and a rerun (once it returned) gets every value."""
    ran: list[object] = []

    def item(x: int) -> int:
        ran.append(x)
        if x == 1 and not gate.is_set():
            gate.wait(WAIT)
        return x * 10

    g = Graph()
    g.add("src", lambda: [0, 1, 2])
    g.map("m", item, over="src", timeout=0.05, resources={"db": 1})
    path = tmp_path / "c.sqlite"
    first = within(
        CALLER,
        lambda: dagexec.run(
            g, workers=2, resources={"db": 2}, on_error="continue", checkpoint=path
        ),
    )
    assert isinstance(first, dagexec.RunResult)
    assert isinstance(first.errors[("m", 1)], TaskTimeout)
    assert first.stats.abandoned == 1
    assert first.status[("m", 0)] is TaskState.DONE and first.status[("m", 2)] is TaskState.DONE
    assert_within_bounds(first)
    gate.set()
    second = dagexec.run(g, workers=2, resources={"db": 2}, checkpoint=path)
    assert second["m"] == [0, 10, 20]


def test_a_cleanup_task_after_a_timed_out_task_runs_and_the_caller_returns(
    gate: threading.Event,
) -> None:
    got: list[object] = []
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    # A cleanup task waits for its ancestors' attempts, abandoned ones included, up
    # to its own timeout: then it runs anyway and gets the TaskTimeout.
    g.add(
        "clean",
        lambda h: got.append(type(h).__name__),
        deps=["hang"],
        run_if="all_done",
        timeout=0.1,
    )
    result = within(CALLER, lambda: dagexec.run(g, workers=2, on_error="continue"))
    assert isinstance(result, dagexec.RunResult)
    assert got == ["TaskTimeout"] and result.status["clean"] is TaskState.DONE
    assert result.stats.abandoned == 1


def test_a_cancel_while_an_attempt_overruns_returns_at_once(gate: threading.Event) -> None:
    from concurrent.futures import CancelledError

    started = threading.Event()

    def hang() -> None:
        started.set()
        gate.wait(WAIT)

    g = Graph()
    g.add("hang", hang, timeout=3600)
    with Executor(workers=1) as ex:
        future = ex.submit(g)
        assert started.wait(WAIT)
        assert future.cancel()
        with pytest.raises(CancelledError):
            future.result(timeout=CALLER)
        gate.set()


def test_within_a_run_a_timed_out_attempt_keeps_its_resources_until_it_returns(
    gate: threading.Event,
) -> None:
    """db capacity 1: 'use' waits for the db that the timed-out 'hang' still holds,
    though the run let go of hang's slot and worker."""
    returned = threading.Event()

    def use(_: object) -> str:
        assert returned.is_set(), "the db was used twice at once"
        return "ok"

    g = Graph()
    g.add("hang", hanging(gate, returned), timeout=0.05, resources={"db": 1})
    g.add("use", use, deps=["hang"], run_if="all_done", resources={"db": 1})
    with Executor(workers=2, resources={"db": 1}) as ex:
        future = ex.submit(g, on_error="continue")
        with pytest.raises(TimeoutError):
            future.result(timeout=0.2)
        gate.set()
        result = future.result(timeout=WAIT)
    assert result["use"] == "ok" and result.stats.abandoned == 0
    assert_within_bounds(result)


def test_a_slot_left_to_a_hung_thread_gets_no_work(gate: threading.Event) -> None:
    """Two workers, one task per run, so each lands on slot 0: hangs 1 and 2 get new
    threads, hang 3 may not (two let-go threads alive) and keeps slot 0; the next
    run's task goes to slot 1 instead of waiting behind it forever."""
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    quick = Graph()
    quick.add("q", lambda: "ok")
    with Executor(workers=2) as ex:
        for _ in range(3):
            within(CALLER, lambda: ex.run(g, on_error="continue"))
        result = within(CALLER, lambda: ex.run(quick))
        assert isinstance(result, dagexec.RunResult) and result["q"] == "ok"
        assert result.stats.tasks_per_worker == (0, 1)
        gate.set()


def test_the_attempt_book_says_which_attempts_still_run_and_when_they_return(
    gate: threading.Event,
) -> None:
    """The query cleanup tasks use: attempts of given tasks still running, each with
    an Event set when its function returns."""
    g = Graph()
    g.add("hang", hanging(gate), timeout=0.05)
    g.add("ok", lambda: 1)
    with Executor(workers=2) as ex:
        within(CALLER, lambda: ex.run(g, on_error="continue"))
        book = ex._book
        [attempt] = book.running(["hang", "ok"])
        assert (attempt.name, attempt.number) == ("hang", 1)
        assert book.running(["ok"]) == []
        assert not attempt.wait(0)
        gate.set()
        assert attempt.wait(WAIT)
        assert book.running() == []
