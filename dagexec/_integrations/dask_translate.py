"""A dagexec plan in dask's terms, checked against what a cluster can do.

:func:`translate` plans the graph and refuses, before anything is sent, every
task option a cluster cannot honour (a ValueError naming the task and the
option); :func:`check_run_options` does the same for the run options (a
TypeError naming the option and what to use instead). :class:`ClusterGraph`
then gives each task a key unique to the run, its options as dask annotations,
its function wrapped for the worker (:mod:`.dask_worker`), and the tasks the
client must drive itself (maps, cleanup tasks and what is downstream of them).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from dask._task_spec import Task, TaskRef
from dask.core import validate_key
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .._core.graph import Graph
from .._core.plan import Plan, plan_run, topological_order
from .._core.policy import Policy
from .._core.safe import task_for_message
from .dask_worker import Attempts, Named, needs_attempts

__all__ = ["ClusterGraph", "check_run_options", "declared_resources", "translate"]

# Run options of dagexec.run that a cluster cannot honour, and why (the fix).
_REFUSED_RUN_OPTIONS = {
    "callbacks": "use distributed's diagnostics (the dashboard, distributed.progress)",
    "trace": "use the dashboard's task stream or distributed.performance_report",
    "progress": "use submit_on(...) and distributed.progress(run)",
    "timeout": "use submit_on(...) and run.result(timeout=...), then run.cancel()",
    "resources": "capacities are the workers' own (dask-worker --resources)",
    "logs": "each worker's logs are in client.get_worker_logs() and on the dashboard",
}


def check_run_options(options: Mapping[str, Any]) -> None:
    """TypeError for each run option ``run_on`` does not support, or does not know."""
    for name, value in options.items():
        if name in _REFUSED_RUN_OPTIONS:
            if value in (None, False, ()):
                continue  # the default: nothing asked of the cluster
            raise TypeError(
                f"run_on does not support {name}= on a dask cluster: {_REFUSED_RUN_OPTIONS[name]}"
            )
        raise TypeError(
            f"run_on got an unexpected keyword argument {name!r}; options for "
            f"Client.get go in client_kwargs={{{name!r}: ...}}"
        )


class ClusterGraph:
    """A plan in dask's terms: unique keys, annotations, and what the client drives.

    ``staged`` are the tasks the client must submit itself: maps, cleanup tasks
    and everything downstream of either. The rest goes as one dask graph.
    """

    def __init__(self, plan: Plan, token: str) -> None:
        self.plan = plan
        self.token = token
        self.keys = _unique_keys(plan.names, token)
        self.staged = _downstream(plan, driven(plan))
        self.order = topological_order(plan)

    def policy(self, task: int) -> Policy | None:
        return self.plan.policy[task] if self.plan.policy is not None else None

    def options(self, task: int) -> tuple[int, tuple[tuple[str, float], ...], int]:
        """(priority, resources, retries) of ``task`` as dask takes them; retries only
        when dask's own do what was asked (else the worker's attempt loop does them)."""
        plan = self.plan
        priority = plan.priority[task] if plan.priority is not None else 0
        needs = plan.needs[task] if plan.needs is not None else ()
        policy = self.policy(task)
        retries = 0 if policy is None or needs_attempts(policy) else policy.retries
        return priority, needs, retries

    def function(self, task: int, name: Hashable | None = None) -> Named:
        """``task``'s function as the worker calls it (``name``: a map item's)."""
        fn, policy = self.plan.fns[task], self.policy(task)
        name = self.plan.names[task] if name is None else name
        if policy is not None and needs_attempts(policy):
            return Attempts(fn, name, policy)
        return Named(fn, name)

    def first_graph(self, layered: bool = False) -> tuple[Mapping[Any, Task], list[int]]:
        """The dask graph of every task not driven from the client, one layer per set
        of options (dask keeps annotations per layer), and the tasks in it.

        A plain dict when no task has options, unless ``layered``: ``Client.get``
        names a dict's graph by hashing every task in it (pickling each task's
        function twice or more: ~0.2 ms a task, the most of what the client does
        per task), and a ``HighLevelGraph``'s by a fresh token; the keys are
        unique to the run either way.
        """
        plan = self.plan
        layers: dict[tuple[Any, ...], dict[Any, Task]] = {}
        tasks = [t for t in self.order if t not in self.staged]
        for t in tasks:
            key = self.keys[t]
            refs = [TaskRef(self.keys[d]) for d in plan.deps[t]]
            layers.setdefault(self.options(t), {})[key] = Task(key, self.function(t), *refs)
        if len(layers) == 1 and (0, (), 0) in layers and not layered:
            return layers[(0, (), 0)], tasks
        hlg_layers: dict[str, MaterializedLayer] = {}
        dependencies: dict[str, set[str]] = {}
        layer_of = {key: n for n, part in enumerate(layers.values()) for key in part}
        for n, (options, part) in enumerate(layers.items()):
            name = f"dagexec-{self.token}-{n}"
            annotated = dask_annotations(options) or None
            hlg_layers[name] = MaterializedLayer(part, annotations=annotated)
            # Layer dependencies decide what survives culling to the requested keys.
            dependencies[name] = {
                f"dagexec-{self.token}-{layer_of[d]}"
                for task in part.values()
                for d in task.dependencies
            } - {name}
        return HighLevelGraph(hlg_layers, dependencies), tasks


def dask_annotations(options: tuple[int, tuple[tuple[str, float], ...], int]) -> dict[str, Any]:
    """:meth:`ClusterGraph.options` as dask's annotations (and ``Client.submit``'s
    keywords): only those that differ from dask's defaults."""
    priority, needs, retries = options
    found: dict[str, Any] = {}
    if priority:
        found["priority"] = priority
    if needs:
        found["resources"] = dict(needs)
    if retries:
        found["retries"] = retries
    return found


def translate(
    graph: Graph,
    targets: Iterable[Hashable] | None,
    declared: Mapping[str, float] | None,
    plan: Plan | None = None,
) -> ClusterGraph:
    """Plan ``graph`` (or take ``plan``, one of its plans cut down by a checkpoint) and
    check every task against what a cluster can do; refuse the rest.

    ``declared``: the most of each resource one worker has (None: not checked,
    for ``to_dask``, which has no cluster to ask).
    """
    if plan is None:
        plan = plan_for(graph, targets)
    for t, name in enumerate(plan.names):
        policy = plan.policy[t] if plan.policy is not None else None
        needs = plan.needs[t] if plan.needs is not None else ()
        if policy is not None and policy.isolate is not None:
            raise ValueError(
                f"task {task_for_message(name)} has isolate={policy.isolate!r}, which a dask "
                "cluster cannot honour (a dask worker has no dagexec child process to run it "
                "in, kill at a timeout or lose to a crash alone); drop isolate= (the workers "
                "of a processes=True cluster are processes already), or run the graph locally"
            )
        if policy is not None and policy.timeout is not None and needs:
            raise ValueError(
                f"task {task_for_message(name)} has timeout={policy.timeout:g} and "
                f"resources={dict(needs)!r}: on a dask cluster the worker frees the "
                "resources at the timeout while the call runs on (locally they stay held "
                "until it returns); drop one of the two, or run the graph locally"
            )
        if needs and declared is not None:
            _check_resources(name, needs, declared)
        if policy is not None and policy.timeout is not None:
            _check_no_cleanup_after(plan, t, policy.timeout)
    return ClusterGraph(plan, uuid.uuid4().hex[:12])


def _check_no_cleanup_after(plan: Plan, task: int, timeout: float) -> None:
    """Refuse a timeout upstream of a cleanup task: locally the cleanup task waits for
    a timed-out attempt's call to return; on a cluster the call runs on unseen."""
    policies = plan.policy
    assert policies is not None
    for t in sorted(_downstream(plan, {task})):
        policy = policies[t]
        if policy is not None and policy.cleanup:
            raise ValueError(
                f"task {task_for_message(plan.names[task])} has timeout={timeout:g} and the "
                f"cleanup task {task_for_message(plan.names[t])} (run_if='all_done') runs "
                "after it: locally a cleanup task waits for a timed-out call to return, which "
                "a dask cluster cannot see; drop the timeout, or run the graph locally"
            )


def plan_for(graph: Graph, targets: Iterable[Hashable] | None) -> Plan:
    """The run's plan of ``graph`` (TypeError for anything but a dagexec.Graph)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    return plan_run(graph._compile(), targets)


def _check_resources(
    name: Hashable, needs: tuple[tuple[str, float], ...], declared: Mapping[str, float]
) -> None:
    for resource, amount in needs:
        if declared.get(resource, 0) < amount:
            have = ", ".join(f"{r!r}: {a:g}" for r, a in sorted(declared.items())) or "none"
            raise ValueError(
                f"task {task_for_message(name)} needs resources={{{resource!r}: {amount:g}}}, "
                f"but no worker of the cluster declares that much (most on one worker: "
                f"{have}); it would wait forever. Start workers with "
                f"--resources '{resource}={amount:g}', or drop the need"
            )


def declared_resources(client: Any) -> dict[str, float]:
    """The most of each resource any one worker of ``client``'s cluster declares."""
    most: dict[str, float] = {}
    for worker in client.scheduler_info().get("workers", {}).values():
        for resource, amount in (worker.get("resources") or {}).items():
            most[resource] = max(most.get(resource, 0), amount)
    return most


def _unique_keys(names: Iterable[Hashable], token: str) -> list[Any]:
    """A dask key per task, unique to this run, readable on the dashboard."""
    keys: list[Any] = []
    taken: set[Any] = set()
    for i, name in enumerate(names):
        key: Any
        if isinstance(name, str):
            key = f"{name}-{token}"
        elif isinstance(name, tuple) and name and isinstance(name[0], str):
            key = (f"{name[0]}-{token}", *name[1:])
        else:
            key = f"dagexec-{i}-{token}"
        try:
            validate_key(key)
        except TypeError:
            key = f"dagexec-{i}-{token}"
        if key in taken:
            key = f"dagexec-{i}-{token}"
        taken.add(key)
        keys.append(key)
    return keys


def driven(plan: Plan) -> set[int]:
    """Tasks the client must drive: maps and cleanup tasks (run_if="all_done")."""
    tasks = set(plan.maps or ())
    if plan.policy is not None:
        tasks.update(t for t, p in enumerate(plan.policy) if p is not None and p.cleanup)
    return tasks


def _downstream(plan: Plan, start: set[int]) -> set[int]:
    seen = set(start)
    stack = list(start)
    while stack:
        for d in plan.dependents[stack.pop()]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen
