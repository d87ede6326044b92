"""Logging under 'dagexec': INFO for run start/end, DEBUG per dispatch, quiet when healthy."""

from __future__ import annotations

import logging

import pytest

import dagexec


def graph() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    g.add("c", lambda a: a + 2, deps=["a"])
    return g


def test_a_healthy_run_logs_start_end_and_each_dispatch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="dagexec"):
        dagexec.run(graph(), workers=2)
    records = [r for r in caplog.records if r.name == "dagexec"]
    infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert infos[0].startswith("run start: 3 tasks, 2 targets, 2 workers")
    assert infos[-1].startswith("run end: 3 done in ")
    dispatches = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert len(dispatches) == 3 and all(m.startswith("dispatch ") for m in dispatches)
    assert not [r for r in records if r.levelno >= logging.WARNING]


def test_a_failure_is_logged_at_info_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    g = graph()
    g.add("bad", lambda: 1 / 0)
    with caplog.at_level(logging.INFO, logger="dagexec"):
        dagexec.run(g, workers=2, on_error="continue")
    messages = [r.getMessage() for r in caplog.records if r.name == "dagexec"]
    assert any(m.startswith("task 'bad' failed: ZeroDivisionError") for m in messages)
    assert any(m.startswith("run end: 3 done, 1 failed") for m in messages)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_queued_run_logs_by_the_level_when_it_starts(caplog: pytest.LogCaptureFixture) -> None:
    """A submitted run is made at submit() but starts later: its start and end are
    logged by the level the logger has then, not by the one it had at submit()."""
    gate = dagexec.testing.Gate(timeout=30)
    first = dagexec.Graph()
    first.add("hold", gate.gated(lambda: 0))
    caplog.set_level(logging.WARNING, logger="dagexec")
    with dagexec.Executor(workers=1) as ex:
        held = ex.submit(first)
        assert gate.wait_for_waiting(1)  # the first run holds the executor
        later = ex.submit(graph())  # made now, with INFO off
        caplog.set_level(logging.INFO, logger="dagexec")
        gate.open()
        held.result()
        later.result()
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("run start: 3 tasks") for m in infos), infos
    assert any(m.startswith("run end: 3 done") for m in infos), infos
