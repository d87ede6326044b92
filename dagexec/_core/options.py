"""The parameters of ``Graph.add``, ``g.map`` and ``@g.task``, one check per parameter.

Each check turns what the user passed into what the graph stores, or raises a
``TypeError`` (wrong type) or ``ValueError`` (wrong value) that names the task,
the parameter, the value and the fix. The task options themselves are listed
once in :mod:`dagexec._core.task_options`, which uses the checks here.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from .bind import callable_name
from .errors import describe

__all__ = [
    "NO_KWARGS",
    "FrozenKwargs",
    "check_amount",
    "check_args",
    "check_checkpoint_path",
    "check_deps",
    "check_kwargs",
    "check_resources",
    "deps_from_signature",
    "name_of",
    "safe_repr",
]


class FrozenKwargs(Mapping[str, Any]):
    """A task's ``kwargs``: read-only, and hashable when its values are.

    Hashable so that a :class:`Task` stays hashable like any tuple of hashable
    values (a ``MappingProxyType`` is not).
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)


NO_KWARGS: Mapping[str, Any] = FrozenKwargs({})


def safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} with a failing repr>"


def check_deps(
    task: Hashable, deps: object
) -> tuple[tuple[Hashable, ...], dict[str, Hashable] | None]:
    """``deps`` as (task names, {parameter: task name} when given as a mapping, else None)."""
    if isinstance(deps, Mapping):
        bad = [p for p in deps if not isinstance(p, str)]
        if bad:
            raise TypeError(
                f"task {describe(task)}: a deps mapping goes from parameter name to task "
                f"name, got the key {safe_repr(bad[0])}; write deps={{'param': "
                f"{safe_repr(bad[0])}}}, or a list for positional dependencies"
            )
        return tuple(deps.values()), dict(deps)
    if isinstance(deps, str):
        fix = f"write deps=[{deps!r}]"
        raise TypeError(
            f"task {describe(task)}: deps must be a collection of task names, got the "
            f"string {deps!r}; {fix}"
        )
    if isinstance(deps, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"task {describe(task)}: deps must be a collection of task names, got "
            f"{type(deps).__name__} {safe_repr(deps)} (which iterates as integers); "
            f"write deps=[{safe_repr(deps)}] for one task named by it"
        )
    if deps is None:
        raise TypeError(
            f"task {describe(task)}: deps must be a collection of task names, got None; "
            "write deps=() (the default) for a task without dependencies"
        )
    if isinstance(deps, (set, frozenset)):
        raise TypeError(
            f"task {describe(task)}: deps must be ordered (dependency values are passed "
            f"in deps order), got a {type(deps).__name__}; use a list, or a mapping "
            "{parameter: task} to pass them by keyword"
        )
    if not isinstance(deps, Iterable):
        raise TypeError(
            f"task {describe(task)}: deps must be a collection of task names, got "
            f"{type(deps).__name__} {safe_repr(deps)}; write deps=[{safe_repr(deps)}]"
        )
    return tuple(deps), None


def check_args(task: Hashable, args: object) -> tuple[Any, ...]:
    if isinstance(args, (str, bytes, bytearray)):
        raise TypeError(
            f"task {describe(task)}: args must be a tuple of values, got "
            f"{type(args).__name__} {args!r}; write args=({args!r},)"
        )
    if isinstance(args, Mapping):
        raise TypeError(
            f"task {describe(task)}: args takes positional values, got a mapping; "
            f"pass keyword arguments as kwargs={safe_repr(args)}"
        )
    if not isinstance(args, Iterable):
        raise TypeError(
            f"task {describe(task)}: args must be a tuple of values, got "
            f"{type(args).__name__} {safe_repr(args)}; write args=({safe_repr(args)},)"
        )
    return tuple(args)


def check_kwargs(
    task: Hashable, kwargs: object, kw_deps: Mapping[str, Hashable] | None
) -> Mapping[str, Any]:
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            f"task {describe(task)}: kwargs must be a mapping of parameter name to "
            f"value, got {type(kwargs).__name__} {safe_repr(kwargs)}"
        )
    for key in kwargs:
        if not isinstance(key, str):
            raise TypeError(
                f"task {describe(task)}: kwargs keys are parameter names, got {safe_repr(key)}"
            )
        if kw_deps and key in kw_deps:
            raise TypeError(
                f"task {describe(task)}: parameter {key!r} is given both by deps (the "
                f"value of {describe(kw_deps[key])}) and by kwargs; drop one of them"
            )
    return kwargs


def name_of(func: Callable[..., Any]) -> Hashable:
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(
            f"@g.task names a task after its function, but {callable_name(func)} has no "
            "__name__ (a functools.partial or a callable object); write "
            "g.task(name=..., deps=[...])(fn), or g.add(name, fn, deps=[...])"
        )
    return name


def deps_from_signature(
    name: Hashable,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    skip: int = 0,
) -> tuple[str, ...]:
    """The positional parameters without defaults that args and kwargs leave, in order.

    The first ``skip`` positional parameters are not dependencies (a map's item).
    """
    try:
        params = inspect.signature(func).parameters.values()
    except Exception:
        raise TypeError(
            f"task {describe(name)}: @g.task cannot read the parameters of "
            f"{callable_name(func)} to find its dependencies; pass deps=[...]"
        ) from None
    filled = set(kwargs or ())
    required: list[str] = []
    for param in params:
        if skip and param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            skip -= 1
            continue
        if param.kind is param.VAR_POSITIONAL:
            raise TypeError(
                f"task {describe(name)}: @g.task cannot tell which tasks "
                f"*{param.name} of {callable_name(func)} should receive; list them: "
                f"@g.task(deps=['a', 'b'])"
            )
        if param.kind is param.VAR_KEYWORD or param.default is not param.empty:
            continue
        if param.name in filled:
            continue
        if param.kind is param.KEYWORD_ONLY:
            raise TypeError(
                f"task {describe(name)}: keyword-only parameter {param.name!r} has no "
                "default, but @g.task passes dependency values positionally; give it a "
                f"default, pass it in kwargs=, or pass deps={{{param.name!r}: 'task'}}"
            )
        required.append(param.name)
    return tuple(required[: max(0, len(required) - len(args))])


def check_resources(name: Hashable, resources: object) -> tuple[tuple[str, float], ...]:
    """``resources`` as sorted (name, amount) pairs, amounts positive and finite."""
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"task {describe(name)}: resources must be a mapping of resource name to "
            f"amount, like {{'gpu': 1}}; got {type(resources).__name__} {safe_repr(resources)}"
        )
    needs = []
    for key, amount in resources.items():
        if not isinstance(key, str):
            raise TypeError(
                f"task {describe(name)}: resource names must be strings, got "
                f"{type(key).__name__} {safe_repr(key)}"
            )
        needs.append((key, check_amount(f"task {describe(name)}: resources[{key!r}]", amount)))
    return tuple(sorted(needs))


def check_amount(what: str, amount: object) -> float:
    """A resource amount: a positive number a float can hold (``10**400`` cannot:
    the scheduler's sums would overflow mid-run)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise TypeError(
            f"{what} must be a number (int or float), got {type(amount).__name__} "
            f"{safe_repr(amount)}"
        )
    try:
        finite = math.isfinite(amount)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or amount <= 0:
        raise ValueError(
            f"{what} must be a positive finite number, got {safe_repr(amount)}; leave "
            "the resource out if the task needs none"
        )
    return amount


def check_checkpoint_path(checkpoint: object) -> str | None:
    """``run(checkpoint=...)`` checked: None, or the file's path as a str."""
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(
            "checkpoint must be a file path (str or os.PathLike), like 'batch.sqlite'; "
            f"got {type(checkpoint).__name__} {checkpoint!r}"
        )
    path = os.fspath(checkpoint)
    if not isinstance(path, str):
        raise TypeError(f"checkpoint must be a str path, got {type(path).__name__} {path!r}")
    if path in ("", ":memory:") or path.startswith("file::memory:"):
        raise ValueError(f"checkpoint must be a file path, got {path!r}")
    return path
