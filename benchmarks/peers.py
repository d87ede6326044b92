"""The implementations compared: dagexec (public API only) and its peers.

Every implementation has the same two steps, so build cost stays out of the timed
part: ``prepare(spec)`` builds its own structure from a :class:`workloads.Spec`
once, and ``run(prepared)`` executes the spec's request and returns
``{target: value}``.

The peers are written to be the honest competition, not straw men:

* ``serial``: a topological order computed once, then a loop in the calling
  thread over a plain dict. No threads, no locks: the floor for no-op graphs.
* ``graphlib+tpe (capped)``: ``graphlib.TopologicalSorter`` over the graph pruned
  to the request and a ``ThreadPoolExecutor``, written the way a careful engineer
  would: at most 64 x workers futures pending, so each ``wait(FIRST_COMPLETED)``
  stays cheap, the other ready tasks waiting in a deque.
* ``graphlib+tpe (naive)``: the same, but every ready task submitted at once,
  which makes each ``wait()`` O(pending) on wide graphs. Kept, labelled, because
  it is what most hand-written versions look like; ratios use the faster of the two.
* ``threads``: bare threads (``threading.Thread``), one per worker, each running whole
  chains of the ``pycpu`` workload back to back (no scheduler at all): the
  ceiling for what any executor can get out of that graph.
* ``dagron`` and ``traversal`` (Python >= 3.12, Rust-backed, optional): their own
  executors with 2 workers; pruned to the request with their own means
  (``DAG.subgraph`` of the targets' ancestors; ``Graph.compile(*targets)``).
* ``dask``: ``dask.threaded.get`` on a legacy tuple graph with a 2-thread pool,
  culled to the request the way dask does it itself (i.e. not at all: that is
  dask's own behaviour for ``get`` and is what the partial workload shows).
"""

from __future__ import annotations

import graphlib
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from workloads import Spec, needed

import dagexec


class Impl:
    """Base: a named implementation with prepare/run.

    ``last_count`` is how many task functions the last ``run`` called (counted by
    the implementation, not assumed), or None where it cannot be counted cheaply;
    the suite asserts it equals the workload's ``tasks_run``.
    """

    name = "?"
    last_count: int | None = None

    def prepare(self, spec: Spec) -> Any:
        raise NotImplementedError

    def run(self, prepared: Any) -> dict[str, Any]:
        raise NotImplementedError


class Dagexec(Impl):
    """dagexec through ``dagexec.run`` (a fresh executor per run, as most users call it)."""

    name = "dagexec"

    def __init__(
        self, workers: int, queue_cap: int | None = None, max_in_flight: int | None = None
    ) -> None:
        self.kwargs: dict[str, Any] = {"workers": workers}
        if queue_cap is not None:
            self.kwargs["queue_cap"] = queue_cap
        if max_in_flight is not None:
            self.kwargs["max_in_flight"] = max_in_flight
        self.last_stats: Any = None

    def prepare(self, spec: Spec) -> tuple[dagexec.Graph, list[str] | None]:
        g = dagexec.Graph()
        for name, (fn, deps) in spec.tasks.items():
            g.add(name, fn, deps=deps)
        g.validate()
        return g, spec.targets

    def run(self, prepared: tuple[dagexec.Graph, list[str] | None]) -> dict[str, Any]:
        g, targets = prepared
        r = dagexec.run(g, targets, **self.kwargs)
        self.last_stats = r.stats
        self.last_count = r.stats.tasks_run
        return dict(r)


class Serial(Impl):
    """Topological loop in the calling thread; optionally drops values once consumed."""

    name = "serial"

    def __init__(self, release: bool = False) -> None:
        self.release = release

    def prepare(self, spec: Spec) -> Any:
        request = spec.request()
        keep = needed(spec.tasks, request)
        graph = {n: spec.tasks[n][1] for n in spec.tasks if n in keep}
        order = [(n, *spec.tasks[n]) for n in graphlib.TopologicalSorter(graph).static_order()]
        consumers: dict[str, int] = dict.fromkeys(graph, 0)
        for deps in graph.values():
            for d in deps:
                consumers[d] += 1
        for t in request:
            consumers[t] += 1  # never released
        return order, request, consumers

    def run(self, prepared: Any) -> dict[str, Any]:
        order, request, consumers = prepared
        results: dict[str, Any] = {}
        self.last_count = len(order)
        if not self.release:
            for name, fn, deps in order:
                results[name] = fn(*[results[d] for d in deps])
        else:
            left = dict(consumers)
            for name, fn, deps in order:
                results[name] = fn(*[results[d] for d in deps])
                for d in deps:
                    left[d] -= 1
                    if not left[d]:
                        del results[d]
        return {t: results[t] for t in request}


class GraphlibTPE(Impl):
    """graphlib.TopologicalSorter + ThreadPoolExecutor, wait(FIRST_COMPLETED), uncapped.

    A fresh pool per run (like ``dagexec.run``). Values are dropped once every
    consumer has been submitted when ``release`` is set (the memory workload).
    """

    name = "graphlib+tpe (naive)"

    def __init__(self, workers: int, release: bool = False) -> None:
        self.workers = workers
        self.release = release

    def prepare(self, spec: Spec) -> Any:
        request = spec.request()
        keep = needed(spec.tasks, request)
        graph = {n: spec.tasks[n][1] for n in spec.tasks if n in keep}
        fns = {n: spec.tasks[n][0] for n in graph}
        consumers: dict[str, int] = dict.fromkeys(graph, 0)
        for deps in graph.values():
            for d in deps:
                consumers[d] += 1
        for t in request:
            consumers[t] += 1
        return graph, fns, request, consumers

    def run(self, prepared: Any) -> dict[str, Any]:
        graph, fns, request, consumers = prepared
        ts = graphlib.TopologicalSorter(graph)
        ts.prepare()
        results: dict[str, Any] = {}
        left = dict(consumers)
        release = self.release
        pending: dict[Future[Any], str] = {}
        count = 0
        with ThreadPoolExecutor(self.workers) as pool:
            submit = pool.submit
            while ts.is_active():
                for name in ts.get_ready():
                    deps = graph[name]
                    pending[submit(fns[name], *[results[d] for d in deps])] = name
                    count += 1
                    if release:
                        for d in deps:
                            left[d] -= 1
                            if not left[d]:
                                del results[d]
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    name = pending.pop(fut)
                    results[name] = fut.result()
                    ts.done(name)
        self.last_count = count
        return {t: results[t] for t in request}


class CappedGraphlibTPE(GraphlibTPE):
    """graphlib + ThreadPoolExecutor as a careful engineer writes it (issue 13).

    Pruned to the request; at most ``per_worker * workers`` futures pending, so
    each ``wait(FIRST_COMPLETED)`` (which walks every pending future) stays cheap;
    the other ready tasks wait, first in first out, in a deque.
    """

    name = "graphlib+tpe (capped)"

    def __init__(self, workers: int, release: bool = False, per_worker: int = 64) -> None:
        super().__init__(workers, release)
        self.cap = per_worker * workers

    def run(self, prepared: Any) -> dict[str, Any]:
        graph, fns, request, consumers = prepared
        ts = graphlib.TopologicalSorter(graph)
        ts.prepare()
        results: dict[str, Any] = {}
        left = dict(consumers)
        release, cap = self.release, self.cap
        pending: dict[Future[Any], str] = {}
        backlog: deque[str] = deque()
        count = 0
        with ThreadPoolExecutor(self.workers) as pool:
            submit = pool.submit
            while ts.is_active():
                backlog.extend(ts.get_ready())
                while backlog and len(pending) < cap:
                    name = backlog.popleft()
                    deps = graph[name]
                    pending[submit(fns[name], *[results[d] for d in deps])] = name
                    count += 1
                    if release:
                        for d in deps:
                            left[d] -= 1
                            if not left[d]:
                                del results[d]
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    name = pending.pop(fut)
                    results[name] = fut.result()
                    ts.done(name)
        self.last_count = count
        return {t: results[t] for t in request}


class BareThreads(Impl):
    """One plain thread per worker, each running whole chains back to back; no scheduler.

    Only for workloads made of independent chains and one fan-in (``pycpu``):
    ``spec.extra["chains"]`` lists each chain's task names in order, and
    ``spec.extra["sink"]`` is the fan-in, run in the calling thread at the end.
    """

    name = "threads"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def prepare(self, spec: Spec) -> Any:
        chains = [[(n, *spec.tasks[n]) for n in chain] for chain in spec.extra["chains"]]
        shares = [chains[w :: self.workers] for w in range(self.workers)]
        sink = spec.extra["sink"]
        return shares, (sink, *spec.tasks[sink])

    def run(self, prepared: Any) -> dict[str, Any]:
        shares, (sink, sink_fn, sink_deps) = prepared
        per_thread: list[dict[str, Any]] = [{} for _ in shares]

        def work(share: list[list[tuple[str, Any, tuple[str, ...]]]], out: dict[str, Any]) -> None:
            for chain in share:
                for name, fn, deps in chain:
                    out[name] = fn(*[out[d] for d in deps])

        threads = [
            threading.Thread(target=work, args=(share, out))
            for share, out in zip(shares, per_thread, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results: dict[str, Any] = {}
        for out in per_thread:
            results.update(out)
        results[sink] = sink_fn(*[results[d] for d in sink_deps])
        self.last_count = len(results)
        return {sink: results[sink]}


class Dagron(Impl):
    """``dagron.DAGExecutor`` (Rust-backed graph, Python thread pool), ``max_workers``.

    dagron runs level by level (a step's tasks all finish before the next step
    starts) and calls tasks without arguments, so each task is wrapped to read
    its inputs from, and store its value in, a dict of this run's values. Pruned
    to the request with dagron's own ``DAG.ancestors`` and ``DAG.subgraph``.
    """

    name = "dagron"

    def __init__(self, workers: int) -> None:
        import dagron

        self.dagron = dagron
        self.workers = workers

    def prepare(self, spec: Spec) -> Any:
        dag = self.dagron.DAG()
        dag.add_nodes(list(spec.tasks))
        dag.add_edges([(d, n) for n, (_, deps) in spec.tasks.items() for d in deps])
        request = spec.request()
        if spec.targets is not None:
            keep = set(request)
            for t in request:
                keep.update(a.name for a in dag.ancestors(t))
            dag = dag.subgraph(sorted(keep))
        else:
            keep = set(spec.tasks)
        values: dict[str, Any] = {}

        def wrap(name: str, fn: Any, deps: tuple[str, ...]) -> Any:
            def call() -> Any:
                value = fn(*[values[d] for d in deps])
                values[name] = value
                return value

            return call

        calls = {n: wrap(n, *spec.tasks[n]) for n in spec.tasks if n in keep}
        executor = self.dagron.DAGExecutor(dag, max_workers=self.workers)
        return executor, calls, values, request

    def run(self, prepared: Any) -> dict[str, Any]:
        executor, calls, values, request = prepared
        values.clear()
        result = executor.execute(calls)
        if result.failed or result.timed_out:
            raise RuntimeError(f"dagron: {result.failed} failed, {result.timed_out} timed out")
        self.last_count = len(values)
        out = {t: values[t] for t in request}
        values.clear()
        return out


class Traversal(Impl):
    """``traversal.Graph`` compiled for the request (its own pruning), ``max_concurrency``.

    Tasks get their inputs as ``Node`` arguments, which traversal replaces by
    the dependencies' values; it runs them on a thread pool driven by asyncio.
    """

    name = "traversal"

    def __init__(self, workers: int) -> None:
        import traversal

        self.traversal = traversal
        self.workers = workers

    def prepare(self, spec: Spec) -> Any:
        g = self.traversal.Graph(spec.name)
        nodes: dict[str, Any] = {}
        for name, (fn, deps) in spec.tasks.items():
            nodes[name] = g.add(name, fn, *[nodes[d] for d in deps])
        request = spec.request()
        return g.compile(*request), request

    def run(self, prepared: Any) -> dict[str, Any]:
        plan, request = prepared
        report = plan.run(max_concurrency=self.workers)
        report.raise_for_status()
        self.last_count = sum(state == "succeeded" for state in report.states.values())
        return {t: report.outputs[t] for t in request}


class Dask(Impl):
    """``dask.threaded.get`` with ``num_workers``, on a legacy ``{key: (fn, *deps)}`` graph."""

    name = "dask"

    def __init__(self, workers: int) -> None:
        import dask.threaded

        self.get = dask.threaded.get
        self.workers = workers

    def prepare(self, spec: Spec) -> Any:
        dsk = {name: (fn, *deps) for name, (fn, deps) in spec.tasks.items()}
        return dsk, spec.request()

    def run(self, prepared: Any) -> dict[str, Any]:
        dsk, request = prepared
        values = self.get(dsk, request, num_workers=self.workers)
        return dict(zip(request, values, strict=True))


def missing(module: str, peer: str) -> str | None:
    """None if ``module`` imports, else a note saying the peer is skipped and why."""
    try:
        __import__(module)
    except ImportError as exc:
        return f"{peer} not installed ({exc}); {peer} peer skipped"
    return None


def dask_available() -> str | None:
    """None if dask imports, else why not (printed as a note)."""
    try:
        import dask.threaded  # noqa: F401
    except ImportError as exc:
        return f"dask not installed ({exc}); dask peer skipped"
    return None
