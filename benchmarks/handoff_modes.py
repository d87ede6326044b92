"""What one thread hand-off costs here, and why the small-runs floor moves so much.

Two bare threads, no dagexec: the caller puts a no-op on a worker's
``SimpleQueue`` and waits for the reply on another, round after round. What
varies is what the caller does between one reply and the next put:

* ``nothing``           the next put at once (what the hand-off floor does);
* ``30 us of Python``   computing for 30 us first (a scheduler's bookkeeping).

On the project's 2-vCPU VM (2026-11-26, four processes) the second case cost
the caller 12.1-12.5 us for the put (the wake-up of the sleeping worker) and
70-73 us per round trip every time; the first cost 2.3-11.8 us and 12-69 us,
depending on the process: how the kernel placed the two threads on the vCPUs,
which the program does not choose. A scheduler does Python work between a
report and the next put, as any does, so it pays the slow case; a loop that
does none pays it only sometimes, which is why ``small_runs.py``'s floor reads
64-243 us per run depending on what ran around it (docs/performance.md,
"Small runs"). Blocks of rounds of each case alternate, so load hits them
alike; the medians are printed.

    python benchmarks/handoff_modes.py [--rounds 10] [--block 300]
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
from collections.abc import Callable
from time import perf_counter_ns


def noop() -> int:
    return 1


def spin(us: float) -> None:
    end = perf_counter_ns() + us * 1000
    while perf_counter_ns() < end:
        pass


CASES: dict[str, Callable[[], None]] = {
    "nothing": lambda: None,
    "30 us of Python": lambda: spin(30),
}


def measure(rounds: int, block: int) -> dict[str, tuple[float, float]]:
    """Median put cost and round trip (us) of each case, blocks alternating."""
    inbox: queue.SimpleQueue[Callable[[], int] | None] = queue.SimpleQueue()
    replies: queue.SimpleQueue[int] = queue.SimpleQueue()

    def work() -> None:
        while (fn := inbox.get()) is not None:
            replies.put(fn())

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    puts: dict[str, list[int]] = {name: [] for name in CASES}
    trips: dict[str, list[int]] = {name: [] for name in CASES}
    names = list(CASES)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gap = CASES[name]
            for _ in range(block):
                gap()
                t0 = perf_counter_ns()
                inbox.put(noop)
                t1 = perf_counter_ns()
                replies.get()
                t2 = perf_counter_ns()
                puts[name].append(t1 - t0)
                trips[name].append(t2 - t0)
    inbox.put(None)
    worker.join()
    return {
        name: (statistics.median(puts[name]) / 1000, statistics.median(trips[name]) / 1000)
        for name in CASES
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--block", type=int, default=300, help="round trips per case per round")
    args = p.parse_args()
    print(f"one hand-off and back between two threads, median of {args.rounds} x {args.block}")
    for name, (put, trip) in measure(args.rounds, args.block).items():
        print(f"  {name:18s} put {put:6.1f} us   round trip {trip:6.1f} us")


if __name__ == "__main__":
    main()
