"""Executor: the worker threads and their inboxes, reused across runs; and ``run``.

Runs on one executor are serialised: a second thread calling :meth:`Executor.run`
waits until the first run has finished. The bounds are a property of the
executor's workers and inboxes, so letting two runs share them would make the
bounds of each meaningless. Whoever drives a run holds ``_slot``.

Who drives a run: a plain :meth:`Executor.run` is driven by the calling
thread itself (:mod:`.caller_drives`); every other run is queued for the
executor's scheduler thread (:mod:`.queued`, :mod:`.submission`). The run's parameters are
checked in :mod:`.run_checks`, the workers ended by :mod:`.stopper`.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping
from types import TracebackType
from typing import Any

from ..._core.graph import Graph
from ..._core.isolate import refuse_in_a_loading_child
from ..._core.plan import Plan, check_resources
from ..._core.result import RunResult
from ..run.attempts import AttemptBook
from ..run.scheduler import Run
from ..workers.crew import Crew
from .caller_drives import run_here
from .future import RunFuture
from .queued import enqueue, run_queued
from .run_checks import (
    Job,
    OnError,
    RunOptions,
    check_capacity,
    check_int,
    prepare,
)
from .stopper import _Stopper
from .submission import (
    _Ending,
    _Submission,
    _time_out,
    _wait_unless_never_started,
)

__all__ = ["Executor"]


# Default inbox depth per worker. With a GIL, the scheduler and the workers take
# turns: the workers run what their inboxes hold, each sleeps when its inbox is
# empty, the scheduler wakes for the reports, refills the inboxes and wakes them.
# Three wake-ups per turn, tens of microseconds each on a loaded 2-core VM,
# against ~2 us of Python work per no-op task: a turn is as long as the effective
# cap, so deeper inboxes pay for fewer turns (2 workers, 10,000-task wide graph,
# alternating in one process: queue_cap 16 -> 5.6 us/task, 32 -> 3.9, 64 -> 2.7;
# python benchmarks/queue_depth.py; docs/performance.md, "Choosing queue_cap and max_in_flight").
# Shallower inboxes mean fewer tasks committed to one worker ahead of time: less
# waiting behind a long task (which _balance.py corrects) and fewer argument
# tuples held alive (max_in_flight bounds those directly).
DEFAULT_QUEUE_CAP = 64


class Executor:
    """A fixed set of worker threads with bounded inboxes, reused across runs.

    Args:
        workers: worker threads; default ``os.cpu_count()``.
        queue_cap: most tasks waiting in one worker's inbox (besides the one it
            runs); default :data:`DEFAULT_QUEUE_CAP` (64).
        max_in_flight: most tasks queued or running at once across all workers;
            default ``workers * (queue_cap + 1)``, all the inboxes can hold. Set it
            lower to bound how many tasks' arguments are alive at once.

            When neither is given, the depth is memory-aware instead: as deep as
            that for tasks returning small values, one task per worker for tasks
            returning megabytes (see ``docs/dask.md``). Passing either
            bound fixes the depth at ``min(max_in_flight, workers * (queue_cap + 1))``.
        resources: capacities, ``{"gpu": 2, "mem": 8e9}``: the tasks out at once
            never hold more than these (see ``Graph.add(resources=...)``); the
            default for every run, which ``run(resources=...)`` overrides by name.

    :meth:`run` blocks until its run is over; :meth:`submit` queues a run and
    returns a :class:`~dagexec.RunFuture` at once. Either way, runs on one
    executor go one at a time, in the order they were queued.

    At most ``min(max_in_flight, workers * (queue_cap + 1))`` tasks are ever queued
    or running; that number is ``RunStats.effective_cap``. Use as a context manager,
    or call :meth:`shutdown`. A worker's thread starts with the first task handed
    to it, so a small run on a fresh executor starts only the threads it uses,
    each with work waiting. The workers are daemon threads and hold no reference
    to the executor: one dropped without ``shutdown()`` tells them to exit when it
    is garbage collected, as :class:`~concurrent.futures.ThreadPoolExecutor` does.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        queue_cap: int | None = None,
        max_in_flight: int | None = None,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        refuse_in_a_loading_child("dagexec.Executor (or dagexec.run)")
        if workers is None:
            workers = os.cpu_count() or 1
        self.workers = check_int("workers", workers, 1)
        # No bound given: each run's depth follows the size of its values (_engine/run/depth.py).
        self.memory_aware = queue_cap is None and max_in_flight is None
        if queue_cap is None:
            queue_cap = DEFAULT_QUEUE_CAP
        self.queue_cap = check_int("queue_cap", queue_cap, 1)
        if max_in_flight is None:
            max_in_flight = self.workers * (self.queue_cap + 1)
        self.max_in_flight = check_int("max_in_flight", max_in_flight, 1)
        self.effective_cap = min(self.max_in_flight, self.workers * (self.queue_cap + 1))
        self.resources = check_capacity("resources", resources)
        # The workers and their inboxes, by slot; a slot whose thread hangs in a
        # timed-out attempt gets a new one (see _crew.py). The lists change in place.
        self._crew = Crew(self.workers, self.queue_cap)
        self._inboxes = self._crew.inboxes
        self._threads = self._crew.threads
        # Attempts that outlived their timeout, across runs (see _attempts.py).
        self._book = AttemptBook()
        # Held to queue a run and to shut down: no run is queued after shutdown.
        # Runs are serialised by the scheduler thread, which takes them in order.
        self._run_lock = threading.Lock()
        self._closed = False
        self._pending: list[RunFuture] = []  # submitted and maybe not done; lock held
        # The run queued last, weakly: a finished run must not outlive its caller.
        self._last: tuple[threading.Thread, weakref.ref[_Ending]] | None = None  # lock held
        # Held by whoever drives a run (the scheduler thread, or a caller driving its
        # own): runs never overlap on the workers. See caller_drives.run_here.
        self._slot = threading.Lock()
        self._driver: int | None = None  # ident of a caller driving its own run
        self._slot_passed = False  # run_here handed the slot to _take_over
        # Runs for the scheduler thread, one at a time; None tells it to exit.
        self._runs: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        # The scheduler thread, shared by every queued run, made and started with
        # the first (a plain Executor.run drives its run on the calling thread, and
        # making a Thread costs ~8 us of a one-shot run); see queued.enqueue.
        self._scheduler: threading.Thread | None = None  # lock held to set
        # Ends the workers: called by shutdown, or when this executor is garbage
        # collected without one (the workers hold no reference to it), like
        # ThreadPoolExecutor's workers exit. Runs once; not at interpreter exit,
        # where a daemon thread may still be running on this executor and the
        # daemon workers die anyway.
        self._stopper = _Stopper(self._crew, self._runs)
        finalizer = weakref.finalize(self, self._stopper)
        finalizer.atexit = False
        # The workers' threads start with their first tasks (see _crew.py).

    def _stop_workers(self) -> None:
        """Tell the workers to exit (once); finish the job if an interrupt cuts it short."""
        try:
            self._stopper()
        finally:
            self._stopper()  # a no-op once the STOPs are in or handed to a thread

    @property
    def _abandoned(self) -> tuple[threading.Thread, _Ending] | None:
        """An interrupted run and its scheduler, which may still be waiting for its
        running tasks (or, if the interrupt hit Thread.start, about to run)."""
        return self._stopper.abandoned

    @_abandoned.setter
    def _abandoned(self, value: tuple[threading.Thread, _Ending] | None) -> None:
        self._stopper.abandoned = value

    def run(
        self,
        graph: Graph,
        targets: Iterable[Hashable] | None = None,
        *,
        on_error: OnError = "raise",
        callbacks: Iterable[object] = (),
        trace: bool = False,
        progress: bool = False,
        resources: Mapping[str, float] | None = None,
        timeout: float | None = None,
        checkpoint: str | os.PathLike[str] | None = None,
        logs: bool | int | str = False,
    ) -> RunResult:
        """Run ``targets`` (every sink if None) and their ancestors; nothing else runs.

        Blocks until the run is over and every worker is idle again. The graph is
        validated first (cached until it changes), so a bad graph runs nothing.

        Args:
            graph: the graph to run.
            targets: names whose values the result holds; any iterable (read
                once), not a single string or bytes.
            on_error: ``"raise"`` stops at the first failure and raises it;
                ``"continue"`` runs everything not downstream of a failure and
                returns, with failures in ``result.errors``.
            callbacks: a list of objects, each with some of the
                :class:`dagexec.Callback` hooks. An object with a hook is one
                callback even if it is iterable: pass ``[cb]``, not ``cb``.
            trace: ``True`` to record per-task timings in ``result.trace``.
            progress: ``True`` to show a progress line on stderr when it is a terminal.
            resources: capacities for this run, over the executor's, by name.
            timeout: seconds the whole run may take, counted from this call
                (None: no limit). On expiry the run stops as on ``cancel()`` and,
                once its cleanup tasks (if any) have run, ``TimeoutError`` says how
                many tasks finished.
            checkpoint: path of a checkpoint file (SQLite). Each finished task's
                value is saved there; tasks found there are loaded, not run. See
                docs/checkpoints.md.
            logs: ``True`` to keep the ``logging`` records (INFO and up) each
                task's attempt emits, in ``result.logs``; a level (``"DEBUG"``,
                ``logging.WARNING``) or a logger's name narrows it. See
                docs/observing.md.

        Raises:
            TypeError, ValueError: a parameter is of the wrong type or value; the
                message names it, the value and the fix. Nothing has run.
            CycleError, MissingDependencyError: the graph is invalid.
            UnknownTargetError: a target is not in the graph.
            CheckpointError: the checkpoint file cannot be used, or a task's
                constant argument cannot be pickled (named); nothing has run.
            TimeoutError: ``timeout`` passed; the run was stopped.
            ValueError: a task needs a resource with no capacity, or more than it.
            BaseException: with ``on_error="raise"``, the first failing task's own
                exception, with a note naming the task; any ``BaseException`` that
                is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``) is
                raised in either mode.
        """
        # RunOptions' fields as a plain tuple (see run_checks.Options).
        options = (on_error, callbacks, trace, progress, resources, timeout, checkpoint, logs)
        job = prepare(graph, targets, options)
        capacity = self.resources  # the usual run: nothing to add or check, no call
        if resources is not None or job.plan.needs is not None:
            capacity = self._capacity(job.plan, resources)
        return self._run_prepared(job, capacity)

    def submit(
        self,
        graph: Graph,
        targets: Iterable[Hashable] | None = None,
        **run_options: Any,
    ) -> RunFuture:
        """Queue a run and return at once with a :class:`RunFuture` for it.

        Takes the options of :meth:`run`, and checks all of them (and the graph)
        before anything is queued: a bad one raises here. Runs on one executor
        go one at a time, in the order submitted. ``timeout=`` counts from this
        call, so it includes the time spent waiting behind earlier runs.
        ``future.result()`` returns or raises what :meth:`run` would; after
        ``future.cancel()`` it raises ``concurrent.futures.CancelledError``.

        Raises:
            TypeError: an unknown option; and everything :meth:`run` raises
                before running anything.
            RuntimeError: the executor is shut down.
        """
        unknown = sorted(set(run_options) - set(RunOptions._fields))
        if unknown:
            raise TypeError(
                f"submit() got unknown run options {unknown}; the options are those of "
                f"Executor.run: {', '.join(RunOptions._fields)}"
            )
        options = RunOptions(**run_options)  # unchecked yet: prepare() checks each
        job = prepare(graph, targets, options)
        capacity = self._capacity(job.plan, options.resources)
        holder: list[tuple[_Submission, Run]] = []
        submission = enqueue(self, job, capacity, holder)
        if job.timeout is not None:
            timer = threading.Timer(
                job.timeout, _time_out, args=(submission.future, holder[0][1], job.timeout)
            )
            timer.name = "dagexec-run-timeout"
            timer.daemon = True
            submission.future._set_timer(timer)
        return submission.future

    def _capacity(self, plan: Plan, resources: object) -> dict[str, float]:
        capacity = self.resources
        if resources is not None:
            capacity = {**capacity, **check_capacity("resources", resources)}
        if plan.needs is not None:  # else nothing to check
            check_resources(plan, capacity)
        return capacity

    def _new_run(
        self,
        job: Job,
        plan: Plan,
        capacity: Mapping[str, float],
        context: contextvars.Context,
    ) -> Run:
        # Positional, in Run's order: keywords to a class are gathered into a dict
        # in C and matched by name again (see Run.__init__).
        return Run(
            plan,
            self._inboxes,
            self.queue_cap,
            self.max_in_flight,
            job.on_error,
            job.hooks,
            job.trace,
            capacity,
            context or None,  # empty: the tasks need no copy of it (see Run.context)
            self._crew,
            self._book,
            self.memory_aware,
            job.logs,
        )

    def _run_prepared(self, job: Job, capacity: Mapping[str, float]) -> RunResult:
        """Run a checked job and wait for it: on the calling thread if it may drive
        it (:mod:`.caller_drives`), else queued (:mod:`.queued`)."""
        here = threading.current_thread()
        if self._on_own_thread(here):
            # A run waits for this executor's threads, and this is one of them.
            raise RuntimeError(
                "Executor.run called from one of this executor's own tasks or callbacks, "
                "which would wait for itself forever; use another Executor for nested runs"
            )
        # A plain run's caller may drive it, as far as its options go: no timeout, no
        # checkpoint, no callbacks (run_here also asks about the thread and its SIGINT
        # handler).
        if job.timeout is None and job.checkpoint is None and not job.hooks.any:
            result = run_here(self, job, capacity, here)
            if result is not None:
                return result
        return run_queued(self, job, capacity)

    def _on_own_thread(self, here: threading.Thread | None = None) -> bool:
        """Whether the calling thread (``here``, if the caller has it already) is one a
        run or a shutdown of this executor waits for.

        That is a worker (a task), or the scheduler of the current run or of an
        interrupted one still finishing (a callback).
        """
        if here is None:
            here = threading.current_thread()
        abandoned = self._stopper.abandoned
        return (
            here is self._scheduler
            # (ident is a Python property: asked only while a caller drives a run.)
            or (self._driver is not None and here.ident == self._driver)
            or here in self._threads
            # An interrupted run's thread; or, after a shutdown during a run the
            # caller drives, that caller, but only until the run is over.
            or (
                abandoned is not None
                and here is abandoned[0]
                and not abandoned[1].finished.is_set()
            )
        )

    def _wait_for_abandoned(self) -> None:
        """Let an interrupted run's running tasks finish, so bounds hold across runs."""
        if self._abandoned is not None:
            _wait_unless_never_started(*self._abandoned, "finished")
            self._abandoned = None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once they are idle; with ``wait``, join every thread.

        Safe to call more than once. Without ``wait`` (what an interrupted ``with``
        block does), tasks still running from an interrupted run finish in the
        background and their threads exit afterwards.

        Runs submitted before the shutdown still run, in order, as with
        :class:`concurrent.futures.ThreadPoolExecutor`; the workers stop after
        the last. ``cancel_futures=True`` cancels those not started yet instead
        (the one running finishes). Nothing can be submitted afterwards.

        Raises:
            RuntimeError: called from one of this executor's own tasks or callbacks.
                The run in progress holds the executor until it is over, and this
                thread is one it waits for, so even ``wait=False`` would hang.
        """
        if self._on_own_thread():
            raise RuntimeError(
                "Executor.shutdown called from one of this executor's own tasks or "
                "callbacks, which would wait for itself forever; shut it down from the "
                "thread that called run, after run returns (a `with` block does that)"
            )
        with self._run_lock:
            if not self._closed:
                self._closed = True
                if cancel_futures:
                    for future in self._pending:
                        if not future.running():
                            future.cancel()
                self._pending = []
                if self._last is not None:
                    driver, ref = self._last
                    last = ref()
                    if last is not None and not last.cancelled.is_set():
                        # Queued runs go first: the STOPs go in after the last of
                        # them (which runs after every earlier one, the abandoned
                        # one too).
                        self._abandoned = (driver, last)
                self._stop_workers()
        if wait:
            self._wait_for_abandoned()
            for t in self._threads:
                if t.ident is not None:  # started (by a task put in its inbox)
                    t.join()
            scheduler = self._scheduler
            if scheduler is not None and scheduler.ident is not None:  # by a queued run
                scheduler.join()

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # After Ctrl-C, do not wait for tasks that cannot be interrupted.
        self.shutdown(wait=exc is None or isinstance(exc, Exception))

    def __repr__(self) -> str:
        state = "shut down" if self._closed else "running"
        return (
            f"<dagexec.Executor workers={self.workers} queue_cap={self.queue_cap} "
            f"max_in_flight={self.max_in_flight} ({state})>"
        )
