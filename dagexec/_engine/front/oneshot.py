""":func:`dagexec.run`: a graph on a fresh :class:`Executor`, shut down afterwards."""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping

from ..._core.graph import Graph
from ..._core.plan import check_resources
from ..._core.result import RunResult
from .executor import Executor
from .future import _TIMED_OUT
from .run_checks import OnError, RunOptions, check_capacity, prepare


def run(
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    workers: int | None = None,
    queue_cap: int | None = None,
    max_in_flight: int | None = None,
    on_error: OnError = "raise",
    callbacks: Iterable[object] = (),
    trace: bool = False,
    progress: bool = False,
    resources: Mapping[str, float] | None = None,
    timeout: float | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    logs: bool | int | str = False,
) -> RunResult:
    """Run a graph on a fresh :class:`Executor` and shut it down afterwards.

    Arguments are those of :class:`Executor` and :meth:`Executor.run`. The graph
    and the parameters are all checked before any thread starts.
    """
    options = RunOptions(on_error, callbacks, trace, progress, resources, timeout, checkpoint, logs)
    return run_with(graph, targets, options, workers, queue_cap, max_in_flight)


def run_with(
    graph: Graph,
    targets: Iterable[Hashable] | None,
    options: RunOptions,
    workers: int | None = None,
    queue_cap: int | None = None,
    max_in_flight: int | None = None,
) -> RunResult:
    """:func:`run` with its run options as one record (the command line builds one)."""
    # Everything is checked, and targets are read (once), before any thread
    # starts: a bad graph or parameter costs no thread. Executor() checks the
    # bounds before it starts its workers.
    job = prepare(graph, targets, options)
    capacity = check_capacity("resources", options.resources)
    check_resources(job.plan, capacity)
    ex: Executor | None = None
    try:
        # Inside the try: a Ctrl-C just after the executor started its workers
        # must still stop them (one during its __init__ is handled there).
        ex = Executor(workers, queue_cap=queue_cap, max_in_flight=max_in_flight, resources=capacity)
        result = ex._run_prepared(job, capacity)
        ex.shutdown()  # inside the try too: a Ctrl-C here must not skip the STOPs
    except BaseException as exc:
        if ex is not None:
            # After Ctrl-C or the run's timeout, do not wait for tasks that
            # cannot be interrupted: they finish in the background.
            wait = isinstance(exc, Exception) and not getattr(exc, _TIMED_OUT, False)
            try:
                ex.shutdown(wait=wait)
            finally:
                # Nobody else runs on this executor, so the STOPs may go in now
                # even if a second Ctrl-C cut the shutdown short (a no-op if not).
                ex._stop_workers()
        raise
    return result
