"""Executor.submit and RunFuture, cancel from another thread, run(timeout=)."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import pytest

import dagexec
from dagexec.testing import Gate

# Only bounds a wait that must end long before it (a failure, not a sync point).
_PROMPT = 5.0


def _gated_graph(gate: Gate, ran: list[str]) -> dagexec.Graph:
    """'held' waits at the gate; 'q0'..'q19' are independent and queue behind it."""
    g = dagexec.Graph()

    def held() -> str:
        ran.append("held")
        gate.wait()
        return "held"

    g.add("held", held)
    for i in range(20):
        g.add(f"q{i}", lambda i=i: ran.append(f"q{i}") or i)
    return g


def test_submit_returns_a_future_with_the_run_result() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: 2)
    g.add("b", lambda a: a * 10, deps=["a"])
    seen: list[dagexec.RunFuture] = []
    with dagexec.Executor(2) as ex:
        future = ex.submit(g)
        assert isinstance(future, dagexec.RunFuture)
        future.add_done_callback(seen.append)
        result = future.result()
        assert result["b"] == 20
        assert future.done() and not future.cancelled() and not future.running()
        assert future.exception() is None
        assert not future.cancel()  # finished: too late
        assert not future.cancelled()
        late: list[dagexec.RunFuture] = []
        future.add_done_callback(late.append)  # done already: called at once
        assert late == [future]
    assert seen == [future]


def test_a_task_error_comes_from_result_and_exception() -> None:
    g = dagexec.Graph()

    def bad() -> None:
        raise KeyError("boom")

    g.add("bad", bad)
    with dagexec.Executor(1) as ex:
        future = ex.submit(g)
        with pytest.raises(KeyError):
            future.result()
        assert isinstance(future.exception(), KeyError)
        continued = ex.submit(g, on_error="continue").result()
        assert isinstance(continued.errors["bad"], KeyError)


def test_submits_run_one_after_another_in_order() -> None:
    gate = Gate()
    ran: list[str] = []
    first = _gated_graph(gate, ran)
    second = dagexec.Graph()
    second.add("second", lambda: ran.append("second") or "s")
    with dagexec.Executor(2, queue_cap=1) as ex:
        f1 = ex.submit(first)
        assert gate.wait_for_waiting(1)
        f2 = ex.submit(second)
        assert f1.running()
        assert not f2.running() and not f2.done()  # queued behind the first
        assert "second" not in ran
        gate.open()
        assert f2.result()["second"] == "s"
        assert f1.done()
        assert ran.index("second") > max(ran.index(f"q{i}") for i in range(20))


def test_cancel_from_another_thread_is_prompt_and_the_executor_reusable() -> None:
    gate = Gate()
    ran: list[str] = []
    g = _gated_graph(gate, ran)
    with dagexec.Executor(1, queue_cap=2) as ex:
        future = ex.submit(g)
        assert gate.wait_for_waiting(1)  # 'held' runs, some q's are queued
        answers: list[bool] = []
        canceller = threading.Thread(target=lambda: answers.append(future.cancel()))
        canceller.start()
        canceller.join(_PROMPT)
        assert answers == [True]
        # Prompt: the run is done (cancelled) while its task still runs.
        assert future.done() and future.cancelled()
        assert gate.waiting == 1
        with pytest.raises(CancelledError):
            future.result(timeout=_PROMPT)
        with pytest.raises(CancelledError):
            future.exception()
        # Reusable at once: the next run is queued now, starts once 'held' returns.
        after = dagexec.Graph()
        after.add("x", lambda: "x")
        nxt = ex.submit(after)
        gate.open()
        assert nxt.result()["x"] == "x"
    # Nothing beyond what was handed out (at most the effective cap, 3) started.
    assert ran[0] == "held" and len(ran) <= ex.effective_cap


def test_cancel_before_start_never_runs_it() -> None:
    gate = Gate()
    ran: list[str] = []
    called: list[bool] = []
    g = _gated_graph(gate, ran)
    other = dagexec.Graph()
    other.add("never", lambda: ran.append("never"))
    with dagexec.Executor(1) as ex:
        first = ex.submit(g)
        assert gate.wait_for_waiting(1)
        pending = ex.submit(other)
        pending.add_done_callback(lambda f: called.append(f.cancelled()))
        assert pending.cancel()
        assert pending.cancel()  # again: still cancelled, still True
        assert called == [True]
        gate.open()
        first.result()
        with pytest.raises(CancelledError):
            pending.result()
    assert "never" not in ran


def test_submit_checks_every_option_before_queueing() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with dagexec.Executor(1) as ex:
        with pytest.raises(TypeError, match="unknown run options"):
            ex.submit(g, workers=2)
        with pytest.raises(ValueError, match="on_error"):
            ex.submit(g, on_error="ignore")
        with pytest.raises(ValueError, match="timeout"):
            ex.submit(g, timeout=0)
        with pytest.raises(ValueError, match="timeout"):
            ex.submit(g, timeout=float("nan"))
        with pytest.raises(TypeError, match="checkpoint"):
            ex.submit(g, checkpoint=3)
        with pytest.raises(dagexec.UnknownTargetError):
            ex.submit(g, ["nope"])
        assert ex.submit(g).result()["a"] == 1
        assert ex.submit(g, timeout=float("inf")).result()["a"] == 1  # no limit
    with pytest.raises(RuntimeError, match="shut down"):
        ex.submit(g)


def test_shutdown_runs_submitted_runs_unless_cancel_futures() -> None:
    gate = Gate()
    ran: list[str] = []
    g = _gated_graph(gate, ran)
    later = dagexec.Graph()
    later.add("later", lambda: ran.append("later") or 1)
    ex = dagexec.Executor(1)
    first = ex.submit(g)
    assert gate.wait_for_waiting(1)
    second = ex.submit(later)
    ex.shutdown(wait=False)
    gate.open()
    assert second.result()["later"] == 1
    assert first.done()
    ex.shutdown()  # joins every thread

    gate2 = Gate()
    ex = dagexec.Executor(1)
    first = ex.submit(_gated_graph(gate2, []))
    assert gate2.wait_for_waiting(1)
    dropped = ex.submit(later)
    ex.shutdown(wait=False, cancel_futures=True)
    assert dropped.cancelled()
    assert not first.cancelled()  # the one running finishes
    gate2.open()
    first.result()
    ex.shutdown()
    assert ran.count("later") == 1


def test_a_dropped_future_and_executor_leave_no_thread() -> None:
    gate = Gate()
    ran: list[str] = []
    ex = dagexec.Executor(2)
    ex.submit(_gated_graph(gate, ran))
    del ex  # the queued run keeps the executor (and its workers) until it ends
    assert gate.wait_for_waiting(1)
    gate.open()
    # The autouse fixture waits for every thread to exit.


def test_run_timeout_stops_the_run_and_names_the_count() -> None:
    gate = Gate()
    ran: list[str] = []
    g = dagexec.Graph()
    g.add("quick", lambda: ran.append("quick") or 1)
    g.add("held", lambda quick: (gate.wait(), ran.append("held")), deps=["quick"])
    g.add("after", lambda held: ran.append("after"), deps=["held"])
    with dagexec.Executor(1) as ex:
        with pytest.raises(TimeoutError, match=r"timed out after 0\.2 s with 1 of 3 tasks"):
            # quick is a target, so it comes back on its own before 'held' starts.
            ex.run(g, ["quick", "after"], timeout=0.2)
        assert gate.waiting == 1  # still running: a thread cannot be killed
        gate.open()
        assert ex.run(g, ["quick"], timeout=_PROMPT)["quick"] == 1
    assert "after" not in ran


def test_submit_timeout_fails_the_future_with_timeout_error() -> None:
    gate = Gate()
    g = _gated_graph(gate, [])
    with dagexec.Executor(1) as ex:
        future = ex.submit(g, timeout=0.1)
        with pytest.raises(TimeoutError, match="timed out"):
            future.result(timeout=_PROMPT)
        assert future.done() and not future.cancelled()
        gate.open()
        # A run that ends in time cancels its timer thread (the fixture checks).
        assert ex.submit(g, timeout=_PROMPT).result()["held"] == "held"


def test_module_run_timeout() -> None:
    gate = Gate()
    g = _gated_graph(gate, [])
    with pytest.raises(TimeoutError):
        dagexec.run(g, workers=1, timeout=0.05)
    gate.open()


def test_result_timeout_does_not_cancel_the_run() -> None:
    gate = Gate()
    g = _gated_graph(gate, [])
    with dagexec.Executor(1) as ex:
        future = ex.submit(g)
        assert gate.wait_for_waiting(1)
        with pytest.raises(TimeoutError):
            future.result(timeout=0.01)
        assert not future.done()
        gate.open()
        assert future.result()["held"] == "held"


def test_waiting_on_a_future_from_its_own_executor_is_refused() -> None:
    outer = dagexec.Graph()
    inner = dagexec.Graph()
    inner.add("x", lambda: 1)
    seen: list[BaseException] = []
    with dagexec.Executor(1) as ex:

        def task() -> None:
            future = ex.submit(inner)
            try:
                future.result()
            except RuntimeError as exc:
                seen.append(exc)

        outer.add("t", task)
        ex.run(outer)
    assert len(seen) == 1 and "forever" in str(seen[0])
