"""Whole-graph checks, and the indexed form every later stage works on. Pure.

Names are arbitrary hashables, but the planner and the scheduler only ever touch
integer indices: list indexing is cheaper than hashing user objects on the hot
path, and a million-task graph stays a handful of flat tuples. Nothing here
recurses on graph depth, so a 200,000-task chain validates like any other graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from itertools import compress
from typing import Any, cast

from .errors import CycleError, MissingDependencyError
from .item_names import item_dep_message, item_of
from .task_options import PLAIN, TaskRecord

__all__ = ["CompiledGraph", "compile_graph"]

_WHITE, _GREY, _BLACK = 0, 1, 2


class CompiledGraph:
    """A validated graph in index form: task ``i`` is ``names[i]``, computed by
    ``fns[i]`` from the results of ``deps[i]``.

    Immutable once built, except for the plans cached by :mod:`dagexec._core.plan` and
    the sinks, found on first use; both depend only on the immutable fields.
    """

    __slots__ = (
        "_sinks",
        "deps",
        "fns",
        "index",
        "maps",
        "names",
        "options",
        "plans",
    )

    def __init__(
        self,
        names: tuple[Hashable, ...],
        index: dict[Hashable, int],
        fns: tuple[Callable[..., Any], ...],
        deps: tuple[tuple[int, ...], ...],
        options: tuple[TaskRecord, ...] | None = None,
        maps: frozenset[int] | None = None,
    ) -> None:
        self.names = names
        self.index = index
        self.fns = fns
        self.deps = deps
        self._sinks: tuple[int, ...] | None = None
        # Each task's options (PLAIN: none), or None when no task has any.
        self.options = options
        self.maps = maps  # g.map tasks, or None
        # Plans by their target indices: plan.plan_run's cache, which it alone
        # writes (Graph._plan reads a warm whole run's back; both check that
        # what they read is a Plan), typed loosely here so that this module,
        # below plan.py, need not import it back.
        self.plans: dict[tuple[int, ...] | None, object] = {}

    def __len__(self) -> int:
        return len(self.names)

    @property
    def sinks(self) -> tuple[int, ...]:
        """The tasks nothing depends on, ascending: what a run without targets returns.

        Found on first use rather than when the graph is validated: a graph run for
        chosen targets never needs them. Two threads may both compute them; they
        get equal tuples.
        """
        sinks = self._sinks
        if sinks is None:
            self._sinks = sinks = sinks_of(self.deps)
        return sinks


def compile_graph(
    names: Sequence[Hashable],
    index: dict[Hashable, int],
    fns: Sequence[Callable[..., Any]],
    dep_ids: Sequence[tuple[int, ...] | None],
    unresolved: Sequence[int],
    dep_names: Sequence[tuple[Hashable, ...]],
    options: Mapping[int, TaskRecord] | None = None,
    maps: Iterable[int] = (),
) -> CompiledGraph:
    """Check a graph given as columns and convert it to index form.

    ``index`` maps each name to its position and becomes the compiled graph's own
    (the caller must not change it afterwards). ``dep_ids[i]`` are task ``i``'s
    dependencies as positions, resolved when it was added, or None for the tasks
    listed in ``unresolved`` (ascending), which named a task not added yet: only
    those are looked up here, by ``dep_names``. A dependency resolved when its
    task was added came before it, so only the tasks resolved here can close a
    cycle, and a graph built in dependency order is checked without a walk.

    Raises:
        MissingDependencyError: for the first task (in insertion order) with unknown deps.
        CycleError: if any cycle exists; the path is rotated to start at the task
            added first, so the message does not depend on hash order.
    """
    names = tuple(names)
    if unresolved:
        resolved = list(dep_ids)
        to_index = index.__getitem__
        for i in unresolved:
            try:
                resolved[i] = tuple(map(to_index, dep_names[i]))
            except KeyError:
                missing = [d for d in dict.fromkeys(dep_names[i]) if d not in index]
                if missing:
                    raise MissingDependencyError(names[i], missing) from None
                raise  # a name whose hash or == raised KeyError: its own error
        deps = cast("tuple[tuple[int, ...], ...]", tuple(resolved))
        if any(max(deps[i]) >= i for i in unresolved):  # an edge to a later task
            cycle = _find_cycle(deps)
            if cycle is not None:
                raise CycleError([names[i] for i in cycle])
    else:
        deps = cast("tuple[tuple[int, ...], ...]", tuple(dep_ids))
    records = None
    if options:
        records = tuple([options.get(i, PLAIN) for i in range(len(names))])
    return CompiledGraph(names, index, tuple(fns), deps, records, frozenset(maps) or None)


def explain_missing(
    exc: MissingDependencyError,
    names: Sequence[Hashable],
    index: Mapping[Hashable, int],
    maps: Iterable[int],
    inferred: Mapping[int, str],
) -> MissingDependencyError:
    """:func:`compile_graph`'s error, with "did you mean" and where @g.task found the names.

    ``maps`` are the positions of the graph's maps (a missing name may be one
    of their items), ``inferred`` the function each task read its deps from.
    """
    map_names = {names[i] for i in maps}
    if map_names:
        for missing in exc.missing:
            item = item_of(missing, map_names)
            if item is not None:
                message = item_dep_message(exc.task, missing, *item)
                return MissingDependencyError(exc.task, [missing], message=message)
    return MissingDependencyError(
        exc.task, exc.missing, known=names, inferred_from=inferred.get(index[exc.task])
    )


def sinks_of(deps: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The tasks no task depends on, ascending."""
    used = bytearray(len(deps))
    for task_deps in deps:
        for d in task_deps:
            used[d] = 1
    # used.translate flips 0 and 1: compress then keeps the unused positions.
    return tuple(compress(range(len(deps)), used.translate(_FLIP)))


_FLIP = bytes([1]) + bytes(255)


def _find_cycle(deps: tuple[tuple[int, ...], ...]) -> list[int] | None:
    """Return one cycle in data-flow order (first == last), or None. Iterative DFS."""
    color = bytearray(len(deps))
    for root in range(len(deps)):
        if color[root] != _WHITE:
            continue
        path = [root]
        cursor = [0]  # cursor[k]: next dep of path[k] to explore
        color[root] = _GREY
        while path:
            node = path[-1]
            node_deps = deps[node]
            k = cursor[-1]
            if k == len(node_deps):
                color[node] = _BLACK
                path.pop()
                cursor.pop()
                continue
            cursor[-1] = k + 1
            dep = node_deps[k]
            if color[dep] == _WHITE:
                color[dep] = _GREY
                path.append(dep)
                cursor.append(0)
            elif color[dep] == _GREY:
                # path[start:] runs dep -> ... -> node along "depends on" edges;
                # reversed, it is the data-flow order.
                loop = path[path.index(dep) :][::-1]
                first = loop.index(min(loop))
                loop = loop[first:] + loop[:first]
                return [*loop, loop[0]]
    return None
