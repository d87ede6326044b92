"""The bridge from dagexec's run callbacks to dask's local callbacks.

dask's diagnostics (``ProgressBar``, ``Profiler``, ``ResourceProfiler``...) are
written against ``dask.local``'s scheduler loop: they read its ``state`` dict and
expect ``posttask`` to get each result and the id of the thread that computed
it. dagexec's hooks report neither, so this module rebuilds both from them. It
is kept apart from the graph conversion because it alone knows dask's callback
protocol, and a run without callbacks never touches it.

Threads: ``start`` and ``finish`` run on the thread calling
:func:`dagexec.dask.get`, before and after the run; the ``on_task_*`` hooks run
on dagexec's scheduler thread during it, so the ``state`` dict is used by one
thread at a time and has no lock. (The exception: after Ctrl-C the caller
leaves the scheduler thread running its last tasks, and ``finish`` may overlap
its hooks.) Task functions, wrapped in :class:`_Report`, run on workers and
only store into ``Bridge._done``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from dask._task_spec import GraphNode
from dask.callbacks import unpack_callbacks

from ._dask_graph import Built
from ._graph import Graph
from ._result import TaskState

__all__ = ["Bridge"]


class Bridge:
    """dagexec run hooks driving dask's local callbacks.

    dask callbacks (``ProgressBar``, ``Profiler``...) read a ``state`` dict shaped
    like ``dask.local``'s; this keeps one up to date from the hooks, on the
    scheduler thread, as dask's own scheduler loop does. ``ready``, ``running``,
    ``finished`` and ``released`` are sets; callbacks only take their sizes or
    test membership. dask hands ``posttask`` each result and the id of the
    thread that computed it, which dagexec's hooks do not carry, so every task
    function is wrapped to leave both in ``_done`` for ``on_task_end`` to pick up.
    """

    def __init__(
        self,
        built: Built,
        nodes: Mapping[Hashable, GraphNode],
        callbacks: list[tuple[Callable[..., Any] | None, ...]],
    ) -> None:
        self.callbacks = callbacks
        self.nodes = nodes
        (
            self.on_start,
            self.on_start_state,
            self.pretask,
            self.posttask,
            self.on_finish,
        ) = unpack_callbacks(callbacks)  # type: ignore[no-untyped-call]
        self.started: list[tuple[Callable[..., Any] | None, ...]] = []
        self.results = set(built.targets)
        self._done: dict[Hashable, tuple[Any, int]] = {}
        self.state = self._initial_state(built)
        self._wrap(built)

    def _initial_state(self, built: Built) -> dict[str, Any]:
        dependencies: dict[Hashable, set[Hashable]] = {k: set() for k in built.consts}
        dependents: dict[Hashable, set[Hashable]] = {k: set() for k in built.consts}
        waiting: dict[Hashable, set[Hashable]] = {}
        ready: set[Hashable] = set()
        for key, deps in built.deps.items():
            dependencies[key] = set(self.nodes[key].dependencies)
            dependents.setdefault(key, set())
            if deps:
                waiting[key] = set(deps)
            else:
                ready.add(key)
        for key, needs in dependencies.items():
            for d in needs:
                dependents.setdefault(d, set()).add(key)
        return {
            "dependencies": dependencies,
            "dependents": dependents,
            "waiting": waiting,
            "waiting_data": {k: set(v) for k, v in dependents.items() if v},
            "cache": dict(built.consts),
            "ready": ready,
            "running": set(),
            "finished": set(),
            "released": set(),
        }

    def _wrap(self, built: Built) -> None:
        """Rebuild the graph with each function leaving its result for ``posttask``."""
        old = built.graph
        built.graph = Graph()
        for key, task in old.tasks.items():
            built.graph.add(key, _Report(task.fn, key, self._done), deps=task.deps)

    def start(self) -> None:
        for cb in self.callbacks:
            if cb[0]:
                cb[0](self.nodes)
            self.started.append(cb)
        for start_state in self.on_start_state:
            start_state(self.nodes, self.state)

    def finish(self, *, failed: bool) -> None:
        for cb in self.started:
            if cb[4]:
                cb[4](self.nodes, self.state, failed)

    def on_task_dispatch(self, key: Hashable, worker: int) -> None:
        self._pretask(key)

    def on_task_start(self, key: Hashable, worker: int) -> None:
        # dagexec hands a linear run of tasks to a worker as one unit and reports
        # the dispatch of its first task only; the others are announced here.
        if key not in self.state["running"]:
            self._pretask(key)

    def _pretask(self, key: Hashable) -> None:
        state = self.state
        state["ready"].discard(key)
        state["waiting"].pop(key, None)
        state["running"].add(key)
        for pretask in self.pretask:
            pretask(key, self.nodes, state)

    def on_task_end(self, key: Hashable, end: TaskState, seconds: float) -> None:
        state = self.state
        if end is not TaskState.DONE:
            state["running"].discard(key)
            return
        if key not in state["running"]:
            self._pretask(key)
        state["running"].discard(key)
        value, thread_id = self._done.pop(key)
        state["cache"][key] = value
        state["finished"].add(key)
        waiting, ready = state["waiting"], state["ready"]
        for dependent in state["dependents"][key]:
            pending = waiting.get(dependent)
            if pending is not None:
                pending.discard(key)
                if not pending:
                    del waiting[dependent]
                    ready.add(dependent)
        waiting_data = state["waiting_data"]
        for dep in state["dependencies"][key]:
            users = waiting_data.get(dep)
            if users is not None:
                users.discard(key)
                if not users and dep not in self.results:
                    del waiting_data[dep]
                    state["released"].add(dep)
                    state["cache"].pop(dep, None)
        for posttask in self.posttask:
            posttask(key, value, self.nodes, state, thread_id)


class _Report:
    """A task function that also leaves (value, thread id) for the callback bridge."""

    __slots__ = ("done", "fn", "key")

    def __init__(
        self, fn: Callable[..., Any], key: Hashable, done: dict[Hashable, tuple[Any, int]]
    ) -> None:
        self.fn = fn
        self.key = key
        self.done = done

    def __call__(self, *args: Any) -> Any:
        value = self.fn(*args)
        # A dict store is atomic; the scheduler reads it only after this task's report.
        self.done[self.key] = (value, threading.get_ident())
        return value
