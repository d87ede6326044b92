"""Shared fixtures: every test must leave no thread behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from process_tasks import ProcessGate

from dagexec import Graph
from dagexec.testing import no_leaked_threads


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    # Like CPython's threading_setup/threading_cleanup: a thread that outlives its
    # test is a bug (a worker never stopped, a scheduler never finished).
    with no_leaked_threads():
        yield


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[ProcessGate]:
    """A :class:`process_tasks.ProcessGate` in ``tmp_path``, opened and closed after."""
    g = ProcessGate(tmp_path)
    try:
        yield g
    finally:
        g.open()
        g.close()


@pytest.fixture
def failing_graph() -> Graph:
    """A graph with one failure, for every test that needs each outcome::

    a --> bad --> after      ('bad' raises ValueError("boom"))
    a --> ok
    """

    def bad(a: int) -> int:
        raise ValueError("boom")

    g = Graph()
    g.add("a", lambda: 1)
    g.add("bad", bad, deps=["a"])
    g.add("after", lambda x: x, deps=["bad"])
    g.add("ok", lambda a: a, deps=["a"])
    return g
