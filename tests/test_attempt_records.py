"""One attempt, one record (issue 32): every event about an attempt names its task
and its number, on threads and in child processes, and only the state layer
appends events."""

from __future__ import annotations

import ast
import pathlib
from typing import Any

import process_tasks
from test_reports_agree import Stream

import dagexec
from dagexec import Graph, TaskState

ROOT = pathlib.Path(dagexec.__file__).parent


class Attempts(Stream):
    """The event stream, read a kind at a time (a start without its worker)."""

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e[:3] if kind == "start" else e for e in self.events if e[0] == kind]


def test_each_attempt_starts_with_its_own_number() -> None:
    """START carried attempt 1 for every attempt; on_attempt_start did not exist."""
    failures = iter([OSError("a"), OSError("b")])

    def flaky() -> str:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return "ok"

    g = Graph()
    g.add("f", flaky, retries=2)
    cb = Attempts()
    result = dagexec.run(g, callbacks=[cb])
    assert result["f"] == "ok"
    assert cb.of("start") == [("start", "f", 1), ("start", "f", 2), ("start", "f", 3)]
    assert cb.of("release") == [("release", "f", n, "returned") for n in (1, 2, 3)]
    assert result.stats.retries == 2


def test_chain_members_each_start_and_the_chain_is_dispatched_once() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    g.add("c", lambda b: b + 1, deps=["b"])
    cb = Attempts()
    result = dagexec.run(g, callbacks=[cb], workers=1)
    assert result["c"] == 3
    assert cb.of("dispatch") == [("dispatch", "a")]
    assert cb.of("start") == [("start", n, 1) for n in "abc"]
    assert result.stats.peak_in_flight == 1


def test_a_process_timeout_is_told_counted_and_its_child_killed() -> None:
    """A process task's timeout called no on_task_timeout, counted nowhere."""
    g = Graph()
    g.add("hang", process_tasks.sleep_forever, isolate="process", timeout=0.3, retries=1)
    cb = Attempts()
    result = dagexec.run(g, callbacks=[cb], trace=True, on_error="continue")
    assert result.status["hang"] is TaskState.FAILED
    assert isinstance(result.errors["hang"], dagexec.TaskTimeout)
    assert cb.of("timeout") == [("timeout", "hang", 1), ("timeout", "hang", 2)]
    assert cb.of("release") == [("release", "hang", n, "killed") for n in (1, 2)]
    assert cb.of("start") == [("start", "hang", 1), ("start", "hang", 2)]
    assert result.stats.timeouts == 2
    assert [(r.attempt, r.outcome) for r in result.trace] == [(1, "killed"), (2, "killed")]


def test_a_thread_timeout_is_counted_in_run_stats() -> None:
    import threading

    release = threading.Event()
    g = Graph()
    g.add("slow", lambda: release.wait(10), timeout=0.05)
    cb = Attempts()
    try:
        result = dagexec.run(g, callbacks=[cb], on_error="continue", trace=True)
    finally:
        release.set()
    assert cb.of("timeout") == [("timeout", "slow", 1)]
    assert result.stats.timeouts == 1
    assert [r.outcome for r in result.trace] == ["abandoned"]  # it ran on past the end


def _appends_events(path: pathlib.Path) -> bool:
    """Whether the module builds a run Event (imports Event from the events module)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").endswith("events")
            and any(alias.name == "Event" for alias in node.names)
        ):
            return True
    return False


def test_only_the_state_layer_appends_events() -> None:
    """START (reports.py) and TIMEOUT (timers.py) were appended by the engine."""
    outside = [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if "_state" not in p.parts and _appends_events(p)
    ]
    # The observers read events; they import Event only for type hints.
    readers = {"_observation/observer.py", "_observation/trace.py"}
    assert sorted(set(outside) - readers) == []
    for name in readers:
        assert "Event(" not in (ROOT / name).read_text()
