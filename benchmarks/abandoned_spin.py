"""How much one abandoned CPU-bound attempt slows later runs under the GIL.

``python benchmarks/abandoned_spin.py`` times a later run (a chain of small
CPU-bound tasks, then a wide no-op graph) on an executor with no abandoned
attempt, then again while one timed-out attempt spins on in the background (its
thread cannot be stopped), and prints the ratio. See docs/attempts.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent))]

import dagexec  # noqa: E402


def cpu(x: int) -> int:
    total = 0
    for i in range(20_000):
        total += i * x
    return x + 1


def graphs() -> dict[str, dagexec.Graph]:
    chain = dagexec.Graph()
    chain.add(0, lambda: 0)
    for i in range(1, 50):
        chain.add(i, cpu, deps=[i - 1])
    wide = dagexec.Graph()
    wide.add("root", lambda: 0)
    for i in range(2000):
        wide.add(i, lambda r: r, deps=["root"])
    return {"cpu chain (50 x 20k adds)": chain, "no-op wide (2,000)": wide}


def timed(ex: dagexec.Executor, g: dagexec.Graph, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ex.run(g)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():  # CPU-bound, ignores its token: a thread cannot be killed
            pass

    hang = dagexec.Graph()
    hang.add("spin", spin, timeout=0.05)
    with dagexec.Executor(workers=2) as ex:
        before = {name: timed(ex, g, args.rounds) for name, g in graphs().items()}
        result = ex.run(hang, on_error="continue")
        assert result.stats.abandoned == 1
        after = {name: timed(ex, g, args.rounds) for name, g in graphs().items()}
        stop.set()
    for name in before:
        print(
            f"{name}: {before[name] * 1e3:.1f} ms alone, {after[name] * 1e3:.1f} ms beside "
            f"one abandoned spinning attempt: {after[name] / before[name]:.1f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
