"""Dask graphs to dagexec graphs and back. Pure: no threads, no run state.

Kept apart from :mod:`dagexec.dask` (the public entry point, which checks that
dask is installed before importing this) so that the conversion can be read,
and tested, without the executor and the callback bridge around it.

How a dask graph becomes a dagexec graph: every dask node is converted to the
task-spec form (``dask._task_spec.convert_legacy_graph``), only the ancestors of
the requested keys are kept, and each node becomes one dagexec task whose
dependencies are the node's dependency keys (a key that is neither in the
graph nor known raises a ``MissingDependencyError`` in dask's words). Data
nodes (literals, and values passed in ``cache``) are not tasks at all: like
dask's own local scheduler, they are known before the run starts and are baked
into the tasks that use them. The common node, a ``Task`` whose arguments are
references and literals, is called directly with its arguments in place, so it
costs no more than dask's own ``Task.__call__``; anything else is called the
way dask calls it, with a dict of its dependencies' values.

The other direction (dagexec graphs on a cluster) is
:mod:`dagexec._integrations.dask_cluster`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef

from .._core.errors import MissingDependencyError, describe
from .._core.graph import Graph

__all__ = ["Annotations", "Built", "assemble", "build", "flatten_keys", "nest"]

# --------------------------------------------------------------------------------------
# dask graph -> dagexec graph
# --------------------------------------------------------------------------------------


def flatten_keys(keys: Any) -> list[Hashable]:
    """Every key named in ``keys``; only lists nest (a tuple is a key, as in dask)."""
    if not isinstance(keys, list):
        return [keys]
    flat: list[Hashable] = []
    stack: list[Any] = [iter(keys)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def nest(keys: Any, values: Mapping[Hashable, Any]) -> Any:
    """Pick ``keys`` out of ``values`` with dask's shape: lists become tuples."""
    if isinstance(keys, list):
        return tuple([nest(k, values) for k in keys])
    return values[keys]


class Built:
    """A dask graph in dagexec form, plus what the run needs to answer dask.

    :func:`build` finds the tasks (``fns``, ``deps``); :func:`assemble` then adds
    them to ``graph`` in the order they should run, with their annotations.
    """

    __slots__ = ("consts", "deps", "fns", "graph", "targets")

    def __init__(self) -> None:
        self.graph = Graph()
        self.consts: dict[Hashable, Any] = {}  # data nodes and cache values used
        self.deps: dict[Hashable, tuple[Hashable, ...]] = {}  # task key -> task deps
        self.fns: dict[Hashable, Callable[..., Any]] = {}  # task key -> what computes it
        self.targets: list[Hashable] = []  # requested keys that are tasks


class Annotations:
    """What ``dask.annotate`` asked of each task, among what dagexec can honour."""

    __slots__ = ("priority", "resources", "retries")

    def __init__(self) -> None:
        self.priority: dict[Hashable, int] = {}
        self.resources: dict[Hashable, Mapping[str, float]] = {}
        self.retries: dict[Hashable, int] = {}

    def __bool__(self) -> bool:
        return bool(self.priority or self.resources or self.retries)


def assemble(
    built: Built,
    ranks: Mapping[Hashable, int],
    annotations: Annotations,
    wrap: Callable[[Hashable, Callable[..., Any]], Callable[..., Any]] | None = None,
) -> None:
    """Add the built tasks to ``built.graph`` in ``dask.order``'s order (``ranks``).

    Why the order of insertion: dagexec's ready set is a stack (the task that
    became ready last goes first), roots are taken in insertion order, and the
    dependents one task makes ready are taken in insertion order too. Adding
    tasks in rank order therefore gives exactly ``dask.local``'s policy, most
    recently readied first with the rank breaking ties, at no cost per task (no
    priority heap). A rank is a topological order, so every task still comes
    after its dependencies. ``wrap(key, fn)``, if given, replaces each function
    (the callback bridge's reporting wrapper). Annotated priorities, resources
    and retries become the task's own options.
    """
    keys = list(built.deps)
    if ranks:
        last = len(ranks)
        keys.sort(key=lambda k: ranks.get(k, last))
    add, fns, deps = built.graph.add, built.fns, built.deps
    priority, resources, retries = annotations.priority, annotations.resources, annotations.retries
    for key in keys:
        fn = fns[key] if wrap is None else wrap(key, fns[key])
        if annotations and (key in priority or key in resources or key in retries):
            add(
                key,
                fn,
                deps=deps[key],
                priority=priority.get(key, 0),
                resources=resources.get(key) or None,
                retries=retries.get(key, 0),
            )
        else:
            add(key, fn, deps=deps[key])


def build(
    nodes: Mapping[Hashable, GraphNode], keys: list[Hashable], known: Mapping[Hashable, Any]
) -> Built:
    """Turn the ancestors of ``keys`` into dagexec tasks, in dependency order.

    An iterative depth-first walk (a 10,000-long chain must not hit the recursion
    limit) that adds each task after its dependencies, so validating the result
    needs no cycle search. A cycle is met as a dependency still being walked, and
    raised as dask's own schedulers raise it (a ``RuntimeError``) once the walk is
    done, so that a missing dependency is reported first, as dask reports it.
    """
    walk = _Walk(nodes, known)
    for root in dict.fromkeys(keys):
        if not walk.is_built(root):
            walk.from_root(root)
    if walk.cycle is not None:
        raise walk.cycle
    built = walk.built
    built.targets = [k for k in dict.fromkeys(keys) if k in built.deps]
    return built


class _Walk:
    """The state of :func:`build`'s depth-first walk, shared by its roots: what is
    built so far, the path being walked (a stack, not recursion, so a long chain
    cannot hit the recursion limit), and the first cycle met."""

    __slots__ = ("built", "cycle", "known", "nodes", "stack", "visiting")

    def __init__(self, nodes: Mapping[Hashable, GraphNode], known: Mapping[Hashable, Any]) -> None:
        self.nodes, self.known = nodes, known
        self.built = Built()
        self.cycle: RuntimeError | None = None
        self.visiting: set[Hashable] = set()
        self.stack: list[tuple[Hashable, Any, list[Hashable]]] = []

    def is_built(self, key: Hashable) -> bool:
        """Whether ``key`` needs no walk: already a task or a value, or a value known
        before the run (recorded as one here)."""
        built = self.built
        return (
            key in built.deps
            or key in built.consts
            or _is_const(key, self.nodes, self.known, built.consts)
        )

    def from_root(self, root: Hashable) -> None:
        """Add ``root`` and its unbuilt ancestors, each after its dependencies, so the
        result needs no cycle search."""
        self._enter(root)
        stack = self.stack
        while stack:
            key = stack[-1][0]
            if not self._descend():
                stack.pop()
                self.visiting.discard(key)
                fn, fn_deps = _compile(self.nodes[key], self.built.consts)
                self.built.deps[key] = fn_deps
                self.built.fns[key] = fn

    def _enter(self, key: Hashable) -> None:
        deps = _node_deps(self.nodes[key])
        self.stack.append((key, iter(deps), deps))
        self.visiting.add(key)

    def _descend(self) -> bool:
        """Enter the next unbuilt dependency of the key on top; False once it has none.

        A dependency still being walked is a cycle, kept (the first only) and raised
        once the walk is done, so that a missing dependency is reported first, as
        dask reports it."""
        key, pending, deps = self.stack[-1]
        for dep in pending:
            if dep in self.visiting:
                if self.cycle is None:
                    self.cycle = _cycle([k for k, _, _ in self.stack], dep)
                continue
            if self.is_built(dep):
                continue
            if dep not in self.nodes:
                raise _missing(key, deps, self.nodes, self.known)
            self._enter(dep)
            return True
        return False


def _cycle(path: list[Hashable], back: Hashable) -> RuntimeError:
    """dask's own error for a cycle (``dask.order``'s words): the keys from ``back``
    along the walk's ``path``, and ``back`` again."""
    loop = [*path[path.index(back) :], back]
    return RuntimeError(
        "Cycle detected between the following keys:\n"
        + "\n".join(f"  -> {describe(k)}" for k in loop)
    )


def _missing(
    key: Hashable,
    deps: list[Hashable],
    nodes: Mapping[Hashable, GraphNode],
    known: Mapping[Hashable, Any],
) -> MissingDependencyError:
    """The error for ``key``'s dependencies that are neither tasks nor known values.

    Worded as dask words it ("Missing dependency ..."), which dask users (and
    dask's own tests) look for, and still a :class:`MissingDependencyError`.
    """
    missing = [d for d in deps if d not in nodes and d not in known]
    error = MissingDependencyError(key, missing)
    names = ", ".join(describe(m) for m in missing)
    error.args = (
        f"Missing dependency {names} for dependents {describe(key)}: "
        f"{'it is' if len(missing) == 1 else 'they are'} neither in the dask graph "
        "nor in cache; add the missing key to the graph or pass its value in cache=",
    )
    return error


def _is_const(
    key: Hashable,
    nodes: Mapping[Hashable, GraphNode],
    known: Mapping[Hashable, Any],
    consts: dict[Hashable, Any],
) -> bool:
    """Record ``key``'s value if it is known before the run (cache or data node)."""
    if key in known:
        consts[key] = known[key]
        return True
    node = nodes.get(key)
    if isinstance(node, DataNode):
        consts[key] = node.value
        return True
    return False


def _node_deps(node: GraphNode) -> list[Hashable]:
    # Sorted when possible so that the run order does not depend on set order.
    deps = list(node.dependencies)
    try:
        deps.sort()
    except TypeError:  # keys of mixed types (str and tuple) do not compare
        deps.sort(key=lambda k: (type(k).__name__, str(k)))
    return deps


def _compile(
    node: GraphNode, consts: Mapping[Hashable, Any]
) -> tuple[Callable[..., Any], tuple[Hashable, ...]]:
    """The dagexec function and dependency keys computing ``node``.

    Values known before the run are baked into the function, so they cost no
    task and no argument passing.
    """
    if type(node) is Task:
        fast = _compile_task(node, consts)
        if fast is not None:
            return fast
    elif isinstance(node, Alias):
        target = node.target
        if target in consts:
            return _Const(consts[target]), ()
        return _identity, (target,)
    deps = tuple(d for d in _node_deps(node) if d not in consts)
    known = {d: consts[d] for d in node.dependencies if d in consts}
    return _CallNode(node, deps, known), deps


def _compile_task(
    node: Task, consts: Mapping[Hashable, Any]
) -> tuple[Callable[..., Any], tuple[Hashable, ...]] | None:
    """Call ``node.func`` directly when its arguments are references and literals.

    Returns None for a task with nested tasks or references among its keyword
    arguments, which :class:`_CallNode` evaluates the way dask does.
    """
    kwargs = node.kwargs
    for value in kwargs.values():
        if isinstance(value, (GraphNode, TaskRef)):
            return None
    template: list[Any] = []
    slots: list[int] = []
    deps: list[Hashable] = []
    for pos, arg in enumerate(node.args):
        if isinstance(arg, TaskRef):
            if arg.key in consts:
                template.append(consts[arg.key])
            else:
                template.append(None)
                slots.append(pos)
                deps.append(arg.key)
        elif isinstance(arg, DataNode):
            template.append(arg.value)
        elif isinstance(arg, GraphNode):
            return None
        else:
            template.append(arg)
    if len(slots) == len(template) and not kwargs:
        return node.func, tuple(deps)  # fn(*deps): nothing to adapt
    return _Apply(node.func, template, tuple(slots), kwargs), tuple(deps)


def _identity(x: Any) -> Any:
    return x


class _Const:
    """A task whose value is known: an alias of a data node."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


class _Apply:
    """``func(*args, **kwargs)`` with the dependency values put into their argument slots."""

    __slots__ = ("func", "kwargs", "slots", "template")

    def __init__(
        self,
        func: Callable[..., Any],
        template: list[Any],
        slots: tuple[int, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.func = func
        self.template = template
        self.slots = slots
        self.kwargs = kwargs

    def __call__(self, *values: Any) -> Any:
        args = self.template.copy()
        for pos, value in zip(self.slots, values, strict=True):
            args[pos] = value
        return self.func(*args, **self.kwargs)


class _CallNode:
    """Any other node, called as dask calls it: with a dict of its dependencies' values."""

    __slots__ = ("deps", "known", "node")

    def __init__(
        self, node: GraphNode, deps: tuple[Hashable, ...], known: dict[Hashable, Any]
    ) -> None:
        self.node = node
        self.deps = deps
        self.known = known

    def __call__(self, *values: Any) -> Any:
        data = dict(zip(self.deps, values, strict=True))
        if self.known:
            data.update(self.known)
        return self.node(data)
