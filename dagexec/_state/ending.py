"""How tasks end: the one place a task reaches a final state, and what follows.

Part of the run state machine, and as pure: a layer of ``RunState`` (over
``retries.py``, since a failed attempt may be retried instead), so that the
rules stay in one place each (docs/design.md, "One place per rule"):

* :meth:`Ending.ended` is the only writer of DONE, FAILED, SKIPPED and
  CANCELLED; :meth:`Ending.finish` is it for one task (``chain_ended``, in
  ``dispatch.py``, hands a chain's members to it);
* :meth:`Ending._returned` is what follows a DONE outside a plain run, and
  :meth:`Ending._ended_without_value` what follows any other end;
* :meth:`Ending._ended` counts an end for the cleanup tasks that wait on it;
* :meth:`Ending.stop` (and :meth:`Ending.fail`) ends at once every task not
  handed out yet. A stop (a failure with on_error="raise", a fatal exception,
  an abort) cancels everything not yet handed out; what is on workers ends
  through :meth:`Ending.ended`. Cleanup tasks (run_if="all_done") are kept,
  unless the stop is a hard one (a second Ctrl-C).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from .._core.policy import MISSING
from .._core.result import CANCELLED, DONE, FAILED, HELD, IN_FLIGHT, READY, SKIPPED, WAITING
from .._core.safe import add_note, str_for_message, task_for_message
from .events import END, R_TASK, R_WORKER, RELEASE, RETURNED, Event, Report
from .retries import Retrying

__all__ = ["Ending"]


class Ending(Retrying):
    """A run whose tasks end: one at a time, in batches, or all at once in a stop."""

    __slots__ = ()

    # Over ruff's complexity limit on purpose: the per-task hot path: a split adds
    # a call per task (docs/performance.md, "The speed gate").
    def ended(  # noqa: C901
        self,
        reports: list[Report],
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
                if outcome == FAILED and self.retry(task, payload, worker, started, ended_at):
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
                passed = len(passed_on)  # (each len() is a call the speed gate counts)
                ran_on[reports[0][R_WORKER]] += passed
                self.unfinished -= passed
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
                    # Last-first, as push_order() says, so that depth-first order
                    # takes the first one first: the few just pushed are turned
                    # around in place. Most tasks make at most one user ready, so
                    # this beats reversing every task's users up front (a new tuple
                    # each: ~5% of the scheduler's samples on the million-task graph).
                    ready[-pushed:] = ready[: -pushed - 1 : -1]
            count = len(reports)
            self.unfinished -= count
            if release:
                self.in_flight -= count
            return
        assert not passed_on, "passed_on is for a plain run that is not stopping"
        for report in reports:
            state[report[R_TASK]] = DONE
        self._returned(reports, release)

    # Over ruff's complexity limit on purpose: the per-task hot path: a split adds
    # a call per task (docs/performance.md, "The speed gate").
    def _returned(self, reports: list[Report], release: bool) -> None:  # noqa: C901
        """What follows for tasks that :meth:`ended` DONE (their state is written),
        in a run that is not plain or is stopping."""
        policy, kept, state, ran_on = self.policy, self.kept_args, self.state, self.ran_on
        values, consumers, events = self.values, self.consumers, self.events
        chain_next, dependents, remaining = self.chain_next, self.dependents, self.remaining
        needs, depth_first = self.needs, self.depth_first
        became_ready = self.make_ready if self.fanout is None else self.fanout.ready
        resources = self.resources
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
                    users = self.push_order(users)
                for d in users:
                    left = remaining[d] - 1
                    remaining[d] = left
                    if not left and state[d] == WAITING:
                        became_ready(d)
            if release and needs is not None and needs[task]:
                assert resources is not None
                resources.unhold(needs[task])
            if release and self.gate is not None:
                self.gate.attempt_returned(task)
        count = len(reports)
        self.unfinished -= count
        if release:
            self.in_flight -= count
            if self.tell_release:
                self._tell_released(reports)
        if self.gate is not None:
            self.gate.recheck()

    def _tell_released(self, reports: list[Report]) -> None:
        """RELEASE events for the jobs in ``reports``, off their workers (only for
        ``on_attempt_release``: a call per batch in such runs alone)."""
        assert self.events is not None
        number = self.attempt.get
        self.events.extend(
            [
                Event(RELEASE, r[R_TASK], -1, RETURNED, 0.0, 0.0, number(r[R_TASK], 1))
                for r in reports
            ]
        )

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
        self,
        task: int,
        outcome: int,
        payload: Any,
        worker: int,
        started: float,
        ended: float,
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
                self.let_go(self.deps[task])
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
            self.skip_downstream(task)

    def skip_downstream(self, failed: int) -> None:
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

    # ------------------------------------------------------------------ a stop
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
        state = self.state
        spared = self._spared()
        keep = [t for t in spared if state[t] == READY]  # in task order, as before
        spared_set = set(spared)
        self.ready.clear()
        if self.resources is not None:
            self.resources.clear_waiting()
        for task in range(len(state)):
            if state[task] <= READY and task not in spared_set:
                self.finish(task, CANCELLED)
        self._drop_cancelled_timers()
        # Ready before the stop: still ready (make_ready's push, without its
        # gate and event: they passed the gate, and were told READY already).
        push = self._push_ranked if self.keyed else self.ready.append
        for task in keep:
            push(task)

    def _drop_cancelled_timers(self) -> None:
        """Tasks cancelled while waiting for a retry wait no more."""
        if self.timers:
            state = self.state
            self.timers = [t for t in self.timers if state[t[2]] == WAITING]
            heapq.heapify(self.timers)

    def _spared(self) -> list[int]:
        """The tasks a stop does not cancel: the cleanup tasks, unless it is hard."""
        cleanup = self.cleanup
        if cleanup is None or self.hard:
            return []
        return [t for t, flag in enumerate(cleanup) if flag]
