"""Peak memory and time: dagexec.dask.get vs dask's threaded scheduler, 2 workers each.

``python benchmarks/dask_memory.py [--runs 5] [--only NAME] [--queue-cap N]``

Every figure is one fresh process per run (a process's peak RSS only grows, and
the allocator keeps what it got, so runs must not share one), alternating between
the two schedulers so that drift on a shared machine hits both alike; the table
gives the median of ``--runs``. Peak RSS is measured from the moment ``compute``
is called: the child resets the kernel's high-water mark (``/proc/self/clear_refs``)
after building the collection, then reads ``VmHWM`` minus the ``VmRSS`` it had
then. Time is the ``compute`` call alone.

Workloads (the issue's): ``(x + x.T).sum()`` on 12000^2 with chunks=1000;
``(x + x.T).mean(axis=0)`` on 8000^2 with chunks=1000 and 250; ``(x @ x.T).sum()``
on 6000^2 with chunks=1000 (``--full``: 12000^2, ~35 s a run here); a bag word
count. ``--queue-cap N`` passes an explicit bound to dagexec (today's fixed
depth), for comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_TEXT = "the quick brown fox jumps over the lazy dog and runs far away"

WORKLOADS = ("sum 12k c1000", "mean 8k c1000", "mean 8k c250", "matmul", "bag wordcount")

# Targets of issue 22: peak RSS <= 1.2x dask threaded's + 8 MiB; time <= 1.05x.
RSS_RATIO, RSS_SLACK_MIB, TIME_RATIO = 1.2, 8.0, 1.05


def collection(name: str, full: bool) -> Any:
    import dask.array as da
    import dask.bag as db

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
    if name == "bag wordcount":
        words = _TEXT.split(" ")
        lines = [" ".join(words[(i + j) % len(words)] for j in range(40)) for i in range(200_000)]
        return db.from_sequence(lines, npartitions=200).map(str.split).flatten().frequencies()
    raise SystemExit(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")


def _status(field: str) -> int:
    """A /proc/self/status memory field, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(name: str, scheduler: str, full: bool, queue_cap: int | None) -> None:
    """One run in this (fresh) process; prints {"peak": bytes, "seconds": s}."""
    import time

    import dask

    sys.path.insert(0, str(ROOT))
    import dagexec.dask as dd

    x = collection(name, full)
    kwargs: dict[str, Any] = {"num_workers": 2}
    if scheduler == "dagexec":
        kwargs["scheduler"] = dd.get
        if queue_cap is not None:
            kwargs["queue_cap"] = queue_cap
    else:
        kwargs["scheduler"] = "threads"
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
    before = _status("VmRSS")
    started = time.perf_counter()
    dask.compute(x, **kwargs)
    seconds = time.perf_counter() - started
    peak = _status("VmHWM") - before
    print(json.dumps({"peak": peak, "seconds": seconds}))


def measure(name: str, scheduler: str, full: bool, queue_cap: int | None) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", name, "--scheduler", scheduler]
    if full:
        cmd.append("--full")
    if queue_cap is not None:
        cmd += ["--queue-cap", str(queue_cap)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", action="append", help="workload name (repeatable)")
    p.add_argument("--full", action="store_true", help="matmul on 12000^2")
    p.add_argument("--queue-cap", type=int, default=None)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--scheduler", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.scheduler, args.full, args.queue_cap)
        return
    mib = 1 << 20
    print(
        f"{'workload':16s} {'threads MiB':>11s} {'dagexec MiB':>11s} {'RSS ok':>6s}"
        f" {'threads s':>9s} {'dagexec s':>9s} {'ratio':>6s} {'time ok':>7s}"
    )
    for name in args.only or WORKLOADS:
        runs: dict[str, list[dict[str, float]]] = {"threads": [], "dagexec": []}
        for _ in range(args.runs):
            for scheduler in runs:
                runs[scheduler].append(measure(name, scheduler, args.full, args.queue_cap))
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


if __name__ == "__main__":
    main()
