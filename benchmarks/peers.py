"""The implementations compared: dagexec (public API only) and its peers.

Every implementation has the same two steps, so build cost stays out of the timed
part: ``prepare(spec)`` builds its own structure from a :class:`workloads.Spec`
once, and ``run(prepared)`` executes the spec's request and returns
``{target: value}``.

The peers are written to be the honest competition, not straw men:

* ``serial``: a topological order computed once, then a loop in the calling
  thread over a plain dict. No threads, no locks: the floor for no-op graphs.
* ``graphlib+tpe``: ``graphlib.TopologicalSorter`` over the graph pruned to the
  request, every ready task submitted at once to a ``ThreadPoolExecutor``,
  ``wait(FIRST_COMPLETED)``, then ``done()`` for each finished task.
* ``dask``: ``dask.threaded.get`` on a legacy tuple graph with a 2-thread pool,
  culled to the request the way dask does it itself (i.e. not at all: that is
  dask's own behaviour for ``get`` and is what the partial workload shows).
"""

from __future__ import annotations

import graphlib
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from workloads import Spec, needed

import dagexec


class Impl:
    """Base: a named implementation with prepare/run."""

    name = "?"

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
    """graphlib.TopologicalSorter + ThreadPoolExecutor, wait(FIRST_COMPLETED).

    A fresh pool per run (like ``dagexec.run``). Values are dropped once every
    consumer has been submitted when ``release`` is set (the memory workload).
    """

    name = "graphlib+tpe"

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
        with ThreadPoolExecutor(self.workers) as pool:
            submit = pool.submit
            while ts.is_active():
                for name in ts.get_ready():
                    deps = graph[name]
                    pending[submit(fns[name], *[results[d] for d in deps])] = name
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
        return {t: results[t] for t in request}


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


def dask_available() -> str | None:
    """None if dask imports, else why not (printed as a note)."""
    try:
        import dask.threaded  # noqa: F401
    except ImportError as exc:
        return f"dask not installed ({exc}); dask peer skipped"
    return None
