"""Sweep dagexec's ``queue_cap`` x ``max_in_flight`` on the workloads they trade off.

``python benchmarks/sweep.py [--repeat 3] [--quick] [--json PATH]``

Deeper inboxes mean fewer thread wake-ups per task (throughput on no-op graphs);
they also let a ready task sit behind a long one (head-of-line blocking, which the
skewed workload shows as makespan). ``max_in_flight`` caps the total either way:
the effective cap is ``min(max_in_flight, workers * (queue_cap + 1))``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent)), str(HERE)]

from peers import CappedGraphlibTPE, Dagexec  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

NAMES = ["wide", "layered", "chain", "skewed"]
QUEUE_CAPS = [1, 2, 4, 8, 16, 32, 64]


def in_flight_options(workers: int, queue_cap: int) -> list[int]:
    """Today's default (2 * workers), a middle value, and 'no tighter than the inboxes'."""
    full = workers * (queue_cap + 1)
    return sorted({min(2 * workers, full), min(4 * workers, full), full})


def median_time(impl: Any, prepared: Any, repeat: int) -> float:
    impl.run(prepared)  # warm: plan cached, check nothing raises
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        impl.run(prepared)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def skew_ratio(impl: Any, tpe: Any, spec: Any, repeat: int) -> tuple[float, float]:
    """dagexec and graphlib+tpe makespans run alternately, so a change in how much CPU
    the shared machine gives us hits both sides of the ratio alike."""
    a, b = impl.prepare(spec), tpe.prepare(spec)
    impl.run(a)
    ours, theirs = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        impl.run(a)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        tpe.run(b)
        theirs.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(ours) / statistics.median(theirs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    w = args.workers
    specs = {n: WORKLOADS[n](args.quick) for n in NAMES}
    tpe = CappedGraphlibTPE(w)  # the honest reference (issue 13)
    base = {n: median_time(tpe, tpe.prepare(s), args.repeat) for n, s in specs.items()}
    print(
        "graphlib+tpe (capped) reference: "
        + ", ".join(
            f"{n} {base[n] / specs[n].tasks_run * 1e6:.1f} us/task"
            if n != "skewed"
            else f"skewed {base[n] * 1e3:.0f} ms"
            for n in NAMES
        )
    )
    print(
        f"{'queue_cap':>9} {'max_in_flight':>13} {'eff_cap':>7} | "
        + " ".join(f"{n + ' us/t':>12}" for n in NAMES[:3])
        + f" {'skewed ms':>10} {'skew/tpe':>9}"
    )
    rows = []
    for qc in QUEUE_CAPS:
        for mif in in_flight_options(w, qc):
            impl = Dagexec(w, qc, mif)
            res = {
                n: median_time(impl, impl.prepare(s), args.repeat)
                for n, s in specs.items()
                if n != "skewed"
            }
            res["skewed"], ratio = skew_ratio(impl, tpe, specs["skewed"], args.repeat)
            eff = min(mif, w * (qc + 1))
            us = [res[n] / specs[n].tasks_run * 1e6 for n in NAMES[:3]]
            print(
                f"{qc:>9} {mif:>13} {eff:>7} | "
                + " ".join(f"{u:>12.2f}" for u in us)
                + f" {res['skewed'] * 1e3:>10.1f} {ratio:>9.2f}"
            )
            rows.append(
                {
                    "queue_cap": qc,
                    "max_in_flight": mif,
                    "effective_cap": eff,
                    "seconds": res,
                    "skewed_vs_tpe": ratio,
                }
            )
    if args.json:
        args.json.write_text(json.dumps({"tpe": base, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
