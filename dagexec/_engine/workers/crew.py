"""The executor's worker threads, one per slot, and the threads it had to let go.

A worker whose attempt timed out is still inside that attempt's function, and a
thread cannot be killed. So that N hung calls cannot freeze N workers, the driver
gives the slot a fresh inbox and a fresh thread (:meth:`Crew.replace`); the old
thread gets a STOP in its old inbox and exits once its function returns.

At most ``workers`` let-go threads may be alive at once: beyond that the slot
keeps its hung thread (the executor runs with fewer workers until it returns)
and a WARNING says so, so that a task that hangs forever cannot make the
executor start threads without end.

Called by the thread that drives the run, which is the inboxes' only producer
while it runs; ``inboxes`` and ``threads`` are the executor's own lists,
changed in place, so the executor, the stopper and the run see the new ones.

A worker's thread starts with the first item put into its inbox
(:meth:`Inbox.start_on_put`), not with the executor: it then finds its first
tasks waiting instead of sleeping until they come, one wake-up less, and a run
that never uses a slot (a chain, a one-task graph) never starts its thread.
That is what :func:`dagexec.run`, which makes a fresh executor per call, pays
for its threads (issue 20, step 6; docs/performance.md, "Small runs"). Once
the executor stops (``stopping``), an inbox's first item, its STOP, starts
nothing: a thread never started has nothing to end.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from .inbox import Inbox
from .wire import STOP, Item
from .worker import worker_loop

__all__ = ["Crew"]

log = logging.getLogger("dagexec")


class Crew:
    """Worker threads by slot; ``retired`` are those replaced while in a hung attempt."""

    __slots__ = (
        "blocked",
        "generation",
        "inboxes",
        "queue_cap",
        "retired",
        "stopping",
        "threads",
    )

    def __init__(self, workers: int, queue_cap: int) -> None:
        self.queue_cap = queue_cap
        # maxsize >= 1 was checked by the executor: Queue(maxsize=0) would be unbounded.
        self.inboxes: list[Inbox[Item | None]] = [Inbox(maxsize=queue_cap) for _ in range(workers)]
        self.threads = [self._thread(i, inbox) for i, inbox in enumerate(self.inboxes)]
        self.stopping = False  # set by the stopper before its STOPs: start no thread
        for inbox, thread in zip(self.inboxes, self.threads, strict=True):
            inbox.start_on_put(self._starter(thread))
        self.retired: list[threading.Thread] = []
        # Slots left to a hung thread (no new one was allowed), until its attempt's
        # function returns (the Event).
        self.blocked: dict[int, threading.Event] = {}
        self.generation = 0

    def blocked_slots(self) -> frozenset[int]:
        """Slots whose thread is still hung in an attempt and was not replaced; none
        if that is every slot (tasks then wait in the inboxes for a thread to return)."""
        if not self.blocked:  # the usual case, once per run: no dict to rebuild
            return frozenset()
        self.blocked = {s: done for s, done in self.blocked.items() if not done.is_set()}
        if len(self.blocked) >= len(self.threads):
            return frozenset()
        return frozenset(self.blocked)

    def _starter(self, thread: threading.Thread) -> Callable[[], None]:
        """What the first put into ``thread``'s inbox calls: start it, at most once."""

        def start() -> None:
            # ident is None until the thread runs: a start that raised (no thread
            # could be made, or a signal handler's exception) is tried again by
            # the next put, once the thread it may have made has run.
            if thread.ident is None and not self.stopping:
                thread.start()

        return start

    def _thread(self, slot: int, inbox: Inbox[Item | None], suffix: str = "") -> threading.Thread:
        return threading.Thread(
            target=worker_loop,
            args=(slot, inbox),
            name=f"dagexec-worker-{slot}{suffix}",
            daemon=True,
        )

    def replace(self, slot: int, why: str, done: threading.Event) -> bool:
        """Give ``slot`` a new inbox and thread, moving what waits there; False if the
        executor already let ``workers`` threads go that are still alive.

        The old thread must be inside a hung attempt that waits for the caller's
        go-ahead before its thread takes another item (``LiveAttempt.decided``);
        ``done`` is set when it returns.
        """
        self.retired = [t for t in self.retired if t.is_alive()]
        if len(self.retired) >= len(self.threads):
            self.blocked[slot] = done
            log.warning(
                "worker %d stays blocked by %s: %d replaced workers are still blocked, "
                "so no new thread is started; the executor runs with fewer workers until "
                "they return (a timeout cannot stop a thread: use isolate='process' for work "
                "that must really stop)",
                slot,
                why,
                len(self.retired),
            )
            return False
        old = self.inboxes[slot]
        new: Inbox[Item | None] = Inbox(maxsize=self.queue_cap)
        while True:
            try:
                item = old.get_nowait()
            except queue.Empty:
                break
            new.put_nowait(item)  # same capacity, and the new inbox was empty
        old.put_nowait(STOP)  # emptied above: the old thread exits after its attempt
        self.generation += 1
        thread = self._thread(slot, new, f"-{self.generation}")
        self.inboxes[slot] = new
        self.retired.append(self.threads[slot])
        self.threads[slot] = thread
        thread.start()
        self.blocked.pop(slot, None)
        log.warning(
            "worker %d is blocked by %s, which cannot be stopped; a new worker thread "
            "takes its place (%d blocked thread(s) alive)",
            slot,
            why,
            len(self.retired),
        )
        return True
