"""Per-task overhead of ``dagexec.dask.run_on`` vs a hand-built dask graph with string keys.

``python benchmarks/cluster_overhead.py [--tasks 2000] [--runs 5]``

Both run the same no-op work on one ``distributed.LocalCluster(processes=True,
n_workers=2, threads_per_worker=1)``: a layered graph of ``--tasks`` tasks
(20 per layer, each needing 1-2 of the layer before) as a ``dagexec.Graph``
through ``run_on``, and as a dict of string keys and tuples through
``client.get``. Alternating, median of ``--runs``; per task = wall time / tasks.
Issue 22's target: run_on within 1.2x of the hand-built graph.

Also printed: how much of each is the client's own work before the cluster
starts on the graph (``Client.get(..., sync=False)`` returning for the
hand-built graph; ``submit_on`` returning, which plans, checks and sends the
graph, for ``run_on``). The cluster's scheduler runs in this process too, so
the rest of the time competes with it for the GIL.

``--attempts`` gives every dagexec task ``retries=1, retry_delay=0.01`` (never
used: the tasks do not fail), so each runs in dagexec's attempt loop on the
worker (``dagexec._integrations.dask_worker.Attempts``): the wrapper's cost.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagexec
import dagexec.dask as dd


def step(*args: int) -> int:
    return len(args)


def shape(n: int, width: int = 20, seed: int = 5) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    tasks: list[tuple[str, list[str]]] = []
    prev: list[str] = []
    for layer in range(n // width):
        cur = [f"t{layer}_{i}" for i in range(width)]
        for name in cur:
            tasks.append((name, rng.sample(prev, rng.randint(1, 2)) if prev else []))
        prev = cur
    return tasks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--attempts", action="store_true", help="every task in the attempt loop")
    args = p.parse_args()
    from distributed import Client, LocalCluster

    tasks = shape(args.tasks)
    sinks = sorted({n for n, _ in tasks} - {d for _, deps in tasks for d in deps})
    g = dagexec.Graph()
    for name, deps in tasks:
        if args.attempts:
            g.add(name, step, deps=deps, retries=1, retry_delay=0.01)
        else:
            g.add(name, step, deps=deps)
    dsk: dict[str, Any] = {name: (step, *deps) for name, deps in tasks}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",  # a free port: None still binds 8787
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,
    ):
        ours = dd.run_on(client, g, sinks)
        assert list(client.get(dsk, sinks)) == [ours[s] for s in sinks]
        times: dict[str, list[float]] = {"hand-built dask graph": [], "run_on": []}
        sent: dict[str, list[float]] = {"hand-built dask graph": [], "run_on": []}
        for _ in range(args.runs):
            # What client.get(dsk, sinks) does, with the moment the graph is sent noted.
            started = time.perf_counter()
            futures = client.get(dsk, sinks, sync=False)
            sent["hand-built dask graph"].append(time.perf_counter() - started)
            client.gather(futures)
            times["hand-built dask graph"].append(time.perf_counter() - started)
            for future in futures:
                future.release()
            # What run_on does, with the moment the graph is sent noted.
            started = time.perf_counter()
            run = dd.submit_on(client, g, sinks)
            sent["run_on"].append(time.perf_counter() - started)
            run.result()
            times["run_on"].append(time.perf_counter() - started)
    per_task = {k: statistics.median(v) / len(tasks) * 1e3 for k, v in times.items()}
    for k, ms in per_task.items():
        client_ms = statistics.median(sent[k]) / len(tasks) * 1e3
        print(f"{k:22s} {ms:.3f} ms/task (the client's, until the graph is sent: {client_ms:.3f})")
    ratio = per_task["run_on"] / per_task["hand-built dask graph"]
    print(f"run_on / hand-built: {ratio:.2f}x (target <= 1.2x)")


if __name__ == "__main__":
    main()
