"""What :func:`dagexec.dask.get` needs besides converting graphs: dask's annotations
and order, the per-thread executors it keeps between calls, and running the built
graph on one of them while driving dask's callbacks.

Imported only by :mod:`dagexec.dask`, which checks that dask is installed first.
"""

from __future__ import annotations

import multiprocessing.pool
import threading
import warnings
from collections.abc import Hashable, Mapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Literal

import dask
from dask._task_spec import GraphNode

from .._core.errors import describe
from .._core.result import RunResult
from .._engine.front.executor import Executor
from .dask_callbacks import Bridge
from .dask_graph import Annotations, Built
from .dask_settings import check_priority, dense_ranks, unknown_resources

__all__ = [
    "annotations_of",
    "check_annotated_capacity",
    "execute",
    "executors",
    "executors_lock",
    "ranks",
    "shutdown",
    "worker_count",
]

OnError = Literal["raise", "continue"]


def annotations_of(dsk: Any) -> Annotations:
    """What ``dask.annotate`` asked of each task that dagexec honours: ``resources``,
    ``priority`` and ``retries`` (as ``Graph.add`` takes them), by key.

    dask keeps annotations beside the graph, not in it, and its low-level graph
    optimisation drops them: they reach a scheduler with
    ``compute(..., optimize_graph=False)``, as with dask's distributed scheduler.
    """
    by_type = _annotations_by_type(dsk)
    found = Annotations()
    for key, wanted in by_type.get("resources", {}).items():
        if isinstance(wanted, Mapping):
            found.resources[key] = wanted
    for key, value in by_type.get("retries", {}).items():
        retries = _whole_retries(key, value)
        if retries:
            found.retries[key] = retries
    _rank_priorities(by_type.get("priority", {}), found.priority)
    return found


def _annotations_by_type(dsk: Any) -> dict[str, Any]:
    """Every annotation, as {kind: {key: value}}: the graph-wide ones first, then each
    layer's, because a layer's annotations apply to its keys only and a callable
    value is asked per key."""
    by_type: dict[str, Any] = {}
    annotations = getattr(dsk, "__dask_annotations__", None)
    if callable(annotations):
        by_type = {k: dict(v) for k, v in annotations().items() if isinstance(v, Mapping)}
    for layer in getattr(dsk, "layers", {}).values():
        for kind, value in (getattr(layer, "annotations", None) or {}).items():
            per_key = by_type.setdefault(kind, {})
            for key in layer:
                per_key[key] = value(key) if callable(value) else value
    return by_type


def _whole_retries(key: Any, value: Any) -> Any:
    """``value`` as the whole number ``Graph.add`` takes: dask allows any number, and
    a whole float means the same; anything else is the caller's mistake, named."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"dask task {key!r} is annotated with retries={value!r}; dagexec.dask.get "
            "takes a whole number: dask.annotate(retries=<int>)"
        )
    return value


def _rank_priorities(priorities: dict[Any, Any], into: dict[Any, int]) -> None:
    """Each key's priority as a dense rank in ``into``: dask and distributed take any
    number, ``Graph.add`` an int, so the distinct values become ranks in the same
    order (0.25 < 0.5 < 3 -> 1, 2, 3); 0 has no rank because it is the default."""
    for key, value in priorities.items():
        check_priority(key, value)
    ranked = dense_ranks(priorities.values())
    for key, value in priorities.items():
        if ranked.get(value, 0):
            into[key] = ranked[value]


def ranks(built: Built, nodes: Mapping[Hashable, GraphNode]) -> dict[Hashable, int]:
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


def check_annotated_capacity(
    built: Built,
    annotated: dict[Hashable, Mapping[str, float]],
    resources: object,
    executor: Executor | None,
) -> None:
    """Reject a task annotated with a resource that has no capacity, saying where a
    dask user gives one (the run's own check would point to ``Executor``/``run``);
    or, with the dask config ``dagexec.unknown-resources: ignore``, drop such
    resources from the annotations, with one warning naming them."""
    if resources is not None and not isinstance(resources, Mapping):
        return  # the run rejects it, naming the parameter
    capacity = {**(executor.resources if executor is not None else {}), **(resources or {})}
    if unknown_resources() == "ignore":
        _drop_unknown(built, annotated, capacity)
        return
    for key in built.deps:
        for name in annotated.get(key) or ():
            if name not in capacity:
                declared = ", ".join(map(repr, sorted(capacity))) or "none"
                raise ValueError(
                    f"dask task {key!r} is annotated with resource {name!r}, which has no "
                    f"capacity (declared: {declared}); pass resources={{{name!r}: ...}} to "
                    "dagexec.dask.get(...) (through compute(..., resources=...)), or set "
                    f"the dask config: dask.config.set({{'dagexec.resources': {{{name!r}: ...}}}}) "
                    "(or set dagexec.unknown-resources to 'ignore' to run such tasks "
                    "without them, as dask's local schedulers do)"
                )


def _drop_unknown(
    built: Built, annotated: dict[Hashable, Mapping[str, float]], capacity: Mapping[str, float]
) -> None:
    """Keep only the resources with a capacity in each annotation; warn once."""
    dropped: set[str] = set()
    for key in built.deps:
        wanted = annotated.get(key)
        if not wanted or all(name in capacity for name in wanted):
            continue
        dropped.update(name for name in wanted if name not in capacity)
        annotated[key] = {n: a for n, a in wanted.items() if n in capacity}
    if dropped:
        names = ", ".join(map(repr, sorted(dropped)))
        warnings.warn(
            f"dagexec.dask.get ignores the resource annotation(s) {names}, which have no "
            "capacity (dask config dagexec.unknown-resources='ignore'); the tasks "
            "annotated with them run without them",
            UserWarning,
            stacklevel=4,
        )


# ---------------------------------------------------------------------- running


# One executor per live calling thread, as dask.threaded keeps one pool per
# thread: creating threads per compute() would dominate small graphs, and giving
# each calling thread its own executor means a task that itself calls
# dask.compute (nested scheduling) never waits for the executor it runs on.
# Asking for other bounds replaces the thread's executor, and executors of
# threads that have ended are stopped, so the cache stays as small as the set
# of threads calling get().
executors: dict[threading.Thread, tuple[tuple[int | None, int | None, int | None], Executor]] = {}
executors_lock = threading.Lock()


def _executor_for(
    workers: int | None, queue_cap: int | None, max_in_flight: int | None
) -> Executor:
    thread = threading.current_thread()
    bounds = (workers, queue_cap, max_in_flight)
    retired: list[Executor] = []
    with executors_lock:
        for other in [t for t in executors if not t.is_alive()]:
            retired.append(executors.pop(other)[1])
        cached = executors.get(thread)
        if cached is not None and cached[0] == bounds:
            ex = cached[1]
        else:
            if cached is not None:
                retired.append(cached[1])
            ex = Executor(workers, queue_cap=queue_cap, max_in_flight=max_in_flight)
            executors[thread] = (bounds, ex)
    for old in retired:
        old.shutdown(wait=False)  # idle: this thread's previous run has returned
    return ex


def _retire(ex: Executor) -> None:
    """Forget ``ex`` (the calling thread's cached executor) and stop it without waiting."""
    thread = threading.current_thread()
    with executors_lock:
        cached = executors.get(thread)
        if cached is not None and cached[1] is ex:
            del executors[thread]
    ex.shutdown(wait=False)  # its workers exit once their running tasks end


def worker_count(num_workers: int | None, pool: Any) -> int | None:
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
    with executors_lock:
        cached = [ex for _, ex in executors.values()]
        executors.clear()
    for ex in cached:
        ex.shutdown()


def execute(
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
