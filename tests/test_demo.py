"""The demo's report: interpreter and GIL state, the pure-Python stage, medians, busy warning.

The demo's sizes are module constants; these tests shrink them so each run takes
milliseconds, and fake the GIL's state through ``sys._is_gil_enabled`` (which
exists from 3.13; ``raising=False`` adds it on 3.11 and 3.12).
"""

from __future__ import annotations

import io
import itertools
import platform

import pytest

import dagexec
from dagexec._integrations import demo as _demo


@pytest.fixture
def small_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_demo, "LEAF_BYTES", 4096)
    monkeypatch.setattr(_demo, "ROUNDS", 1)
    monkeypatch.setattr(_demo, "REPEATS", 2)
    monkeypatch.setattr(_demo, "CPU_LENGTH", 3)
    monkeypatch.setattr(_demo, "CPU_LOOPS", 10)


def demo_output() -> str:
    out = io.StringIO()
    assert _demo.main(out=out) == 0
    return out.getvalue()


def test_with_the_gil_on_the_pure_python_stage_is_skipped_with_the_reason(
    small_demo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys._is_gil_enabled", lambda: True, raising=False)
    text = demo_output()
    assert "pure Python: skipped" in text
    assert "only one thread runs Python code at a time" in text
    assert "would not speed up here" in text
    assert text.count("dagexec.run ") == 1  # the hashing stage only


def test_with_the_gil_off_the_pure_python_stage_runs_and_is_timed(
    small_demo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys._is_gil_enabled", lambda: False, raising=False)
    text = demo_output()
    stage = text[text.index("pure Python:") :]
    assert "pure Python: 25 tasks, 8 chains x 3 tasks" in stage  # 8 x 3 + the fan-in
    assert "GIL off, so they run in parallel" in stage
    assert "serial loop" in stage and "speedup" in stage
    assert "skipped" not in stage


@pytest.mark.parametrize(
    ("free_threaded", "gil_on", "expected"),
    [
        (False, True, "GIL build (the GIL is on)"),
        (True, False, "free-threaded build, GIL off"),
        (True, True, "free-threaded build, but the GIL is ON (PYTHON_GIL=1"),
    ],
)
def test_the_first_line_names_the_interpreter_and_the_gil_state(
    monkeypatch: pytest.MonkeyPatch, free_threaded: bool, gil_on: bool, expected: str
) -> None:
    monkeypatch.setattr(_demo.sysconfig, "get_config_var", lambda name: int(free_threaded))
    monkeypatch.setattr("sys._is_gil_enabled", lambda: gil_on, raising=False)
    line = _demo.interpreter()
    assert line.startswith(platform.python_implementation())
    assert expected in line


def test_gil_enabled_defaults_to_true_where_python_cannot_tell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr("sys._is_gil_enabled", raising=False)  # Python < 3.13
    assert _demo.gil_enabled() is True


def test_the_demo_line_says_which_interpreter(small_demo: None) -> None:
    first = demo_output().splitlines()[0]
    assert first.startswith(f"dagexec demo on {_demo.interpreter()}")


@pytest.mark.parametrize(
    ("serial", "parallel", "workers", "warned"),
    [(1.0, 0.9, 2, True), (1.0, 1 / 1.19, 2, True), (1.0, 0.5, 2, False), (1.0, 1.0, 1, False)],
)
def test_a_speedup_below_1_2x_warns_that_the_machine_looks_busy(
    serial: float, parallel: float, workers: int, warned: bool
) -> None:
    out = io.StringIO()
    _demo._report_speed(serial, parallel, workers, out)
    text = out.getvalue()
    assert f"speedup {serial / parallel:.2f}x" in text
    assert f"(median of {_demo.REPEATS})" in text
    assert ("looks busy" in text) is warned


def test_each_side_is_timed_repeats_times_and_the_median_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_demo, "REPEATS", 3)
    calls = itertools.count()
    g = dagexec.Graph()
    g.add("x", lambda: next(calls))
    # Fake clock: serial runs take 1, 5, 2 s; dagexec runs 4, 3, 9 s.
    ticks = iter([0, 1, 0, 4, 0, 5, 0, 3, 0, 2, 0, 9])
    monkeypatch.setattr(_demo, "perf_counter", lambda: next(ticks))
    serial, parallel, _, result = _demo._compare(g, 1)
    assert (serial, parallel) == (2, 4)
    assert next(calls) == 6  # 3 serial + 3 dagexec runs
    assert result["x"] in (1, 3, 5)
