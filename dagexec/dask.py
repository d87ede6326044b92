"""Dask in both directions: dagexec as a dask scheduler, and dagexec graphs on a cluster.

* :func:`get` follows dask's scheduler protocol, so
  ``dask.compute(x, scheduler=dagexec.dask.get)`` runs any dask collection on
  dagexec's bounded workers.
* :func:`to_dask` and :func:`run_on` turn a :class:`dagexec.Graph` into a dask
  graph and run it on a ``distributed.Client``.

This module is the only way into dask; ``import dagexec`` never loads it
(``dagexec.dask`` is imported on first attribute access). It checks that dask
is installed before importing its private helpers, which import dask freely:
``_dask_graph`` (converting graphs both ways) and ``_dask_callbacks`` (driving
dask's diagnostics). What stays here is the public API and the per-thread
executors :func:`get` keeps between calls. Install the extra from a clone of
dagexec with ``pip install -e '.[dask]'``.
"""

from __future__ import annotations

import multiprocessing.pool
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Literal

try:
    import dask
    from dask._task_spec import GraphNode, Task, convert_legacy_graph
    from dask.callbacks import local_callbacks
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"dagexec.dask needs dask and distributed ({exc}); install the dask extra "
        "from a clone of dagexec: pip install -e '.[dask]'"
    ) from exc

from ._core.errors import describe
from ._core.graph import Graph
from ._core.result import RunResult
from ._engine.executor import Executor
from ._integrations.dask_callbacks import Bridge, bridge_for
from ._integrations.dask_cluster import (
    ClusterGraph,
    ClusterRun,
    check_run_options,
    declared_resources,
    translate,
)
from ._integrations.dask_graph import (
    Annotations,
    Built,
    assemble,
    build,
    flatten_keys,
    nest,
)

__all__ = ["ClusterRun", "get", "run_on", "shutdown", "submit_on", "to_dask"]

# dagexec's own frames, which dask.compute drops from a task's traceback (the
# ``admin.traceback.shorten`` config dask keeps for its local schedulers' frames),
# so that a failing task's traceback shows the caller, ``compute`` and the task.
TRACEBACK_SHORTEN = r"dagexec[\\/](dask|_engine[\\/]\w+|_integrations[\\/]dask_\w+)\.py"

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
    pool: Any = None,
    queue_cap: int | None = None,
    max_in_flight: int | None = None,
    on_error: OnError = "raise",
    callbacks: Iterable[tuple[Callable[..., Any] | None, ...]] | None = None,
    executor: Executor | None = None,
    resources: Mapping[str, float] | None = None,
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
        cache: the run's live value store, as in ``dask.local`` (default: the
            ``cache`` dask config value). Keys already in it are not computed;
            the data nodes the run uses go into it when the run starts, each
            task's value when the task ends, and a value leaves it once every
            task needing it has ended, unless its key was requested.
        num_workers: worker threads (dagexec's ``workers``); default the
            ``num_workers`` dask config value, else ``os.cpu_count()``.
        pool: a ``concurrent.futures.ThreadPoolExecutor`` or a
            ``multiprocessing.pool.ThreadPool`` (default: the ``pool`` dask
            config value). As in ``dask.threaded.get`` it decides the number of
            worker threads, over ``num_workers``; the tasks run on dagexec's
            own workers, never on the pool.
        queue_cap, max_in_flight: dagexec's bounds, see :class:`dagexec.Executor`.
            Without either, the depth is memory-aware: one task per worker while
            tasks return large values (dask's own local policy), deeper for small
            ones; see ``docs/dask-memory.md``.
        on_error: ``"raise"`` stops at the first failure; ``"continue"`` lets
            every task that does not depend on a failure finish first. Either way
            the first failing task's own exception is raised.
        callbacks: dask local callbacks as 5-tuples; by default the active ones
            (``with ProgressBar():`` ...), exactly as dask's schedulers do.
        executor: run on this :class:`dagexec.Executor` instead of the calling
            thread's cached one; ``num_workers``, ``queue_cap`` and
            ``max_in_flight`` are then the executor's own.
        resources: capacities for tasks annotated with
            ``dask.annotate(resources={...})`` (default: the
            ``dagexec.resources`` dask config value). Annotated tasks hold their
            resources while out, as with ``g.add(..., resources=...)``; a task
            annotated with a resource that has no capacity is rejected before
            anything runs. Ready tasks run in ``dask.order``'s priority order.
        kwargs: other schedulers' options (``chunksize``...); ignored, as the
            protocol expects of a scheduler that does not know them.

    Raises:
        KeyError: a requested key is not in the graph.
        TypeError: ``pool`` is not a thread pool.
        KeyboardInterrupt: Ctrl-C, promptly; tasks already running finish in
            the background on an executor that the next call no longer uses.
        BaseException: the first failing task's own exception.
    """
    del kwargs  # accepted and ignored, as dask's scheduler protocol expects
    if executor is None:
        num_workers = _worker_count(num_workers, pool)
    annotations = _annotations(dsk)
    if resources is None:
        resources = dask.config.get("dagexec.resources", None)
    if not isinstance(dsk, Mapping):
        dsk = dsk.__dask_graph__()
    nodes: dict[Hashable, GraphNode] = convert_legacy_graph(dsk)
    if cache is None:
        cache = dask.config.get("cache", None)
    known: Mapping[Hashable, Any] = {} if cache is None else cache
    flat = flatten_keys(keys)
    for key in flat:
        if key not in nodes and key not in known:
            raise KeyError(key)
    built = build(nodes, flat, known)
    if annotations.resources:
        _check_annotated_capacity(built, annotations.resources, resources, executor)
    with local_callbacks(callbacks) as active:
        bridge = bridge_for(built, nodes, list(active), cache, flat)
        assemble(
            built,
            _ranks(built, nodes),
            annotations,
            None if bridge is None else bridge.wrap,
        )
        values = _execute(
            built,
            bridge,
            executor,
            num_workers,
            queue_cap,
            max_in_flight,
            on_error,
            resources,
        )
    return nest(keys, values)


def _annotations(dsk: Any) -> Annotations:
    """What ``dask.annotate`` asked of each task that dagexec honours: ``resources``,
    ``priority`` and ``retries`` (as ``Graph.add`` takes them), by key.

    dask keeps annotations beside the graph, not in it, and its low-level graph
    optimisation drops them: they reach a scheduler with
    ``compute(..., optimize_graph=False)``, as with dask's distributed scheduler.
    """
    found = Annotations()
    by_type: dict[str, Any] = {}
    annotations = getattr(dsk, "__dask_annotations__", None)
    if callable(annotations):
        by_type = {k: dict(v) for k, v in annotations().items() if isinstance(v, Mapping)}
    for layer in getattr(dsk, "layers", {}).values():
        for kind, value in (getattr(layer, "annotations", None) or {}).items():
            per_key = by_type.setdefault(kind, {})
            for key in layer:
                per_key[key] = value(key) if callable(value) else value
    for key, wanted in by_type.get("resources", {}).items():
        if isinstance(wanted, Mapping):
            found.resources[key] = wanted
    for kind, into in (("priority", found.priority), ("retries", found.retries)):
        for key, value in by_type.get(kind, {}).items():
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # dask allows any number; a whole one means the same
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"dask task {key!r} is annotated with {kind}={value!r}; dagexec.dask.get "
                    f"takes a whole number: dask.annotate({kind}=<int>)"
                )
            if value:
                into[key] = value
    return found


def _ranks(built: Built, nodes: Mapping[Hashable, GraphNode]) -> dict[Hashable, int]:
    """``dask.order``'s rank of each built task (lower runs first).

    Ordered over the tasks that run only (not the whole graph), so a partial
    computation of a large graph pays for its part.
    """
    from dask.order import order

    if len(built.deps) < 2:
        return {}
    tasks: dict[Any, GraphNode] = {k: nodes[k] for k in built.deps}
    ranks: dict[Hashable, int] = order(tasks)  # type: ignore[assignment]
    return ranks


def _check_annotated_capacity(
    built: Built,
    annotated: Mapping[Hashable, Mapping[str, float]],
    resources: object,
    executor: Executor | None,
) -> None:
    """Reject a task annotated with a resource that has no capacity, saying where a
    dask user gives one (the run's own check would point to ``Executor``/``run``)."""
    if resources is not None and not isinstance(resources, Mapping):
        return  # the run rejects it, naming the parameter
    capacity = {**(executor.resources if executor is not None else {}), **(resources or {})}
    for key in built.deps:
        for name in annotated.get(key) or ():
            if name not in capacity:
                declared = ", ".join(map(repr, sorted(capacity))) or "none"
                raise ValueError(
                    f"dask task {key!r} is annotated with resource {name!r}, which has no "
                    f"capacity (declared: {declared}); pass resources={{{name!r}: ...}} to "
                    "dagexec.dask.get(...) (through compute(..., resources=...)), or set "
                    f"the dask config: dask.config.set({{'dagexec.resources': {{{name!r}: ...}}}})"
                )


# ---------------------------------------------------------------------- running


# One executor per live calling thread, as dask.threaded keeps one pool per
# thread: creating threads per compute() would dominate small graphs, and giving
# each calling thread its own executor means a task that itself calls
# dask.compute (nested scheduling) never waits for the executor it runs on.
# Asking for other bounds replaces the thread's executor, and executors of
# threads that have ended are stopped, so the cache stays as small as the set
# of threads calling get().
_executors: dict[threading.Thread, tuple[tuple[int | None, int | None, int | None], Executor]] = {}
_executors_lock = threading.Lock()


def _executor_for(
    workers: int | None, queue_cap: int | None, max_in_flight: int | None
) -> Executor:
    thread = threading.current_thread()
    bounds = (workers, queue_cap, max_in_flight)
    retired: list[Executor] = []
    with _executors_lock:
        for other in [t for t in _executors if not t.is_alive()]:
            retired.append(_executors.pop(other)[1])
        cached = _executors.get(thread)
        if cached is not None and cached[0] == bounds:
            ex = cached[1]
        else:
            if cached is not None:
                retired.append(cached[1])
            ex = Executor(workers, queue_cap=queue_cap, max_in_flight=max_in_flight)
            _executors[thread] = (bounds, ex)
    for old in retired:
        old.shutdown(wait=False)  # idle: this thread's previous run has returned
    return ex


def _retire(ex: Executor) -> None:
    """Forget ``ex`` (the calling thread's cached executor) and stop it without waiting."""
    thread = threading.current_thread()
    with _executors_lock:
        cached = _executors.get(thread)
        if cached is not None and cached[1] is ex:
            del _executors[thread]
    ex.shutdown(wait=False)  # its workers exit once their running tasks end


def _worker_count(num_workers: int | None, pool: Any) -> int | None:
    """The worker threads to run on, decided as ``dask.threaded.get`` decides its pool.

    A pool (the keyword, else the ``pool`` config) decides by its size; then
    ``num_workers`` (the keyword, else the config). None (or 0) means the default.
    """
    if pool is None:
        pool = dask.config.get("pool", None)
    if pool is not None:
        return _pool_size(pool)
    if not num_workers:  # None or 0 mean "the default", as in dask
        num_workers = dask.config.get("num_workers", None) or None
    return num_workers


def _pool_size(pool: object) -> int:
    """How many threads ``pool`` has: its size is all dagexec takes from it."""
    if isinstance(pool, ProcessPoolExecutor) or (
        isinstance(pool, multiprocessing.pool.Pool)
        and not isinstance(pool, multiprocessing.pool.ThreadPool)
    ):
        raise TypeError(
            f"pool={_show(pool)} is a process pool, but dagexec.dask.get runs tasks on its "
            "own threads and takes only a thread pool's size from pool=; pass "
            "num_workers=N, or use scheduler='processes' to run tasks in processes"
        )
    if isinstance(pool, ThreadPoolExecutor):
        size = pool._max_workers
    elif isinstance(pool, multiprocessing.pool.ThreadPool):
        size = pool._processes  # type: ignore[attr-defined]
    else:
        raise TypeError(
            "pool must be a concurrent.futures.ThreadPoolExecutor or a "
            f"multiprocessing.pool.ThreadPool, got {type(pool).__name__} {_show(pool)}; "
            "dagexec.dask.get takes its size as the number of worker threads "
            "(or pass num_workers=N)"
        )
    return int(size)


def _show(value: object) -> str:
    """``repr(value)`` for a message, even when that ``__repr__`` raises."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def shutdown() -> None:
    """Stop the worker threads :func:`get` keeps between calls, once they are idle.

    The next :func:`get` starts new ones. For programs (and test suites) that
    must not leave threads behind; ordinary use never needs it, as the threads
    are daemons and idle between computations.
    """
    with _executors_lock:
        executors = [ex for _, ex in _executors.values()]
        _executors.clear()
    for ex in executors:
        ex.shutdown()


def _execute(
    built: Built,
    bridge: Bridge | None,
    executor: Executor | None,
    num_workers: int | None,
    queue_cap: int | None,
    max_in_flight: int | None,
    on_error: OnError,
    resources: Mapping[str, float] | None = None,
) -> dict[Hashable, Any]:
    """Run the built graph, driving dask's callbacks and cache; the requested keys' values."""
    cached = executor is None
    if executor is None:
        executor = _executor_for(num_workers, queue_cap, max_in_flight)
    succeeded = False
    try:
        if bridge is not None:
            bridge.start()
        try:
            result = executor.run(
                built.graph,
                _run_targets(built),
                on_error=on_error,
                callbacks=() if bridge is None else (bridge,),
                resources=resources,
            )
        except BaseException as exc:
            if cached and not isinstance(exc, Exception):
                # Ctrl-C: the run's running tasks go on in the background, and
                # the next run on this executor would wait for them, however
                # long they take. Retire it instead; the next call starts afresh.
                _retire(executor)
            raise
        if result.errors:
            raise _first_error(result)
        succeeded = True
    finally:
        if bridge is not None:
            bridge.finish(failed=not succeeded)
    values = dict(built.consts)
    values.update(result)
    return values


def _run_targets(built: Built) -> list[Hashable] | None:
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
        more = len(errors) - 1
        exc.add_note(f"dagexec: {more} more task{'s' if more != 1 else ''} failed too: {others}")
    return exc


def _register_with_dask() -> None:
    """Make ``scheduler="dagexec"`` a named scheduler and shorten tracebacks as dask does.

    Done once, on import: dask looks named schedulers up in ``dask.base``'s
    table, and reads the traceback patterns from its config (both the live config
    and its defaults, so that ``dask.config.refresh()`` keeps the pattern).
    """
    from dask.base import named_schedulers

    named_schedulers.setdefault("dagexec", get)
    shorten = list(dask.config.get("admin.traceback.shorten", None) or [])
    if TRACEBACK_SHORTEN not in shorten:
        dask.config.set({"admin.traceback.shorten": [*shorten, TRACEBACK_SHORTEN]})
    for defaults in dask.config.defaults:
        listed = defaults.get("admin", {}).get("traceback", {}).get("shorten")
        if isinstance(listed, list) and TRACEBACK_SHORTEN not in listed:
            listed.append(TRACEBACK_SHORTEN)


_register_with_dask()


# --------------------------------------------------------------------------------------
# 2. dagexec graphs on a dask cluster
# --------------------------------------------------------------------------------------


def to_dask(
    graph: Graph, targets: Iterable[Hashable] | None = None
) -> tuple[Mapping[Any, Task], list[Any]]:
    """A dask graph computing ``targets`` (every sink if None) of ``graph``, and its keys.

    The returned keys are in the order of ``targets`` (or of ``graph.sinks()``),
    so ``dict(zip(targets, client.get(dsk, keys)))`` maps names to values. Only
    the targets and their ancestors are in the dask graph. Keys are unique to
    each call (``"<name>-<token>"`` for a string name), so two graphs never
    share a key on one cluster. Tasks with ``priority``, ``resources`` or
    ``retries`` make it a ``HighLevelGraph`` whose layers carry them as dask
    annotations.

    Raises:
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
        ValueError: a task needs what one dask graph cannot say (a map or a
            cleanup task: use :func:`run_on`, which drives them from the client;
            a timeout, a retry delay...: see ``docs/dask-cluster.md``).
    """
    cg = translate(graph, targets, None)
    if cg.staged:
        t = min(cg.staged, key=cg.order.index)
        what = "is a g.map" if cg.plan.maps and t in cg.plan.maps else "has run_if='all_done'"
        if t not in _driven_tasks(cg):
            what = "depends on a g.map or a run_if='all_done' task"
        raise ValueError(
            f"task {describe(cg.plan.names[t])} {what}, which one dask graph cannot express "
            "(the client must drive it); use dagexec.dask.run_on(client, graph)"
        )
    dsk, _ = cg.first_graph()
    return dsk, [cg.keys[t] for t in cg.plan.targets]


def _driven_tasks(cg: ClusterGraph) -> set[int]:
    plan = cg.plan
    driven = set(plan.maps or ())
    if plan.policy is not None:
        driven.update(t for t, p in enumerate(plan.policy) if p is not None and p.cleanup)
    return driven


def run_on(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    on_error: OnError = "raise",
    client_kwargs: Mapping[str, Any] | None = None,
    **run_options: Any,
) -> RunResult:
    """Run ``targets`` (every sink if None) of ``graph`` on a ``distributed.Client``.

    Everything the graph asks for is carried to the cluster or refused before
    anything is sent (``docs/dask-cluster.md`` has the table): keys unique to
    the run, mapped back to task names; ``priority``, ``resources`` (only those
    the workers declare) and ``retries`` (on any Exception, no delay) as dask
    annotations; ``g.map`` and ``run_if="all_done"`` driven from the client.
    ``on_error="continue"`` returns what succeeded, with ``errors`` and
    ``status`` as after a local run. The dagexec bounds in ``result.stats``
    (``queue_cap``, ``max_in_flight``, ``effective_cap``, the peaks) are 0: the
    cluster's scheduler has its own; ``workers`` is the cluster's thread count.

    Args:
        client_kwargs: passed to ``Client.get`` for the graph (``workers=``,
            ``allow_other_workers=``...). Breaking change: these used to be
            ``run_on``'s own keyword arguments.
        run_options: ``dagexec.run``'s other options. None is supported on a
            cluster (``callbacks``, ``trace``, ``progress``, ``timeout``,
            ``checkpoint``, ``resources``): each raises a TypeError saying what
            to use instead, as does any unknown one.

    Raises:
        TypeError: a run option the cluster cannot honour, or an unknown one.
        ValueError: a task option the cluster cannot honour (a timeout, a retry
            delay, an undeclared resource, ``current_task()``), naming the task.
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
        BaseException: with ``on_error="raise"``, the first failing task's
            exception, as the cluster reports it, with a note naming the task.
    """
    return _cluster_run(client, graph, targets, on_error, client_kwargs, run_options).result()


def submit_on(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    on_error: OnError = "raise",
    client_kwargs: Mapping[str, Any] | None = None,
    **run_options: Any,
) -> ClusterRun:
    """:func:`run_on` without waiting: the run, started; ``run.result()`` waits for it.

    ``distributed.progress(run)`` follows its targets (and their ancestors);
    ``run.cancel()`` stops it. Maps and cleanup tasks are driven from a thread of
    the run's own. Raises what :func:`run_on` raises before anything is sent.
    """
    return _cluster_run(client, graph, targets, on_error, client_kwargs, run_options).start()


def _cluster_run(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None,
    on_error: object,
    client_kwargs: object,
    run_options: Mapping[str, Any],
) -> ClusterRun:
    """Check everything, then send the first graph; the run, not yet driven."""
    check_run_options(run_options)
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    if client_kwargs is not None and not isinstance(client_kwargs, Mapping):
        raise TypeError(
            "client_kwargs must be a dict of Client.get options, got "
            f"{type(client_kwargs).__name__}"
        )
    cg = translate(graph, targets, declared_resources(client))
    return ClusterRun(client, cg, str(on_error), client_kwargs)
