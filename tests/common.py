"""Small helpers shared by several test files: a diamond graph, joining threads, a last result."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import dagexec
from dagexec import Graph
from dagexec.testing import _join_started


def diamond() -> Graph:
    """::

    raw --> norm --> report
    raw --> side
    """
    g = Graph()
    g.add("raw", lambda: 2)
    g.add("norm", lambda raw: raw * 10, deps=["raw"])
    g.add("side", lambda raw: raw + 1, deps=["raw"])
    g.add("report", lambda norm: f"n={norm}", deps=["norm"])
    return g


def still_alive(threads: Iterable[threading.Thread], timeout: float = 10.0) -> list[str]:
    """The names of ``threads`` still running after joining them all for ``timeout`` s."""
    threads = list(threads)
    deadline = time.monotonic() + timeout
    for t in threads:
        _join_started(t, max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


class LastResult:
    """Keeps the result a run hands to on_run_end, also when the run then raises."""

    def __init__(self) -> None:
        self.result: dagexec.RunResult | None = None

    def on_run_end(self, result: dagexec.RunResult) -> None:
        self.result = result
