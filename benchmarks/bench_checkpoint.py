"""What checkpointing costs: task identities, the caller's share of a save, the writer.

Three measurements, each the median of several repeats:

* identities: ``task_identities`` over a chain of N tasks sharing one function,
  and over N distinct lambdas with a constant argument each (us/task);
* caller: what one save costs the thread that makes it, for small values and
  for 1 MiB values, split into pickling and queueing. The store pickles on the
  caller (the engine's worker thread, see ``dagexec/_persist/checkpoint_values.py``); the
  alternative, pickling on the writer, would leave the caller only the queueing;
* writer: values and MB per second from the first save until ``flush()``
  returns, with ``durable=True`` (fsync per commit) and ``durable=False``;
* whole runs: ``dagexec.run`` of N small tasks (a layered graph: each task
  needs two of the layer before, so nothing fuses) without a checkpoint, with
  one on a fresh file (every value saved; the run ends once all are committed),
  and again on the full file (only the targets are loaded, nothing runs).

Usage, from a clone without installing::

    python benchmarks/bench_checkpoint.py [--tasks 200000] [--saves 20000] [--big 100]
                                          [--run-tasks 20000] [--repeats 5] [--dir DIR]

``--dir`` puts the database files there (default: a temporary directory); the
writer's numbers depend on that disk.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec
from dagexec._persist.checkpoint import CheckpointStore
from dagexec._persist.checkpoint_values import pickle_value
from dagexec._persist.identity import task_identities


def _inc(x: int) -> int:
    return x + 1


def median_us(fn: Callable[[], object], per: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / per * 1e6


def bench_identities(n: int, repeats: int) -> None:
    names = [f"task-{i}" for i in range(n)]
    deps: list[tuple[int, ...]] = [()] + [(i - 1,) for i in range(1, n)]
    shared = [_inc] * n
    lambdas = [(lambda x, i=i: x + i) for i in range(n)]
    args = [(i, "const") for i in range(n)]
    print(f"identities, {n:,}-task chain:")
    us = median_us(lambda: task_identities(names, shared, deps), n, repeats)
    print(f"  one shared function:                  {us:6.2f} us/task")
    us = median_us(lambda: task_identities(names, lambdas, deps, args), n, repeats)
    print(f"  distinct lambdas + constant args:     {us:6.2f} us/task")


def bench_caller(label: str, value: Any, n: int, repeats: int, folder: Path) -> None:
    data = pickle_value(value, "v")
    ids = [i.to_bytes(16, "big") for i in range(n)]
    pickle_us = median_us(lambda: [pickle.dumps(value, protocol=5) for _ in range(n)], n, repeats)
    queue_times = []
    for r in range(repeats):
        with CheckpointStore(folder / f"caller-{label}-{r}.sqlite", durable=False) as store:
            start = time.perf_counter()
            for identity in ids:
                store.save_pickled_nowait(identity, data, name="v")
            queue_times.append(time.perf_counter() - start)
    queue_us = statistics.median(queue_times) / n * 1e6
    print(f"caller thread, {label} values ({len(data):,} bytes pickled), {n:,} saves:")
    print(f"  pickle (on the caller, as chosen):    {pickle_us:8.2f} us/task")
    print(f"  queue for the writer:                 {queue_us:8.2f} us/task")
    print(f"  save_nowait total:                    {pickle_us + queue_us:8.2f} us/task")
    print(f"  if the writer pickled instead:        {queue_us:8.2f} us/task on the caller")


def bench_writer(label: str, value: Any, n: int, repeats: int, folder: Path) -> None:
    data = pickle_value(value, "v")
    for durable in (True, False):
        times = []
        for r in range(repeats):
            path = folder / f"writer-{label}-{durable}-{r}.sqlite"
            with CheckpointStore(path, durable=durable) as store:
                start = time.perf_counter()
                for i in range(n):
                    store.save_pickled_nowait(i.to_bytes(16, "big"), data, name=i)
                store.flush()
                times.append(time.perf_counter() - start)
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        seconds = statistics.median(times)
        print(
            f"writer, {label} values, durable={durable!s:5}: {n / seconds:10,.0f} values/s "
            f"{n * len(data) / seconds / 2**20:8.1f} MiB/s  ({seconds / n * 1e6:.1f} us/value)"
        )


def _layered(n: int, width: int = 100) -> dagexec.Graph:
    g = dagexec.Graph()
    for i in range(n):
        layer, k = divmod(i, width)
        if layer == 0:
            g.add(i, _inc, args=(k,))
        else:
            below = (layer - 1) * width
            g.add(i, _add, deps=[below + k, below + (k + 1) % width])
    return g


def _add(x: int, y: int) -> int:
    return x + y


def bench_runs(n: int, repeats: int, folder: Path) -> None:
    """us/task of whole runs: the checkpoint's total cost as a user sees it."""
    graph = _layered(n)
    print(f"whole runs, {n:,}-task layered graph, 2 workers:")
    off = median_us(lambda: dagexec.run(graph, workers=2), n, repeats)
    print(f"  no checkpoint:                        {off:8.2f} us/task")
    count = iter(range(10**9))

    def fresh() -> None:
        dagexec.run(graph, workers=2, checkpoint=folder / f"fresh-{next(count)}.sqlite")

    saving = median_us(fresh, n, repeats)
    print(f"  checkpoint, fresh file (all saved):   {saving:8.2f} us/task  (+{saving - off:.2f})")
    full = folder / "full.sqlite"
    dagexec.run(graph, workers=2, checkpoint=full)
    loading = median_us(lambda: dagexec.run(graph, workers=2, checkpoint=full), n, repeats)
    print(f"  checkpoint, full file (targets loaded):{loading:8.2f} us/task")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks for identities")
    parser.add_argument("--saves", type=int, default=20_000, help="small values saved")
    parser.add_argument("--big", type=int, default=100, help="1 MiB values saved")
    parser.add_argument("--run-tasks", type=int, default=20_000, help="tasks per whole run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}; medians of {args.repeats} repeats")
    bench_identities(args.tasks, args.repeats)
    small = ("result", 42, 3.5)
    big = bytes(range(256)) * 4096  # 1 MiB
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        bench_caller("small", small, args.saves, args.repeats, folder)
        bench_caller("1 MiB", big, args.big, args.repeats, folder)
        bench_writer("small", small, args.saves, args.repeats, folder)
        bench_writer("1 MiB", big, args.big, args.repeats, folder)
        bench_runs(args.run_tasks, args.repeats, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
