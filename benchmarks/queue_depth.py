"""Default inbox depth: throughput vs head-of-line blocking, interleaved in one process.

``python benchmarks/queue_depth.py [--caps 16,32,64] [--rounds 7] [--workers 2]``

For each ``queue_cap`` (``max_in_flight`` left at its default, all the inboxes can
hold) it times the wide and layered no-op graphs and the skewed makespan next
to the capped graphlib+TPE, round by round in turn, so that a change in how much
CPU the shared machine gives us hits every depth alike (sequential sweeps, as in
``sweep.py``, mix machine noise into the comparison). Peak live values on the
map-reduce graph come from ``order.py``.
"""

from __future__ import annotations

import argparse
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


def timed(impl: Any, prepared: Any) -> float:
    t = time.perf_counter()
    impl.run(prepared)
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--caps", default="16,32,64", help="comma-separated queue_cap values")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    specs = {n: WORKLOADS[n](False) for n in ("wide", "layered", "skewed")}
    tpe = CappedGraphlibTPE(args.workers)
    tpe_skewed = tpe.prepare(specs["skewed"])
    impls = {qc: Dagexec(args.workers, qc) for qc in caps}
    prepared = {qc: {n: impls[qc].prepare(s) for n, s in specs.items()} for qc in caps}
    times: dict[tuple[int, str], list[float]] = {}
    skew_ratios: dict[int, list[float]] = {qc: [] for qc in caps}
    for qc in caps:  # warm: plans cached, results checked once
        for n in specs:
            impls[qc].run(prepared[qc][n])
    tpe.run(tpe_skewed)
    for _ in range(args.rounds):
        for qc in caps:
            for n in ("wide", "layered"):
                times.setdefault((qc, n), []).append(timed(impls[qc], prepared[qc][n]))
            ours = timed(impls[qc], prepared[qc]["skewed"])
            skew_ratios[qc].append(ours / timed(tpe, tpe_skewed))
    print(f"{args.workers} workers, median of {args.rounds} interleaved rounds")
    print(
        f"{'queue_cap':>9} {'eff_cap':>7} {'wide us/t':>10} {'layered us/t':>12} {'skewed/tpe':>10}"
    )
    for qc in caps:
        us = {
            n: statistics.median(times[(qc, n)]) / specs[n].tasks_run * 1e6
            for n in ("wide", "layered")
        }
        print(
            f"{qc:>9} {args.workers * (qc + 1):>7} {us['wide']:>10.2f} {us['layered']:>12.2f}"
            f" {statistics.median(skew_ratios[qc]):>10.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
