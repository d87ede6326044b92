"""Per-run overhead: many runs of a tiny graph, dagexec vs graphlib + ThreadPoolExecutor.

The graph is 1 -> 8 -> 1 no-op tasks (10 tasks), the shape of a library call
that fans out a little. Four contenders, measured side by side in one process:

* ``Executor.run``       dagexec, one executor reused for every run
* ``graphlib+TPE``       graphlib.TopologicalSorter + a reused ThreadPoolExecutor
* ``dagexec.run``        dagexec, a fresh executor per run (threads started each time)
* ``graphlib+new TPE``   the same, creating (and shutting down) its pool each run

and a reference that is no executor at all:

* ``hand-off floor``     the calling thread hands each level of the graph as one
  batch to two bare worker threads (root to one, 4 + 4 to both, sink to one)
  over ``SimpleQueue`` and waits for the replies: no dependency tracking, no
  checks, no bounds. Any design that runs the tasks on worker threads and waits
  for them in the caller makes at least these three round trips, so no such
  design can be faster than this line.

Wall time on a shared 2-core VM jumps by milliseconds now and then (a wake-up
that waits for a CPU), so each round runs a short block of every contender,
in an order that rotates from round to round, and each figure is the median
over many rounds of the block's mean: load hits the contenders alike, and a
stall moves one round, not the median.

Targets (issue 20, step 6): ``Executor.run`` <= the hand-off floor + 150 us,
``dagexec.run`` <= 1.0x graphlib + a new TPE, both measured in the same run.

``--back-to-back`` times the contenders as the issue did when it set the
targets: each one's runs all in a row (``--block`` of them, 2,000 by default,
a tenth of that for the fresh pools), the contenders in turn, the median of
``--rounds`` (5). Runs that follow each other at once hand off slower on this
VM (a thread that just went to sleep is slow to wake), so the floor reads
about twice what it reads in short rotating blocks: the two modes disagree on
the floor, not on the order of the executors (docs/performance.md).

``--count`` prints what the machine's load cannot move: Python calls per run
on the calling thread (cProfile; a plain ``Executor.run`` is driven on it, so
that is all the run's own work but the workers') and, with valgrind on PATH,
instructions per run of the whole process (cachegrind ``--cache-sim=no``, a
process with more runs minus one with fewer, so start-up cancels out; workers
included), and of ``Executor.run``'s calling thread alone (callgrind, a count
per thread); and the instructions of a one-task ``Executor.run`` (``1-task
Executor.run``), which is nothing but the per-run ceremony and one hand-off.

With two workers a dagexec count moves by ~20-40k instructions from one
process to the next: valgrind runs one thread at a time and picks which one
runs next by its own rule, and in 30-75% of its runs the driver wakes to half
of the middle level's eight reports (2% of runs without valgrind), a round more
(``--batches`` prints both histograms). So each count is the median of
``--processes`` pairs of processes (5), printed with its range; and the two
contenders that matter are counted at one worker too, where the count repeats
within ~1k (no other worker to wait for).

    python benchmarks/small_runs.py [--rounds 300] [--block 10] [--workers 2]
    python benchmarks/small_runs.py --back-to-back [--rounds 5] [--block 2000]
    python benchmarks/small_runs.py --count [--processes 5]
    python benchmarks/small_runs.py --batches
"""

from __future__ import annotations

import argparse
import cProfile
import graphlib
import os
import pstats
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec

# How far above the hand-off floor a reused Executor.run may be (issue 20, step 6).
FLOOR_MARGIN_US = 150.0


def noop(*args: Any) -> int:
    return 1


def shape() -> dict[Hashable, tuple[Hashable, ...]]:
    deps: dict[Hashable, tuple[Hashable, ...]] = {"root": ()}
    for i in range(8):
        deps[f"m{i}"] = ("root",)
    deps["sink"] = tuple(f"m{i}" for i in range(8))
    return deps


def dagexec_graph() -> dagexec.Graph:
    g = dagexec.Graph()
    for name, deps in shape().items():
        g.add(name, noop, deps=deps)
    return g


def one_task_graph() -> dagexec.Graph:
    """One no-op task: what a run costs with (almost) nothing to run."""
    g = dagexec.Graph()
    g.add("only", noop)
    return g


def graphlib_run(pool: ThreadPoolExecutor, deps: dict[Hashable, tuple[Hashable, ...]]) -> Any:
    """The textbook graphlib + executor loop: submit what is ready, wait, mark done."""
    ts = graphlib.TopologicalSorter(deps)
    ts.prepare()
    values: dict[Hashable, Any] = {}
    finished: queue.SimpleQueue[tuple[Hashable, Future[Any]]] = queue.SimpleQueue()
    pending = 0
    while ts.is_active():
        for node in ts.get_ready():
            args = [values[d] for d in deps[node]]
            fut = pool.submit(noop, *args)
            fut.add_done_callback(lambda f, node=node: finished.put((node, f)))
            pending += 1
        node, fut = finished.get()
        pending -= 1
        values[node] = fut.result()
        ts.done(node)
    return values["sink"]


class HandOffFloor:
    """The fewest thread hand-offs the 1 -> 8 -> 1 graph allows, and nothing else."""

    def __init__(self) -> None:
        self.inboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue(), queue.SimpleQueue()]
        self.replies: queue.SimpleQueue[list[Any]] = queue.SimpleQueue()
        self.threads = [
            threading.Thread(target=self._work, args=(q,), daemon=True) for q in self.inboxes
        ]
        for t in self.threads:
            t.start()

    def _work(self, inbox: queue.SimpleQueue[Any]) -> None:
        while (batch := inbox.get()) is not None:
            self.replies.put([fn(*args) for fn, args in batch])

    def run(self) -> Any:
        first, second = self.inboxes
        first.put([(noop, ())])
        (root,) = self.replies.get()
        first.put([(noop, (root,))] * 4)
        second.put([(noop, (root,))] * 4)
        middle = self.replies.get() + self.replies.get()
        first.put([(noop, tuple(middle))])
        return self.replies.get()[0]

    def close(self) -> None:
        for q in self.inboxes:
            q.put(None)
        for t in self.threads:
            t.join()


def timed(fn: Callable[[], Any], runs: int) -> float:
    """Mean microseconds per call over ``runs`` calls."""
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e6


def measure(rounds: int, block: int, w: int, back_to_back: bool = False) -> dict[str, float]:
    """Median over ``rounds`` of each contender's mean per run over a block of runs:
    in a rotating order, or (``back_to_back``) in a fixed one, a tenth of the block
    for the contenders that start threads every run."""
    g = dagexec_graph()
    deps = shape()
    floor = HandOffFloor()
    with dagexec.Executor(workers=w) as ex, ThreadPoolExecutor(max_workers=w) as pool:

        def fresh_tpe() -> None:
            with ThreadPoolExecutor(max_workers=w) as own:
                graphlib_run(own, deps)

        contenders: dict[str, Callable[[], Any]] = {
            "hand-off floor": floor.run,
            "Executor.run": lambda: ex.run(g),
            "graphlib+TPE": lambda: graphlib_run(pool, deps),
            "dagexec.run": lambda: dagexec.run(g, workers=w),
            "graphlib+new TPE": fresh_tpe,
        }
        # Warm up (plans cached, pools' threads started), checking they all agree.
        assert floor.run() == ex.run(g)["sink"] == graphlib_run(pool, deps) == 1
        assert dagexec.run(g, workers=w)["sink"] == 1
        fresh_tpe()
        results: dict[str, list[float]] = {name: [] for name in contenders}
        names = list(contenders)
        fresh = {"dagexec.run", "graphlib+new TPE"}
        for i in range(rounds):
            turn = 0 if back_to_back else i % len(names)
            for name in names[turn:] + names[:turn]:
                runs = max(1, block // 10) if back_to_back and name in fresh else block
                results[name].append(timed(contenders[name], runs))
    floor.close()
    return {name: statistics.median(v) for name, v in results.items()}


def report(med: dict[str, float], rounds: int, block: int, w: int, mode: str) -> bool:
    """Print the table and the two targets; True if both pass."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"1 -> 8 -> 1 no-op graph, {w} workers, median of {rounds} rounds of {block} runs "
        f"{mode} (us per run), load average {load:.1f}"
    )
    for name, us in med.items():
        print(f"  {name:18s} {us:9.1f}")
    above = med["Executor.run"] - med["hand-off floor"]
    fresh = med["dagexec.run"] / med["graphlib+new TPE"]
    reused = med["Executor.run"] / med["graphlib+TPE"]
    ok_reused, ok_fresh = above <= FLOOR_MARGIN_US, fresh <= 1.0
    print(
        f"  Executor.run - hand-off floor   = {above:+.1f} us  "
        f"(target <= +{FLOOR_MARGIN_US:.0f} us) {'PASS' if ok_reused else 'FAIL'}"
    )
    print(
        f"  dagexec.run / graphlib+new TPE  = {fresh:.2f}x  (target <= 1.0x) "
        f"{'PASS' if ok_fresh else 'FAIL'}"
    )
    print(f"  Executor.run / graphlib+TPE     = {reused:.2f}x  (for reference)")
    return ok_reused and ok_fresh


def calls_per_run(w: int, runs: int) -> dict[str, float]:
    """Python calls per run on the calling thread, by cProfile, after a warm run.

    The median over ``runs`` runs, each counted alone: how many reports one
    wake-up of the driver finds depends on timing, which moves a single run's
    count by ~10% (two modes on this graph), and the median picks the usual one.
    """
    g = dagexec_graph()
    counts: dict[str, float] = {}
    with dagexec.Executor(workers=w) as ex:
        ex.run(g)
        contenders: dict[str, Callable[[], Any]] = {
            "Executor.run": lambda: ex.run(g),
            "dagexec.run": lambda: dagexec.run(g, workers=w),
        }
        for name, fn in contenders.items():
            each = []
            for _ in range(runs):
                profile = cProfile.Profile()
                profile.enable()
                fn()
                profile.disable()
                stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
                each.append(sum(v[1] for v in stats.values()))
            counts[name] = statistics.median(each)
    return counts


def repeat_child(which: str, runs: int, w: int) -> None:
    """The process valgrind counts: a warm run, then ``runs`` more."""
    g = dagexec_graph()
    one = one_task_graph()
    deps = shape()
    with dagexec.Executor(workers=w) as ex, ThreadPoolExecutor(max_workers=w) as pool:

        def fresh_tpe() -> None:
            with ThreadPoolExecutor(max_workers=w) as own:
                graphlib_run(own, deps)

        fn: Callable[[], Any] = {
            "Executor.run": lambda: ex.run(g),
            "1-task Executor.run": lambda: ex.run(one),
            "graphlib+TPE": lambda: graphlib_run(pool, deps),
            "dagexec.run": lambda: dagexec.run(g, workers=w),
            "graphlib+new TPE": fresh_tpe,
        }[which]
        fn()
        for _ in range(runs):
            fn()


def valgrind_per_run(
    tool: list[str], which: str, w: int, few: int, many: int, read: Callable[[str, str], int]
) -> float:
    """A count per run of ``which`` under valgrind's ``tool`` (its name, then its
    options): a process of ``many`` runs minus one of ``few``, so start-up cancels
    out. ``read(stderr, out_file)`` takes the count from what the tool wrote."""
    counts = []
    for runs in (few, many):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            cmd = [
                "valgrind",
                f"--tool={tool[0]}",
                *tool[1:],
                f"--{tool[0]}-out-file={out}",
                sys.executable,
                __file__,
                "--repeat-child",
                which,
                str(runs),
                "--workers",
                str(w),
            ]
            env = {**os.environ, "PYTHONHASHSEED": "0"}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            counts.append(read(proc.stderr, out))
    return (counts[1] - counts[0]) / (many - few)


def _cachegrind_total(stderr: str, out: str) -> int:
    m = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    assert m, stderr[-2000:]
    return int(m.group(1).replace(",", ""))


def _callgrind_main_thread(stderr: str, out: str) -> int:
    text = Path(out + "-01").read_text()  # one file per thread: the main thread's first
    m = re.search(r"^summary:\s+(\d+)", text, re.M)
    assert m, text[:2000]
    return int(m.group(1))


def instructions_per_run(which: str, w: int, few: int, many: int) -> float:
    """Instructions per run of ``which``, all threads, by cachegrind: many runs minus few."""
    tool = ["cachegrind", "--cache-sim=no"]
    return valgrind_per_run(tool, which, w, few, many, _cachegrind_total)


def caller_instructions_per_run(w: int, few: int, many: int) -> float:
    """Instructions per ``Executor.run`` on the calling thread alone (callgrind, one
    count per thread), many runs minus few.

    The calling thread drives a plain run, so this is the run's own work without
    the workers': what the driver does between hand-offs, which is what a
    small run's wall time above the floor is made of."""
    tool = ["callgrind", "--separate-threads=yes"]
    return valgrind_per_run(tool, "Executor.run", w, few, many, _callgrind_main_thread)


# cProfile on a free-threaded 3.13 spins forever in ``enable()`` once a thread
# was started under an earlier profile (CPython gh-125165): no counts there.
CPROFILE_HANGS = not getattr(sys, "_is_gil_enabled", lambda: True)()


def median_count(count_one: Callable[[], float], processes: int) -> tuple[float, float, float]:
    """The median of ``processes`` counts by ``count_one``, with the lowest and highest."""
    counts = sorted(count_one() for _ in range(processes))
    return statistics.median(counts), counts[0], counts[-1]


def count(w: int, quick: bool, processes: int) -> None:
    print(f"1 -> 8 -> 1 no-op graph, {w} workers: fixed work per run")
    if CPROFILE_HANGS:
        print("  calls per run: not counted, cProfile hangs on a free-threaded build (gh-125165)")
        return
    runs = 20 if quick else 200
    calls = calls_per_run(w, runs)
    for name, c in calls.items():
        print(f"  {name:14s} {c:8.1f} calls per run (calling thread, cProfile)")
    if quick or shutil.which("valgrind") is None:
        return
    few, many = 10, 110
    print(f"  instructions per run: the median of {processes} processes (lowest-highest)")
    instr: dict[str, float] = {}
    for name in (
        "Executor.run",
        "graphlib+TPE",
        "dagexec.run",
        "graphlib+new TPE",
        "1-task Executor.run",
    ):
        med, low, high = median_count(partial(instructions_per_run, name, w, few, many), processes)
        instr[name] = med
        print(
            f"  {name:19s} {med:10,.0f} instructions per run (all threads, cachegrind)"
            f"  {low:,.0f}-{high:,.0f}"
        )
    med, low, high = median_count(lambda: caller_instructions_per_run(w, few, many), processes)
    print(
        f"  Executor.run        {med:10,.0f} instructions per run (calling thread, callgrind)"
        f"  {low:,.0f}-{high:,.0f}"
    )
    print(
        f"  Executor.run / graphlib+TPE = {instr['Executor.run'] / instr['graphlib+TPE']:.3f}x, "
        f"dagexec.run / graphlib+new TPE = "
        f"{instr['dagexec.run'] / instr['graphlib+new TPE']:.3f}x (instructions)"
    )
    if w != 1:
        ours, theirs = (
            instructions_per_run(n, 1, few, many) for n in ("Executor.run", "graphlib+TPE")
        )
        print(
            f"  at one worker: Executor.run {ours:,.0f}, graphlib+TPE {theirs:,.0f} = "
            f"{ours / theirs:.3f}x (one process each: repeats within ~1k)"
        )


def batch_sizes(w: int, runs: int) -> dict[int, int]:
    """How many reports each of the driver's wake-ups took, over ``runs`` warm runs
    of ``Executor.run`` (the driver's ``_receive`` wrapped, counting)."""
    from dagexec._engine.run import driver

    sizes: dict[int, int] = {}
    receive = driver.Driver._receive

    def counted(self: driver.Driver, pickup: bool, wait: float | None) -> Any:
        batch = receive(self, pickup, wait)
        sizes[len(batch)] = sizes.get(len(batch), 0) + 1
        return batch

    g = dagexec_graph()
    with dagexec.Executor(workers=w) as ex:
        ex.run(g)
        driver.Driver._receive = counted  # type: ignore[method-assign]
        try:
            for _ in range(runs):
                ex.run(g)
        finally:
            driver.Driver._receive = receive  # type: ignore[method-assign]
    return dict(sorted(sizes.items()))


def batches(w: int, runs: int) -> None:
    """``--batches``: reports per wake-up of the driver, here and under valgrind
    (``--tool=none``: no counting, the same scheduling as the counts)."""
    print(f"1 -> 8 -> 1 no-op graph, {w} workers, {runs} runs: wake-ups of the driver by")
    print("reports taken (a run whose middle level comes in one batch has 3 wake-ups)")
    print(f"  here:          {batch_sizes(w, runs)}")
    if shutil.which("valgrind") is None:
        return
    cmd = ["valgrind", "--tool=none", sys.executable, __file__, "--batches-child", str(runs)]
    cmd += ["--workers", str(w)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    print(f"  under valgrind: {out.strip()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, help="rounds (the median is quoted); 300, or 5")
    p.add_argument("--block", type=int, help="runs per contender per round; 10, or 2000")
    p.add_argument("--back-to-back", action="store_true", help="long blocks in a fixed order")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--count", action="store_true", help="calls and instructions per run")
    p.add_argument("--processes", type=int, default=5, help="--count: processes per count")
    p.add_argument("--batches", action="store_true", help="reports per wake-up of the driver")
    p.add_argument("--quick", action="store_true", help="a few rounds: checks it runs")
    p.add_argument("--batches-child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--repeat-child", nargs=2, metavar=("WHICH", "RUNS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.repeat_child:
        repeat_child(args.repeat_child[0], int(args.repeat_child[1]), args.workers)
        return
    if args.batches_child:
        print(batch_sizes(args.workers, args.batches_child))
        return
    if args.batches:
        batches(args.workers, 20 if args.quick else 100)
        return
    if args.count:
        count(args.workers, args.quick, args.processes)
        return
    b2b = args.back_to_back
    rounds = args.rounds or (5 if b2b else 300)
    block = args.block or (2000 if b2b else 10)
    if args.quick:
        rounds, block = 3, 2
    mode = "back to back" if b2b else "in rotating order"
    report(measure(rounds, block, args.workers, b2b), rounds, block, args.workers, mode)


if __name__ == "__main__":
    main()
