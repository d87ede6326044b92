"""The bottom of the run state machine: its columns, readiness and values.

:class:`RunCore` holds what one run knows about its tasks (a column per fact,
indexed by task) and the rules every other part builds on: the one place a task
becomes ready (:meth:`RunCore.make_ready`), where it goes in the ready set and
what is taken next (the dispatch order), and the one place a value is let go of
(:meth:`RunCore.let_go`). The parts above it (``columns.py``, ``retries.py``,
``ending.py``, ``attempts.py``, ``dispatch.py``) are subclasses, each adding its
own methods; ``runstate.py`` puts them together as ``RunState``. Each imports
only the parts below it: no module of the state layer imports one that imports
it back (tests/test_layers.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

from .._core.plan import Plan
from .._core.policy import Policy
from .._core.result import HELD, READY, WAITING
from .._core.safe import task_for_message
from .._core.task_options import TaskRecord
from .cleanup_gate import CleanupGate
from .events import READY as E_READY
from .events import Event
from .fanout import Fanout
from .resources import Resources

__all__ = ["RunCore"]


class RunCore:
    """The columns and counts of one run, its ready set and its values.

    Not thread-safe: one owner at a time. Declares every field of the run,
    once, as a slot; ``RunState.__init__`` (runstate.py) fills them all, the
    one constructor of the layers. Slots and not an instance dict: a dict of
    this many keys is no longer shared between instances, and filling it cost
    ~5 us per run, half of the state's making (docs/performance.md).
    """

    __slots__ = (
        "__weakref__",
        "attempt",
        "chain_next",
        "cleanup",
        "consumers",
        "dependents",
        "deps",
        "depth_first",
        "errors",
        "events",
        "fanout",
        "first_error",
        "fns",
        "gate",
        "hard",
        "in_flight",
        "index",
        "is_target",
        "items",
        "kept_args",
        "keyed",
        "log",
        "names",
        "needs",
        "now",
        "on_error",
        "options",
        "peak_in_flight",
        "plain",
        "plan",
        "policy",
        "priority",
        "ran_on",
        "rand",
        "ready",
        "remaining",
        "resource_names",
        "resources",
        "retries",
        "seq",
        "stacked",
        "state",
        "stopping",
        "tell_release",
        "timeouts",
        "timers",
        "unfinished",
        "values",
        "warn",
    )

    # The run's per-task option columns: a map's items copy their map's entry in
    # each (columns.Growing), so an option carried by the record needs nothing
    # here; one read per task gets a flat column only where that pays.
    OPTION_COLUMNS = ("options", "priority", "needs", "policy")

    plan: Plan
    # The pure state machine does not log: the engine hands in ``logger.info``
    # when a run starts with INFO enabled, and None (say nothing) otherwise.
    log: Callable[..., None] | None
    # Likewise for warnings (a cleanup task that stopped waiting for an ancestor):
    # ``logger.warning`` from the engine; a thread-free test may leave it out.
    warn: Callable[..., None]
    on_error: str
    # The run's tasks: the plan's, plus the items of maps once they expand
    # (then these are lists; see columns.py).
    names: Sequence[Hashable]
    index: Mapping[Hashable, int]
    fns: Sequence[Callable[..., Any]]
    deps: Sequence[tuple[int, ...]]
    dependents: Sequence[Sequence[int]]
    chain_next: Sequence[int]
    items: dict[int, Any] | None  # a map item's element, until dispatch
    state: bytearray
    values: list[Any]
    remaining: list[int]  # dependencies not yet DONE
    # Users not yet handed their arguments, plus one for a target (the caller):
    # a value is dropped when its count reaches 0, which a target's never does.
    consumers: list[int]
    is_target: bytes | bytearray
    unfinished: int  # tasks not in a final state
    in_flight: int  # items handed out and not released
    peak_in_flight: int
    ran_on: list[int]  # tasks that ran, per worker
    stopping: bool
    first_error: BaseException | None
    errors: dict[int, BaseException]
    events: list[Event] | None
    # RELEASE events, for on_attempt_release only: one more event per task.
    tell_release: bool
    # Each task's options (task_options.TaskRecord), or None when no task has
    # any; the ones read per task also as flat columns (see OPTION_COLUMNS).
    options: Sequence[TaskRecord] | None
    # Per-task policy (retries, timeouts, cleanup tasks); all of it None or
    # empty when no task has one, and then never looked at.
    policy: Sequence[Policy | None] | None
    cleanup: bytearray | None  # 1 for run_if="all_done" tasks
    hard: bool  # a hard stop (a second Ctrl-C): cleanup tasks are cancelled too
    attempt: dict[int, int]  # task -> its current attempt, once retried
    retries: int  # retry attempts made (RunStats.retries)
    timeouts: int  # attempts that ran past their timeout= (RunStats.timeouts)
    kept_args: dict[int, tuple[Any, ...]]  # retryable tasks' arguments
    timers: list[tuple[float, int, int]]  # heap of (due, seq, task) to retry
    now: float  # the driver's clock, for timers; the machine reads no clock
    rand: Callable[[], float]  # jitter; tests may fix it
    # What the plan may need (else None, never looked at): the cleanup gate
    # (cleanup_gate.py), resource accounts (resources.py) and the maps (fanout.py).
    gate: CleanupGate | None
    resource_names: tuple[str, ...]
    resources: Resources | None
    needs: Sequence[tuple[tuple[int, float], ...]] | None
    fanout: Fanout | None
    # Ready set: when nothing ranks tasks, a list used as a stack (depth
    # first) or a deque (first-in first-out); else a heap of (key..., task):
    # see _order_key.
    priority: Sequence[int] | None
    seq: int
    keyed: bool
    depth_first: bool
    # A plain stack: hand_out takes a worker's batch off its top in C.
    stacked: bool
    ready: Any
    # Nothing to rank, expand, tell or retry: ended() takes its plain path (see RunState).
    plain: bool

    # ---------------------------------------------------------------- readiness
    def make_ready(self, task: int) -> None:
        """``task`` can run now: the one place a task becomes READY and joins the
        ready set (a cleanup task whose ancestors still run waits in the gate)."""
        gate = self.gate
        if gate is not None and gate.holds(task):
            return  # a cleanup task whose ancestors still run: it waits, WAITING
        self.state[task] = READY
        if self.keyed:
            self._push_ranked(task)
        else:
            self.ready.append(task)  # stack or queue: the C method, no frame per task
        if self.events is not None:
            self.events.append(Event(E_READY, task))

    def became_ready(self, task: int) -> None:
        """Every dependency of ``task`` is done: a map's Fanout decides what that
        means for a map (it expands, or gathers); any other task is made ready."""
        if self.fanout is None:
            self.make_ready(task)
        else:
            self.fanout.ready(task)  # (``_returned`` chooses as here, once per batch)

    def _push_ranked(self, task: int) -> None:
        """Put a READY task into the ranked ready set (priorities or resources)."""
        heapq.heappush(self.ready, self._order_key(task))

    def push_order(self, tasks: Sequence[int]) -> Sequence[int]:
        """The order to make ``tasks`` ready in, so that they are taken in their own
        order: last-first under depth-first order (the last pushed goes first), as
        given otherwise. With :meth:`_order_key`, the one place the dispatch order
        is decided (the plain run's inline loop in ``ended`` turns its few
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

    def take(self, may_hold: bool = True) -> int:
        """Remove and return the next task to hand out, or -1 if none can go now.

        Call only while :meth:`has_ready`. A task taken holds its resources until
        ``release``; it must be passed to ``dispatch`` next. ``hand_out`` takes
        a worker's batch without a call per task; this is for one at a time.
        """
        if self.keyed:
            return self._take_ranked(may_hold)
        ready = self.ready
        task: int = ready.pop() if self.depth_first else ready.popleft()
        return task

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

    # ------------------------------------------------------------------ values
    def let_go(self, used: Sequence[int]) -> None:
        """Each of ``used`` (a task, once per user done with its value) has one
        consumer fewer; a value nobody else needs is dropped. The one place a value
        is released for users that will never read it (skipped, or a map that
        expanded or gathered); ``dispatch_all`` does the same inline for the
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

    # --------------------------------------------------------------- resources
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

    # ------------------------------------------------------------------ a bug
    def stuck_error(self) -> RuntimeError:
        """The error for a run with unfinished tasks, none in flight and none that
        can be handed out: a bug (the run could never end), never to be hidden as a
        cancel. Names the first stuck tasks, their states and what they wait for."""
        words = {WAITING: "waiting", READY: "ready", HELD: "held in a chain"}
        stuck = [t for t, code in enumerate(self.state) if code in words]
        described = []
        for t in stuck[:5]:
            text = f"{task_for_message(self.names[t])} ({words[self.state[t]]}"
            if self.resources is not None:
                text += self.resources.waits_for(t)
            described.append(text + ")")
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        return RuntimeError(
            f"dagexec internal error: {self.unfinished} tasks can never start, though "
            f"nothing is running: {', '.join(described)}{more}; the run was stopped. "
            "Please report this bug with the graph that shows it"
        )
