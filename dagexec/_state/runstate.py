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
ready in :meth:`RunState.make_ready`, the order is ``RunState._push_ready``'s.

States only move forward::

    WAITING -> READY -> IN_FLIGHT -> DONE | FAILED | CANCELLED
    WAITING -> HELD (a chain member, handed out with the chain's first task)
    HELD -> IN_FLIGHT (the member before it returned) | DONE | FAILED | CANCELLED
    WAITING | HELD -> SKIPPED (downstream of a failure, with on_error="continue")
    WAITING | READY -> CANCELLED (the run stopped)
    IN_FLIGHT -> WAITING (a failed attempt waits for its retry: retries=)

The machine is one object over several modules, one job each:

=================  ==========================================================
``runstate.py``    the columns, readiness and the dispatch order, handing out
                   (``hand_out``, ``dispatch_all``), letting go of values and
                   releasing items
``ending.py``      how tasks end (``ended``, ``finish``, ``chain_ended``) and
                   what follows: dependents, skips, cleanup tasks
``retries.py``     a failed attempt that waits on a timer (``wake``)
``attempts.py``    an attempt began (``started``) or timed out (``timed_out``)
``stopping.py``    a stop (``fail``, ``stop``) and the stuck-run error
``resources.py``   resource accounting and waiting (:class:`Resources`)
``fanout.py``      map expansion (:class:`Fanout`)
``cleanup_gate.py`` when a cleanup task may start (:class:`CleanupGate`)
=================  ==========================================================

The first five are functions of the run, bound in ``RunState``'s class body as
its methods (``RunState.ended`` *is* ``ending.ended``): a method is a function
of its instance, so the split adds no call on the per-task path. The last three
are objects the run holds, made only when the plan needs them.

Policies, each written once:

* Order: ready tasks are taken by priority, higher first, and among equal
  priorities depth first (the task that became ready last goes first; see
  :data:`DEPTH_FIRST`). Without priorities or resources a deque used as a
  stack does the same job for free; with them, a heap of
  (-priority, -seq, task).
* Resources: see :mod:`dagexec._state.resources`.
* Values: dropped as soon as the last task that needs them was handed its
  arguments (or skipped); targets are kept.
* Stopping: see :mod:`dagexec._state.stopping`; cleanup tasks
  (run_if="all_done") become due once every dependency ended in any state
  (``ending._ended``), and a due one waits in the cleanup gate until no ancestor
  runs any more.
* Retries: see :mod:`dagexec._state.retries`.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

from .._core.plan import Plan
from .._core.policy import Policy
from .._core.result import HELD, READY, WAITING
from .._core.task_options import TaskRecord
from . import attempts, columns, ending, retries, stopping
from . import dispatch as dispatching
from .cleanup_gate import CleanupGate
from .events import READY as E_READY
from .events import Event
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


class RunState:
    """Everything one run knows about its tasks. Not thread-safe: one owner at a time.

    Args:
        plan: the tasks of the run.
        on_error: "raise" stops at the first failure, "continue" skips downstream.
        workers: how many worker ids :meth:`ended` may be given (for counts).
        observed: emit :class:`~dagexec._state.events.Event` s into ``events``.
        capacity: resource name -> capacity; tasks' needs are checked against it
            by the caller before the run (see ``_plan.check_resources``).
    """

    def __init__(
        self,
        plan: Plan,
        *,
        on_error: str = "raise",
        workers: int = 1,
        observed: bool = False,
        capacity: Mapping[str, float] | None = None,
        log: Callable[..., None] | None = None,
        warn: Callable[..., None] | None = None,
    ) -> None:
        n = len(plan)
        self.plan = plan
        # The pure state machine does not log: the engine hands in ``logger.info``
        # when a run starts with INFO enabled, and None (say nothing) otherwise.
        self.log = log
        # Likewise for warnings (a cleanup task that stopped waiting for an ancestor):
        # ``logger.warning`` from the engine; a thread-free test may leave it out.
        self.warn: Callable[..., None] = warn or _say_nothing
        self.on_error = on_error
        # The run's tasks: the plan's, plus the items of maps once they expand
        # (then these are lists; see columns.py).
        self.names: Sequence[Hashable] = plan.names
        self.index: Mapping[Hashable, int] = plan.index
        self.fns: Sequence[Callable[..., Any]] = plan.fns
        self.deps: Sequence[tuple[int, ...]] = plan.deps
        self.dependents: Sequence[Sequence[int]] = plan.dependents
        self.chain_next: Sequence[int] = plan.chain_next
        self.items: dict[int, Any] | None = None  # a map item's element, until dispatch
        self.state = bytearray(n)
        self.values: list[Any] = [None] * n
        self.remaining = list(plan.dep_counts)  # dependencies not yet DONE
        # Users not yet handed their arguments, plus one for a target (the caller):
        # a value is dropped when its count reaches 0, which a target's never does.
        self.consumers = list(plan.use_counts)
        self.is_target: bytes | bytearray = plan.target_mask
        self.unfinished = n  # tasks not in a final state
        self.in_flight = 0  # items handed out and not released
        self.peak_in_flight = 0
        self.ran_on = [0] * workers  # tasks that ran, per worker
        self.stopping = False
        self.first_error: BaseException | None = None
        self.errors: dict[int, BaseException] = {}
        self.events: list[Event] | None = [] if observed else None
        # RELEASE events, for on_attempt_release only: one more event per task.
        self.tell_release = False
        # Each task's options (task_options.TaskRecord), or None when no task has
        # any; the ones read per task also as flat columns (see OPTION_COLUMNS).
        self.options: Sequence[TaskRecord] | None = plan.options
        # Per-task policy (retries, timeouts, cleanup tasks); all of it None or
        # empty when no task has one, and then never looked at.
        self.policy: Sequence[Policy | None] | None = plan.policy
        self.cleanup: bytearray | None = None  # 1 for run_if="all_done" tasks
        self.hard = False  # a hard stop (a second Ctrl-C): cleanup tasks are cancelled too
        self.attempt: dict[int, int] = {}  # task -> its current attempt, once retried
        self.retries = 0  # retry attempts made (RunStats.retries)
        self.timeouts = 0  # attempts that ran past their timeout= (RunStats.timeouts)
        self.kept_args: dict[int, tuple[Any, ...]] = {}  # retryable tasks' arguments
        self.timers: list[tuple[float, int, int]] = []  # heap of (due, seq, task) to retry
        self.now = 0.0  # the driver's clock, for timers; the machine reads no clock
        self.rand: Callable[[], float] = random.random  # jitter; tests may fix it
        # Holds due cleanup tasks until their ancestors have settled (cleanup_gate.py).
        self.gate: CleanupGate | None = None
        if plan.policy is not None and any(p is not None and p.cleanup for p in plan.policy):
            self.cleanup = bytearray(p is not None and p.cleanup for p in plan.policy)
            self.gate = CleanupGate(self)

        # Ready set: when nothing ranks tasks, a list used as a stack (depth first)
        # or a deque (first-in first-out); else a heap of (key..., task); see
        # _order_key.
        self.priority: Sequence[int] | None = plan.priority
        self.seq = 0
        self.needs: Sequence[tuple[tuple[int, float], ...]] | None = None
        self.keyed = self.priority is not None or plan.needs is not None
        self.depth_first = DEPTH_FIRST
        # A plain stack: hand_out takes a worker's batch off its top in C.
        self.stacked = not self.keyed and self.depth_first
        ready: Any = [] if self.keyed or self.stacked else deque()
        self.ready = ready
        # Put a READY task into the ready set, where its rank says (_push_ready),
        # and take(): remove and return the next task to hand out, or -1 if none can
        # go now. Call only while ``has_ready()``. A task taken holds its resources
        # until :meth:`release`; it must be passed to :meth:`dispatch` next. When
        # nothing ranks, the ready list's own append and pop (no Python frame per
        # task); else the class's ranked methods (see ``became_ready``).
        if not self.keyed:
            self._push_ready = ready.append  # type: ignore[method-assign]
            self.take = ready.pop if self.depth_first else ready.popleft  # type: ignore[method-assign]
        # Resource accounting (resources.py), only when some task needs any: the
        # needs column in resource ids, the names in id order.
        self.resource_names: tuple[str, ...] = ()
        self.resources: Resources | None = None
        if plan.needs is not None:
            self.resource_names, self.needs = resource_ids(plan.needs)
            self.resources = Resources(self, self.resource_names, capacity or {})
        self.fanout: Fanout | None = None
        if plan.maps is not None:
            columns.make_growable(self)
            self.fanout = Fanout(self, plan.maps)
            self.became_ready = self.fanout.ready  # type: ignore[method-assign]
        # With nothing to rank, expand, tell or retry, ended() takes its plain
        # path: a task that became ready is only pushed, inline.
        self.plain = (
            self.fanout is None and not self.keyed and self.events is None and self.policy is None
        )
        roots = self.push_order(plan.roots)
        if self.plain:
            # make_ready's steps for a plain run, which has no cleanup gate and
            # tells nobody, without two calls per root: measured ~3% of the
            # instructions per task of the speed gate's partial workload (66 of
            # its 158 tasks are roots). Compared with make_ready in
            # tests/test_runstate_world.py.
            state = self.state
            for r in roots:
                state[r] = READY
            ready.extend(roots)
        else:
            for r in roots:
                self.make_ready(r)

    # The run's per-task option columns: a map's items copy their map's entry in
    # each (columns.add_items), so an option carried by the record needs nothing
    # here; one read per task gets a flat column only where that pays.
    OPTION_COLUMNS = ("options", "priority", "needs", "policy")

    # How tasks are handed out and released (dispatch.py), a map's items added
    # (columns.py), tasks end (ending.py), wait for a retry (retries.py) and are
    # stopped (stopping.py): functions of the run,
    # bound here as its methods, which adds no call on the per-task path.
    hand_out = dispatching.hand_out
    dispatch = dispatching.dispatch
    dispatch_all = dispatching.dispatch_all
    release = dispatching.release
    take_back = dispatching.take_back
    put_back = dispatching.put_back
    let_go_returned = dispatching.let_go_returned
    add_items = columns.add_items
    ended = ending.ended
    finish = ending.finish
    chain_ended = ending.chain_ended
    skip_downstream = ending.skip_downstream
    started = attempts.started
    timed_out = attempts.timed_out
    wake = retries.wake
    fail = stopping.fail
    stop = stopping.stop
    stuck_error = stopping.stuck_error

    # ---------------------------------------------------------------- readiness
    def make_ready(self, task: int) -> None:
        """``task`` can run now: the one place a task becomes READY and joins the
        ready set (a cleanup task whose ancestors still run waits in the gate)."""
        gate = self.gate
        if gate is not None and gate.holds(task):
            return  # a cleanup task whose ancestors still run: it waits, WAITING
        self.state[task] = READY
        self._push_ready(task)
        if self.events is not None:
            self.events.append(Event(E_READY, task))

    def _push_ranked(self, task: int) -> None:
        """``_push_ready`` when tasks are ranked (priorities or resources)."""
        heapq.heappush(self.ready, self._order_key(task))

    def push_order(self, tasks: Sequence[int]) -> Sequence[int]:
        """The order to make ``tasks`` ready in, so that they are taken in their own
        order: last-first under depth-first order (the last pushed goes first), as
        given otherwise. With :meth:`_order_key`, the one place the dispatch order
        is decided (the plain run's inline loop in :meth:`ended` turns its few
        pushed tasks around in place, to the same effect)."""
        return tasks[::-1] if self.depth_first else tasks  # a slice beats reversed()

    def _order_key(self, task: int) -> tuple[int, int, int]:
        """Higher priority first; among equals, the task that became ready last
        (depth first), or first (with ``DEPTH_FIRST`` off)."""
        self.seq += 1
        priority = self.priority[task] if self.priority is not None else 0
        return (-priority, -self.seq if self.depth_first else self.seq, task)

    def has_ready(self) -> bool:
        """True if some task is ready (it may still be blocked on a resource)."""
        return bool(self.ready)

    def _take_ranked(self, may_hold: bool = True) -> int:
        """``take`` when tasks are ranked (priorities) or need resources. Without
        ``may_hold``, -1 as soon as the next task to go needs a resource."""
        ready = self.ready
        needs = self.needs
        while ready:
            entry = heapq.heappop(ready)
            task: int = entry[-1]
            if needs is None or not needs[task]:
                return task
            if not may_hold:
                heapq.heappush(ready, entry)  # it stays next, for an idle worker
                return -1
            assert self.resources is not None
            if self.resources.try_hold(entry, needs[task]):
                return task
        return -1

    # Per-run hooks whose defaults are looked up here, on the class: a bound method
    # of the state stored on the state would make it a reference cycle, which only
    # the cyclic GC frees, with every value still in its columns (a run's state
    # outlived its run until the next collection; tests/test_run_garbage.py).
    # What a task that became ready goes through: a map's Fanout puts its own.
    became_ready = make_ready
    _push_ready = _push_ranked
    take = _take_ranked

    def close(self) -> None:
        """The run is over: drop what refers back to this state (a map's Fanout and
        its hook, the cleanup gate, the resource accounts), so that the state, and
        any value still in its columns, goes when its last user lets go of it, not
        at the next cyclic collection. Nothing may be asked of it afterwards but
        its columns and counts."""
        if self.fanout is not None:
            self.fanout = None
            del self.became_ready  # the Fanout's; the class's make_ready again
        self.gate = None
        if self.resources is not None:
            self.resources.run = None  # type: ignore[assignment]  # closed: never used again

    def let_go(self, used: Sequence[int]) -> None:
        """Each of ``used`` (a task, once per user done with its value) has one
        consumer fewer; a value nobody else needs is dropped. The one place a value
        is released for users that will never read it (skipped, or a map that
        expanded or gathered); :meth:`dispatch_all` does the same inline for the
        users it hands their arguments (the argument tuple holds the value now)."""
        values, consumers = self.values, self.consumers
        for d in used:
            left = consumers[d] - 1
            consumers[d] = left
            if not left:
                values[d] = None

    def cleanup_pending(self) -> bool:
        """Whether some cleanup task of the run has not ended yet."""
        return self.gate is not None and self.gate.pending()

    # ------------------------------------------ what map expansion (fanout.py) uses
    def state_of(self, task: int) -> int:
        """``task``'s state code (WAITING ... CANCELLED, or HELD)."""
        return self.state[task]

    def value_of(self, task: int) -> Any:
        """``task``'s value, while someone still needs it (else None)."""
        return self.values[task]

    def is_wanted(self, task: int) -> bool:
        """Whether ``task``'s value is wanted: it is a target, or a task depends on it."""
        return bool(self.is_target[task] or self.dependents[task])

    def is_cleanup(self, task: int) -> bool:
        """Whether ``task`` is a cleanup task (run_if="all_done") still waiting as one."""
        cleanup = self.cleanup
        return cleanup is not None and task < len(cleanup) and bool(cleanup[task])

    def make_ordinary(self, task: int) -> None:
        """Cleanup task ``task`` is an ordinary task from now on (a cleanup map that
        expanded gathers like any map: a failed item skips it)."""
        assert self.cleanup is not None
        self.cleanup[task] = 0

    def drop_edges(self, task: int, deps: Iterable[int]) -> None:
        """``task`` no longer waits on ``deps``: their ends do not concern it now."""
        dependents = cast(list[list[int]], self.dependents)
        for d in deps:
            dependents[d].remove(task)

    def dependency_done(self, task: int) -> None:
        """One more dependency of ``task`` is done; with none left, it became ready."""
        left = self.remaining[task] - 1
        self.remaining[task] = left
        if not left and self.state[task] == WAITING:
            self.became_ready(task)

    def more_readers(self, tasks: Iterable[int]) -> None:
        """Each of ``tasks`` has one more user that will read its value."""
        consumers = self.consumers
        for t in tasks:
            consumers[t] += 1

    def take_values(self, tasks: Sequence[int]) -> list[Any]:
        """The values of ``tasks``, read once by their last user: let go of here."""
        values = self.values
        taken = [values[t] for t in tasks]
        self.let_go(tasks)
        return taken

    def lend(self, needs: Sequence[tuple[str, float]]) -> tuple[tuple[int, float], ...]:
        """What an attempt of an earlier run still holds (it was abandoned and runs on):
        not free in this run until :meth:`give_back`. Returns the part of ``needs``
        this run knows, in its own terms (empty if none)."""
        if self.resources is None:
            return ()
        return self.resources.lend(needs)

    def give_back(self, lent: tuple[tuple[int, float], ...]) -> None:
        """The attempt :meth:`lend` was for returned: its resources are free again."""
        if self.resources is not None:
            self.resources.give_back(lent)

    def peak_resources(self, capacity: Mapping[str, float]) -> dict[str, float]:
        """Resource name -> most of it held at once, for every name in ``capacity``."""
        peaks: dict[str, float] = dict.fromkeys(capacity, 0)
        if self.resources is not None:
            for name, held in zip(self.resource_names, self.resources.peak_held, strict=True):
                peak = float(held)
                peaks[name] = int(peak) if peak.is_integer() else peak
        return peaks
