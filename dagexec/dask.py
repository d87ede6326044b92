"""Dask in both directions: dagexec as a dask scheduler, and dagexec graphs on a cluster.

* :func:`get` follows dask's scheduler protocol, so
  ``dask.compute(x, scheduler=dagexec.dask.get)`` runs any dask collection on
  dagexec's bounded workers.
* :func:`to_dask` and :func:`run_on` turn a :class:`dagexec.Graph` into a dask
  graph and run it on a ``distributed.Client``.

This module is the only place that imports dask; ``import dagexec`` never loads
it (``dagexec.dask`` is imported on first attribute access). Install the extra
with ``pip install 'dagexec[dask]'``.

How a dask graph becomes a dagexec graph: every dask node is converted to the
task-spec form (``dask._task_spec.convert_legacy_graph``), only the ancestors of
the requested keys are kept, and each node becomes one dagexec task whose
dependencies are the node's dependency keys. Data nodes (literals, and values
passed in ``cache``) are not tasks at all: like dask's own local scheduler, they
are known before the run starts and are baked into the tasks that use them. The
common node, a ``Task`` whose arguments are references and literals, is called
directly with its arguments in place, so it costs no more than dask's own
``Task.__call__``; anything else is called the way dask calls it, with a dict
of its dependencies' values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from time import perf_counter
from typing import Any, Literal

try:
    import dask
    from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef, convert_legacy_graph
    from dask.callbacks import local_callbacks, unpack_callbacks
    from dask.core import validate_key
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"dagexec.dask needs dask and distributed ({exc}); install them with "
        "pip install 'dagexec[dask]'"
    ) from exc

from ._errors import UnknownTargetError, describe
from ._executor import Executor
from ._graph import Graph
from ._result import RunResult, RunStats, TaskState

__all__ = ["get", "run_on", "shutdown", "to_dask"]

OnError = Literal["raise", "continue"]

# --------------------------------------------------------------------------------------
# 1. dagexec as a dask scheduler
# --------------------------------------------------------------------------------------


def get(
    dsk: Any,
    keys: Any,
    *,
    cache: MutableMapping[Hashable, Any] | None = None,
    num_workers: int | None = None,
    queue_cap: int = 2,
    max_in_flight: int | None = None,
    on_error: OnError = "raise",
    callbacks: Iterable[tuple[Callable[..., Any] | None, ...]] | None = None,
    executor: Executor | None = None,
    **kwargs: Any,
) -> Any:
    """Compute ``keys`` of the dask graph ``dsk`` on dagexec workers (dask's ``get`` protocol).

    Use it as ``dask.compute(x, scheduler=dagexec.dask.get)`` or with
    ``dask.config.set(scheduler=dagexec.dask.get)``. Only the requested keys and
    their ancestors run.

    Args:
        dsk: a mapping of keys to tasks (task-spec nodes or legacy tuples), or
            anything with ``__dask_graph__`` (what ``dask.compute`` passes).
        keys: one key, a list of keys, or nested lists of keys; the result has
            the same shape, lists becoming tuples, as with ``dask.threaded.get``.
        cache: values of keys known in advance; they are not computed. The
            requested keys' values are stored into it afterwards, as dask does.
        num_workers: worker threads (dagexec's ``workers``); default the
            ``num_workers`` dask config value, else ``os.cpu_count()``.
        queue_cap, max_in_flight: dagexec's bounds, see :class:`dagexec.Executor`.
        on_error: ``"raise"`` stops at the first failure; ``"continue"`` lets
            every task that does not depend on a failure finish first. Either way
            the first failing task's own exception is raised.
        callbacks: dask local callbacks as 5-tuples; by default the active ones
            (``with ProgressBar():`` ...), exactly as dask's schedulers do.
        executor: run on this :class:`dagexec.Executor` instead of the calling
            thread's cached one; ``num_workers``, ``queue_cap`` and
            ``max_in_flight`` are then the executor's own.
        kwargs: other schedulers' options (``pool``, ``chunksize``...); ignored,
            as the protocol expects of a scheduler that does not know them.

    Raises:
        KeyError: a requested key is not in the graph.
        BaseException: the first failing task's own exception.
    """
    del kwargs  # accepted and ignored, as dask's scheduler protocol expects
    if not isinstance(dsk, Mapping):
        dsk = dsk.__dask_graph__()
    nodes: dict[Hashable, GraphNode] = convert_legacy_graph(dsk)
    known: dict[Hashable, Any] = {} if cache is None else dict(cache)
    flat = _flatten_keys(keys)
    for key in flat:
        if key not in nodes and key not in known:
            raise KeyError(key)
    built = _build(nodes, flat, known)
    with local_callbacks(callbacks) as active:
        values = _execute(
            built, nodes, active, executor, num_workers, queue_cap, max_in_flight, on_error
        )
    if cache is not None:
        cache.update(values)
    return _nest(keys, values)


def _flatten_keys(keys: Any) -> list[Hashable]:
    """Every key named in ``keys``; only lists nest (a tuple is a key, as in dask)."""
    if not isinstance(keys, list):
        return [keys]
    flat: list[Hashable] = []
    stack: list[Any] = [iter(keys)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _nest(keys: Any, values: Mapping[Hashable, Any]) -> Any:
    """Pick ``keys`` out of ``values`` with dask's shape: lists become tuples."""
    if isinstance(keys, list):
        return tuple([_nest(k, values) for k in keys])
    return values[keys]


class _Built:
    """A dask graph in dagexec form, plus what the run needs to answer dask."""

    __slots__ = ("consts", "deps", "graph", "targets")

    def __init__(self) -> None:
        self.graph = Graph()
        self.consts: dict[Hashable, Any] = {}  # data nodes and cache values used
        self.deps: dict[Hashable, tuple[Hashable, ...]] = {}  # task key -> task deps
        self.targets: list[Hashable] = []  # requested keys that are tasks


def _build(
    nodes: Mapping[Hashable, GraphNode], keys: list[Hashable], known: Mapping[Hashable, Any]
) -> _Built:
    """Turn the ancestors of ``keys`` into dagexec tasks, in dependency order.

    An iterative depth-first walk (a 10,000-long chain must not hit the recursion
    limit) that adds each task after its dependencies, so validating the result
    needs no cycle search. A cycle leaves a task added before one of its
    dependencies, which validation then reports as a ``CycleError``.
    """
    built = _Built()
    consts, task_deps = built.consts, built.deps
    graph_add = built.graph.add
    visiting: set[Hashable] = set()
    for root in dict.fromkeys(keys):
        if root in task_deps or root in consts:
            continue
        if _is_const(root, nodes, known, consts):
            continue
        stack: list[tuple[Hashable, Any, list[Hashable]]] = []
        deps = _node_deps(nodes[root])
        stack.append((root, iter(deps), deps))
        visiting.add(root)
        while stack:
            key, pending, deps = stack[-1]
            for dep in pending:
                if dep in task_deps or dep in consts or dep in visiting:
                    continue
                if _is_const(dep, nodes, known, consts):
                    continue
                if dep not in nodes:
                    continue  # reported by validation as a MissingDependencyError
                dep_deps = _node_deps(nodes[dep])
                stack.append((dep, iter(dep_deps), dep_deps))
                visiting.add(dep)
                break
            else:
                stack.pop()
                visiting.discard(key)
                fn, fn_deps = _compile(nodes[key], consts)
                task_deps[key] = fn_deps
                graph_add(key, fn, deps=fn_deps)
    built.targets = [k for k in dict.fromkeys(keys) if k in task_deps]
    return built


def _is_const(
    key: Hashable,
    nodes: Mapping[Hashable, GraphNode],
    known: Mapping[Hashable, Any],
    consts: dict[Hashable, Any],
) -> bool:
    """Record ``key``'s value if it is known before the run (cache or data node)."""
    if key in known:
        consts[key] = known[key]
        return True
    node = nodes.get(key)
    if isinstance(node, DataNode):
        consts[key] = node.value
        return True
    return False


def _node_deps(node: GraphNode) -> list[Hashable]:
    # Sorted when possible so that the run order does not depend on set order.
    deps = list(node.dependencies)
    try:
        deps.sort()
    except TypeError:  # keys of mixed types (str and tuple) do not compare
        deps.sort(key=lambda k: (type(k).__name__, str(k)))
    return deps


def _compile(
    node: GraphNode, consts: Mapping[Hashable, Any]
) -> tuple[Callable[..., Any], tuple[Hashable, ...]]:
    """The dagexec function and dependency keys computing ``node``.

    Values known before the run are baked into the function, so they cost no
    task and no argument passing.
    """
    if type(node) is Task:
        fast = _compile_task(node, consts)
        if fast is not None:
            return fast
    elif isinstance(node, Alias):
        target = node.target
        if target in consts:
            return _Const(consts[target]), ()
        return _identity, (target,)
    deps = tuple(d for d in _node_deps(node) if d not in consts)
    known = {d: consts[d] for d in node.dependencies if d in consts}
    return _CallNode(node, deps, known), deps


def _compile_task(
    node: Task, consts: Mapping[Hashable, Any]
) -> tuple[Callable[..., Any], tuple[Hashable, ...]] | None:
    """Call ``node.func`` directly when its arguments are references and literals.

    Returns None for a task with nested tasks or references among its keyword
    arguments, which :class:`_CallNode` evaluates the way dask does.
    """
    kwargs = node.kwargs
    for value in kwargs.values():
        if isinstance(value, (GraphNode, TaskRef)):
            return None
    template: list[Any] = []
    slots: list[int] = []
    deps: list[Hashable] = []
    for pos, arg in enumerate(node.args):
        if isinstance(arg, TaskRef):
            if arg.key in consts:
                template.append(consts[arg.key])
            else:
                template.append(None)
                slots.append(pos)
                deps.append(arg.key)
        elif isinstance(arg, DataNode):
            template.append(arg.value)
        elif isinstance(arg, GraphNode):
            return None
        else:
            template.append(arg)
    if len(slots) == len(template) and not kwargs:
        return node.func, tuple(deps)  # fn(*deps): nothing to adapt
    return _Apply(node.func, template, tuple(slots), kwargs), tuple(deps)


def _identity(x: Any) -> Any:
    return x


class _Const:
    """A task whose value is known: an alias of a data node."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


class _Apply:
    """``func(*args, **kwargs)`` with the dependency values put into their argument slots."""

    __slots__ = ("func", "kwargs", "slots", "template")

    def __init__(
        self,
        func: Callable[..., Any],
        template: list[Any],
        slots: tuple[int, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.func = func
        self.template = template
        self.slots = slots
        self.kwargs = kwargs

    def __call__(self, *values: Any) -> Any:
        args = self.template.copy()
        for pos, value in zip(self.slots, values, strict=True):
            args[pos] = value
        return self.func(*args, **self.kwargs)


class _CallNode:
    """Any other node, called as dask calls it: with a dict of its dependencies' values."""

    __slots__ = ("deps", "known", "node")

    def __init__(
        self, node: GraphNode, deps: tuple[Hashable, ...], known: dict[Hashable, Any]
    ) -> None:
        self.node = node
        self.deps = deps
        self.known = known

    def __call__(self, *values: Any) -> Any:
        data = dict(zip(self.deps, values, strict=True))
        if self.known:
            data.update(self.known)
        return self.node(data)


# ---------------------------------------------------------------------- running


# Executors cached per calling thread and bounds, as dask.threaded caches its
# pools: creating threads per compute() would dominate small graphs, and giving
# each calling thread its own executor means a task that itself calls
# dask.compute (nested scheduling) never waits for the executor it runs on.
_executors: dict[tuple[threading.Thread, int | None, int, int | None], Executor] = {}
_executors_lock = threading.Lock()


def _executor_for(workers: int | None, queue_cap: int, max_in_flight: int | None) -> Executor:
    thread = threading.current_thread()
    key = (thread, workers, queue_cap, max_in_flight)
    with _executors_lock:
        ex = _executors.get(key)
        if ex is None:
            for old in [k for k in _executors if not k[0].is_alive()]:
                _executors.pop(old).shutdown(wait=False)
            ex = Executor(workers, queue_cap=queue_cap, max_in_flight=max_in_flight)
            _executors[key] = ex
    return ex


def shutdown() -> None:
    """Stop the worker threads :func:`get` keeps between calls, once they are idle.

    The next :func:`get` starts new ones. For programs (and test suites) that
    must not leave threads behind; ordinary use never needs it, as the threads
    are daemons and idle between computations.
    """
    with _executors_lock:
        executors = list(_executors.values())
        _executors.clear()
    for ex in executors:
        ex.shutdown()


def _execute(
    built: _Built,
    nodes: Mapping[Hashable, GraphNode],
    callbacks: Any,
    executor: Executor | None,
    num_workers: int | None,
    queue_cap: int,
    max_in_flight: int | None,
    on_error: OnError,
) -> dict[Hashable, Any]:
    """Run the built graph, driving dask's callbacks; the requested keys' values."""
    callbacks = list(callbacks)
    bridge = _Bridge(built, nodes, callbacks) if callbacks else None
    if executor is None:
        if num_workers is None:
            num_workers = dask.config.get("num_workers", None)
        executor = _executor_for(num_workers, queue_cap, max_in_flight)
    succeeded = False
    try:
        if bridge is not None:
            bridge.start()
        result = executor.run(
            built.graph,
            _run_targets(built),
            on_error=on_error,
            callbacks=() if bridge is None else (bridge,),
        )
        if result.errors:
            raise _first_error(result)
        succeeded = True
    finally:
        if bridge is not None:
            bridge.finish(failed=not succeeded)
    values = dict(built.consts)
    values.update(result)
    return values


def _run_targets(built: _Built) -> list[Hashable] | None:
    """None when the requested keys are exactly the sinks: the graph holds only
    their ancestors already, so dagexec need not prune it again."""
    sinks = built.graph.sinks()
    if len(sinks) == len(built.targets) and set(sinks) == set(built.targets):
        return None
    return built.targets


def _first_error(result: RunResult) -> BaseException:
    """The first failure of an ``on_error="continue"`` run, noting any others."""
    errors = list(result.errors.items())
    exc = errors[0][1]
    if len(errors) > 1:
        others = ", ".join(describe(name) for name, _ in errors[1:])
        exc.add_note(f"dagexec: {len(errors) - 1} more tasks failed too: {others}")
    return exc


class _Bridge:
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
        built: _Built,
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

    def _initial_state(self, built: _Built) -> dict[str, Any]:
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

    def _wrap(self, built: _Built) -> None:
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


# --------------------------------------------------------------------------------------
# 2. dagexec graphs on a dask cluster
# --------------------------------------------------------------------------------------


def to_dask(
    graph: Graph, targets: Iterable[Hashable] | None = None
) -> tuple[dict[Hashable, Task], list[Hashable]]:
    """A dask graph computing ``targets`` (every sink if None) of ``graph``, and its keys.

    The returned keys are in the order of ``targets`` (or of ``graph.sinks()``),
    so ``dict(zip(targets, client.get(dsk, keys)))`` maps names to values. Only
    the targets and their ancestors are in the dask graph. Task names that are
    valid dask keys (str, int, float, bytes, tuples of those) stay as they are;
    any other hashable name is given a ``"dagexec-<n>"`` key.

    Raises:
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
    """
    dsk, keys, _ = _to_dask(graph, targets)
    return dsk, keys


def _to_dask(
    graph: Graph, targets: Iterable[Hashable] | None
) -> tuple[dict[Hashable, Task], list[Hashable], list[Hashable]]:
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    graph.validate()
    names = list(graph.sinks()) if targets is None else _check_targets(graph, targets)
    tasks = graph.tasks
    needed = _ancestors(tasks, names)
    key_of = _dask_keys(needed)
    dsk: dict[Hashable, Task] = {}
    for name in needed:
        task = tasks[name]
        key = key_of[name]
        dsk[key] = Task(key, task.fn, *[TaskRef(key_of[d]) for d in task.deps])
    return dsk, [key_of[n] for n in names], names


def _check_targets(graph: Graph, targets: Iterable[Hashable]) -> list[Hashable]:
    if isinstance(targets, (str, bytes)):
        raise TypeError(
            f"targets must be a collection of task names, got the string {targets!r}; "
            f"write targets=[{targets!r}]"
        )
    names = list(dict.fromkeys(targets))
    unknown = [t for t in names if t not in graph]
    if unknown:
        raise UnknownTargetError(unknown)
    return names


def _ancestors(tasks: Mapping[Hashable, Any], names: list[Hashable]) -> list[Hashable]:
    """``names`` and everything they depend on, in the graph's insertion order."""
    needed = set(names)
    stack = list(names)
    while stack:
        for dep in tasks[stack.pop()].deps:
            if dep not in needed:
                needed.add(dep)
                stack.append(dep)
    return [name for name in tasks if name in needed]


def _dask_keys(names: list[Hashable]) -> dict[Hashable, Any]:
    """A unique, valid dask key for each name: the name itself whenever it can be."""
    key_of: dict[Hashable, Any] = {}
    taken: set[Hashable] = set()
    renamed: list[Hashable] = []
    for name in names:
        try:
            validate_key(name)
        except TypeError:
            renamed.append(name)
        else:
            key_of[name] = name
            taken.add(name)
    n = 0
    for name in renamed:
        while f"dagexec-{n}" in taken:
            n += 1
        key_of[name] = f"dagexec-{n}"
        taken.add(key_of[name])
        n += 1
    return key_of


def run_on(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    **kwargs: Any,
) -> RunResult:
    """Run ``targets`` (every sink if None) of ``graph`` on a ``distributed.Client``.

    The same graph runs unchanged on threads (:func:`dagexec.run`) or here. It is
    validated before anything is sent, and the result maps each target to its
    value like a :class:`dagexec.RunResult`. The cluster's scheduler enforces its
    own limits, so the dagexec bounds in ``result.stats`` (``queue_cap``,
    ``max_in_flight``, ``effective_cap``, the peaks) are 0: not observed;
    ``workers`` is the cluster's thread count. ``kwargs`` go to ``client.get``
    (``retries``, ``resources``, ``workers``...).

    Raises:
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
        BaseException: a task's exception, as the cluster reports it.
    """
    dsk, keys, names = _to_dask(graph, targets)
    started = perf_counter()
    values = client.get(dsk, keys, **kwargs) if keys else []
    wall = perf_counter() - started
    threads = sum(client.nthreads().values())
    status = {name: TaskState.DONE for name in _ancestors(graph.tasks, names)}
    stats = RunStats(
        tasks_planned=len(status),
        tasks_run=len(status),
        wall_seconds=wall,
        workers=threads,
        queue_cap=0,
        max_in_flight=0,
        effective_cap=0,
        peak_in_flight=0,
        peak_queue_depth=(),
        tasks_per_worker=(),
    )
    return RunResult(dict(zip(names, values, strict=True)), status, {}, stats)
