"""The tasks a checkpointed run loaded during the run, as its wrappers report them.

Most loaded tasks are known before a run (``Plan.loaded``). A task downstream
of a ``checkpoint=False`` task or of a map, and each map item, is decided on its
worker once its inputs exist (see :mod:`dagexec._persist.savers`): when it loads,
the worker still ran a task, so the scheduler counts it as run. Its wrapper
records its name here instead, and the run's result counts it as loaded, not
as executed (``RunStats.tasks_loaded``, not ``tasks_run``).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

__all__ = ["LoadedDuringRun"]


class LoadedDuringRun:
    """Names of the tasks whose value a checkpoint supplied during one run; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _names: written by the workers
        self._names: set[Hashable] = set()

    def add(self, name: Hashable) -> None:
        with self._lock:
            self._names.add(name)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` was loaded: asked by a callback when the task ended (its
        worker added it before reporting the end)."""
        with self._lock:
            return name in self._names

    def names(self) -> frozenset[Hashable]:
        """A snapshot; read once the run is over, when no worker adds any more."""
        with self._lock:
            return frozenset(self._names)
