"""The progress bar's time left: the tasks still to run, at the rate of their own group.

Pure: no clock, no threads; :class:`dagexec.ProgressBar` feeds it and reads it.

A run is made of steps that go at very different speeds: a hundred quick
``load`` tasks, then ten slow ``upload`` s. One rate for the whole run (tasks
ended per second since the start) says "0:01 left" after the quick ones, with
17 s to go. So tasks are grouped as the trace groups them
(:mod:`dagexec._observation.groups`: a map's items are one group, any other
task goes by its function), each group's rate is measured on its own (its
tasks that ran, over the time since its first one began), and the time left
is the sum over groups of the tasks left in each at that group's rate, as if
the steps ran one after another (steps that overlap make it an upper bound).
Until every group with tasks left has had one end, there is no rate for it and
the time left is unknown (None); so is it while a map has not expanded, past
the lower bound the known groups give (the caller marks it ``>``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

__all__ = ["Estimate"]


class Estimate:
    """Tasks left and rates, per group, of one run."""

    __slots__ = ("_first", "_group_of", "_left", "_ran", "_started_at", "default")

    def __init__(
        self,
        left: Mapping[str, int],
        group_of: Mapping[Hashable, str],
        started_at: float,
        default: str = "",
    ) -> None:
        self._left = dict(left)  # group -> tasks not ended yet
        self._group_of = group_of  # a plan task's group; others are map items or default
        self._ran: dict[str, int] = {}  # group -> tasks that ran (done or failed)
        self._first: dict[str, float] = {}  # group -> when its first task that ran began
        self._started_at = started_at
        self.default = default

    def group(self, name: Hashable) -> str:
        """``name``'s group: the plan's, else a map item's (its map's), else the default."""
        group = self._group_of.get(name)
        if group is not None:
            return group
        if isinstance(name, tuple) and len(name) == 2:
            from .groups import task_group

            return task_group(name, None, map_item=True)
        return self.default

    def added(self, group: str, n: int) -> None:
        """``n`` more tasks of ``group`` (a map's items) are to run."""
        self._left[group] = self._left.get(group, 0) + n

    def ended(self, name: Hashable, ran: bool, now: float, seconds: float) -> None:
        """``name`` ended at ``now``; ``ran``: it ran (done or failed) for ``seconds``."""
        group = self.group(name)
        left = self._left.get(group, 0)
        if left > 0:
            self._left[group] = left - 1
        if ran:
            self._ran[group] = self._ran.get(group, 0) + 1
            began = max(now - seconds, self._started_at)
            first = self._first.get(group)
            if first is None or began < first:
                self._first[group] = began

    def seconds_left(self, now: float) -> float | None:
        """The time left at ``now``, or None while some group with tasks left has no rate."""
        total = 0.0
        for group, left in self._left.items():
            if left <= 0:
                continue
            ran = self._ran.get(group, 0)
            if not ran:
                return None
            elapsed = now - self._first[group]
            if elapsed <= 0:
                return None
            total += left * elapsed / ran
        return total
