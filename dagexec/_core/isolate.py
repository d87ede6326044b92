"""The ``isolate=`` option: where a task's function runs, checked when it is added.

``isolate=None`` (the default) runs the function on the worker thread that took
the task. ``isolate="process"`` runs it in a child process that this worker
thread keeps and waits for (see :mod:`dagexec._engine.process.process_pool`), so every
bound of the run applies unchanged: the worker is busy while its child works.

The graph stores such a task's call wrapped in an :class:`IsolatedCall`; the
engine calls it like any task function, on the worker thread, and it hands the
call to that worker's child. Kept here, in the pure layer, so that the graph can
build it; it reaches the engine only when called.

Designed so that ``isolate="interpreter"`` (a subinterpreter per worker, through
``concurrent.interpreters`` on Python 3.14+) can slot in: it would be one more
value in :data:`ISOLATIONS`, the same add-time checks (the function must be found
by module and qualified name, values cross by pickle) and a second pool beside
the process one. Not built: no 3.14 interpreter was available.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from .bind import BoundCall, KeywordCall, callable_name
from .errors import describe

__all__ = [
    "ISOLATIONS",
    "LOADERS",
    "RUNNERS",
    "HeldCall",
    "IsolatedCall",
    "check_isolate",
    "inbox_depth",
    "load_by_file",
    "refuse_in_a_loading_child",
]

ISOLATIONS = ("process",)

# Modules a child cannot import by name and must load from their file instead: a
# script run as `python file.py`, and the graph files the CLI loads (it names them
# "__dagexec_graph_<stem>", see dagexec._integrations.cli.load_graph).
_FILE_MODULE_PREFIX = "__dagexec_graph_"


def load_by_file(module: str) -> bool:
    """True if a child must load ``module`` from its file rather than import it by name."""
    return module == "__main__" or module.startswith(_FILE_MODULE_PREFIX)


def refuse_in_a_loading_child(what: str) -> None:
    """Refuse to start ``what`` (a run, an executor) while this process is a dagexec
    child loading its parent's script: that is the script's own pipeline, outside
    an ``if __name__ == "__main__":`` guard, and would run again in every child.

    The child (``dagexec/_engine/process/child.py``, loaded as ``_dagexec_child``)
    sets ``loading_main`` while it loads the script. One dict lookup otherwise.

    Raises:
        RuntimeError: naming the guard.
    """
    child = sys.modules.get("_dagexec_child")
    if child is not None and getattr(child, "loading_main", False):
        raise RuntimeError(
            f"{what} was started while a dagexec child process was loading your script "
            "to find a task of it (isolate='process'): the script's top level runs again "
            "in each child, so its pipeline would run again there. Put the code that "
            'builds and runs the graph under if __name__ == "__main__": (the tasks stay '
            "at the top level), as multiprocessing requires too"
        )


def inbox_depth(policies: Sequence[Any] | None, queue_cap: int) -> int:
    """How many tasks a worker's inbox may hold in a run of tasks with these policies.

    A run with process tasks keeps at most one task queued per worker: a task
    queued behind a process task (tens of ms at least, or it would not be one)
    waits for it while another worker may be free, and a deeper inbox saves only
    a wake-up per task, which is nothing next to a round trip to a child.
    """
    if policies is None:
        return queue_cap
    key = id(policies)
    known = _has_isolated.get(key)
    if known is None or known[0] is not policies:
        known = (policies, any(p is not None and p.isolate for p in policies))
        with _has_isolated_lock:  # runs of several executors may come here at once
            if len(_has_isolated) >= _HAS_ISOLATED_SIZE:
                _has_isolated.pop(next(iter(_has_isolated)))
            _has_isolated[key] = known
    return min(queue_cap, 1) if known[1] else queue_cap


# Whether a plan's policy column has a process task, by the column's id (the entry
# holds the column, so the id stays its own): a cached plan, run again, does not
# walk a million policies again. Oldest entry dropped first; a few plans are in
# use at once, so a few entries do.
_HAS_ISOLATED_SIZE = 8
_has_isolated: dict[int, tuple[Sequence[Any], bool]] = {}
_has_isolated_lock = threading.Lock()


def check_isolate(name: Hashable, isolate: object, fn: Callable[..., Any]) -> str:
    """``isolate`` as stored, after checking that a child process can find ``fn``.

    A child receives the function by reference (module and qualified name, as
    pickle sends functions) and looks it up there, so it must be reachable from
    its module's top level.

    Raises:
        ValueError: ``isolate`` is not None or one of :data:`ISOLATIONS`, or the
            system is not POSIX.
        TypeError: ``fn`` is a lambda, a function defined inside another, or
            belongs to a ``__main__`` without a file (a notebook, ``python -c``).
    """
    if isolate not in ISOLATIONS:
        raise ValueError(
            f"task {describe(name)}: isolate must be None (run on a worker thread) or "
            f"'process' (run in a child process), got {isolate!r}"
        )
    if sys.platform == "win32":
        raise ValueError(
            f"task {describe(name)}: isolate='process' needs a POSIX system (Linux, "
            "macOS): it talks to its children over inherited pipes; run the task on a "
            "thread (drop isolate)"
        )
    target = fn
    while isinstance(target, (BoundCall, KeywordCall)):
        target = target.fn
    if not (inspect.isfunction(target) or inspect.isbuiltin(target)):
        return str(isolate)  # a partial or a callable object: pickled by value when sent
    qualname = getattr(target, "__qualname__", "")
    module = getattr(target, "__module__", None) or "__main__"
    where = f"{callable_name(target)}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = "a lambda" if "<lambda>" in qualname else "defined inside another function"
        raise TypeError(
            f"task {describe(name)}: isolate='process' runs {where} in a child process, "
            f"which finds it by module and name, but it is {kind} ({qualname}); define "
            "it at the top level of a module, or drop isolate='process'"
        )
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        raise TypeError(
            f"task {describe(name)}: isolate='process' runs {where} in a child process, "
            "which loads the function's module again, but it was defined in a __main__ "
            "that has no file (a notebook, python -c, the REPL); move it into a .py "
            "module and import it from there, or drop isolate='process'"
        )
    return str(isolate)


# How an isolated call runs, by its ``isolate`` value, and how to load the backend
# that runs it. The engine enters a loader per value when it loads
# (dagexec/_engine/__init__.py), so this layer names no engine module; the backend
# itself is loaded by the first call that needs it (:func:`runner_for`), so
# ``import dagexec`` never loads the process pool. isolate="interpreter" would
# enter a loader here too.
RUNNERS: dict[str, Callable[[IsolatedCall, tuple[Any, ...]], Any]] = {}
LOADERS: dict[str, Callable[[], None]] = {}


def runner_for(isolate: str) -> Callable[[IsolatedCall, tuple[Any, ...]], Any]:
    """The runner for ``isolate``, its backend loaded by name on the first call."""
    runner = RUNNERS.get(isolate)
    if runner is None:
        LOADERS[isolate]()  # the backend's register(): enters RUNNERS[isolate]
        runner = RUNNERS[isolate]
    return runner


class HeldCall:
    """A task function wrapped with something that happens on the worker thread around
    each call: ``hold()`` returns a context manager entered before the function is
    called and exited after it returned (or raised).

    On a thread task it is just a call: ``hold()`` around ``fn``. On a process task
    (``isolate="process"``) the graph recognises it when the task is added: the
    child is sent ``fn`` alone, and ``hold()`` is entered on the parent's worker
    thread *before the call is sent* and exited once its answer came back
    (:meth:`IsolatedCall.__call__`), so nothing of it crosses to the child and
    none of it counts against the task's ``timeout=`` (whose deadline starts in
    the child). The one hook for parent-side work around a process call:
    :class:`dagexec.testing.Gate`'s ``gated`` and
    :class:`dagexec.testing.ConcurrencyProbe`'s ``wrap`` are built on it, and so
    can any test helper that must hold or count a call where it is sent.
    Wrappers nest: the outer one's hold is entered first.
    """

    # Slots: ``functools.update_wrapper`` copies the wrapped object's ``__dict__``
    # (an inner HeldCall's) into this one's; its ``fn`` and ``hold`` must not win.
    __slots__ = ("__dict__", "__weakref__", "fn", "hold")

    def __init__(self, fn: Callable[..., Any], hold: Callable[[], AbstractContextManager[Any]]):
        self.fn = fn
        self.hold = hold

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.hold():
            return self.fn(*args, **kwargs)


def unwrap_held(
    fn: Callable[..., Any],
) -> tuple[Callable[..., Any], tuple[Callable[[], AbstractContextManager[Any]], ...]]:
    """``fn`` without its :class:`HeldCall` wrappers, and their holds, outer first."""
    holds: list[Callable[[], AbstractContextManager[Any]]] = []
    while isinstance(fn, HeldCall):
        holds.append(fn.hold)
        fn = fn.fn
    return fn, tuple(holds)


class IsolatedCall:
    """A task's call (its function, or the bound call adding its constants), run in
    the worker's child process when the engine calls it on the worker thread.

    ``labels`` name the positional dependency values for error messages (the
    parameters they go to, when the function's signature says). ``holds`` are
    the :class:`HeldCall` wrappers' holds, entered on the worker thread around
    the call (before it is sent), outer first.
    """

    __slots__ = ("by_file", "call", "cleanup", "holds", "isolate", "labels", "name", "timeout")

    def __init__(
        self,
        call: Callable[..., Any],
        name: Hashable,
        isolate: str,
        timeout: float | None,
        cleanup: bool,
        labels: tuple[str, ...],
        holds: tuple[Callable[[], AbstractContextManager[Any]], ...] = (),
    ) -> None:
        self.call = call
        self.holds = holds
        self.name = name
        self.isolate = isolate
        self.timeout = timeout
        self.cleanup = cleanup
        self.labels = labels
        # The module a child must load from its file to find the function, if any
        # (looked up once here, not per call).
        target: Any = call
        while isinstance(target, (BoundCall, KeywordCall)):
            target = target.fn
        module = getattr(target, "__module__", None)
        self.by_file = module if isinstance(module, str) and load_by_file(module) else None

    def __call__(self, *dep_values: Any) -> Any:
        if not self.holds:
            return runner_for(self.isolate)(self, dep_values)
        with contextlib.ExitStack() as held:
            for hold in self.holds:  # on this worker thread, before the call is sent
                held.enter_context(hold())
            return runner_for(self.isolate)(self, dep_values)

    def __repr__(self) -> str:
        return f"<dagexec {self.isolate} call {callable_name(self.call)}>"


def dep_labels(fn: Callable[..., Any], deps: tuple[Hashable, ...], kw_deps: Any) -> tuple[str, ...]:
    """Labels for the dependency values of a task: 'parameter x (the value of task a)'."""
    if kw_deps:
        return tuple(
            f"parameter {p!r} (the value of task {describe(d)})" for p, d in kw_deps.items()
        )
    params: list[str] = []
    try:
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                params.append(p.name)
    except (TypeError, ValueError):
        pass
    return tuple(
        f"parameter {params[i]!r} (the value of task {describe(d)})"
        if i < len(params)
        else f"argument {i} (the value of task {describe(d)})"
        for i, d in enumerate(deps)
    )
