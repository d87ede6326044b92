"""The run's columns grow: a map's items become tasks of the run.

Part of the run state machine, and as pure. A run whose plan has a map starts
with per-run lists instead of the plan's tuples (:func:`make_growable`), so that
:func:`add_items`, bound as ``RunState.add_items``, can append a map's items:
the one place the columns grow. When a map expands and what its items are is
:mod:`dagexec._state.fanout`'s to decide; it reaches the columns only through
``add_items`` and RunState's other public methods.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

from .._core.result import WAITING
from .events import EXPAND, Event

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["add_items", "make_growable"]


def make_growable(run: RunState) -> None:
    """Give ``run`` per-run lists for its columns, which :func:`add_items` appends to."""
    plan = run.plan
    run.names = list(plan.names)
    run.index = dict(plan.index)
    run.fns = list(plan.fns)
    run.deps = list(plan.deps)
    run.dependents = [list(d) for d in plan.dependents]
    run.chain_next = list(plan.chain_next)
    run.is_target = bytearray(plan.target_mask)
    for attr in run.OPTION_COLUMNS:
        column = getattr(run, attr)
        if column is not None:
            setattr(run, attr, list(column))
    run.items = {}


def add_items(
    run: RunState, m: int, elements: list[Any] | None, source: range | None, keep: bool
) -> range:
    """Add map ``m``'s items as tasks of the run; ``m`` now waits for them. Returns them.

    Item ``i`` is named ``(name of m, i)`` and calls ``m``'s function, with its
    options (each of ``RunState.OPTION_COLUMNS``), on ``elements[i]`` (kept until its dispatch)
    and ``m``'s extra dependencies; or, for a map over the expanded map whose
    items are ``source``, on the value of ``source[i]``, which it waits for.
    ``keep``: ``m`` gathers its items' values (a task or the caller wants them).
    The map's own dependencies are the caller's to let go of.
    """
    extra = run.deps[m][1:]
    count = len(elements) if elements is not None else len(source or ())
    start = len(run.state)
    span = range(start, start + count)
    name, fn = run.names[m], run.fns[m]
    policy = run.policy[m] if run.policy is not None else None
    if run.cleanup is not None:
        # Its items keep the map's run_if only when they need nothing but the
        # extra deps (which have ended); an item of a map over a map still
        # waits for its source item, and is skipped if that fails.
        flag = policy is not None and policy.cleanup and source is None
        run.cleanup.extend(b"\x01" * count if flag else bytes(count))
    names = cast(list[Hashable], run.names)
    index = cast(dict[Hashable, int], run.index)
    fns = cast(list[Callable[..., Any]], run.fns)
    deps = cast(list[tuple[int, ...]], run.deps)
    dependents = cast(list[list[int]], run.dependents)
    chain_next = cast(list[int], run.chain_next)
    is_target = cast(bytearray, run.is_target)
    for attr in run.OPTION_COLUMNS:  # each item has its map's options
        column = cast("list[Any] | None", getattr(run, attr))
        if column is not None:
            column.extend(repeat(column[m], count))
    items = run.items
    assert items is not None
    state, values, remaining, consumers = run.state, run.values, run.remaining, run.consumers
    for i, t in enumerate(span):
        task_name = (name, i)
        names.append(task_name)
        index[task_name] = t
        fns.append(fn)
        deps.append(extra if source is None else (source[i], *extra))
        dependents.append([m])
        chain_next.append(-1)
        state.append(WAITING)
        values.append(None)
        remaining.append(0 if source is None else 1)
        consumers.append(1 if keep else 0)
        is_target.append(0)
        if elements is not None:
            items[t] = elements[i]
        else:
            assert source is not None
            dependents[source[i]].append(t)
    run.unfinished += count
    if run.events is not None:  # before any item's own events
        run.events.append(Event(EXPAND, m, items=count))
    for d in extra:  # each item reads them instead of the map
        consumers[d] += count
    run.remaining[m] = count
    return span
