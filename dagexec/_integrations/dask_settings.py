"""Every setting dask's local schedulers take, and what :func:`dagexec.dask.get` does
with it: honoured, refused by name (a TypeError saying what to do instead), or
ignored as dask's local schedulers ignore it. docs/dask.md tables the same three
lists, and tests/test_dask_settings.py walks ``dask.local.get_async``'s and
``dask.threaded.get``'s parameters and the annotations dask documents, and fails
on one in none of them.

Also here: what two honoured settings need, ``rerun_exceptions_locally``
(:class:`FailedCalls`) and numeric priorities (:func:`dense_ranks`), and the
``dagexec.unknown-resources`` config key (:func:`unknown_resources`).

Imported only by :mod:`dagexec.dask`, which checks that dask is installed first.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import dask

from .._core.errors import describe

__all__ = [
    "ANNOTATIONS_HONOURED",
    "ANNOTATIONS_IGNORED",
    "HONOURED",
    "IGNORED",
    "REFUSED",
    "FailedCalls",
    "check_settings",
    "dense_ranks",
    "unknown_resources",
]

# Keywords of get() (and dask.local.get_async's names for them) that it honours.
HONOURED = {
    "dsk": "the graph, a mapping or anything with __dask_graph__",
    "keys": "one key, or nested lists of keys",
    "result": "get_async's name for keys",
    "cache": "the run's live value store (and the cache config value)",
    "num_workers": "worker threads (and the num_workers config value)",
    "pool": "a thread pool's size is the worker count (and the pool config value)",
    "callbacks": "dask's local callbacks (and the active ones)",
    "rerun_exceptions_locally": "a failed task runs again on the calling thread "
    "(and the rerun_exceptions_locally config value)",
    "raise_exception": "called with the first failing task's exception and traceback",
}

# Keywords it refuses, with what to do instead: hooks of get_async's own worker
# loop, which dagexec does not run (dask.threaded.get refuses the first three too,
# as it passes its own).
REFUSED = {
    "submit": "dagexec runs tasks on its own worker threads; pass num_workers= or executor=",
    "get_id": "callbacks get dagexec's worker index as the worker id",
    "pack_exception": "a task's exception reaches the caller as the same object",
    "dumps": "values are never serialised between dagexec's threads; use "
    "scheduler='processes' for that",
    "loads": "values are never serialised between dagexec's threads; use "
    "scheduler='processes' for that",
}

# Keywords it ignores, as dask's local schedulers ignore them or as dagexec does
# the same by itself.
IGNORED = {
    "chunksize": "dagexec hands ready tasks to its workers in batches of its own",
    "kwargs": "other schedulers' options, ignored as the scheduler protocol expects",
}

# Annotations (dask.annotate) it honours, and those it ignores as dask's local
# schedulers do (they name a cluster's workers).
ANNOTATIONS_HONOURED = {
    "priority": "any number: the distinct values become dense integer ranks, in order",
    "retries": "a whole number, as Graph.add(retries=)",
    "resources": "held while the task is out, against get(resources=) or the "
    "dagexec.resources config value",
}
ANNOTATIONS_IGNORED = {
    "workers": "a cluster's workers; dask's local schedulers ignore it too",
    "allow_other_workers": "a cluster's workers; dask's local schedulers ignore it too",
}

# The dagexec.unknown-resources config key: what a resource annotation with no
# capacity does. "refuse" (the default): a ValueError before anything runs.
UNKNOWN_RESOURCES = ("refuse", "ignore")


def check_settings(kwargs: Iterable[str]) -> None:
    """TypeError for a keyword :data:`REFUSED`; any other unknown one is ignored."""
    for name in kwargs:
        if name in REFUSED:
            raise TypeError(f"dagexec.dask.get does not take {name}=: {REFUSED[name]}")


def unknown_resources() -> str:
    """The ``dagexec.unknown-resources`` config value, checked."""
    value = dask.config.get("dagexec.unknown-resources", "refuse")
    if value not in UNKNOWN_RESOURCES:
        raise ValueError(
            f"the dask config value dagexec.unknown-resources must be 'refuse' or "
            f"'ignore', got {value!r}"
        )
    return str(value)


def dense_ranks(values: Iterable[object]) -> dict[object, int]:
    """Each distinct number of ``values`` as an int in the same order, 0 staying 0:
    negatives become -1, -2, ... and positives 1, 2, ... (a task without a
    priority annotation has priority 0, so it keeps its place among them)."""
    distinct = sorted(set(values))  # type: ignore[type-var]
    below = [v for v in distinct if v < 0]  # type: ignore[operator]
    above = [v for v in distinct if v > 0]  # type: ignore[operator]
    ranks: dict[object, int] = {v: i - len(below) for i, v in enumerate(below)}
    ranks.update({v: i + 1 for i, v in enumerate(above)})
    ranks.update({v: 0 for v in distinct if v == 0})
    return ranks


def check_priority(key: Hashable, value: object) -> None:
    """TypeError/ValueError for a priority annotation that is not a real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]  # numpy numbers, Fraction...
        except (TypeError, ValueError):
            raise TypeError(
                f"dask task {describe(key)} is annotated with priority={value!r}; "
                "dagexec.dask.get takes a number: dask.annotate(priority=<number>)"
            ) from None
    if math.isnan(value):
        raise ValueError(
            f"dask task {describe(key)} is annotated with priority=nan, which has no "
            "order; give it a number"
        )


class FailedCalls:
    """``rerun_exceptions_locally``: each task's function, wrapped to keep the
    arguments of a call that raised (only those: nothing is kept for a task that
    succeeds), so that the failure can be run again on the calling thread, where
    ``pdb.pm()`` reaches it, as dask's local schedulers do."""

    __slots__ = ("failed", "lock")

    def __init__(self) -> None:
        self.failed: list[tuple[BaseException, Hashable, Callable[..., Any], tuple[Any, ...]]]
        self.failed = []
        self.lock = threading.Lock()

    def wrap(self, key: Hashable, fn: Callable[..., Any]) -> Callable[..., Any]:
        return _Kept(fn, key, self)

    def rerun(self, exc: BaseException) -> None:
        """Run the call that raised ``exc`` again, here; what it raises propagates
        (with a note). If it does not raise (a flaky task), ``exc`` is raised."""
        with self.lock:
            found = [entry for entry in self.failed if entry[0] is exc]
        if not found:
            return  # not a task's own exception (Ctrl-C, a bad option)
        _, key, fn, args = found[0]
        try:
            fn(*args)
        except BaseException as again:
            again.add_note(
                f"dagexec: task {describe(key)} run again on the calling thread "
                "(rerun_exceptions_locally)"
            )
            raise
        exc.add_note(
            f"dagexec: task {describe(key)} succeeded when run again on the calling "
            "thread (rerun_exceptions_locally); this is its first failure"
        )


class _Kept:
    """A task function that keeps its arguments when it raises (see :class:`FailedCalls`)."""

    __slots__ = ("calls", "fn", "key")

    def __init__(self, fn: Callable[..., Any], key: Hashable, calls: FailedCalls) -> None:
        self.fn = fn
        self.key = key
        self.calls = calls

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except Exception as exc:
            with self.calls.lock:
                self.calls.failed.append((exc, self.key, self.fn, args))
            raise
