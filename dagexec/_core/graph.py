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
callable from :mod:`dagexec._core.bind`, and its options as one checked record
(:class:`~dagexec._core.task_options.TaskRecord`) in a sparse side table, so
tasks without constants or options cost nothing extra.

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
from typing import TYPE_CHECKING, Any, Unpack

from .bind import check_plain_call
from .closures import Snapshot, warn_loop_closures, watch
from .decorators import graph_map, graph_task
from .errors import MissingDependencyError
from .item_names import check_item_names
from .new_task import (
    NO_OVER,
    Task,
    bound_call,
    check_new,
    check_over,
    dep_ids,
    placed_call,
)
from .options import check_args, check_deps, check_kwargs
from .plan import Plan, plan_run
from .task_options import TaskOptionArgs, TaskRecord, check_task_options, shared

if TYPE_CHECKING:
    from .validate import CompiledGraph

__all__ = ["Graph", "Task"]


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
        "_last_options",
        "_last_watch",
        "_maps",
        "_names",
        "_options",
        "_originals",
        "_plain_calls",
        "_unresolved",
        "_watched",
        "_watched_calls",
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
        self._maps: set[int] = set()  # g.map tasks, by position
        # Sparse, by position: every task given an option, its checked options. A
        # task given the same options as the task given options before it shares
        # that task's record (a million adds with one option keep one record).
        self._options: dict[int, TaskRecord] = {}
        self._last_options: TaskRecord | None = None
        # Sparse: tasks whose function reads a closure cell or a module global,
        # with what it read when added (see closures.py: the loop-closure trap).
        self._watched: dict[int, Snapshot] = {}
        # _plain_calls for watched functions, and the last snapshot taken (the next
        # task reading the same values shares it: a million adds of one function
        # reading a data global keep one snapshot, not a million).
        self._watched_calls: dict[int, int] = {}
        self._last_watch: Snapshot | None = None
        self._compiled: CompiledGraph | None = None

    def add(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        *,
        deps: Iterable[Hashable] | Mapping[str, Hashable] = (),
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[TaskOptionArgs],
    ) -> Hashable:
        """Add task ``name`` computing ``fn(*dep_values, *args, **kwargs)``; return ``name``.

        ``deps`` is an ordered collection of task names whose values are passed
        positionally, or a mapping ``{parameter: task name}`` passing them by
        keyword. The call is checked against ``fn``'s signature now (when it can be
        read), so a task that could never be called fails here, not mid-run.

        Options (see :class:`dagexec._core.task_options.TaskOptions`):
        ``priority``: among tasks ready at the same time, higher runs first.
        ``resources``: what the task holds from dispatch until it ends, e.g.
        ``{"gpu": 1}``; the run's capacities (``resources=`` of the executor or the
        run) bound the sum over tasks out at once.
        ``retries``, ``retry_delay``, ``retry_on``, ``timeout``, ``run_if``: see
        docs/graphs.md, "Retries, timeouts and cleanup tasks".
        ``checkpoint=False``: a checkpointed run never stores this task's value and
        runs it every time (a task that lists today's files); the tasks downstream
        of it load only if its value is the same as when they were stored.

        Raises:
            DuplicateTaskError: ``name`` is already a task of this graph.
            TypeError: ``name`` is unhashable, ``fn`` is not callable or is an async
                function, a parameter or option has the wrong type or is unknown,
                or ``fn`` cannot accept the dependency values and constants.
            ValueError: an option has the right type but a value it cannot take
                (``retries=-1``, ``timeout=0``, ``run_if="sometimes"``).
        """
        if (
            not options
            and kwargs is None
            and type(deps) is tuple
            and type(args) is tuple
            and not args
        ):
            ids: tuple[int, ...] | None
            # The common case, fn(*deps) with every dependency added already and
            # fn's signature checked for this many of them, stored without the
            # general path's steps (~0.1 us of ~1.4 per add on a million-task
            # build). Anything else, including every error, takes the general
            # path below, which has stored nothing yet. Keyed on "no option
            # given", so an option added to TaskOptions cannot be missed here.
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
            if not known and not self._index_shared:
                if self._plain_calls.get(id(fn), 0) >> n_deps & 1:
                    names = self._names
                    index[name] = len(names)
                    names.append(name)
                    self._fns.append(fn)
                    self._deps.append(deps)
                    self._ids.append(ids)
                    self._compiled = None
                    return name
                if self._watched_calls.get(id(fn), 0) >> n_deps & 1:
                    # The same, for a function that reads a cell or a data global:
                    # what it reads now is recorded for the loop-closure check.
                    snapshot = watch(fn, self._last_watch)
                    if snapshot is not None:
                        names = self._names
                        self._watched[len(names)] = self._last_watch = snapshot
                        index[name] = len(names)
                        names.append(name)
                        self._fns.append(fn)
                        self._deps.append(deps)
                        self._ids.append(ids)
                        self._compiled = None
                        return name
        return self._add(name, fn, deps, args, kwargs, options, NO_OVER, "add")

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
        """:meth:`add`'s general path; a map passes the name of its ``over`` task.

        Checks everything first, then stores the task in every column and side
        table at once: a failed add leaves nothing behind.
        """
        is_map = over is not NO_OVER
        index = self._index
        check_new(index, name, fn)
        kw_deps: dict[str, Hashable] | None = None
        if type(deps) is tuple:
            dep_names: tuple[Hashable, ...] = deps
        else:
            dep_names, kw_deps = check_deps(name, deps)
        if is_map:
            check_over(name, over)
            dep_names = (over, *dep_names)
        ids = dep_ids(index, name, dep_names)
        constants = args if type(args) is tuple else check_args(name, args)
        if kwargs is not None:
            kwargs = check_kwargs(name, kwargs, kw_deps)
        call, original, checked, learned = self._checked_call(
            name, fn, dep_names, kw_deps, constants, kwargs, is_map, options, caller
        )
        watched = watch(fn, self._last_watch)
        # Every check passed: from here on the task is stored, in every column and
        # side table at once (a failed add must leave nothing for the next task
        # to inherit at this position).
        position = len(self._names)
        if original is not None:
            self._originals[position] = original
        if checked is not None:
            checked = shared(checked, self._last_options)
            self._options[position] = self._last_options = checked
        if watched is not None:
            self._watched[position] = self._last_watch = watched
        if is_map:
            self._maps.add(position)
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
        # Only now: fn is kept alive by the graph, so its id stays its own. A
        # function watched for the loop-closure trap takes the second fast path,
        # which records what it reads.
        if learned:
            calls = self._plain_calls if watched is None else self._watched_calls
            calls[id(fn)] = learned
        self._compiled = None
        return name

    def _checked_call(
        self,
        name: Hashable,
        fn: Callable[..., Any],
        dep_names: tuple[Hashable, ...],
        kw_deps: dict[str, Hashable] | None,
        constants: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        is_map: bool,
        options: Mapping[str, object],
        caller: str,
    ) -> tuple[Callable[..., Any], Task | None, TaskRecord | None, int]:
        """:meth:`_add`'s checks of what the task calls and of its options, storing
        nothing: the callable to store, the task as written when that is not
        ``fn`` itself, the checked options (None: none), and the signature bits
        learned for ``fn`` (0: nothing new). The common case, ``fn(*deps)``, is
        ``fn`` itself, its signature checked once per number of dependencies."""
        call = fn
        learned = 0
        original: Task | None = None
        if kw_deps is None and not constants and not kwargs:  # the common case: fn(*deps)
            counts = self._plain_calls.get(id(fn), 0) | self._watched_calls.get(id(fn), 0)
            if not counts >> len(dep_names) & 1:
                check_plain_call(name, fn, dep_names)
                learned = counts | 1 << len(dep_names)
        else:
            call, original = bound_call(name, fn, dep_names, kw_deps, constants, kwargs, is_map)
        checked = check_task_options(name, options, caller) if options else None
        if checked is not None and checked.policy is not None:
            checked, call, original = placed_call(
                name, fn, call, original, checked, dep_names, kw_deps
            )
        return call, original, checked, learned

    def _inferred_from(self, name: Hashable, function: str) -> None:
        """Note that task ``name`` took its deps from ``function``'s parameters.

        Called by the decorators once the task is stored; a missing dependency's
        message then says where the name came from.
        """
        self._inferred[self._index[name]] = function

    def _uncheckpointed(self) -> set[int]:
        """The positions of the tasks given ``checkpoint=False`` (checkpoint identities)."""
        return {i for i, record in self._options.items() if not record.checkpoint}

    # g.map(...) and @g.task: the forms that read the function first (decorators.py).
    map = graph_map
    task = graph_task

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
            from .validate import compile_graph, explain_missing

            try:
                compiled = compile_graph(
                    self._names,
                    self._index,
                    self._fns,
                    self._ids,
                    self._unresolved,
                    self._deps,
                    self._options,
                    self._maps,
                )
            except MissingDependencyError as exc:
                raise explain_missing(
                    exc, self._names, self._index, self._maps, self._inferred
                ) from None
            if self._maps:
                # (m, i) names item i of map m at run time: no task may be named so.
                check_item_names(self._names, {self._names[i] for i in self._maps})
            if self._watched:
                warn_loop_closures(self._names, self._watched)
            self._index_shared = True
            self._compiled = compiled
        return compiled

    def _plan(self, targets: Iterable[Hashable] | None) -> Plan:
        """The plan for running ``targets`` (all sinks when None): ``plan_run``'s.

        A warm graph's whole run reads its plan straight from the compiled
        graph's cache, without the two calls (``_compile``, ``plan_run``): part
        of what a small run costs (docs/performance.md). The same object either
        way (tests/test_plan_cache.py).

        Raises:
            as :meth:`validate`, and ``plan_run``.
        """
        compiled = self._compiled
        if targets is None and compiled is not None:
            plan = compiled.plans.get(None)
            if type(plan) is Plan:
                return plan
        return plan_run(self._compile(), targets)

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
