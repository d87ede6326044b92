"""State shared between threads, tested where the GIL would have hidden a race.

On a GIL build each test shortens the switch interval so threads are swapped
every few bytecodes; on a free-threaded build they really run at once. See
docs/thread-safety.md for the audit these tests pin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from switching import fast_switching

import dagexec
from dagexec._core.plan import _PLAN_CACHE_SIZE, plan_run
from dagexec.testing import ConcurrencyProbe

FREE_THREADED_BUILD = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
ROOT = Path(__file__).resolve().parent.parent


def run_together(fn: Callable[[int], None], threads: int) -> list[BaseException]:
    """Call ``fn(k)`` on ``threads`` threads released at once; return what they raised."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def body(k: int) -> None:
        barrier.wait()
        try:
            fn(k)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    ts = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_plan_cache_survives_many_threads_planning_one_graph() -> None:
    # More target sets than the cache holds, so every thread keeps evicting:
    # unlocked, two threads evicted the same key (KeyError) or iterated the dict
    # while another grew it (RuntimeError), on both builds.
    g = dagexec.Graph()
    n = 3 * _PLAN_CACHE_SIZE
    for i in range(n):
        g.add(i, lambda: 0)
    compiled = g._compile()

    def hammer(k: int) -> None:
        for r in range(1500):
            target = (k * 7 + r) % n
            plan = plan_run(compiled, [target])
            assert plan.names == (target,)

    with fast_switching():
        errors = run_together(hammer, 4)
    assert errors == []
    assert len(compiled.plans) <= _PLAN_CACHE_SIZE


def test_one_graph_run_from_many_threads_at_once() -> None:
    # The README's use: one graph, several threads each calling dagexec.run with
    # its own targets (partial runs, so the plan cache churns too).
    g = dagexec.Graph()
    g.add("root", lambda: 1)
    for i in range(2 * _PLAN_CACHE_SIZE):
        g.add(("leaf", i), lambda r, i=i: r + i, deps=["root"])
    probe = ConcurrencyProbe()
    g.add("all", probe.wrap(lambda *xs: sum(xs)), deps=[("leaf", i) for i in range(8)])

    def runs(k: int) -> None:
        for r in range(20):
            i = (k * 5 + r) % (2 * _PLAN_CACHE_SIZE)
            result = dagexec.run(g, [("leaf", i)], workers=2, queue_cap=1)
            assert dict(result) == {("leaf", i): 1 + i}
            assert result.stats.tasks_run == 2
        assert dagexec.run(g, ["all"], workers=2)["all"] == sum(1 + i for i in range(8))

    with fast_switching():
        errors = run_together(runs, 3)
    assert errors == []
    assert probe.entered == 3


def test_one_executor_shared_by_many_threads_serialises_their_runs() -> None:
    probe = ConcurrencyProbe()
    g = dagexec.Graph()
    for i in range(30):
        g.add(i, probe.wrap(lambda i=i: i))
    g.add("sum", lambda *xs: sum(xs), deps=list(range(30)))

    with dagexec.Executor(workers=2, queue_cap=2) as ex:

        def runs(k: int) -> None:
            for _ in range(15):
                result = ex.run(g)
                assert result["sum"] == sum(range(30))
                assert result.stats.peak_in_flight <= ex.effective_cap

        with fast_switching():
            errors = run_together(runs, 3)
    assert errors == []
    # Runs were serialised: never more tasks at once than one run's workers.
    assert probe.peak <= 2
    assert probe.entered == 3 * 15 * 30


def test_interpreter_reports_its_gil_state() -> None:
    # sys._is_gil_enabled exists from 3.13; a GIL build (any version) has the GIL on.
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    if not FREE_THREADED_BUILD:
        assert is_enabled is None or is_enabled()


@pytest.mark.skipif(not FREE_THREADED_BUILD, reason="needs a free-threaded (3.13t+) build")
def test_importing_dagexec_and_test_tools_keeps_the_gil_off() -> None:
    # An extension module without free-threading support re-enables the GIL on
    # import (with only a RuntimeWarning). Checked in a fresh interpreter, since
    # this one may run with PYTHON_GIL set by the user.
    code = "import sys, dagexec, dagexec.testing, pytest, hypothesis; print(sys._is_gil_enabled())"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.skipif(not FREE_THREADED_BUILD, reason="needs a free-threaded (3.13t+) build")
def test_the_gil_stays_off_in_this_test_session() -> None:
    # Every plugin and module the suite imported is loaded by now.
    if os.environ.get("PYTHON_GIL") == "1" or sys._xoptions.get("gil") == "1":
        pytest.skip("the GIL was turned on on purpose (PYTHON_GIL=1 or -X gil=1)")
    assert not sys._is_gil_enabled()
