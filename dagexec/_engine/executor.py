"""Executor: the worker threads and their inboxes, reused across runs; and ``run``.

Runs on one executor are serialised: a second thread calling :meth:`Executor.run`
waits until the first run has finished. The bounds are a property of the
executor's workers and inboxes, so letting two runs share them would make the
bounds of each meaningless. Whoever drives a run holds ``_slot``.

Who drives a run:

* A plain :meth:`Executor.run` (no callbacks, no ``timeout``, no checkpoint,
  nothing queued before it) is driven by the calling thread itself: handing the
  run to another thread and waiting for it cost two thread hand-offs, about a
  third of a small run. Ctrl-C must not raise inside the driver, so on the main
  thread SIGINT is turned into a stop request meanwhile (:mod:`dagexec._engine.sigint`);
  after one, the caller raises ``KeyboardInterrupt`` at once (once the run's
  cleanup tasks have run, if it has any: a second Ctrl-C abandons them) and a
  thread of the run's own waits for the tasks still running.
* Every other run is handed to the executor's scheduler thread (one per
  executor, started with the first such run, reused by every later one) and
  the caller waits for it with a timeout, so a ``KeyboardInterrupt`` is seen
  within :data:`_INTERRUPT_POLL_SECONDS` even when it was raised with
  ``_thread.interrupt_main()``, which does not wake a thread blocked on a lock.
  There the scheduler thread stays free of the caller: a callback that blocks
  it cannot delay the caller's Ctrl-C.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

from .._core.graph import Graph
from .._core.hooks import Hooks, callback_list
from .._core.options import check_checkpoint_path
from .._core.plan import Plan, check_resources, plan_run
from .._core.result import RunResult
from .._core.safe import add_note
from .attempts import AttemptBook
from .crew import Crew
from .future import _TIMED_OUT, RunFuture
from .inbox import Inbox
from .scheduler import Run
from .sigint import SigintToAbort, sigint_stops_runs
from .wire import STOP, Item

if TYPE_CHECKING:
    from .._persist.checkpoint import CheckpointStore

__all__ = ["Executor", "run"]

log = logging.getLogger("dagexec")

OnError = Literal["raise", "continue"]

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

# How often a waiting caller wakes to let a pending KeyboardInterrupt surface.
# Shorter notices Ctrl-C sooner; each wake costs a few microseconds of a thread
# that is otherwise asleep.
_INTERRUPT_POLL_SECONDS = 0.05

# How long to wait for the thread of a run interrupted inside Thread.start() to
# appear before concluding it never will (thread creation takes microseconds).
_LAUNCH_GRACE_SECONDS = 1.0

# How long an interrupted caller waits for the scheduler to take queued tasks
# back before re-raising anyway. The scheduler is never busy for long, so this
# only matters if it is stuck in a user callback.
_CANCEL_WAIT_SECONDS = 1.0


# Ints above this cannot become a float (10**400): refused as capacities, not
# left to overflow in the scheduler's sums mid-run.
_LARGEST_EXACT = int(sys.float_info.max)


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_on_error(on_error: object) -> OnError:
    if not isinstance(on_error, str):
        raise TypeError(
            f"on_error must be a str, 'raise' or 'continue', got {type(on_error).__name__} "
            f"{on_error!r}"
        )
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    return "raise" if on_error == "raise" else "continue"


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_capacity(name: str, resources: object) -> dict[str, float]:
    """Capacities as a fresh dict; each a number >= 0 (``math.inf``: unlimited)."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"{name} must be a mapping of resource name to capacity, like {{'gpu': 2}}; "
            f"got {type(resources).__name__} {resources!r}"
        )
    capacity: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str):
            raise TypeError(
                f"{name}: resource names must be strings, got {type(key).__name__} {key!r}"
            )
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise TypeError(
                f"{name}[{key!r}] must be a number (int or float) >= 0, math.inf for no "
                f"limit; got {type(amount).__name__} {amount!r}"
            )
        if isinstance(amount, int) and amount > _LARGEST_EXACT:
            raise ValueError(
                f"{name}[{key!r}] is an int of {len(str(amount))} digits, too large for "
                "the scheduler's sums (more than a float holds); write math.inf for no limit"
            )
        if math.isnan(amount) or amount < 0:
            raise ValueError(
                f"{name}[{key!r}] must be a number >= 0 (math.inf for no limit), got {amount!r}"
            )
        capacity[key] = amount
    return capacity


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds (int or float) > 0, or None for no "
            f"limit; got {type(timeout).__name__} {timeout!r}"
        )
    if isinstance(timeout, int) and timeout > _LARGEST_EXACT:
        timeout = math.inf  # longer than any run: no limit (float() would overflow)
    if math.isnan(timeout) or timeout <= 0:
        raise ValueError(
            f"timeout must be a number of seconds > 0 (None: no limit), got {timeout!r}"
        )
    # A timer cannot wait forever, nor longer than the platform allows (its thread
    # would die of OverflowError): beyond threading.TIMEOUT_MAX, no limit.
    return None if timeout > threading.TIMEOUT_MAX else float(timeout)


class _Job(NamedTuple):
    """A run's checked parameters: everything needed to queue it."""

    plan: Plan
    hooks: Hooks
    on_error: OnError
    trace: bool
    timeout: float | None
    checkpoint: str | None
    identities: list[bytes | None] | None


def _prepare(
    graph: object,
    targets: Iterable[Hashable] | None,
    on_error: object,
    callbacks: object,
    trace: object,
    progress: object,
    timeout: object = None,
    checkpoint: object = None,
) -> _Job:
    """Check a run's parameters and plan it; starts no thread, reads targets once.

    Shared by :func:`run`, :meth:`Executor.run` and :meth:`Executor.submit`, so
    that all accept and refuse the same things, before any thread starts or
    anything is queued. With a checkpoint, the tasks' identities are computed
    here too (a constant argument that cannot be pickled is refused now).
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    checked_on_error = _check_on_error(on_error)
    checked_trace = _check_flag("trace", trace)
    checked_timeout = _check_timeout(timeout)
    path = check_checkpoint_path(checkpoint)
    callback_objects = callback_list(callbacks)
    if _check_flag("progress", progress):
        from .._observation.progress import ProgressBar

        callback_objects.append(ProgressBar())
    hooks = Hooks(callback_objects)
    plan = plan_run(graph._compile(), targets)
    identities = None
    if path is not None:
        from .._persist.resume import checkpoint_identities

        identities = checkpoint_identities(graph, plan)
    return _Job(plan, hooks, checked_on_error, checked_trace, checked_timeout, path, identities)


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
            returning megabytes (see ``docs/dask-memory.md``). Passing either
            bound fixes the depth at ``min(max_in_flight, workers * (queue_cap + 1))``.
        resources: capacities, ``{"gpu": 2, "mem": 8e9}``: the tasks out at once
            never hold more than these (see ``Graph.add(resources=...)``); the
            default for every run, which ``run(resources=...)`` overrides by name.

    :meth:`run` blocks until its run is over; :meth:`submit` queues a run and
    returns a :class:`~dagexec.RunFuture` at once. Either way, runs on one
    executor go one at a time, in the order they were queued.

    At most ``min(max_in_flight, workers * (queue_cap + 1))`` tasks are ever queued
    or running; that number is ``RunStats.effective_cap``. Use as a context manager,
    or call :meth:`shutdown`. The workers are daemon threads and hold no reference
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
        if workers is None:
            workers = os.cpu_count() or 1
        self.workers = _check_int("workers", workers, 1)
        # No bound given: each run's depth follows the size of its values (_engine/depth.py).
        self.memory_aware = queue_cap is None and max_in_flight is None
        if queue_cap is None:
            queue_cap = DEFAULT_QUEUE_CAP
        self.queue_cap = _check_int("queue_cap", queue_cap, 1)
        if max_in_flight is None:
            max_in_flight = self.workers * (self.queue_cap + 1)
        self.max_in_flight = _check_int("max_in_flight", max_in_flight, 1)
        self.effective_cap = min(self.max_in_flight, self.workers * (self.queue_cap + 1))
        self.resources = _check_capacity("resources", resources)
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
        # own): runs never overlap on the workers. See _run_here.
        self._slot = threading.Lock()
        self._driver: int | None = None  # ident of a caller driving its own run
        self._slot_passed = False  # _run_here handed the slot to _take_over
        # Runs for the scheduler thread, one at a time; None tells it to exit.
        self._runs: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        # The scheduler thread, shared by every queued run, started with the first
        # (a plain Executor.run drives its run on the calling thread). It holds
        # only the queue, not the executor, so a dropped executor still becomes
        # unreachable.
        self._scheduler = threading.Thread(
            target=_scheduler_loop,
            args=(self._runs, self._slot),
            name="dagexec-scheduler",
            daemon=True,
        )
        # Ends the workers: called by shutdown, or when this executor is garbage
        # collected without one (the workers hold no reference to it), like
        # ThreadPoolExecutor's workers exit. Runs once; not at interpreter exit,
        # where a daemon thread may still be running on this executor and the
        # daemon workers die anyway.
        self._stopper = _Stopper(self._inboxes, self._threads, self._scheduler, self._runs)
        finalizer = weakref.finalize(self, self._stopper)
        finalizer.atexit = False
        try:
            for t in self._threads:
                t.start()
        except BaseException:
            # Ctrl-C while starting: tell every worker already started (or whose
            # start() was interrupted after the thread began) to exit.
            self._stop_workers()
            raise

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
        job = _prepare(graph, targets, on_error, callbacks, trace, progress, timeout, checkpoint)
        capacity = self._capacity(job.plan, resources)
        return self._run_prepared(job, capacity)

    def submit(
        self,
        graph: Graph,
        targets: Iterable[Hashable] | None = None,
        **run_options: object,
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
        unknown = sorted(set(run_options) - set(_RUN_OPTIONS))
        if unknown:
            raise TypeError(
                f"submit() got unknown run options {unknown}; the options are those of "
                f"Executor.run: {', '.join(_RUN_OPTIONS)}"
            )
        options: dict[str, object] = {**_RUN_DEFAULTS, **run_options}
        job = _prepare(
            graph,
            targets,
            options["on_error"],
            options["callbacks"],
            options["trace"],
            options["progress"],
            options["timeout"],
            options["checkpoint"],
        )
        capacity = self._capacity(job.plan, options["resources"])
        holder: list[tuple[_Submission, Run]] = []
        submission = self._enqueue(job, capacity, holder)
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
            capacity = {**capacity, **_check_capacity("resources", resources)}
        check_resources(plan, capacity)
        return capacity

    def _new_run(
        self,
        job: _Job,
        plan: Plan,
        capacity: Mapping[str, float],
        context: contextvars.Context,
    ) -> Run:
        return Run(
            plan,
            self._inboxes,
            crew=self._crew,
            book=self._book,
            queue_cap=self.queue_cap,
            max_in_flight=self.max_in_flight,
            adaptive=self.memory_aware,
            on_error=job.on_error,
            hooks=job.hooks,
            trace=job.trace,
            capacity=capacity,
            context=context,
        )

    def _enqueue(
        self, job: _Job, capacity: Mapping[str, float], holder: list[tuple[_Submission, Run]]
    ) -> _Submission:
        """Make the run and hand it to the scheduler thread; ``holder`` gets it before.

        With a checkpoint the store is opened and the values it has are loaded
        here, on the calling thread: a queued run sees what the file held when
        it was submitted.
        """
        # Tasks see the caller's contextvars, as with asyncio.to_thread and dask's
        # threads. Even an empty context is passed on: each task then runs in a
        # fresh copy (~50 ns), so a ContextVar a task sets cannot leak into later
        # tasks on the same worker, as it would in a plain thread pool.
        context = contextvars.copy_context()
        plan, store = job.plan, None
        if job.checkpoint is not None:
            from .._persist.resume import open_checkpoint

            assert job.identities is not None
            plan, store = open_checkpoint(job.checkpoint, plan, job.identities)
        try:
            with self._run_lock:
                if self._closed:
                    raise RuntimeError("this Executor is shut down; create a new one to run")
                run = self._new_run(job, plan, capacity, context)
                future = RunFuture()
                future._run = run
                future._own_thread = _weak_own_thread(self)
                submission = _Submission(self, run, future, store)
                holder.append((submission, run))
                self._pending = [f for f in self._pending if not f.done()]
                self._pending.append(future)
                self._last = (self._scheduler, weakref.ref(submission))
                if self._scheduler.ident is None:
                    self._scheduler.start()  # the first queued run
                self._runs.put(submission)
        except BaseException:
            if store is not None and not holder:
                store.close()
            raise
        return submission

    def _run_prepared(self, job: _Job, capacity: Mapping[str, float]) -> RunResult:
        """Run a checked job and wait for it: :meth:`submit` then ``result()``, with
        Ctrl-C stopping the run and the run's own ``timeout`` waited for here."""
        if self._on_own_thread():
            # A run waits for this executor's threads, and this is one of them.
            raise RuntimeError(
                "Executor.run called from one of this executor's own tasks or callbacks, "
                "which would wait for itself forever; use another Executor for nested runs"
            )
        if _plain(job):
            result = self._run_here(job, capacity)
            if result is not None:
                return result
        with self._run_lock:
            if self._closed:
                raise RuntimeError("this Executor is shut down; create a new one to run")
            self._wait_for_abandoned()
        deadline = None if job.timeout is None else time.monotonic() + job.timeout
        holder: list[tuple[_Submission, Run]] = []
        try:
            # The wait is inside the try: the first task may raise SIGINT at once,
            # and the interrupt must then find the run already covered here.
            submission = self._enqueue(job, capacity, holder)
            future = submission.future
            done = future._done
            run = holder[0][1]
            if deadline is None:
                while not done.wait(_INTERRUPT_POLL_SECONDS):
                    pass
            else:
                while not done.wait(min(_INTERRUPT_POLL_SECONDS, deadline - time.monotonic())):
                    if time.monotonic() >= deadline:
                        _time_out(future, run, job.timeout)
        except BaseException as exc:
            if not holder:
                raise
            # Ctrl-C (or any asynchronous exception) in the caller: stop
            # dispatch, make sure nothing queued will start, and leave the
            # running tasks to finish in the background. Recorded first, so a
            # second Ctrl-C during the wait below cannot let the next run
            # start beside this one.
            submission, run = holder[0]
            self._abandoned = (self._scheduler, submission)
            started = submission.future._cancel()
            # The interrupt may have come before the put: queue it again (a
            # submission that already began ignores the second call), so that
            # it surely ends, cancelling everything at once.
            self._runs.put(submission)
            if started:  # else it never starts: nothing to wait for (say, behind
                # another thread's run)
                if isinstance(exc, KeyboardInterrupt) and run.state.cleanup is not None:
                    _stay_for_cleanup(run)
                else:
                    run.cancelled.wait(_CANCEL_WAIT_SECONDS)
            raise
        del submission, holder, done, run
        try:
            return future.result(0)
        finally:
            del future  # the caller's traceback should not pin the run's state

    def _run_here(self, job: _Job, capacity: Mapping[str, float]) -> RunResult | None:
        """Drive a plain run on the calling thread; None if it must be queued instead.

        A run handed to the scheduler thread costs two thread hand-offs more
        (there and back), about a third of a small run (docs/internals.md, "Small runs").
        The caller may drive its own run only where nothing can raise inside
        the driver: not on the main thread, or on it with Python's own SIGINT
        handler, which is swapped meanwhile for one that asks the run to stop
        (:mod:`dagexec._engine.sigint`); and without callbacks, so that no user code
        runs on the caller's thread and delays its Ctrl-C. After Ctrl-C the run
        is left to a thread of its own, which waits for the running tasks, and
        KeyboardInterrupt is raised here at once, as on the queued path (after
        the run's cleanup tasks, if it has any, unless a second Ctrl-C came).

        The handler is swapped before ``_slot`` is taken and put back after it
        is let go: a KeyboardInterrupt raised between taking the slot and the
        ``try`` that lets it go would keep it (and ``_driver``) forever. The run
        is made and recorded as ``_last`` under ``_run_lock``, as a queued run
        is, so that a shutdown or a submit from another thread sees it.
        """
        run: Run | None = None
        interrupted, escaped = False, None
        with SigintToAbort() as sigint:  # from here on Ctrl-C only asks runs to stop
            # Polled, so that a Ctrl-C while another thread holds the lock still raises.
            while not self._run_lock.acquire(timeout=_INTERRUPT_POLL_SECONDS):
                if sigint.fired:
                    raise KeyboardInterrupt
            try:
                if self._closed:
                    raise RuntimeError("this Executor is shut down; create a new one to run")
                if (
                    self._abandoned is not None
                    or not all(f.done() for f in self._pending)
                    or not self._slot.acquire(blocking=False)
                ):
                    run = None  # a queued or interrupted run goes first: queue behind it
                else:
                    try:
                        run = self._new_run(job, job.plan, capacity, contextvars.copy_context())
                        self._last = (threading.current_thread(), weakref.ref(run))
                        self._driver = threading.get_ident()
                    except BaseException:
                        self._slot.release()
                        raise
            finally:
                self._run_lock.release()
            if run is not None:
                try:
                    sigint.abort = run.request_abort
                    if sigint.fired:  # Ctrl-C while taking the slot: stop at once
                        run.request_abort()
                    run.main(detachable=True, wake_every=sigint.wake_every)
                    if run.detached:  # Ctrl-C: queued tasks are cancelled, some still run
                        escaped = run.escaped  # or raised in the driver (a signal handler)
                        self._finish_elsewhere(run)
                        interrupted = True
                finally:
                    if not run.begun:  # never started: nothing of it will (shutdown waits)
                        run.cancelled.set()
                        run.finished.set()
                    if not self._slot_passed:
                        self._driver = None
                        self._slot.release()
                    self._slot_passed = False
        if run is None:
            if sigint.fired:  # while waiting for the lock
                raise KeyboardInterrupt
            return None
        outcome = run.outcome
        del run  # an error's traceback holds this frame: it must not pin the run
        if escaped is not None:
            add_note(escaped, _ESCAPED_NOTE)
            raise escaped
        if interrupted or sigint.fired:  # even one after the last task ended
            raise KeyboardInterrupt
        assert outcome is not None
        if outcome.error is not None:
            try:
                raise outcome.error
            finally:
                del outcome  # the caller's traceback should not pin the run's state
        result = outcome.result
        assert result is not None
        return result

    def _finish_elsewhere(self, run: Run) -> None:
        """Hand an interrupted run, and ``_slot``, to a thread that waits for its tasks."""
        thread = threading.Thread(
            target=_take_over, args=(run, self._slot), name="dagexec-interrupted", daemon=True
        )
        self._abandoned = (thread, run)
        self._driver = None
        self._slot_passed = True
        try:
            thread.start()  # SIGINT cannot raise here: it still only stops runs
        except BaseException:
            if thread.ident is None:  # no thread (say, none can be made): finish here
                self._abandoned, self._slot_passed = None, False
                run.take_over()
            raise

    def _on_own_thread(self) -> bool:
        """Whether the calling thread is one a run or a shutdown of this executor waits for.

        That is a worker (a task), or the scheduler of the current run or of an
        interrupted one still finishing (a callback).
        """
        here = threading.current_thread()
        abandoned = self._abandoned
        return (
            here is self._scheduler
            or here.ident == self._driver
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
                t.join()
            if self._scheduler.ident is not None:  # started (by a queued run)
                self._scheduler.join()

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


class _Stopper:
    """Puts the STOPs that end an executor's workers, once no run can put tasks.

    Shared by the executor and its finalizer, so it must not refer to the executor:
    an executor dropped without ``shutdown()`` must become unreachable. Calling it
    again after an interrupted call puts only the STOPs still missing; once they
    are all in (or a helper thread will put them), calling it does nothing.
    """

    __slots__ = ("abandoned", "done", "inboxes", "posted", "runs", "scheduler", "workers")

    def __init__(
        self,
        inboxes: list[Inbox[Item | None]],
        workers: list[threading.Thread],
        scheduler: threading.Thread,
        runs: queue.SimpleQueue[_Submission | None],
    ) -> None:
        self.inboxes = inboxes
        self.workers = workers  # the executor's list: a replaced worker's new thread
        self.scheduler = scheduler
        self.runs = runs
        self.abandoned: tuple[threading.Thread, _Ending] | None = None
        self.posted = 0  # inboxes[:posted] have their STOP
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        abandoned = self.abandoned
        if abandoned is None or abandoned[1].cancelled.is_set():
            here = threading.current_thread()
            if here not in self.workers and here is not self.scheduler:
                _post_stops(self)
                return
            # Only as the finalizer, run by a garbage collection on one of our
            # own workers, which might hold its inbox's (non-reentrant) lock at
            # this moment: post from another thread.
            abandoned = None
        # An interrupted run may still put tasks into the inboxes until it has
        # taken its queued ones back; STOPs go in after that, so the scheduler
        # stays the inboxes' only producer while it could produce (the caller
        # does not wait).
        threading.Thread(
            target=_post_stops,
            args=(self, *(abandoned or ())),
            name="dagexec-stop",
            daemon=True,
        ).start()
        self.done = True


def _post_stops(
    stopper: _Stopper,
    scheduler: threading.Thread | None = None,
    run: _Ending | None = None,
) -> None:
    """Put a STOP in every inbox still without one, after ``run`` (if any) took its tasks back.

    Each inbox is empty by then (every run is over or has cancelled what it
    queued), so the non-blocking put has room, unless an interrupted earlier call
    already put this very STOP.
    """
    if scheduler is not None and run is not None:
        _wait_unless_never_started(scheduler, run, "cancelled")
    inboxes = stopper.inboxes
    while stopper.posted < len(inboxes):
        with contextlib.suppress(queue.Full):  # see above: this STOP is in already
            inboxes[stopper.posted].put_nowait(STOP)
        stopper.posted += 1
    if stopper.posted == len(inboxes):
        # The scheduler thread exits once idle (after an abandoned run's end). A
        # second None, after an interrupted call, finds it gone and is harmless.
        stopper.runs.put(None)
        stopper.posted += 1
    stopper.done = True


def _scheduler_loop(runs: queue.SimpleQueue[_Submission | None], slot: threading.Lock) -> None:
    """The scheduler thread: drive each run handed over, until None.

    Each waits for ``slot``, which a caller driving its own run holds meanwhile.
    It holds no reference to the executor, only to the queue (a queued run
    holds the executor, so that its workers outlive it).
    """
    while True:
        submission = runs.get()
        if submission is None:
            return
        with slot:
            submission.main()
        del submission  # do not keep a finished run's values alive while idle


_ESCAPED_NOTE = (
    "dagexec: raised while this thread drove a run, which was stopped: queued tasks "
    "never start, running ones finish in the background and their values are dropped"
)


def _plain(job: _Job) -> bool:
    """Whether the caller may drive this run itself (see Executor._run_here)."""
    return job.timeout is None and job.checkpoint is None and not job.hooks and sigint_stops_runs()


def _take_over(run: Run, slot: threading.Lock) -> None:
    """Finish an interrupted run handed over by its caller, then let the next run in."""
    try:
        run.take_over()
    finally:
        slot.release()


class _Ending(Protocol):
    """A run as shutdown and the next run wait for it: a Run or a _Submission."""

    @property
    def cancelled(self) -> threading.Event: ...  # nothing of it queued will start

    @property
    def finished(self) -> threading.Event: ...  # nothing of it runs any more


class _Submission:
    """A queued run, its future and its checkpoint store, as the scheduler thread sees them."""

    __slots__ = ("__weakref__", "begun", "cancelled", "finished", "future", "owner", "run", "store")

    def __init__(
        self, owner: Executor, run: Run, future: RunFuture, store: CheckpointStore | None
    ) -> None:
        # The owner is held only so that an executor dropped with runs queued
        # stays alive (its workers with it) until they are over.
        self.owner: Executor | None = owner
        self.run: Run | None = run  # None once over
        self.future, self.store = future, store
        self.begun = False
        # What Executor._abandoned and the stopper wait on: nothing queued will
        # start (the run's own event), and everything is over, store closed too.
        self.cancelled = run.cancelled
        self.finished = threading.Event()

    def main(self) -> None:
        """Drive the run (unless cancelled first), close its store, complete the future.

        A second call (``Executor.run`` queues it again after Ctrl-C) returns at once.
        """
        if self.begun:
            return
        self.begun = True
        run, future = self.run, self.future
        assert run is not None
        try:
            if future._start():
                run.main()  # returns once every task of the run has ended
            else:  # cancelled before it started: it never starts
                run.cancelled.set()
                run.finished.set()
        finally:
            if self.store is not None:
                # After the run: no task of it is running, all saves are queued.
                try:
                    self.store.close()
                except Exception:
                    log.exception("closing the checkpoint store failed")
                self.store = None
            outcome = run.outcome
            expired = None if run.expired is None else _timed_out_message(run, run.expired)
            # This frame stays reachable from a callback error's traceback (the
            # scheduler's frame's f_back): it must not keep the run alive from there.
            self.run = None
            del run
            self.owner = None
            if outcome is not None:
                future._finish(outcome.result, outcome.error)
                del outcome
            elif expired is not None:  # its timeout= stopped it: the timer may be late
                future._expire(expired)
            elif not future.done():  # only if the driver failed to publish anything
                future._finish(None, RuntimeError("dagexec: the run ended without an outcome"))
            self.finished.set()
            del future, self


def _weak_own_thread(executor: Executor) -> Callable[[], bool]:
    """``executor._on_own_thread`` without keeping the executor alive."""
    ref = weakref.ref(executor)

    def own() -> bool:
        alive = ref()
        return alive is not None and alive._on_own_thread()

    return own


_RUN_DEFAULTS: dict[str, object] = {
    "on_error": "raise",
    "callbacks": (),
    "trace": False,
    "progress": False,
    "resources": None,
    "timeout": None,
    "checkpoint": None,
}
_RUN_OPTIONS = tuple(_RUN_DEFAULTS)


def _stay_for_cleanup(run: Run) -> None:
    """After a first Ctrl-C: wait while the run's cleanup tasks run (each within
    its own timeout); a second Ctrl-C raises at once and abandons them."""
    try:
        while not run.cancelled.wait(_INTERRUPT_POLL_SECONDS):
            pass
    except KeyboardInterrupt:
        run.abort(hard=True)
        raise


def _time_out(future: RunFuture, run: Run, timeout: float | None) -> None:
    """A run's ``timeout`` passed: stop it as a cancel does, fail it with TimeoutError.

    A run with cleanup tasks fails only once they have run (each within its own
    timeout): this call waits for them, on the timeout's own thread (or on the
    caller's, for ``Executor.run``, which then stays in the run meanwhile).
    """
    if future.done():
        return
    # Before the abort: a run with nothing running ends at once, and its end must
    # know that it was this (TimeoutError), not a driver that lost its outcome.
    run.expired = timeout
    run.abort()
    if run.state.cleanup is None:
        run.cancelled.wait(_CANCEL_WAIT_SECONDS)  # queued tasks taken back: the count settles
        future._expire(_timed_out_message(run, timeout))
    else:
        future._expire_after(_timed_out_message(run, timeout), run.cancelled)


def _timed_out_message(run: Run, timeout: float | None) -> str:
    finished = sum(run.state.ran_on)  # a read of ints the scheduler writes: a snapshot
    loaded = len(run.plan.loaded or ())
    total = len(run.plan)
    if loaded:
        finished = max(0, finished - loaded)
        total -= loaded
    return (
        f"the run timed out after {timeout:g} s with {finished} of {total} tasks finished; "
        "the rest were cancelled (tasks still running finish in the background and their "
        "values are dropped); raise timeout= or make the tasks faster"
    )


def _wait_unless_never_started(scheduler: threading.Thread, run: _Ending, event: str) -> None:
    """Wait for ``run``'s ``event``, unless its scheduler thread never started.

    A Ctrl-C inside ``Thread.start()`` can come before the thread exists; then
    the event would never be set. Creating a thread takes microseconds, so one
    that has no ident after the grace period never will.
    """
    flag: threading.Event = getattr(run, event)
    launch_deadline = time.monotonic() + _LAUNCH_GRACE_SECONDS
    while not flag.wait(_INTERRUPT_POLL_SECONDS):
        if scheduler.ident is None and time.monotonic() > launch_deadline:
            return


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
) -> RunResult:
    """Run a graph on a fresh :class:`Executor` and shut it down afterwards.

    Arguments are those of :class:`Executor` and :meth:`Executor.run`. The graph
    and the parameters are all checked before any thread starts.
    """
    # Everything is checked, and targets are read (once), before any thread
    # starts: a bad graph or parameter costs no thread. Executor() checks the
    # bounds before it starts its workers.
    job = _prepare(graph, targets, on_error, callbacks, trace, progress, timeout, checkpoint)
    capacity = _check_capacity("resources", resources)
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
