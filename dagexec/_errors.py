"""The exceptions dagexec raises for bad graphs and bad targets.

Every error derives from :class:`DagexecError` and also from the builtin a caller
would naturally catch (``ValueError`` for a malformed graph, ``KeyError`` for an
unknown target), the way :mod:`graphlib` makes ``CycleError`` a ``ValueError``.
Each keeps its data as attributes *and* names the offender in its message, so a
program can react to it and a person can fix it from the message alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

__all__ = [
    "CycleError",
    "DagexecError",
    "DuplicateTaskError",
    "MissingDependencyError",
    "UnknownTargetError",
    "describe",
]


def describe(name: Hashable) -> str:
    """Render a task name for a message: ``repr`` keeps ``'1'`` apart from ``1``."""
    return repr(name)


def _path_item(name: Hashable) -> str:
    # A cycle reads best as ``a -> b -> a``; only non-strings need repr to be unambiguous.
    return name if isinstance(name, str) else repr(name)


class DagexecError(Exception):
    """Base class of every error dagexec raises about a graph or its use."""


class CycleError(DagexecError, ValueError):
    """The graph has a cycle, so no task on it could ever become ready.

    ``cycle`` is the path in data-flow order (each task feeds the next), with the
    first name repeated at the end so the loop is explicit, as in :mod:`graphlib`.
    """

    def __init__(self, cycle: Sequence[Hashable]) -> None:
        self.cycle: tuple[Hashable, ...] = tuple(cycle)
        path = " -> ".join(_path_item(n) for n in self.cycle)
        super().__init__(
            f"cycle: {path} (each task depends on the one before it); "
            "remove one of these dependencies"
        )


class MissingDependencyError(DagexecError, ValueError):
    """A task depends on names that are not in the graph."""

    def __init__(self, task: Hashable, missing: Sequence[Hashable]) -> None:
        self.task = task
        self.missing: tuple[Hashable, ...] = tuple(missing)
        names = ", ".join(describe(m) for m in self.missing)
        which = "which is" if len(self.missing) == 1 else "which are"
        super().__init__(
            f"task {describe(task)} depends on {names}, {which} not in the graph; "
            "add the missing task or drop the dependency"
        )


class DuplicateTaskError(DagexecError, ValueError):
    """A task name was added twice; names identify results, so they must be unique."""

    def __init__(self, task: Hashable) -> None:
        self.task = task
        super().__init__(
            f"task {describe(task)} is already in the graph; give the new task another name"
        )


class UnknownTargetError(DagexecError, KeyError):
    """A requested target is not a task of the graph."""

    def __init__(self, targets: Sequence[Hashable]) -> None:
        self.targets: tuple[Hashable, ...] = tuple(targets)
        self.target = self.targets[0]
        names = ", ".join(describe(t) for t in self.targets)
        noun = "target" if len(self.targets) == 1 else "targets"
        self.message = f"unknown {noun} {names}: not a task of this graph; check the spelling"
        super().__init__(self.message)

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and wrap it in quotes.
        return self.message
