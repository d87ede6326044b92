"""What observability costs: a wide graph of no-op tasks, with and without it.

Runs 10,000 independent no-op tasks on one reused Executor in five modes and
prints the median wall time of several repeats, per task and as a ratio to the
plain run:

* off: no trace, no callbacks (the baseline);
* trace: ``trace=True``;
* no-op callback: one callback with an empty ``on_task_end`` (the workers time
  every task for it, the scheduler calls it once per task);
* progress (pipe): ``ProgressBar`` on a non-terminal stream (counts only);
* progress (tty): ``ProgressBar`` drawing to a fake terminal (redraws at most
  every 0.1 s, plus start notices from the workers for the running count).

No-op tasks are the worst case: any per-task cost is all there is to see.
Usage, from a clone without installing::

    python benchmarks/bench_trace.py [--tasks 10000] [--repeats 7] [--workers 2] [--queue-cap 16]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable, Hashable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec
from dagexec._engine.front.executor import DEFAULT_QUEUE_CAP
from dagexec._observation.progress import ProgressBar


class NoOp(dagexec.Callback):
    def on_task_end(self, name: Hashable, state: dagexec.TaskState, seconds: float) -> None:
        pass


def _noop() -> None:
    return None


def wide_graph(n: int) -> dagexec.Graph:
    g = dagexec.Graph()
    for i in range(n):
        g.add(i, _noop)
    return g


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queue-cap", type=int, default=DEFAULT_QUEUE_CAP)
    args = parser.parse_args()

    graph = wide_graph(args.tasks)
    graph.validate()  # cached: no mode pays for validation
    modes: dict[str, Callable[[dagexec.Executor], dagexec.RunResult]] = {
        "off": lambda ex: ex.run(graph),
        "trace": lambda ex: ex.run(graph, trace=True),
        "no-op callback": lambda ex: ex.run(graph, callbacks=[NoOp()]),
        "progress (pipe)": lambda ex: ex.run(
            graph, callbacks=[ProgressBar(io.StringIO(), is_tty=False)]
        ),
        "progress (tty)": lambda ex: ex.run(
            graph, callbacks=[ProgressBar(io.StringIO(), is_tty=True)]
        ),
    }
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with dagexec.Executor(args.workers, queue_cap=args.queue_cap) as ex:
        ex.run(graph)  # warm-up: threads, caches, plan
        # Interleave the modes so drift in machine load hits all of them alike.
        for _ in range(args.repeats):
            for mode, fn in modes.items():
                t0 = time.perf_counter()
                result = fn(ex)
                times[mode].append(time.perf_counter() - t0)
                assert result.stats.tasks_run == args.tasks
                if mode == "trace":
                    assert len(result.trace) == args.tasks

    print(
        f"{args.tasks} no-op tasks, {args.workers} workers, queue_cap {args.queue_cap}, "
        f"median of {args.repeats} runs (Python {sys.version.split()[0]})"
    )
    base = statistics.median(times["off"])
    print(f"{'mode':<18}{'run ms':>9}{'us/task':>9}{'vs off':>8}")
    for mode, samples in times.items():
        med = statistics.median(samples)
        print(f"{mode:<18}{med * 1e3:>9.1f}{med / args.tasks * 1e6:>9.2f}{med / base:>7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
