"""The run's columns grow: a map's items become tasks of the run.

Part of the run state machine, and as pure: a layer of ``RunState`` over
:class:`~dagexec._state.core.RunCore`. A run whose plan has a map starts with
per-run lists instead of the plan's tuples (:meth:`Growing.make_growable`), so
that :meth:`Growing.add_items` can append a map's items: the one place the
columns grow. When a map expands and what its items are is
:mod:`dagexec._state.fanout`'s to decide; it reaches the columns only through
``add_items`` and RunState's other public methods.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, cast

from .._core.result import WAITING
from .core import RunCore
from .events import EXPAND, Event

__all__ = ["Growing"]


class Growing(RunCore):
    """A run whose columns may grow: a map's items are added to them."""

    __slots__ = ()

    def make_growable(self) -> None:
        """Give the run per-run lists for its columns, which :meth:`add_items` appends to."""
        plan = self.plan
        self.names = list(plan.names)
        self.index = dict(plan.index)
        self.fns = list(plan.fns)
        self.deps = list(plan.deps)
        self.dependents = [list(d) for d in plan.dependents]
        self.chain_next = list(plan.chain_next)
        self.is_target = bytearray(plan.target_mask)
        for attr in self.OPTION_COLUMNS:
            column = getattr(self, attr)
            if column is not None:
                setattr(self, attr, list(column))
        self.items = {}

    def add_items(
        self, m: int, elements: list[Any] | None, source: range | None, keep: bool
    ) -> range:
        """Add map ``m``'s items as tasks of the run; ``m`` now waits for them. Returns them.

        Item ``i`` is named ``(name of m, i)`` and calls ``m``'s function, with its
        options (each of ``OPTION_COLUMNS``), on ``elements[i]`` (kept until its dispatch)
        and ``m``'s extra dependencies; or, for a map over the expanded map whose
        items are ``source``, on the value of ``source[i]``, which it waits for.
        ``keep``: ``m`` gathers its items' values (a task or the caller wants them).
        The map's own dependencies are the caller's to let go of.
        """
        extra = self.deps[m][1:]
        count = len(elements) if elements is not None else len(source or ())
        start = len(self.state)
        span = range(start, start + count)
        self._copy_options(m, count, source is None)
        name, fn = self.names[m], self.fns[m]
        names = cast(list[Hashable], self.names)
        index = cast(dict[Hashable, int], self.index)
        fns = cast(list[Callable[..., Any]], self.fns)
        deps = cast(list[tuple[int, ...]], self.deps)
        dependents = cast(list[list[int]], self.dependents)
        chain_next = cast(list[int], self.chain_next)
        is_target = cast(bytearray, self.is_target)
        items = self.items
        assert items is not None
        state, values, remaining, consumers = (
            self.state,
            self.values,
            self.remaining,
            self.consumers,
        )
        for i, t in enumerate(span):
            task_name = (name, i)
            names.append(task_name)
            index[task_name] = t
            fns.append(fn)
            deps.append(extra if source is None else (source[i], *extra))
            dependents.append([m])
            chain_next.append(-1)
            state.append(WAITING)
            values.append(None)
            remaining.append(0 if source is None else 1)
            consumers.append(1 if keep else 0)
            is_target.append(0)
            if elements is not None:
                items[t] = elements[i]
            else:
                assert source is not None
                dependents[source[i]].append(t)
        self.unfinished += count
        if self.events is not None:  # before any item's own events
            self.events.append(Event(EXPAND, m, items=count))
        for d in extra:  # each item reads them instead of the map
            consumers[d] += count
        self.remaining[m] = count
        return span

    def _copy_options(self, m: int, count: int, direct: bool) -> None:
        """Map ``m``'s per-task options, for its ``count`` new items: its entry in
        each of ``OPTION_COLUMNS``. ``direct``: the items read elements, not the
        items of a map they wait for."""
        for attr in self.OPTION_COLUMNS:
            column = cast("list[Any] | None", getattr(self, attr))
            if column is not None:
                column.extend([column[m]] * count)
        policy = self.policy[m] if self.policy is not None else None
        if self.cleanup is not None:
            # Its items keep the map's run_if only when they need nothing but the
            # extra deps (which have ended); an item of a map over a map still
            # waits for its source item, and is skipped if that fails.
            flag = policy is not None and policy.cleanup and direct
            self.cleanup.extend(b"\x01" * count if flag else bytes(count))
