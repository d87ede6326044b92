"""Whole-graph checks, and the indexed form every later stage works on. Pure.

Names are arbitrary hashables, but the planner and the scheduler only ever touch
integer indices: list indexing is cheaper than hashing user objects on the hot
path, and a million-task graph stays a handful of flat tuples. Nothing here
recurses on graph depth, so a 200,000-task chain validates like any other graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._errors import CycleError, MissingDependencyError

if TYPE_CHECKING:
    from ._plan import Plan
    from ._policy import Policy

__all__ = ["CompiledGraph", "compile_graph"]

_WHITE, _GREY, _BLACK = 0, 1, 2


class CompiledGraph:
    """A validated graph in index form: task ``i`` is ``names[i]``, computed by
    ``fns[i]`` from the results of ``deps[i]``.

    Immutable once built, except for the plans cached by :mod:`dagexec._plan`,
    which depend only on the immutable fields.
    """

    __slots__ = (
        "deps",
        "fns",
        "index",
        "maps",
        "names",
        "needs",
        "plans",
        "policy",
        "priority",
        "sinks",
    )

    def __init__(
        self,
        names: tuple[Hashable, ...],
        index: dict[Hashable, int],
        fns: tuple[Callable[..., Any], ...],
        deps: tuple[tuple[int, ...], ...],
        sinks: tuple[int, ...],
        priority: tuple[int, ...] | None = None,
        needs: tuple[tuple[tuple[str, float], ...], ...] | None = None,
        maps: frozenset[int] | None = None,
        policy: tuple[Policy | None, ...] | None = None,
    ) -> None:
        self.names = names
        self.index = index
        self.fns = fns
        self.deps = deps
        self.sinks = sinks
        # Per task, or None when no task has one (see Plan).
        self.priority = priority
        self.needs = needs
        self.maps = maps  # g.map tasks, or None
        self.policy = policy  # per task (None: no policy), or None when no task has one
        # Plans by their target indices; owned by _plan.plan_run.
        self.plans: dict[tuple[int, ...] | None, Plan] = {}

    def __len__(self) -> int:
        return len(self.names)


def compile_graph(
    names: Sequence[Hashable],
    fns: Sequence[Callable[..., Any]],
    dep_names: Sequence[tuple[Hashable, ...]],
    priority: Mapping[int, int] | None = None,
    needs: Mapping[int, tuple[tuple[str, float], ...]] | None = None,
    maps: Iterable[int] = (),
    policy: Mapping[int, Policy] | None = None,
) -> CompiledGraph:
    """Check a graph given as columns and convert it to index form.

    Raises:
        MissingDependencyError: for the first task (in insertion order) with unknown deps.
        CycleError: if any cycle exists; the path is rotated to start at the task
            added first, so the message does not depend on hash order.
    """
    names = tuple(names)
    index = dict(zip(names, range(len(names)), strict=True))
    to_index = index.__getitem__
    try:
        deps = tuple([tuple(map(to_index, d)) for d in dep_names])
    except KeyError:
        for name, task_deps in zip(names, dep_names, strict=True):
            missing = [d for d in dict.fromkeys(task_deps) if d not in index]
            if missing:
                raise MissingDependencyError(name, missing) from None
        raise  # unreachable: some dependency was missing
    # Each dep added before its task (the common case) proves there is no cycle.
    if any(d and max(d) >= i for i, d in enumerate(deps)):
        cycle = _find_cycle(deps)
        if cycle is not None:
            raise CycleError([names[i] for i in cycle])
    has_dependents = set().union(*deps) if deps else set()
    sinks = tuple([i for i in range(len(names)) if i not in has_dependents])
    n = len(names)
    return CompiledGraph(
        names,
        index,
        tuple(fns),
        deps,
        sinks,
        tuple([priority.get(i, 0) for i in range(n)]) if priority else None,
        tuple([needs.get(i, ()) for i in range(n)]) if needs else None,
        frozenset(maps) or None,
        tuple([policy.get(i) for i in range(n)]) if policy else None,
    )


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
