"""The wire tuples' layout is known by one module: nobody else indexes them by number.

A job's fields are read through ``wire.J_*`` and a report's through ``R_*``
(:mod:`dagexec._state.events`, re-exported by :mod:`dagexec._engine.workers.wire`), so
that changing a layout is a change in one place that mypy then checks
everywhere. This reads every module of the two layers that see them
(``_state``, ``_engine``) with ``ast`` and fails on a bare integer subscript of a
job or a report, found by the names the code gives them: one tuple (``msg``,
``item``, ``report`` ...) or an element of a list of them (``reports[0][0]``).
A new name for a job or a report goes into the sets below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dagexec
from dagexec._engine.workers import wire
from dagexec._state import events

# The package imported, whether a checkout or an installed wheel (as CI tests it).
PACKAGE = Path(dagexec.__file__).resolve().parent

# The layers that build or read jobs and reports, and, among their modules, where
# the layouts are written: the only ones that may index them by number.
LAYERS = ("_state", "_engine")
LAYOUT_MODULES = {"_engine/workers/wire.py", "_state/events.py"}

# Names the code gives one job, chain item, report or results-queue message.
ONE = {"msg", "item", "job", "probe", "report", "last_report", "r"}
# Names it gives a list of them: an element of one is one of them.
MANY = {"reports", "returned", "batch", "items"}


def bare_subscripts(source: str) -> list[str]:
    """Every ``name[<int>]`` (or ``names[...][<int>]``) on a job or a report in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Subscript):
            continue
        index = node.slice
        if not (isinstance(index, ast.Constant) and type(index.value) is int):
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id in ONE) or (
            isinstance(base, ast.Subscript)
            and isinstance(base.value, ast.Name)
            and base.value.id in MANY
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_what_it_is_for() -> None:
    """The walk must see the forms it forbids, and let the named forms pass."""
    forbidden = "a = msg[2]\nb = reports[0][0]\nc = item[3]\n"
    assert len(bare_subscripts(forbidden)) == 3
    allowed = (
        "a = msg[R_KIND]\nb = reports[0][R_WORKER]\nc = item.tasks[0]\nd = batch[0]\ne = deps[0]\n"
    )
    assert bare_subscripts(allowed) == []


def test_no_module_but_the_layouts_indexes_a_job_or_a_report_by_number() -> None:
    offenders = []
    paths = sorted(path for layer in LAYERS for path in (PACKAGE / layer).rglob("*.py"))
    assert len(paths) > 20  # the walk sees the modules it is for
    for path in paths:
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in LAYOUT_MODULES:
            continue
        offenders += [f"{relative} {hit}" for hit in bare_subscripts(path.read_text())]
    assert not offenders, (
        "index jobs with wire.J_* and reports with wire.R_* (one layout, type-checked), "
        "not a bare number: " + "; ".join(offenders)
    )


def test_the_constants_match_the_layouts() -> None:
    """The names say what the type aliases and the workers' tuples hold, in order."""
    job_fields = [wire.J_REPORT, wire.J_TASK, wire.J_FN, wire.J_ARGS, wire.J_FLAGS]
    assert [*job_fields, wire.J_STOP, wire.J_CONTEXT] == list(range(7))
    assert wire.Job.__args__[wire.J_TASK] is int
    report_fields = [events.R_WORKER, events.R_TASK, events.R_KIND, events.R_PAYLOAD]
    assert [*report_fields, events.R_STARTED, events.R_ENDED] == list(range(6))
    assert len(events.Report.__args__) == 6
    assert wire.R_KIND is events.R_KIND and wire.Report is events.Report
