"""RunFuture: the handle ``Executor.submit`` returns, a ``concurrent.futures.Future``.

A subclass, so that ``concurrent.futures.wait``, ``as_completed`` and
``asyncio.wrap_future`` take it. It differs in one thing: ``cancel()`` works
on a running run too (that is the point: stop dispatch, take queued tasks
back, let running ones finish), where the base class refuses once the work
runs. Everything else behaves as a Future user expects, including
``CancelledError`` from ``result()``. The base class's state machine is used
as it is (``PENDING -> RUNNING -> FINISHED``, or to ``CANCELLED`` from either
of the first two, under its ``_condition``): the one step it has no method
for, cancelling a running future, sets its ``_state`` directly, then lets
``set_running_or_notify_cancel`` wake ``cf.wait`` and ``as_completed``.

Threads: the executor's scheduler thread (or, for ``submit(timeout=)``, a timer
thread) completes the future; any thread may wait on it or cancel it. Done
callbacks run once, outside the lock, on the thread that completed the future
(or at once, on the caller, if it is done).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures._base import (  # the base class's own state names
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
    RUNNING,
)
from typing import TYPE_CHECKING

from ..._core.result import RunResult

if TYPE_CHECKING:
    from ..run.scheduler import Run

__all__ = ["RunFuture"]

log = logging.getLogger("dagexec")

_OVER = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_SHOWN = {PENDING: "pending", RUNNING: "running", FINISHED: "finished"}

# Marks the TimeoutError of a run's own timeout (not a task's): see _expire.
_TIMED_OUT = "_dagexec_run_timed_out"

# How often a thread waiting in result() wakes to let a pending KeyboardInterrupt
# surface (``_thread.interrupt_main()`` does not wake a thread blocked on a lock).
_POLL_SECONDS = 0.05


class RunFuture(Future[RunResult]):
    """A submitted run: wait for it, cancel it, or be called back when it is done.

    A :class:`concurrent.futures.Future`: ``concurrent.futures.wait``,
    ``as_completed`` and ``asyncio.wrap_future`` work on it. Unlike the base
    class, ``cancel()`` works on a running run too: the run's stop flag is set
    before it returns, so no task of the run starts afterwards (but for at
    most one per worker already past its check, and cleanup tasks); queued
    tasks are taken back and cancelled, running tasks' cancellation tokens are
    set, and the tasks already running finish in the background (a thread
    cannot be killed); the next run on the executor starts once they (and
    the run's cleanup tasks) have. ``result()`` then raises
    :class:`concurrent.futures.CancelledError` at once. So an asyncio timeout
    on ``asyncio.wrap_future(future)`` cancels the run.

    Dropping a future does not cancel its run; the run still finishes, and no
    thread is left behind once the executor is shut down.
    """

    def __init__(self) -> None:
        super().__init__()
        self._done = threading.Event()  # set once done; waiting callers poll it
        self._callbacks: list[Callable[[Future[RunResult]], object]] = []
        self._run: Run | None = None  # set by the executor; dropped when done
        self._timer: threading.Timer | None = None
        # The run's own timeout passed while its cleanup tasks still ran: what
        # the future fails with once they have (see _expire_after).
        self._expiring: TimeoutError | None = None
        # Whether the calling thread is one of the executor's own (set by it).
        self._own_thread: Callable[[], bool] | None = None

    # -- the Future interface ---------------------------------------------------

    def cancel(self) -> bool:
        """Stop the run; True unless it had already finished.

        A run not yet started never starts. A running one stops as on Ctrl-C:
        nothing more is dispatched, queued tasks are cancelled, running tasks
        finish in the background and their values are dropped; its cleanup
        tasks (``run_if="all_done"``) still run, in the background.
        """
        return self._cancel() is not None

    def _cancel(self) -> bool | None:
        """:meth:`cancel`; None if the run had finished, else whether it had started
        (a run cancelled before it started never starts: nothing to wait for)."""
        with self._condition:
            if self._state == FINISHED:
                return None
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                return True  # as far as the caller can tell: it may have started
            started = self._state == RUNNING
            run = self._run
            if run is not None:
                run.abort()  # the one stop path; before anyone can see the future done
            self._state = CANCELLED  # the base class has no step for a running one
            self.set_running_or_notify_cancel()  # wakes cf.wait and as_completed
            self._condition.notify_all()
        self._complete()
        return started

    def result(self, timeout: float | None = None) -> RunResult:
        """The run's :class:`RunResult`; waits at most ``timeout`` seconds (None: forever).

        Raises:
            concurrent.futures.CancelledError: the run was cancelled.
            TimeoutError: ``timeout`` passed first; the run goes on (cancel it
                if you no longer want it).
            BaseException: what ``Executor.run`` would raise: the first failing
                task's own exception with ``on_error="raise"``, or ``TimeoutError``
                if the run's own ``timeout=`` expired.
        """
        self._wait(timeout)
        if self.cancelled():
            raise CancelledError("the run was cancelled")
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What ``result()`` would raise (None if it returns); same waiting and errors."""
        self._wait(timeout)
        if self.cancelled():
            raise CancelledError("the run was cancelled")
        return super().exception(0)

    def add_done_callback(self, fn: Callable[[Future[RunResult]], object]) -> None:
        """Call ``fn(future)`` once the run is done or cancelled (at once if it is).

        It runs on the thread that completed the future (the executor's
        scheduler thread for a finished run, the canceller for a cancel); an
        exception from it is logged on the ``dagexec`` logger and ignored.
        """
        with self._condition:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        _call(fn, self)

    def __repr__(self) -> str:
        return f"<dagexec.RunFuture {_SHOWN.get(self._state, 'cancelled')}>"

    # -- for the executor -------------------------------------------------------

    def _wait(self, timeout: float | None) -> None:
        if self._done.is_set():
            return
        own = self._own_thread
        if timeout is None and own is not None and own():
            raise RuntimeError(
                "RunFuture.result() called from a task or callback of the executor that "
                "runs it: the run waits behind the one running this code, forever; wait "
                "from another thread, or use add_done_callback"
            )
        if timeout is None:
            while not self._done.wait(_POLL_SECONDS):
                pass
        elif not self._done.wait(timeout):
            raise TimeoutError(f"the run did not finish within {timeout} s (it goes on)")

    def _set_timer(self, timer: threading.Timer) -> None:
        """Start the run's ``timeout`` timer, unless the run is already done."""
        with self._condition:
            if not self._done.is_set():
                self._timer = timer
                timer.start()

    def _start(self) -> bool:
        """Called by the scheduler thread before the run starts; False if cancelled."""
        with self._condition:
            if self._state != PENDING:
                return False
            return self.set_running_or_notify_cancel()

    def _finish(self, result: RunResult | None, error: BaseException | None) -> None:
        """The run is over (every task of it ended): publish its outcome, unless cancelled
        (or its own timeout passed: then it fails with that)."""
        with self._condition:
            if self._state in _OVER:
                return
            if self._expiring is not None:
                result, error = None, self._expiring
            if error is not None:
                self.set_exception(error)
            else:
                self.set_result(result)  # type: ignore[arg-type]  # a RunResult then
        self._complete()

    def _expire(self, message: str) -> None:
        """The run's own timeout passed: stop it like a cancel, fail with TimeoutError."""
        with self._condition:
            if self._state in _OVER:
                return
            error = self._expiring or _timeout_error(message)
            run = self._run
            if run is not None:
                run.abort()
            self.set_exception(error)
        self._complete()

    def _expire_after(self, message: str, ended: threading.Event) -> None:
        """:meth:`_expire`, once ``ended`` is set: the run's cleanup tasks still run,
        and its caller waits for them. Blocks the calling thread (the timeout's
        own) until then; if the run ends first, it fails with the same error."""
        with self._condition:
            if self._state in _OVER:
                return
            self._expiring = _timeout_error(message)
            queued = self._state == PENDING
        if not queued:  # a run that never started has no cleanup task to wait for
            while not ended.wait(_POLL_SECONDS):
                pass
        self._expire(message)

    def _complete(self) -> None:
        with self._condition:
            if self._done.is_set():
                return
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
            timer, self._timer = self._timer, None
            self._run = None  # the executor's submission keeps it as long as needed
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()
        for fn in callbacks:
            _call(fn, self)


def _timeout_error(message: str) -> TimeoutError:
    error = TimeoutError(message)
    setattr(error, _TIMED_OUT, True)
    return error


def _call(fn: Callable[[Future[RunResult]], object], future: RunFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("exception in a RunFuture done callback %r", fn)
