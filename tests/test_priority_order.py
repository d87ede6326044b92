"""What a priority guarantees, as docs/graphs.md says it: ready tasks are handed out
highest first, but an inbox runs first in, first out, so with a deep dispatch a
lower-priority task handed out earlier starts before a higher one; with
``max_in_flight=workers`` (one worker: 1) the order among ready tasks is strict."""

from __future__ import annotations

import threading
from typing import Any

import dagexec


def _graph(order: list[str]) -> dagexec.Graph:
    lock = threading.Lock()

    def note(name: str) -> Any:
        def fn(*_: Any) -> None:
            with lock:
                order.append(name)

        return fn

    g = dagexec.Graph()
    g.add("quick", note("quick"), priority=10)
    g.add("high", note("high"), deps=["quick"], priority=9)  # ready once quick ends
    for i in range(5):  # priority 0, ready from the start
        g.add(f"low{i}", note(f"low{i}"))
    return g


def test_a_deep_dispatch_starts_lower_priority_tasks_already_in_the_inbox_first() -> None:
    order: list[str] = []
    dagexec.run(_graph(order), workers=1, queue_cap=64)
    assert order == ["quick", "low0", "low1", "low2", "low3", "low4", "high"]


def test_max_in_flight_one_per_worker_gives_strict_priority_order() -> None:
    order: list[str] = []
    dagexec.run(_graph(order), workers=1, max_in_flight=1)
    assert order == ["quick", "high", "low0", "low1", "low2", "low3", "low4"]


def test_with_two_workers_the_highest_ready_task_goes_out_when_a_slot_frees() -> None:
    gate = threading.Event()
    order: list[str] = []
    lock = threading.Lock()

    def note(name: str, wait: bool = False) -> Any:
        def fn(*_: Any) -> None:
            if wait:
                assert gate.wait(30)
            with lock:
                order.append(name)

        return fn

    g = dagexec.Graph()
    g.add("hold", note("hold", wait=True), priority=100)  # keeps one worker busy
    g.add("quick", note("quick"), priority=10)
    g.add("high", note("high"), deps=["quick"], priority=9)
    for i in range(3):
        g.add(f"low{i}", note(f"low{i}"))
    g.add("open", lambda *_: gate.set(), deps=["low0", "low1", "low2", "high"])
    dagexec.run(g, ["hold", "open"], workers=2, max_in_flight=2)
    assert order.index("high") < order.index("low0")


def test_the_docs_say_what_the_order_guarantees() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "graphs.md").read_text()
    assert "Among tasks ready at the same time, higher runs first" not in text  # overstated
    section = text[text.index("## Priorities") :]
    assert "**What the order guarantees.**" in section
    assert "`max_in_flight=workers`" in section
