"""Whether a schedule can be replayed on a run's plan, checked before it runs.

:func:`dagexec.testing.replay_schedule` takes a schedule from a string a person
may have edited, or from another version of the graph. What can be known from
the plan alone is refused here, before any task runs: a name that is no task of
the run, a step that starts a task before a declared dependency has run, a task
started more often than its retries allow, a pair ``a<b`` that contradicts a
declared dependency (``a`` needs ``b``'s value, so it cannot end before ``b``
starts). What only the run can tell (how many items a map has, a task that
failed) is the replay's own check: it stops at the first step that does not fit.
"""

from __future__ import annotations

from collections.abc import Hashable

from ..._core.item_names import item_of
from ..._core.plan import Plan
from ..._core.safe import task_for_message
from .schedule import Schedule

__all__ = ["check_fits"]


class _Nodes:
    """A schedule's names as the plan's tasks: a map's item is its map."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.maps = plan.maps or frozenset()
        self.map_names = {plan.names[m] for m in self.maps}
        self._ancestors: dict[int, set[int]] = {}

    def of(self, name: Hashable) -> int:
        plan = self.plan
        try:
            task = plan.index.get(name)
        except TypeError:  # unhashable: no task's name
            task = None
        if task is not None and task not in self.maps:
            return task
        of_map = item_of(name, self.map_names)
        if of_map is not None:
            owner, _ = of_map
            return plan.index[owner]
        what = task_for_message(name)
        if task is not None:
            why = f"{what} is a map: its items run, named ({what}, 0), ({what}, 1)..."
        else:
            why = f"{what} is not a task of this run (check the name and targets=)"
        raise ValueError(f"replay_schedule: the schedule does not fit this graph: {why}")

    def ancestors(self, task: int) -> set[int]:
        """Every task ``task`` depends on, directly or not."""
        known = self._ancestors.get(task)
        if known is None:
            known = set()
            stack = list(self.plan.deps[task])
            while stack:
                d = stack.pop()
                if d not in known:
                    known.add(d)
                    stack.extend(self.plan.deps[d])
            self._ancestors[task] = known
        return known


def _check_pairs(pairs: tuple[tuple[Hashable, Hashable], ...], plan: Plan, nodes: _Nodes) -> None:
    """Refuse a pair that puts a task before itself or before one it depends on."""
    for a, b in pairs:
        na, nb = nodes.of(a), nodes.of(b)
        pair = repr(str(Schedule(pairs=((a, b),))))
        if a == b:
            raise ValueError(f"replay_schedule: the pair {pair} puts a task before itself")
        both_items = a != plan.names[na] and b != plan.names[nb]
        if nb in nodes.ancestors(na) and not both_items:  # items follow items by index
            raise ValueError(
                f"replay_schedule: the pair {pair} cannot hold: {task_for_message(a)} "
                f"depends on {task_for_message(b)}, so it cannot end before "
                f"{task_for_message(b)} starts"
            )


def check_fits(schedule: Schedule, plan: Plan) -> None:
    """Raise ValueError, naming the step or pair, if ``schedule`` cannot be
    replayed on ``plan`` whatever the tasks do."""
    nodes = _Nodes(plan)
    if schedule.pairs is not None:
        _check_pairs(schedule.pairs, plan, nodes)
        return
    maps, policy = nodes.maps, plan.policy
    ran: dict[Hashable, int] = {}
    done: set[int] = set()
    for k, step in enumerate(schedule.steps, 1):
        for name, _ in step:
            task = nodes.of(name)
            for d in plan.deps[task]:
                if d not in maps and d not in done:  # a map's items: counted at run time
                    raise ValueError(
                        f"replay_schedule: step {k} starts {task_for_message(name)} before "
                        f"its dependency {task_for_message(plan.names[d])} has run (no "
                        "earlier step starts it); the schedule does not fit this graph"
                    )
            rule = policy[task] if policy is not None else None
            allowed = 1 + (rule.retries if rule is not None else 0)
            ran[name] = ran.get(name, 0) + 1
            if ran[name] > allowed:
                raise ValueError(
                    f"replay_schedule: step {k} starts {task_for_message(name)} again: it "
                    f"runs at most {allowed} time(s) (1 + retries); the schedule does not "
                    "fit this graph"
                )
        done.update(nodes.of(name) for name, _ in step)
