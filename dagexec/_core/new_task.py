"""One new task, checked and bound: the pieces of :meth:`Graph.add`'s general path.

Each function checks or builds one thing about the task being added (its name,
a map's ``over``, its dependencies' positions, the call a worker makes), so
that ``Graph.add`` reads as the list of steps and stores the task only once
every one of them has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

from .bind import BoundCall, ItemKeywordCall, KeywordCall, check_call
from .errors import DuplicateTaskError, describe
from .isolate import IsolatedCall, check_isolate, dep_labels, unwrap_held
from .options import NO_KWARGS, FrozenKwargs, safe_repr
from .task_options import TaskRecord

__all__ = [
    "NO_OVER",
    "Task",
    "bound_call",
    "check_hashable",
    "check_new",
    "check_over",
    "dep_ids",
    "is_hashable",
    "isolated_call",
    "placed_call",
    "same_name",
]


NO_OVER: Any = object()
"""A new task's ``over`` when it is not a map (``None`` may name a task)."""


class Task(NamedTuple):
    """One node: ``fn(*results_of(deps), *args, **kwargs)`` produces the value ``name``.

    When ``deps`` was given as a mapping, ``dep_params`` holds the parameter each
    dependency's value is passed to (``dep_params[i]`` receives ``deps[i]``), and
    the call is ``fn(*args, **{dep_params[i]: result_of(deps[i])}, **kwargs)``.
    ``fn``, ``args`` and ``kwargs`` are what you passed: constants stay inspectable.
    For a map, ``deps[0]`` is ``over`` and the rest are its deps: ``dep_params``
    then name ``deps[1:]``, and each item is called as ``fn(item, *args,
    **{dep_params[i]: result_of(deps[i + 1])}, **kwargs)``.

    A named tuple rather than a frozen dataclass: a million-task graph must build
    in about a second (a frozen dataclass's ``__init__`` alone costs three times
    as much).
    """

    name: Hashable
    fn: Callable[..., Any]
    deps: tuple[Hashable, ...]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = NO_KWARGS
    dep_params: tuple[str, ...] = ()


def check_new(index: Mapping[Hashable, int], name: Hashable, fn: object) -> None:
    """A new task's name is hashable and not taken, and its fn is callable."""
    try:
        known = name in index
    except TypeError:
        raise TypeError(
            f"task name must be hashable, got {type(name).__name__} {safe_repr(name)}"
        ) from None
    if known:
        raise DuplicateTaskError(name)
    if not callable(fn):
        raise TypeError(
            f"task {describe(name)}: fn must be callable, got {type(fn).__name__} {safe_repr(fn)}"
        )


def check_over(name: Hashable, over: object) -> None:
    """A map's ``over``: the name of a task, not the map's own."""
    if not is_hashable(over):
        raise TypeError(
            f"map {describe(name)}: over must be the name of a task (hashable), "
            f"got {type(over).__name__} {safe_repr(over)}"
        )
    if same_name(over, name):
        raise ValueError(
            f"map {describe(name)}: over={describe(over)} names the map itself; "
            "over is the task whose value (a list, or any iterable) the map runs over"
        )


def dep_ids(
    index: Mapping[Hashable, int], name: Hashable, dep_names: tuple[Hashable, ...]
) -> tuple[int, ...] | None:
    """The dependencies' positions, when all of them were added before this task
    (the usual order); None if one is added later, or never.

    Looked up now, while they are fresh in the cache, validate has nothing left
    to resolve and knows that no cycle passes through this task. The look-ups
    also hash every name.
    """
    try:
        if len(dep_names) == 1:  # the commonest shape, without a map object
            return (index[dep_names[0]],)
        return tuple(map(index.__getitem__, dep_names))
    except KeyError:  # one is added later, or never: validate resolves them
        check_hashable(name, dep_names)  # the look-up stopped at the first miss
        return None
    except TypeError:
        check_hashable(name, dep_names)
        raise


def bound_call(
    name: Hashable,
    fn: Callable[..., Any],
    dep_names: tuple[Hashable, ...],
    kw_deps: dict[str, Hashable] | None,
    constants: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    is_map: bool,
) -> tuple[Callable[..., Any], Task]:
    """A task with constants or keyword dependencies: what the worker calls
    (checked against fn's signature now), and the task as the user wrote it."""
    keywords = dict(kwargs or {})
    kw_deps = kw_deps or {}
    positional = dep_names[:1] if kw_deps and is_map else () if kw_deps else dep_names
    check_call(name, fn, positional, kw_deps, constants, keywords)
    dep_params = tuple(kw_deps)
    call: Callable[..., Any]
    if dep_params:
        call = (ItemKeywordCall if is_map else KeywordCall)(fn, constants, keywords, dep_params)
    else:
        call = BoundCall(fn, constants, keywords)
    return call, Task(name, fn, dep_names, constants, FrozenKwargs(keywords), dep_params)


def placed_call(
    name: Hashable,
    fn: Callable[..., Any],
    call: Callable[..., Any],
    original: Task | None,
    checked: TaskRecord,
    dep_names: tuple[Hashable, ...],
    kw_deps: dict[str, Hashable] | None,
) -> tuple[TaskRecord, Callable[..., Any], Task | None]:
    """The record, the call and the original of a task given a policy: as given,
    unless it runs elsewhere than its worker thread (``isolate=``; see
    :func:`isolated_call`), whose call the graph then keeps beside the user's fn
    (``graph[name].fn`` and the checkpoint identity read the original)."""
    if checked.policy is None or checked.policy.isolate is None:
        return checked, call, original
    checked, call = isolated_call(name, fn, call, checked, dep_names, kw_deps)
    return checked, call, original or Task(name, fn, dep_names)


def isolated_call(
    name: Hashable,
    fn: Callable[..., Any],
    call: Callable[..., Any],
    checked: TaskRecord,
    dep_names: tuple[Hashable, ...],
    kw_deps: dict[str, Hashable] | None,
) -> tuple[TaskRecord, Callable[..., Any]]:
    """An ``isolate=`` task: the worker thread hands the call to a child process
    (isolate.py); the child must find fn by module and name, and the policy says
    how it ran. A :class:`~dagexec._core.isolate.HeldCall` (a test helper's
    wrapper) is taken apart here: the child gets its function, the worker thread
    keeps its holds."""
    inner, holds = unwrap_held(fn)
    if holds:
        if call is fn:
            call = inner
        else:  # a bound call made for this task alone: it calls the inner function
            call.fn = inner  # type: ignore[attr-defined]
        fn = inner
    assert checked.policy is not None  # check_task_options put isolate= there
    policy = checked.policy._replace(isolate=check_isolate(name, checked.policy.isolate, fn))
    checked = checked._replace(policy=policy)
    isolated = IsolatedCall(
        call,
        name,
        policy.isolate or "",
        policy.timeout,
        policy.cleanup,
        dep_labels(fn, dep_names, kw_deps),
        holds,
    )
    return checked, isolated


def same_name(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a hostile name: the graph's own checks report it
        return False


def check_hashable(task: Hashable, dep_names: tuple[Hashable, ...]) -> None:
    """Raise the add-time ``TypeError`` naming the first unhashable dependency name."""
    try:
        hash(dep_names)  # one C call checks every dependency name
    except TypeError:
        bad = next((d for d in dep_names if not is_hashable(d)), None)
        if bad is None:  # a name whose hash fails only sometimes: its own error
            raise
        raise TypeError(
            f"task {describe(task)}: dependency names must be hashable, got "
            f"{type(bad).__name__} {safe_repr(bad)}"
        ) from None


def is_hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
