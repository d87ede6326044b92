"""InFlightRecorder agrees with the scheduler's own count, units (chains) included."""

from __future__ import annotations

import contextlib
import threading

import pytest
from common import LastResult

import dagexec
from dagexec import Graph
from dagexec.testing import (
    InFlightRecorder,
)

# --- InFlightRecorder agrees with the scheduler, units included ---------------


def recorded(graph: Graph, **options: object) -> tuple[InFlightRecorder, dagexec.RunResult]:
    """Run ``graph`` with a fresh recorder; a task failure may be raised or not."""
    recorder, last = InFlightRecorder(), LastResult()
    with contextlib.suppress(ZeroDivisionError):
        dagexec.run(graph, callbacks=[recorder, last], **options)  # type: ignore[arg-type]
    assert last.result is not None
    return recorder, last.result


def test_recorder_counts_a_unit_until_its_last_member_ends() -> None:
    """::

    u1 -> u2 -> u3     one unit; u2 holds it until f1 runs
    g0 -> f1 .. f8     g0 ends after u1 did, so f1..f8 are dispatched while the
                       unit is still out: 9 in flight, not 8
    """
    e1, e2 = threading.Event(), threading.Event()
    g = Graph()
    g.add("u1", lambda: 1)
    g.add("u2", lambda u1: (e1.set(), e2.wait(10)), deps=["u1"])
    g.add("u3", lambda u2: u2, deps=["u2"])
    g.add("g0", lambda: e1.wait(10))
    g.add("f1", lambda g0: e2.set(), deps=["g0"])
    for i in range(2, 9):
        g.add(f"f{i}", lambda g0: None, deps=["g0"])
    recorder, result = recorded(g, workers=2, queue_cap=4)
    assert result.stats.peak_in_flight == 9
    assert recorder.peak == 9
    assert recorder.in_flight == 0


def _chains(n: int, length: int, fail_at: tuple[int, int] | None = None) -> Graph:
    """``n`` independent chains ``c<i>-0 -> ... -> c<i>-<length-1>``; one member may raise."""
    g = Graph()
    for c in range(n):
        for k in range(length):
            fails = fail_at == (c, k)
            fn = (lambda *a: 1 / 0) if fails else (lambda *a: 1)
            g.add(f"c{c}-{k}", fn, deps=[f"c{c}-{k - 1}"] if k else [])
    return g


def _fan(width: int, chain: int) -> Graph:
    """root -> width chains of ``chain`` tasks -> join."""
    g = Graph()
    g.add("root", lambda: 0)
    for w in range(width):
        for k in range(chain):
            g.add((w, k), lambda x: x, deps=["root" if k == 0 else (w, k - 1)])
    g.add("join", lambda *xs: len(xs), deps=[(w, chain - 1) for w in range(width)])
    return g


@pytest.mark.parametrize(
    ("graph", "options"),
    [
        pytest.param(_chains(12, 4), {"workers": 2, "queue_cap": 1}, id="chains"),
        pytest.param(_chains(12, 4), {"workers": 1, "queue_cap": 3}, id="chains-1-worker"),
        pytest.param(_fan(10, 1), {"workers": 2, "queue_cap": 2}, id="fan-out"),
        pytest.param(_fan(10, 5), {"workers": 2, "queue_cap": 2}, id="fan-of-chains"),
        pytest.param(_fan(6, 3), {"workers": 3, "max_in_flight": 2}, id="capped"),
        pytest.param(
            _chains(8, 5, fail_at=(3, 2)),
            {"workers": 2, "queue_cap": 2, "on_error": "continue"},
            id="failure-continue",
        ),
        pytest.param(
            _chains(8, 5, fail_at=(0, 1)),
            {"workers": 2, "queue_cap": 2, "on_error": "raise"},
            id="failure-cancels",
        ),
        pytest.param(_chains(6, 3), {"workers": 2, "trace": True}, id="traced"),
    ],
)
def test_recorder_peak_matches_peak_in_flight(graph: Graph, options: dict[str, object]) -> None:
    for _ in range(5):  # the interleaving varies from run to run
        recorder, result = recorded(graph, **options)
        assert recorder.peak == result.stats.peak_in_flight
        assert recorder.in_flight == 0
