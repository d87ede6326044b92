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

No import may close a cycle. The only allowed exceptions are in ``ALLOWED``:
the public renderers (``RENDERERS``).

``RunState`` is one class built from layered base classes, one module each
(``dagexec/_state/runstate.py``): its behaviour is its classes', never a
function of another module bound in a class body nor a method assigned to an
instance (the last two tests).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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

# Every import is an arrow, and no arrow may close a cycle or point up a layer,
# with the exceptions below, each named, with its reason.

# The public renderers: a convenience method of a result type that imports its
# renderer when called (upward, and the renderer reads the result type back).
# Each arrow may appear only inside the methods named here
# (test_the_renderer_arrows_are_only_in_the_renderers).
RENDERERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("_core.graph", "_observation.draw"): ("to_dot", "to_mermaid"),  # Graph.to_dot, to_mermaid
    ("_core.result", "_observation.chrome"): ("trace_to_chrome",),  # RunResult.trace_to_chrome
    ("_core.result", "_observation.gantt"): ("gantt_svg",),  # RunResult.gantt_svg
    ("_core.result", "_observation.report"): ("report_html",),  # RunResult.report_html
}

# (importer, imported) arrows that break the rules on purpose, with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    **{arrow: f"the public renderer {', '.join(names)}" for arrow, names in RENDERERS.items()},
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
    ours: set[str] = set()
    others: set[str] = set()
    for targets, external, _ in arrows_of(path, module):
        ours.update(targets)
        others.update(external)
    ours.discard(module or module_name(path))
    return ours, others


def arrows_of(path: Path, module: str | None = None) -> list[tuple[set[str], set[str], str | None]]:
    """Per import statement of one file: (dagexec modules, other top-level modules,
    the name of the function it is in, or None at module level)."""
    module = module or module_name(path)
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package and module != "__init__" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    enclosing: dict[ast.AST, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                enclosing[node] = fn.name  # the innermost, as inner ones come later
    found: list[tuple[set[str], set[str], str | None]] = []
    for node in ast.walk(tree):
        ours: set[str] = set()
        others: set[str] = set()
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
                target = None
            for alias in node.names if target is not None else ():
                sub = f"{target}.{alias.name}" if target else alias.name  # `from . import x`
                ours.add(sub if sub in known else (target or "__init__"))
        else:
            continue
        found.append((ours, others, enclosing.get(node)))
    return found


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


def test_the_renderer_arrows_are_only_in_the_renderers() -> None:
    wrong = []
    for (importer, imported), methods in RENDERERS.items():
        path = PACKAGE.joinpath(*importer.split(".")).with_suffix(".py")
        for ours, _, function in arrows_of(path):
            if imported in ours and function not in methods:
                wrong.append(f"{importer} -> {imported} in {function or 'module level'}")
    assert not wrong, f"a renderer's import outside its renderer method: {wrong}"


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


def _run_states() -> list[object]:
    """RunStates of every make: plain, observed, ranked, with resources, maps,
    retries and cleanup tasks, first-in first-out."""
    from dagexec._core.plan import plan_run
    from dagexec._state import runstate

    made: list[object] = []
    for kwargs in (
        {},
        {"priority": 2},
        {"resources": {"cpu": 1}},
        {"retries": 1},
        {"run_if": "all_done"},
    ):
        g = dagexec.Graph()
        g.add("a", lambda: [1, 2])
        g.add("b", lambda a: a, deps=["a"], **kwargs)
        g.map("m", lambda x: x, over="a")
        plan = plan_run(g._compile(), None)
        made.append(runstate.RunState(plan, observed=True, capacity={"cpu": 2}))
        made.append(runstate.RunState(plan))
    return made


def test_no_method_of_the_run_state_is_assigned_per_instance() -> None:
    # An instance attribute that shadows a class attribute is behaviour swapped
    # per instance: what a method does would depend on how the run was made.
    # The run's fields are slots (core.RunCore): an instance has no dict to hold
    # such an attribute, and assigning a method's name fails.
    for state in _run_states():
        shadowed = set(getattr(state, "__dict__", ())) & {
            n for n in dir(type(state)) if not n.startswith("__")
        }
        assert not shadowed, f"{type(state).__name__} instance shadows its class: {shadowed}"
        assert not hasattr(state, "__dict__")
        with pytest.raises(AttributeError):
            setattr(state, "hand_out", len)  # what a swap would write


def test_the_run_state_binds_no_function_of_another_module() -> None:
    # Each method is defined in the class body it is found in: no
    # ``hand_out = dispatch.hand_out`` (a function of the run bound as its method).
    from dagexec._state.runstate import RunState

    borrowed = []
    for cls in RunState.__mro__[:-1]:
        for name, value in vars(cls).items():
            qualname = getattr(value, "__qualname__", None) if callable(value) else None
            if qualname is not None and not qualname.startswith(f"{cls.__name__}."):
                borrowed.append(f"{cls.__name__}.{name} is {qualname}")
    assert not borrowed, f"functions bound into RunState's classes: {borrowed}"
