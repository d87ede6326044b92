"""The state of one run, as a pure state machine: no threads, no queues, no clocks.

Think :class:`graphlib.TopologicalSorter` with states. A driver (the scheduler
thread, or a plain loop in a test) asks ``RunState.take`` for the next task
to hand out, marks it handed out with :meth:`RunState.dispatch`, and tells the
machine how tasks ended with :meth:`RunState.ended` (a batch of jobs that
returned; :meth:`RunState.finish` for one task, :meth:`RunState.chain_ended`
for a chain), the one place a task ends. When a dispatched item (a task, or a
chain of them) is off the worker, :meth:`RunState.release` frees its in-flight
slot and its resources. Each rule has one place (docs/design.md, "One place
per rule"): a value is let go of in :meth:`RunState.let_go`, a task becomes
ready in :meth:`RunState.make_ready`, the order is ``push_order`` and ``_order_key``'s.

The legal moves of a task's state are data: :data:`dagexec._state.moves.MOVES`,
checked (with the run's invariants) by :class:`dagexec._state.moves.MoveChecker`
in the property tests after every step, and never on a run's normal path.

The machine is one class built in layers, one module and one job each; each
imports only the layers below it (tests/test_layers.py counts every import):

===================  ========================================================
``core.py``          the columns, readiness and the dispatch order, letting go
                     of values (:class:`~dagexec._state.core.RunCore`)
``columns.py``       a map's items added to the columns (``add_items``)
``retries.py``       a failed attempt that waits on a timer (``wake``)
``ending.py``        how tasks end (``ended``, ``finish``) and what follows:
                     dependents, skips, cleanup tasks; a stop (``fail``, ``stop``)
``attempts.py``      an attempt began (``started``) or timed out (``timed_out``)
``dispatch.py``      handing out (``hand_out``, ``dispatch_all``), releasing
                     items, a chain off its worker (``chain_ended``)
``runstate.py``      this class: the layers together, and what the plan needs
``resources.py``     resource accounting and waiting (:class:`Resources`)
``fanout.py``        map expansion (:class:`Fanout`)
``cleanup_gate.py``  when a cleanup task may start (:class:`CleanupGate`)
``moves.py``         the legal moves as a table, and their checker (tests only)
===================  ========================================================

The layers are base classes, so a method is found on the class as before and
the split adds no call on the per-task path. Resources, Fanout and CleanupGate are objects the run
holds, made only when the plan needs them; each names what it reads of the run
in a ``Protocol`` of its own, so none imports the run back.

Policies, each written once:

* Order: ready tasks are taken by priority, higher first, and among equal
  priorities depth first (the task that became ready last goes first; see
  :data:`DEPTH_FIRST`). Without priorities or resources a deque used as a
  stack does the same job for free; with them, a heap of
  (-priority, -seq, task).
* Resources: see :mod:`dagexec._state.resources`.
* Values: dropped as soon as the last task that needs them was handed its
  arguments (or skipped); targets are kept.
* Stopping: ``Ending.stop`` in ``ending.py``; cleanup tasks
  (run_if="all_done") become due once every dependency ended in any state
  (``Ending._ended``), and a due one waits in the cleanup gate until no ancestor
  runs any more.
* Retries: see :mod:`dagexec._state.retries`.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .._core.plan import Plan
from .._core.result import HELD, READY
from .attempts import Attempts
from .cleanup_gate import CleanupGate
from .columns import Growing
from .dispatch import Dispatching
from .fanout import Fanout
from .resources import Resources, resource_ids

__all__ = ["HELD", "RunState"]


# Among tasks of equal priority, take the one that became ready last: a task
# whose inputs just appeared finishes a started branch before a new branch
# opens, so values are consumed soon after they are made (dask.order's aim;
# docs/graphs.md, "Priorities", has the measured peaks). False gives first-in first-out,
# kept for comparison (benchmarks/order.py).
DEPTH_FIRST = True


def _say_nothing(*_args: Any) -> None:
    """The warning sink of a RunState that was given none."""


class RunState(Dispatching, Attempts, Growing):
    """Everything one run knows about its tasks. Not thread-safe: one owner at a time.

    Args:
        plan: the tasks of the run.
        on_error: "raise" stops at the first failure, "continue" skips downstream.
        workers: how many worker ids :meth:`ended` may be given (for counts).
        observed: emit :class:`~dagexec._state.events.Event` s into ``events``.
        capacity: resource name -> capacity; tasks' needs are checked against it
            by the caller before the run (see ``_plan.check_resources``).
    """

    __slots__ = ()

    def __init__(
        self,
        plan: Plan,
        on_error: str = "raise",
        workers: int = 1,
        observed: bool = False,
        capacity: Mapping[str, float] | None = None,
        log: Callable[..., None] | None = None,
        warn: Callable[..., None] | None = None,
    ) -> None:
        # The one constructor of the layers: every field RunCore declares, set
        # here (what each means is written beside its declaration in core.py).
        n = len(plan.names)
        self.plan = plan
        self.log = log
        self.warn = warn or _say_nothing
        self.on_error = on_error
        self.names = plan.names
        self.index = plan.index
        self.fns = plan.fns
        self.deps = plan.deps
        self.dependents = plan.dependents
        self.chain_next = plan.chain_next
        self.items = None
        self.state = bytearray(n)
        self.values = [None] * n
        # Displays, not list(): no type call (each ~200 instructions less a run).
        self.remaining = [*plan.dep_counts]
        self.consumers = [*plan.use_counts]
        self.is_target = plan.target_mask
        self.unfinished = n
        self.in_flight = self.peak_in_flight = 0
        self.ran_on = [0] * workers
        self.stopping = self.hard = self.tell_release = False
        self.first_error = None
        self.errors = {}
        self.events = [] if observed else None
        self.options = plan.options
        self.policy = policy = plan.policy
        self.cleanup = None
        self.attempt = {}
        self.retries = self.timeouts = self.seq = 0
        self.kept_args = {}
        self.timers = []
        self.now = 0.0
        self.rand = random.random
        self.gate = self.resources = self.needs = self.fanout = None
        self.resource_names = ()
        self.priority = plan.priority
        self.keyed = keyed = plan.priority is not None or plan.needs is not None
        self.depth_first = DEPTH_FIRST
        self.stacked = stacked = not keyed and DEPTH_FIRST
        self.ready = [] if keyed or stacked else deque()
        # With nothing to rank, expand, tell or retry, ended() takes its plain
        # path: a task that became ready is only pushed, inline.
        self.plain = not keyed and not observed and policy is None and plan.maps is None
        # The roots become ready, to be taken in their order: reversed under
        # depth-first order (push_order's rule, inline: a warm run's first step).
        roots = plan.roots[::-1] if DEPTH_FIRST else plan.roots
        if self.plain:
            # make_ready's steps for a plain run, which has no cleanup gate and
            # tells nobody, without two calls per root: measured ~3% of the
            # instructions per task of the speed gate's partial workload (66 of
            # its 158 tasks are roots). Compared with make_ready in
            # tests/test_runstate_world.py.
            state = self.state
            for r in roots:
                state[r] = READY
            self.ready.extend(roots)
        else:
            self._start_general(plan, capacity or {}, roots)

    def _start_general(
        self, plan: Plan, capacity: Mapping[str, float], roots: tuple[int, ...]
    ) -> None:
        """The rest of ``__init__`` for a run that is not plain: the parts only some
        plans need, then the roots made ready by ``make_ready``."""
        policy = plan.policy
        # The cleanup gate (cleanup_gate.py), for a plan with cleanup tasks.
        if policy is not None and any(p is not None and p.cleanup for p in policy):
            self.cleanup = bytearray(p is not None and p.cleanup for p in policy)
            self.gate = CleanupGate(self)
        # Resource accounts (resources.py), only when some task needs any: the
        # needs column in resource ids, the names in id order.
        if plan.needs is not None:
            self.resource_names, self.needs = resource_ids(plan.needs)
            self.resources = Resources(self, self.resource_names, capacity)
        if plan.maps is not None:
            self.make_growable()
            self.fanout = Fanout(self, plan.maps)
        for r in roots:
            self.make_ready(r)

    def close(self) -> None:
        """The run is over: drop what refers back to this state (a map's Fanout,
        the cleanup gate, the resource accounts), so that the state, and any value
        still in its columns, goes when its last user lets go of it, not at the
        next cyclic collection (tests/test_run_garbage.py). Nothing may be asked
        of it afterwards but its columns and counts. A ``plain`` run has none of
        these parts, and its driver may leave this out (one call fewer per run;
        tests/test_runstate_world.py)."""
        self.fanout = None
        self.gate = None
        if self.resources is not None:
            self.resources.run = None  # type: ignore[assignment]  # closed: never used again
