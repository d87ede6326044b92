"""The loop-closure trap, seen before the run: tasks that will all read a variable's last value.

``for f in files: g.add(("load", f), lambda: load(f))`` gives every task the last
``f``: the lambdas share one code object and read ``f`` (a closure cell, in a
function; a module global, at module level) when they run, after the loop is
over. The graph can see it: when a task is added, :func:`watch` records what
its function reads from cells and module globals (the values themselves); when
the graph is validated, :func:`warn_loop_closures` looks for tasks with the same
code reading the same cell or global that held different values at their adds,
and warns once per such variable.

Cost: nothing on ``Graph.add``'s fast path (a function that reads a cell or a
data global never takes it; see ``Graph._add``), and for the rest one pass over
the function's free variables and ``co_names``. The values are kept (not their
ids) so that a freed value's id, reused by the next one, cannot hide a change;
they are what the functions read anyway, so a correct graph keeps nothing more
alive than one reference per watched task.

Not watched: names read only by nested code (a comprehension or inner lambda
in 3.11), and globals holding a module, or a function or class under its own
name (imports and ``def``\\s, not loop variables).
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from .errors import LoopClosureWarning, describe

__all__ = ["Snapshot", "warn_loop_closures", "watch"]

# (code object, ((variable, where it lives: a cell or a globals dict, its value), ...))
Snapshot = tuple[types.CodeType, tuple[tuple[str, object, object], ...]]

_ABSENT = object()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def watch(fn: object, last: Snapshot | None = None) -> Snapshot | None:
    """What ``fn`` reads from closure cells and module globals now, or None if nothing
    that a loop could rebind (then ``fn`` may take ``Graph.add``'s fast path).

    Returns ``last`` itself when it holds the same reads (same code, same cells
    or globals, the very same values): tasks that read unchanged values share
    one snapshot.
    """
    if type(fn) is not types.FunctionType:
        return None  # functools.partial, a method, a callable object: values bound
    code = fn.__code__
    closure = fn.__closure__
    reads = _cell_reads(code, closure) if closure else []
    names = code.co_names
    if names:
        module = fn.__globals__
        for var in names:
            value = module.get(var, _ABSENT)
            if value is not _ABSENT and not _fixed(value, var):
                reads.append((var, module, value))
    if not reads:
        return None
    if last is not None and last[0] is code and _same_reads(last[1], reads):
        return last
    return (code, tuple(reads))


def _cell_reads(code: types.CodeType, closure: tuple[Any, ...]) -> list[tuple[str, object, object]]:
    """What ``fn`` reads from its closure cells now: (variable, cell, value) for each
    filled cell whose value a loop could rebind (a cell not yet filled is skipped)."""
    reads: list[tuple[str, object, object]] = []
    for var, cell in zip(code.co_freevars, closure, strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: nothing read yet
            continue
        if not _fixed(value, var):
            reads.append((var, cell, value))
    return reads


def _same_reads(old: tuple[tuple[str, object, object], ...], new: list[Any]) -> bool:
    """True when ``new`` reads the same variables, from the same cells or globals,
    holding the very same values: then the task shares ``old``'s snapshot."""
    if len(old) != len(new):
        return False
    if len(new) == 1:  # the usual case: one variable, compared without the loop
        (var, where, value), (var2, where2, value2) = old[0], new[0]
        return where is where2 and value is value2 and var == var2
    for (var, where, value), (var2, where2, value2) in zip(old, new, strict=True):
        if var != var2 or where is not where2 or value is not value2:
            return False
    return True


def _fixed(value: object, var: str) -> bool:
    """True for what a loop does not rebind: a module, or a function or class
    bound to its own name (``def var``, ``class var``, ``import var``)."""
    kind = type(value)
    if kind is types.ModuleType:
        return True
    if kind is types.FunctionType or kind is types.BuiltinFunctionType or isinstance(value, type):
        return getattr(value, "__name__", None) == var
    return False


def warn_loop_closures(names: Sequence[Hashable], watched: Mapping[int, Snapshot]) -> None:
    """Warn (:class:`~dagexec.LoopClosureWarning`) once per variable that tasks sharing
    one function body read, and that held different values when they were added."""
    # Tasks that read the same values share one snapshot object: grouped by it
    # first, so a million adds of one function cost one pass over a dict.
    by_snapshot: dict[int, tuple[Snapshot, list[int]]] = {}
    for position, snapshot in watched.items():
        entry = by_snapshot.get(id(snapshot))
        if entry is None:
            by_snapshot[id(snapshot)] = (snapshot, [position])
        else:
            entry[1].append(position)
    groups: dict[tuple[types.CodeType, str, int], list[tuple[int, object]]] = {}
    for (code, reads), positions in by_snapshot.values():
        for var, where, value in reads:
            group = groups.setdefault((code, var, id(where)), [])
            group.extend((p, value) for p in positions)
    for (code, var, _), members in groups.items():
        if len(members) > 1 and _differ([value for _, value in members]):
            warnings.warn(
                _message(names, code, var, members),
                LoopClosureWarning,
                stacklevel=_user_stacklevel(),
            )


def _differ(values: list[object]) -> bool:
    first = values[0]
    for value in values[1:]:
        if value is first:
            continue
        try:
            if value != first:
                return True
        except Exception:  # cannot compare: different objects, so assume different
            return True
    return False


def _message(
    names: Sequence[Hashable], code: types.CodeType, var: str, members: list[tuple[int, Any]]
) -> str:
    shown = ", ".join(describe(names[p]) for p, _ in members[:3])
    more = f" and {len(members) - 3} more" if len(members) > 3 else ""
    last = members[-1][1]
    try:
        last_text = repr(last)
    except Exception:
        last_text = f"<{type(last).__name__}>"
    if len(last_text) > 60:
        last_text = last_text[:57] + "..."
    function = f"{code.co_qualname} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    return (
        f"tasks {shown}{more} share the function {function}, which reads the variable "
        f"{var!r} when the task runs, not when it was added: {var!r} changed between "
        f"their adds, so every one of them will see its last value ({last_text}). Pass "
        f"the value when adding the task: g.add(name, fn, args=({var},)) with fn taking "
        f"{var} as a parameter (or functools.partial(fn, {var}), or a default argument: "
        f"lambda {var}={var}: ...)"
    )


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside dagexec, so the warning points at it."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
