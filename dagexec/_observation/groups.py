"""Task groups: which step of a pipeline a task is, for colouring pictures.

A Gantt chart of a nightly batch has hundreds of bars; what a reader wants to
tell apart is the steps (every ``load`` of a file, every item of the ``parse``
map), not single tasks. A map's items are one group named after the map; any
other task's group is its function's name, looked up through the wrappers the
engine puts around it (constant ``args=``, checkpoint saving, ``functools.partial``).
A lambda has no useful name, so a lambda task is grouped by its name's first
part (``("load", "a.csv")`` -> ``load``), or by its name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["LOADED_GROUP", "function_group", "task_group"]

LOADED_GROUP = "loaded from checkpoint"

# How deep to look through wrappers: a guard against a wrapper cycle, far more
# than the engine's own nesting (checkpoint saving around args= binding).
_MAX_UNWRAP = 8


def _unwrap(fn: Any) -> Any:
    for _ in range(_MAX_UNWRAP):
        if isinstance(fn, functools.partial):
            fn = fn.func
            continue
        inner = getattr(fn, "__wrapped__", None)
        if inner is None and type(fn).__name__ in ("BoundCall", "KeywordCall"):
            inner = getattr(fn, "fn", None)
        if inner is None and type(fn).__name__ == "IsolatedCall":  # isolate="process"
            inner = getattr(fn, "call", None)
        if inner is None:
            break
        fn = inner
    return fn


def function_group(fn: Callable[..., Any]) -> str | None:
    """The name of the function behind ``fn``, or None for a lambda or a nameless callable."""
    inner = _unwrap(fn)
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None)
    if not isinstance(name, str):
        name = type(inner).__name__  # a callable object: its class names the step
    if "<lambda>" in name:
        return None
    return name.rsplit("<locals>.", 1)[-1]


def task_group(name: Hashable, fn: Callable[..., Any] | None, *, map_item: bool) -> str:
    """The group of task ``name`` running ``fn``; ``map_item``: it is an item ``(map, i)``."""
    from .draw import display_name

    if map_item and isinstance(name, tuple) and name:
        return display_name(name[0])
    group = function_group(fn) if fn is not None else None
    if group is not None:
        return group
    if isinstance(name, tuple) and name:
        return display_name(name[0])
    return display_name(name)
