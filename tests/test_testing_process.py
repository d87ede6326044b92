"""dagexec.testing's Gate and ConcurrencyProbe on isolate="process" tasks (issue 32).

``gate.gated(fn)`` and ``probe.wrap(fn)`` hold / count a process task on its
worker thread, before its call is sent; written inside the task's body they
raise in the child, naming the wrapper to use. On main both wrappers were
accepted by ``g.add`` and failed at run time with a pickling error."""

from __future__ import annotations

import threading
import time

import process_tasks
import pytest

import dagexec
from dagexec import Graph, TaskState
from dagexec.testing import ConcurrencyProbe, Gate, InFlightRecorder, assert_within_bounds


def test_gated_process_tasks_pile_up_at_the_gate_and_the_probe_counts_them() -> None:
    gate, probe, recorder = Gate(), ConcurrencyProbe(), InFlightRecorder()
    g = Graph()
    for i in range(6):
        g.add(f"t{i}", gate.gated(probe.wrap(process_tasks.square)), args=(i,), isolate="process")
    out: dict[str, dagexec.RunResult] = {}
    run = threading.Thread(
        target=lambda: out.setdefault("r", dagexec.run(g, workers=2, callbacks=[recorder]))
    )
    run.start()
    try:
        # Both workers hold a task at the gate, on their threads: the cap is reached.
        assert gate.wait_for_waiting(2), gate.waiting
        assert recorder.wait_for_in_flight(2)
        assert probe.active == 0  # the probe is inside the gate: nothing sent yet
    finally:
        gate.open()
        run.join(30)
    result = out["r"]
    assert [result[f"t{i}"] for i in range(6)] == [i * i for i in range(6)]
    assert probe.entered == 6
    assert 1 <= probe.peak <= 2
    assert_within_bounds(result)


def test_the_gate_is_held_before_the_call_is_sent_so_not_against_the_timeout() -> None:
    gate = Gate()
    g = Graph()
    g.add("t", gate.gated(process_tasks.square), args=(4,), isolate="process", timeout=0.3)
    out: dict[str, dagexec.RunResult] = {}
    run = threading.Thread(target=lambda: out.setdefault("r", dagexec.run(g)))
    run.start()
    try:
        assert gate.wait_for_waiting(1)
        # Time must pass for a timeout to be tested: longer than timeout= at the gate.
        time.sleep(0.6)
    finally:
        gate.open()
        run.join(30)
    assert out["r"]["t"] == 16
    assert out["r"].stats.timeouts == 0


def test_a_probe_wrapping_a_bound_process_call_keeps_its_constants() -> None:
    probe = ConcurrencyProbe()
    g = Graph()
    g.add("a", process_tasks.square, args=(3,))
    g.add("b", probe.wrap(process_tasks.scale), deps=["a"], kwargs={"factor": 2}, isolate="process")
    assert dagexec.run(g)["b"] == 18
    assert probe.entered == 1 and probe.active == 0


@pytest.mark.parametrize(
    ("fn", "wrapper"),
    [(process_tasks.waits_at_gate, "gate.gated"), (process_tasks.enters_probe, "probe.wrap")],
)
def test_a_gate_or_probe_in_a_process_task_body_names_the_wrapper(fn: object, wrapper: str) -> None:
    g = Graph()
    g.add("t", fn, isolate="process")  # type: ignore[arg-type]
    result = dagexec.run(g, on_error="continue")
    assert result.status["t"] is TaskState.FAILED
    error = result.errors["t"]
    assert isinstance(error, RuntimeError)
    assert wrapper in str(error) and "child process" in str(error)


def test_on_a_thread_the_wrappers_are_plain_calls() -> None:
    gate, probe = Gate(), ConcurrencyProbe()
    gate.open()
    g = Graph()
    g.add("a", gate.gated(probe.wrap(process_tasks.square)), args=(5,))
    assert dagexec.run(g)["a"] == 25
    assert probe.entered == 1
    assert g["a"].fn.__name__ == "square"
