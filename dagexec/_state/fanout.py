"""Dynamic fan-out (``g.map``): a map task expands into one task per item at run time.

Part of the run state machine, and as pure: no threads, no clocks. Used only by
runs whose plan has a map; every other run pays nothing for it.

A map ``m = g.map(name, fn, over=o, deps=extra)`` is a task of the plan with
deps ``(o, *extra)``. Its life:

1. *Expansion*: when its deps are done, ``list(value of o)`` is taken once and
   each item becomes a task ``(name, i)`` appended to the run's columns, calling
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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.result import CANCELLED, DONE, FAILED, SKIPPED, WAITING
from .._core.safe import add_note, task_for_message
from .events import EXPAND, Event

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["Fanout"]


class Fanout:
    """The maps of one run. Owned by its :class:`RunState`, same thread."""

    def __init__(self, run: RunState, maps: frozenset[int]) -> None:
        plan = run.plan
        # The run's columns become per-run lists that can grow.
        run.names = self.names = list(plan.names)
        run.index = self.index = dict(plan.index)
        run.fns = self.fns = list(plan.fns)
        run.deps = self.deps = list(plan.deps)
        run.dependents = self.dependents = [list(d) for d in plan.dependents]
        run.chain_next = self.chain_next = list(plan.chain_next)
        run.is_target = self.is_target = bytearray(plan.target_mask)
        self.priority = None if run.priority is None else list(run.priority)
        self.needs = None if run.needs is None else list(run.needs)
        run.priority, run.needs = self.priority, self.needs
        self.policy = None if run.policy is None else list(run.policy)
        run.policy = self.policy
        self.items: dict[int, Any] = {}
        run.items = self.items
        self.run = run
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

    # Over ruff's complexity limit on purpose: one pass over a map's items; it splits once maps
    # go through RunState's public methods.
    def _expand(self, m: int) -> None:  # noqa: C901
        run = self.run
        over, extra = run.deps[m][0], run.deps[m][1:]
        source = self.span.get(over)  # item by item when over is an expanded map
        cleanup = run.cleanup
        if cleanup is not None and cleanup[m]:
            # run_if="all_done" applies to the extra deps only: a map whose over
            # ended without a value has no items, and is skipped.
            if source is None and run.state[over] != DONE:
                run.finish(m, SKIPPED)
                run.skip_downstream(m)
                return
            # Expanded, it gathers like any map: a failed item skips it. Its deps
            # have all ended and no longer concern it (its items read them): the
            # edges go, so that skipping downstream of a failed dep, which may be
            # what made it expand, does not reach it now.
            cleanup[m] = 0
            for d in set(run.deps[m]):
                if source is None or d != over:  # a chained map's edge went below
                    self.dependents[d].remove(m)
        items: list[Any] = []
        if source is None:
            # Iterated here, on the scheduler thread: a generator that blocks
            # stalls dispatch meanwhile (docs/graphs.md, "Dynamic fan-out"). Whatever it
            # raises, even a BaseException, is the map's failure, not the
            # scheduler's; a fatal one still stops the run and reaches the caller.
            try:
                items = list(run.values[over])
            except BaseException as exc:
                what, over_name = task_for_message(run.names[m]), task_for_message(run.names[over])
                add_note(exc, f"dagexec: map {what} iterates the value of {over_name}")
                run.finish(m, FAILED, exc)
                return
        count = len(items) if source is None else len(source)
        # Maps over this one take its items one by one, not its list.
        chained = self.chained.get(m, [])
        for b in chained:
            self.dependents[m].remove(b)
        keep = bool(run.is_target[m] or run.dependents[m])
        if keep:
            self.keep.add(m)
        start = len(run.state)
        self.span[m] = span = range(start, start + count)
        name, fn = run.names[m], run.fns[m]
        priority = run.priority[m] if run.priority is not None else 0
        need = run.needs[m] if run.needs is not None else ()
        policy = run.policy[m] if run.policy is not None else None
        if cleanup is not None:
            # Its items keep the map's run_if only when they need nothing but the
            # extra deps (which have ended); an item of a map over a map still
            # waits for its source item, and is skipped if that fails.
            flag = policy is not None and policy.cleanup and source is None
            cleanup.extend(b"\x01" * count if flag else bytes(count))
        for i, t in enumerate(span):
            task_name = (name, i)
            self.names.append(task_name)
            self.index[task_name] = t
            self.fns.append(fn)
            self.deps.append(extra if source is None else (source[i], *extra))
            self.dependents.append([m])
            self.chain_next.append(-1)
            run.state.append(WAITING)
            run.values.append(None)
            run.remaining.append(0 if source is None else 1)
            run.consumers.append(1 if keep else 0)
            self.is_target.append(0)
            if self.priority is not None:
                self.priority.append(priority)
            if self.needs is not None:
                self.needs.append(need)
            if self.policy is not None:
                self.policy.append(policy)
            if source is None:
                self.items[t] = items[i]
            else:
                self.dependents[source[i]].append(t)
        del items
        run.unfinished += count
        if run.events is not None:  # before any item's own events
            run.events.append(Event(EXPAND, m, -1, count))
        consumers = run.consumers
        for d in extra:  # each item reads them instead of the map
            consumers[d] += count
        # The map itself consumed what it was counted for: over's value (now
        # items, or over's items one by one) and its extras (now counted per item).
        run.let_go(run.deps[m])
        run.remaining[m] = count
        for b in chained:  # its items will read ours
            if run.state[b] != WAITING:
                continue  # skipped already: it will never read them
            for t in span:
                consumers[t] += 1
            run.remaining[b] -= 1
            if not run.remaining[b] and run.state[b] == WAITING:
                self._expand(b)
        if source is None:
            for t in run.push_order(span):  # so that item 0 is taken first
                run.make_ready(t)
        else:
            for i, t in enumerate(span):
                upstream = run.state[source[i]]
                if upstream == DONE:
                    run.remaining[t] = 0
                    run.make_ready(t)
                elif upstream in (FAILED, SKIPPED, CANCELLED) and run.state[t] == WAITING:
                    run.finish(t, SKIPPED)
                    run.skip_downstream(t)
        if not count:
            self._gather(m)

    def _gather(self, m: int) -> None:
        """All of ``m``'s items are done: ``m`` ends with the list of their values."""
        run = self.run
        span = self.span[m]
        value = None
        if m in self.keep:
            values = run.values
            value = [values[t] for t in span]
            run.let_go(span)
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
        source = self.span.get(self.run.deps[task][0])
        if source is not None:
            self.run.let_go(source)
        return False
