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

The counters here (``held``, ``last_seen``, ``avoid``, ``dead``, ``peak_depth``)
are written by this class only: the driver and the report handler tell it what
was put into an inbox (:meth:`dispatched`) and what came off a worker
(:meth:`off_workers`, :meth:`off`), the run what happened to a worker's thread
(:meth:`replaced`, :meth:`lost`).
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from ..workers.inbox import Inbox
from ..workers.wire import ABORT, CHAIN, DONE, R_KIND, R_WORKER, Message

__all__ = ["Balance"]

_QUEUE = attrgetter("queue")

# A worker counts as stalled after this many times the mean task time without a
# report. Lower moves tasks sooner but moves more of them for nothing when task
# times merely vary; higher leaves them waiting behind long tasks for longer.
_STALL_FACTOR = 4.0

# ...and never before this many seconds: twice CPython's default GIL switch
# interval (5 ms), so a worker that is only waiting for the GIL is not "stalled".
_STALL_FLOOR = 0.010

_NOBODY: frozenset[int] = frozenset()


class Balance:
    """Per-worker load as the scheduler sees it. Scheduler thread only."""

    __slots__ = (
        "avoid",
        "dead",
        "held",
        "inboxes",
        "last_seen",
        "peak_depth",
        "queue_cap",
        "queues",
        "workers",
    )

    def __init__(
        self,
        inboxes: Sequence[Inbox[Any]],
        queue_cap: int,
        dead: frozenset[int] = frozenset(),
    ) -> None:
        self.inboxes = inboxes
        self.queues = [*map(_QUEUE, inboxes)]  # the deques: length reads, no lock
        self.workers = range(len(inboxes))
        self.queue_cap = queue_cap
        self.held = [0] * len(inboxes)  # tasks queued or running, per worker
        self.last_seen = [0.0] * len(inboxes)  # last report, or handed work while idle
        self.avoid = _NOBODY  # stalled workers: no new work
        # Workers whose thread hangs in a timed-out attempt that could not be
        # replaced (see _crew.py): no work at all. Earlier runs' come in here.
        self.dead = dead
        # Most tasks seen waiting in each inbox, sampled right after every put: the
        # only moments it can grow, since the scheduler is the only producer.
        self.peak_depth = [0] * len(inboxes)

    def share(self, n: int) -> list[int]:
        """How many of ``n`` tasks each worker gets now: as if each went in turn to the
        worker holding the fewest (lowest index on a tie), within each inbox's room,
        and to a stalled worker only once no other has room. Fewer than ``n`` in all
        if the inboxes cannot take them.

        One task with no worker stalled or lost (the commonest round: a chain's next
        task, a root, a sink, the wide graph's mostly one-task batches) is handed
        here, without the level loop's dict and lists: ~5% of a 10-task run's
        Python work (``benchmarks/small_runs.py``); so are many tasks to workers all
        alike. ``tests/test_balance.py`` compares the two. Any other round is
        :meth:`_share_levels`'s.
        """
        if self.avoid or self.dead:
            return self._share_levels(n)
        held, cap = self.held, self.queue_cap
        if n != 1:
            # Every worker alike (inboxes empty, each holding as many: the start of a
            # level of the graph, all idle): an even split, lowest indices first, up
            # to a full inbox each, which is where the level loop ends up, without
            # its two calls and dict (~2% of a 10-task run); compared with it in
            # tests/test_balance.py. Inboxes looked at first: one C call, in the
            # rounds of a busy run that fall through to the loop.
            workers = len(held)
            if any(self.queues) or held.count(held[0]) != workers:
                return self._share_levels(n)
            each, extra = divmod(n, workers)
            if each + (extra > 0) > cap:  # more than they can all take: each fills up
                return [cap] * workers
            return [each + 1] * extra + [each] * (workers - extra)
        counts = [0] * len(held)
        best = -1
        for w, waiting in enumerate(self.queues):
            if len(waiting) < cap and (best < 0 or held[w] < held[best]):
                best = w
        if best >= 0:
            counts[best] = 1
        return counts

    def _share_levels(self, n: int) -> list[int]:
        """:meth:`share` in general, level by level (water filling), not task by task:
        the workers holding the fewest are raised together to the next level up, so
        a round costs a few steps per worker however many tasks it hands out."""
        # Plain loops, no comprehensions: each of those is a frame of its own (3.11),
        # and this runs once per dispatch round (it was ~2% of a no-op run's time).
        held, avoid = self.held, self.avoid
        counts = [0] * len(held)
        # Each inbox's room, in two C-level passes (no frame, no call per worker).
        room = list(map(self.queue_cap.__sub__, map(len, self.queues)))
        for w in self.dead:
            room[w] = 0
        # The level of each worker with room, in index order (a tie goes to the
        # lowest index); a stalled worker's is put above any other's can reach, so
        # that it gets tasks only once no other has room.
        above = max(held) + self.queue_cap + 1 if avoid else 0
        level: dict[int, int] = {}
        for w in self.workers:
            if room[w] > 0:
                level[w] = held[w] + above if w in avoid else held[w]
        while n and level:
            n -= self._raise_lowest(level, room, counts, n)
        return counts

    @staticmethod
    def _raise_lowest(level: dict[int, int], room: list[int], counts: list[int], n: int) -> int:
        """One step of :meth:`_share_levels`: the workers at the lowest ``level`` rise
        together, to the next level up, until one is full, or by all of the ``n``
        tasks left (split in index order); ``level``, ``room`` and ``counts`` are
        updated in place. Returns how many tasks it handed out."""
        low = min(level.values())
        lowest: list[int] = []
        step = n
        for w, h in level.items():
            if h == low:
                lowest.append(w)
                if room[w] < step:
                    step = room[w]
            elif h - low < step:
                step = h - low
        if step * len(lowest) > n:  # the last level: split what is left
            step, extra = divmod(n, len(lowest))
            for i, w in enumerate(lowest):
                counts[w] += step + (i < extra)
            return n
        for w in lowest:
            counts[w] += step
            room[w] -= step
            level[w] += step
            if not room[w]:
                del level[w]
        return step * len(lowest)

    def dispatched(self, worker: int, now: float, count: int = 1) -> None:
        """Note ``count`` tasks just put into ``worker``'s inbox."""
        if not self.held[worker]:
            self.last_seen[worker] = now  # it starts working now
        self.held[worker] += count
        depth = len(self.queues[worker])
        if depth > self.peak_depth[worker]:
            self.peak_depth[worker] = depth

    def off_workers(self, batch: list[Message], now: float) -> list[int]:
        """Note the items in ``batch`` that are off their workers whatever they mean (a
        job that returned a value, a chain that ended); the positions of the messages
        other than returned values, which the caller looks at one by one (none: the
        usual batch).

        One pass over the batch, before the reports are applied: the other reports
        that take an item off its worker are noted as they are applied (:meth:`off`).
        """
        held, last_seen = self.held, self.last_seen
        abort, kind, done = ABORT, R_KIND, DONE  # locals: read for every message
        others: list[int] = []
        for i, msg in enumerate(batch):
            if msg is not abort and msg[kind] == done:
                worker = msg[R_WORKER]
                held[worker] -= 1
                last_seen[worker] = now
            else:
                others.append(i)
                if msg is not abort and msg[kind] == CHAIN:
                    worker = msg[R_WORKER]
                    held[worker] -= 1
                    last_seen[worker] = now
        return others

    def off(self, worker: int, now: float) -> None:
        """An item is off ``worker`` that :meth:`off_workers` leaves to the report
        handler (a failure, an item refused after a stop, an attempt that overran)."""
        self.held[worker] -= 1
        self.last_seen[worker] = now

    def replaced(self, worker: int) -> None:
        """``worker``'s thread, hung in a timed-out attempt, has a successor with an
        inbox of its own (the list of inboxes changed in place): the hung attempt is
        no longer on the worker."""
        self.queues[worker] = self.inboxes[worker].queue
        self.held[worker] -= 1

    def lost(self, worker: int, dead: frozenset[int], now: float) -> None:
        """``worker``'s thread hangs and no successor may start: the workers in
        ``dead`` get no more work, and the tasks waiting for ``worker`` move."""
        self.dead = dead
        self.evacuate(worker, now)

    def steer(self, now: float, started: float, ran_on: list[int]) -> None:
        """Mark stalled workers (no new work) and move their waiting tasks elsewhere.

        The tasks finished since ``started`` (``ran_on``: per worker) give the mean
        time of a task on one worker, which says how long a silence is too long.
        """
        held, queues, last_seen = self.held, self.queues, self.last_seen
        if now - min(last_seen) <= _STALL_FLOOR:
            # No worker has been silent for as long as the least patience: none is
            # stalled. The usual round, and it was a generator's frame each (and
            # then a sum of ran_on, which only the rest reads).
            self.avoid = _NOBODY
            return
        finished = sum(ran_on)
        mean = (now - started) * len(held) / finished if finished else 0.0
        patience = max(_STALL_FLOOR, _STALL_FACTOR * mean)
        stalled = frozenset(w for w in self.workers if held[w] and now - last_seen[w] > patience)
        self.avoid = stalled
        exclude = stalled | self.dead
        for victim in stalled:
            while queues[victim]:
                target = self._room(exclude=exclude)
                if target < 0 or not self._move(victim, target, now):
                    break

    def feed_idle(self, now: float) -> None:
        """Give a worker that has nothing at all a task waiting in the longest inbox.

        Called after dispatch, so it only moves tasks when there was no fresh
        work for the idle worker: a move costs a get and a put, dispatch is free.
        """
        held, queues, dead = self.held, self.queues, self.dead
        for idle in self.workers:
            if not held[idle] and idle not in dead:
                # The first longest, as max(workers, key=...) took it, without a
                # lambda: its closure made a cell at every call of this method, which
                # runs every round of a busy run (and a Python call per worker here).
                lengths = [*map(len, queues)]
                victim = lengths.index(max(lengths))
                if not queues[victim]:
                    return
                self._move(victim, idle, now)

    def take_back_all(self) -> list[Any]:
        """Empty every inbox (a stop): the items taken back, none held any more."""
        taken: list[Any] = []
        for w, inbox in enumerate(self.inboxes):
            while True:
                try:
                    taken.append(inbox.get_nowait())
                except queue.Empty:
                    break
                self.held[w] -= 1
        return taken

    def evacuate(self, victim: int, now: float) -> None:
        """Move the tasks waiting in ``victim``'s inbox to workers with room (a dead one)."""
        exclude = self.dead | {victim}
        while self.queues[victim]:
            target = self._room(exclude=exclude)
            if target < 0 or not self._move(victim, target, now):
                return

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
