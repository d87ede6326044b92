"""Dynamic fan-out (``g.map``): a map task expands into one task per item at run time.

Part of the run state machine, and as pure: no threads, no clocks. Used only by
runs whose plan has a map; every other run pays nothing for it.

A map ``m = g.map(name, fn, over=o, deps=extra)`` is a task of the plan with
deps ``(o, *extra)``. Its life:

1. *Expansion*: when its deps are done, ``list(value of o)`` is taken once and
   each item becomes a task ``(name, i)`` of the run (``RunState.add_items``), calling
   ``fn(item, *extra values)``, with ``m``'s priority and resources. The item is
   kept only until that task is dispatched, so a million items hold a million
   items (the user's data) but no closure and no argument tuple each.
2. *Gather*: ``m`` itself now waits for its items; when all are done it ends
   DONE without running, its value the list of their values (built only if a
   task or the caller wants it).

Chained maps: when ``o`` is itself a map, ``m`` expands as soon as ``o``
expanded (and ``extra`` are done), and ``(name, i)`` depends on ``(o, i)``
alone, so items flow through a chain of maps without waiting for whole maps.
A failed item skips what depends on it (its gather, its chained items), like
any failure.

A client of :class:`~dagexec._state.runstate.RunState`'s public methods: it
decides when a map expands and what its items are, and never touches the run's
columns (``add_items`` is the one place they grow).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .._core.plan import Plan
from .._core.result import CANCELLED, DONE, FAILED, SKIPPED, WAITING
from .._core.safe import add_note, task_for_message

__all__ = ["Fanout"]


class FanoutRun(Protocol):
    """The public methods of a run (a ``RunState``) that a :class:`Fanout` uses:
    all it asks of the run it belongs to."""

    @property
    def plan(self) -> Plan:
        """The run's plan (a map's dependencies are the plan's)."""

    def add_items(
        self, m: int, elements: list[Any] | None, source: range | None, keep: bool
    ) -> range:
        """Add map ``m``'s items as tasks of the run."""

    def dependency_done(self, task: int) -> None:
        """One more dependency of ``task`` is done."""

    def drop_edges(self, task: int, deps: Iterable[int]) -> None:
        """``task`` no longer waits on ``deps``."""

    def finish(self, task: int, outcome: int, payload: Any = None) -> None:
        """``task`` ended as ``outcome``."""

    def is_cleanup(self, task: int) -> bool:
        """Whether ``task`` is a cleanup task still waiting as one."""

    def is_wanted(self, task: int) -> bool:
        """Whether ``task``'s value is wanted."""

    def let_go(self, used: Sequence[int]) -> None:
        """Each of ``used`` has one consumer fewer."""

    def make_ordinary(self, task: int) -> None:
        """Cleanup task ``task`` is an ordinary task from now on."""

    def make_ready(self, task: int) -> None:
        """``task`` can run now."""

    def more_readers(self, tasks: Iterable[int]) -> None:
        """Each of ``tasks`` has one more user that will read its value."""

    def push_order(self, tasks: Sequence[int]) -> Sequence[int]:
        """The order to make ``tasks`` ready in."""

    def skip_downstream(self, failed: int) -> None:
        """Skip what depends on ``failed``."""

    def state_of(self, task: int) -> int:
        """``task``'s state code."""

    def take_values(self, tasks: Sequence[int]) -> list[Any]:
        """The values of ``tasks``, read once by their last user."""

    def value_of(self, task: int) -> Any:
        """``task``'s value, while someone still needs it."""


class Fanout:
    """The maps of one run. Owned by its :class:`RunState`, same thread."""

    def __init__(self, run: FanoutRun, maps: frozenset[int]) -> None:
        self.run = run
        self.plan = plan = run.plan  # a map is a task of the plan: its deps are the plan's
        self.maps = maps
        self.span: dict[int, range] = {}  # expanded map -> its item tasks
        self.keep: set[int] = set()  # expanded maps whose list someone wants
        self.chained: dict[int, list[int]] = {}  # map -> maps over it, item by item
        for m in maps:
            over = plan.deps[m][0]
            if over in maps:
                self.chained.setdefault(over, []).append(m)

    def ready(self, task: int) -> None:
        """``task``'s dependencies are all done (for a gather: all its items)."""
        if task not in self.maps:
            self.run.make_ready(task)
        elif task in self.span:
            self._gather(task)
        else:
            self._expand(task)

    def _expand(self, m: int) -> None:
        run = self.run
        deps = self.plan.deps[m]
        over = deps[0]
        source = self.span.get(over)  # item by item when over is an expanded map
        if run.is_cleanup(m) and not self._cleanup_map_expands(m, deps, source):
            return
        elements = None
        if source is None:
            elements = self._elements(m, over)
            if elements is None:
                return
        # Maps over this one take its items one by one, not its list.
        chained = self.chained.get(m, [])
        for b in chained:
            run.drop_edges(b, (m,))
        keep = run.is_wanted(m)
        if keep:
            self.keep.add(m)
        self.span[m] = span = run.add_items(m, elements, source, keep)
        del elements
        # The map itself consumed what it was counted for: over's value (now
        # items, or over's items one by one) and its extras (now counted per item).
        run.let_go(deps)
        for b in chained:  # its items will read ours
            if run.state_of(b) == WAITING:  # else skipped already: it never reads them
                run.more_readers(span)
                run.dependency_done(b)  # expands b once its extras are done too
        if source is None:
            for t in run.push_order(span):  # so that item 0 is taken first
                run.make_ready(t)
        else:
            self._follow(span, source)
        if not span:
            self._gather(m)

    def _cleanup_map_expands(self, m: int, deps: tuple[int, ...], source: range | None) -> bool:
        """Cleanup map ``m`` (run_if="all_done") is due: whether it expands (True)
        or, its over having ended without a value, is skipped (False)."""
        run = self.run
        over = deps[0]
        # run_if="all_done" applies to the extra deps only: a map whose over
        # ended without a value has no items, and is skipped.
        if source is None and run.state_of(over) != DONE:
            run.finish(m, SKIPPED)
            run.skip_downstream(m)
            return False
        # Expanded, it gathers like any map: a failed item skips it. Its deps
        # have all ended and no longer concern it (its items read them): the
        # edges go, so that skipping downstream of a failed dep, which may be
        # what made it expand, does not reach it now.
        run.make_ordinary(m)
        # (a chained map's edge from over went when over expanded)
        run.drop_edges(m, {d for d in deps if source is None or d != over})
        return True

    def _elements(self, m: int, over: int) -> list[Any] | None:
        """The items of map ``m``: the value of ``over`` as a list; None if iterating
        it raised (``m`` then failed).

        Iterated here, on the scheduler thread: a generator that blocks stalls
        dispatch meanwhile (docs/graphs.md, "Dynamic fan-out"). Whatever it raises,
        even a BaseException, is the map's failure, not the scheduler's; a fatal
        one still stops the run and reaches the caller.
        """
        run = self.run
        try:
            return list(run.value_of(over))
        except BaseException as exc:
            names = self.plan.names
            what, over_name = task_for_message(names[m]), task_for_message(names[over])
            add_note(exc, f"dagexec: map {what} iterates the value of {over_name}")
            # It will never read its dependencies now (found by the move checker:
            # over's value was kept to the end of a run that went on).
            run.let_go(self.plan.deps[m])
            run.finish(m, FAILED, exc)
            return None

    def _follow(self, span: range, source: range) -> None:
        """Items of a map over a map: each follows its source item, which may have
        ended already (done: ready now; failed, skipped or cancelled: skipped)."""
        run = self.run
        for t, upstream in zip(span, source, strict=True):
            upstream_state = run.state_of(upstream)
            if upstream_state == DONE:
                run.dependency_done(t)
            elif upstream_state in (FAILED, SKIPPED, CANCELLED) and run.state_of(t) == WAITING:
                run.finish(t, SKIPPED)
                run.skip_downstream(t)

    def _gather(self, m: int) -> None:
        """All of ``m``'s items are done: ``m`` ends with the list of their values."""
        run = self.run
        value = run.take_values(self.span[m]) if m in self.keep else None
        run.finish(m, DONE, value)

    def skipped(self, task: int) -> bool:
        """``task`` was skipped: let go of the item values it was counted for.

        An expanded map (an item failed) will never gather its items' values; it
        let go of its own dependencies when it expanded, so True: the caller must
        not again. A map over a map, skipped before it expanded, will never read
        the items of its source; its dependencies are the caller's (False).
        """
        if task not in self.maps:
            return False
        span = self.span.get(task)
        if span is not None:
            if task in self.keep:
                self.run.let_go(span)
            return True
        source = self.span.get(self.plan.deps[task][0])
        if source is not None:
            self.run.let_go(source)
        return False
