"""The state of one run, as a pure state machine: no threads, no queues, no clocks.

Think :class:`graphlib.TopologicalSorter` with states. A driver (the scheduler
thread, or a plain loop in a test) asks ``RunState.take`` for the next task
to hand out, marks it handed out with :meth:`RunState.dispatch`, and tells the
machine how tasks ended with :meth:`RunState.ended` (a batch of jobs that
returned; :meth:`RunState.finish` for one task, :meth:`RunState.chain_ended`
for a chain), the one place a task ends. When a dispatched item (a task, or a
chain of them) is off the worker, :meth:`RunState.release` frees its in-flight
slot and its resources. Each rule has one place (docs/design.md, "One place
per rule"): a value is let go of in :meth:`RunState._let_go`, a task becomes
ready in :meth:`RunState._make_ready`, the order is :meth:`RunState._push_ready`'s.

States only move forward::

    WAITING -> READY -> IN_FLIGHT -> DONE | FAILED | CANCELLED
    WAITING -> HELD (a chain member, handed out with the chain's first task)
    HELD -> IN_FLIGHT (the member before it returned) | DONE | FAILED | CANCELLED
    WAITING | HELD -> SKIPPED (downstream of a failure, with on_error="continue")
    WAITING | READY -> CANCELLED (the run stopped)
    IN_FLIGHT -> WAITING (a failed attempt waits for its retry: retries=)

Policies, each written once:

* Order: ready tasks are taken by priority, higher first, and among equal
  priorities depth first (the task that became ready last goes first; see
  :data:`DEPTH_FIRST`). Without priorities or resources a deque used as a
  stack does the same job for free; with them, a heap of
  (-priority, -seq, task).
* Resources: a task is taken only if every resource it needs is free; one that
  does not fit waits in a per-resource heap, and is looked at again when that
  resource is released. Other tasks may still take what is free (no capacity is
  left idle for nothing), but once tasks have taken resources :data:`_PATIENCE`
  times since the longest-waiting task began to wait, everything that task needs
  is kept for it: nobody else gets those resources until it has them. So a big
  task is never starved by a stream of small ones, whatever their priorities.
* Values: dropped as soon as the last task that needs them was handed its
  arguments (or skipped); targets are kept.
* A stop (failure with on_error="raise", a fatal exception, an abort) cancels
  everything not yet handed out; what is on workers ends through ``ended``.
  Cleanup tasks (run_if="all_done") are kept, and become due once every
  dependency ended in any state (:meth:`RunState._ended`), unless the stop is
  a hard one (a second Ctrl-C); a due one waits in the cleanup gate
  (:mod:`dagexec._state.cleanup_gate`) until no ancestor runs any more.
* Retries: a failed attempt that may be retried goes back to WAITING with a
  timer (a heap of due times on the driver's clock, which the driver passes in
  as ``now``: the machine reads no clock) and keeps its arguments; the driver
  releases its slot and resources as for any end, and :meth:`RunState.wake`
  makes it ready when it is due.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from .._core.errors import TaskTimeout
from .._core.plan import Plan
from .._core.policy import MISSING, Policy, backoff
from .._core.result import CANCELLED, DONE, FAILED, IN_FLIGHT, READY, SKIPPED, WAITING
from .._core.safe import add_note, str_for_message, task_for_message
from .cleanup_gate import CleanupGate
from .events import (
    DISPATCH,
    END,
    LET_GO,
    RELEASE,
    RETRY,
    RETURNED,
    TAKEN_BACK,
    TIMED_OUT,
    ChainEnd,
    Event,
)
from .events import READY as E_READY
from .fanout import Fanout

__all__ = ["HELD", "RunState"]


# A chain member handed out with its chain, not yet running. Not final.
HELD = 7

# Among tasks of equal priority, take the one that became ready last: a task
# whose inputs just appeared finishes a started branch before a new branch
# opens, so values are consumed soon after they are made (dask.order's aim;
# docs/graphs.md, "Priorities", has the measured peaks). False gives first-in first-out,
# kept for comparison (benchmarks/order.py).
DEPTH_FIRST = True

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
        # (then these become lists; see _fanout.py).
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
        # Per-task policy (retries, timeouts, cleanup tasks); all of it None or
        # empty when no task has one, and then never looked at.
        self.policy: Sequence[Policy | None] | None = plan.policy
        self.cleanup: bytearray | None = None  # 1 for run_if="all_done" tasks
        self.hard = False  # a hard stop (a second Ctrl-C): cleanup tasks are cancelled too
        self.attempt: dict[int, int] = {}  # task -> its current attempt, once retried
        self.retries = 0  # retry attempts made (RunStats.retries)
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
        # take(): remove and return the next task to hand out, or -1 if none can go
        # now. Call only while ``has_ready()``. A task taken holds its resources
        # until :meth:`release`; it must be passed to :meth:`dispatch` next. Without
        # ranks or resources it is the deque's own pop: no Python frame per task.
        self.take: Callable[[], int] = (
            self._take_ranked if self.keyed else ready.pop if self.depth_first else ready.popleft
        )
        self.resource_names: tuple[str, ...] = ()
        self.peak_held: list[float] = []
        if plan.needs is not None:
            self._init_resources(plan.needs, capacity or {})
        self.became_ready = self._make_ready
        self.fanout: Fanout | None = None
        if plan.maps is not None:
            self.fanout = Fanout(self, plan.maps)
            self.became_ready = self.fanout.ready
        # With nothing to rank, expand, tell or retry, ended() takes its plain
        # path: a task that became ready is only pushed, inline.
        self.plain = (
            self.fanout is None and not self.keyed and self.events is None and self.policy is None
        )
        for r in self._push_order(plan.roots):
            self._make_ready(r)

    def _init_resources(
        self, needs: tuple[tuple[tuple[str, float], ...], ...], capacity: Mapping[str, float]
    ) -> None:
        names = sorted({r for need in needs for r, _ in need})
        rid = {r: i for i, r in enumerate(names)}
        self.resource_names = tuple(names)
        # Exact numbers (see exact): free is always capacity minus what is held.
        self.capacity = [exact(capacity.get(r, 0)) for r in names]
        self.free = list(self.capacity)
        self.peak_held = [0] * len(names)
        # Held by attempts the run let go of (timed out, still running) or by
        # abandoned attempts of earlier runs: not free, and not this run's to count.
        self.lent_out: list[float] = [0] * len(names)
        self.needs = tuple(tuple((rid[r], exact(a)) for r, a in need) for need in needs)
        # Per resource, a heap of the entries waiting for it.
        self.blocked: list[list[tuple[Any, ...]]] = [[] for _ in names]
        self.parked: dict[int, int] = {}  # task -> the resource it waits for
        self.since: dict[int, int] = {}  # task -> ``taken`` when it first waited
        self.oldest: deque[int] = deque()  # tasks in the order they first waited
        self.taken = 0  # tasks that took resources so far
        self.reserving = -1  # the task everyone else's resources are kept for, or -1

    # ---------------------------------------------------------------- readiness
    def _make_ready(self, task: int) -> None:
        gate = self.gate
        if gate is not None and gate.holds(task):
            return  # a cleanup task whose ancestors still run: it waits, WAITING
        self.state[task] = READY
        self._push_ready(task)
        if self.events is not None:
            self.events.append(Event(E_READY, task))

    def _push_ready(self, task: int) -> None:
        """Put a READY ``task`` into the ready set, where its rank says."""
        if self.keyed:
            heapq.heappush(self.ready, self._order_key(task))
        else:
            self.ready.append(task)

    def _push_order(self, tasks: Sequence[int]) -> Sequence[int]:
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
            lacking = self._lacking(task, needs[task])
            if lacking < 0:
                self._hold(needs[task])
                self.taken += 1
                self.since.pop(task, None)  # it waits no more
                if self.reserving == task:
                    self.reserving = -1  # it has what it waited for: the rest may go
                    for r in range(len(self.free)):
                        self._wake_fitting(r)
                self._check_patience()
                return task
            self._park(entry, lacking)
        return -1

    def _lacking(self, task: int, need: tuple[tuple[int, float], ...]) -> int:
        """The first resource ``task`` cannot have now, or -1 if it may take them all."""
        free, holder = self.free, self.reserving
        kept = () if holder < 0 or holder == task else self._needs(holder)
        for r, amount in need:
            if amount > free[r] or r in kept:
                return r
        return -1

    def _needs(self, task: int) -> tuple[int, ...]:
        assert self.needs is not None
        return tuple(r for r, _ in self.needs[task])

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

    def _unhold(self, need: tuple[tuple[int, float], ...]) -> None:
        free = self.free
        for r, amount in need:
            free[r] += amount
        if self.stopping and self.cleanup is None:  # else cleanup tasks may wait for them
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

    def _wake_fitting(self, r: int) -> None:
        """Wake the best tasks waiting for ``r`` that now fit, in rank order; the
        rest stay behind the first that does not."""
        waiting, room, ready = self.blocked[r], self.free[r], self.ready
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
        assert self.needs is not None
        if task not in self.parked:
            return  # already woken
        free = self.free
        if any(amount > free[r] for r, amount in self.needs[task]):
            return
        waiting = self.blocked[self.parked.pop(task)]
        entry = next(e for e in waiting if e[-1] == task)
        waiting.remove(entry)
        heapq.heapify(waiting)
        heapq.heappush(self.ready, entry)

    def _need_of(self, task: int, r: int) -> float:
        assert self.needs is not None
        for q, amount in self.needs[task]:
            if q == r:
                return amount
        return 0

    # ---------------------------------------------------------------- dispatch
    def dispatch(self, task: int, worker: int) -> tuple[Any, ...]:
        """Mark ``task`` (and its chain, if it heads one) handed out; return its arguments.

        Each dependency now has one consumer fewer; a value nobody else needs is
        dropped here, so only the returned tuple holds it.
        """
        return self.dispatch_all([task], worker)[0]

    def hand_out(
        self, n: int, worker: int, idle: bool = True
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """Take up to ``n`` tasks for ``worker`` and dispatch them: the tasks, in the
        order taken, and their arguments. Fewer than ``n`` only if the rest of the
        ready tasks wait for resources (or fewer are ready).

        Resources are held while tasks run, not while they wait in an inbox: a
        task that needs any goes out only first in the batch of an ``idle`` worker
        (nothing queued or running on it), so it starts at once; the ones behind
        it hold nothing. A busy worker gets tasks only until the next to go needs
        a resource, which keeps the run's order.
        """
        take, ready = self.take, self.ready
        tasks: list[int]
        if self.stacked:
            # The top n, last pushed first: what n pops would take, in two C-level
            # slices instead of a Python loop per task.
            if n <= 0:
                return [], []
            tasks = ready[-n:]
            del ready[-n:]
            tasks.reverse()
            return tasks, self.dispatch_all(tasks, worker)
        tasks = []
        if self.needs is not None:  # see above: held while running
            while len(tasks) < n and ready:
                task = self._take_ranked(idle and not tasks)
                if task < 0:
                    break
                tasks.append(task)
            return tasks, self.dispatch_all(tasks, worker)
        while len(tasks) < n and ready:
            task = take()
            if task < 0:
                break
            tasks.append(task)
        return tasks, self.dispatch_all(tasks, worker)

    # Over ruff's complexity limit on purpose: the per-task hot path: a split adds
    # a call per task (docs/speed-gate.md).
    def dispatch_all(self, tasks: list[int], worker: int) -> list[tuple[Any, ...]]:  # noqa: C901
        """:meth:`dispatch` for several tasks at once (one call for a worker's batch):
        mark them handed out, and return their arguments in order."""
        values, consumers = self.values, self.consumers
        deps, state, chain_next = self.deps, self.state, self.chain_next
        items, policy, kept = self.items, self.policy, self.kept_args
        out: list[tuple[Any, ...]] = []
        for task in tasks:
            state[task] = IN_FLIGHT
            follower = chain_next[task]
            while follower >= 0:
                state[follower] = HELD
                follower = chain_next[follower]
            if policy is not None and task in kept:  # a retry: the same arguments again
                out.append(kept[task])
                continue
            task_deps = deps[task]
            # One or two dependencies are the commonest cases: a loop costs an
            # iterator and a comprehension a frame (3.11); measured ~3% of the
            # instructions per task on the layered scale graph.
            # The values read are let go of here, inline: _let_go's loop, without
            # a call per task (measured: a call per batch is +1.0 scheduler call
            # per task on the wide graph, whose batches are mostly of one task).
            args: tuple[Any, ...]
            if len(task_deps) == 1:
                d = task_deps[0]
                args = (values[d],)
                left = consumers[d] - 1
                consumers[d] = left
                if not left:
                    values[d] = None
            else:
                if len(task_deps) == 2:
                    args = (values[task_deps[0]], values[task_deps[1]])
                else:
                    args = tuple([values[d] for d in task_deps])
                for d in task_deps:
                    left = consumers[d] - 1
                    consumers[d] = left
                    if not left:
                        values[d] = None
            if items is not None and task in items:  # a map's item: element first
                args = (items.pop(task), *args)
            if policy is not None:
                task_policy = policy[task]
                if task_policy is not None and task_policy.retries:
                    kept[task] = args  # a retry needs them again
            out.append(args)
        self.in_flight += len(tasks)
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        if self.gate is not None:
            for task in tasks:
                self.gate.attempt_began(task)
        if self.events is not None:
            attempt = self.attempt.get
            self.events.extend(
                [Event(DISPATCH, task, worker, 0, 0.0, 0.0, attempt(task, 1)) for task in tasks]
            )
        return out

    def _let_go(self, used: Sequence[int]) -> None:
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

    def release(self, task: int, attempt: int = 0, how: int = RETURNED) -> None:
        """The item headed by ``task`` is off its worker: free its slot and resources.

        Chain members that never ran are cancelled here. ``attempt`` is the number
        of the attempt let go (0: the task's current one); ``how`` is a RELEASE
        event's state, for the observers.
        """
        if self.tell_release:
            assert self.events is not None
            number = attempt or self.attempt.get(task, 1)
            self.events.append(Event(RELEASE, task, -1, how, 0.0, 0.0, number))
        self.in_flight -= 1
        if self.needs is not None and self.needs[task]:
            self._unhold(self.needs[task])
        follower = self.chain_next[task]
        while follower >= 0:
            # Reported ends came first: a member not final now never ran.
            if self.state[follower] == HELD or self.state[follower] == IN_FLIGHT:
                self.finish(follower, CANCELLED)
            follower = self.chain_next[follower]
        if self.gate is not None and how != LET_GO:  # a let-go attempt still runs
            self.gate.attempt_returned(task)

    def let_go_returned(self, task: int) -> None:
        """An attempt of ``task`` that the run let go of at its timeout (LET_GO) has
        returned on its own thread: for the cleanup gate, it runs no more."""
        if self.gate is not None:
            self.gate.attempt_returned(task)
            self.gate.recheck()

    def put_back(self, task: int, args: tuple[Any, ...]) -> bool:
        """The item headed by ``task`` was taken back before it started, in a stop
        that is not an abort's hard one: a cleanup task goes back to the ready
        set with its arguments, to run all the same (True). Anything else is
        not put back (False): cancel it with :meth:`take_back`."""
        cleanup = self.cleanup
        if cleanup is None or self.hard or task >= len(cleanup) or not cleanup[task]:
            return False
        self.kept_args[task] = args
        self.release(task)
        self._make_ready(task)  # it passed the gate already: it is not held again
        return True

    def cleanup_pending(self) -> bool:
        """Whether some cleanup task of the run has not ended yet."""
        return self.gate is not None and self.gate.pending()

    # ------------------------------------------------------------------ finish
    # Over ruff's complexity limit on purpose: the per-task hot path: a split adds
    # a call per task (docs/speed-gate.md).
    def ended(  # noqa: C901
        self,
        reports: list[tuple[Any, ...]],
        outcome: int = DONE,
        release: bool = True,
        passed_on: Sequence[int] = (),
    ) -> None:
        """Tasks ended as ``outcome``: the one place a task ends (the only writer of
        a final state). ``reports`` are end records ``(worker, task, kind, payload,
        started, ended)`` in order, as workers send them (``kind`` is the sender's
        and not read here); ``payload`` is the value (DONE) or the exception
        (FAILED). A DONE task keeps its value if anyone needs it and brings its
        dependents one dependency nearer to ready; with ``release``, each was a job
        (one task, not a chain) and is off its worker as well.

        DONE comes in batches, a call per batch and not per task: on graphs of
        tiny tasks the calls were a good part of the scheduler's time. Any other
        outcome comes one task at a time (:meth:`finish`); with a retry policy a
        failed attempt may instead send the task back to wait for its retry.

        ``passed_on``: in a plain run, the members of a chain before the one
        reported, which returned on the reporting worker and passed their values
        on there: DONE, with no value to keep and nobody to make ready (see
        :meth:`chain_ended`).
        """
        state = self.state
        if outcome != DONE:
            ((worker, task, _, payload, started, ended_at),) = reports
            if self.policy is not None and self.policy[task] is not None:
                if outcome == FAILED and self._retry(task, payload, worker, started, ended_at):
                    return
                self.kept_args.pop(task, None)
            state[task] = outcome
            self.unfinished -= 1
            self._ended_without_value(task, outcome, payload, worker, started, ended_at)
            return
        if self.plain and not self.stopping:
            # A plain run (see ``plain``) that is not stopping: the steps of
            # _returned() without the tests such a run always passes (no policy,
            # resources, maps or events; nothing to clean up after), inline.
            ran_on, values, consumers = self.ran_on, self.values, self.consumers
            chain_next, dependents, remaining = self.chain_next, self.dependents, self.remaining
            ready, depth_first = self.ready, self.depth_first
            push = ready.append
            if passed_on:
                for member in passed_on:
                    state[member] = DONE
                ran_on[reports[0][0]] += len(passed_on)
                self.unfinished -= len(passed_on)
            for worker, task, _, value, _, _ in reports:
                state[task] = DONE
                if worker >= 0:
                    ran_on[worker] += 1
                if consumers[task]:
                    values[task] = value
                follower = chain_next[task]
                if follower >= 0:  # a chain member: the next one, on its worker, runs now
                    state[follower] = IN_FLIGHT
                    continue
                pushed = 0
                for d in dependents[task]:
                    left = remaining[d] - 1
                    remaining[d] = left
                    if not left and state[d] == WAITING:
                        state[d] = READY
                        push(d)
                        pushed += 1
                if pushed > 1 and depth_first:
                    # Last-first, as _push_order() says, so that depth-first order
                    # takes the first one first: the few just pushed are turned
                    # around in place. Most tasks make at most one user ready, so
                    # this beats reversing every task's users up front (a new tuple
                    # each: ~5% of the scheduler's samples on the million-task graph).
                    ready[-pushed:] = ready[: -pushed - 1 : -1]
            self.unfinished -= len(reports)
            if release:
                self.in_flight -= len(reports)
            return
        assert not passed_on, "passed_on is for a plain run that is not stopping"
        for report in reports:
            state[report[1]] = DONE
        self._returned(reports, release)

    # Over ruff's complexity limit on purpose: the per-task hot path: a split adds
    # a call per task (docs/speed-gate.md).
    def _returned(self, reports: list[tuple[Any, ...]], release: bool) -> None:  # noqa: C901
        """What follows for tasks that :meth:`ended` DONE (their state is written),
        in a run that is not plain or is stopping."""
        policy, kept, state, ran_on = self.policy, self.kept_args, self.state, self.ran_on
        values, consumers, events = self.values, self.consumers, self.events
        chain_next, dependents, remaining = self.chain_next, self.dependents, self.remaining
        needs, became_ready, depth_first = self.needs, self.became_ready, self.depth_first
        for worker, task, _, value, started, ended in reports:
            if policy is not None and policy[task] is not None:
                kept.pop(task, None)
            if worker >= 0:  # not a map assembled by the scheduler
                ran_on[worker] += 1
            if consumers[task]:
                values[task] = value
            if events is not None:
                events.append(Event(END, task, worker, DONE, started, ended))
            follower = chain_next[task]  # -1 for a job (a chain goes out whole)
            if self.stopping:
                if self.cleanup is not None:
                    self._ended(task, values[task])
            elif follower >= 0:  # a chain member: the next one, on its worker, runs now
                if state[follower] == HELD:  # not DONE in this same batch
                    state[follower] = IN_FLIGHT
            else:
                users = dependents[task]
                if depth_first and len(users) > 1:
                    users = self._push_order(users)
                for d in users:
                    left = remaining[d] - 1
                    remaining[d] = left
                    if not left and state[d] == WAITING:
                        became_ready(d)
            if release and needs is not None and needs[task]:
                self._unhold(needs[task])
            if release and self.gate is not None:
                self.gate.attempt_returned(task)
        self.unfinished -= len(reports)
        if release:
            self.in_flight -= len(reports)
            if self.tell_release:
                assert events is not None
                number = self.attempt.get
                events.extend(
                    [Event(RELEASE, r[1], -1, RETURNED, 0.0, 0.0, number(r[1], 1)) for r in reports]
                )
        if self.gate is not None:
            self.gate.recheck()

    def finish(
        self,
        task: int,
        outcome: int,
        payload: Any = None,
        worker: int = -1,
        started: float = 0.0,
        ended: float = 0.0,
    ) -> None:
        """``task`` ended as ``outcome`` (DONE, FAILED, SKIPPED or CANCELLED):
        :meth:`ended` for one task. ``payload`` is the value (DONE) or the exception
        (FAILED); ``worker`` and the stamps are the worker's, for tasks that ran."""
        self.ended([(worker, task, outcome, payload, started, ended)], outcome, False)

    def _ended_without_value(
        self, task: int, outcome: int, payload: Any, worker: int, started: float, ended: float
    ) -> None:
        """What follows for a task that :meth:`ended` FAILED, SKIPPED or CANCELLED."""
        if outcome == FAILED:
            if worker >= 0:
                self.ran_on[worker] += 1
            self._failed(task, payload, worker, started, ended)
        else:
            # A skipped task will never consume its dependencies' values (an
            # expanded map let go of them when it expanded: see Fanout.skipped).
            if outcome == SKIPPED and (self.fanout is None or not self.fanout.skipped(task)):
                self._let_go(self.deps[task])
            if self.events is not None:
                self.events.append(Event(END, task, -1, outcome))
            if self.cleanup is not None:
                self._ended(task, MISSING)
        if self.gate is not None:
            self.gate.recheck()

    def _ended(self, task: int, value: Any) -> None:
        """``task`` ended without readying its dependents (it failed, was skipped or
        cancelled, or the run is stopping): cleanup tasks count it as ended anyway.

        ``value`` is what they receive for it: its value, its exception, or MISSING.
        """
        cleanup, remaining, state = self.cleanup, self.remaining, self.state
        assert cleanup is not None
        wanted = False
        # A copy: a cleanup map that expands here takes itself out of this list.
        for d in tuple(self.dependents[task]):
            if d < len(cleanup) and cleanup[d] and state[d] == WAITING:
                wanted = True
                left = remaining[d] - 1
                remaining[d] = left
                if not left and not self.hard:
                    self.became_ready(d)  # a map (run_if="all_done") expands
        if wanted and self.consumers[task]:
            self.values[task] = value

    def _retry(
        self, task: int, exc: BaseException, worker: int, started: float, ended: float
    ) -> bool:
        """Send ``task`` back to wait for another attempt, if its policy allows; True if so."""
        policy = self.policy[task]  # type: ignore[index]
        assert policy is not None
        attempt = self.attempt.get(task, 1)
        if (
            attempt > policy.retries
            or (self.stopping and not (self.cleanup is not None and self.cleanup[task]))
            or self.hard
            or not isinstance(exc, Exception)
            or not isinstance(exc, policy.retry_on)
        ):
            if attempt > 1:
                add_note(exc, f"dagexec: failed on attempt {attempt} (retries={policy.retries})")
            return False
        self.attempt[task] = attempt + 1
        self.retries += 1
        if worker >= 0:
            self.ran_on[worker] += 1
        delay = backoff(policy.retry_delay, attempt, self.rand)
        if self.log is not None:
            self.log(
                "task %s failed (attempt %d of %d: %s: %s); retrying in %.3g s",
                task_for_message(self.names[task]),
                attempt,
                policy.retries + 1,
                type(exc).__name__,
                str_for_message(exc),
                delay,
            )
        if self.events is not None:
            how = TIMED_OUT if isinstance(exc, TaskTimeout) else FAILED
            self.events.append(Event(RETRY, task, worker, how, started, ended, attempt))
        self.state[task] = WAITING  # holds no slot and no resource while it waits
        self.seq += 1
        heapq.heappush(self.timers, (self.now + delay, self.seq, task))
        return True

    def wake(self, now: float) -> float | None:
        """Make ready the tasks whose retry is due at ``now``; return when the next one
        is due, or None if no task waits for a retry."""
        timers, state = self.timers, self.state
        self.now = now
        if self.gate is not None:
            self.gate.expire(now)
        while timers and timers[0][0] <= now:
            task = heapq.heappop(timers)[2]
            if state[task] == WAITING:  # not cancelled while it waited
                self._make_ready(task)
        return timers[0][0] if timers else None

    def _failed(
        self, task: int, exc: BaseException, worker: int, started: float, ended: float
    ) -> None:
        # The task's own exception must reach the caller even when its name or
        # the exception itself is hostile (a raising __repr__ or __str__, odd
        # __notes__): nothing here may raise.
        name = task_for_message(self.names[task])
        add_note(exc, f"dagexec: raised by task {name}")
        self.errors[task] = exc
        if self.log is not None:
            self.log("task %s failed: %s: %s", name, type(exc).__name__, str_for_message(exc))
        # Its end is reported before the ends its failure causes (skips, cancels).
        if self.events is not None:
            self.events.append(Event(END, task, worker, FAILED, started, ended))
        if self.cleanup is not None:
            self._ended(task, exc)
        if self.on_error == "raise" or not isinstance(exc, Exception):
            self.fail(exc)
        else:
            self._skip_downstream(task)

    def _skip_downstream(self, failed: int) -> None:
        state, dependents = self.state, self.dependents
        stack = list(dependents[failed])
        while stack:
            d = stack.pop()
            if state[d] != WAITING and state[d] != HELD:
                continue
            if self.cleanup is not None and d < len(self.cleanup) and self.cleanup[d]:
                continue  # it runs anyway, once all its dependencies ended
            self.finish(d, SKIPPED)
            stack.extend(dependents[d])

    def chain_ended(self, members: tuple[int, ...], end: ChainEnd, worker: int) -> None:
        """A chain is off its worker: finish each member that ran and was not
        reported yet (a timed chain reports members as they end), then release it."""
        done, ok, outcome, times = end
        last = len(members) - 1
        if done > last and times is None and self.plain and not self.stopping:
            # The usual chain in a plain run: every member returned, and reports
            # only now (untimed). A member before the last passed its value on, on
            # the worker, so it keeps none and readies nobody; no resources to
            # free, no member left to cancel: ended() in one call, released (the
            # chain is one item in flight). Measured: without this path the chain
            # workload makes 1.9x the scheduler calls per task.
            last_report = [(worker, members[last], DONE, outcome, 0.0, 0.0)]
            self.ended(last_report, DONE, True, members[:last])
            return
        returned = []  # one batch for the members that returned, as for jobs
        for k in range(done):
            member = members[k]
            if self.state[member] == DONE:  # reported as it ended
                continue
            t0, t1 = (times[2 * k], times[2 * k + 1]) if times is not None else (0.0, 0.0)
            returned.append((worker, member, DONE, outcome if k == last else None, t0, t1))
        if returned:
            self.ended(returned, DONE, release=False)
        if not ok:
            t0, t1 = (times[2 * done], times[2 * done + 1]) if times is not None else (0.0, 0.0)
            self.finish(members[done], FAILED, outcome, worker, t0, t1)
        del outcome
        self.release(members[0])

    # -------------------------------------------------------------------- stop
    def fail(self, exc: BaseException) -> None:
        """Stop the run; ``exc`` is what the caller gets unless an earlier error is.

        A fatal exception (``KeyboardInterrupt``, ``SystemExit``: not an
        ``Exception``) outranks an ordinary one that came first, since the caller
        must not lose it.
        """
        first = self.first_error
        if first is None or (isinstance(first, Exception) and not isinstance(exc, Exception)):
            self.first_error = exc
        self.stop()

    def stop(self, hard: bool = False) -> None:
        """Hand nothing more out; cancel every task not handed out yet.

        Cleanup tasks (run_if="all_done") are kept, and run once their
        dependencies ended, unless ``hard`` (a second Ctrl-C: the caller has gone).
        """
        if self.stopping and (self.hard or not hard):
            return
        self.stopping = True
        self.hard = hard
        if not self.unfinished:
            return  # every task has ended (a run's normal end): nothing to scan for
        cleanup, state = self.cleanup, self.state
        keep: list[int] = []
        if cleanup is not None and not hard:
            keep = [t for t in range(len(cleanup)) if cleanup[t] and state[t] == READY]
        self.ready.clear()
        if self.needs is not None:
            for waiting in self.blocked:
                waiting.clear()
            self.parked.clear()
            self.since.clear()
            self.reserving = -1
        for task in range(len(state)):
            if state[task] <= READY:
                if cleanup is not None and not hard and task < len(cleanup) and cleanup[task]:
                    continue
                self.finish(task, CANCELLED)
        if self.timers:  # tasks cancelled while waiting for a retry wait no more
            self.timers = [t for t in self.timers if state[t[2]] == WAITING]
            heapq.heapify(self.timers)
        for task in keep:  # ready before the stop: still ready
            self._push_ready(task)

    def stuck_error(self) -> RuntimeError:
        """The error for a run with unfinished tasks, none in flight and none that
        can be handed out: a bug (the run could never end), never to be hidden as a
        cancel. Names the first stuck tasks, their states and what they wait for."""
        words = {WAITING: "waiting", READY: "ready", HELD: "held in a chain"}
        stuck = [t for t, code in enumerate(self.state) if code in words]
        described = []
        for t in stuck[:5]:
            text = f"{task_for_message(self.names[t])} ({words[self.state[t]]}"
            if self.needs is not None and t in self.parked:
                r = self.parked[t]
                text += (
                    f", waits for {float(self._need_of(t, r)):g} of resource "
                    f"{self.resource_names[r]!r}, {float(self.free[r]):g} free of "
                    f"{float(self.capacity[r]):g}"
                )
            described.append(text + ")")
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        return RuntimeError(
            f"dagexec internal error: {self.unfinished} tasks can never start, though "
            f"nothing is running: {', '.join(described)}{more}; the run was stopped. "
            "Please report this bug with the graph that shows it"
        )

    def take_back(self, task: int) -> None:
        """The item headed by ``task`` was taken back before it started: cancel it."""
        self.finish(task, CANCELLED)
        self.release(task, how=TAKEN_BACK)

    def lend(self, needs: Sequence[tuple[str, float]]) -> tuple[tuple[int, float], ...]:
        """What an attempt of an earlier run still holds (it was abandoned and runs on):
        not free in this run until :meth:`give_back`. Returns the part of ``needs``
        this run knows, in its own terms (empty if none)."""
        if self.needs is None:
            return ()
        rid = {r: i for i, r in enumerate(self.resource_names)}
        lent = tuple((rid[r], exact(a)) for r, a in needs if r in rid)
        for r, amount in lent:
            self.free[r] -= amount
            self.lent_out[r] += amount
        return lent

    def give_back(self, lent: tuple[tuple[int, float], ...]) -> None:
        """The attempt :meth:`lend` was for returned: its resources are free again."""
        for r, amount in lent:
            self.lent_out[r] -= amount
        self._unhold(lent)

    def peak_resources(self, capacity: Mapping[str, float]) -> dict[str, float]:
        """Resource name -> most of it held at once, for every name in ``capacity``."""
        peaks: dict[str, float] = dict.fromkeys(capacity, 0)
        for name, held in zip(self.resource_names, self.peak_held, strict=True):
            peak = float(held)
            peaks[name] = int(peak) if peak.is_integer() else peak
        return peaks
