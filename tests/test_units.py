"""Linear runs of tasks are dispatched as one unit; they must behave like tasks.

c0 -> c1 -> c2 -> ... -> c99      (each the only consumer of the one before)
"""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable, Hashable

import pytest

import dagexec
from dagexec import TaskState
from dagexec.testing import Gate, InFlightRecorder, assert_within_bounds, run_in_thread


def chain(n: int, ran: list[int], first: Callable[[], object] | None = None) -> dagexec.Graph:
    lock = threading.Lock()

    def step(i: int) -> Callable[..., object]:
        def task(*prev: object) -> object:
            with lock:
                ran.append(i)
            return i

        return task

    g = dagexec.Graph()
    g.add("c0", first or step(0))
    for i in range(1, n):
        g.add(f"c{i}", step(i), deps=[f"c{i - 1}"])
    return g


class Ends(dagexec.Callback):
    def __init__(self, on_end: Callable[[Hashable, TaskState], None] | None = None) -> None:
        self.ends: list[tuple[Hashable, TaskState]] = []
        self.dispatched: list[Hashable] = []
        self.on_end = on_end

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        self.dispatched.append(name)

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.ends.append((name, state))
        if self.on_end:
            self.on_end(name, state)


def test_a_chain_is_one_dispatch_but_every_member_ends_in_order() -> None:
    ran: list[int] = []
    ends = Ends()
    result = dagexec.run(chain(100, ran), callbacks=[ends], trace=True, workers=2)
    assert result["c99"] == 99
    assert ran == list(range(100))
    assert ends.dispatched == ["c0"]  # one unit, one in-flight slot
    assert ends.ends == [(f"c{i}", TaskState.DONE) for i in range(100)]
    assert result.stats.tasks_run == 100 and result.stats.peak_in_flight == 1
    assert [r.name for r in result.trace] == [f"c{i}" for i in range(100)]
    for before, after in zip(result.trace, result.trace[1:], strict=False):
        assert after.ready >= before.ready and after.started >= before.ended
        assert after.started >= after.dispatched >= after.ready
    assert_within_bounds(result)


def test_a_target_inside_a_chain_keeps_its_value() -> None:
    ran: list[int] = []
    result = dagexec.run(chain(10, ran), targets=["c4", "c9"], workers=2)
    assert dict(result) == {"c4": 4, "c9": 9}


@pytest.mark.parametrize("on_error", ["raise", "continue"])
def test_failure_inside_a_chain(on_error: str) -> None:
    ran: list[int] = []
    g = chain(5, ran)
    g.add("boom", lambda x: 1 / 0, deps=["c4"])
    for i in range(5, 10):
        g.add(f"c{i}", lambda x, i=i: ran.append(i), deps=["boom" if i == 5 else f"c{i - 1}"])
    if on_error == "raise":
        with pytest.raises(ZeroDivisionError) as info:
            dagexec.run(g, workers=2)
        assert "dagexec: raised by task 'boom'" in info.value.__notes__
    else:
        result = dagexec.run(g, workers=2, on_error="continue")
        assert result.status["boom"] is TaskState.FAILED
        assert [result.status[f"c{i}"] for i in range(10)] == [TaskState.DONE] * 5 + [
            TaskState.SKIPPED
        ] * 5
    assert ran == [0, 1, 2, 3, 4]


def test_a_failure_elsewhere_stops_a_running_chain_between_members() -> None:
    """'bad' fails while c0 is held at a gate. The gate opens from the end of a task
    that the stop cancels, which the scheduler reports after setting the stop flag,
    so the unit must stop right after c0: c1.. never run."""
    gate = Gate()
    ran: list[int] = []
    g = chain(50, ran, first=gate.gated(lambda: 0))

    def bad() -> None:
        assert gate.wait_for_waiting(1)  # c0 is running (held at the gate) first
        raise ZeroDivisionError("bad")

    g.add("bad", bad)
    g.add("after_bad", lambda b: b, deps=["bad"])
    ends = Ends(on_end=lambda name, state: gate.open() if name == "after_bad" else None)
    with pytest.raises(ZeroDivisionError):
        dagexec.run(g, workers=2, callbacks=[ends])
    assert ran == []  # c0 ran through the gate wrapper, not step(0)
    states = dict(ends.ends)
    assert states["bad"] is TaskState.FAILED and states["after_bad"] is TaskState.CANCELLED
    assert states["c0"] is TaskState.DONE
    assert all(states[f"c{i}"] is TaskState.CANCELLED for i in range(1, 50))


def test_ctrl_c_stops_a_running_chain_between_members() -> None:
    gate = Gate()
    ran: list[int] = []

    def first() -> int:
        _thread.interrupt_main()
        gate.wait()
        return 0

    g = chain(50, ran, first=first)
    recorder = InFlightRecorder()
    try:
        with pytest.raises(KeyboardInterrupt):
            dagexec.run(g, workers=2, callbacks=[recorder])
    finally:
        gate.open()
    # The autouse leak check joins the worker, so by now the unit has returned.
    assert ran == []


def test_members_end_as_they_finish_not_when_the_unit_does() -> None:
    """c0 -> c1 -> c2 with c1 held at a gate: c0's end must reach the callbacks (and
    the trace) while c1 is still held, so progress and per-task hooks keep pace."""
    gate = Gate()
    c0_ended = threading.Event()
    ends = Ends(on_end=lambda name, state: c0_ended.set() if name == "c0" else None)
    g = dagexec.Graph()
    g.add("c0", lambda: 0)
    g.add("c1", gate.gated(lambda x: x + 1), deps=["c0"])
    g.add("c2", lambda x: x + 1, deps=["c1"])
    future = run_in_thread(dagexec.run, g, workers=2, callbacks=[ends], trace=True)
    try:
        assert c0_ended.wait(10), "c0's end was held back until the whole unit ended"
        assert gate.waiting == 1  # c1 still running
    finally:
        gate.open()
    result = future.result(timeout=30)
    assert result["c2"] == 2
    assert ends.dispatched == ["c0"]  # still one unit
    assert ends.ends == [(f"c{i}", TaskState.DONE) for i in range(3)]
    for before, after in zip(result.trace, result.trace[1:], strict=False):
        assert after.ready == pytest.approx(before.ended)
        assert after.started >= after.dispatched >= after.ready
