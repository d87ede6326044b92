"""Pruning a validated graph to what a run needs. Pure, apart from a locked cache.

A run asked for some targets executes exactly those targets and their ancestors,
so the plan is built from the targets backwards and costs time proportional to
the part that runs, not to the whole graph. Plans are cached on the compiled
graph (which the graph drops on every change), so asking for the same outputs
again costs a dictionary look-up. Several threads may run one graph at once (on
one executor or on several), so the caches are guarded by :data:`_plans_lock`;
plans themselves are immutable and built outside it.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, compress
from operator import add, attrgetter, not_
from typing import Any, NamedTuple

from .errors import UnknownTargetError, describe
from .item_names import item_of, item_target_message
from .loads import LoadedDuringRun
from .policy import Policy
from .task_options import PLAIN, TaskRecord, without_run_options
from .validate import CompiledGraph

__all__ = [
    "Plan",
    "check_resources",
    "normalise_targets",
    "option_columns",
    "plan_run",
    "restrict_plan",
    "topological_order",
]

# Plans kept per compiled graph. Each costs memory proportional to its size; a
# program alternating between more target sets than this just rebuilds some.
_PLAN_CACHE_SIZE = 16

# Must be held while reading or changing any CompiledGraph.plans. One lock for
# every graph: it is held for a dictionary look-up or insertion only, never while
# a plan is built.
_plans_lock = threading.Lock()


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
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
    # Each task's options (PLAIN: none), or None when no task of the plan has any
    # (the common case, which then costs the scheduler nothing).
    options: tuple[TaskRecord, ...] | None = None
    # The options the per-task hot path reads, as flat columns derived from
    # ``options`` by option_columns: per task, or None when no task has one.
    priority: tuple[int, ...] | None = None
    needs: tuple[tuple[tuple[str, float], ...], ...] | None = None
    policy: tuple[Policy | None, ...] | None = None  # retries, timeouts, cleanup tasks
    maps: frozenset[int] | None = None  # g.map tasks: expanded at run time
    # Per-run counters start as copies of these (a C-level copy per run, not a
    # Python loop): dependencies per task; consumers per task, that is its users
    # plus one for a target (the caller, who reads it at the end: so a target's
    # count never reaches 0 and its value is never dropped, with no separate
    # test for targets on the hot path); 1 for each target.
    dep_counts: tuple[int, ...] = ()
    use_counts: tuple[int, ...] = ()
    target_mask: bytes = b""
    # Tasks whose value a checkpoint supplied (see restrict_plan), or None.
    loaded: frozenset[int] | None = None
    # Tasks a checkpoint's wrappers loaded during the run (decided on their
    # worker: see dagexec._core.loads), or None without a checkpoint.
    loaded_during: LoadedDuringRun | None = None
    # Whether any task heads a chain: without chains (and policies) every item the
    # scheduler builds is a plain job. Derived from chain_next, once per plan.
    chained: bool = field(init=False, default=False)
    # The targets' names, in order: every run's result is keyed by them. Read off
    # once per plan, not per run (the million-task graph has ~175,000 targets, and
    # picking their names cost ~30 ms a run).
    target_names: tuple[Hashable, ...] = field(init=False, default=())
    # The one part its runs write: the depth its last run's first samples asked
    # for, where the next starts (0: none yet; _engine/run/depth.py).
    first_depth: list[int] = field(init=False, default_factory=lambda: [0])

    def __post_init__(self) -> None:
        chain_next = self.chain_next
        object.__setattr__(self, "chained", chain_next.count(-1) != len(chain_next))
        object.__setattr__(self, "target_names", tuple(map(self.names.__getitem__, self.targets)))
        if not self.dep_counts and self.names:
            mask = bytearray(len(self.names))
            for t in self.targets:
                mask[t] = 1
            object.__setattr__(self, "dep_counts", tuple(map(len, self.deps)))
            object.__setattr__(self, "use_counts", tuple(map(add, map(len, self.dependents), mask)))
            object.__setattr__(self, "target_mask", bytes(mask))

    def __len__(self) -> int:
        return len(self.names)


def plan_run(compiled: CompiledGraph, targets: Iterable[Hashable] | None) -> Plan:
    """The plan for running ``targets`` (all sinks when None) of a compiled graph.

    Raises:
        TypeError: ``targets`` is a single string or not iterable.
        UnknownTargetError: a target is not a task of the graph.
    """
    key = None if targets is None else _target_ids(compiled, normalise_targets(targets))
    plans = compiled.plans
    with _plans_lock:
        cached = plans.get(key)
    if isinstance(cached, Plan):
        return cached
    # Two threads may both build this plan; they are equal, and the first one in wins.
    plan = _whole_plan(compiled) if key is None else _partial_plan(compiled, key)
    with _plans_lock:
        cached = plans.get(key)
        if isinstance(cached, Plan):
            return cached
        if len(plans) >= _PLAN_CACHE_SIZE:
            del plans[next(iter(plans))]
        plans[key] = plan
    return plan


def normalise_targets(targets: Iterable[Hashable]) -> tuple[Hashable, ...]:
    """``targets`` as a tuple of distinct names in the order given, read exactly once.

    Callers that check the targets before a run and then run must pass this tuple
    on, not the original: a generator or any other one-shot iterable would be
    empty the second time.

    Raises:
        TypeError: ``targets`` is a single string or not iterable.
    """
    expected = "targets must be a collection of task names"
    if isinstance(targets, str):
        raise TypeError(f"{expected}, got the string {targets!r}; write targets=[{targets!r}]")
    if isinstance(targets, bytes):
        raise TypeError(
            f"{expected}, got bytes {targets!r}, which would be read as the integers "
            f"{', '.join(map(str, targets[:3]))}{', ...' if len(targets) > 3 else ''}; "
            f"for the one name, write targets=[{targets!r}]"
        )
    if isinstance(targets, (bytearray, memoryview)):
        name = bytes(targets)
        raise TypeError(
            f"{expected}, got {type(targets).__name__} {targets!r}, which would be read as "
            f"integers; for the one name, write targets=[{name!r}] (bytes: hashable)"
        )
    try:
        return tuple(dict.fromkeys(targets))
    except TypeError:
        raise TypeError(
            f"targets must be a collection of task names, got {type(targets).__name__} {targets!r}"
        ) from None


def _target_ids(compiled: CompiledGraph, requested: tuple[Hashable, ...]) -> tuple[int, ...]:
    index = compiled.index
    unknown = [t for t in requested if t not in index]
    if unknown:
        if compiled.maps:
            maps = {compiled.names[m] for m in compiled.maps}
            for t in unknown:
                item = item_of(t, maps)
                if item is not None:
                    raise UnknownTargetError([t], message=item_target_message(t, *item))
        raise UnknownTargetError(unknown, index)
    return tuple(index[t] for t in requested)


def _dependents_of(
    deps: tuple[tuple[int, ...], ...], same: Sequence[int] | None = None
) -> tuple[tuple[int, ...], ...]:
    """For each task, the tasks that depend on it, ascending.

    ``same``, if given, holds at ``t`` the int object that stands for task ``t``
    in ``deps`` (see :func:`_numbers`); the dependents are made of those objects.

    Filled into one flat list and cut into tuples, rather than grown as one list
    per task: a million lists alive at once are each tracked by the garbage
    collector, whose full collections while they are made cost more than making
    them (on a million-task graph, 0.8 s of 1.4 s; this takes about 0.9 s).
    """
    counts = [0] * len(deps)
    for d in chain.from_iterable(deps):
        counts[d] += 1
    starts = [0, *accumulate(counts)]
    flat = [0] * starts.pop()  # the last start is the number of edges
    cursor = starts.copy()  # where the next dependent of each task goes
    for task, task_deps in zip(range(len(deps)) if same is None else same, deps, strict=True):
        for d in task_deps:
            flat[cursor[d]] = task
            cursor[d] += 1
    # Each task's block now runs from its start to its cursor. Listed before the
    # tuple is made: a tuple grown from an iterator is re-tracked by the garbage
    # collector on each resize and walked whole by the next young collection.
    return tuple(list(map(tuple, map(flat.__getitem__, map(slice, starts, cursor)))))


def _numbers(index: Mapping[Any, int]) -> Sequence[int] | None:
    """The int objects that ``deps`` were built from, in task order, or None.

    Above 256 every int is an object of its own, and ``deps`` hold the ones the
    name index holds. Dependents made of those same objects let the scheduler,
    which meets a task's number in both, touch one object per task rather than
    two far apart in memory: on the million-task graph a cache miss fewer per
    task (cachegrind, 2 MiB last-level cache, 50,000 tasks: 7.45 -> 6.54 misses
    per task). Checked in one C-level pass, not assumed.
    """
    numbers = list(index.values())
    return numbers if numbers == list(range(len(numbers))) else None


def _roots(deps: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The tasks without dependencies, ascending (one C-level pass)."""
    return tuple(compress(range(len(deps)), map(not_, deps)))


def _chain_links(
    deps: tuple[tuple[int, ...], ...],
    dependents: tuple[tuple[int, ...], ...],
    targets: tuple[int, ...],
    columns: OptionColumns | None = None,
    maps: frozenset[int] | None = None,
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
    _cut_links(links, columns or _NO_COLUMNS, maps)
    return tuple(links)


def _cut_links(links: list[int], columns: OptionColumns, maps: frozenset[int] | None) -> None:
    """Unlink, in place, the links that a task's own options forbid (see
    :func:`_apart_rules`); a plan whose tasks have no options pays no pass."""
    for apart in _apart_rules(columns, maps):
        for i, j in enumerate(links):
            if j >= 0 and apart(i, j):
                links[i] = -1


def _apart_rules(
    columns: OptionColumns, maps: frozenset[int] | None
) -> list[Callable[[int, int], bool]]:
    """Why two linked tasks ``i -> j`` must be dispatched apart, one rule per option in use.

    A map's value is assembled by the scheduler from its items: it is never part of a
    chain, either end. A follower runs right after its head, ahead of every ready task:
    only fair if the scheduler would have ranked it like the head, so one of another
    priority is dispatched on its own. A task holding resources is dispatched on its
    own, so what it holds is held exactly while it is out, not for a whole chain. A
    task with a policy is retried, timed out or run after failures on its own.
    """
    priority, needs, policy = columns.priority, columns.needs, columns.policy
    rules: list[Callable[[int, int], bool]] = []
    if maps is not None:
        rules.append(lambda i, j: i in maps or j in maps)
    if priority is not None:
        rules.append(lambda i, j: priority[i] != priority[j])
    if needs is not None:
        rules.append(lambda i, j: bool(needs[i] or needs[j]))
    if policy is not None:
        rules.append(lambda i, j: policy[i] is not None or policy[j] is not None)
    return rules


class OptionColumns(NamedTuple):
    """The flat columns of :class:`Plan`: per task, or None when no task has one."""

    priority: tuple[int, ...] | None = None
    needs: tuple[tuple[tuple[str, float], ...], ...] | None = None
    policy: tuple[Policy | None, ...] | None = None


_NO_COLUMNS = OptionColumns()


def option_columns(options: tuple[TaskRecord, ...] | None) -> OptionColumns:
    """The flat columns of the options the per-task hot path reads, from the
    records: a column whose every value is :data:`PLAIN`'s is None. Made once per
    plan (plans are cached), so a run pays nothing for them."""
    if options is None:
        return _NO_COLUMNS
    columns = []
    n = len(options)
    for field_name in OptionColumns._fields:
        column = tuple(map(attrgetter(field_name), options))
        columns.append(None if column.count(getattr(PLAIN, field_name)) == n else column)
    return OptionColumns(*columns)


def _whole_plan(compiled: CompiledGraph) -> Plan:
    deps = compiled.deps
    dependents = _dependents_of(deps, _numbers(compiled.index))
    # The sinks, read off the dependents in one C-level pass.
    sinks = tuple(compress(range(len(deps)), map(not_, dependents)))
    columns = option_columns(compiled.options)
    return Plan(
        names=compiled.names,
        index=compiled.index,
        fns=compiled.fns,
        deps=deps,
        dependents=dependents,
        targets=sinks,
        roots=_roots(deps),
        chain_next=_chain_links(deps, dependents, sinks, columns, compiled.maps),
        options=compiled.options,
        priority=columns.priority,
        needs=columns.needs,
        policy=columns.policy,
        maps=compiled.maps,
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
    return _cut(compiled, order, target_ids, [compiled.fns[g] for g in order])


def _cut(
    source: CompiledGraph | Plan,
    order: list[int],
    target_ids: Iterable[int],
    fns: list[Callable[..., Any]],
    loaded: Mapping[int, Any] | None = None,
) -> Plan:
    """The plan of the tasks ``order`` (indices into ``source``), renumbered 0..n-1.

    ``fns`` are their functions, in that order. A ``loaded`` task (resumed from a
    checkpoint) keeps no dependencies and is no map, and its options lose what
    only a run uses (:func:`~dagexec._core.task_options.without_run_options`).
    """
    loaded = loaded or {}
    local = {g: i for i, g in enumerate(order)}
    deps = tuple([() if g in loaded else tuple([local[d] for d in source.deps[g]]) for g in order])
    names = tuple(source.names[g] for g in order)
    dependents = _dependents_of(deps, _numbers(local))
    targets = tuple(local[t] for t in target_ids)
    options = _cut_options(source.options, order, loaded)
    columns = option_columns(options)
    maps = _cut_maps(source.maps, local, loaded)
    return Plan(
        names=names,
        index={name: i for i, name in enumerate(names)},
        fns=tuple(fns),
        deps=deps,
        dependents=dependents,
        targets=targets,
        roots=_roots(deps),
        chain_next=_chain_links(deps, dependents, targets, columns, maps),
        options=options,
        priority=columns.priority,
        needs=columns.needs,
        policy=columns.policy,
        maps=maps,
        loaded=frozenset(local[g] for g in loaded) if loaded else None,
    )


def _cut_options(
    options: tuple[TaskRecord, ...] | None, order: list[int], loaded: Mapping[int, Any]
) -> tuple[TaskRecord, ...] | None:
    """The options of the tasks ``order``, a loaded one's without what only a run uses;
    None when all are plain, so the cut plan pays for no option its tasks lack."""
    if options is None:
        return None
    cut = tuple([without_run_options(options[g]) if g in loaded else options[g] for g in order])
    return None if cut.count(PLAIN) == len(cut) else cut


def _cut_maps(
    maps: frozenset[int] | None, local: Mapping[int, int], loaded: Mapping[int, Any]
) -> frozenset[int] | None:
    """The maps among the kept tasks, renumbered; a loaded map is no map any more: its
    value is already whole."""
    if maps is None:
        return None
    return frozenset(local[g] for g in maps if g in local and g not in loaded) or None


def check_resources(plan: Plan, capacity: Mapping[str, float]) -> None:
    """Reject a plan whose tasks need a resource the run lacks, before anything runs.

    Raises:
        ValueError: a task needs a resource with no capacity declared, or more of
            one than its capacity; the message names the task and the resource.
    """
    if plan.needs is None:
        return
    for task, need in enumerate(plan.needs):
        for name, amount in need:
            if name not in capacity:
                declared = ", ".join(map(repr, sorted(capacity))) or "none"
                close = close_resource(name, capacity)
                fix = (
                    f"did you mean {close!r}? Spell it the same in the task's resources= "
                    f"and the run's, or declare {name!r} too"
                    if close is not None
                    else f"pass resources={{{name!r}: ...}} to the Executor or to run"
                )
                raise ValueError(
                    f"task {describe(plan.names[task])} needs resource {name!r}, which "
                    f"has no capacity in this run (declared: {declared}); {fix}"
                )
            if amount > capacity[name]:
                raise ValueError(
                    f"task {describe(plan.names[task])} needs {amount} of resource "
                    f"{name!r}, more than its capacity {capacity[name]}; it could never "
                    "run: raise the capacity or lower the need"
                )


def close_resource(name: str, declared: Iterable[str]) -> str | None:
    """The declared resource ``name`` most likely meant: the same name in another
    case ('DB' for 'db'), else the closest by spelling; None if none is close."""
    names = [d for d in declared if isinstance(d, str)]
    folded = name.casefold()
    for d in names:
        if d.casefold() == folded:
            return d
    by_fold = {d.casefold(): d for d in names}
    close = difflib.get_close_matches(folded, list(by_fold), n=1)
    return by_fold[close[0]] if close else None


def restrict_plan(
    plan: Plan,
    to_run: set[int],
    loaded: Mapping[int, Any],
    wrap: Callable[[int, Callable[..., Any]], Callable[..., Any]],
) -> Plan:
    """``plan`` cut down to ``to_run`` plus ``loaded``, for a run resumed from a checkpoint.

    A loaded task becomes a root whose function returns its stored value, so the
    state machine and the driver need no notion of "loaded": it is a task that
    takes no time and holds no resource. ``wrap(i, fn)`` gives the function to
    run for task ``i`` of ``to_run`` (the checkpoint's saving wrapper).
    """
    order = sorted(to_run | loaded.keys())
    fns = [_constant(loaded[g]) if g in loaded else wrap(g, plan.fns[g]) for g in order]
    return _cut(plan, order, plan.targets, fns, loaded)


def _constant(value: Any) -> Callable[[], Any]:
    def loaded() -> Any:
        return value

    return loaded


def topological_order(plan: Plan) -> list[int]:
    """The plan's tasks, every one after its dependencies (Kahn's algorithm), for
    code that walks a plan without running it (checkpoint identities, a cluster)."""
    remaining = list(plan.dep_counts)
    order = list(plan.roots)
    for task in order:  # grows as it goes
        for d in plan.dependents[task]:
            remaining[d] -= 1
            if not remaining[d]:
                order.append(d)
    return order
