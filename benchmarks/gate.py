"""The speed gate: one tree against another, on every workload of ``run.py``.

``python benchmarks/gate.py BEFORE AFTER [--pairs 10] [--no-valgrind] [--only wide,chain]``

Workloads: those of ``run.py``, and ``checkpoint``: the layered graph run with a
checkpoint, each run on a fresh file (identities, a pickle and a commit per task).

BEFORE and AFTER are checkouts of dagexec (e.g. ``git worktree add /tmp/before HEAD~3``).
Wall time on a shared 2-core VM moves +-20% between processes, so a few percent
cannot be seen in it; the gate therefore prints three figures per workload,
each as AFTER / BEFORE:

* **calls/task**: Python calls made on the thread that drives the run, per task,
  counted by cProfile during one warm run (the median of three processes: with
  two workers the batching depends on timing, which moves it by ~1%);
* **instr/task**: instructions per task of a warm run with one worker, counted by
  valgrind's cachegrind (``--cache-sim=no``) as the difference between a process
  that runs the graph three times and one that runs it once, so start-up, import
  and graph building cancel out; repeatable within a fraction of a percent;
* **wall**: the median of ``--pairs`` ratios, each from a BEFORE and an AFTER
  process run back to back (the order alternates), each process timing the best
  of three warm runs.

The gate (issue 20): calls and instructions <= 1.03x, wall <= 1.05x.
Workloads use their quick sizes (the 2,000-task wide graph, ...), since cachegrind
runs Python about 50x slower.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import cProfile, importlib, itertools, os, sys, tempfile, time
src, workload, mode, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = [src, {here!r}]
import dagexec
from workloads import WORKLOADS
spec = WORKLOADS[{checkpointed!r}.get(workload, workload)](True)
g = dagexec.Graph()
for name, (fn, deps) in spec.tasks.items():
    g.add(name, fn, deps=deps)
targets = spec.targets
tasks = spec.tasks_run
workers = 1 if mode == "instr" else 2
files = tempfile.TemporaryDirectory()
fresh = itertools.count()
def options():
    # A checkpointed workload: every run on a fresh file (identities, a save per task).
    if workload not in {checkpointed!r}:
        return {{}}
    return {{"checkpoint": os.path.join(files.name, f"c{{next(fresh)}}.sqlite")}}
with dagexec.Executor(workers=workers) as ex:
    ex.run(g, targets, **options())  # warm: plan cached, threads started
    if mode == "calls":
        # The layered tree, then the flat one of before issue 20 (spelled in two
        # parts so that tools which rename module paths leave it alone).
        for path in (
            "dagexec._engine.run.scheduler",
            "dagexec._engine." + "scheduler",
            "dagexec." + "_scheduler",
        ):
            try:
                run_cls = importlib.import_module(path).Run
                break
            except ImportError:
                continue
        profile = cProfile.Profile()
        original = run_cls.main
        def main(self, **kw):
            profile.enable()
            try:
                original(self, **kw)
            finally:
                profile.disable()
        run_cls.main = main
        ex.run(g, targets, **options())
        run_cls.main = original
        import pstats
        calls = sum(v[1] for v in pstats.Stats(profile).stats.values())
        print(calls / tasks)
    elif mode == "instr":
        for _ in range(repeat - 1):
            ex.run(g, targets, **options())
    else:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            ex.run(g, targets, **options())
            best = min(best, time.perf_counter() - t)
        print(best / tasks)
"""


# Gate workloads that run a workload of run.py with a checkpoint: each run on a
# fresh file, so it computes every identity, and pickles and commits every value.
CHECKPOINTED = {"checkpoint": "layered"}


def child(src: str, workload: str, mode: str, repeat: int = 1, valgrind: bool = False) -> str:
    script = CHILD.format(here=str(HERE), checkpointed=CHECKPOINTED)
    # -S: no site-packages, so an editable install of some other checkout cannot
    # answer for a module this one lacks.
    cmd = [sys.executable, "-S", "-c", script, src, workload, mode, str(repeat)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if valgrind:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cg.out")
            cmd = [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={out}",
                *cmd,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            m = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
            assert m, proc.stderr[-2000:]
            return m.group(1).replace(",", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip().splitlines()[-1]


def instructions_per_task(src: str, workload: str) -> float:
    from workloads import WORKLOADS

    tasks = WORKLOADS[CHECKPOINTED.get(workload, workload)](True).tasks_run
    three = int(child(src, workload, "instr", 3, valgrind=True))
    one = int(child(src, workload, "instr", 1, valgrind=True))
    return (three - one) / (2 * tasks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--no-valgrind", action="store_true")
    p.add_argument("--only", default="", help="comma-separated workloads (default: all)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from workloads import WORKLOADS

    names = [w for w in [*WORKLOADS, *CHECKPOINTED] if not args.only or w in args.only.split(",")]
    before, after = os.path.abspath(args.before), os.path.abspath(args.after)
    print(f"before: {before}\nafter:  {after}\n")
    header = (
        f"{'workload':<10} {'calls/task':>22} {'instr/task':>26} {'wall (median of pairs)':>24}"
    )
    print(header)
    worst = 0.0
    for name in names:
        # With two workers the batches a run makes depend on timing: take the median of 3.
        cb, ca = (
            statistics.median(float(child(s, name, "calls")) for _ in range(3))
            for s in (before, after)
        )
        if args.no_valgrind:
            instr = "-"
            ib = ia = 1.0
        else:
            ib, ia = instructions_per_task(before, name), instructions_per_task(after, name)
            instr = f"{ib:,.0f} -> {ia:,.0f} {ia / ib:.3f}x"
        ratios = []
        for i in range(args.pairs):
            order = (before, after) if i % 2 == 0 else (after, before)
            t = {s: float(child(s, name, "wall")) for s in order}
            ratios.append(t[after] / t[before])
        wall = statistics.median(ratios)
        worst = max(worst, ca / cb, ia / ib)
        print(
            f"{name:<10} {cb:8.1f} -> {ca:6.1f} {ca / cb:.3f}x {instr:>26} {wall:>20.3f}x",
            flush=True,
        )
    print(f"\nworst deterministic ratio: {worst:.3f}x (gate: <= 1.03x; wall gate <= 1.05x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
