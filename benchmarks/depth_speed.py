"""The memory-aware default depth vs a fixed ``queue_cap=64``, on dagexec's own graphs.

``python benchmarks/depth_speed.py [--rounds 40] [--only wide,layered]``

Both run the same built graph in one process, alternating run by run so that
drift on a shared machine hits both alike; medians of wall time and of the
process's CPU time (which other jobs on the machine disturb less). A ratio
above 1 means the default is slower.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import workloads  # noqa: E402

import dagexec  # noqa: E402

CASES = ("wide", "layered", "chain", "skewed", "cpu", "memory")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--only", default=",".join(CASES[:4]))
    args = p.parse_args()
    for name in args.only.split(","):
        spec = getattr(workloads, name)()
        g = dagexec.Graph()
        for task, (fn, deps) in spec.tasks.items():
            g.add(task, fn, deps=deps)
        g.validate()
        dagexec.run(g, spec.targets, workers=2)  # warm: plan cached, imports done
        wall: dict[str, list[float]] = {"default": [], "queue_cap=64": []}
        cpu: dict[str, list[float]] = {"default": [], "queue_cap=64": []}
        for _ in range(args.rounds):
            for label in wall:
                kwargs = {} if label == "default" else {"queue_cap": 64}
                w, c = time.perf_counter(), time.process_time()
                dagexec.run(g, spec.targets, workers=2, **kwargs)
                wall[label].append(time.perf_counter() - w)
                cpu[label].append(time.process_time() - c)
        wa, wb = (statistics.median(wall[k]) for k in wall)
        ca, cb = (statistics.median(cpu[k]) for k in cpu)
        print(
            f"{name:8s} wall {wa * 1e3:8.2f} vs {wb * 1e3:8.2f} ms ({wa / wb:.2f}x)  "
            f"cpu {ca * 1e3:8.2f} vs {cb * 1e3:8.2f} ms ({ca / cb:.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
