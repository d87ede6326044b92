"""Memory-aware dispatch depth: how many tasks may be queued or running at once when
the caller set no bound (neither ``queue_cap`` nor ``max_in_flight``).

Why: every task dispatched ahead of need makes its value before anything can
consume it. With deep inboxes (``workers * (queue_cap + 1)`` = 130 tasks on two
workers) a graph of large values makes nearly all its inputs first: 918 MiB peak
for dask's ``(x + x.T).sum()`` where dask's own scheduler, which keeps exactly one
task per worker, needs 45 MiB. But a fixed shallow depth costs a thread hand-off
per task (~70 us), which made a graph of 10,000 tiny tasks 13x slower. What
separates the two is the size of the values, so that is what this reads.

The rule: the depth is what keeps at most :data:`BUDGET_BYTES` of fresh values
in the tasks queued beyond one per worker, from the size of the values tasks
return (sampled, at most one per batch of reports)::

    cap = clamp(BUDGET_BYTES // typical value size, workers, full cap)

so tasks returning numbers or small objects go as deep as ever (full speed), and
tasks returning half a megabyte or more go one per worker, which with the
depth-first ready stack is dask's own local policy. "Typical" is the largest recent sample,
decaying by :data:`_DECAY` per sample: one small value (a sum, a view) among big
ones does not open the gates, a run of them does. Before any task has reported,
nothing is known: the run starts one task per worker, and widens after the
first reports (one hand-off, ~100 us, on a graph of tiny tasks).

Owned by the thread that drives the run, like everything of the driver's.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from ..workers.wire import CHAIN, DONE, R_KIND, R_PAYLOAD, Message

__all__ = ["BUDGET_BYTES", "Depth", "estimate_bytes"]

# Fresh values the tasks dispatched beyond one per worker may make, in bytes.
# Higher keeps workers fed with shallower values too (fewer hand-offs) but lets
# more big values be made ahead of their consumers; lower the other way round.
# 256 KiB keeps dask's 250^2 float chunks (0.5 MB) and bigger at one task per
# worker (measured on (x + x.T).mean(axis=0), 8000^2: 2 MiB let four more go
# and peaked at 27-59 MiB against 10 MiB, dask threaded 23), lets 16 KiB values
# go 16 deeper, and never limits tasks returning numbers or small objects.
BUDGET_BYTES = 256 << 10

# How fast a big value is forgotten: per sample, the remembered size shrinks by
# this factor unless a bigger one comes. Closer to 1 remembers longer (safer,
# slower to widen after a phase of big values); lower widens sooner.
_DECAY = 0.9

# While the depth is full (values small), only every this many batches of
# reports is sampled: a graph of tiny tasks then pays for a size estimate once
# per this many batches (measured: sampling every batch cost ~10% more CPU on
# 10,000 no-op tasks). Higher is cheaper, but a switch to big values is seen
# that many batches later (up to the full cap of tasks dispatched meanwhile).
_SAMPLE_EVERY_WHEN_FULL = 8

# How many elements of a list, tuple, set or dict are looked at to estimate
# what they hold: more is closer, but costs time per sample.
_ELEMENTS_SAMPLED = 4


def estimate_bytes(value: Any) -> int:
    """Roughly how many bytes ``value`` keeps alive; never raises.

    ``sys.getsizeof`` counts what an object owns (a numpy array's buffer, a
    string's characters), not what a container refers to, so a container's
    first elements stand for the rest.
    """
    try:
        size = sys.getsizeof(value)
        if isinstance(value, (list, tuple, set, frozenset, dict)) and value:
            n = len(value)
            if isinstance(value, dict):
                items = [(k, value[k]) for k in list(value)[:_ELEMENTS_SAMPLED]]
                each = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in items)
                size += each * n // len(items)
            else:
                sample = list(value)[:_ELEMENTS_SAMPLED]
                size += sum(sys.getsizeof(x) for x in sample) * n // len(sample)
        return int(size)
    except Exception:  # a hostile __sizeof__ or __len__: count it as small
        return 0


# The cap the last run of each plan set at its first sample, by plan (weakly: a
# plan that its graph's cache dropped goes from here too). A later run of the plan
# starts there: where the last one stood after its first report, not where it
# went later (a graph whose big inputs come first and small results after would
# otherwise start its rerun at the depth of its small results).
_first_cap: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class Depth:
    """The memory-aware cap of one run. Driving thread only.

    Args:
        workers: the run's worker count, the shallowest the cap goes.
        full: the deepest it goes, what the inboxes can hold.
    """

    __slots__ = ("countdown", "current", "full", "known", "plan", "start", "typical", "workers")

    def __init__(self, workers: int, full: int, plan: Any = None) -> None:
        self.workers = workers
        self.full = max(full, workers)
        self.typical = -1.0  # nothing seen yet
        self.plan = plan
        # What _first_cap holds for the plan now (None: nothing): a rerun that
        # lands where the last one did writes nothing (a weak key costs ~1 us).
        self.known = None if plan is None else _first_cap.get(plan)
        known = workers if self.known is None else self.known
        # The cap before any report: one task per worker, or where the last run
        # of the same plan stood after its first report.
        self.start = self.current = max(workers, min(self.full, known))  # the cap now
        self.countdown = 1  # batches until the next sample

    def after(self, batch: list[Message]) -> int:
        """The cap once ``batch`` (reports, as on the results queue) has arrived.

        Looks at the first returned value among the first few messages only, so
        a batch of a thousand reports costs one size estimate; at the full depth,
        only every :data:`_SAMPLE_EVERY_WHEN_FULL` batches.
        """
        self.countdown -= 1
        if self.countdown > 0:
            return self.current
        for msg in batch[:4]:
            if type(msg) is not tuple:
                continue
            kind, payload = msg[R_KIND], msg[R_PAYLOAD]
            if kind == DONE:
                value = payload
            elif kind == CHAIN and payload.ok:  # a chain's value is its last member's
                value = payload.outcome
            else:
                continue
            first = self.typical < 0
            self.note(estimate_bytes(value))
            self.current = cap = self.cap()
            if first and self.plan is not None and cap != self.known:
                _first_cap[self.plan] = cap
            self.countdown = _SAMPLE_EVERY_WHEN_FULL if cap == self.full else 1
            break
        else:
            self.countdown = 1  # nothing to sample in this one: try the next
        return self.current

    def note(self, size: int) -> None:
        """One value of ``size`` bytes was made."""
        decayed = self.typical * _DECAY
        self.typical = size if size > decayed else decayed

    def cap(self) -> int:
        """Most tasks queued or running at once, from the values seen so far."""
        if self.typical < 0:
            return self.workers
        deeper = int(BUDGET_BYTES // max(self.typical, 1.0))
        return max(self.workers, min(self.full, self.workers + deeper))
