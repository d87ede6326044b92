"""Which worker gets the next task, and rescuing tasks stuck behind a long one.

Owned by the scheduler thread; nothing here is touched by any other thread
except through the inboxes themselves (``get_nowait`` is safe from any thread).

Per-worker inboxes buy throughput (a worker rarely sleeps between tasks) at the
price of head-of-line blocking: a task queued behind a long one waits for it
even when another worker could run it now. The scheduler sees every report, so
it knows which worker has gone quiet for much longer than tasks usually take:

* a worker holding the fewest tasks gets the next one, but a *stalled* worker
  (busy, and silent for ``max(_STALL_FLOOR, _STALL_FACTOR x mean task time)``)
  gets nothing new while another has room;
* tasks waiting in a stalled worker's inbox are moved to workers with room;
* a worker with nothing at all takes a waiting task from the longest inbox.

A moved task keeps its place in the bounds: it was already counted in flight.
"""

from __future__ import annotations

import heapq
import queue
from collections.abc import Sequence
from typing import Any

from ._inbox import Inbox

__all__ = ["Balance"]

# A worker counts as stalled after this many times the mean task time without a
# report. Lower moves tasks sooner but moves more of them for nothing when task
# times merely vary; higher leaves them waiting behind long tasks for longer.
_STALL_FACTOR = 4.0

# ...and never before this many seconds: twice CPython's default GIL switch
# interval (5 ms), so a worker that is only waiting for the GIL is not "stalled".
_STALL_FLOOR = 0.010


class Balance:
    """Per-worker load as the scheduler sees it. Scheduler thread only."""

    __slots__ = (
        "avoid",
        "held",
        "inboxes",
        "last_seen",
        "peak_depth",
        "queue_cap",
        "queues",
        "workers",
    )

    def __init__(self, inboxes: Sequence[Inbox[Any]], queue_cap: int) -> None:
        self.inboxes = inboxes
        self.queues = [inbox.queue for inbox in inboxes]  # the deques: length reads, no lock
        self.workers = range(len(inboxes))
        self.queue_cap = queue_cap
        self.held = [0] * len(inboxes)  # tasks queued or running, per worker
        self.last_seen = [0.0] * len(inboxes)  # last report, or handed work while idle
        self.avoid: frozenset[int] = frozenset()  # stalled workers: no new work
        # Most tasks seen waiting in each inbox, sampled right after every put: the
        # only moments it can grow, since the scheduler is the only producer.
        self.peak_depth = [0] * len(inboxes)

    def pick(self) -> int:
        """The worker for the next task, or -1 if no inbox has room right now."""
        held, queues, queue_cap, avoid = self.held, self.queues, self.queue_cap, self.avoid
        best, best_held, fallback = -1, queue_cap + 2, -1
        for w in self.workers:
            h = held[w]
            if h < best_held and len(queues[w]) < queue_cap:
                if w in avoid:
                    fallback = w
                    continue
                best, best_held = w, h
        return best if best >= 0 else fallback

    def share(self, n: int) -> list[int]:
        """How many of ``n`` tasks each worker gets now: each in turn to the worker
        that :meth:`pick` would choose, so the fewest-held first, within each inbox's
        room, and a stalled worker only once no other has room. Fewer than ``n`` in
        all if the inboxes cannot take them."""
        held, queues, queue_cap, avoid = self.held, self.queues, self.queue_cap, self.avoid
        counts = [0] * len(held)
        for group in (
            [(held[w], w) for w in self.workers if w not in avoid],
            [(held[w], w) for w in avoid],
        ):
            room = [queue_cap - len(q) for q in queues]
            heap = [entry for entry in group if room[entry[1]] > 0]
            heapq.heapify(heap)
            while n and heap:
                load, w = heap[0]
                counts[w] += 1
                room[w] -= 1
                n -= 1
                if room[w]:
                    heapq.heapreplace(heap, (load + 1, w))
                else:
                    heapq.heappop(heap)
            if not n or not avoid:
                break
        return counts

    def dispatched(self, worker: int, now: float, count: int = 1) -> None:
        """Note ``count`` tasks just put into ``worker``'s inbox."""
        if not self.held[worker]:
            self.last_seen[worker] = now  # it starts working now
        self.held[worker] += count
        depth = len(self.queues[worker])
        if depth > self.peak_depth[worker]:
            self.peak_depth[worker] = depth

    def steer(self, now: float, mean_task_seconds: float) -> None:
        """Mark stalled workers (no new work) and move their waiting tasks elsewhere."""
        held, queues, last_seen = self.held, self.queues, self.last_seen
        patience = max(_STALL_FLOOR, _STALL_FACTOR * mean_task_seconds)
        stalled = frozenset(w for w in self.workers if held[w] and now - last_seen[w] > patience)
        self.avoid = stalled
        for victim in stalled:
            while queues[victim]:
                target = self._room(exclude=stalled)
                if target < 0 or not self._move(victim, target, now):
                    break

    def feed_idle(self, now: float) -> None:
        """Give a worker that has nothing at all a task waiting in the longest inbox.

        Called after dispatch, so it only moves tasks when there was no fresh
        work for the idle worker: a move costs a get and a put, dispatch is free.
        """
        held, queues = self.held, self.queues
        for idle in self.workers:
            if not held[idle]:
                victim = max(self.workers, key=lambda w: len(queues[w]))
                if not queues[victim]:
                    return
                self._move(victim, idle, now)

    def _room(self, exclude: frozenset[int]) -> int:
        best, best_held = -1, self.queue_cap + 1
        for w, h in enumerate(self.held):
            if h < best_held and w not in exclude and len(self.queues[w]) < self.queue_cap:
                best, best_held = w, h
        return best

    def _move(self, victim: int, target: int, now: float) -> bool:
        try:
            item = self.inboxes[victim].get_nowait()
        except queue.Empty:  # its worker took it first: nothing is stuck there
            return False
        self.inboxes[target].put_nowait(item)  # room was checked; we are the only producer
        self.held[victim] -= 1
        self.dispatched(target, now)
        return True
