"""The graph a user builds: named tasks, their functions and their dependencies.

A :class:`Graph` is a plain value with no threads. It only records what the user
said; checking that the whole thing makes sense (cycles, missing dependencies) is
:mod:`dagexec._validate`'s job and happens once per version of the graph: the
checked form is cached here and dropped by every change, so repeated runs of a
large graph do not pay for validation again, while a graph changed between two
runs is always validated again.

Tasks are stored as columns (names, functions, dependency tuples) rather than one
object per task: a million-task graph then costs a million fewer objects for the
garbage collector to walk on every full collection, which was half of the time
it took to build one.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from ._errors import DuplicateTaskError, describe

if TYPE_CHECKING:
    from ._validate import CompiledGraph

__all__ = ["Graph", "Task"]

F = TypeVar("F", bound=Callable[..., Any])


class Task(NamedTuple):
    """One node: ``fn(*results_of(deps))`` produces the value named ``name``.

    A named tuple rather than a frozen dataclass: it is created once per ``add``,
    and a million-task graph must build in about a second (a frozen dataclass's
    ``__init__`` alone costs three times as much).
    """

    name: Hashable
    fn: Callable[..., Any]
    deps: tuple[Hashable, ...]


class Graph:
    """A set of named tasks, each a function of the results of the tasks it depends on.

    Names are any hashable values. Dependencies may name tasks that are added later;
    they are checked by :meth:`validate`, which :func:`dagexec.run` also calls.
    A graph is not safe to change from one thread while another runs it.
    """

    __slots__ = (
        "__weakref__",
        "_compiled",
        "_deps",
        "_fns",
        "_index",
        "_maps",
        "_names",
        "_priority",
        "_resources",
    )

    def __init__(self) -> None:
        self._index: dict[Hashable, int] = {}  # name -> position in the columns below
        self._names: list[Hashable] = []
        self._fns: list[Callable[..., Any]] = []
        self._deps: list[tuple[Hashable, ...]] = []
        # Sparse, by position: only tasks given a priority or resources.
        self._priority: dict[int, int] = {}
        self._resources: dict[int, tuple[tuple[str, float], ...]] = {}
        self._maps: set[int] = set()  # positions of g.map tasks
        self._compiled: CompiledGraph | None = None

    def add(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        *,
        deps: Iterable[Hashable] = (),
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
    ) -> Hashable:
        """Add task ``name`` computing ``fn(*[result of d for d in deps])``; return ``name``.

        ``priority``: among tasks ready at the same time, higher runs first.
        ``resources``: what the task holds from dispatch until it ends, e.g.
        ``{"gpu": 1}``; the run's capacities (``resources=`` of the executor or the
        run) bound the sum over tasks out at once.

        Raises:
            DuplicateTaskError: ``name`` is already a task of this graph.
            TypeError: ``name`` is unhashable, ``fn`` is not callable, or ``deps`` is a
                single string instead of a collection of names.
        """
        index = self._index
        try:
            known = name in index
        except TypeError:
            raise TypeError(
                f"task name must be hashable, got {type(name).__name__} {name!r}"
            ) from None
        if known:
            raise DuplicateTaskError(name)
        if not callable(fn):
            raise TypeError(
                f"task {describe(name)}: fn must be callable, got {type(fn).__name__} {fn!r}"
            )
        if type(deps) is not tuple:
            if isinstance(deps, (str, bytes)):
                raise TypeError(
                    f"task {describe(name)}: deps must be a collection of task names, got "
                    f"the string {deps!r}; write deps=[{deps!r}]"
                )
            deps = tuple(deps)
        try:
            hash(deps)  # one C call checks every dependency name
        except TypeError:
            bad = next(d for d in deps if not _hashable(d))
            raise TypeError(
                f"task {describe(name)}: dependency names must be hashable, got "
                f"{type(bad).__name__} {bad!r}"
            ) from None
        if priority or resources:  # plain tasks store nothing here
            self._set_options(len(self._names), name, priority, resources)
        index[name] = len(self._names)
        self._names.append(name)
        self._fns.append(fn)
        self._deps.append(deps)
        self._compiled = None
        return name

    def _set_options(self, i: int, name: Hashable, priority: object, resources: object) -> None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(
                f"task {describe(name)}: priority must be an int, got "
                f"{type(priority).__name__} {priority!r}"
            )
        needs = _check_resources(name, resources) if resources else ()
        if priority:
            self._priority[i] = priority
        if needs:
            self._resources[i] = needs

    def map(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        *,
        over: Hashable,
        deps: Iterable[Hashable] = (),
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
    ) -> Hashable:
        """Add ``name``: ``fn(item, *[result of d for d in deps])`` for each item of ``over``.

        When ``over`` ends, its value is iterated once and each item becomes a
        task of its own, named ``(name, i)`` in status, trace and callbacks, with
        this task's ``priority`` and ``resources``. A task depending on ``name``
        receives the list of results, in order. When ``over`` is itself a map,
        ``(name, i)`` runs as soon as ``(over, i)`` is done, without waiting for
        the whole of ``over``.

        Raises:
            The errors of :meth:`add`.
        """
        if type(deps) is not tuple:
            if isinstance(deps, (str, bytes)):
                raise TypeError(
                    f"map {describe(name)}: deps must be a collection of task names, got "
                    f"the string {deps!r}; write deps=[{deps!r}]"
                )
            deps = tuple(deps)
        position = len(self._names)
        self.add(name, fn, deps=(over, *deps), priority=priority, resources=resources)
        self._maps.add(position)
        return name

    @overload
    def task(self, fn: F, /) -> F: ...

    @overload
    def task(
        self,
        /,
        *,
        name: Hashable | None = None,
        deps: Iterable[Hashable] | None = None,
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: Hashable | None = None,
        deps: Iterable[Hashable] | None = None,
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
    ) -> Any:
        """Decorator form of :meth:`add`; the function is returned unchanged.

        Without ``name`` the task is named after the function; without ``deps`` its
        dependencies are its positional parameters that have no default, in order.
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            task_name = func.__name__ if name is None else name
            task_deps = _deps_from_signature(task_name, func) if deps is None else deps
            self.add(task_name, func, deps=task_deps, priority=priority, resources=resources)
            return func

        if fn is not None:
            return register(fn)
        return register

    def validate(self) -> None:
        """Check the whole graph: every dependency exists and there is no cycle.

        The result is cached until the graph changes, so calling this (or running the
        graph) again is cheap.

        Raises:
            MissingDependencyError: a task depends on a name that is not in the graph.
            CycleError: the graph has a cycle; ``.cycle`` is its path.
        """
        self._compile()

    def _compile(self) -> CompiledGraph:
        compiled = self._compiled
        if compiled is None:
            from ._validate import compile_graph

            compiled = compile_graph(
                self._names, self._fns, self._deps, self._priority, self._resources, self._maps
            )
            self._compiled = compiled
        return compiled

    @property
    def tasks(self) -> Mapping[Hashable, Task]:
        """A read-only view of the tasks by name, in the order they were added."""
        return _TaskView(self)

    def sinks(self) -> tuple[Hashable, ...]:
        """The tasks nothing depends on: what a run with ``targets=None`` returns."""
        compiled = self._compile()
        return tuple(compiled.names[i] for i in compiled.sinks)

    def to_dot(self, targets: Iterable[Hashable] | None = None, result: Any = None) -> str:
        """Graphviz DOT text of the graph, or of the part a run of ``targets`` executes.

        With a :class:`dagexec.RunResult`, nodes are coloured by their final state.
        """
        from ._draw import to_dot

        return to_dot(self, targets, result)

    def to_mermaid(self, targets: Iterable[Hashable] | None = None, result: Any = None) -> str:
        """Mermaid flowchart text of the graph (or the part a run of ``targets`` executes)."""
        from ._draw import to_mermaid

        return to_mermaid(self, targets, result)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._index
        except TypeError:  # unhashable: certainly not a task name
            return False

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._names)

    def __getitem__(self, name: Hashable) -> Task:
        i = self._index[name]
        return Task(name, self._fns[i], self._deps[i])

    def __repr__(self) -> str:
        return f"<dagexec.Graph with {len(self._names)} tasks>"


class _TaskView(Mapping[Hashable, Task]):
    """``Graph.tasks``: read-only, live, in insertion order."""

    __slots__ = ("_graph",)

    def __init__(self, graph: Graph) -> None:
        self._graph = graph

    def __getitem__(self, name: Hashable) -> Task:
        return self._graph[name]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._graph)

    def __len__(self) -> int:
        return len(self._graph)


def _check_resources(name: Hashable, resources: object) -> tuple[tuple[str, float], ...]:
    """``resources`` as sorted (name, amount) pairs, amounts positive and finite."""
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"task {describe(name)}: resources must be a mapping of resource name to "
            f"amount, like {{'gpu': 1}}; got {type(resources).__name__} {resources!r}"
        )
    needs = []
    for key, amount in resources.items():
        if not isinstance(key, str):
            raise TypeError(
                f"task {describe(name)}: resource names must be strings, got "
                f"{type(key).__name__} {key!r}"
            )
        if (
            isinstance(amount, bool)
            or not isinstance(amount, (int, float))
            or not 0 < amount < math.inf
        ):
            raise ValueError(
                f"task {describe(name)}: resources[{key!r}] must be a positive finite "
                f"number, got {amount!r}; leave the resource out if the task needs none"
            )
        needs.append((key, amount))
    return tuple(sorted(needs))


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _deps_from_signature(name: Hashable, func: Callable[..., Any]) -> tuple[str, ...]:
    """Positional parameters without defaults name the dependencies, in order."""
    deps: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is not param.empty:
            continue
        if param.kind is param.KEYWORD_ONLY:
            raise TypeError(
                f"task {describe(name)}: keyword-only parameter {param.name!r} has no "
                "default, but dependency results are passed positionally; give it a "
                "default or make it positional"
            )
        deps.append(param.name)
    return tuple(deps)
