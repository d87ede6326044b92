"""The package's layers, checked: no upward import, no import cycle.

Reads every module of ``dagexec`` with ``ast`` (nothing is imported), counting
every ``import``: at module level, inside functions and under ``TYPE_CHECKING``,
because each is an arrow a reader has to follow. The folders are the layers,
lowest first; a module may import its own layer and the layers below it:

    _core          the graph, its checks, the plan, what a run hands back
    _state         one run as a pure state machine
    _persist       checkpoints (identity, store, resume)
    _observation   trace, progress, pictures
    _engine        threads, queues, clocks, signals
    _integrations  dask, command line, demo
    (top)          dagexec/__init__.py, testing.py, dask.py, __main__.py

The few allowed exceptions are in ``ALLOWED``, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dagexec

# The package imported, whether a checkout or an installed wheel (as CI tests it).
PACKAGE = Path(dagexec.__file__).resolve().parent

# Which layers each layer may import (its own included).
MAY_IMPORT: dict[str, set[str]] = {
    "_core": {"_core"},
    "_state": {"_core", "_state"},
    "_persist": {"_core", "_persist"},
    "_observation": {"_core", "_state", "_observation"},
    "_engine": {"_core", "_state", "_persist", "_observation", "_engine"},
    "_integrations": {"_core", "_state", "_persist", "_observation", "_engine", "_integrations"},
    "top": {"_core", "_state", "_persist", "_observation", "_engine", "_integrations", "top"},
}

# (importer, imported) arrows that break the rules on purpose, with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("_core.graph", "_observation.draw"): (
        "Graph.to_dot()/to_mermaid() are conveniences: the renderer is imported when "
        "called, so the graph layer does not load it"
    ),
    ("_core.result", "_observation.chrome"): (
        "RunResult.trace_to_chrome() is a convenience, imported when called"
    ),
    ("_core.result", "_observation.gantt"): (
        "RunResult.gantt_svg() is a convenience, imported when called"
    ),
    ("_core.result", "_observation.report"): (
        "RunResult.report_html() is a convenience, imported when called"
    ),
    ("_core.validate", "_core.plan"): (
        "a CompiledGraph caches the Plans made from it; the type is named under "
        "TYPE_CHECKING only, while plan.py builds on CompiledGraph"
    ),
    ("_state.fanout", "_state.runstate"): (
        "a Fanout is owned by one RunState, a client of its public methods, and is "
        "typed by it (TYPE_CHECKING only)"
    ),
    ("_state.cleanup_gate", "_state.runstate"): (
        "a CleanupGate is owned by one RunState and reads its columns (TYPE_CHECKING only)"
    ),
    ("_state.resources", "_state.runstate"): (
        "a Resources is owned by one RunState and reads its needs column and ready set "
        "(TYPE_CHECKING only)"
    ),
    ("_state.columns", "_state.runstate"): (
        "RunState.add_items: a function of the run bound as its method, typed by it "
        "(TYPE_CHECKING only)"
    ),
    ("_state.dispatch", "_state.runstate"): (
        "RunState's hand-out and release: functions of the run bound as its methods, "
        "typed by it (TYPE_CHECKING only)"
    ),
    ("_state.ending", "_state.runstate"): (
        "RunState's end path: functions of the run bound as its methods, typed by it "
        "(TYPE_CHECKING only)"
    ),
    ("_state.attempts", "_state.runstate"): (
        "RunState's attempt events (start, timeout): functions of the run bound as its "
        "methods, typed by it (TYPE_CHECKING only)"
    ),
    ("_state.retries", "_state.runstate"): (
        "RunState's retries: functions of the run bound as its methods, typed by it "
        "(TYPE_CHECKING only)"
    ),
    ("_state.stopping", "_state.runstate"): (
        "RunState's stop: functions of the run bound as its methods, typed by it "
        "(TYPE_CHECKING only)"
    ),
}

# The pure state machine reports through events; it never waits, sleeps or logs.
PURE_LAYER = "_state"
FORBIDDEN_IN_PURE = {"threading", "queue", "time", "logging", "_thread", "asyncio"}


def module_name(path: Path) -> str:
    """'_core.graph' for dagexec/_core/graph.py, '__init__' for dagexec/__init__.py."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str:
    first = module.split(".")[0]
    return first if first in MAY_IMPORT and first != "top" else "top"


def imports_of(path: Path, module: str | None = None) -> tuple[set[str], set[str]]:
    """(dagexec modules imported, top-level std/third-party modules imported) by one file.

    ``module`` is the file's dotted name under dagexec (read off its path by default).
    """
    module = module or module_name(path)
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package and module != "__init__" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    ours: set[str] = set()
    others: set[str] = set()
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "dagexec" or alias.name.startswith("dagexec."):
                    ours.add(alias.name.removeprefix("dagexec").lstrip(".") or "__init__")
                else:
                    others.add(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module == "dagexec" or node.module.startswith("dagexec.")):
                target = node.module.removeprefix("dagexec").lstrip(".")
            else:
                others.add((node.module or "").split(".")[0])
                continue
            for alias in node.names:  # `from . import x` may name a module
                sub = f"{target}.{alias.name}" if target else alias.name
                ours.add(sub if sub in known else (target or "__init__"))
    ours.discard(module)
    return ours, others


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p)[0] for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_is_in_a_layer_folder() -> None:
    loose = [m for m in graph() if layer_of(m) == "top"]
    assert sorted(loose) == ["__init__", "__main__", "dask", "testing"], (
        f"a module outside the layer folders: {loose}; put it in the folder of its layer"
    )


def test_no_module_imports_a_layer_above_its_own() -> None:
    wrong = []
    for module, targets in graph().items():
        for target in targets:
            if layer_of(target) not in MAY_IMPORT[layer_of(module)] and (
                (module, target) not in ALLOWED
            ):
                wrong.append(f"{module} -> {target}")
    assert not wrong, f"upward imports (move the code down, or hand it in): {wrong}"


def test_no_import_cycle() -> None:
    edges = {m: {t for t in ts if (m, t) not in ALLOWED} for m, ts in graph().items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, f"import cycles: {[' -> '.join(c) for c in cycles]}"


def test_the_pure_state_layer_imports_no_threads_clocks_or_logging() -> None:
    bad = {}
    for path in (PACKAGE / PURE_LAYER).rglob("*.py"):
        found = imports_of(path)[1] & FORBIDDEN_IN_PURE
        if found:
            bad[module_name(path)] = sorted(found)
    assert not bad, f"the pure state package reports through events instead: {bad}"


def test_every_allowed_exception_is_still_needed() -> None:
    edges = graph()
    stale = [pair for pair in ALLOWED if pair[1] not in edges.get(pair[0], set())]
    assert not stale, f"ALLOWED lists arrows that no longer exist, drop them: {stale}"


def test_the_checker_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    # The checker itself must not be blind: a file with both kinds is read right.
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .._engine.run.driver import Driver\n"
        "def f():\n    import threading\n    from .plan import Plan\n"
    )
    fake = tmp_path / "probe.py"
    fake.write_text(source, encoding="utf-8")
    ours, others = imports_of(fake, module="_state.probe")
    assert ours == {"_engine.run.driver", "_state.plan"}
    assert "threading" in others


# The engine's rooms, highest first: a room may import itself and the rooms after it.
ENGINE_ROOMS = ("front", "run", "workers", "process")


def test_the_engine_rooms_import_only_the_rooms_below_them() -> None:
    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "_engine" and len(parts) > 2 else None

    wrong = []
    for module, targets in graph().items():
        mine = room(module)
        if mine is None:
            continue
        below = ENGINE_ROOMS[ENGINE_ROOMS.index(mine) :]
        for target in targets:
            theirs = room(target)
            if theirs is not None and theirs not in below and (module, target) not in ALLOWED:
                wrong.append(f"{module} -> {target}")
    assert not wrong, f"an engine room imports a room above it: {wrong}"


# Loaded by path in a bare child interpreter, before (and without) dagexec.
CHILD_SIDE = ("_engine/process/child.py", "_engine/process/transfer.py")


def test_the_child_side_modules_import_nothing_from_dagexec() -> None:
    for relative in CHILD_SIDE:
        path = PACKAGE / relative
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ours = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (
                (node.level and f"_engine/process/{node.module}.py" not in CHILD_SIDE)
                or (node.module or "").split(".")[0] == "dagexec"
            ):  # each other, yes (relative when imported, by file in a child): nothing else
                ours.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''}")
            elif isinstance(node, ast.Import):
                ours += [
                    f"line {node.lineno}: import {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] == "dagexec"
                ]
        assert not ours, f"{relative} is loaded in a bare child and imports dagexec: {ours}"


def test_the_process_backend_loads_on_its_first_use_not_at_import() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, dagexec\n"
        "before = 'dagexec._engine.process.process_pool' in sys.modules\n"
        "g = dagexec.Graph()\n"
        "g.add('t', abs, args=(-2,), isolate='process')\n"
        "value = dagexec.run(g)['t']\n"
        "after = 'dagexec._engine.process.process_pool' in sys.modules\n"
        "print(before, after, value)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert out == ["False", "True", "2"]
