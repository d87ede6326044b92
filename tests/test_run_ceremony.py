"""What one small run costs in code read: the functions and modules a warm one-task
``Executor.run`` enters on its calling thread (issue 29, step 2, item 1).

Counted with ``sys.setprofile``: every distinct dagexec function (a comprehension
is one) entered while the run is driven, and the modules they live in. The
count is exact and load-independent: the calling thread drives a plain run
itself, so it is the whole run but the worker's few lines.

The issue's target is 40 functions in 18 modules; the bound here is what the
run enters now (75 in 27 when the issue was written, 78 in 28 at b08fcc9, 36 in
16 since the ctx branch), so that nothing creeps back in. Lower it as the
ceremony shrinks.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

import pytest

import dagexec

# Measured at this commit: 63 functions in 23 modules (58 on the ctx branch;
# the layered RunState added RunCore.__init__ and _ready_roots, the sizing
# budget Depth.size and sizing.looks_inside, and Depth.next_look was split out
# of Depth.after for radon). Issue 29's target is 40 in 18: a ratchet, not the goal.
# 54 in 21 on the lean branch: the run state's one __init__ (no RunCore.__init__,
# _ready_roots, push_order), Graph._plan (no _compile, plan_run), no
# check_resources without needs, no stop or close after a plain run's clean end,
# no comprehension for a root's arguments.
# 36 in 16 on the second ctx branch (issue 29 step 2 item 1): no memory-aware
# Depth (depth.py, sizing.py) for a plan no bigger than one task per worker; the
# stop and the driver layers of the run's one record (no RunStop.__init__,
# Driver.__init__); a shared SILENT Observer; SigintToAbort in caller_drives.py,
# one constructor and put_back; share's one-task round inline; no _plain,
# _capacity or conclude in a plain run.
MAX_FUNCTIONS = 36
MAX_MODULES = 16


def _noop() -> int:
    return 1


def entered_by_one_run(
    ex: dagexec.Executor, graph: dagexec.Graph, **options: Any
) -> set[tuple[str, str]]:
    """(module, qualified name) of every dagexec function one ``ex.run(graph, **options)``
    enters on this thread."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("dagexec"):
                seen.add((module, frame.f_code.co_qualname))

    sys.setprofile(profile)
    try:
        ex.run(graph, **options)
    finally:
        sys.setprofile(None)
    return seen


@pytest.fixture
def quiet_dagexec_logger() -> Any:
    """The count is of a run that logs nothing (INFO logs add their own lines)."""
    logger = logging.getLogger("dagexec")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.mark.usefixtures("quiet_dagexec_logger")
def test_a_warm_one_task_run_enters_few_functions_in_few_modules() -> None:
    graph = dagexec.Graph()
    graph.add("only", _noop)
    with dagexec.Executor(workers=2) as ex:
        ex.run(graph)  # warm: the plan is cached, the worker's thread started
        seen = entered_by_one_run(ex, graph)
    modules = {module for module, _ in seen}
    listing = "\n".join(f"{m}.{f}" for m, f in sorted(seen))
    assert len(seen) <= MAX_FUNCTIONS, f"{len(seen)} functions entered:\n{listing}"
    assert len(modules) <= MAX_MODULES, f"{len(modules)} modules entered:\n{listing}"
    # The run was driven here: its loop and its end ran on this thread.
    assert ("dagexec._engine.run.driver", "Driver.loop") in seen


@pytest.mark.usefixtures("quiet_dagexec_logger")
def test_the_counter_tells_a_run_driven_here_from_a_queued_one() -> None:
    # The bound above could pass by counting nothing: a run with a timeout is
    # handed to the scheduler thread, so this thread enters the queued path and
    # never the driver.
    graph = dagexec.Graph()
    graph.add("only", _noop)
    with dagexec.Executor(workers=2) as ex:
        ex.run(graph)
        queued = entered_by_one_run(ex, graph, timeout=60.0)
    names = {f for _, f in queued}
    assert "run_queued" in names and "Driver.loop" not in names
