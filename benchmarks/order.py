"""Peak live values: depth-first default order vs first-in first-out, side by side.

* map-reduce: ``load_i -> map_i`` for i < N, then ``reduce_j`` over groups of 10
  maps, then ``total``: a wide graph where the order decides how many loaded
  chunks wait for their map at once. Counted exactly: every value is a ``Chunk``
  that counts its live instances.
* memory (benchmarks/workloads.py): a chain of 8 MiB values; peak traced bytes.

    python benchmarks/order.py [--n 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import threading
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import memory

import dagexec
import dagexec._state.runstate


class Chunk:
    """A value that counts how many of its kind are alive, and the most ever.

    It stands for a chunk of data, and says so to ``sys.getsizeof`` (what the
    default, memory-aware dispatch depth reads: see docs/dask.md); with
    ``--small`` it does not, and the depth treats it as the small object it is.
    """

    lock = threading.Lock()
    live = 0
    peak = 0
    size = 8 << 20  # bytes it stands for; 0: its own size

    def __sizeof__(self) -> int:
        return Chunk.size or object.__sizeof__(self)

    def __init__(self, n: int) -> None:
        self.n = n
        with Chunk.lock:
            Chunk.live += 1
            Chunk.peak = max(Chunk.peak, Chunk.live)

    def __del__(self) -> None:
        with Chunk.lock:
            Chunk.live -= 1


def map_reduce(n: int) -> dagexec.Graph:
    g = dagexec.Graph()
    for i in range(n):
        g.add(f"load{i}", lambda i=i: Chunk(i))
        g.add(f"map{i}", lambda c: Chunk(c.n * 2), deps=[f"load{i}"])
        # A second user of each load keeps load -> map from fusing into a chain.
        g.add(f"check{i}", lambda c: c.n >= 0, deps=[f"load{i}"])
    groups = [list(range(j, min(j + 10, n))) for j in range(0, n, 10)]
    for j, group in enumerate(groups):
        g.add(
            f"reduce{j}", lambda *cs: Chunk(sum(c.n for c in cs)), deps=[f"map{i}" for i in group]
        )
    g.add(
        "total", lambda *cs: sum(c.n for c in cs), deps=[f"reduce{j}" for j in range(len(groups))]
    )
    g.add("checked", lambda *oks: all(oks), deps=[f"check{i}" for i in range(n)])
    return g


def peak_chunks(
    g: dagexec.Graph, workers: int, depth_first: bool, queue_cap: int | None = None
) -> int:
    dagexec._state.runstate.DEPTH_FIRST = depth_first
    Chunk.peak = Chunk.live = 0
    dagexec.run(g, workers=workers, queue_cap=queue_cap)
    return Chunk.peak


def peak_bytes(workers: int, depth_first: bool) -> int:
    dagexec._state.runstate.DEPTH_FIRST = depth_first
    spec = memory(20)
    g = dagexec.Graph()
    for name, (fn, deps) in spec.tasks.items():
        g.add(name, fn, deps=deps)
    tracemalloc.start()
    dagexec.run(g, workers=workers)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=2000, help="map-reduce width")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--small", action="store_true", help="chunks count as the tiny objects they are")
    args = p.parse_args()
    if args.small:
        Chunk.size = 0
    g = map_reduce(args.n)
    print(f"peak live values, {args.workers} workers (default Executor bounds)")
    for label, depth_first in (("FIFO", False), ("depth-first (default)", True)):
        chunks = peak_chunks(g, args.workers, depth_first)
        mib = peak_bytes(args.workers, depth_first) / (1 << 20)
        print(
            f"  {label:22s} map-reduce N={args.n}: {chunks:5d} chunks alive at peak;"
            f"  memory chain: {mib:6.1f} MiB peak"
        )
    for queue_cap in (16, 64):
        chunks = peak_chunks(g, args.workers, True, queue_cap)
        print(f"  depth-first, queue_cap={queue_cap:<3d} map-reduce N={args.n}: {chunks:5d} chunks")
    dagexec._state.runstate.DEPTH_FIRST = True


if __name__ == "__main__":
    main()
