"""Per-run overhead: many runs of a tiny graph, dagexec vs graphlib + ThreadPoolExecutor.

The graph is 1 -> 8 -> 1 no-op tasks (10 tasks), the shape of a library call
that fans out a little. Four contenders, measured side by side in one process,
interleaved round by round so machine load hits them alike:

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

Targets (issue 9, section 2): Executor.run <= 0.3x graphlib+TPE (reused pool);
dagexec.run <= 1.0x graphlib+new TPE. The floor's own ratio shows whether the
first is reachable on this machine.

    python benchmarks/small_runs.py [--runs 2000] [--rounds 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import graphlib
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=2000, help="runs per contender per round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median quoted)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    g = dagexec_graph()
    deps = shape()
    w = args.workers
    fresh_runs = max(1, args.runs // 10)  # thread start-up dominates: fewer runs suffice
    results: dict[str, list[float]] = {
        "Executor.run": [],
        "graphlib+TPE": [],
        "dagexec.run": [],
        "graphlib+new TPE": [],
        "hand-off floor": [],
    }
    floor = HandOffFloor()
    with dagexec.Executor(workers=w) as ex, ThreadPoolExecutor(max_workers=w) as pool:
        assert ex.run(g)["sink"] == graphlib_run(pool, deps) == 1
        for _ in range(args.rounds):
            results["Executor.run"].append(timed(lambda: ex.run(g), args.runs))
            results["graphlib+TPE"].append(timed(lambda: graphlib_run(pool, deps), args.runs))

            def fresh_tpe() -> None:
                with ThreadPoolExecutor(max_workers=w) as own:
                    graphlib_run(own, deps)

            results["dagexec.run"].append(timed(lambda: dagexec.run(g, workers=w), fresh_runs))
            results["graphlib+new TPE"].append(timed(fresh_tpe, fresh_runs))
            results["hand-off floor"].append(timed(floor.run, args.runs))
    floor.close()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"1 -> 8 -> 1 no-op graph, {w} workers, median of {args.rounds} rounds (us per run)")
    for name, us in med.items():
        print(f"  {name:18s} {us:9.1f}")
    reused = med["Executor.run"] / med["graphlib+TPE"]
    fresh = med["dagexec.run"] / med["graphlib+new TPE"]
    print(f"  Executor.run / graphlib+TPE     = {reused:.2f}x  (target <= 0.3x)")
    print(f"  dagexec.run / graphlib+new TPE  = {fresh:.2f}x  (target <= 1.0x)")
    least = med["hand-off floor"] / med["graphlib+TPE"]
    print(f"  hand-off floor / graphlib+TPE   = {least:.2f}x  (no design on threads goes below)")


if __name__ == "__main__":
    main()
