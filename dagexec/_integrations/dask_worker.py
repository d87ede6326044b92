"""What runs on a dask worker for each dagexec task: the task's function, wrapped.

Every task's function travels as a :class:`Named`: it makes
``dagexec.current_task()`` answer inside the task (its name, attempt 1, a token
that is never set), names the task in what it raises, and marks the exception
with the task so the client can tell which task failed and which were only
downstream of it. Tasks with a per-task policy the cluster cannot express
itself (a ``timeout``, a ``retry_delay``, a narrower ``retry_on``) travel as
:class:`Attempts` instead, which runs dagexec's attempt loop on the worker.
Plain ``retries`` need no wrapper: they are dask's own ``retries`` annotation.

Both are top-level classes with ``__slots__`` (pickled by reference, the task's
function inside them by dask's own pickling), never closures. Nothing here
imports dask: it runs in the worker's process, on the worker's thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from .._core.errors import TaskTimeout
from .._core.policy import Attempt, CurrentTask, Policy, backoff
from .._core.safe import add_note, task_for_message

__all__ = ["Attempts", "Named", "failed_task", "gather_items", "needs_attempts"]


class Named:
    """A task function that names its task in what it raises (as a local run does),
    marks the exception with the task, and lets ``current_task()`` answer."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[..., Any], name: Hashable) -> None:
        self.fn = fn
        self.name = name

    def __call__(self, *args: Any) -> Any:
        try:
            # A token per call (one Event, ~1 us): nothing on a worker ever stops a
            # plain task, as nothing stops a plain task locally but the run's stop.
            return Attempt(self.fn, CurrentTask(self.name, 1, threading.Event()))(*args)
        except Exception as exc:
            self.mark(exc)
            raise

    def mark(self, exc: BaseException) -> None:
        add_note(exc, f"dagexec: raised by task {task_for_message(self.name)}")
        with contextlib.suppress(Exception):  # an exception refusing attributes
            exc.__dagexec_task__ = self.name  # type: ignore[attr-defined]


def needs_attempts(policy: Policy | None) -> bool:
    """Whether ``policy`` needs dagexec's attempt loop on the worker (:class:`Attempts`):
    a timeout, or retries dask's own (at once, on any Exception) would not honour."""
    if policy is None:
        return False
    if policy.timeout is not None:
        return True
    return bool(policy.retries) and (policy.retry_delay > 0 or policy.retry_on != (Exception,))


class Attempts(Named):
    """dagexec's attempt loop, run on the dask worker: retries after ``backoff``'s
    delay for the exceptions in ``retry_on``, each attempt under its ``timeout``.

    As locally: ``current_task().attempt`` counts from 1; a retry follows a failure
    that is an instance of ``retry_on`` (a :class:`dagexec.TaskTimeout` is one of
    ``Exception``) while retries are left; the last failure gets the note
    ``dagexec: failed on attempt N (retries=R)``. An attempt past its timeout
    fails with ``TaskTimeout`` and has its ``current_task().cancelled`` set; its
    call cannot be killed and keeps running on a helper thread of the worker
    process, its value dropped, while the worker thread goes on (the next attempt,
    or the worker's next task). The wait before a retry holds the worker thread.
    """

    __slots__ = ("policy",)

    def __init__(self, fn: Callable[..., Any], name: Hashable, policy: Policy) -> None:
        super().__init__(fn, name)
        self.policy = policy

    def __call__(self, *args: Any) -> Any:
        policy = self.policy
        attempt = 1
        while True:
            try:
                return self._attempt(args, attempt)
            except Exception as exc:
                if attempt > policy.retries or not isinstance(exc, policy.retry_on):
                    if attempt > 1:
                        note = f"dagexec: failed on attempt {attempt} (retries={policy.retries})"
                        add_note(exc, note)
                    self.mark(exc)
                    raise
            time.sleep(backoff(policy.retry_delay, attempt))
            attempt += 1

    def _attempt(self, args: tuple[Any, ...], attempt: int) -> Any:
        info = CurrentTask(self.name, attempt, threading.Event())
        call = Attempt(self.fn, info)
        limit = self.policy.timeout
        if limit is None:
            return call(*args)
        timed = _TimedCall(call, args)
        helper = threading.Thread(
            target=timed.run,
            name=f"dagexec-attempt-{task_for_message(self.name)}-{attempt}",
            daemon=True,  # a call that never returns must not keep the worker process up
        )
        helper.start()
        if not timed.done.wait(limit):
            info.cancelled.set()  # the task may check it and return early
            raise TaskTimeout(self.name, limit, attempt)
        if timed.error is not None:
            raise timed.error
        return timed.value


class _TimedCall:
    """One attempt's call on a helper thread: its value or exception, and when it ended."""

    __slots__ = ("args", "call", "done", "error", "value")

    def __init__(self, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.call = call
        self.args = args
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.call(*self.args)
        except BaseException as exc:  # handed to the worker thread, which raises it
            self.error = exc
        finally:
            self.done.set()


def gather_items(*values: Any) -> list[Any]:
    """A map's value: the list of its items' values."""
    return list(values)


def failed_task(exc: BaseException) -> Hashable | None:
    """The task that raised ``exc`` on the cluster (see :class:`Named`), or None."""
    return getattr(exc, "__dagexec_task__", None)
