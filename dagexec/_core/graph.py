"""The graph a user builds: named tasks, their functions and their dependencies.

A :class:`Graph` is a plain value with no threads. It only records what the user
said; checking that the whole thing makes sense (cycles, missing dependencies) is
:mod:`dagexec._core.validate`'s job and happens once per version of the graph: the
checked form is cached here and dropped by every change, so repeated runs of a
large graph do not pay for validation again, while a graph changed between two
runs is always validated again.

Tasks are stored as columns (names, functions, dependency tuples) rather than one
object per task: a million-task graph then costs a million fewer objects for the
garbage collector to walk on every full collection, which was half of the time
it took to build one. The engine only ever calls ``fns[i](*dep_values)``: a task
with constants (``args``, ``kwargs``, keyword deps) is stored as a small
callable from :mod:`dagexec._core.bind`, and its options as given in a sparse side
table, so tasks without constants cost nothing extra. Each option is checked by
one function in :mod:`dagexec._core.options`.

Dependencies are turned into positions when their task is added, if they were
added before it (the usual order), while those names are still in the
processor's cache: validating a graph built in dependency order then resolves
nothing and walks nothing, since every edge points backwards and no cycle can
form (on a million-task graph, validation fell from 1.3 s to 0.02 s for 0.4 s
more spent in ``add``). Only tasks that named a task not added yet are looked up
again, and checked for cycles, by validation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from .bind import BoundCall, KeywordCall, callable_name, check_call, check_plain_call
from .errors import DuplicateTaskError, MissingDependencyError, describe
from .isolate import IsolatedCall, check_isolate, dep_labels
from .options import (
    NO_KWARGS,
    FrozenKwargs,
    check_args,
    check_deps,
    check_kwargs,
    check_resources,
    deps_from_signature,
    name_of,
    safe_repr,
)
from .policy import Policy, check_policy

if TYPE_CHECKING:
    from .validate import CompiledGraph

__all__ = ["Graph", "Task"]

F = TypeVar("F", bound=Callable[..., Any])


class Task(NamedTuple):
    """One node: ``fn(*results_of(deps), *args, **kwargs)`` produces the value ``name``.

    When ``deps`` was given as a mapping, ``dep_params`` holds the parameter each
    dependency's value is passed to (``dep_params[i]`` receives ``deps[i]``), and
    the call is ``fn(*args, **{dep_params[i]: result_of(deps[i])}, **kwargs)``.
    ``fn``, ``args`` and ``kwargs`` are what you passed: constants stay inspectable.

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
        "_ids",
        "_index",
        "_index_shared",
        "_inferred",
        "_maps",
        "_names",
        "_originals",
        "_plain_calls",
        "_policy",
        "_priority",
        "_resources",
        "_unresolved",
    )

    def __init__(self) -> None:
        # name -> position in the columns below
        self._index: dict[Hashable, int] = _hash_keeping_dict()
        self._names: list[Hashable] = []
        # What the engine calls with the dependency values: the user's function, or
        # a BoundCall/KeywordCall adding the task's constants.
        self._fns: list[Callable[..., Any]] = []
        self._deps: list[tuple[Hashable, ...]] = []
        # The same dependencies as positions, resolved when the task was added, or
        # None when one of them was not added yet; those tasks' positions, in order.
        self._ids: list[tuple[int, ...] | None] = []
        self._unresolved: list[int] = []
        # True while the last compiled graph holds _index as its own: the next add
        # copies it first (one C-level copy), so a graph built once and run does
        # not keep two million-entry dictionaries.
        self._index_shared = False
        # Per plain function (by id: the graph keeps every added function alive, so
        # no id is reused while the graph lives), a bit per dependency count its
        # signature was checked for: adding one function a million times binds its
        # signature once per count, and costs a dictionary look-up after that.
        self._plain_calls: dict[int, int] = {}
        # Sparse: only tasks with constants or keyword deps, by position.
        self._originals: dict[int, Task] = {}
        # Sparse: tasks whose deps @g.task read from parameter names -> function name.
        self._inferred: dict[int, str] = {}
        # Sparse, by position: only tasks given a priority or resources; g.map tasks.
        self._priority: dict[int, int] = {}
        self._resources: dict[int, tuple[tuple[str, float], ...]] = {}
        self._maps: set[int] = set()
        self._policy: dict[int, Policy] = {}  # sparse: tasks given retries, timeout, run_if
        self._compiled: CompiledGraph | None = None

    def add(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        *,
        deps: Iterable[Hashable] | Mapping[str, Hashable] = (),
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
        retries: int = 0,
        retry_delay: float = 0.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        timeout: float | None = None,
        run_if: str = "all_success",
        isolate: str | None = None,
    ) -> Hashable:
        """Add task ``name`` computing ``fn(*dep_values, *args, **kwargs)``; return ``name``.

        ``priority``: among tasks ready at the same time, higher runs first.
        ``resources``: what the task holds from dispatch until it ends, e.g.
        ``{"gpu": 1}``; the run's capacities (``resources=`` of the executor or the
        run) bound the sum over tasks out at once.
        ``retries``, ``retry_delay``, ``retry_on``, ``timeout``, ``run_if``: see
        README "Retries, timeouts and cleanup tasks".
        ``isolate="process"``: run ``fn`` in a child process the worker thread
        waits for (docs/processes.md); ``fn`` must be found by module and name.

        ``deps`` is an ordered collection of task names whose values are passed
        positionally, or a mapping ``{parameter: task name}`` passing them by
        keyword. The call is checked against ``fn``'s signature now (when it can be
        read), so a task that could never be called fails here, not mid-run.

        Raises:
            DuplicateTaskError: ``name`` is already a task of this graph.
            TypeError: ``name`` is unhashable, ``fn`` is not callable or is an async
                function, ``deps``/``args``/``kwargs`` have the wrong type, or ``fn``
                cannot accept the dependency values and constants.
        """
        if (
            type(deps) is tuple
            and kwargs is None
            and type(args) is tuple
            and not args
            and not (priority or resources or retries or retry_delay)
            and timeout is None
            and retry_on is Exception
            and run_if == "all_success"
            and isolate is None
        ):
            ids: tuple[int, ...] | None
            # The common case, fn(*deps) with every dependency added already and
            # fn's signature checked for this many of them, stored without the
            # general path's steps (~0.1 us of ~1.4 per add on a million-task
            # build). Anything else, including every error, takes the general
            # path below, which has stored nothing yet.
            index = self._index
            try:
                known = name in index
                n_deps = len(deps)
                if n_deps == 1:
                    ids = (index[deps[0]],)
                elif n_deps == 2:
                    ids = (index[deps[0]], index[deps[1]])
                else:
                    ids = tuple(map(index.__getitem__, deps))
            except (KeyError, TypeError):
                known = True
            if (
                not known
                and self._plain_calls.get(id(fn), 0) >> n_deps & 1
                and not self._index_shared
            ):
                names = self._names
                index[name] = len(names)
                names.append(name)
                self._fns.append(fn)
                self._deps.append(deps)
                self._ids.append(ids)
                self._compiled = None
                return name
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
                f"task {describe(name)}: fn must be callable, got {type(fn).__name__} "
                f"{safe_repr(fn)}"
            )
        kw_deps: dict[str, Hashable] | None = None
        if type(deps) is tuple:
            dep_names: tuple[Hashable, ...] = deps
        else:
            dep_names, kw_deps = check_deps(name, deps)
        try:
            # The dependencies' positions, when all of them were added before this
            # task (the usual order): looked up now, while they are fresh in the
            # cache, validate has nothing left to resolve and knows that no cycle
            # passes through this task. The look-ups also hash every name.
            if len(dep_names) == 1:  # the commonest shape, without a map object
                ids = (index[dep_names[0]],)
            else:
                ids = tuple(map(index.__getitem__, dep_names))
        except KeyError:  # one is added later, or never: validate resolves them
            _check_hashable(name, dep_names)  # the look-up stopped at the first miss
            ids = None
        except TypeError:
            _check_hashable(name, dep_names)
            raise
        if type(args) is not tuple:
            args = check_args(name, args)
        if kwargs is not None:
            kwargs = check_kwargs(name, kwargs, kw_deps)
        call = fn
        learned = 0
        original: Task | None = None
        if kw_deps is None and not args and not kwargs:  # the common case: fn(*deps)
            counts = self._plain_calls.get(id(fn), 0)
            if not counts >> len(dep_names) & 1:
                check_plain_call(name, fn, dep_names)
                learned = counts | 1 << len(dep_names)
        else:
            kwargs = dict(kwargs or ())
            kw_deps = kw_deps or {}
            check_call(name, fn, () if kw_deps else dep_names, kw_deps, args, kwargs)
            dep_params = tuple(kw_deps)
            if dep_params:
                call = KeywordCall(fn, args, kwargs, dep_params)
            else:
                call = BoundCall(fn, args, kwargs)
            original = Task(name, fn, dep_names, args, FrozenKwargs(kwargs), dep_params)
        options = None
        if priority or resources:  # plain tasks store nothing here
            options = _check_options(name, priority, resources)
        policy = None
        if (
            retries
            or retry_delay
            or timeout is not None
            or run_if != "all_success"
            or retry_on is not Exception
        ):
            policy = check_policy(name, retries, retry_delay, retry_on, timeout, run_if)
        if isolate is not None:
            policy = (policy or Policy())._replace(isolate=check_isolate(name, isolate, fn))
            call = IsolatedCall(
                call,
                name,
                policy.isolate or "",
                policy.timeout,
                policy.cleanup,
                dep_labels(fn, dep_names, kw_deps),
            )
            if original is None:  # graph[name].fn (and checkpoint identity): the user's fn
                original = Task(name, fn, dep_names)
        # Every check passed: from here on the task is stored, in every column and
        # side table at once (a failed add must leave nothing for the next task
        # to inherit at this position).
        position = len(self._names)
        if original is not None:
            self._originals[position] = original
        if options is not None:
            self._store_options(position, *options)
        if policy is not None:
            self._policy[position] = policy
        if self._index_shared:  # the last compiled graph reads it: copy on write
            self._index = index = dict(index)
            self._index_shared = False
        index[name] = position
        self._names.append(name)
        self._fns.append(call)
        self._deps.append(dep_names)
        self._ids.append(ids)
        if ids is None:
            self._unresolved.append(position)
        if learned:  # only now: fn is kept alive by the graph, so its id stays its own
            self._plain_calls[id(fn)] = learned
        self._compiled = None
        return name

    def _set_options(self, i: int, name: Hashable, priority: object, resources: object) -> None:
        """Check and store task ``i``'s priority and resources (also used by dagexec.dask)."""
        self._store_options(i, *_check_options(name, priority, resources))

    def _store_options(self, i: int, priority: int, needs: tuple[tuple[str, float], ...]) -> None:
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
        retries: int = 0,
        retry_delay: float = 0.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        timeout: float | None = None,
        run_if: str = "all_success",
        isolate: str | None = None,
    ) -> Hashable:
        """Add ``name``: ``fn(item, *[result of d for d in deps])`` for each item of ``over``.

        When ``over`` ends, its value is iterated once and each item becomes a
        task of its own, named ``(name, i)`` in status, trace and callbacks, with
        this task's ``priority`` and ``resources``. A task depending on ``name``
        receives the list of results, in order. When ``over`` is itself a map,
        ``(name, i)`` runs as soon as ``(over, i)`` is done, without waiting for
        the whole of ``over``.

        Raises:
            The errors of :meth:`add`; TypeError if ``deps`` is a mapping (unlike
            ``add``, a map passes its deps by position only).
        """
        if type(deps) is not tuple:
            if isinstance(deps, Mapping):
                # Iterating it would silently pass its keys' tasks, by position.
                raise TypeError(
                    f"map {describe(name)}: deps must be a collection of task names, "
                    f"passed after the item by position; got a mapping "
                    f"{safe_repr(deps)}, which map does not take by keyword: write "
                    f"deps=[{', '.join(safe_repr(v) for v in deps.values())}] and take "
                    "them as fn's parameters after the item"
                )
            if isinstance(deps, (str, bytes, bytearray)) or not isinstance(deps, Iterable):
                raise TypeError(
                    f"map {describe(name)}: deps must be a collection of task names, got "
                    f"{type(deps).__name__} {safe_repr(deps)}; write deps=[...]"
                )
            deps = tuple(deps)
        if run_if != "all_success":
            raise ValueError(
                f"map {describe(name)}: run_if={run_if!r} is not supported on g.map (its "
                "items need the value of over); add a cleanup task with g.add(..., "
                "run_if='all_done') that depends on the map instead"
            )
        position = len(self._names)
        self.add(
            name,
            fn,
            deps=(over, *deps),
            priority=priority,
            resources=resources,
            retries=retries,
            retry_delay=retry_delay,
            retry_on=retry_on,
            timeout=timeout,
            isolate=isolate,
        )
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
        deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
        retries: int = 0,
        retry_delay: float = 0.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        timeout: float | None = None,
        run_if: str = "all_success",
        isolate: str | None = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: Hashable | None = None,
        deps: Iterable[Hashable] | Mapping[str, Hashable] | None = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = 0,
        resources: Mapping[str, float] | None = None,
        retries: int = 0,
        retry_delay: float = 0.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        timeout: float | None = None,
        run_if: str = "all_success",
        isolate: str | None = None,
    ) -> Any:
        """Decorator form of :meth:`add`; the function is returned unchanged.

        Without ``name`` the task is named after the function. Without ``deps``
        its dependencies are its positional parameters that have no default and
        that ``args`` and ``kwargs`` do not fill (``args`` fill the last of them,
        since dependency values come first).
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
            task_deps: Iterable[Hashable] | Mapping[str, Hashable]
            if deps is None:
                task_deps = deps_from_signature(task_name, func, task_args, kwargs)
                if task_deps:
                    self._inferred[len(self._names)] = callable_name(func)
            else:
                task_deps = deps
            try:
                self.add(
                    task_name,
                    func,
                    deps=task_deps,
                    args=task_args,
                    kwargs=kwargs,
                    priority=priority,
                    resources=resources,
                    retries=retries,
                    retry_delay=retry_delay,
                    retry_on=retry_on,
                    timeout=timeout,
                    run_if=run_if,
                    isolate=isolate,
                )
            except BaseException:
                self._inferred.pop(len(self._names), None)
                raise
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
            from .validate import compile_graph

            try:
                compiled = compile_graph(
                    self._names,
                    self._index,
                    self._fns,
                    self._ids,
                    self._unresolved,
                    self._deps,
                    self._priority,
                    self._resources,
                    self._maps,
                    self._policy,
                )
            except MissingDependencyError as exc:
                raise self._explain(exc) from None
            if self._maps:
                self._check_item_names()
            self._index_shared = True
            self._compiled = compiled
        return compiled

    def _check_item_names(self) -> None:
        """Reject a task named like an item of a map: ``(m, i)`` names item ``i``
        of map ``m`` at run time, so a task of that name would be overwritten in
        ``status``, the trace and the callbacks (and ``(m, 0)`` as a dependency would
        mean either). Checked here, once per change of a graph that has a map, since
        either may be added first."""
        names = self._names
        maps = {names[i] for i in self._maps}
        for name in names:
            if type(name) is not tuple or len(name) != 2:
                continue
            owner, i = name
            try:
                clash = owner in maps and isinstance(i, (int, float)) and i >= 0 and i == int(i)
            except Exception:  # a hostile name cannot be an item's name: no clash
                clash = False
            if clash:
                raise DuplicateTaskError(
                    name,
                    f"task {describe(name)} has the name of item {describe(i)} of map "
                    f"{describe(owner)} (a map's items are named (map, index) at run "
                    "time); rename the task or the map",
                )

    def _explain(self, exc: MissingDependencyError) -> MissingDependencyError:
        """The same error, with "did you mean" and where @g.task found the names."""
        inferred = self._inferred.get(self._index[exc.task])
        return MissingDependencyError(
            exc.task, exc.missing, known=self._names, inferred_from=inferred
        )

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
        from .._observation.draw import to_dot

        return to_dot(self, targets, result)

    def to_mermaid(self, targets: Iterable[Hashable] | None = None, result: Any = None) -> str:
        """Mermaid flowchart text of the graph (or the part a run of ``targets`` executes)."""
        from .._observation.draw import to_mermaid

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
        task = self._originals.get(i)
        return Task(name, self._fns[i], self._deps[i]) if task is None else task

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


def _hash_keeping_dict() -> dict[Hashable, int]:
    """An empty dict whose table keeps each key's hash beside it.

    CPython (3.11 and later) keeps a dict whose keys have all been strings in a
    table without hashes, so a look-up that meets another name on its way reads
    that string object just for its hash: with a million names, a cache miss per
    collision, and ``add`` probes once for every new name. A key of another type,
    once inserted, turns the table into one that keeps hashes for good, even
    after it is removed: a million-task build then takes 0.13 s less, for 11 MB
    more. Elsewhere this is just an empty dict.
    """
    marker = object()
    index: dict[Hashable, int] = {marker: 0}
    del index[marker]
    return index


def _check_options(
    name: Hashable, priority: object, resources: object
) -> tuple[int, tuple[tuple[str, float], ...]]:
    """``priority`` and ``resources`` as stored: an int and sorted (name, amount) pairs."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(
            f"task {describe(name)}: priority must be an int, got "
            f"{type(priority).__name__} {safe_repr(priority)}"
        )
    return priority, check_resources(name, resources) if resources else ()


def _check_hashable(task: Hashable, dep_names: tuple[Hashable, ...]) -> None:
    """Raise the add-time ``TypeError`` naming the first unhashable dependency name."""
    try:
        hash(dep_names)  # one C call checks every dependency name
    except TypeError:
        bad = next((d for d in dep_names if not _hashable(d)), None)
        if bad is None:  # a name whose hash fails only sometimes: its own error
            raise
        raise TypeError(
            f"task {describe(task)}: dependency names must be hashable, got "
            f"{type(bad).__name__} {safe_repr(bad)}"
        ) from None


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
