"""Stopping a run in awkward places: every thread ends, nothing is lost or pinned.

Each test here pins a defect found in review (a hang, a lost exception, a value
kept alive); the scheduler is held inside a callback with a gate, never a sleep.
"""

from __future__ import annotations

import _thread
import gc
import threading
import weakref
from collections.abc import Hashable

import pytest

import dagexec
from dagexec import TaskState
from dagexec._engine.run.scheduler import Run
from dagexec.testing import Gate, run_in_thread


class Big:
    """A value whose lifetime the tests watch through a weak reference."""


class HoldScheduler(dagexec.Callback):
    """Interrupts the caller when task 'a' starts, then keeps the scheduler thread
    busy in this callback until ``release`` is set: longer than the caller waits
    for queued tasks to be cancelled."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_task_start(self, name: Hashable, worker: int) -> None:
        if name == "a":
            _thread.interrupt_main()
            assert self.release.wait(10)


def test_next_run_waits_for_an_interrupted_run_whose_scheduler_is_busy() -> None:
    hold = HoldScheduler()
    g1 = dagexec.Graph()
    g1.add("a", lambda: "a")
    g1.add("x", lambda a: a, deps=["a"])
    g2 = dagexec.Graph()
    for name in "bcd":
        g2.add(name, lambda name=name: name)
    with dagexec.Executor(workers=1, queue_cap=2) as ex:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g1, callbacks=[hold])
        second = run_in_thread(ex.run, g2)
        hold.release.set()  # the old scheduler now sees its abort and finishes
        assert dict(second.result(timeout=30)) == {"b": "b", "c": "c", "d": "d"}


def test_shutdown_after_interrupt_never_strands_a_worker() -> None:
    """dagexec.run shuts its executor down while the interrupted scheduler is still
    busy, so STOP lands behind a queued task; when the scheduler drains that task
    it must keep the STOP, or the worker waits in its inbox forever."""
    hold = HoldScheduler()
    gate = Gate()
    ran: list[str] = []
    g = dagexec.Graph()
    g.add("a", gate.gated(lambda: "a"))
    g.add("b", lambda: ran.append("b"))
    with pytest.raises(KeyboardInterrupt):
        dagexec.run(g, workers=1, queue_cap=2, callbacks=[hold])
    hold.release.set()
    gate.open()
    assert ran == []  # b was queued, then taken back
    # The autouse fixture checks that the worker and the scheduler both exit.


def _runs_alive(besides: tuple[Run, ...] | list[Run] = ()) -> list[Run]:
    """Runs still in memory, other than ``besides``.

    Only this test's own run is in question: an earlier test's run may still be
    held by that test's leftovers until a later collection (seen on 3.13t).
    """
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Run) and all(o is not b for b in besides)]


def test_a_callback_error_does_not_keep_the_run_alive() -> None:
    class Raises:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            raise RuntimeError("callback")

    g = dagexec.Graph()
    g.add("a", Big)
    earlier = _runs_alive()
    with pytest.raises(RuntimeError) as info:
        dagexec.run(g, callbacks=[Raises()], workers=1)
    gc.collect()
    assert info.value is not None  # the error is still held...
    assert _runs_alive(besides=earlier) == []  # ...the run is not


def test_a_callback_written_in_c_does_not_keep_the_run_alive() -> None:
    """A C hook has no frame of its own: the traceback ends in the scheduler's."""

    class CHook:
        on_task_end = staticmethod(abs)  # abs(name, state, seconds): TypeError

    g = dagexec.Graph()
    g.add("a", Big)
    earlier = _runs_alive()
    with pytest.raises(TypeError) as info:
        dagexec.run(g, callbacks=[CHook()], workers=1)
    gc.collect()
    assert info.value is not None
    assert _runs_alive(besides=earlier) == []


def test_a_failing_chain_member_does_not_pin_the_value_before_it() -> None:
    seen: list[weakref.ref[Big]] = []

    def make() -> Big:
        big = Big()
        seen.append(weakref.ref(big))
        return big

    def fail(big: Big) -> None:
        del big  # the task's own frame would hold its argument; dagexec's must not
        raise ValueError("member fails")

    g = dagexec.Graph()
    g.add("make", make)
    g.add("fail", fail, deps=["make"])  # make -> fail: one unit
    with pytest.raises(ValueError) as info:
        dagexec.run(g, workers=1)
    assert info.value.__traceback__ is not None  # held, with its frames
    assert seen[0]() is None


def test_a_skipped_consumer_releases_its_inputs_during_the_run() -> None:
    """One task at a time: v, then bad (fails, so c is skipped), then check."""
    alive: list[bool] = []
    refs: list[weakref.ref[Big]] = []

    def v() -> Big:
        big = Big()
        refs.append(weakref.ref(big))
        return big

    g = dagexec.Graph()
    g.add("v", v)
    g.add("bad", lambda: 1 / 0)
    g.add("c", lambda big, b: None, deps=["v", "bad"])
    g.add("check", lambda: alive.append(refs[0]() is not None))
    result = dagexec.run(g, workers=1, queue_cap=1, max_in_flight=1, on_error="continue")
    assert result.status["c"] is TaskState.SKIPPED
    assert alive == [False]


def test_a_fatal_exception_outranks_an_earlier_ordinary_one() -> None:
    """'ordinary' fails first (once 'fatal' is running); 'fatal' raises SystemExit
    only after that failure was handled. The caller must get the SystemExit."""
    go, running = threading.Event(), threading.Event()

    class OpenOnFailure:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            if name == "ordinary":
                go.set()

    def fatal() -> None:
        running.set()
        assert go.wait(10)
        raise SystemExit(3)

    def ordinary() -> None:
        assert running.wait(10)
        raise ZeroDivisionError("ordinary")

    g = dagexec.Graph()
    g.add("fatal", fatal)
    g.add("ordinary", ordinary)
    with pytest.raises(SystemExit) as info:
        dagexec.run(g, workers=2, callbacks=[OpenOnFailure()])
    assert info.value.code == 3


def test_the_failing_task_ends_before_the_tasks_its_failure_cancels() -> None:
    order: list[tuple[Hashable, TaskState]] = []

    class Order:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            order.append((name, state))

    g = dagexec.Graph()
    g.add("boom", lambda: 1 / 0)
    for i in range(5):
        g.add(i, lambda b: b, deps=["boom"])
    with pytest.raises(ZeroDivisionError):
        dagexec.run(g, workers=1, callbacks=[Order()])
    assert order[0] == ("boom", TaskState.FAILED)
    assert {state for _, state in order[1:]} == {TaskState.CANCELLED}


def test_running_on_the_same_executor_from_inside_a_task_is_refused() -> None:
    inner = dagexec.Graph()
    inner.add("i", lambda: 1)
    with dagexec.Executor(workers=2) as ex:
        outer = dagexec.Graph()
        outer.add("o", lambda: ex.run(inner))
        with pytest.raises(RuntimeError, match="own tasks or callbacks") as info:
            ex.run(outer)
        assert "dagexec: raised by task 'o'" in info.value.__notes__
        assert dict(ex.run(inner)) == {"i": 1}  # still usable
