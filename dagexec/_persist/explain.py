"""``dagexec.explain``: why a checkpointed run would run each task, before running it.

The prediction is the run's own decision, not a second opinion: the same
identities (:func:`~dagexec._persist.resume.checkpoint_identities`) and the same walk
from the targets (:func:`~dagexec._persist.resume.resume`, which also reads the values
it would load, so a value that no longer unpickles is caught here as in the
run). For each task that would run, one reason, in this precedence:

1. ``not checkpointed``: ``checkpoint=False``; it runs every time;
2. ``code changed``: its function (or a helper of its module it calls) changed;
3. ``constant changed``: its ``args``/``kwargs``;
4. ``upstream changed``: the identity of a dependency changed (named);
5. ``not stored``: never stored under this name, or its row was deleted;
6. ``damaged``: its row is there but its value does not read back.

To tell 2-4 from 5, the store keeps per task name the parts of the identity
last saved under it (the ``dagexec_names`` table). Tasks downstream of a
``checkpoint=False`` task or of a map, and maps (their items), are decided
during the run, once those values exist: they are listed apart, never guessed.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import describe
from .._core.graph import Graph

__all__ = ["Explanation", "Reason", "explain"]

# Reason kinds, in precedence order.
NOT_CHECKPOINTED = "not checkpointed"
CODE_CHANGED = "code changed"
CONSTANT_CHANGED = "constant changed"
UPSTREAM_CHANGED = "upstream changed"
NOT_STORED = "not stored"
DAMAGED = "damaged"
KINDS = (NOT_CHECKPOINTED, CODE_CHANGED, CONSTANT_CHANGED, UPSTREAM_CHANGED, NOT_STORED, DAMAGED)

_KEY = 16  # bytes of a name key, a digest, an identity


@dataclass(frozen=True)
class Reason:
    """Why one task would run: ``kind`` (one of :data:`KINDS`) and a sentence."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Explanation:
    """What a checkpointed run of a graph would do with each task it needs.

    ``run``: task name -> :class:`Reason`, for the tasks it would execute;
    ``load``: the tasks whose stored value it would use instead;
    ``during_run``: task name -> why it can only be decided during the run.
    """

    run: Mapping[Hashable, Reason] = field(default_factory=dict)
    load: tuple[Hashable, ...] = ()
    during_run: Mapping[Hashable, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [
            f"{len(self.run)} would run, {len(self.load)} would load, "
            f"{len(self.during_run)} decided during the run"
        ]
        lines += [f"run   {describe(name)}: {reason}" for name, reason in self.run.items()]
        lines += [f"load  {describe(name)}" for name in self.load]
        lines += [f"later {describe(name)}: {why}" for name, why in self.during_run.items()]
        return "\n".join(lines)


def explain(
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    checkpoint: str | os.PathLike[str],
) -> Explanation:
    """Why a run of ``graph`` (``targets``, default all sinks) with ``checkpoint`` would
    run each task it needs; which it would load; which only the run can decide.

    Reads the checkpoint (its values the run would load included: they are
    unpickled, as the run would) and never writes it; a missing file is an
    empty checkpoint, and is not created.

    Raises:
        TypeError: ``graph`` is not a Graph, or ``checkpoint`` is not a path.
        CheckpointError: the file cannot be used (see ``run(checkpoint=)``), or a
            task's constants cannot be encoded (named).
        The graph's own errors (cycle, missing dependency, unknown target).
    """
    from .._core.options import check_checkpoint_path
    from .._core.plan import plan_run
    from .checkpoint_file import resolve_link
    from .resume import checkpoint_identities

    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    path = check_checkpoint_path(checkpoint)
    if path is None:
        raise TypeError("explain needs checkpoint=, the file a run would use, like 'batch.sqlite'")
    plan = plan_run(graph._compile(), targets)
    ids = checkpoint_identities(graph, plan)
    path = resolve_link(path)  # a link the run would refuse is refused here too
    if not os.path.exists(path):
        return _predict(graph, plan, ids, None, path)
    from .checkpoint import CheckpointStore

    with CheckpointStore(path) as store:
        return _predict(graph, plan, ids, store, path)


def _predict(graph: Any, plan: Any, ids: Any, store: Any, path: str) -> Explanation:
    from .identity import key_of
    from .resume import plan_resume, resume
    from .savers import MAP, STATIC

    names, deps = plan.names, plan.deps
    if store is None:
        to_run, to_load = plan_resume(deps, plan.targets, set())
        present: set[bytes] = set()
        parts: dict[bytes, tuple[bytes, bytes]] = {}
    else:
        to_run, loaded = resume(store, ids, deps, plan.targets)
        to_load = set(loaded)
        wanted = [ids[i] for i in to_run if ids[i] is not None]
        present = store.stored(wanted)
        keys = [key_of(ids.prefix[i]) for i in to_run if ids[i] is not None]
        parts = _stored_parts(store, keys)
    run: dict[Hashable, Reason] = {}
    during: dict[Hashable, str] = {}
    for i in sorted(to_run):
        name = names[i]
        if not ids.stored[i]:
            run[name] = Reason(
                NOT_CHECKPOINTED, "not checkpointed (checkpoint=False): runs every time"
            )
        elif ids.kind[i] == MAP:
            during[name] = "a map: each item loads or runs by its element, once the list exists"
        elif ids.kind[i] != STATIC:
            during[name] = _downstream_of(i, ids, names, deps)
        else:
            run[name] = _reason(graph, plan, ids, i, present, parts)
    return Explanation(run, tuple(names[i] for i in sorted(to_load)), during)


def _downstream_of(i: int, ids: Any, names: Any, deps: Any) -> str:
    from .savers import MAP, STATIC

    stack, seen = list(deps[i]), set()
    while stack:  # the nearest task upstream that makes it dynamic
        d = stack.pop(0)
        if d in seen:
            continue
        seen.add(d)
        if not ids.stored[d]:
            return (
                f"downstream of {describe(names[d])} (checkpoint=False): decided once "
                "its value exists"
            )
        if ids.kind[d] == MAP:
            return f"downstream of map {describe(names[d])}: decided once its items exist"
        if ids.kind[d] != STATIC:
            stack.extend(deps[d])
    return "decided during the run"


def _reason(
    graph: Any,
    plan: Any,
    ids: Any,
    i: int,
    present: set[bytes],
    parts: Mapping[bytes, tuple[bytes, bytes]],
) -> Reason:
    from .identity import code_of, constants_of, key_of

    name = plan.names[i]
    identity, prefix = ids[i], ids.prefix[i]
    stored = parts.get(key_of(prefix))
    if stored is None:
        return Reason(NOT_STORED, "not stored yet")
    last_identity, last = stored
    if last[_KEY : 2 * _KEY] != code_of(prefix):
        return Reason(CODE_CHANGED, f"its code changed (function {_function_name(graph, name)})")
    if last[2 * _KEY : 3 * _KEY] != constants_of(prefix):
        return Reason(CONSTANT_CHANGED, "a constant changed (its args or kwargs)")
    was = [last[k : k + 2 * _KEY] for k in range(3 * _KEY, len(last), 2 * _KEY)]
    now = [key_of(ids.prefix[d]) + ids[d] for d in plan.deps[i]]
    if was != now:
        before = {pair[:_KEY]: pair[_KEY:] for pair in was}
        for d, pair in zip(plan.deps[i], now, strict=True):
            if before.get(pair[:_KEY]) != pair[_KEY:]:
                return Reason(UPSTREAM_CHANGED, f"upstream task {describe(plan.names[d])} changed")
        return Reason(UPSTREAM_CHANGED, "its dependencies changed (one was removed)")
    if last_identity == identity and identity in present:
        return Reason(DAMAGED, "its stored value is damaged (it will be computed again)")
    return Reason(NOT_STORED, "not stored (its stored value was deleted)")


def _function_name(graph: Any, name: Hashable) -> str:
    fn = graph.tasks[name].fn
    inner = getattr(fn, "func", fn)  # a functools.partial
    return repr(getattr(inner, "__qualname__", type(inner).__qualname__))


def _stored_parts(store: Any, keys: list[bytes]) -> dict[bytes, tuple[bytes, bytes]]:
    found: dict[bytes, tuple[bytes, bytes]] = {}
    for start in range(0, len(keys), 900):
        chunk = keys[start : start + 900]
        marks = ",".join("?" * len(chunk))
        rows = store._read(
            f"SELECT key, identity, parts FROM dagexec_names WHERE key IN ({marks})", chunk
        )
        for key, identity, parts in rows:
            found[key] = (identity, parts)
    return found
