"""Hostile names and exceptions reach the caller; an internal error waits for running tasks."""

from __future__ import annotations

import _thread
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from common import diamond

import dagexec
from dagexec import Graph, TaskState
from dagexec._core.result import DONE as S_DONE
from dagexec.testing import (
    ConcurrencyProbe,
    Gate,
    run_in_thread,
)

# --- the scheduler survives hostile names and exceptions, and drains if not ---


class HostileName:
    """A task name whose repr raises; hashable and comparable as usual."""

    def __repr__(self) -> str:
        raise RuntimeError("hostile repr")


def _boom() -> None:
    raise ValueError("boom")


@pytest.mark.parametrize("on_error", ["raise", "continue"])
def test_a_failing_task_with_a_hostile_name_still_raises_its_own_exception(
    on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = HostileName()
    g = Graph()
    g.add(name, _boom)
    g.add("after", lambda x: x, deps=[name])
    g.add("ok", lambda: 1)
    caplog.set_level(logging.DEBUG, logger="dagexec")  # every log line is formatted
    if on_error == "raise":
        with pytest.raises(ValueError, match="boom") as info:
            dagexec.run(g, workers=2, on_error="raise")
        error = info.value
    else:
        result = dagexec.run(g, workers=2, on_error="continue")
        assert result.status["after"] is TaskState.SKIPPED
        error = result.errors[name]
        assert isinstance(error, ValueError)
    assert any("HostileName" in note for note in error.__notes__)
    assert any("failed: ValueError: boom" in r.getMessage() for r in caplog.records)


def test_a_task_exception_whose_notes_are_a_tuple_is_raised_with_the_note_added() -> None:
    def odd_notes() -> None:
        exc = ValueError("odd")
        exc.__notes__ = ("set by the task",)  # type: ignore[assignment]
        raise exc

    g = Graph()
    g.add("odd", odd_notes)
    with pytest.raises(ValueError, match="odd") as info:
        dagexec.run(g, workers=1)
    assert list(info.value.__notes__) == ["set by the task", "dagexec: raised by task 'odd'"]


def test_a_task_exception_whose_str_raises_is_raised_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("hostile str")

    def bad() -> None:
        raise Unprintable

    g = Graph()
    g.add("bad", bad)
    caplog.set_level(logging.INFO, logger="dagexec")
    with pytest.raises(Unprintable):
        dagexec.run(g, workers=1)
    assert any("Unprintable (its str raised)" in r.getMessage() for r in caplog.records)


def test_a_callback_error_with_a_hostile_qualname_and_notes_still_reaches_the_caller() -> None:
    class Hook:  # an instance has no __qualname__, and its repr raises
        def __repr__(self) -> str:
            raise RuntimeError("hostile repr")

        def __call__(self, *args: object) -> None:
            exc = KeyError("from the callback")
            exc.__notes__ = ()  # type: ignore[assignment]
            raise exc

    callback = type("CB", (), {})()
    callback.on_task_end = Hook()
    with pytest.raises(KeyError, match="from the callback") as info:
        dagexec.run(diamond(), workers=1, callbacks=[callback])
    assert any("raised by callback" in note for note in info.value.__notes__)


def test_an_internal_scheduler_error_returns_only_after_the_run_drained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """::

    held-1, held-2    wait at a gate (running when the scheduler fails)
    trigger           ends when told; handling its result raises inside the scheduler
    q-0 .. q-5        queued behind them; must never start once run() returned
    """
    from dagexec._state.runstate import RunState

    gate, probe = Gate(), ConcurrencyProbe()
    go, failed, returned = threading.Event(), threading.Event(), threading.Event()
    started_after_return: list[str] = []
    active_at_return: list[int] = []
    real_returned = RunState.ended

    def failing_done(
        self: RunState, reports: list[tuple[Any, ...]], outcome: int = S_DONE, release: bool = True
    ) -> None:
        # The engine fails where a task ends DONE, when 'trigger' does.
        if outcome == S_DONE and any(self.names[report[1]] == "trigger" for report in reports):
            failed.set()
            raise RuntimeError("injected scheduler bug")
        real_returned(self, reports, outcome, release)

    monkeypatch.setattr(RunState, "ended", failing_done)

    def queued(name: str) -> Callable[[], None]:
        def task() -> None:
            if returned.is_set():
                started_after_return.append(name)

        return task

    g = Graph()
    g.add("held-1", probe.wrap(gate.gated(lambda: 1)))
    g.add("held-2", probe.wrap(gate.gated(lambda: 2)))
    g.add("trigger", lambda: go.wait(10))
    for i in range(6):
        g.add(f"q-{i}", queued(f"q-{i}"))

    with dagexec.Executor(workers=3, queue_cap=2) as ex:

        def call() -> dagexec.RunResult:
            try:
                return ex.run(g)
            finally:
                active_at_return.append(probe.active)
                returned.set()

        future = run_in_thread(call)
        try:
            assert gate.wait_for_waiting(2)
            go.set()
            assert failed.wait(10)
            # Not a synchronisation: a scheduler that does not drain returns at
            # once, and gets half a second to show it before the gate opens.
            concurrent.futures.wait([future], timeout=0.5)
        finally:
            gate.open()
        with pytest.raises(RuntimeError, match="injected scheduler bug") as info:
            future.result(timeout=30)
        assert any("internal error in the scheduler" in n for n in info.value.__notes__)
        assert active_at_return == [0]
        monkeypatch.undo()
        assert dict(ex.run(diamond(), targets=["norm"])) == {"norm": 20}  # usable
    assert started_after_return == []


def test_an_internal_error_in_an_interrupted_run_still_waits_for_its_running_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two features at once: after Ctrl-C, 'x' and 'y' run on in the background;
    handling 'x''s end fails inside the scheduler. The next run on the executor
    must still wait for 'y'."""
    from dagexec._state.runstate import RunState

    gate_x, gate_y = Gate(), Gate()
    failed, y_started, y_ended = threading.Event(), threading.Event(), threading.Event()
    real_returned = RunState.ended

    def failing_done(
        self: RunState, reports: list[tuple[Any, ...]], outcome: int = S_DONE, release: bool = True
    ) -> None:
        # The engine fails where a task ends DONE, when 'x' does.
        if outcome == S_DONE and any(self.names[report[1]] == "x" for report in reports):
            failed.set()
            raise RuntimeError("injected scheduler bug")
        real_returned(self, reports, outcome, release)

    monkeypatch.setattr(RunState, "ended", failing_done)

    def x() -> None:
        assert y_started.wait(10)  # running, so the interrupt cannot cancel it
        _thread.interrupt_main()
        gate_x.wait()

    def y() -> None:
        y_started.set()
        gate_y.wait()
        y_ended.set()

    first = Graph()
    first.add("x", x)
    first.add("y", y)
    second = Graph()
    second.add("after", y_ended.is_set)
    with dagexec.Executor(workers=2) as ex:
        try:
            assert_raises_keyboard_interrupt(lambda: ex.run(first))
            gate_x.open()
            assert failed.wait(10)
            future = run_in_thread(ex.run, second)
            # Not a synchronisation: gives a next run that does not wait the
            # chance to start before 'y' ends.
            concurrent.futures.wait([future], timeout=0.5)
        finally:
            gate_x.open()
            gate_y.open()
        assert dict(future.result(timeout=30)) == {"after": True}


def assert_raises_keyboard_interrupt(fn: Callable[[], object]) -> None:
    with pytest.raises(KeyboardInterrupt):
        fn()
