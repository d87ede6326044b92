"""``dagexec.explain``: why a checkpointed run would run each task, before running it.

The prediction is the run's own decision, not a second opinion: the same
identities (:func:`~dagexec._persist.resume.checkpoint_identities`), the same walk
from the targets (:func:`~dagexec._persist.resume.resume`, which also reads the values
it would load, so a value that no longer unpickles is caught here as in the
run), and for the tasks the run decides on its workers (maps, and what is
downstream of them) the same identities the wrappers will compute, wherever
the file already holds what they need (:mod:`dagexec._persist.forecast`). For each
task that would run, one reason, in this precedence:

1. ``not checkpointed``: ``checkpoint=False``; it runs every time;
2. ``code changed``: its function (or a helper of its module it calls) changed;
3. ``constant changed``: its ``args``/``kwargs``;
4. ``upstream changed``: the identity of a dependency changed (named);
5. ``not stored``: never stored under this name, or its row was deleted;
6. ``damaged``: its row is there but its value does not read back.

To tell 2-4 from 5, the store keeps per task name the parts of the identity
last saved under it (the ``dagexec_names`` table); for a map, the parts of its
own identity (function, constants, extra deps). A map's items are counted
(:class:`MapItems`) when the list it maps over is known before the run. What
needs a value made during the run (a ``checkpoint=False`` task's, or a list
computed in the run) is listed apart, never guessed.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import describe
from .._core.graph import Graph
from .reasons import MapItems, Reason

__all__ = ["Explanation", "MapItems", "Reason", "explain"]


@dataclass(frozen=True)
class Explanation:
    """What a checkpointed run of a graph would do with each task it needs.

    ``run``: task name -> :class:`Reason`, for the tasks it would execute (a map:
    some or all of its items);
    ``load``: the tasks whose stored value it would use instead (a map: all its
    items load);
    ``during_run``: task name -> why it can only be decided during the run;
    ``items``: map name -> :class:`MapItems`, for every map it needs.
    """

    run: Mapping[Hashable, Reason] = field(default_factory=dict)
    load: tuple[Hashable, ...] = ()
    during_run: Mapping[Hashable, str] = field(default_factory=dict)
    items: Mapping[Hashable, MapItems] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [
            f"{len(self.run)} would run, {len(self.load)} would load, "
            f"{len(self.during_run)} decided during the run"
        ]
        lines += [f"run   {describe(name)}: {reason}" for name, reason in self.run.items()]
        for name in self.load:
            counts = self.items.get(name)
            shown = "" if counts is None else f" (its {counts.total} items)"
            lines.append(f"load  {describe(name)}{shown}")
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
    from .forecast import Forecast
    from .resume import plan_resume, resume

    if store is None:
        to_run, _ = plan_resume(plan.deps, plan.targets, set())
        loaded: dict[int, Any] = {}
    else:
        to_run, loaded = resume(store, ids, plan.deps, plan.targets)
    seen = Forecast(graph, plan, ids, store, to_run, loaded).walk()
    names = plan.names
    return Explanation(
        {names[i]: seen.run[i] for i in sorted(seen.run)},
        tuple(names[i] for i in sorted(seen.load)),
        {names[i]: seen.during[i] for i in sorted(seen.during)},
        {names[i]: seen.items[i] for i in sorted(seen.items)},
    )
