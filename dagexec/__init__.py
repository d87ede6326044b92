"""dagexec: run a graph of dependent tasks on threads, fast and within hard bounds.

One scheduler thread tracks readiness and try-puts ready tasks into bounded
per-worker queues under a global in-flight cap; workers report back over one
unbounded results queue. See README.md and docs/ for the guarantees and the design.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._core.errors import (
    Cancelled,
    CheckpointError,
    CycleError,
    DagexecError,
    DuplicateTaskError,
    LoopClosureWarning,
    MissingDependencyError,
    TaskTimeout,
    UnknownTargetError,
    WorkerCrashed,
)
from ._core.graph import Graph, Task
from ._core.hooks import Callback, PlanInfo
from ._core.policy import MISSING, CurrentTask, Missing, current_task
from ._core.result import RunResult, RunStats, StatusMap, TaskState, TraceRecord
from ._core.task_logs import TaskLogs
from ._core.version import __version__ as __version__
from ._engine.front.executor import Executor
from ._engine.front.future import RunFuture
from ._engine.front.oneshot import run
from ._observation.progress import ProgressBar
from ._persist.explain import explain

__all__ = [
    "MISSING",
    "Callback",
    "Cancelled",
    "CheckpointError",
    "CurrentTask",
    "CycleError",
    "DagexecError",
    "DuplicateTaskError",
    "Executor",
    "Graph",
    "LoopClosureWarning",
    "Missing",
    "MissingDependencyError",
    "PlanInfo",
    "ProgressBar",
    "RunFuture",
    "RunResult",
    "RunStats",
    "StatusMap",
    "Task",
    "TaskLogs",
    "TaskState",
    "TaskTimeout",
    "TraceRecord",
    "UnknownTargetError",
    "WorkerCrashed",
    "current_task",
    "explain",
    "run",
]


# Tracebacks and reprs show the public names, not the private modules (as trio does).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        with contextlib.suppress(AttributeError, TypeError):  # some builtins refuse
            _obj.__module__ = "dagexec"
del _name, _obj


def __getattr__(name: str) -> Any:
    # Optional integrations load only when asked for, so `import dagexec` stays
    # std-only and fast (the way concurrent.futures loads ProcessPoolExecutor).
    if name in ("dask", "testing"):
        import importlib

        return importlib.import_module(f"dagexec.{name}")
    raise AttributeError(f"module 'dagexec' has no attribute {name!r}")
