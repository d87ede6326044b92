"""``g.map`` and ``@g.task``: the forms of adding a task that read the function first.

A decorator names the task after the function and, without ``deps``, reads the
dependencies off its parameters; ``g.map`` also takes its function directly.
Each form checks what it was given, then hands one complete task to the
graph's general add (``Graph._add``), which stores it or nothing; only a
stored task's inferred dependencies are noted (``Graph._inferred_from``).

These functions *are* the methods :meth:`dagexec.Graph.map` and
:meth:`dagexec.Graph.task` (assigned in the class body, and named as such): the
graph keeps its columns and the one general add, this module the surface that
reads functions. They see the graph only through :class:`Builds`, so they
import nothing of ``graph.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Protocol, TypeVar, Unpack, overload

from .bind import callable_name
from .new_task import NO_OVER
from .options import check_args, check_kwargs, deps_from_signature, name_of, safe_repr
from .task_options import TaskOptionArgs

__all__ = ["NO_NAME", "Builds", "graph_map", "graph_task"]

F = TypeVar("F", bound=Callable[..., Any])

NO_NAME: Any = object()
"""``g.map``'s name when not given: the decorator form names the map after its function."""


class Builds(Protocol):
    """What the decorator forms use of the graph."""

    def _add(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        deps: object,
        args: object,
        kwargs: object,
        options: Mapping[str, object],
        over: object,
        caller: str,
    ) -> Hashable:
        """Check everything, then store the task (or nothing); ``caller`` names the form."""

    def _inferred_from(self, name: Hashable, function: str) -> None:
        """Note that stored task ``name`` took its deps from ``function``'s parameters."""


@overload
def graph_map(
    self: Builds,
    name: Hashable,
    fn: Callable[..., Any],
    *,
    over: Hashable,
    deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[TaskOptionArgs],
) -> Hashable: ...


@overload
def graph_map(
    self: Builds,
    name: Hashable = ...,
    fn: None = None,
    *,
    over: Hashable,
    deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[TaskOptionArgs],
) -> Callable[[F], F]: ...


def graph_map(
    self: Builds,
    name: Hashable = NO_NAME,
    fn: Callable[..., Any] | None = None,
    *,
    over: Hashable,
    deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[TaskOptionArgs],
) -> Any:
    """Add ``name``: ``fn(item, *dep_values, *args, **kwargs)`` for each item of ``over``.

    Takes what :meth:`add` takes: ``deps`` in order (passed after the item) or
    as a mapping ``{parameter: task name}`` (passed by keyword, and then
    ``args`` follow the item), ``args``, ``kwargs`` and every task option.
    ``run_if="all_done"`` applies to ``deps``: the items run even when one of
    them failed (and receive its exception, or ``dagexec.MISSING``); a failed
    ``over`` skips the map, since it has no items.

    When ``over`` ends, its value is iterated once and each item becomes a
    task of its own, named ``(name, i)`` in status, trace and callbacks, with
    this task's options. A task depending on ``name`` receives the list of
    results, in order. When ``over`` is itself a map, ``(name, i)`` runs as
    soon as ``(over, i)`` is done, without waiting for the whole of ``over``.

    Without ``fn``, a decorator like :meth:`task`: ``@g.map(over="files")``
    names the map after the function and, without ``deps``, takes its
    dependencies from the positional parameters after the item.

    In a checkpointed run each item is stored on its own, found again by its
    element (not its index): a new element runs alone, the others load.
    ``checkpoint=False`` stores no item.

    Raises:
        The errors of :meth:`add`.
    """
    if fn is not None:
        if name is NO_NAME:
            raise TypeError(
                "g.map(fn=..., over=...) needs the map's name: write "
                "g.map('name', fn, over=...), or decorate: @g.map(over=...)"
            )
        return self._add(name, fn, () if deps is None else deps, args, kwargs, options, over, "map")
    if callable(name) and not isinstance(name, (str, tuple, int)):
        raise TypeError(
            f"g.map takes the map's name first, then its function: got the function "
            f"{callable_name(name)} alone; write g.map('name', fn, over=...), or "
            "decorate it with @g.map(over=...)"
        )

    def register(func: F) -> F:
        if not callable(func):
            raise TypeError(
                f"g.map(...) decorates a function, got {type(func).__name__} {safe_repr(func)}"
            )
        map_name = name_of(func) if name is NO_NAME else name
        constants = args if type(args) is tuple else check_args(map_name, args)
        if kwargs is not None:  # before its keys are read to infer deps
            check_kwargs(map_name, kwargs, None)
        map_deps: Iterable[Hashable] | Mapping[str, Hashable]
        inferred = None
        if deps is None:
            # The first parameter takes the item: the dependencies are the rest.
            map_deps = deps_from_signature(map_name, func, constants, kwargs, skip=1)
            if map_deps:
                inferred = callable_name(func)
        else:
            map_deps = deps
        self._add(map_name, func, map_deps, constants, kwargs, options, over, "map")
        if inferred is not None:
            self._inferred_from(map_name, inferred)
        return func

    return register


@overload
def graph_task(self: Builds, fn: F, /) -> F: ...


@overload
def graph_task(
    self: Builds,
    /,
    *,
    name: Hashable | None = None,
    deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[TaskOptionArgs],
) -> Callable[[F], F]: ...


def graph_task(
    self: Builds,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: Hashable | None = None,
    deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[TaskOptionArgs],
) -> Any:
    """Decorator form of :meth:`add`; the function is returned unchanged.

    Without ``name`` the task is named after the function. Without ``deps``
    its dependencies are its positional parameters that have no default and
    that ``args`` and ``kwargs`` do not fill (``args`` fill the last of them,
    since dependency values come first). Takes every option of :meth:`add`.
    """
    if fn is not None and not callable(fn):
        raise TypeError(
            f"g.task takes the function to decorate, or only keyword options; got "
            f"{type(fn).__name__} {safe_repr(fn)}. To name the task, write "
            f"@g.task(name={safe_repr(fn)})"
        )

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(
                f"g.task(...) decorates a function, got {type(func).__name__} {safe_repr(func)}"
            )
        task_name = name_of(func) if name is None else name
        task_args = args if type(args) is tuple else check_args(task_name, args)
        if kwargs is not None:  # before its keys are read to infer deps
            check_kwargs(task_name, kwargs, None)
        task_deps: Iterable[Hashable] | Mapping[str, Hashable]
        inferred = None
        if deps is None:
            task_deps = deps_from_signature(task_name, func, task_args, kwargs)
            if task_deps:
                inferred = callable_name(func)
        else:
            task_deps = deps
        self._add(task_name, func, task_deps, task_args, kwargs, options, NO_OVER, "task")
        if inferred is not None:
            self._inferred_from(task_name, inferred)
        return func

    if fn is not None:
        return register(fn)
    return register


# The methods Graph.map and Graph.task: named as such in messages and help().
# (Not named map and task here: a module-level map would hide the builtin.)
graph_map.__name__, graph_map.__qualname__ = "map", "Graph.map"
graph_task.__name__, graph_task.__qualname__ = "task", "Graph.task"
