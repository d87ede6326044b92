"""Resource accounting for one run: what is free, who waits for what, who is kept for.

Part of the run state machine (:mod:`dagexec._state.runstate`), and as pure.
Only a run whose plan has resource needs makes a :class:`Resources`; every other
run pays nothing for it. The rule (one place, here):

A task is taken only if every resource it needs is free; one that does not fit
waits in a per-resource heap, and is looked at again when that resource is
released. Other tasks may still take what is free (no capacity is left idle for
nothing), but once tasks have taken resources :data:`_PATIENCE` times since the
longest-waiting task began to wait, everything that task needs is kept for it:
nobody else gets those resources until it has them. So a big task is never
starved by a stream of small ones, whatever their priorities.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol

__all__ = ["Resources", "exact", "resource_ids"]

# How many tasks may take resources while one waits for its own, before what it
# needs is kept for it. Lower starves big tasks less but leaves capacity idle
# more often (kept free while the big task waits for the rest); higher keeps
# capacity busier but lets a big task wait longer behind small ones.
_PATIENCE = 16


def exact(amount: float) -> float:
    """``amount`` in exact arithmetic, for resource accounting.

    Held amounts are added and subtracted as tasks come and go; in floats,
    0.1 + 0.2 - 0.2 - 0.1 is not 0 and 3 * 0.1 is more than 0.3, so a task needing
    all of a capacity could find it never free again, and three tasks of 0.1 would
    never fit in 0.3. Whole numbers (the usual case) stay ints, which are exact and
    cost nothing; any other finite amount becomes the :class:`~fractions.Fraction`
    of the decimal it prints as (``Fraction("0.1") == 1/10``, which is what the user
    wrote), so sums are exact and compare as written. ``math.inf`` (an unlimited
    capacity) stays a float: inf minus anything finite is still inf.
    """
    if not math.isfinite(amount):
        return amount
    if float(amount).is_integer():
        return int(amount)
    return Fraction(repr(float(amount)))  # type: ignore[return-value]


def resource_ids(
    needs: Sequence[tuple[tuple[str, float], ...]],
) -> tuple[tuple[str, ...], tuple[tuple[tuple[int, float], ...], ...]]:
    """The resource names of ``needs`` (sorted: a name's id is its place) and each
    task's needs in ids and exact amounts (see :func:`exact`)."""
    names = tuple(sorted({r for need in needs for r, _ in need}))
    rid = {r: i for i, r in enumerate(names)}
    return names, tuple(tuple((rid[r], exact(a)) for r, a in need) for need in needs)


class ResourceRun(Protocol):
    """What :class:`Resources` reads of the run that owns it (a ``RunState``)."""

    @property
    def needs(self) -> Sequence[tuple[tuple[int, float], ...]] | None:
        """Per task, what it needs, in resource ids (None: no task needs any)."""

    @property
    def ready(self) -> Any:
        """The ready set, a heap of ready-set entries."""

    @property
    def cleanup(self) -> bytearray | None:
        """1 for the run's cleanup tasks (None: it has none)."""

    @property
    def stopping(self) -> bool:
        """Whether the run is stopping."""


class Resources:
    """The resources of one run, in exact numbers: free is always capacity minus
    what is held and lent out. Owned by its :class:`RunState`, same thread; the
    per-task needs stay the run's column (``RunState.needs``, resource ids)."""

    def __init__(
        self, run: ResourceRun, names: tuple[str, ...], capacity: Mapping[str, float]
    ) -> None:
        self.run = run
        self.names = names
        self.capacity = [exact(capacity.get(r, 0)) for r in names]
        self.free = list(self.capacity)
        self.peak_held: list[float] = [0] * len(names)
        # Held by attempts the run let go of (timed out, still running) or by
        # abandoned attempts of earlier runs: not free, and not this run's to count.
        self.lent_out: list[float] = [0] * len(names)
        # Per resource, a heap of the ready-set entries waiting for it.
        self.blocked: list[list[tuple[Any, ...]]] = [[] for _ in names]
        self.parked: dict[int, int] = {}  # task -> the resource it waits for
        self.since: dict[int, int] = {}  # task -> ``taken`` when it first waited
        self.oldest: deque[int] = deque()  # tasks in the order they first waited
        self.taken = 0  # tasks that took resources so far
        self.reserving = -1  # the task everyone else's resources are kept for, or -1

    def try_hold(self, entry: tuple[Any, ...], need: tuple[tuple[int, float], ...]) -> bool:
        """Hold ``need`` for the ready-set ``entry`` (True), or park the entry until a
        resource it lacks is released (False)."""
        task: int = entry[-1]
        free, holder = self.free, self.reserving
        kept = () if holder < 0 or holder == task else self._needs(holder)
        for r, amount in need:
            if amount > free[r] or r in kept:
                self._park(entry, r)
                return False
        self._hold(need)
        self.taken += 1
        self.since.pop(task, None)  # it waits no more
        if self.reserving == task:
            self.reserving = -1  # it has what it waited for: the rest may go
            for r in range(len(free)):
                self._wake_fitting(r)
        self._check_patience()
        return True

    def unhold(self, need: tuple[tuple[int, float], ...]) -> None:
        """``need`` is free again; wake the tasks waiting for it that now fit."""
        free = self.free
        for r, amount in need:
            free[r] += amount
        run = self.run
        if run.stopping and run.cleanup is None:  # else cleanup tasks may wait for them
            return
        holder = self.reserving
        kept: tuple[int, ...] = ()
        if holder >= 0:
            # What is kept goes to the task it is kept for, once all it needs is free.
            self._wake_if_fits(holder)
            kept = self._needs(holder)
        for r, _ in need:
            if r not in kept:
                self._wake_fitting(r)

    def clear_waiting(self) -> None:
        """The run stopped: nobody waits for a resource any more."""
        for waiting in self.blocked:
            waiting.clear()
        self.parked.clear()
        self.since.clear()
        self.reserving = -1

    def lend(self, needs: Sequence[tuple[str, float]]) -> tuple[tuple[int, float], ...]:
        """See :meth:`RunState.lend`."""
        rid = {r: i for i, r in enumerate(self.names)}
        lent = tuple((rid[r], exact(a)) for r, a in needs if r in rid)
        for r, amount in lent:
            self.free[r] -= amount
            self.lent_out[r] += amount
        return lent

    def give_back(self, lent: tuple[tuple[int, float], ...]) -> None:
        """See :meth:`RunState.give_back`."""
        for r, amount in lent:
            self.lent_out[r] -= amount
        self.unhold(lent)

    def waits_for(self, task: int) -> str:
        """What a parked ``task`` waits for, in words ('' if it is not parked)."""
        r = self.parked.get(task, -1)
        if r < 0:
            return ""
        return (
            f", waits for {float(self._need_of(task, r)):g} of resource "
            f"{self.names[r]!r}, {float(self.free[r]):g} free of "
            f"{float(self.capacity[r]):g}"
        )

    # ------------------------------------------------------------- internals
    def _needs(self, task: int) -> tuple[int, ...]:
        needs = self.run.needs
        assert needs is not None
        return tuple(r for r, _ in needs[task])

    def _park(self, entry: tuple[Any, ...], r: int) -> None:
        """``entry`` waits for resource ``r``; the longest waiter is remembered."""
        task = entry[-1]
        heapq.heappush(self.blocked[r], entry)
        self.parked[task] = r
        if task not in self.since:
            self.since[task] = self.taken
            self.oldest.append(task)
        self._check_patience()

    def _check_patience(self) -> None:
        """Reserve for the longest-waiting task once others took resources too often."""
        if self.reserving >= 0:
            return
        oldest, since = self.oldest, self.since
        while oldest and oldest[0] not in since:  # taken since
            oldest.popleft()
        if oldest and self.taken - since[oldest[0]] > _PATIENCE:
            holder = self.reserving = oldest[0]
            self._wake_if_fits(holder)

    def _hold(self, need: tuple[tuple[int, float], ...]) -> None:
        free, peak, capacity, lent = self.free, self.peak_held, self.capacity, self.lent_out
        for r, amount in need:
            free[r] -= amount
            held = capacity[r] - free[r] - lent[r]
            if held > peak[r]:
                peak[r] = held

    def _wake_fitting(self, r: int) -> None:
        """Wake the best tasks waiting for ``r`` that now fit, in rank order; the
        rest stay behind the first that does not."""
        waiting, room, ready = self.blocked[r], self.free[r], self.run.ready
        while waiting:
            want = self._need_of(waiting[0][-1], r)
            if want > room:
                break
            room -= want
            entry = heapq.heappop(waiting)
            del self.parked[entry[-1]]
            heapq.heappush(ready, entry)

    def _wake_if_fits(self, task: int) -> None:
        """Move a waiting ``task`` back to the ready set if all it needs is free."""
        needs = self.run.needs
        assert needs is not None
        if task not in self.parked:
            return  # already woken
        free = self.free
        if any(amount > free[r] for r, amount in needs[task]):
            return
        waiting = self.blocked[self.parked.pop(task)]
        entry = next(e for e in waiting if e[-1] == task)
        waiting.remove(entry)
        heapq.heapify(waiting)
        heapq.heappush(self.run.ready, entry)

    def _need_of(self, task: int, r: int) -> float:
        needs = self.run.needs
        assert needs is not None
        for q, amount in needs[task]:
            if q == r:
                return amount
        return 0
