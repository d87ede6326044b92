"""dagexec.dask.get vs dask's threaded scheduler: ``python benchmarks/bench_dask.py [--quick]``.

Each workload is a dask collection computed end to end with
``dask.compute(x, scheduler=dagexec.dask.get)`` and with ``scheduler="threads"``,
both with the same number of threads, alternating between the two so that drift
on a shared machine hits both alike. The first run of each is untimed: it checks
that both return the same value and starts the thread pools. The ratio is
dagexec / threads from the medians (below 1 means dagexec is faster). ``get only``
times the scheduler alone on the already optimised graph, which is the part
dagexec replaces; ``compute`` adds dask's graph construction and optimisation,
which both pay alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Run from a clone without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import dask
    import dask.array as da
    import numpy as np
except ImportError as exc:
    raise SystemExit(
        f"bench_dask needs the dask extra ({exc}): pip install -e '.[dask]' from a clone"
    ) from None

from dask.threaded import get as threaded_get

import dagexec.dask as dd


def workloads(quick: bool) -> dict[str, Any]:
    """Name -> dask collection. Chunk counts are what makes a scheduler matter."""
    n = 1500 if quick else 2000
    small = 400 if quick else 600
    rng = da.random.default_rng(0)
    x = rng.random((n, n), chunks=(100, 100))
    y = rng.random((small, small), chunks=(10, 10))
    leaves = [dask.delayed(_inc)(i) for i in range(1000 if quick else 3000)]
    return {
        "(x + x.T).sum()": (x + x.T).sum(),
        "blockwise map, tiny chunks": y.map_blocks(np.sqrt).sum(),
        "mean(axis=0), tiny chunks": (y * 2 + 1).mean(axis=0),
        "delayed tree of small tasks": _tree_sum(leaves),
    }


def _inc(i: int) -> int:
    return i + 1


def _add(a: int, b: int) -> int:
    return a + b


def _tree_sum(items: list[Any]) -> Any:
    while len(items) > 1:
        pairs = [dask.delayed(_add)(a, b) for a, b in zip(items[::2], items[1::2], strict=False)]
        items = pairs + ([items[-1]] if len(items) % 2 else [])
    return items[0]


def median_pair(
    ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """Medians of alternating timed runs of ``ours`` and ``theirs``."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        for fn, times in ((ours, a), (theirs, b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.allclose(a, b))
    return bool(a == b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller graphs, fewer repeats")
    parser.add_argument(
        "--repeat", type=int, default=None, help="timed runs of each (default 5, 3 with --quick)"
    )
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 5)
    workers = os.cpu_count() or 1
    print(
        f"dask {dask.__version__}, {workers} threads each, median of {repeat}; "
        "ratio = dagexec / threads (< 1: dagexec faster)"
    )
    header = f"{'workload':30} {'tasks':>6} {'':8} {'dagexec':>9} {'threads':>9} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    with ThreadPoolExecutor(workers) as pool:
        for name, expr in workloads(args.quick).items():
            dsk = dict(expr.__dask_graph__())
            keys = expr.__dask_keys__()

            def ours_get(dsk: Any = dsk, keys: Any = keys) -> Any:
                return dd.get(dsk, keys, num_workers=workers)

            def theirs_get(dsk: Any = dsk, keys: Any = keys) -> Any:
                return threaded_get(dsk, keys, pool=pool)

            def ours_compute(expr: Any = expr) -> Any:
                return dask.compute(expr, scheduler=dd.get, num_workers=workers)[0]

            def theirs_compute(expr: Any = expr) -> Any:
                return dask.compute(expr, scheduler="threads", pool=pool)[0]

            if not same(ours_compute(), theirs_compute()):
                raise SystemExit(f"{name}: dagexec and dask threads disagree")
            for label, pair in (
                ("get only", (ours_get, theirs_get)),
                ("compute", (ours_compute, theirs_compute)),
            ):
                t_ours, t_theirs = median_pair(*pair, repeat)
                print(
                    f"{name if label == 'get only' else '':30} "
                    f"{len(dsk) if label == 'get only' else '':>6} {label:8} "
                    f"{t_ours * 1e3:7.1f}ms {t_theirs * 1e3:7.1f}ms {t_ours / t_theirs:6.2f}"
                )
    dd.shutdown()


if __name__ == "__main__":
    main()
