"""Per-task policy: retries with backoff, a timeout per attempt, and cleanup tasks.

A :class:`Policy` is stored only for tasks given one of these options (the
graph keeps them in a sparse side table), so a plan without any policy carries
``None`` and the scheduler pays one falsy test per dispatch for the feature.

Also here: :func:`current_task`, what a task with a policy sees of itself while
it runs (its name, its attempt, its cancellation token).
"""

from __future__ import annotations

import math
import random
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from .errors import Cancelled, describe

__all__ = [
    "MISSING",
    "Attempt",
    "CurrentTask",
    "Missing",
    "Policy",
    "attempt_here",
    "backoff",
    "check_policy",
    "current_task",
]

# Doubling stops growing after this many retries (2**40 times the first wait is
# already longer than any run); without it, 2.0**k overflows for large k.
_MAX_DOUBLINGS = 40
# Each wait is stretched by a random factor in [1, 1 + _JITTER): retries of many
# tasks failing together (a flaky service) do not all come back at once, and no
# wait is ever shorter than the doubling promises.
_JITTER = 0.25


class Policy(NamedTuple):
    """What to do when an attempt fails or hangs, and when a task may run."""

    retries: int = 0
    retry_delay: float = 0.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout: float | None = None
    cleanup: bool = False  # run_if="all_done"
    # Where the function runs: None (a worker thread) or "process" (a child process
    # the worker thread waits for; see dagexec._engine.process.process_pool). Not part of a
    # task's checkpoint identity: the value is the same either way.
    isolate: str | None = None


class Missing:
    """What a cleanup task (``run_if="all_done"``) receives for a dependency that was
    skipped or cancelled and so has no value. A failed dependency passes its exception.
    """

    _instance: Missing | None = None

    def __new__(cls) -> Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "dagexec.MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING = Missing()


def backoff(retry_delay: float, retry: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first retry).

    ``retry_delay * 2**(retry - 1)``, times a jitter factor in [1, 1.25).
    """
    if retry_delay <= 0:
        return 0.0
    base = retry_delay * 2.0 ** min(retry - 1, _MAX_DOUBLINGS)
    return base * (1.0 + _JITTER * rand())


def check_policy(
    name: Hashable,
    retries: object,
    retry_delay: object,
    retry_on: object,
    timeout: object,
    run_if: object,
) -> Policy | None:
    """The options as a :class:`Policy`, or None when all are the defaults."""
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(
            f"task {describe(name)}: retries must be an int (how many times a failed "
            f"attempt is tried again), got {_show(retries)}"
        )
    if retries < 0:
        raise ValueError(
            f"task {describe(name)}: retries must be >= 0 (how many times a failed "
            f"attempt is tried again), got {retries}; 0 tries once"
        )
    delay = _seconds(name, "retry_delay", retry_delay, allow_zero=True)
    assert delay is not None
    on = _exception_types(name, retry_on)
    limit = None if timeout is None else _seconds(name, "timeout", timeout, allow_zero=False)
    if not isinstance(run_if, str):
        raise TypeError(
            f"task {describe(name)}: run_if must be a str, 'all_success' or 'all_done', "
            f"got {_show(run_if)}"
        )
    if limit is not None and limit > threading.TIMEOUT_MAX:
        limit = None  # longer than any wait can be: no limit, as for a run's timeout=
    if run_if not in ("all_success", "all_done"):
        raise ValueError(
            f"task {describe(name)}: run_if must be 'all_success' (the default: run when "
            f"every dependency is done) or 'all_done' (run once every dependency ended, "
            f"in any state: a cleanup task), got {_show(run_if)}"
        )
    policy = Policy(retries, delay, on, limit, run_if == "all_done")
    return None if policy == Policy() else policy


def _show(value: object) -> str:
    try:
        return f"{type(value).__name__} {value!r}"
    except Exception:
        return f"a {type(value).__name__} with a failing repr"


def _seconds(name: Hashable, option: str, value: object, *, allow_zero: bool) -> float | None:
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"task {describe(name)}: {option} must be a number of seconds (int or "
            f"float) {bound}, got {_show(value)}"
        )
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"task {describe(name)}: {option} must be a finite number of seconds {bound}, "
            f"got {_show(value)}"
        )
    return float(value)


def _exception_types(name: Hashable, retry_on: object) -> tuple[type[BaseException], ...]:
    types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError(
                f"task {describe(name)}: retry_on must be an exception type or a tuple of "
                f"them, like retry_on=(OSError, TimeoutError); got {_show(t)}"
            )
        if not issubclass(t, Exception):
            raise ValueError(
                f"task {describe(name)}: retry_on={t.__name__} is not an Exception "
                "subclass; KeyboardInterrupt, SystemExit and other BaseExceptions always "
                "stop the run and are never retried"
            )
    if not types:
        raise ValueError(
            f"task {describe(name)}: retry_on=() retries nothing; leave retries=0 instead"
        )
    return tuple(types)


# ------------------------------------------------------------------ current task
_local = threading.local()


class CurrentTask:
    """The running attempt of a task, as the task sees it (``dagexec.current_task()``).

    ``cancelled`` is set when this attempt's timeout passed or the run is
    stopping (a failure with on_error="raise", Ctrl-C, a cancel): a long loop
    should check it and return early, since a thread cannot be killed.
    """

    __slots__ = ("attempt", "cancelled", "name")

    def __init__(self, name: Hashable, attempt: int, cancelled: threading.Event) -> None:
        self.name = name
        self.attempt = attempt  # 1 for the first attempt
        self.cancelled = cancelled

    def check(self) -> None:
        """Raise :class:`dagexec.Cancelled` if this attempt should stop."""
        if self.cancelled.is_set():
            raise Cancelled(
                f"task {describe(self.name)} (attempt {self.attempt}) was cancelled: its "
                "timeout passed or the run is stopping"
            )

    def __repr__(self) -> str:
        return (
            f"<dagexec.current_task {describe(self.name)} attempt {self.attempt}"
            f"{' cancelled' if self.cancelled.is_set() else ''}>"
        )


def attempt_here() -> int:
    """The attempt number of the task this worker thread runs: 1 unless it has a policy."""
    task: CurrentTask | None = getattr(_local, "task", None)
    return 1 if task is None else task.attempt


def current_task() -> CurrentTask:
    """The task running on this thread: its name, attempt number and cancellation token.

    Works in every task. For a task with a policy (``retries``, ``timeout``,
    ``run_if``) ``cancelled`` is its attempt's own token (set on its timeout or
    any stop); for a plain task, it is the run's stop flag (set when the run
    stops: a failure with on_error="raise", Ctrl-C, a cancel), and ``attempt``
    is 1. Plain tasks pay two attribute stores for this, not a call.

    Raises:
        RuntimeError: called outside a task (on a thread that is not running one).
    """
    task: CurrentTask | None = getattr(_local, "task", None)
    if task is not None:
        return task
    from .current import running_here

    running = running_here()
    if running is None:
        # In the child process of an isolate="process" task, which runs it without
        # dagexec's engine (see dagexec._engine.process.child): (name, attempt, stop).
        child = sys.modules.get("_dagexec_child")
        calling = getattr(child, "calling", None)
        if calling is not None and threading.current_thread() is threading.main_thread():
            return CurrentTask(*calling)
        raise RuntimeError(
            "dagexec.current_task() is only available inside a task, on the worker "
            "thread that runs it"
        )
    name, stop = running
    return CurrentTask(name, 1, stop)


class Attempt:
    """A task's function wrapped for one attempt: makes :func:`current_task` see it."""

    __slots__ = ("fn", "info")

    def __init__(self, fn: Callable[..., Any], info: CurrentTask) -> None:
        self.fn = fn
        self.info = info

    def __call__(self, *args: Any) -> Any:
        previous = getattr(_local, "task", None)
        _local.task = self.info
        try:
            return self.fn(*args)
        finally:
            _local.task = previous
