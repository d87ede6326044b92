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
return (sampled, at most one per batch of reports; :mod:`.sizing` estimates a
value's size, counting a view by the buffer it keeps alive)::

    cap = clamp(BUDGET_BYTES // typical value size, workers, full cap)

so tasks returning numbers or small objects go as deep as ever (full speed), and
tasks returning half a megabyte or more go one per worker, which with the
depth-first ready stack is dask's own local policy. "Typical" is the largest recent sample,
decaying by :data:`_DECAY` per sample: one small value (a sum, a row) among big
ones does not open the gates, a run of them does. Before any task has reported,
nothing is known: the run starts one task per worker, and widens after the
first reports, at most doubling per sample (a few hand-offs, ~100 us each, on a
graph of tiny tasks): dask's ``x.cumsum(axis=0)`` makes a small row first and
8 MB blocks next, and opening to 34 tasks on that one row peaked at 4x dask
threaded's memory. A rerun of the same plan starts at the lowest depth its
last run's first samples asked for.

A run whose plan has no more tasks than workers and no maps makes no
:class:`Depth`: all its tasks go out at once, since the cap never starts below
one task per worker, so a value sized there could deepen no dispatch (its
reruns start there too, so there is nothing to remember for them either).

Owned by the thread that drives the run, like everything of the driver's.
"""

from __future__ import annotations

from sys import getsizeof
from time import thread_time
from typing import Any

from ..workers.wire import CHAIN, DONE, R_KIND, R_PAYLOAD, Message
from .sizing import FLAT, estimate_bytes, looks_inside

__all__ = ["BUDGET_BYTES", "Depth", "estimate_bytes"]

# Fresh values the tasks dispatched beyond one per worker may make, in bytes.
# Higher keeps workers fed with shallower values too (fewer hand-offs) but lets
# more big values be made ahead of their consumers; lower the other way round.
# 256 KiB keeps dask's 250^2 float chunks (0.5 MB) and bigger at one task per
# worker (measured on (x + x.T).mean(axis=0), 8000^2: 2 MiB let four more go
# and peaked at 27-59 MiB against 10 MiB, dask threaded 23), lets 16 KiB values
# go 16 deeper, and never limits tasks returning numbers or small objects.
BUDGET_BYTES = 256 << 10

# How fast a big value is forgotten: per batch of reports, the remembered size
# shrinks by this factor unless a bigger one is sampled. Closer to 1 remembers
# longer (safer, slower to widen after a phase of big values); lower widens sooner.
# Unsampled batches count, but one sample forgets at most what :data:`_DECAY_SPAN`
# batches do (0.9^8: to 43%): after the 64 unsampled batches at one task per
# worker (below) a big value used to be all but forgotten, so one small value
# among big ones (a chunk's sum among 8 MB chunks in dask's ``(x + x.T).sum()``)
# let the depth double, and the next samples, taken every batch while it
# doubled, could be small too: it went to 16 and peaked at 131-151 MiB against
# dask threaded's 86. Now forgetting a big value takes a run of small ones: a
# sample much smaller than the remembered size is followed by one in the next
# batch (see ``after``), each forgetting 10%.
_DECAY = 0.9
_DECAY_SPAN = 8

# Once a run's first samples are in, only every so many batches of reports is
# sampled. Each estimate runs on the driving thread right after a worker touched
# megabytes, where with cold caches even a numpy array's costs 15-40 us (1 us
# warm): sampling every batch took 12% of that thread's CPU on dask's cumsum and,
# with pandas' deep ``__sizeof__``, 69% on a merge. Above one task per worker,
# every 8th batch: a switch to big values is seen that many batches later (up
# to the cap of tasks dispatched meanwhile). At one task per worker (big values:
# slow tasks, a batch is a report or two) a late sample cannot cost memory, only
# the speed of widening after a switch to small values: every 64th.
# (``benchmarks/dask_memory.py --sizing`` measures the share.)
_SAMPLE_EVERY = 8
_SAMPLE_EVERY_AT_WORKERS = 64

# On top of that, a run's estimates may take at most this share of the CPU its
# driving thread has used since its first timed one (below), plus :data:`_ALLOWANCE` seconds;
# a sample that would go over is put off by twice as many batches as the thread
# took on average to earn that much (at least :data:`_SAMPLE_EVERY`, at most
# :data:`_PUT_OFF_MOST`), one task per worker meanwhile: a depth that cannot be
# afforded a look is not kept open (dask's cumsum makes a small row first, which
# doubles the depth, and 8 MB blocks next, which a late sample would see only
# after they were made twice as deep). So waiting costs speed, never memory. The
# run's first sample is always taken.
# Why: what a sample costs depends on the value (1 us for an int, 25-200 us for a
# small pandas frame with cold caches), what a run's driving thread does between
# samples on how long its tasks take: a dask groupby-agg's ~60 slow tasks returning
# 26-row frames gave its driving thread 8-18 ms of CPU in all, of which the first
# run's samples, every batch while the depth doubled, took 9-12%. Slow tasks are
# what make a budget tight, and they are also where staying shallow costs nothing
# (a hand-off of ~70 us per 50 ms task). Only the estimates of values sizing looks
# inside (containers, pandas objects: :func:`.sizing.looks_inside`) are timed and
# counted: a number's or an array's costs ~1 us, so a run of them never waits and
# reads no clock (timing every sample, on the wall clock, made the speed gate's
# wide graph 1.27x the calls per task under cProfile). The allowance covers a cold
# first sample or two.
_SHARE = 0.007
_ALLOWANCE = 50e-6
_PUT_OFF_MOST = 256
# What one look at the budget costs, counted as spent: a thread_time call with
# cold caches, ~10 us here (measured in a dask bag run).
_CHECK_COST = 10e-6

# How many samples a run's start is remembered from: the lowest depth they asked
# for, kept on the plan (``Plan.first_depth``: it goes with the plan). A later
# run of the plan starts there: not where the last one went later (a graph
# whose big inputs come first and small results after would otherwise start
# its rerun at the depth of its small results), nor where its very first value
# alone pointed (dask's cumsum makes a small row first, then 8 MB blocks).
_REMEMBERED_SAMPLES = 2


class Depth:
    """The memory-aware cap of one run. Driving thread only.

    Args:
        workers: the run's worker count, the shallowest the cap goes.
        full: the deepest it goes, what the inboxes can hold.
        memory: where the depth the first samples ask for is kept for the next
            run of the same plan (the plan's ``first_depth``: one int, 0 until a
            run has sampled); None: nothing is remembered.
    """

    __slots__ = (
        "allowed",
        "batches",
        "calm",
        "clock",
        "countdown",
        "current",
        "elapsed",
        "full",
        "known",
        "memory",
        "samples",
        "spent",
        "start",
        "typical",
        "workers",
    )

    def __init__(self, workers: int, full: int, memory: list[int] | None = None) -> None:
        self.workers = workers
        # Comparisons, not max() and min(): builtins that parse their arguments as
        # keywords, ~700 instructions a call; a run's Depth made ~7 calls, part of
        # ~6,800 instructions of a 10-task run (cachegrind, small_runs.py --count).
        self.full = full if full > workers else workers
        self.typical = -1.0  # nothing seen yet
        # The remembered size up to which a sample leaves the full depth full (cap();
        # a task's margin keeps float rounding out): -1.0 if none does.
        room = self.full - workers
        self.calm = BUDGET_BYTES / (room + 1) if 0 < room < BUDGET_BYTES else -1.0
        self.memory = memory
        # What the plan's last run left (None: nothing): a rerun that lands where
        # the last one did writes nothing.
        self.known = None if memory is None or not memory[0] else memory[0]
        known = workers if self.known is None else self.known
        # The cap before any report: one task per worker, or where the last run
        # of the same plan stood after its first report.
        if known > self.full:
            known = self.full
        self.start = self.current = known if known > workers else workers  # the cap now
        self.countdown = 1  # batches until the next sample
        self.elapsed = 1  # batches since the last sample, when the countdown ends
        self.samples = 0  # taken so far, counted up to _REMEMBERED_SAMPLES
        # The sampling budget: CPU seconds spent on timed estimates, what the
        # budget was when last worked out (thread_time, ~1.4 us a call here, is
        # only read again once that is spent), and the driving thread's CPU at the
        # first timed estimate (-1: none yet).
        self.spent = 0.0
        self.allowed = _ALLOWANCE
        self.clock = -1.0
        self.batches = 0  # up to the last sample since the first (the budget's pace)

    def after(self, batch: list[Message]) -> int:
        """The cap once ``batch`` (reports, as on the results queue) has arrived.

        Looks at the first returned value among the first few messages only, so
        a batch of a thousand reports costs one size estimate; once the run's
        first samples are in, only every :data:`_SAMPLE_EVERY` batches (at one task
        per worker, every :data:`_SAMPLE_EVERY_AT_WORKERS`), and only while sizing
        stays within its budget (:data:`_SHARE` of the driving thread's CPU).
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
            if self.spent > self.allowed:
                later = self.put_off()
                if later:  # over budget: one task per worker until it looks again
                    self.current = self.workers
                    self.countdown = later
                    self.elapsed += later
                    return self.current
            self.batches += self.elapsed
            # A number, a string, None: sized from its header as estimate_bytes
            # would, without its four calls (a small run's one sample).
            size = getsizeof(value) if type(value) in FLAT else self.size(value)
            self.note(size, self.elapsed)
            if self.typical <= self.calm and self.current == self.full == self.known:
                # At the full depth, where the plan's last run started too, and the
                # values seen keep it there: what cap(), next_look() and remember()
                # would do, without their three calls (a small rerun's one sample;
                # measured in docs/performance.md, "the depth's sample").
                # tests/test_dask_memory.py compares the two.
                self.samples = _REMEMBERED_SAMPLES
                self.countdown = self.elapsed = _SAMPLE_EVERY
                break
            wanted = self.cap()
            # Deeper at most twice as deep per sample: a few small values first
            # (a sum, a row) say little about the tasks that go out next.
            twice = 2 * self.current
            self.current = wanted if wanted < twice else twice
            self.countdown = self.elapsed = self.next_look(wanted, size)
            break
        else:
            self.countdown = 1  # nothing to sample in this one: try the next
            self.elapsed += 1
        return self.current

    def next_look(self, wanted: int, size: int) -> int:
        """In how many batches the next sample is taken, once the cap is set from
        a sample of ``size`` bytes that wanted the cap at ``wanted`` (once per
        sample, not per batch: out of :meth:`after` to keep that one readable)."""
        cap = self.current
        if self.samples < _REMEMBERED_SAMPLES and self.remember(wanted):
            return 1
        if cap < wanted:
            return 1  # still widening: look again soon
        if cap == self.workers and self.typical <= 2 * size:
            return _SAMPLE_EVERY_AT_WORKERS
        if cap == self.workers:  # much smaller than remembered: a run of them?
            return 1
        return _SAMPLE_EVERY

    def size(self, value: Any) -> int:
        """The bytes ``value`` keeps alive (:func:`.sizing.estimate_bytes`). The
        estimate of a value it looks inside (a container, a pandas object) is timed
        on the thread's CPU clock and counted against the run's sampling budget (the
        first one also starts the budget's clock); any other costs ~1 us, untimed."""
        if not looks_inside(value):
            return estimate_bytes(value)
        started = thread_time()
        if self.clock < 0:
            self.clock = started
        size = estimate_bytes(value)
        self.spent += thread_time() - started
        return size

    def put_off(self) -> int:
        """How many batches the next sample waits for the budget to cover what sizing
        spent (0: it does now); reads the driving thread's CPU."""
        used = thread_time() - self.clock
        self.spent += _CHECK_COST
        self.allowed = _SHARE * used + _ALLOWANCE
        owed = self.spent - self.allowed
        if owed <= 0:
            return 0
        batches = self.batches + self.elapsed
        pace = used / batches if batches and used > 0 else 0.0  # CPU per batch so far
        # Twice what the pace says: a check costs ~10 us itself (a thread_time call,
        # with cold caches), and the pace is the run's average, not the latest.
        wait = int(2 * owed / _SHARE / pace) + 1 if pace else _PUT_OFF_MOST
        return max(_SAMPLE_EVERY, min(_PUT_OFF_MOST, wait))

    def remember(self, wanted: int) -> bool:
        """Keep the lowest depth the run's first samples asked for, for its reruns;
        whether to take the next sample at once (False: the first samples are in)."""
        self.samples += 1
        if self.samples == 1 and wanted == self.known:
            # A rerun that asks for where the last one stood: nothing new to keep
            # (a small run of small values then pays for one sample, not two).
            self.samples = _REMEMBERED_SAMPLES
            return False
        lowest = wanted if self.samples == 1 or self.known is None else min(wanted, self.known)
        if self.memory is not None and lowest != self.known:
            self.memory[0] = lowest
        self.known = lowest
        return self.samples < _REMEMBERED_SAMPLES

    def note(self, size: int, batches: int = 1) -> None:
        """One value of ``size`` bytes was made, ``batches`` batches after the last sampled."""
        decayed = self.typical * (_DECAY if batches == 1 else _DECAY ** min(batches, _DECAY_SPAN))
        self.typical = size if size > decayed else decayed

    def cap(self) -> int:
        """Most tasks queued or running at once, from the values seen so far."""
        if self.typical < 0:
            return self.workers
        typical, workers = self.typical, self.workers
        deeper = int(BUDGET_BYTES // (typical if typical > 1.0 else 1.0))
        cap = workers + deeper
        if cap > self.full:
            cap = self.full
        return cap if cap > workers else workers
