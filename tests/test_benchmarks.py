"""The benchmark peers compute the right values and run exactly the tasks needed.

A benchmark is only honest if every implementation does the same work: these
run each peer of ``benchmarks/peers.py`` on small versions of the workloads and
check its values against the serial loop and its own count of task calls
against the number the request needs.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[Any, Any]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import peers
        import workloads

        yield peers, workloads
    finally:
        sys.path.remove(str(BENCHMARKS))


SPECS = {
    "wide": lambda w: w.wide(60),
    "layered": lambda w: w.layered(300, 10),
    "chain": lambda w: w.chain(50),
    "pycpu": lambda w: w.pycpu(3, 4, loops=10),
    "partial": lambda w: w.partial_request(400, 10),
    "memory": lambda w: w.memory(5, 1),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_peer_returns_the_serial_values_and_counts_its_tasks(
    bench: tuple[Any, Any], name: str
) -> None:
    peers, workloads = bench
    spec = SPECS[name](workloads)
    impls = [
        peers.Serial(),
        peers.Dagexec(2),
        peers.GraphlibTPE(2),
        peers.CappedGraphlibTPE(2, per_worker=1),  # a cap of 2: the backlog is used
    ]
    if name == "pycpu":
        impls.append(peers.BareThreads(2))
    for module, cls in (("dagron", "Dagron"), ("traversal", "Traversal")):
        if importlib.util.find_spec(module) is not None:
            impls.append(getattr(peers, cls)(2))
    reference = None
    for impl in impls:
        result = impl.run(impl.prepare(spec))
        reference = result if reference is None else reference
        assert result == reference, impl.name
        assert impl.last_count == spec.tasks_run, impl.name


def test_partial_spec_needs_fewer_tasks_than_the_graph(bench: tuple[Any, Any]) -> None:
    _, workloads = bench
    spec = SPECS["partial"](workloads)
    assert 0 < spec.tasks_run < len(spec.tasks)


def script_output(script: str, *args: str) -> str:
    """What ``benchmarks/<script> <args>`` prints; it must exit 0 within 2 minutes."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def test_small_runs_prints_its_table_targets_and_counts() -> None:
    """benchmarks/small_runs.py in its quick mode, so it cannot rot: the table of
    contenders, both targets with a verdict, and the calls per run (their
    values are timings and counts of this machine, not checked here)."""
    table = script_output("small_runs.py", "--quick")
    for line in (
        "hand-off floor",
        "Executor.run",
        "graphlib+TPE",
        "dagexec.run",
        "graphlib+new TPE",
    ):
        assert re.search(rf"^  {re.escape(line)} +\d+\.\d$", table, re.M), table
    assert re.search(
        r"Executor.run - hand-off floor += [+-]\d+\.\d us .* (PASS|FAIL)$", table, re.M
    )
    assert re.search(r"dagexec.run / graphlib\+new TPE += \d+\.\d\dx .* (PASS|FAIL)$", table, re.M)
    assert "in rotating order" in table, table
    in_a_row = script_output("small_runs.py", "--quick", "--back-to-back")
    assert "back to back" in in_a_row, in_a_row
    assert re.search(r"^  hand-off floor +\d+\.\d$", in_a_row, re.M), in_a_row
    counts = script_output("small_runs.py", "--count", "--quick")
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        assert "not counted, cProfile hangs on a free-threaded build" in counts, counts
        return
    for name in ("Executor.run", "dagexec.run"):
        assert re.search(rf"^  {re.escape(name)} +\d+\.\d calls per run", counts, re.M), counts


def test_handoff_modes_prints_each_case() -> None:
    """benchmarks/handoff_modes.py with a few rounds, so it cannot rot: one line
    per case with the put's cost and the round trip (this machine's timings,
    not checked)."""
    out = script_output("handoff_modes.py", "--rounds", "3", "--block", "5")
    for case in ("nothing", "30 us of Python"):
        assert re.search(
            rf"^  {re.escape(case)} +put +\d+\.\d us +round trip +\d+\.\d us$", out, re.M
        ), out
