"""RunFuture: the handle ``Executor.submit`` returns, shaped like ``concurrent.futures.Future``.

Why not a ``concurrent.futures.Future`` itself: its ``cancel()`` refuses once the
work is running, and a run must be cancellable while it runs (that is the point:
stop dispatch, take queued tasks back, let running ones finish). Everything else
behaves as a Future user expects, including ``CancelledError`` from ``result()``.

Threads: the executor's scheduler thread (or, for ``submit(timeout=)``, a timer
thread) completes the future; any thread may wait on it or cancel it. State moves
only forward, ``PENDING -> RUNNING -> FINISHED``, or to ``CANCELLED`` from either
of the first two, under ``_lock``. Done callbacks run once, outside the lock, on
the thread that completed the future (or at once, on the caller, if it is done).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING

from .._core.result import RunResult

if TYPE_CHECKING:
    from .scheduler import Run

__all__ = ["RunFuture"]

log = logging.getLogger("dagexec")

_PENDING, _RUNNING, _FINISHED, _CANCELLED = "pending", "running", "finished", "cancelled"

# Marks the TimeoutError of a run's own timeout (not a task's): see _expire.
_TIMED_OUT = "_dagexec_run_timed_out"

# How often a thread waiting in result() wakes to let a pending KeyboardInterrupt
# surface (``_thread.interrupt_main()`` does not wake a thread blocked on a lock).
_POLL_SECONDS = 0.05


class RunFuture:
    """A submitted run: wait for it, cancel it, or be called back when it is done.

    ``cancel()`` works on a running run too: dispatch stops, queued tasks are
    taken back and cancelled, running tasks' cancellation tokens are set, and
    the tasks already running finish in the background (a thread cannot be
    killed); the next run on the executor starts once they have. ``result()``
    then raises :class:`concurrent.futures.CancelledError` at once.

    Dropping a future does not cancel its run; the run still finishes, and no
    thread is left behind once the executor is shut down.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._state = _PENDING
        self._result: RunResult | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[RunFuture], object]] = []
        self._run: Run | None = None  # set by the executor; dropped when done
        self._timer: threading.Timer | None = None
        # Whether the calling thread is one of the executor's own (set by it).
        self._own_thread: Callable[[], bool] | None = None

    # -- the Future interface ---------------------------------------------------

    def cancel(self) -> bool:
        """Stop the run; True unless it had already finished.

        A run not yet started never starts. A running one stops as on Ctrl-C:
        nothing more is dispatched, queued tasks are cancelled, running tasks
        finish in the background and their values are dropped.
        """
        return self._cancel() is not None

    def _cancel(self) -> bool | None:
        """:meth:`cancel`; None if the run had finished, else whether it had started
        (a run cancelled before it started never starts: nothing to wait for)."""
        with self._lock:
            if self._state == _FINISHED:
                return None
            if self._state == _CANCELLED:
                return True  # as far as the caller can tell: it may have started
            started = self._state == _RUNNING
            self._state = _CANCELLED
            run = self._run
        if run is not None:
            run.abort()  # the one stop path: cancels queued tasks, sets tokens
        self._complete()
        return started

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def running(self) -> bool:
        return self._state == _RUNNING

    def done(self) -> bool:
        return self._state in (_FINISHED, _CANCELLED)

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
        if self._state == _CANCELLED:
            raise CancelledError("the run was cancelled")
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What ``result()`` would raise (None if it returns); same waiting and errors."""
        self._wait(timeout)
        if self._state == _CANCELLED:
            raise CancelledError("the run was cancelled")
        return self._exception

    def add_done_callback(self, fn: Callable[[RunFuture], object]) -> None:
        """Call ``fn(future)`` once the run is done or cancelled (at once if it is).

        It runs on the thread that completed the future (the executor's
        scheduler thread for a finished run, the canceller for a cancel); an
        exception from it is logged on the ``dagexec`` logger and ignored.
        """
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        _call(fn, self)

    def __repr__(self) -> str:
        return f"<dagexec.RunFuture {self._state}>"

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
        with self._lock:
            if not self._done.is_set():
                self._timer = timer
                timer.start()

    def _start(self) -> bool:
        """Called by the scheduler thread before the run starts; False if cancelled."""
        with self._lock:
            if self._state != _PENDING:
                return False
            self._state = _RUNNING
            return True

    def _finish(self, result: RunResult | None, error: BaseException | None) -> None:
        """The run is over (every task of it ended): publish its outcome, unless cancelled."""
        with self._lock:
            if self._state in (_FINISHED, _CANCELLED):
                return
            self._state = _FINISHED
            self._result, self._exception = result, error
        self._complete()

    def _expire(self, message: str) -> None:
        """The run's own timeout passed: stop it like a cancel, fail with TimeoutError."""
        with self._lock:
            if self._state in (_FINISHED, _CANCELLED):
                return
            self._state = _FINISHED
            self._exception = error = TimeoutError(message)
            setattr(error, _TIMED_OUT, True)
            run = self._run
        if run is not None:
            run.abort()
        self._complete()

    def _complete(self) -> None:
        with self._lock:
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


def _call(fn: Callable[[RunFuture], object], future: RunFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("exception in a RunFuture done callback %r", fn)
