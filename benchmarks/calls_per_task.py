"""Python calls per task on the scheduler thread: a cost measure that noise cannot move.

``python benchmarks/calls_per_task.py`` runs a wide no-op graph (1 -> N -> 1) once
warm, with cProfile switched on inside the scheduler thread only, and prints the
function calls made there per task, with the busiest functions. On a shared
2-core VM wall-clock A/B runs of a few percent are lost in noise; this count is
exact and repeatable, so it shows whether a change added work to the hot path
(e.g. a feature that should cost nothing when off). Compare two copies of the
package in one shell with ``DAGEXEC_SRC=/path/to/other/checkout``.

Worker-side work is not counted (workers run the tasks; see ``dagexec/_engine/workers/worker.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent))]

import dagexec  # noqa: E402
import dagexec._engine.run.scheduler as scheduler  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--width", type=int, default=2000, help="no-op tasks between root and sink")
    p.add_argument("--top", type=int, default=12, help="busiest functions to list")
    args = p.parse_args(argv)

    g = dagexec.Graph()
    g.add("root", lambda: 0)
    for i in range(args.width):
        g.add(i, lambda r: r, deps=["root"])
    g.add("sink", lambda *a: len(a), deps=list(range(args.width)))
    tasks = args.width + 2

    profile = cProfile.Profile()
    original = scheduler.Run.main

    def profiled(self: Any, **options: Any) -> None:
        profile.enable()
        try:
            original(self, **options)
        finally:
            profile.disable()

    with dagexec.Executor(workers=2) as ex:
        ex.run(g)  # warm: plans cached, threads started
        scheduler.Run.main = profiled  # type: ignore[method-assign]
        try:
            ex.run(g)
        finally:
            scheduler.Run.main = original  # type: ignore[method-assign]

    stats = pstats.Stats(profile)
    total: int = stats.total_calls  # type: ignore[attr-defined]
    print(f"dagexec from {Path(dagexec.__file__).parent}")
    print(f"scheduler-thread Python calls per task: {total / tasks:.2f} ({tasks} tasks)")
    stats.sort_stats("ncalls").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
