"""Resuming from a checkpoint: which tasks to run, which values to load, and the run's plan.

A stored task cuts the graph: nothing upstream of it has to run for its sake.
Walking back from the targets, a task that is stored is loaded and the walk
stops there; a task that is not stored runs, and the walk goes on into its
dependencies. So a resumed run loads only the values it will use (the targets
and the inputs of the tasks that run), not every value in the file, and runs
no ancestor of a stored task unless something else needs it.

A value can turn out unreadable only when loaded (damaged, or its class is gone):
that task must run after all, which may need values (or runs) further upstream,
so :func:`resume` plans again until every value it planned to load was loaded.

Only tasks whose identity is known before the run cut the graph this way. A
``checkpoint=False`` task, a map, and every task downstream of either have no
identity yet (it includes a value that exists only during the run): the plan
runs them, and so reaches their ancestors, and each one's wrapper
(:mod:`dagexec._persist.savers`) decides on its worker whether to load or compute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from .._core.errors import CheckpointError
from .._core.graph import Graph
from .._core.plan import Plan, restrict_plan, topological_order
from .checkpoint import CheckpointStore
from .identity import task_parts

__all__ = ["checkpoint_identities", "open_checkpoint", "plan_resume", "resume"]

log = logging.getLogger("dagexec")


def plan_resume(
    deps: Sequence[Sequence[int]], targets: Iterable[int], stored: set[int]
) -> tuple[set[int], set[int]]:
    """Split the tasks the targets need into (to run, to load), by index.

    ``deps[i]`` are the indices task ``i`` depends on; ``stored`` the indices
    whose value the checkpoint holds. Every target and every dependency of a
    task to run is in exactly one of the two sets; nothing else is in either.
    """
    to_run: set[int] = set()
    to_load: set[int] = set()
    stack = list(targets)
    while stack:
        i = stack.pop()
        if i in to_run or i in to_load:
            continue
        if i in stored:
            to_load.add(i)
        else:
            to_run.add(i)
            stack.extend(deps[i])
    return to_run, to_load


def resume(
    store: CheckpointStore,
    ids: Sequence[bytes | None],
    deps: Sequence[Sequence[int]],
    targets: Iterable[int],
) -> tuple[set[int], dict[int, Any]]:
    """What a resumed run must run, and the loaded values it starts from.

    ``ids`` are the tasks' identities from :func:`dagexec._persist.identity.task_identities`
    (None for a task not computed, which then always runs). Blocks on reads of
    the file, so call it before the run starts, not on the scheduler's hot path.

    Returns:
        (indices to run, {index: value} for every other index the run needs).
    """
    targets = list(targets)
    reachable = _ancestors(deps, targets)
    wanted: dict[bytes, int] = {}
    for i in reachable:
        identity = ids[i]
        if identity is not None:
            wanted[identity] = i
    found = store.stored(wanted)
    stored = {wanted[identity] for identity in found}
    values: dict[int, Any] = {}
    while True:
        to_run, to_load = plan_resume(deps, targets, stored)
        missing = [i for i in to_load if i not in values]
        keys = [ids[i] for i in missing]  # all bytes: only stored tasks are loaded
        loaded = store.load_many(k for k in keys if k is not None)
        unreadable = set()
        for i, key in zip(missing, keys, strict=True):
            if key in loaded:
                values[i] = loaded[key]
            else:
                unreadable.add(i)  # logged by the store; it runs after all
        if not unreadable:
            return to_run, {i: values[i] for i in to_load}
        stored -= unreadable


def _ancestors(deps: Sequence[Sequence[int]], targets: Iterable[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(targets)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(deps[i])
    return seen


def task_columns(graph: Graph, plan: Plan) -> tuple[list[Any], list[Any], list[Any]]:
    """Each planned task's own function, constant args and kwargs, as ``task_identities`` wants.

    The plan holds the call objects the graph built (a bound call for a task with
    constants); the identity must see what the user wrote. The parameters that
    keyword dependencies go to count too: rewiring them changes the task.
    """
    tasks = graph.tasks
    fns: list[Any] = []
    args: list[Any] = []
    kwargs: list[Any] = []
    for name in plan.names:
        task = tasks[name]
        fns.append(task.fn)
        args.append(task.args)
        kw: dict[str, Any] = dict(task.kwargs)
        if task.dep_params:
            kw["\0dep_params"] = task.dep_params
        kwargs.append(kw)
    return fns, args, kwargs


class CheckpointIdentities(list[bytes | None]):
    """Each planned task's identity if known before the run, else None; and how to
    finish the others during it.

    A list, so that the run's job record carries it as it carries plain
    identities. ``kind[i]`` says how task ``i``'s identity is found during the
    run (``_savers.STATIC``, ``TABLE`` or ``MAP``), ``stored[i]`` whether its
    value may be stored (False for ``checkpoint=False``), ``prefix[i]`` its
    :class:`~dagexec._persist.identity.TaskParts` prefix.
    """

    kind: bytearray
    stored: bytearray
    prefix: list[bytes | None]


def checkpoint_identities(graph: Graph, plan: Plan) -> CheckpointIdentities:
    """Identities of the plan's tasks; on the caller thread, before anything is queued.

    A task downstream of a ``checkpoint=False`` task or of a map, a map, and a
    ``checkpoint=False`` task get None: whether they load is decided during the
    run (:mod:`dagexec._persist.savers`), so the plan runs them, and so their ancestors.

    Raises:
        CheckpointError: a task's constant arguments cannot be pickled (named).
    """
    from .savers import MAP, STATIC, TABLE

    fns, args, kwargs = task_columns(graph, plan)
    parts = task_parts(plan.names, fns, plan.deps, args, kwargs)
    count = len(plan)
    result = CheckpointIdentities(parts.ids)
    result.prefix = parts.prefix
    result.kind = kind = bytearray(count)  # STATIC is 0
    result.stored = stored = bytearray(b"\1") * count
    maps = plan.maps or frozenset()
    off = graph._uncheckpointed()
    if off:
        index = graph._index
        for i, name in enumerate(plan.names):
            if index[name] in off:
                stored[i] = 0
                kind[i] = TABLE
    for m in maps:
        kind[m] = MAP
    if off or maps:
        for i in topological_order(plan):
            if kind[i] == STATIC and any(kind[d] != STATIC for d in plan.deps[i]):
                kind[i] = TABLE
    for i in range(count):
        if kind[i] != STATIC:
            result[i] = None
    return result


def open_checkpoint(path: str, plan: Plan, ids: list[bytes | None]) -> tuple[Plan, CheckpointStore]:
    """Open the store, load what it has, and the plan that runs only the rest.

    Every task that runs is wrapped by :mod:`dagexec._persist.savers`: a static task
    pickles its value on its worker thread right after it returns and queues the
    bytes for the store's writer (the scheduler thread never touches the disk or
    pickle); a task decided during the run, and each map item, first finishes
    its identity and loads its value if stored. A value that cannot be pickled
    fails its task with :class:`CheckpointError` naming it.
    """
    from .savers import (
        TABLE,
        RunIdentities,
        dynamic_saver,
        item_saver,
        static_saver,
        value_recorder,
    )

    if not isinstance(ids, CheckpointIdentities):  # plain identities: every task static
        plain = CheckpointIdentities(ids)
        plain.kind = bytearray(len(ids))
        plain.stored = bytearray(b"\1") * len(ids)
        plain.prefix = [None] * len(ids)
        ids = plain
    store = CheckpointStore(path, on_error=_log_write_error)
    try:
        to_run, loaded = resume(store, ids, plan.deps, plan.targets)
        maps = plan.maps or frozenset()
        kind, stored, prefix = ids.kind, ids.stored, ids.prefix
        table = RunIdentities(plan.names, kind, ids, prefix, plan.deps)
        policies = plan.policy

        def wrap(i: int, fn: Callable[..., Any]) -> Callable[..., Any]:
            policy = policies[i] if policies is not None else None
            if i in maps:
                return item_saver(fn, store, table, i, policy, bool(stored[i]))
            if not stored[i]:
                return value_recorder(fn, table, i) if plan.dependents[i] else fn
            if kind[i] == TABLE:
                return dynamic_saver(fn, store, table, i, policy)
            identity = ids[i]
            if identity is None:
                return fn
            return static_saver(fn, store, identity, plan.names[i], table, i, policy)

        restricted = replace(restrict_plan(plan, to_run, loaded, wrap), loaded_during=table.loaded)
    except BaseException:
        store.close()
        raise
    return restricted, store


def _log_write_error(error: CheckpointError) -> None:
    # A write that failed loses a saved value, not a result: the run goes on and
    # the task simply runs again next time. Said once per value, on the writer.
    log.warning("%s", error)
