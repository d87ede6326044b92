"""Run one workload through dagexec in a loop, for a profiler to watch.

``py-spy record --threads --idle -f raw -o out.txt -- python benchmarks/profile_target.py wide``
or ``python -m cProfile -o wide.prof benchmarks/profile_target.py wide`` (cProfile sees
only the calling thread; use ``--all-threads`` to hook every thread with
``threading.setprofile``-started profilers, dumped as ``PATH.<thread>.prof``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent)), str(HERE)]

from peers import Dagexec  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--queue-cap", type=int)
    p.add_argument("--max-in-flight", type=int)
    p.add_argument("--all-threads", metavar="PATH", help="cProfile every thread into PATH.*")
    args = p.parse_args()
    spec = WORKLOADS[args.workload](False)
    impl = Dagexec(2, args.queue_cap, args.max_in_flight)
    prepared = impl.prepare(spec)
    impl.run(prepared)
    profiles: list[tuple[str, cProfile.Profile]] = []
    if args.all_threads:
        lock = threading.Lock()

        def hook(*_: object) -> None:
            # Called once in each new thread: start a profiler there, keep it.
            threading.setprofile(None)
            import sys as _sys

            _sys.setprofile(None)
            prof = cProfile.Profile()
            with lock:
                profiles.append((threading.current_thread().name, prof))
            prof.enable()

        threading.setprofile(hook)
    t = time.perf_counter()
    for _ in range(args.runs):
        impl.run(prepared)
    el = time.perf_counter() - t
    print(f"{args.workload}: {el / args.runs / spec.tasks_run * 1e6:.2f} us/task", file=sys.stderr)
    for i, (name, prof) in enumerate(profiles):
        prof.disable()
        prof.dump_stats(f"{args.all_threads}.{i}.{name}.prof")


if __name__ == "__main__":
    main()
