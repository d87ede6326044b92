"""Dask in both directions: dagexec as a dask scheduler, and dagexec graphs on a cluster.

* :func:`get` follows dask's scheduler protocol, so
  ``dask.compute(x, scheduler=dagexec.dask.get)`` runs any dask collection on
  dagexec's bounded workers.
* :func:`to_dask` and :func:`run_on` turn a :class:`dagexec.Graph` into a dask
  graph and run it on a ``distributed.Client``.

This module is the only way into dask; ``import dagexec`` never loads it
(``dagexec.dask`` is imported on first attribute access). It checks that dask
is installed before importing its private helpers in ``dagexec._integrations``,
which import dask freely: for :func:`get`, ``dask_graph`` (converting graphs
both ways), ``dask_callbacks`` (driving dask's diagnostics) and ``dask_local``
(annotations, order, the per-thread executors kept between calls) and
``dask_settings`` (what it does with each dask setting); for a
cluster, ``dask_translate`` (checks, keys, annotations), ``dask_worker`` (what
runs on a worker), ``dask_cluster`` (driving a run) and ``dask_checkpoint``.
What stays here is the public API. Install the extra from a clone of dagexec
with ``pip install -e '.[dask]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
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
from ._core.options import check_checkpoint_path
from ._core.result import RunResult
from ._engine.front.executor import Executor
from ._integrations.dask_callbacks import Bridge, bridge_for
from ._integrations.dask_checkpoint import ClusterCheckpoint
from ._integrations.dask_cluster import ClusterRun
from ._integrations.dask_graph import assemble, build, flatten_keys, nest
from ._integrations.dask_local import (
    annotations_of,
    check_annotated_capacity,
    execute,
    ranks,
    shutdown,
    worker_count,
)
from ._integrations.dask_local import executors as _executors  # noqa: F401 - tests read it
from ._integrations.dask_settings import FailedCalls, check_settings
from ._integrations.dask_translate import (
    check_run_options,
    declared_resources,
    driven,
    plan_for,
    translate,
)

__all__ = ["ClusterRun", "get", "run_on", "shutdown", "submit_on", "to_dask"]

# dagexec's own frames, which dask.compute drops from a task's traceback (the
# ``admin.traceback.shorten`` config dask keeps for its local schedulers' frames),
# so that a failing task's traceback shows the caller, ``compute`` and the task.
TRACEBACK_SHORTEN = r"dagexec[\\/](dask|_engine(?:[\\/]\w+)+|_integrations[\\/]dask_\w+)\.py"

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
    rerun_exceptions_locally: bool | None = None,
    raise_exception: Callable[[BaseException, Any], Any] | None = None,
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
            ones; see ``docs/dask.md``.
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
            anything runs (or, with the dask config
            ``dagexec.unknown-resources: ignore``, runs without it, with one
            warning). Ready tasks run in ``dask.order``'s priority order.
        rerun_exceptions_locally: run a failed task again on the calling thread
            (where ``pdb.pm()`` reaches it), as dask's local schedulers do; its
            exception is what the call raises (default: the
            ``rerun_exceptions_locally`` dask config value). Only the
            arguments of calls that raised are kept for it.
        raise_exception: called as ``raise_exception(exc, traceback)`` with the
            first failing task's exception, as ``dask.local.get_async`` does.
        kwargs: other schedulers' options (``chunksize``...); ignored, as the
            protocol expects of a scheduler that does not know them, except the
            hooks of ``dask.local``'s worker loop (``submit``, ``get_id``,
            ``pack_exception``, ``dumps``, ``loads``): a TypeError each.
            ``docs/dask.md`` lists every dask setting and what ``get`` does with it.

    Raises:
        KeyError: a requested key is not in the graph.
        TypeError: ``pool`` is not a thread pool; a refused dask setting; a
            priority annotation that is not a number.
        KeyboardInterrupt: Ctrl-C, promptly; tasks already running finish in
            the background on an executor that the next call no longer uses.
        BaseException: the first failing task's own exception.
    """
    check_settings(kwargs)  # the rest are accepted and ignored, as the protocol expects
    if rerun_exceptions_locally is None:
        rerun_exceptions_locally = bool(dask.config.get("rerun_exceptions_locally", False))
    failed = FailedCalls() if rerun_exceptions_locally else None
    if executor is None:
        num_workers = worker_count(num_workers, pool)
    annotations = annotations_of(dsk)
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
        check_annotated_capacity(built, annotations.resources, resources, executor)
    with local_callbacks(callbacks) as active:
        bridge = bridge_for(built, nodes, list(active), cache, flat)
        assemble(built, ranks(built, nodes), annotations, _wrapper(bridge, failed))
        try:
            values = execute(
                built,
                bridge,
                executor,
                num_workers,
                queue_cap,
                max_in_flight,
                on_error,
                resources,
            )
        except Exception as exc:
            if failed is not None:
                failed.rerun(exc)
            if raise_exception is not None:
                raise_exception(exc, exc.__traceback__)
            raise
    return nest(keys, values)


def _wrapper(
    bridge: Bridge | None, failed: FailedCalls | None
) -> Callable[[Hashable, Callable[..., Any]], Callable[..., Any]] | None:
    """What wraps each task's function: the callback bridge's reporting wrapper
    around the one that keeps a failed call's arguments (either may be absent)."""
    if failed is None:
        return None if bridge is None else bridge.wrap
    if bridge is None:
        return failed.wrap
    report, keep = bridge.wrap, failed.wrap
    return lambda key, fn: report(key, keep(key, fn))


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
    plain ``retries`` make it a ``HighLevelGraph`` whose layers carry them as
    dask annotations; a task's ``timeout``, ``retry_delay`` and ``retry_on``
    travel in its function (dagexec's attempt loop, run on the worker).

    Raises:
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
        ValueError: a task needs what one dask graph cannot say (a map or a
            cleanup task: use :func:`run_on`, which drives them from the client;
            see ``docs/dask.md`` for the rest).
    """
    cg = translate(graph, targets, None)
    if cg.staged:
        t = min(cg.staged, key=cg.order.index)
        what = "is a g.map" if cg.plan.maps and t in cg.plan.maps else "has run_if='all_done'"
        if t not in driven(cg.plan):
            what = "depends on a g.map or a run_if='all_done' task"
        raise ValueError(
            f"task {describe(cg.plan.names[t])} {what}, which one dask graph cannot express "
            "(the client must drive it); use dagexec.dask.run_on(client, graph)"
        )
    dsk, _ = cg.first_graph()
    return dsk, [cg.keys[t] for t in cg.plan.targets]


def run_on(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    on_error: OnError = "raise",
    checkpoint: str | os.PathLike[str] | None = None,
    client_kwargs: Mapping[str, Any] | None = None,
    **run_options: Any,
) -> RunResult:
    """Run ``targets`` (every sink if None) of ``graph`` on a ``distributed.Client``.

    Everything the graph asks for is carried to the cluster or refused before
    anything is sent (``docs/dask.md`` has the table): keys unique to
    the run, mapped back to task names; ``priority``, ``resources`` (only those
    the workers declare) and plain ``retries`` as dask annotations; a task's
    ``timeout``, ``retry_delay``, ``retry_on`` and ``current_task()`` by
    dagexec's attempt loop on the worker; ``g.map`` and ``run_if="all_done"``
    driven from the client. ``on_error="continue"`` returns what succeeded,
    with ``errors`` and ``status`` as after a local run. The dagexec bounds in
    ``result.stats`` (``queue_cap``, ``max_in_flight``, ``effective_cap``, the
    peaks) are 0: the cluster's scheduler has its own; ``workers`` is the
    cluster's thread count.

    Args:
        checkpoint: a checkpoint file on the client (the one ``dagexec.run``
            uses): what it holds is loaded and not run; the values the client
            receives (the targets', the inputs of maps and cleanup tasks) are
            saved. See ``docs/dask.md``.
        client_kwargs: passed to ``Client.get`` for the graph (``workers=``,
            ``allow_other_workers=``...). Breaking change: these used to be
            ``run_on``'s own keyword arguments.
        run_options: ``dagexec.run``'s other options. None is supported on a
            cluster (``callbacks``, ``trace``, ``progress``, ``timeout``,
            ``resources``, ``logs``): each raises a TypeError saying what to use
            instead, as does any unknown one.

    Raises:
        TypeError: a run option the cluster cannot honour, or an unknown one.
        ValueError: a task option the cluster cannot honour (an undeclared
            resource, a timeout with resources), naming the task.
        CheckpointError: the checkpoint file cannot be used.
        CycleError, MissingDependencyError: the graph is invalid.
        UnknownTargetError: a target is not a task of the graph.
        BaseException: with ``on_error="raise"``, the first failing task's
            exception, as the cluster reports it, with a note naming the task.
    """
    run = _cluster_run(client, graph, targets, on_error, checkpoint, client_kwargs, run_options)
    return run.result()


def submit_on(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    on_error: OnError = "raise",
    checkpoint: str | os.PathLike[str] | None = None,
    client_kwargs: Mapping[str, Any] | None = None,
    **run_options: Any,
) -> ClusterRun:
    """:func:`run_on` without waiting: the run, started; ``run.result()`` waits for it.

    ``distributed.progress(run)`` follows its targets (and their ancestors);
    ``run.cancel()`` stops it. Maps and cleanup tasks are driven from a thread of
    the run's own. Raises what :func:`run_on` raises before anything is sent.
    """
    run = _cluster_run(client, graph, targets, on_error, checkpoint, client_kwargs, run_options)
    return run.start()


def _cluster_run(
    client: Any,
    graph: Graph,
    targets: Iterable[Hashable] | None,
    on_error: object,
    checkpoint: object,
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
    path = check_checkpoint_path(checkpoint)
    plan = plan_for(graph, targets)
    cg = translate(graph, targets, declared_resources(client), plan)
    if path is None:
        return ClusterRun(client, cg, str(on_error), client_kwargs)
    store = ClusterCheckpoint(path, graph, plan)
    try:
        cg = translate(graph, targets, None, store.plan)  # checked above, in full
        return ClusterRun(client, cg, str(on_error), client_kwargs, store)
    except BaseException:
        store.close()
        raise
