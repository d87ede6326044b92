"""``run_on(..., checkpoint=path)``: a checkpoint kept by the client of a cluster run.

The store is the one a local run uses (:mod:`dagexec._persist`), opened on the
client, never on a worker, so the path need only be a file the client can
write. Before anything is sent, the values it already holds are loaded and the
plan is cut down as a local resume cuts it (a stored task cuts the graph: its
ancestors do not run for its sake); a loaded task goes to the cluster as a
constant. After the run the client saves, under the same identities a local
run uses, the values it has in hand: the targets' and those of the tasks whose
futures it keeps (the inputs of maps and cleanup tasks). Values that stay on
the workers are not saved. So a cluster run resumes from a local run's
checkpoint and the other way round.

Only tasks whose identity is known before the run are saved and loaded, as
locally; a map, a ``checkpoint=False`` task and what is downstream of either
always run on the cluster (a local run decides those during the run).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from .._core.errors import CheckpointError
from .._core.graph import Graph
from .._core.plan import Plan, restrict_plan
from .._persist.checkpoint import CheckpointStore
from .._persist.checkpoint_writer import StoreClosedError
from .._persist.resume import checkpoint_identities, resume
from .._persist.savers import RunIdentities

__all__ = ["ClusterCheckpoint"]

log = logging.getLogger("dagexec")


class ClusterCheckpoint:
    """The store of one cluster run: what it loaded, and how to save each task's value.

    ``plan`` is the run's plan cut down to what must run plus what was loaded
    (loaded tasks return their stored value); indices below are into it.
    """

    def __init__(self, path: str | os.PathLike[str], graph: Graph, plan: Plan) -> None:
        ids = checkpoint_identities(graph, plan)
        self.store = CheckpointStore(path, on_error=_log_write_error)
        try:
            to_run, loaded = resume(self.store, ids, plan.deps, plan.targets)
            order = sorted(to_run | loaded.keys())  # restrict_plan's numbering
            self.plan = restrict_plan(plan, to_run, loaded, lambda _, fn: fn)
            table = RunIdentities(plan.names, ids.kind, ids, ids.prefix, plan.deps)
            self.loaded = frozenset(i for i, g in enumerate(order) if g in loaded)
            self.identity: list[bytes | None] = [
                ids[g] if ids.stored[g] and g not in loaded else None for g in order
            ]
            self.parts = [table.parts(g) if self.identity[i] else b"" for i, g in enumerate(order)]
        except BaseException:
            self.store.close()
            raise

    def save(self, values: Mapping[int, Any], ok: Iterable[int]) -> int:
        """Queue ``values`` (by task) of the tasks in ``ok`` that may be stored; how many.

        ``ok``: tasks that ended DONE and, for a cleanup task, whose dependencies all
        did too (a cleanup task given an exception or MISSING is never saved, as
        locally). A value that cannot be pickled is logged and not saved: the run's
        result is already known, and the task simply runs again next time.
        """
        saved = 0
        names = self.plan.names
        for t in ok:
            identity = self.identity[t]
            if identity is None or t not in values:
                continue
            try:
                self.store.save_nowait(identity, values[t], name=names[t], parts=self.parts[t])
                saved += 1
            except StoreClosedError:
                return saved
            except CheckpointError as exc:
                log.warning("%s", exc)
        return saved

    def close(self) -> None:
        """Write what is queued and close the file."""
        self.store.close()


def _log_write_error(error: CheckpointError) -> None:
    # A failed write loses a saved value, not a result: the task runs again next time.
    log.warning("%s", error)
