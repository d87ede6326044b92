"""Pruning a validated graph to what a run needs. Pure but for the plan cache.

A run asked for some targets executes exactly those targets and their ancestors,
so the plan is built from the targets backwards and costs time proportional to
the part that runs, not to the whole graph. Plans are cached on the compiled
graph (which the graph drops on every change), so asking for the same outputs
again costs a dictionary look-up.

Several threads may plan runs of one graph at once (``dagexec.run`` from two
threads, a shared graph in a server). The cache look-up is one dict operation;
the eviction (iterate, delete, insert) is three, so it takes ``_CACHE_LOCK``:
without it two threads evicted the same key (``KeyError``) or iterated a dict
another thread was growing (``RuntimeError``), with or without the GIL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import UnknownTargetError
from ._validate import CompiledGraph

__all__ = ["Plan", "plan_run"]

# Plans kept per compiled graph. Each costs memory proportional to its size; a
# program alternating between more target sets than this just rebuilds some.
_PLAN_CACHE_SIZE = 16
# Guards every change to a ``CompiledGraph.plans`` dict (one lock for all graphs:
# it is taken only when a plan is built, never on a cache hit).
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """The tasks one run executes, in local index form (0..len-1).

    ``deps`` and ``dependents`` are both restricted to the plan, so the scheduler
    never sees a task that is not going to run. ``chain_next[i]`` is the task that
    may run right after ``i`` in the same dispatched unit, or -1 (see
    :func:`_chain_links`).
    """

    names: tuple[Hashable, ...]
    index: Mapping[Hashable, int]
    fns: tuple[Callable[..., Any], ...]
    deps: tuple[tuple[int, ...], ...]
    dependents: tuple[tuple[int, ...], ...]
    targets: tuple[int, ...]
    roots: tuple[int, ...]
    chain_next: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.names)


def plan_run(compiled: CompiledGraph, targets: Iterable[Hashable] | None) -> Plan:
    """The plan for running ``targets`` (all sinks when None) of a compiled graph.

    Raises:
        TypeError: ``targets`` is a single string or not iterable.
        UnknownTargetError: a target is not a task of the graph.
    """
    key = None if targets is None else _target_ids(compiled, targets)
    plans = compiled.plans
    plan = plans.get(key)
    if plan is None:
        # Built outside the lock (it can take a while on a large graph); two
        # threads may both build it, and both plans are equal.
        plan = _whole_plan(compiled) if key is None else _partial_plan(compiled, key)
        with _CACHE_LOCK:
            if key not in plans and len(plans) >= _PLAN_CACHE_SIZE:
                del plans[next(iter(plans))]
            plans[key] = plan
    return plan


def _target_ids(compiled: CompiledGraph, targets: Iterable[Hashable]) -> tuple[int, ...]:
    if isinstance(targets, (str, bytes)):
        raise TypeError(
            f"targets must be a collection of task names, got the string {targets!r}; "
            f"write targets=[{targets!r}]"
        )
    try:
        requested = list(dict.fromkeys(targets))
    except TypeError:
        raise TypeError(
            f"targets must be a collection of task names, got {type(targets).__name__} {targets!r}"
        ) from None
    index = compiled.index
    unknown = [t for t in requested if t not in index]
    if unknown:
        raise UnknownTargetError(unknown)
    return tuple(index[t] for t in requested)


def _dependents_of(deps: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    dependents: list[list[int]] = [[] for _ in deps]
    for task, task_deps in enumerate(deps):
        for d in task_deps:
            dependents[d].append(task)
    return tuple(map(tuple, dependents))


def _chain_links(
    deps: tuple[tuple[int, ...], ...],
    dependents: tuple[tuple[int, ...], ...],
    targets: tuple[int, ...],
) -> tuple[int, ...]:
    """Link each task to the one that can follow it in a single hand-off, or -1.

    ``i`` links to ``j`` when ``j`` is the only task needing ``i``, ``i`` is all
    that ``j`` needs, and nobody asked for ``i``'s value. Such a run is sequential
    anyway, so handing it to one worker as one unit loses no parallelism and saves
    a scheduler round trip per task: the one cost a chain cannot otherwise avoid
    (about 70 us per hand-off between two threads, measured on our 2-core CI
    machine). Like dask's ``fuse``.
    """
    links = [-1] * len(deps)
    for i, users in enumerate(dependents):
        if len(users) == 1 and len(deps[users[0]]) == 1:
            links[i] = users[0]
    for t in targets:  # a target's value is wanted: it must come back on its own
        links[t] = -1
    return tuple(links)


def _whole_plan(compiled: CompiledGraph) -> Plan:
    deps = compiled.deps
    dependents = _dependents_of(deps)
    return Plan(
        names=compiled.names,
        index=compiled.index,
        fns=compiled.fns,
        deps=deps,
        dependents=dependents,
        targets=compiled.sinks,
        roots=tuple(i for i, d in enumerate(deps) if not d),
        chain_next=_chain_links(deps, dependents, compiled.sinks),
    )


def _partial_plan(compiled: CompiledGraph, target_ids: tuple[int, ...]) -> Plan:
    all_deps = compiled.deps
    needed = set(target_ids)
    stack = list(needed)
    while stack:
        for d in all_deps[stack.pop()]:
            if d not in needed:
                needed.add(d)
                stack.append(d)
    # Keep insertion order: dispatch order then follows the order tasks were added.
    order = sorted(needed)
    local = {g: i for i, g in enumerate(order)}
    deps = tuple(tuple([local[d] for d in all_deps[g]]) for g in order)
    names = tuple(compiled.names[g] for g in order)
    dependents = _dependents_of(deps)
    targets = tuple(local[t] for t in target_ids)
    return Plan(
        names=names,
        index={name: i for i, name in enumerate(names)},
        fns=tuple(compiled.fns[g] for g in order),
        deps=deps,
        dependents=dependents,
        targets=targets,
        roots=tuple(i for i, d in enumerate(deps) if not d),
        chain_next=_chain_links(deps, dependents, targets),
    )
