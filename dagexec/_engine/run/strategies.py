"""How an explored run chooses its steps: one :class:`Chooser` per run.

Each step, a chooser is shown the ready tasks' names in the order a plain run
would take them and answers which go now (one, or a few that overlap) and on
which workers. They see names, never task ids, so that a choice means the same
task in every run of the graph (a map's items are numbered as they expand).

* :class:`Natural`: a plain run's order, one task at a time: every explored run
  is compared with this one.
* :class:`RandomOrder`: any ready task, now and then two at once.
* :class:`Pct`: probabilistic concurrency testing (Burckhardt et al., 2010):
  random priorities, and a few change points where the task about to go drops
  to the lowest; an order that needs a few specific choices comes up far more
  often than under uniform choice.
* :class:`Exhaustive`: one path of a depth-first walk over every choice.
* :class:`Replay` and :class:`Pairs`: a recorded schedule, exactly, and the
  smallest form of one (tasks that must go before others, the rest as plain).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence

__all__ = [
    "Exhaustive",
    "Natural",
    "Pairs",
    "Pct",
    "RandomOrder",
    "Replay",
    "Together",
    "count_schedules",
]

# Whether two ready tasks (by position) may start together: both fit the free
# resources at once. A task alone always may.
Together = Callable[[int, int], bool]

# The most work count_schedules does before it gives up (None): one unit per
# task looked at and per option counted, in a walk over the sets of tasks done,
# which grows as 2**n with n independent tasks (~0.1 s at this bound: 20
# independent tasks took ~20 s before it).
COUNT_BUDGET = 200_000

# How often a random or PCT step starts two tasks together. Higher finds races
# that need an overlap sooner; lower finds orders (B wholly before A) sooner,
# and a serial step is the one that replays and shrinks exactly.
OVERLAP_CHANCE = 0.25

# PCT's depth: how many change points (plus one) a run has. Bugs that need one
# task before another are depth 1 or 2; each point more dilutes the rest.
PCT_DEPTH = 3


def _workers(rng: random.Random, k: int, workers: int) -> list[int]:
    return rng.sample(range(workers), k)


class Natural:
    """A plain run's order: the first ready task, alone, on worker 0."""

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        return [(0, 0)]


class RandomOrder:
    """Any ready task next, on any worker; now and then two tasks at once."""

    def __init__(self, rng: random.Random, overlap: float = OVERLAP_CHANCE) -> None:
        self.rng, self.overlap = rng, overlap

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        rng, n = self.rng, len(ready)
        if workers > 1 and n > 1 and rng.random() < self.overlap:
            picks = rng.sample(range(n), 2)
        else:
            picks = [rng.randrange(n)]
        return list(zip(picks, _workers(rng, len(picks), workers), strict=True))


class Pct:
    """Highest random priority first; at a few random steps, the task about to go
    drops below every other (PCT's change points)."""

    def __init__(
        self,
        rng: random.Random,
        length: int,
        depth: int = PCT_DEPTH,
        overlap: float = OVERLAP_CHANCE,
    ) -> None:
        self.rng, self.overlap = rng, overlap
        self.priority: dict[Hashable, float] = {}
        # Change points among the first `length` steps (the graph's task count).
        self.changes = set(rng.sample(range(max(length, depth)), depth - 1))
        self.low = 0.0  # the next demoted task's priority: below all random ones
        self.step = 0

    def _rank(self, name: Hashable) -> float:
        rank = self.priority.get(name)
        if rank is None:
            rank = self.priority[name] = 1.0 + self.rng.random()
        return rank

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        order = sorted(range(len(ready)), key=lambda i: -self._rank(ready[i]))
        if self.step in self.changes:
            self.low -= 1.0
            self.priority[ready[order[0]]] = self.low
            order = order[1:] + order[:1]
        self.step += 1
        k = 2 if workers > 1 and len(ready) > 1 and self.rng.random() < self.overlap else 1
        return list(zip(order[:k], _workers(self.rng, k, workers), strict=True))


class Exhaustive:
    """One path of a depth-first walk over every step's options: alone, each
    ready task; with two or more workers, each pair of them at once too.

    Follows ``prefix`` (an option per step), then the first option; records how
    many options each step had, so the walk's next path is :meth:`next_prefix`.
    """

    def __init__(self, prefix: Sequence[int], overlap: bool) -> None:
        self.prefix, self.overlap = list(prefix), overlap
        self.choices: list[int] = []
        self.branching: list[int] = []

    def options(self, n: int, together: Together) -> list[tuple[int, ...]]:
        """Each task alone, then each pair the resources let start together
        (one they refuse would run its first task alone: the same path again)."""
        singles: list[tuple[int, ...]] = [(i,) for i in range(n)]
        if not self.overlap:
            return singles
        return singles + [(i, j) for i in range(n) for j in range(i + 1, n) if together(i, j)]

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        options = self.options(len(ready), together)
        step = len(self.choices)
        choice = self.prefix[step] if step < len(self.prefix) else 0
        choice = min(choice, len(options) - 1)  # a task's run differed: stay in range
        self.choices.append(choice)
        self.branching.append(len(options))
        return [(i, w) for w, i in enumerate(options[choice])]

    def next_prefix(self) -> list[int] | None:
        """The next path of the walk, or None once every path is taken."""
        for step in range(len(self.choices) - 1, -1, -1):
            if self.choices[step] + 1 < self.branching[step]:
                return [*self.choices[:step], self.choices[step] + 1]
        return None

    def untaken(self) -> int:
        """Branches the walk has not entered yet from this path: a lower bound
        on the schedules it could not cover, were it to stop here."""
        return sum(b - c - 1 for c, b in zip(self.choices, self.branching, strict=True))


def count_schedules(
    deps: Mapping[Hashable, Collection[Hashable]],
    overlap: bool,
    together: Callable[[Hashable, Hashable], bool] | None = None,
) -> int | None:
    """How many paths :class:`Exhaustive` has on a graph with these ``deps`` (each
    task once: no map items, no retried attempts; ``together`` says which pairs
    the resources let overlap, default all), or None if counting would take too
    long (more than :data:`COUNT_BUDGET` units of work)."""
    names = list(deps)
    bit = {name: 1 << i for i, name in enumerate(names)}
    need = [sum(bit[d] for d in deps[name] if d in bit) for name in names]
    full = (1 << len(names)) - 1
    memo: dict[int, int] = {full: 1}
    pairs: dict[tuple[int, int], bool] = {}
    work = [0]

    def pair(i: int, j: int) -> bool:
        fits = pairs.get((i, j))
        if fits is None:
            fits = pairs[i, j] = together is None or together(names[i], names[j])
        return fits

    def count(done: int) -> int:
        known = memo.get(done)
        if known is not None:
            return known
        ready = [i for i in range(len(names)) if not done >> i & 1 and need[i] & done == need[i]]
        options = [1 << i for i in ready]
        if overlap:
            options += [
                1 << i | 1 << j for k, i in enumerate(ready) for j in ready[k + 1 :] if pair(i, j)
            ]
        work[0] += len(names) + len(options)
        if work[0] > COUNT_BUDGET:
            raise OverflowError
        total = memo[done] = sum(count(done | o) for o in options)
        return total

    try:
        return count(0)
    except (OverflowError, RecursionError):
        return None


class Replay:
    """A recorded schedule's steps, exactly. At a step whose tasks are not all
    ready (the graph changed since it was recorded), or once the steps run out,
    it chooses nothing, which stops the run, and ``drift`` says where."""

    def __init__(self, steps: Sequence[Sequence[tuple[Hashable, int]]]) -> None:
        self.steps = steps
        self.at = 0
        self.drift: str | None = None

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        at = self.at
        self.at += 1
        if at < len(self.steps):
            step = self.steps[at]
            position = {name: i for i, name in enumerate(ready)}
            if all(name in position for name, _ in step) and all(w < workers for _, w in step):
                return [(position[name], w) for name, w in step]
            wanted = ", ".join(f"{name!r}@{w}" for name, w in step)
            self.drift = f"step {at + 1} wants {wanted}; ready were {list(ready)!r}"
        else:
            self.drift = f"the schedule has {len(self.steps)} steps; the run needed more"
        return []


class Pairs:
    """A plain run's order, one task at a time, except that for each pair
    ``(a, b)`` task ``b`` does not start before ``a`` has ended (unless nothing
    else can go: a pair that cannot hold is dropped, it never hangs the run)."""

    def __init__(self, pairs: Collection[tuple[Hashable, Hashable]]) -> None:
        self.before: dict[Hashable, set[Hashable]] = {}
        for a, b in pairs:
            self.before.setdefault(b, set()).add(a)
        self.started: set[Hashable] = set()

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Together
    ) -> list[tuple[int, int]]:
        position = 0
        for i, name in enumerate(ready):
            if self.before.get(name, set()) <= self.started:
                position = i
                break
        self.started.add(ready[position])
        return [(position, 0)]
