"""Peak memory and time: dagexec.dask.get vs dask's threaded scheduler, 2 workers each.

``python benchmarks/dask_memory.py [--runs 9] [--only NAME] [--queue-cap N] [--sizing]``

Every figure is one fresh process per run (a process's peak RSS only grows, and
the allocator keeps what it got, so runs must not share one), alternating between
the two schedulers (which goes first rotates) so that drift on a shared machine
hits both alike; the table gives the median of ``--runs``. Peak RSS is measured
from the moment ``compute`` is called: the child resets the kernel's high-water
mark (``/proc/self/clear_refs``) after building the collection, then reads
``VmHWM`` minus the ``VmRSS`` it had then. Time is the ``compute`` call alone.

Workloads (issues 22 and 33): ``(x + x.T).sum()`` on 12000^2 with chunks=1000;
``(x + x.T).mean(axis=0)`` on 8000^2 with chunks=1000 and 250; ``(x @ x.T).sum()``
on 6000^2 with chunks=1000 (``--full``: 12000^2, ~35 s a run here); a bag word
count; ``x.cumsum(axis).sum()`` along each axis (6000^2, chunks=1000); a rechunk
into column strips; ``map_overlap``; bag ``foldby`` and ``groupby`` (task
shuffle); a delayed tree of 1 MB arrays; and, with pandas (and pyarrow)
installed, a dataframe groupby-agg and a merge with a task shuffle.
``--queue-cap N`` passes an explicit bound to dagexec (today's fixed depth), for
comparison. ``--sizing`` prints instead how much of the CPU of the thread that
drives each dagexec run goes into sizing values (the memory-aware depth's
samples), from ``--runs`` dagexec processes per workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_TEXT = "the quick brown fox jumps over the lazy dog and runs far away"

WORKLOADS = (
    "sum 12k c1000",
    "mean 8k c1000",
    "mean 8k c250",
    "matmul",
    "bag wordcount",
    "cumsum axis0",
    "cumsum axis1",
    "rechunk",
    "map_overlap",
    "bag foldby",
    "bag groupby",
    "delayed tree",
    "df groupby-agg",
    "df merge tasks",
)

# Workloads that need pandas (and pyarrow, for dask.dataframe): skipped without them.
DATAFRAME = ("df groupby-agg", "df merge tasks")

# Targets of issue 33: peak RSS <= 1.2x dask threaded's + 8 MiB; time <= 1.10x.
RSS_RATIO, RSS_SLACK_MIB, TIME_RATIO = 1.2, 8.0, 1.10


def collection(name: str, full: bool) -> Any:
    if name.startswith("bag") or name == "delayed tree":
        return _bag_or_delayed(name)
    if name in DATAFRAME:
        return _dataframe(name)
    import dask.array as da  # not imported by the bag and dataframe children

    rng = da.random.default_rng(0)
    if name == "sum 12k c1000":
        x = rng.random((12000, 12000), chunks=1000)
        return (x + x.T).sum()
    if name.startswith("mean 8k"):
        x = rng.random((8000, 8000), chunks=1000 if name.endswith("c1000") else 250)
        return (x + x.T).mean(axis=0)
    if name == "matmul":
        n = 12000 if full else 6000
        x = rng.random((n, n), chunks=1000)
        return (x @ x.T).sum()
    if name.startswith("cumsum axis"):  # half its tasks return views of 8 MB chunks
        x = rng.random((6000, 6000), chunks=1000)
        return x.cumsum(axis=int(name[-1])).sum()
    if name == "rechunk":  # 1000^2 blocks into column strips, 8000 x 250
        x = rng.random((8000, 8000), chunks=1000)
        return x.rechunk((8000, 250)).sum(axis=0)
    if name == "map_overlap":
        x = rng.random((6000, 6000), chunks=1000)
        return x.map_overlap(_double, depth=2, boundary="reflect").sum()
    raise SystemExit(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")


def _double(block: Any) -> Any:
    return block * 2


def _bag_or_delayed(name: str) -> Any:
    import operator

    import dask
    import dask.bag as db

    if name == "bag wordcount":
        words = _TEXT.split(" ")
        lines = [" ".join(words[(i + j) % len(words)] for j in range(40)) for i in range(200_000)]
        return db.from_sequence(lines, npartitions=200).map(str.split).flatten().frequencies()
    if name == "bag foldby":
        numbers = db.from_sequence(range(2_000_000), npartitions=200)
        return numbers.foldby(_mod100, operator.add, 0, operator.add, 0)
    if name == "bag groupby":
        numbers = db.from_sequence(range(400_000), npartitions=64)
        return numbers.groupby(_mod100, shuffle="tasks").map(_count_group)
    if name == "delayed tree":  # 1 MB leaves summed pairwise: 1,023 tasks
        import numpy as np

        level = [dask.delayed(np.full)(125_000, float(i)) for i in range(512)]
        while len(level) > 1:
            level = [
                dask.delayed(operator.add)(a, b)
                for a, b in zip(level[::2], level[1::2], strict=True)
            ]
        return dask.delayed(np.sum)(level[0])
    raise SystemExit(f"unknown workload {name!r}")


def _mod100(n: int) -> int:
    return n % 100


def _count_group(group: tuple[int, list[int]]) -> tuple[int, int]:
    return group[0], len(group[1])


def _dataframe(name: str) -> Any:
    import dask

    if name == "df groupby-agg":  # 2.6 M rows in 30 daily partitions
        df = dask.datasets.timeseries(start="2000-01-01", end="2000-01-31", freq="1s", seed=1)
        return df.groupby("name").agg({"x": "sum", "y": "mean", "id": "count"})
    # One row of right per id of left (a key merge, not many-to-many): 1 M rows
    # against 200,000, in 20 and 10 partitions, shuffled by tasks.
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    n = 1_000_000
    left = pd.DataFrame({"id": rng.integers(0, n // 5, n), "x": rng.random(n)})
    right = pd.DataFrame({"id": np.arange(n // 5), "y": rng.random(n // 5)})
    left_dd, right_dd = dd.from_pandas(left, npartitions=20), dd.from_pandas(right, npartitions=10)
    merged = left_dd.merge(right_dd, on="id", shuffle_method="tasks")
    return merged[["x", "y"]].sum()


def _status(field: str) -> int:
    """A /proc/self/status memory field, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(name: str, scheduler: str, full: bool, queue_cap: int | None, sizing: bool) -> None:
    """One run in this (fresh) process; prints {"peak": bytes, "seconds": s}, and with
    ``sizing`` the CPU the run's driving thread spent sizing values, and in all."""
    import dask

    sys.path.insert(0, str(ROOT))
    import dagexec.dask as dd

    x = collection(name, full)
    kwargs: dict[str, Any] = {"num_workers": 2}
    cpu = {"sizing": 0.0, "driver": 0.0, "samples": 0.0}
    if scheduler == "dagexec":
        kwargs["scheduler"] = dd.get
        if queue_cap is not None:
            kwargs["queue_cap"] = queue_cap
        if sizing:
            _time_sizing(dd, cpu)
    else:
        kwargs["scheduler"] = "threads"
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
    before = _status("VmRSS")
    started = time.perf_counter()
    dask.compute(x, **kwargs)
    seconds = time.perf_counter() - started
    peak = _status("VmHWM") - before
    print(json.dumps({"peak": peak, "seconds": seconds, **cpu}))


def _time_sizing(dd: Any, cpu: dict[str, float]) -> None:
    """Count the thread CPU of sizing values (every estimate with its budget's
    bookkeeping, and every check of that budget), and of each run's driving thread
    (the calling thread: a plain ``get`` is driven by its caller)."""
    import threading

    from dagexec._engine.run.depth import Depth

    execute = dd.execute
    caller = threading.get_ident()

    def timed(method: Any, counted: bool) -> Any:
        def run(self: Any, *args: Any) -> Any:
            started = time.thread_time()
            try:
                return method(self, *args)
            finally:
                if threading.get_ident() != caller:
                    raise RuntimeError("sizing ran off the calling thread: the share is wrong")
                cpu["sizing"] += time.thread_time() - started
                cpu["samples"] += counted

        return run

    def timed_execute(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return execute(*args, **kwargs)
        finally:
            cpu["driver"] += time.thread_time() - started

    Depth.size = timed(Depth.size, True)  # type: ignore[method-assign]
    Depth.put_off = timed(Depth.put_off, False)  # type: ignore[method-assign]
    dd.execute = timed_execute


def measure(
    name: str, scheduler: str, full: bool, queue_cap: int | None, sizing: bool = False
) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", name, "--scheduler", scheduler]
    if full:
        cmd.append("--full")
    if queue_cap is not None:
        cmd += ["--queue-cap", str(queue_cap)]
    if sizing:
        cmd.append("--sizing")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _have_dataframes() -> bool:
    try:
        import dask.dataframe  # noqa: F401  (needs pandas and pyarrow)
    except ImportError:
        return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--only", action="append", help="workload name (repeatable)")
    p.add_argument("--full", action="store_true", help="matmul on 12000^2")
    p.add_argument("--queue-cap", type=int, default=None)
    p.add_argument(
        "--sizing",
        action="store_true",
        help="instead: the share of the driving thread's CPU that sizing values takes",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--scheduler", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.scheduler, args.full, args.queue_cap, args.sizing)
        return
    started = time.perf_counter()
    names = list(args.only or WORKLOADS)
    if not _have_dataframes():
        skipped = [n for n in names if n in DATAFRAME]
        names = [n for n in names if n not in DATAFRAME]
        if skipped:
            print(f"skipped (no pandas/pyarrow): {', '.join(skipped)}", flush=True)
    if args.sizing:
        _sizing_table(names, args.runs, args.full)
    else:
        _table(names, args.runs, args.full, args.queue_cap)
    print(f"({len(names)} workloads, --runs {args.runs}: {time.perf_counter() - started:.0f} s)")


def _table(names: list[str], runs_wanted: int, full: bool, queue_cap: int | None) -> None:
    """Per workload: the median peak RSS and time of each scheduler, against the targets."""
    mib = 1 << 20
    print(
        f"{'workload':16s} {'threads MiB':>11s} {'dagexec MiB':>11s} {'RSS ok':>6s}"
        f" {'threads s':>9s} {'dagexec s':>9s} {'ratio':>6s} {'time ok':>7s}",
        flush=True,
    )
    for name in names:
        runs: dict[str, list[dict[str, float]]] = {"threads": [], "dagexec": []}
        for i in range(runs_wanted):
            # The order rotates, so that neither scheduler always runs first.
            for scheduler in ("threads", "dagexec") if i % 2 == 0 else ("dagexec", "threads"):
                runs[scheduler].append(measure(name, scheduler, full, queue_cap))
        peak = {s: statistics.median(r["peak"] for r in runs[s]) / mib for s in runs}
        secs = {s: statistics.median(r["seconds"] for r in runs[s]) for s in runs}
        rss_ok = peak["dagexec"] <= RSS_RATIO * peak["threads"] + RSS_SLACK_MIB
        ratio = secs["dagexec"] / secs["threads"]
        print(
            f"{name:16s} {peak['threads']:11.1f} {peak['dagexec']:11.1f} "
            f"{'yes' if rss_ok else 'NO':>6s} {secs['threads']:9.3f} {secs['dagexec']:9.3f} "
            f"{ratio:6.2f} {'yes' if ratio <= TIME_RATIO else 'NO':>7s}",
            flush=True,
        )


def _sizing_table(names: list[str], runs: int, full: bool) -> None:
    """Per workload: size estimates per run, their CPU, and their share of the CPU of
    the thread that drove the run (medians of ``runs`` dagexec processes)."""
    print(f"{'workload':16s} {'samples':>8s} {'sizing ms':>9s} {'driver ms':>9s} {'share':>6s}")
    for name in names:
        found = [measure(name, "dagexec", full, None, sizing=True) for _ in range(runs)]
        share = statistics.median(r["sizing"] / max(r["driver"], 1e-9) for r in found)
        print(
            f"{name:16s} {statistics.median(r['samples'] for r in found):8.0f} "
            f"{statistics.median(r['sizing'] for r in found) * 1e3:9.2f} "
            f"{statistics.median(r['driver'] for r in found) * 1e3:9.1f} {share:6.2%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
