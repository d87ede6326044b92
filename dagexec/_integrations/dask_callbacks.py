"""The bridge from dagexec's run callbacks to dask's local callbacks and value cache.

dask's diagnostics (``ProgressBar``, ``Profiler``, ``ResourceProfiler``...) are
written against ``dask.local``'s scheduler loop: they read its ``state`` dict and
expect ``posttask`` to get each result and the id of the thread that computed
it. dagexec's hooks report neither, so this module rebuilds both from them. The
same ``state["cache"]`` is dask's ``cache=``: the run's live value store, which
gets data nodes when the run starts, each value as its task ends, and loses
each value once nothing needs it any more (requested keys stay). It is kept
apart from the graph conversion because it alone knows dask's callback
protocol, and a run with neither callbacks nor a cache never touches it.

Threads: ``start`` and ``finish`` run on the thread calling
:func:`dagexec.dask.get`, before and after the run; the ``on_task_*`` hooks run
on dagexec's scheduler thread during it, so the ``state`` dict is written by one
thread at a time and has no lock (tasks may read the cache meanwhile, as with
dask). After Ctrl-C the caller leaves the scheduler thread running its last
tasks; ``finish`` then stops the hooks from touching the state, but one already
under way may overlap it. Task functions, wrapped in :class:`_Report`, run on
workers and only store into ``Bridge._done``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from typing import Any

from dask._task_spec import GraphNode
from dask.callbacks import unpack_callbacks

from .._core.result import TaskState
from .dask_graph import Built

__all__ = ["Bridge", "CallbackBridge", "bridge_for"]


def bridge_for(
    built: Built,
    nodes: Mapping[Hashable, GraphNode],
    callbacks: list[tuple[Callable[..., Any] | None, ...]],
    cache: MutableMapping[Hashable, Any] | None,
    requested: Iterable[Hashable],
) -> Bridge | None:
    """The bridge a run needs: none without callbacks or a cache (it costs per task)."""
    if callbacks:
        return CallbackBridge(built, nodes, callbacks, cache, requested)
    if cache is not None:
        return Bridge(built, nodes, callbacks, cache, requested)
    return None


class Bridge:
    """dagexec run hooks keeping dask's ``state`` (and its ``cache``) up to date.

    dask callbacks (``ProgressBar``, ``Profiler``...) read a ``state`` dict shaped
    like ``dask.local``'s; this keeps one up to date from the hooks, on the
    scheduler thread, as dask's own scheduler loop does. ``ready``, ``running``,
    ``finished`` and ``released`` are sets; callbacks only take their sizes or
    test membership. ``state["cache"]`` is the caller's ``cache`` if given. dask
    hands ``posttask`` each result and the id of the thread that computed it,
    which dagexec's hooks do not carry, so every task function is wrapped to
    leave both in ``_done`` for ``on_task_end`` to pick up.

    This class alone serves a run with a cache and no callbacks: it has no
    dispatch or start hooks, so the workers send no start notices.
    :class:`CallbackBridge` adds them for ``pretask``.
    """

    def __init__(
        self,
        built: Built,
        nodes: Mapping[Hashable, GraphNode],
        callbacks: list[tuple[Callable[..., Any] | None, ...]],
        cache: MutableMapping[Hashable, Any] | None,
        requested: Iterable[Hashable],
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
        self.results = set(requested)  # kept in the cache to the end, as in dask
        self._done: dict[Hashable, tuple[Any, int]] = {}
        self.closed = False  # set by finish(): later hooks leave the state alone
        self.state = self._initial_state(built, cache)

    def _initial_state(
        self, built: Built, cache: MutableMapping[Hashable, Any] | None
    ) -> dict[str, Any]:
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
            "cache": _with_consts(cache, built.consts),
            "ready": ready,
            "running": set(),
            "finished": set(),
            "released": set(),
        }

    def wrap(self, key: Hashable, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (task ``key``'s function) leaving its result for ``posttask``; given to
        :func:`~dagexec._integrations.dask_graph.assemble`, so the task keeps its
        annotations (resources, priority, retries) whatever callbacks are active."""
        return _Report(fn, key, self._done)

    def start(self) -> None:
        for cb in self.callbacks:
            if cb[0]:
                cb[0](self.nodes)
            self.started.append(cb)
        for start_state in self.on_start_state:
            start_state(self.nodes, self.state)

    def finish(self, *, failed: bool) -> None:
        self.closed = True
        for cb in self.started:
            if cb[4]:
                cb[4](self.nodes, self.state, failed)

    def _pretask(self, key: Hashable) -> None:
        state = self.state
        state["ready"].discard(key)
        state["waiting"].pop(key, None)
        state["running"].add(key)
        for pretask in self.pretask:
            pretask(key, self.nodes, state)

    def on_task_end(self, key: Hashable, end: TaskState, seconds: float) -> None:
        if self.closed:  # an interrupted run's last tasks: the caller has moved on
            return
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


class CallbackBridge(Bridge):
    """A :class:`Bridge` that also calls dask's ``pretask`` as each task is handed over."""

    def on_task_dispatch(self, key: Hashable, worker: int) -> None:
        if not self.closed:
            self._pretask(key)

    def on_task_start(self, key: Hashable, worker: int) -> None:
        # dagexec hands a linear run of tasks to a worker as one unit and reports
        # the dispatch of its first task only; the others are announced here.
        if not self.closed and key not in self.state["running"]:
            self._pretask(key)


def _with_consts(
    cache: MutableMapping[Hashable, Any] | None, consts: Mapping[Hashable, Any]
) -> MutableMapping[Hashable, Any]:
    """The run's value store: the caller's cache (given the data nodes, as dask
    gives them) or a dict of its own."""
    if cache is None:
        return dict(consts)
    for key, value in consts.items():
        if key not in cache:  # keys in the cache were read from it: it wins over data
            cache[key] = value
    return cache


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
