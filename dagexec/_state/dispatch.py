"""Handing tasks out and taking their items back: the run's in-flight side.

Part of the run state machine, and as pure: the top layer of ``RunState``
(over ``ending.py``: an item taken back, or a chain's member that never ran,
is cancelled). :meth:`Dispatching.dispatch_all` marks tasks handed out (a
chain's members HELD) and returns their arguments, letting go inline of values
nobody else needs (the rule is ``RunCore.let_go``'s);
:meth:`Dispatching.release` frees an item's in-flight slot and resources when
it is off its worker, whatever its end; :meth:`Dispatching.chain_ended` is a
chain off its worker.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from .._core.result import CANCELLED, DONE, FAILED, HELD, IN_FLIGHT
from .ending import Ending
from .events import DISPATCH, LET_GO, RELEASE, RETURNED, TAKEN_BACK, ChainEnd, Event

__all__ = ["Dispatching"]


class Dispatching(Ending):
    """A run whose tasks are handed out, and whose items come back off their workers."""

    __slots__ = ()

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
        ready = self.ready
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
        if not self.keyed:  # first-in first-out (DEPTH_FIRST off): a deque
            tasks = [ready.popleft() for _ in range(min(n, len(ready)))]
            return tasks, self.dispatch_all(tasks, worker)
        tasks = []
        while len(tasks) < n and ready:
            # Resources, if any, are held while running (see above).
            task = self._take_ranked(idle and not tasks)
            if task < 0:
                break
            tasks.append(task)
        return tasks, self.dispatch_all(tasks, worker)

    def dispatch_all(self, tasks: list[int], worker: int) -> list[tuple[Any, ...]]:
        """:meth:`dispatch` for several tasks at once (one call for a worker's batch):
        mark them handed out, and return their arguments in order."""
        values, consumers = self.values, self.consumers
        deps, state, chain_next = self.deps, self.state, self.chain_next
        kept = self.kept_args  # empty unless a task with retries= was handed out
        out: list[tuple[Any, ...]] = []
        for task in tasks:
            state[task] = IN_FLIGHT
            follower = chain_next[task]
            while follower >= 0:
                state[follower] = HELD
                follower = chain_next[follower]
            if kept and task in kept:  # a retry: the same arguments again
                out.append(kept[task])
                continue
            task_deps = deps[task]
            # One or two dependencies are the commonest cases: a loop costs an
            # iterator and a comprehension a frame (3.11); measured ~3% of the
            # instructions per task on the layered scale graph.
            # The values read are let go of here, inline: let_go's loop, without
            # a call per task (measured: a call per batch is +1.0 scheduler call
            # per task on the wide graph, whose batches are mostly of one task).
            if len(task_deps) == 1:
                d = task_deps[0]
                out.append((values[d],))
                left = consumers[d] - 1
                consumers[d] = left
                if not left:
                    values[d] = None
            elif task_deps:
                if len(task_deps) == 2:
                    out.append((values[task_deps[0]], values[task_deps[1]]))
                else:
                    # A tuple of three or more, by itemgetter (in C). Not a comprehension:
                    # its frame, and a cell for ``values`` made at every call of this
                    # method (3.11), even with no such task; nor map(): the speed gate's
                    # layered graph (a third of its tasks have three) read 16,232 ->
                    # 16,308 instructions per task with map, 15,677 with this.
                    out.append(itemgetter(*task_deps)(values))
                for d in task_deps:
                    left = consumers[d] - 1
                    consumers[d] = left
                    if not left:
                        values[d] = None
            else:  # a root: no comprehension's frame for nothing
                out.append(())
        # Map items, retries and cleanup tasks, in a pass of their own: tested in
        # the loop above, they cost ~6 bytecodes per task of every run (~0.5% of
        # the instructions per task of the speed gate's workloads, which have none).
        if self.items is not None or self.policy is not None:
            self._items_and_policies(tasks, out)
        self.in_flight += len(tasks)
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        if self.events is not None:
            self._tell_dispatched(tasks, worker)
        return out

    def _tell_dispatched(self, tasks: list[int], worker: int) -> None:
        """DISPATCH events for ``tasks``, handed to ``worker`` (an observed run's only):
        out of :meth:`dispatch_all`, whose every call made cells for the names this
        comprehension reads (3.11), observed run or not."""
        assert self.events is not None
        attempt = self.attempt.get
        self.events.extend(
            [Event(DISPATCH, task, worker, 0, 0.0, 0.0, attempt(task, 1)) for task in tasks]
        )

    def _items_and_policies(self, tasks: list[int], out: list[tuple[Any, ...]]) -> None:
        """:func:`dispatch_all`'s step for a run with maps or task policies: a map
        item's element goes first in its arguments, a task that may be retried
        keeps its arguments (``out[i]`` is ``tasks[i]``'s), and the cleanup gate
        (made only for a plan with policies) hears that each attempt began."""
        items, policy, kept, gate = self.items, self.policy, self.kept_args, self.gate
        for i, task in enumerate(tasks):
            if items is not None and task in items:
                out[i] = (items.pop(task), *out[i])
            if policy is not None:
                task_policy = policy[task]
                if task_policy is not None and task_policy.retries:
                    kept[task] = out[i]  # a retry needs them again (a retry's own: the same)
            if gate is not None:
                gate.attempt_began(task)

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
            assert self.resources is not None
            self.resources.unhold(self.needs[task])
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
        self.make_ready(task)  # it passed the gate already: it is not held again
        return True

    def take_back(self, task: int) -> None:
        """The item headed by ``task`` was taken back before it started: cancel it."""
        self.finish(task, CANCELLED)
        self.release(task, how=TAKEN_BACK)

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
