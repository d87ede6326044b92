"""Per-task policy on real threads: retries, timeouts, current_task(), cleanup tasks.

No sleeps: attempts wait on gates and on their own cancellation token; retry
waits run on a fake clock that only the test moves (``dagexec._engine.run.clock.now``).
"""

from __future__ import annotations

import _thread
import random
import threading
from collections.abc import Hashable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dagexec
from dagexec import (
    MISSING,
    Cancelled,
    Executor,
    Graph,
    TaskState,
    TaskTimeout,
    current_task,
)
from dagexec._engine.run import clock as _clock
from dagexec.testing import assert_within_bounds

WAIT = 30.0  # a safety net for gates: a hang fails here, a pass never waits this long


class FakeClock:
    """The driver's timer clock, moved by the test; counts how often it is read."""

    def __init__(self) -> None:
        self.t = 0.0
        self.calls = 0
        self.cond = threading.Condition()

    def __call__(self) -> float:
        with self.cond:
            self.calls += 1
            self.cond.notify_all()
            return self.t

    def read_once_more(self) -> None:
        """Return once the driver has read the clock again (it has caught up)."""
        with self.cond:
            seen = self.calls
            assert self.cond.wait_for(lambda: self.calls > seen, WAIT)

    def set(self, t: float) -> None:
        with self.cond:
            self.t = t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(_clock, "now", fake)
    monkeypatch.setattr(random, "random", lambda: 0.0)  # no jitter: exact waits
    yield fake


# ---------------------------------------------------------------------- retries
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 4), st.integers(0, 4))
def test_a_task_failing_k_times_then_succeeding(k: int, retries: int) -> None:
    calls: list[int] = []

    def flaky(x: int) -> int:
        calls.append(current_task().attempt if retries else 1)
        if len(calls) <= k:
            raise OSError(f"attempt {len(calls)}")
        return x + 1

    g = Graph()
    g.add("x", lambda: 1)
    g.add("flaky", flaky, deps=["x"], retries=retries)
    g.add("after", lambda v: v * 10, deps=["flaky"])
    with Executor(workers=2) as ex:
        if k <= retries:
            result = ex.run(g)
            assert result["after"] == 20
            assert result.stats.retries == k
            assert result.status["flaky"] is TaskState.DONE
        else:
            with pytest.raises(OSError, match=f"attempt {retries + 1}") as info:
                ex.run(g)
            notes = getattr(info.value, "__notes__", [])
            assert any("raised by task 'flaky'" in n for n in notes)
            if retries:
                assert any(f"attempt {retries + 1} (retries={retries})" in n for n in notes)
    assert calls == (list(range(1, min(k, retries) + 2)) if retries else [1])


def test_backoff_waits_on_the_clock(clock: FakeClock) -> None:
    """Attempts start at 0, then 10 (retry_delay), then 10 + 20 (doubled)."""
    seen: list[float] = []
    failed = [threading.Event(), threading.Event()]

    def flaky() -> str:
        attempt = current_task().attempt
        seen.append(clock.t)
        if attempt <= 2:
            failed[attempt - 1].set()
            raise OSError(attempt)
        return "ok"

    g = Graph()
    g.add("flaky", flaky, retries=2, retry_delay=10.0)
    box: list[dagexec.RunResult] = []
    with Executor(workers=1) as ex:
        runner = threading.Thread(target=lambda: box.append(ex.run(g)))
        runner.start()
        for attempt, due in ((1, 10.0), (2, 30.0)):
            assert failed[attempt - 1].wait(WAIT)
            clock.read_once_more()  # the driver has taken the failure's time
            clock.set(due - 0.001)  # not yet: a retry now would see this time
            clock.read_once_more()
            clock.set(due)
        runner.join(WAIT)
    assert seen == [0.0, 10.0, 30.0]
    assert box[0]["flaky"] == "ok"
    assert box[0].stats.retries == 2


def test_a_task_waiting_for_its_retry_holds_no_slot(clock: FakeClock) -> None:
    """max_in_flight=1: 'other' runs while 'flaky' waits for its retry."""
    failed = threading.Event()
    order: list[str] = []

    def flaky() -> str:
        order.append(f"flaky {current_task().attempt}")
        if current_task().attempt == 1:
            failed.set()
            raise OSError("once")
        return "ok"

    def other() -> str:
        assert failed.wait(WAIT)  # flaky failed: it waits for its retry now
        order.append(f"other at {clock.t}")
        return "other"

    g = Graph()
    g.add("flaky", flaky, retries=1, retry_delay=10.0, priority=1, resources={"gpu": 1})
    g.add("other", other, resources={"gpu": 1})
    box: list[dagexec.RunResult] = []
    with Executor(workers=1, max_in_flight=1) as ex:
        runner = threading.Thread(target=lambda: box.append(ex.run(g, resources={"gpu": 1})))
        runner.start()
        assert failed.wait(WAIT)
        clock.read_once_more()
        while len(order) < 2 and runner.is_alive():  # 'other' runs at fake time 0
            clock.read_once_more()
        clock.set(100.0)
        runner.join(WAIT)
    assert order == ["flaky 1", "other at 0.0", "flaky 2"]
    assert box[0].stats.peak_in_flight == 1
    assert box[0].stats.peak_resources == {"gpu": 1}


def test_only_retry_on_is_retried() -> None:
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        raise ValueError("not retried")

    g = Graph()
    g.add("bad", bad, retries=3, retry_on=(OSError, TimeoutError))
    result = dagexec.run(g, on_error="continue")
    assert calls == [1]
    assert result.stats.retries == 0
    assert isinstance(result.errors["bad"], ValueError)


def test_callbacks_see_each_attempt_and_one_end() -> None:
    events: list[tuple[str, Hashable]] = []

    class Watch:
        def on_task_dispatch(self, name: Hashable, worker: int) -> None:
            events.append(("dispatch", name))

        def on_task_start(self, name: Hashable, worker: int) -> None:
            events.append(("start", name))

        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            events.append(("end", state.value))

    def flaky() -> int:
        if current_task().attempt < 3:
            raise OSError("again")
        return 3

    g = Graph()
    g.add("f", flaky, retries=2)
    result = dagexec.run(g, callbacks=[Watch()], trace=True)
    assert events == [("dispatch", "f"), ("start", "f")] * 3 + [("end", "done")]
    # Every attempt is in the trace (issue 19), with how it ended.
    assert [(r.name, r.attempt, r.outcome) for r in result.trace] == [
        ("f", 1, "retried"),
        ("f", 2, "retried"),
        ("f", 3, "done"),
    ]


# ---------------------------------------------------------------------- timeouts
@pytest.mark.parametrize(("workers", "max_in_flight"), [(2, 1), (2, 2), (1, 2)])
def test_a_timed_out_attempt_is_retried_and_its_late_value_never_leaks(
    workers: int, max_in_flight: int
) -> None:
    """Attempt 1 hangs until its token is set; attempt 2 answers. With one slot,
    attempt 2 waits for attempt 1's thread to return: the bound stays honest. With
    one worker, attempt 2 queues behind attempt 1 and its report comes second."""
    saw_cancel = threading.Event()

    def slow() -> str:
        me = current_task()
        if me.attempt == 1:
            assert me.cancelled.wait(WAIT)  # set when the timeout passes
            saw_cancel.set()
            return "late"
        return "fresh"

    g = Graph()
    g.add("slow", slow, timeout=0.05, retries=1)
    g.add("use", lambda v: v.upper(), deps=["slow"])
    result = dagexec.run(g, workers=workers, max_in_flight=max_in_flight)
    # Once its worker has a new thread the run does not wait for attempt 1, whose
    # thread may not have run since its token was set: it sees the cancel, later.
    assert saw_cancel.wait(WAIT)
    assert result["use"] == "FRESH"
    assert result.stats.retries == 1
    # The run let go of the timed-out attempt when its worker got a new thread.
    assert result.stats.peak_in_flight == 1


def test_a_timed_out_attempt_keeps_its_resources_until_it_returns() -> None:
    """gpu capacity 1: the retry cannot start before the stuck attempt let go."""
    returned = threading.Event()

    def gpu_task() -> str:
        me = current_task()
        if me.attempt == 1:
            assert me.cancelled.wait(WAIT)
            returned.set()
            return "late"
        assert returned.is_set(), "the retry ran while the stuck attempt held the gpu"
        return "fresh"

    g = Graph()
    g.add("t", gpu_task, timeout=0.05, retries=1, resources={"gpu": 1})
    result = dagexec.run(g, workers=2, resources={"gpu": 1})
    assert result["t"] == "fresh"
    assert result.stats.peak_resources == {"gpu": 1}
    assert result.stats.peak_in_flight == 1  # the retry waited for the resource
    assert_within_bounds(result)


def test_a_timeout_without_retries_fails_with_task_timeout() -> None:
    def hang() -> None:
        current_task().cancelled.wait(WAIT)
        current_task().check()  # raises Cancelled: discarded, the timeout is the error

    g = Graph()
    g.add("hang", hang, timeout=0.05)
    with pytest.raises(TaskTimeout) as info:
        dagexec.run(g)
    assert isinstance(info.value, TimeoutError)
    assert info.value.task == "hang" and info.value.timeout == 0.05
    assert "'hang'" in str(info.value) and "timeout=0.05" in str(info.value)


# ------------------------------------------------------------------ current_task
def test_current_task_fields_and_check() -> None:
    seen: list[tuple[Hashable, int, bool]] = []

    def task() -> str:
        me = current_task()
        seen.append((me.name, me.attempt, me.cancelled.is_set()))
        me.check()  # not set: returns
        if me.attempt == 1:
            me.cancelled.set()
            with pytest.raises(Cancelled, match="'t'.*attempt 1"):
                me.check()
            raise OSError("retry me")
        return "ok"

    g = Graph()
    g.add("t", task, retries=1)
    assert dagexec.run(g)["t"] == "ok"
    assert seen == [("t", 1, False), ("t", 2, False)]  # each attempt has its own token


def test_current_task_outside_a_task_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="only available inside a task"):
        current_task()
    # ...and on a worker thread between tasks, too: a thread started by a task is
    # not running that task.
    seen: list[str] = []

    def spawn() -> None:
        def off_worker() -> None:
            try:
                current_task()
            except RuntimeError:
                seen.append("refused")

        t = threading.Thread(target=off_worker)
        t.start()
        t.join()

    g = Graph()
    g.add("spawn", spawn)
    dagexec.run(g, workers=1)
    assert seen == ["refused"]


def test_current_task_in_plain_tasks_chains_and_map_items() -> None:
    """No policy: the name, attempt 1, and the run's stop flag as the token.

    src --> (chain) a --> b          src --> map m over src: ("m", 0), ("m", 1)
    """

    def me(*_: object) -> tuple[object, int, bool]:
        task = current_task()
        return task.name, task.attempt, task.cancelled.is_set()

    g = Graph()
    g.add("src", lambda: [10, 20])
    g.add("a", me, deps=["src"])
    g.add("b", me, deps=["a"])  # a -> b is a fused chain
    g.map("m", lambda x: me(), over="src")
    result = dagexec.run(g, targets=["b", "m"], workers=2)
    assert result["b"] == ("b", 1, False)
    assert result["m"] == [(("m", 0), 1, False), (("m", 1), 1, False)]


def test_a_stop_sets_a_plain_tasks_token() -> None:
    """'bad' fails (on_error="raise") while 'loop' runs: loop's token is set."""
    gate = threading.Event()
    saw: list[bool] = []

    def loop() -> None:
        gate.set()
        saw.append(current_task().cancelled.wait(WAIT))

    def bad() -> None:
        assert gate.wait(WAIT)
        raise ValueError("bad")

    g = Graph()
    g.add("loop", loop)
    g.add("bad", bad)
    with pytest.raises(ValueError, match="bad"):
        dagexec.run(g, workers=2)
    assert saw == [True]


def test_a_failure_sets_the_tokens_of_running_attempts() -> None:
    """on_error="raise": 'bad' fails while 'loop' runs; loop's token is set, it
    stops cooperatively and ends CANCELLED; the caller gets bad's error."""
    looping = threading.Event()

    def loop() -> None:
        me = current_task()
        looping.set()
        assert me.cancelled.wait(WAIT)
        me.check()

    def bad() -> None:
        assert looping.wait(WAIT)
        raise ValueError("bad")

    g = Graph()
    g.add("loop", loop, timeout=3600)
    g.add("bad", bad)
    statuses: list[dagexec.RunResult] = []

    class Keep:
        def on_run_end(self, result: dagexec.RunResult) -> None:
            statuses.append(result)

    with pytest.raises(ValueError, match="bad"):
        dagexec.run(g, workers=2, callbacks=[Keep()])
    assert statuses[0].status["loop"] is TaskState.CANCELLED
    assert statuses[0].status["bad"] is TaskState.FAILED


def test_ctrl_c_sets_the_tokens_of_running_attempts() -> None:
    token_set = threading.Event()

    def task() -> None:
        me = current_task()
        _thread.interrupt_main()
        if me.cancelled.wait(WAIT):
            token_set.set()

    g = Graph()
    g.add("t", task, retries=1)
    with pytest.raises(KeyboardInterrupt):
        dagexec.run(g)
    assert token_set.wait(WAIT)


def test_a_deadline_of_an_attempt_that_ended_does_not_hold_the_run() -> None:
    g = Graph()
    g.add("quick", lambda: 1, timeout=3600)
    g.add("after", lambda q: q + 1, deps=["quick"], timeout=3600)
    result = dagexec.run(g)  # would wait an hour if a deadline kept the run alive
    assert result["after"] == 2


# ----------------------------------------------------------------- cleanup tasks
def cleanup_graph(got: list[tuple[object, ...]]) -> Graph:
    """ok, bad (raises), after (needs bad), clean (all_done on all three)."""

    def bad() -> None:
        raise ValueError("boom")

    g = Graph()
    g.add("ok", lambda: 1)
    g.add("bad", bad)
    g.add("after", lambda x: x, deps=["bad"])
    g.add(
        "clean",
        lambda *a: got.append(a) or "cleaned",
        deps=["ok", "bad", "after"],
        run_if="all_done",
    )
    return g


def test_a_cleanup_task_runs_after_a_failure_with_on_error_raise() -> None:
    got: list[tuple[object, ...]] = []
    with pytest.raises(ValueError, match="boom"):  # still the original error
        dagexec.run(cleanup_graph(got), workers=2)
    assert len(got) == 1
    ok, bad, after = got[0]
    assert ok in (1, MISSING)  # 'ok' may have been cancelled by the stop
    assert isinstance(bad, ValueError) and str(bad) == "boom"
    assert after is MISSING  # cancelled by the stop


def test_a_cleanup_task_runs_after_a_failure_with_on_error_continue() -> None:
    got: list[tuple[object, ...]] = []
    result = dagexec.run(cleanup_graph(got), workers=2, on_error="continue")
    assert len(got) == 1
    assert got[0][0] == 1 and isinstance(got[0][1], ValueError) and got[0][2] is MISSING
    assert result.status["after"] is TaskState.SKIPPED
    assert result.status["clean"] is TaskState.DONE
    assert result["clean"] == "cleaned"


def test_a_cleanup_task_is_never_fused_into_a_chain() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    g.add("clean", lambda a: a, deps=["a"], run_if="all_done")
    g.add("z", lambda c: c, deps=["clean"])
    plan = dagexec._core.plan.plan_run(g._compile(), None)
    assert plan.chain_next == (-1, -1, -1)
    assert dagexec.run(g)["z"] == 1


def test_run_if_is_checked() -> None:
    g = Graph()
    with pytest.raises(ValueError, match="run_if must be 'all_success'.*'always'"):
        g.add("x", lambda: 1, run_if="always")
    with pytest.raises(TypeError, match="run_if must be a str"):
        g.add("x", lambda: 1, run_if=True)
    with pytest.raises(ValueError, match="retries must be >= 0"):
        g.add("y", lambda: 1, retries=-1)
    with pytest.raises(ValueError, match="KeyboardInterrupt"):
        g.add("y", lambda: 1, retries=1, retry_on=KeyboardInterrupt)
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        g.add("y", lambda: 1, timeout=0)
    assert "y" not in g


def test_the_first_ctrl_c_runs_cleanup_tasks_before_raising() -> None:
    # Issue 19: cleanup tasks used to be cancelled by Ctrl-C, exactly when they
    # matter; now the caller stays in the run while they run, then raises.
    ran: list[str] = []

    def interrupted() -> None:
        _thread.interrupt_main()
        assert current_task().cancelled.wait(WAIT)  # returns once the run aborted

    g = Graph()
    g.add("x", interrupted, timeout=3600)
    g.add("clean", lambda x: ran.append("clean"), deps=["x"], run_if="all_done")
    with pytest.raises(KeyboardInterrupt):
        dagexec.run(g)
    assert ran == ["clean"]  # before the caller raised


# --------------------------------------------------------- retries x resources x map
def test_retries_with_resources_on_a_map() -> None:
    attempts: dict[Hashable, int] = {}
    lock = threading.Lock()

    def item(x: int) -> int:
        me = current_task()
        with lock:
            attempts[me.name] = me.attempt
        if me.attempt == 1:
            raise OSError(f"first attempt of {me.name}")
        return x * x

    g = Graph()
    g.add("xs", lambda: list(range(8)))
    g.map("sq", item, over="xs", retries=1, resources={"gpu": 1})
    g.add("total", sum, deps=["sq"])
    result = dagexec.run(g, workers=3, resources={"gpu": 2})
    assert result["total"] == sum(x * x for x in range(8))
    assert result.stats.retries == 8
    assert result.stats.tasks_run == 1 + 16 + 1  # xs, two attempts per item, total
    assert_within_bounds(result)
    assert attempts == {("sq", i): 2 for i in range(8)}
    assert result.stats.peak_resources == {"gpu": 2}


def test_readme_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "graphs.md").read_text("utf-8")
    section = page[page.index("## Retries, timeouts and cleanup tasks") :]
    block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    exec(compile(block, "docs/graphs.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1, 2, 3] 2"
    assert out[1].startswith("data='data' parsed=ValueError(\"invalid literal for int() with")
