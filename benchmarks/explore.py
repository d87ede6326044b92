"""How fast ``dagexec.testing.explore`` finds the three bugs of docs/explore.md,
against plain runs, and what exploring costs per run.

For each bug (tests/explore_bugs.py: a shared file, a module-level cache, a
database row) and each strategy, ``explore`` runs with seeds 0, 1, ...
(``--seeds``) and the figure is the median number of schedules it ran up to and
including the one that diverged (its ``seed`` minus the starting seed, plus
one). "plain" is the same bug's graph under plain ``Executor(workers=2).run``
calls, ``setup()`` before each, counting runs until one gives a different
result from a one-worker run (the plain order), at most ``--plain-cap`` runs:
">N" means it never did.

The cost: wall time per run of ``explore`` on the fixed graph of each bug (no
divergence, so every run is a full run: ``setup``, the run, the comparison),
against a plain ``Executor.run`` of the same graph on a reused executor,
``setup`` included. Wall time on this shared 2-core VM is noisy: each is the
median of ``--rounds`` rounds.

    python benchmarks/explore.py [--seeds 20] [--plain-cap 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import explore_bugs as eb

import dagexec
from dagexec.testing import ScheduleDivergence, explore

STRATEGIES = ("random", "pct", "exhaustive")


def bugs(directory: Path, fixed: bool = False) -> dict[str, eb.Bug]:
    return {
        "shared file": eb.file_bug(directory, fixed=fixed),
        "module cache": eb.cache_bug(fixed=fixed),
        "database row": eb.database_bug(directory, fixed=fixed),
    }


def runs_to_find(bug: eb.Bug, strategy: str, seed: int) -> int | None:
    try:
        explore(bug.graph, setup=bug.setup, strategy=strategy, seed=seed, resources=bug.capacity)
    except ScheduleDivergence as e:
        return e.seed - seed + 1
    return None


def outcome(result: dagexec.RunResult) -> tuple[Any, ...]:
    return (dict(result), dict(result.status), {k: repr(v) for k, v in result.errors.items()})


def plain_runs_to_find(bug: eb.Bug, cap: int) -> int | None:
    bug.setup()
    with dagexec.Executor(1) as one:
        reference = outcome(one.run(bug.graph, on_error="continue", resources=bug.capacity))
    with dagexec.Executor(2) as ex:
        for n in range(1, cap + 1):
            bug.setup()
            if outcome(ex.run(bug.graph, on_error="continue", resources=bug.capacity)) != reference:
                return n
    return None


def median_or_none(values: list[int | None]) -> str:
    if any(v is None for v in values):
        found = [v for v in values if v is not None]
        return f"{len(found)}/{len(values)} found"
    return f"{statistics.median([v for v in values if v is not None]):g}"


def per_run(fn: Callable[[], object], runs: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) / runs)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--plain-cap", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print("median schedules run to find each bug (explore's default runs=100)")
        print(f"{'bug':<14}" + "".join(f"{s:>12}" for s in STRATEGIES) + f"{'plain':>12}")
        for name, bug in bugs(directory).items():
            row = [
                median_or_none([runs_to_find(bug, s, seed) for seed in range(a.seeds)])
                for s in STRATEGIES
            ]
            plain = plain_runs_to_find(bug, a.plain_cap)
            row.append(f">{a.plain_cap}" if plain is None else str(plain))
            print(f"{name:<14}" + "".join(f"{c:>12}" for c in row))
        print("\nwall time per run, fixed graphs (median of rounds)")
        print(f"{'bug':<14}{'Executor.run':>14}{'explore':>12}{'ratio':>8}")
        runs = 50
        with dagexec.Executor(2) as ex:
            for name, bug in bugs(directory, fixed=True).items():

                def plain(bug: eb.Bug = bug) -> None:
                    for _ in range(runs):
                        bug.setup()
                        ex.run(bug.graph, resources=bug.capacity)

                def explored(bug: eb.Bug = bug) -> None:
                    explore(bug.graph, setup=bug.setup, runs=runs - 1, resources=bug.capacity)

                base = per_run(plain, runs, a.rounds)
                cost = per_run(explored, runs, a.rounds)
                print(f"{name:<14}{base * 1e6:>12.0f}us{cost * 1e6:>10.0f}us{cost / base:>7.1f}x")


if __name__ == "__main__":
    main()
