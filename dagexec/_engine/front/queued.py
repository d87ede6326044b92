"""The queued path: a run handed to the executor's scheduler thread, and its caller.

:meth:`Executor.submit` queues every run here; :meth:`Executor.run` queues a run
that its caller may not drive itself (:mod:`.caller_drives`) and waits for it,
stopping it on Ctrl-C or at its ``timeout``. What the scheduler thread does with
a queued run, and the waits around it, is :mod:`.submission`.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from collections.abc import Callable, Mapping

from ..._core.result import RunResult
from ..run.scheduler import Run
from .future import RunFuture
from .host import Host
from .run_checks import Job
from .submission import (
    _INTERRUPT_POLL_SECONDS,
    _scheduler_loop,
    _stop_interrupted,
    _Submission,
    _time_out,
)

__all__ = ["enqueue", "run_queued"]


def enqueue(
    executor: Host,
    job: Job,
    capacity: Mapping[str, float],
    holder: list[tuple[_Submission, Run]],
) -> _Submission:
    """Make the run and hand it to the scheduler thread; ``holder`` gets it before.

    With a checkpoint the store is opened and the values it has are loaded
    here, on the calling thread: a queued run sees what the file held when
    it was submitted.
    """
    # Tasks see the caller's contextvars, as with asyncio.to_thread and dask's
    # threads, each in a copy of its own, so a ContextVar a task sets cannot leak
    # into later tasks on the same worker, as it would in a plain thread pool. An
    # empty one needs no copy: the workers keep their own contexts clean instead
    # (Executor._new_run; dagexec._engine.workers.worker).
    context = contextvars.copy_context()
    plan, store = job.plan, None
    if job.checkpoint is not None:
        from ..._persist.resume import open_checkpoint

        assert job.identities is not None
        plan, store = open_checkpoint(job.checkpoint, plan, job.identities)
    try:
        with executor._run_lock:
            if executor._closed:
                raise RuntimeError("this Executor is shut down; create a new one to run")
            run = executor._new_run(job, plan, capacity, context)
            future = RunFuture()
            future._run = run
            future._own_thread = _weak_own_thread(executor)
            submission = _Submission(executor, run, future, store)
            holder.append((submission, run))
            executor._pending = [f for f in executor._pending if not f.done()]
            executor._pending.append(future)
            scheduler = executor._scheduler
            if scheduler is None:  # the first queued run
                # It holds only the queue, not the executor, so a dropped
                # executor still becomes unreachable.
                scheduler = threading.Thread(
                    target=_scheduler_loop,
                    args=(executor._runs, executor._slot),
                    name="dagexec-scheduler",
                    daemon=True,
                )
                executor._scheduler = executor._stopper.scheduler = scheduler
            executor._last = (scheduler, weakref.ref(submission))
            if scheduler.ident is None:  # not started yet (or a Ctrl-C cut start() short)
                scheduler.start()
            executor._runs.put(submission)
    except BaseException:
        if store is not None and not holder:
            store.close()
        raise
    return submission


def run_queued(executor: Host, job: Job, capacity: Mapping[str, float]) -> RunResult:
    """Queue a checked job and wait for it: :meth:`Executor.submit` then ``result()``,
    with Ctrl-C stopping the run and the run's own ``timeout`` waited for here."""
    with executor._run_lock:
        if executor._closed:
            raise RuntimeError("this Executor is shut down; create a new one to run")
        executor._wait_for_abandoned()
    deadline = None if job.timeout is None else time.monotonic() + job.timeout
    holder: list[tuple[_Submission, Run]] = []
    try:
        # The wait is inside the try: the first task may raise SIGINT at once,
        # and the interrupt must then find the run already covered here.
        submission = enqueue(executor, job, capacity, holder)
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
        assert executor._scheduler is not None  # made by enqueue, as holder shows
        executor._abandoned = (executor._scheduler, submission)
        _stop_interrupted(submission, run, executor._runs, exc)
        raise
    del submission, holder, done, run
    try:
        return future.result(0)
    finally:
        del future  # the caller's traceback should not pin the run's state


def _weak_own_thread(executor: Host) -> Callable[[], bool]:
    """``executor._on_own_thread`` without keeping the executor alive."""
    ref = weakref.ref(executor)

    def own() -> bool:
        alive = ref()
        return alive is not None and alive._on_own_thread()

    return own
