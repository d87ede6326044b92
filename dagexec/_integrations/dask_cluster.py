"""dagexec graphs on a ``distributed`` cluster: carry every option a cluster can honour,
refuse the rest before anything is sent.

What carries over (``docs/dask-cluster.md`` has the table):

* every task, under a key unique to the run (``"<name>-<token>"``), mapped back
  to its name in the result, so two graphs on one client never share a key;
* ``priority`` (dask's: higher first), ``resources`` (only those some worker
  declares, checked against the scheduler's info: an undeclared one would wait
  forever), ``retries`` (only with ``retry_on=Exception`` and no delay, which
  is what dask's retries do), all as dask annotations;
* ``g.map`` and ``run_if="all_done"``, driven from the client: the graph up to
  them goes as one dask graph, then the client reads each map's ``over`` (or
  its chained map's items), submits one task per item and one that gathers
  them, and submits a cleanup task once all its dependencies ended;
* ``on_error="continue"``: the result holds what succeeded, ``errors`` what
  raised, ``status`` every task, as after a local run.

What cannot carry over (a per-task ``timeout``, ``current_task()``, and the run
options ``checkpoint``, ``callbacks``, ``trace``, ``progress``, ``timeout``,
``resources``) is refused: a ValueError naming the option and the task, or a
TypeError naming the run option. Nothing is sent to the cluster before every
check passed.

Threads: :class:`ClusterRun` drives the client-side part (maps, cleanup tasks)
on the thread that asks for its result, or on a thread of its own when started
with ``submit_on``; the distributed client is thread-safe for these calls.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from time import perf_counter
from typing import Any

from dask._task_spec import Task, TaskRef
from dask.core import validate_key
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .._core.graph import Graph
from .._core.plan import Plan, plan_run, topological_order
from .._core.policy import MISSING, Policy
from .._core.result import RunResult, RunStats, TaskState
from .._core.safe import add_note, task_for_message

__all__ = ["ClusterGraph", "ClusterRun", "check_run_options", "translate"]

# Run options of dagexec.run that a cluster cannot honour, and why (the fix).
_REFUSED_RUN_OPTIONS = {
    "callbacks": "use distributed's diagnostics (the dashboard, distributed.progress)",
    "trace": "use the dashboard's task stream or distributed.performance_report",
    "progress": "use submit_on(...) and distributed.progress(run)",
    "timeout": "use submit_on(...) and run.result(timeout=...), then run.cancel()",
    "checkpoint": "checkpoints are local files; run locally with dagexec.run",
    "resources": "capacities are the workers' own (dask-worker --resources)",
}


def check_run_options(options: Mapping[str, Any]) -> None:
    """TypeError for each run option ``run_on`` does not support; ``on_error`` checked."""
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


class Named:
    """A task function that names its task in what it raises (as a local run does),
    and marks the exception with the task, so the client knows which task failed
    and which were only downstream of it."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[..., Any], name: Hashable) -> None:
        self.fn = fn
        self.name = name

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except Exception as exc:
            add_note(exc, f"dagexec: raised by task {task_for_message(self.name)}")
            with contextlib.suppress(Exception):  # an exception refusing attributes
                exc.__dagexec_task__ = self.name  # type: ignore[attr-defined]
            raise


def _gather(*values: Any) -> list[Any]:
    """A map's value: the list of its items' values."""
    return list(values)


def failed_task(exc: BaseException) -> Hashable | None:
    """The task that raised ``exc`` on the cluster (see :class:`Named`), or None."""
    return getattr(exc, "__dagexec_task__", None)


class ClusterGraph:
    """A plan in dask's terms: unique keys, annotations, and what the client drives.

    ``staged`` are the tasks the client must submit itself: maps, cleanup tasks
    and everything downstream of either. The rest goes as one dask graph.
    """

    def __init__(self, plan: Plan, token: str) -> None:
        self.plan = plan
        self.token = token
        self.keys = _unique_keys(plan.names, token)
        self.staged = _downstream(plan, _driven(plan))
        self.order = topological_order(plan)

    def key(self, task: int) -> Any:
        return self.keys[task]

    def options(self, task: int) -> tuple[int, tuple[tuple[str, float], ...], int]:
        """(priority, resources, retries) of ``task`` as dask takes them."""
        plan = self.plan
        priority = plan.priority[task] if plan.priority is not None else 0
        needs = plan.needs[task] if plan.needs is not None else ()
        policy = plan.policy[task] if plan.policy is not None else None
        return priority, needs, policy.retries if policy is not None else 0

    def first_graph(self) -> tuple[Mapping[Any, Task], list[int]]:
        """The dask graph of every task not driven from the client, one layer per set
        of options (dask keeps annotations per layer), and the tasks in it."""
        plan = self.plan
        layers: dict[tuple[Any, ...], dict[Any, Task]] = {}
        tasks = [t for t in self.order if t not in self.staged]
        for t in tasks:
            key = self.keys[t]
            refs = [TaskRef(self.keys[d]) for d in plan.deps[t]]
            layers.setdefault(self.options(t), {})[key] = Task(
                key, Named(plan.fns[t], plan.names[t]), *refs
            )
        if len(layers) == 1 and (0, (), 0) in layers:
            return layers[(0, (), 0)], tasks
        hlg_layers: dict[str, MaterializedLayer] = {}
        dependencies: dict[str, set[str]] = {}
        layer_of = {key: n for n, part in enumerate(layers.values()) for key in part}
        for n, ((priority, needs, retries), part) in enumerate(layers.items()):
            annotations: dict[str, Any] = {}
            if priority:
                annotations["priority"] = priority
            if needs:
                annotations["resources"] = dict(needs)
            if retries:
                annotations["retries"] = retries
            name = f"dagexec-{self.token}-{n}"
            hlg_layers[name] = MaterializedLayer(part, annotations=annotations or None)
            # Layer dependencies decide what survives culling to the requested keys.
            dependencies[name] = {
                f"dagexec-{self.token}-{layer_of[d]}"
                for task in part.values()
                for d in task.dependencies
            } - {name}
        return HighLevelGraph(hlg_layers, dependencies), tasks


def translate(
    graph: Graph, targets: Iterable[Hashable] | None, declared: Mapping[str, float] | None
) -> ClusterGraph:
    """Plan ``graph`` and check every task against what a cluster can do; refuse the rest.

    ``declared``: the most of each resource one worker has (None: not checked,
    for ``to_dask``, which has no cluster to ask).
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    plan = plan_run(graph._compile(), targets)
    for t, name in enumerate(plan.names):
        policy = plan.policy[t] if plan.policy is not None else None
        if policy is not None:
            _check_policy(name, policy)
        if plan.needs is not None and plan.needs[t] and declared is not None:
            _check_resources(name, plan.needs[t], declared)
        if _calls_current_task(plan.fns[t]):
            raise ValueError(
                f"task {task_for_message(name)} calls dagexec.current_task(), which has no "
                "run to answer on a dask worker; run the graph locally, or read the "
                "task's name from an argument"
            )
    return ClusterGraph(plan, uuid.uuid4().hex[:12])


def _check_policy(name: Hashable, policy: Policy) -> None:
    where = f"task {task_for_message(name)}"
    if policy.timeout is not None:
        raise ValueError(
            f"{where} has timeout={policy.timeout!r}, which a dask cluster cannot enforce "
            "(a worker thread cannot be stopped); drop it, or run the graph locally"
        )
    if policy.retries and (policy.retry_delay or policy.retry_on != (Exception,)):
        raise ValueError(
            f"{where} has retries with retry_delay={policy.retry_delay!r} and "
            f"retry_on={policy.retry_on!r}; dask retries at once on any Exception: "
            "drop retry_delay and retry_on, or run the graph locally"
        )


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


def _calls_current_task(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s code names ``current_task`` (a best effort: direct calls)."""
    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object: its __call__'s code
        code = getattr(vars(type(fn)).get("__call__"), "__code__", None)
    return code is not None and "current_task" in code.co_names


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


def _driven(plan: Plan) -> set[int]:
    """Tasks the client must drive: maps and cleanup tasks (run_if="all_done")."""
    driven = set(plan.maps or ())
    if plan.policy is not None:
        driven.update(t for t, p in enumerate(plan.policy) if p is not None and p.cleanup)
    return driven


def _downstream(plan: Plan, start: set[int]) -> set[int]:
    seen = set(start)
    stack = list(start)
    while stack:
        for d in plan.dependents[stack.pop()]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


class ClusterRun:
    """One run of a dagexec graph on a distributed client.

    ``result()`` waits for it and returns a :class:`dagexec.RunResult`;
    ``futures`` are the distributed futures of its targets known so far (what
    ``distributed.progress(run)`` follows); ``cancel()`` releases everything.
    """

    def __init__(self, client: Any, cg: ClusterGraph, on_error: str, client_kwargs: Any) -> None:
        self.client = client
        self.cg = cg
        self.on_error = on_error
        self.client_kwargs = dict(client_kwargs or {})
        self.started = perf_counter()
        self.futures_by_task: dict[int, Any] = {}  # plan task -> its future
        self.items: dict[int, list[Any]] = {}  # expanded map -> its items' futures
        self.item_names: dict[int, list[Hashable]] = {}
        self.lock = threading.Lock()
        self.spare: set[int] = set()  # watched for their status only (see _collect)
        self._outcome: RunResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._send_first_graph()

    # ------------------------------------------------------------------ public
    @property
    def futures(self) -> list[Any]:
        with self.lock:
            return [
                self.futures_by_task[t] for t in self.cg.plan.targets if t in self.futures_by_task
            ]

    def __dask_graph__(self) -> dict[Any, Any]:
        """The futures so far, by key: what ``distributed.progress`` reads."""
        return {f.key: f for f in self.futures}

    def __dask_keys__(self) -> list[Any]:
        return [f.key for f in self.futures]

    def __dask_postcompute__(self) -> Any:  # pragma: no cover - not a real collection
        raise TypeError("a ClusterRun is not a dask collection; call run.result()")

    def __dask_tokenize__(self) -> str:
        return self.cg.token

    def start(self) -> ClusterRun:
        """Drive the client-side part on a thread of its own (``submit_on``)."""
        self._thread = threading.Thread(
            target=self._finish, name="dagexec-cluster-run", daemon=True
        )
        self._thread.start()
        return self

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> RunResult:
        if self._thread is None and not self._done.is_set():
            self._finish()
        elif not self._done.wait(timeout):
            raise TimeoutError(f"the run on the cluster did not end within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def cancel(self) -> None:
        """Cancel what has not run and let go of every value of the run on the cluster."""
        with self.lock:
            futures = list(self.futures_by_task.values())
            for items in self.items.values():
                futures.extend(items)
        self.client.cancel(futures)

    # ------------------------------------------------------------------ driving
    def _send_first_graph(self) -> None:
        cg = self.cg
        dsk, tasks = cg.first_graph()
        if not tasks:
            return
        wanted = self._watched(tasks)
        keys = [cg.keys[t] for t in wanted]
        futures = self.client.get(dsk, keys, sync=False, **self.client_kwargs)
        for t, fut in zip(wanted, futures, strict=True):
            self.futures_by_task[t] = fut

    def _watched(self, tasks: list[int]) -> list[int]:
        """The tasks of the first graph whose future the client needs: targets, inputs
        of the tasks it drives, and (on_error="continue") all, for their status;
        those wanted for their status alone go into ``spare``."""
        plan, staged = self.cg.plan, self.cg.staged
        wanted = set(plan.targets)
        for t in staged:
            wanted.update(plan.deps[t])
        if self.on_error == "continue":
            self.spare = {t for t in tasks if t not in wanted}
            return tasks
        return [t for t in tasks if t in wanted]

    def _finish(self) -> None:
        try:
            self._drive()
            self._outcome = self._collect()
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    def _drive(self) -> None:
        """Submit the tasks the client drives, in dependency order."""
        cg, plan, client = self.cg, self.cg.plan, self.client
        for t in cg.order:
            if t not in cg.staged:
                continue
            priority, needs, retries = cg.options(t)
            extra: dict[str, Any] = {"key": cg.keys[t], "pure": False}
            if priority:
                extra["priority"] = priority
            if needs:
                extra["resources"] = dict(needs)
            if retries:
                extra["retries"] = retries
            deps = [self.futures_by_task[d] for d in plan.deps[t]]
            fn = Named(plan.fns[t], plan.names[t])
            if plan.maps is not None and t in plan.maps:
                self._expand(t, fn, deps, extra)
                continue
            policy = plan.policy[t] if plan.policy is not None else None
            if policy is not None and policy.cleanup:
                args = self._ended(plan.deps[t])
                fut = client.submit(fn, *args, **extra)
            else:
                fut = client.submit(fn, *deps, **extra)
            with self.lock:
                self.futures_by_task[t] = fut

    def _expand(self, t: int, fn: Named, deps: list[Any], extra: dict[str, Any]) -> None:
        """Submit one task per item of map ``t``, then one gathering their values."""
        plan, client = self.cg.plan, self.client
        over, rest = plan.deps[t][0], deps[1:]
        name, key = plan.names[t], extra.pop("key")
        if over in self.items:  # a chained map: item i follows item i of the one before
            sources = self.items[over]
            inputs = list(sources)
        else:
            over_future = self.futures_by_task[over]
            try:
                inputs = list(over_future.result())
            except Exception:
                inputs = []
                gathered = over_future  # fails as over failed: the map is downstream of it
                with self.lock:
                    self.futures_by_task[t] = gathered
                self.items[t], self.item_names[t] = [], []
                return
        futures: list[Any] = []
        names: list[Hashable] = []
        base = key if isinstance(key, str) else str(key)
        for i, item in enumerate(inputs):
            item_name = (name, i)
            names.append(item_name)
            futures.append(
                client.submit(
                    Named(plan.fns[t], item_name), item, *rest, key=(f"{base}-item", i), **extra
                )
            )
        self.items[t], self.item_names[t] = futures, names
        gathered = client.submit(_gather, *futures, key=key, pure=False)
        with self.lock:
            self.futures_by_task[t] = gathered

    def _ended(self, deps: tuple[int, ...]) -> list[Any]:
        """A cleanup task's arguments once all ``deps`` ended: the value (its future),
        the exception of a dependency that failed itself, or MISSING."""
        from distributed import wait

        plan = self.cg.plan
        futures = [self.futures_by_task[d] for d in deps]
        wait(futures)  # type: ignore[no-untyped-call]
        args: list[Any] = []
        for d, fut in zip(deps, futures, strict=True):
            if fut.status == "finished":
                args.append(fut)
                continue
            exc = fut.exception() if fut.status == "error" else None
            if exc is not None and failed_task(exc) == plan.names[d]:
                args.append(exc)  # it failed itself
            else:
                args.append(MISSING)  # skipped (downstream of a failure) or cancelled
        return args

    # ------------------------------------------------------------------ results
    def _collect(self) -> RunResult:
        plan = self.cg.plan
        from distributed import as_completed, wait

        with self.lock:
            watched = dict(self.futures_by_task)
            for t, futures in self.items.items():
                for name, fut in zip(self.item_names[t], futures, strict=True):
                    watched[("item", name)] = fut  # type: ignore[index]
            # Watched only for their status (on_error="continue"): each is let go
            # as soon as it is known, so the cluster drops the value once its
            # dependents have it, as a local run drops values.
            kept = set(plan.targets)
            spare = [f for t, f in watched.items() if t not in kept and t in self.spare]
            for t in self.spare:
                self.futures_by_task.pop(t, None)
        errors: dict[Hashable, BaseException] = {}
        failed_here: set[Hashable] = set()

        def note(fut: Any) -> None:
            if fut.status == "error":
                exc = fut.exception()
                owner = failed_task(exc)
                if owner is not None:
                    failed_here.add(owner)
                    errors.setdefault(owner, exc)

        for fut in as_completed(spare) if spare else ():  # type: ignore[no-untyped-call]
            note(fut)
            fut.release()
        rest = [f for t, f in watched.items() if t in kept or t not in self.spare]
        wait(rest)  # type: ignore[no-untyped-call]
        for fut in rest:
            note(fut)
        if errors and self.on_error == "raise":
            self.cancel()
            raise _first(errors)
        status, values = self._statuses(failed_here), {}
        target_futures = [(plan.names[t], self.futures_by_task[t]) for t in plan.targets]
        ok = [(name, fut) for name, fut in target_futures if fut.status == "finished"]
        gathered = self.client.gather([fut for _, fut in ok])
        values = dict(zip([name for name, _ in ok], gathered, strict=True))
        threads = sum(self.client.nthreads().values())
        self.cancel()  # release the run's keys on the cluster
        stats = RunStats(
            tasks_planned=len(status),
            tasks_run=sum(s is TaskState.DONE or s is TaskState.FAILED for s in status.values()),
            wall_seconds=perf_counter() - self.started,
            workers=threads,
            queue_cap=0,
            max_in_flight=0,
            effective_cap=0,
            peak_in_flight=0,
            peak_queue_depth=(),
            tasks_per_worker=(),
        )
        return RunResult(values, status, errors, stats, targets=plan.target_names)

    def _statuses(self, failed_here: set[Hashable]) -> dict[Hashable, TaskState]:
        """Every task's end: FAILED if it raised, SKIPPED if downstream of one that did."""
        plan = self.cg.plan
        status: dict[Hashable, TaskState] = {}
        broken = [False] * len(plan.names)
        policy = plan.policy
        for t in self.cg.order:
            name = plan.names[t]
            cleanup = policy is not None and policy[t] is not None and policy[t].cleanup  # type: ignore[union-attr]
            upstream = any(broken[d] for d in plan.deps[t])
            if t in self.items:
                for item in self.item_names[t]:
                    if item in failed_here:
                        status[item] = TaskState.FAILED
                        upstream = True
                    else:
                        status[item] = TaskState.SKIPPED if upstream else TaskState.DONE
            if name in failed_here:
                status[name] = TaskState.FAILED
                broken[t] = True
            elif upstream and not cleanup:
                status[name] = TaskState.SKIPPED
                broken[t] = True
            else:
                status[name] = TaskState.DONE
        return status


def _first(errors: Mapping[Hashable, BaseException]) -> BaseException:
    exc = next(iter(errors.values()))
    if len(errors) > 1:
        others = ", ".join(task_for_message(n) for n in list(errors)[1:])
        add_note(exc, f"dagexec: {len(errors) - 1} more task(s) failed too: {others}")
    return exc
