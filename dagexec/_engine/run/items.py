"""What a worker is handed, built from what the run state hands out, for the driver.

A plain job is a tuple (see ``wire.Job``); a task with a policy, or a
chain, needs more (:func:`special_items`). Runs without a policy build a whole
batch in one list comprehension (:func:`plain_jobs`, :func:`chained_jobs`): that
is the hot path.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from ..._core.safe import task_for_message
from ..._state.runstate import RunState
from ..workers.wire import J_TASK, NOTIFY_START, Chain, Item, Message
from .timers import AttemptTimers

__all__ = ["chained_jobs", "head", "log_dispatch", "plain_jobs", "special_items", "take_back"]

log = logging.getLogger("dagexec")

# _ONE_EACH: a batch's tasks and arguments are zipped without ``strict=True``, whose
# keyword alone costs ~1,600 instructions per batch (parsed in C; cachegrind):
# ``RunState.hand_out`` returns one tuple of arguments per task, by construction.


class Dispatcher(Protocol):
    """What every job carries, as the driver (:mod:`.driver`) holds it: named here
    by what is read, not by the class, which imports this module."""

    @property
    def state(self) -> RunState: ...
    @property
    def results(self) -> queue.SimpleQueue[Message]: ...
    @property
    def flags(self) -> int: ...
    @property
    def stop(self) -> threading.Event: ...
    @property
    def hard_stop(self) -> threading.Event | None: ...
    @property
    def context(self) -> contextvars.Context | None: ...
    @property
    def timers(self) -> AttemptTimers | None: ...
    @property
    def cap(self) -> int: ...


def head(item: Item) -> int:
    """The task an item stands for in the run state: a job's, or a chain's first."""
    return item.tasks[0] if isinstance(item, Chain) else item[J_TASK]


def plain_jobs(
    driver: Dispatcher, tasks: Sequence[int], arguments: Sequence[tuple[Any, ...]]
) -> list[Item]:
    """One plain job per task handed out.

    Filled in by index, not by a comprehension, whose function and frame (3.11)
    are made once per worker's batch, the most of a small run's; nor by
    ``append``, a call per task that the speed gate counts (measured in
    docs/performance.md, "The jobs filled in by index").
    """
    fns, report, flags = driver.state.fns, driver.results.put, driver.flags
    stop, context = driver.stop, driver.context
    n = len(tasks)
    items: list[Item] = [None] * n  # type: ignore[list-item]  # each set below
    for i in range(n):
        task = tasks[i]
        items[i] = (report, task, fns[task], arguments[i], flags, stop, context)
    return items


def special_items(
    driver: Dispatcher, tasks: Sequence[int], arguments: Sequence[tuple[Any, ...]]
) -> list[Item]:
    """One item per task handed out: an attempt of a task with a policy (wrapped so
    that it sees itself through ``current_task()``), a chain, or a plain job."""
    state, timers = driver.state, driver.timers
    policies, chain_next, fns = state.policy, state.chain_next, state.fns
    report, flags, stop, context = driver.results.put, driver.flags, driver.stop, driver.context
    items: list[Item] = []
    for task, args in zip(tasks, arguments):  # noqa: B905 (see _ONE_EACH)
        policy = None if policies is None else policies[task]
        if policy is not None:
            assert timers is not None  # a run whose plan has a policy has timers
            fn, extra = timers.attempt(task, policy, NOTIFY_START)
            # A cleanup task still starts after a cancel or a first Ctrl-C.
            flag = driver.hard_stop if policy.cleanup else stop
            assert flag is not None  # a run with cleanup tasks has its hard stop
            items.append((report, task, fn, args, flags | extra, flag, context))
            del fn
        elif chain_next[task] < 0:
            items.append((report, task, fns[task], args, flags, stop, context))
        else:
            items.append(_chain(driver, task, args))
    return items


def chained_jobs(
    driver: Dispatcher, tasks: Sequence[int], arguments: Sequence[tuple[Any, ...]]
) -> list[Item]:
    """:func:`special_items` for a run with chains but no task policy: one list
    comprehension, like :func:`plain_jobs`, since most tasks head no chain (a
    million-task random graph has chains, and the loop cost ~4% of the driver)."""
    fns, chain_next, report = driver.state.fns, driver.state.chain_next, driver.results.put
    flags, stop, context = driver.flags, driver.stop, driver.context
    return [
        (report, task, fns[task], args, flags, stop, context)
        if chain_next[task] < 0
        else _chain(driver, task, args)
        for task, args in zip(tasks, arguments)  # noqa: B905 (see _ONE_EACH)
    ]


def _chain(driver: Dispatcher, task: int, args: tuple[Any, ...]) -> Chain:
    """The chain that ``task`` heads, as one item."""
    chain_next, fns = driver.state.chain_next, driver.state.fns
    members = [task]
    while chain_next[members[-1]] >= 0:
        members.append(chain_next[members[-1]])
    unit = tuple([fns[m] for m in members])
    return Chain(
        driver.results.put, tuple(members), unit, args, driver.flags, driver.stop, driver.context
    )


def take_back(driver: Dispatcher, items: list[Item]) -> None:
    """Return items that were built but never put into an inbox to the run state."""
    for item in items:
        if driver.timers is not None:
            driver.timers.forget(head(item))
        driver.state.take_back(head(item))


def log_dispatch(driver: Dispatcher, items: list[Item], worker: int) -> None:
    """The DEBUG line of one batch: which tasks went to which worker."""
    state = driver.state
    log.debug(
        "dispatch %s to worker %d (in flight %d of %d)",
        ", ".join(task_for_message(state.names[head(item)]) for item in items),
        worker,
        state.in_flight,
        driver.cap,
    )
