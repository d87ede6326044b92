"""Run callbacks: the protocol users implement, and the scheduler's view of it.

Every hook is called on the scheduler thread, in the order things happened, so
a callback needs no locking to keep its own counts. A hook that raises stops
the run like a failing task does (drain, then raise). A run pays only for the
hooks someone implements: without an ``on_task_start`` or an
``on_attempt_start`` the workers send no start notices, and without any hook
the scheduler makes no calls at all.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plan import Plan
    from .result import RunResult, TaskState

__all__ = ["Callback", "Hooks", "PlanInfo", "callback_list"]


@dataclass(frozen=True, slots=True)
class PlanInfo:
    """What a run is about to do; passed to ``on_run_start``."""

    tasks: tuple[Hashable, ...]
    targets: tuple[Hashable, ...]
    workers: int
    queue_cap: int
    max_in_flight: int
    effective_cap: int
    # The run's plan, for callbacks of dagexec's own that must know which tasks a
    # dispatch hands over together (a unit, see Plan.chain_next). Private: not
    # part of the protocol.
    _plan: Plan | None = field(default=None, repr=False, compare=False)


class Callback:
    """Base class for run callbacks; override only the hooks you need.

    Any object with some of these methods works too; subclassing just documents
    the intent and the signatures.
    """

    def on_run_start(self, plan: PlanInfo) -> None:
        """The run validated and planned its tasks; nothing has been dispatched yet."""

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        """``name`` was queued to ``worker``: it now counts as in flight.

        A linear run of tasks handed over as one unit takes one in-flight slot, so
        this is called for its first task only; ``on_task_start`` (if implemented)
        and ``on_task_end`` are still called for every member.
        """

    def on_task_start(self, name: Hashable, worker: int) -> None:
        """``worker`` reported that it began running ``name`` (any of its attempts;
        ``on_attempt_start`` says which)."""

    def on_attempt_start(self, name: Hashable, attempt: int, worker: int) -> None:
        """Attempt number ``attempt`` of ``name`` began on ``worker``.

        Called for every attempt of every task that starts, on threads and in
        child processes (``isolate="process"``: when its worker thread sends the
        call), chain members included (a linear run handed over as one unit has
        one ``on_task_dispatch``, for its first task, but each member that starts
        has its own start). A task whose value a checkpoint supplies is handed
        to a worker as a task that returns its stored value, so it starts too
        (attempt 1), and ends DONE; ``RunStats.tasks_loaded`` counts it, not
        ``tasks_run``. Matched by the attempt's ``on_task_retry`` or
        ``on_task_end`` (and, if it timed out, ``on_task_timeout`` just before).
        """

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        """``name`` ended as ``state``; ``seconds`` is its run time (0.0 if it never ran).

        Called for every task of the plan exactly once, including tasks that end
        ``SKIPPED`` or ``CANCELLED`` without ever running.
        """

    def on_task_retry(self, name: Hashable, attempt: int) -> None:
        """Attempt number ``attempt`` of ``name`` failed and it will be tried again
        (``retries=``); ``on_task_end`` comes only after its last attempt."""

    def on_task_timeout(self, name: Hashable, attempt: int) -> None:
        """Attempt number ``attempt`` of ``name`` ran past its ``timeout=``: it fails
        with ``TaskTimeout`` (``on_task_retry`` or ``on_task_end`` follows at once).

        On a thread, the attempt's thread runs on (a thread cannot be stopped;
        see docs/attempts.md); in a child process (``isolate="process"``), the
        child is killed and the attempt released with ``how="killed"``.
        """

    def on_map_expand(self, name: Hashable, items: int) -> None:
        """Map ``name`` expanded into ``items`` tasks, ``(name, 0)`` to
        ``(name, items - 1)``: the run now has that many more tasks (a progress
        bar's total grows). Called before any of them is dispatched.
        """

    def on_attempt_release(self, name: Hashable, attempt: int, how: str) -> None:
        """Attempt number ``attempt`` of ``name`` no longer holds its in-flight slot
        or its resources in this run. ``how``: ``"returned"`` (its function returned
        or raised, in time or after its timeout), ``"taken back"`` (a stop took it
        out of its inbox before it started), ``"timed out"`` (it timed out, its
        worker got a new thread, and the run let go of it while it runs on),
        ``"killed"`` (a process task's attempt timed out and its child process
        was killed) or ``"abandoned"`` (it timed out and still ran when the run
        ended; the executor, not the run, holds its resources until it returns:
        see docs/attempts.md).

        Each ``on_task_dispatch`` is matched by exactly one call, which is what
        counts exactly with retries and timeouts, where a task has several
        attempts and a timed-out one holds on after its task ended (the
        recorders of :mod:`dagexec.testing` use it). For a linear run of tasks
        handed over as one unit, ``name`` is its first task, as in dispatch.
        """

    def on_run_end(self, result: RunResult) -> None:
        """The run is over and every worker is idle; called before errors are raised."""


_HOOK_NAMES = (
    "on_run_start",
    "on_task_dispatch",
    "on_task_start",
    "on_attempt_start",
    "on_task_end",
    "on_task_retry",
    "on_task_timeout",
    "on_attempt_release",
    "on_map_expand",
    "on_run_end",
)

# The hooks called once per run; every other hook is called per task (or map).
_PER_RUN_HOOKS = frozenset({"on_run_start", "on_run_end"})


def _hooks_by_name(callbacks: Iterable[object]) -> dict[str, tuple[Callable[..., Any], ...]]:
    """Each hook name's overriding methods, in the callbacks' order.

    A hook left as :class:`Callback`'s own no-op is not collected, so a run with
    only no-ops reports no per-task events. A hook that is set but not callable
    raises TypeError now, naming the callback, instead of failing mid-run."""
    found: dict[str, list[Callable[..., Any]]] = {name: [] for name in _HOOK_NAMES}
    for cb in callbacks:
        for name in _HOOK_NAMES:
            method = getattr(cb, name, None)
            if method is None or getattr(type(cb), name, None) is getattr(Callback, name):
                continue  # absent, or Callback's own no-op
            if not callable(method):
                raise TypeError(f"callback {cb!r}: {name} must be callable, got {method!r}")
            found[name].append(method)
    return {name: tuple(methods) for name, methods in found.items()}


def _is_callback(obj: object) -> bool:
    return any(getattr(obj, name, None) is not None for name in _HOOK_NAMES)


def _shown(value: object) -> str:
    """A value for a message: plain data as its repr, any other object by its type."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, bytearray)):
        return f"{type(value).__name__} {value!r}"
    return f"{type(value).__name__} instance"


def callback_list(callbacks: object) -> list[object]:
    """``callbacks`` as a list, read exactly once, each item checked to be a callback.

    An object with any of the hooks is one callback, even if it is also iterable:
    ``callbacks=cb`` is refused with the fix (``callbacks=[cb]``) rather than
    iterated. A class instead of an instance, and an item with none of the hooks,
    are refused too: either would make the run fail later, or do nothing silently.

    Raises:
        TypeError: naming the parameter, the value and the fix.
    """
    if type(callbacks) is tuple or type(callbacks) is list:  # the usual case: no probing
        items: list[object] = list(callbacks)
    else:
        items = _as_list(callbacks)
    for cb in items:
        if isinstance(cb, type):
            name = cb.__qualname__
            raise TypeError(
                f"callbacks: got the class {name}, not a callback object; write {name}()"
            )
        if not _is_callback(cb):
            raise TypeError(
                f"callbacks: {_shown(cb)} has none of the hooks {', '.join(_HOOK_NAMES)}; "
                "pass objects implementing some of them (see dagexec.Callback)"
            )
    return items


def _as_list(callbacks: object) -> list[object]:
    expected = "callbacks must be a list of callback objects"
    if isinstance(callbacks, type):
        name = callbacks.__qualname__
        raise TypeError(f"{expected}, got the class {name}; write callbacks=[{name}()]")
    if _is_callback(callbacks):
        raise TypeError(f"{expected}, got one callback ({_shown(callbacks)}); write callbacks=[cb]")
    if isinstance(callbacks, (str, bytes, bytearray)):
        raise TypeError(f"{expected}, got {_shown(callbacks)}")
    try:
        items: list[object] = list(callbacks)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"{expected}, got {_shown(callbacks)}; write callbacks=[cb, ...], or () for none"
        ) from None
    return items


class Hooks:
    """The hooks a run's callbacks implement, bound once so the hot path is a list walk."""

    __slots__ = (
        "any",
        "attempt_release",
        "attempt_start",
        "map_expand",
        "per_task",
        "run_end",
        "run_start",
        "starts",
        "task_dispatch",
        "task_end",
        "task_retry",
        "task_start",
        "task_timeout",
    )

    def __init__(self, callbacks: Iterable[object]) -> None:
        found = _hooks_by_name(callbacks)
        self.run_start = found["on_run_start"]
        self.task_dispatch = found["on_task_dispatch"]
        self.task_start = found["on_task_start"]
        self.attempt_start = found["on_attempt_start"]
        self.task_end = found["on_task_end"]
        self.task_retry = found["on_task_retry"]
        self.task_timeout = found["on_task_timeout"]
        self.attempt_release = found["on_attempt_release"]
        self.map_expand = found["on_map_expand"]
        self.run_end = found["on_run_end"]
        # Whether a hook called for each task (or map) is set: every hook but
        # on_run_start and on_run_end. Only then must the run report each task's
        # events; counted from _HOOK_NAMES, so a new per-task hook added there is
        # not silently left unobserved.
        # Fields, not properties: every run asks (a property is a call, ~1% of a
        # small run's Python work), and a Hooks never changes once made.
        self.per_task = any(found[name] for name in _HOOK_NAMES if name not in _PER_RUN_HOOKS)
        self.any = bool(self.run_start or self.run_end) or self.per_task
        # Whether workers must report each start (STARTED): one more message per task.
        self.starts = bool(self.task_start or self.attempt_start)

    def __bool__(self) -> bool:
        return self.any
