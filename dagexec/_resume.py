"""Resuming from a checkpoint: which tasks to run, which values to load. Pure but for reads.

A stored task cuts the graph: nothing upstream of it has to run for its sake.
Walking back from the targets, a task that is stored is loaded and the walk
stops there; a task that is not stored runs, and the walk goes on into its
dependencies. So a resumed run loads only the values it will use (the targets
and the inputs of the tasks that run), not every value in the file, and runs
no ancestor of a stored task unless something else needs it.

A value can turn out unreadable only when loaded (damaged, or its class is gone):
that task must run after all, which may need values (or runs) further upstream,
so :func:`resume` plans again until every value it planned to load was loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._checkpoint import CheckpointStore

__all__ = ["plan_resume", "resume"]


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

    ``ids`` are the tasks' identities from :func:`dagexec._identity.task_identities`
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
