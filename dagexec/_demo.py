"""``python -m dagexec demo``: a Merkle-style hashing graph, serial vs dagexec.

The work is SHA-256 over multi-megabyte buffers, which releases the GIL, so two
workers on two cores really run two tasks at once. The graph::

    data[i] -> leaf[i]   (16 leaves, 4 MiB each, hashed in several rounds)
    leaf[2k], leaf[2k+1] -> node[1][k] -> ... -> root   (a binary rollup)

It prints the serial time, the parallel time and the speedup, then asks for one
inner node and shows that only that node's ancestors ran.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TextIO

from ._executor import run
from ._graph import Graph

__all__ = ["build_graph", "main"]

LEAVES = 16
LEAF_BYTES = 4 * 1024 * 1024
# Rounds of hashing per leaf: enough that hashing (GIL released) dwarfs the
# per-task overhead and the buffer creation (GIL held); few enough for ~1 s serial.
ROUNDS = 24


def _make_data(i: int) -> Callable[[], bytes]:
    def data() -> bytes:
        return i.to_bytes(4, "big") * (LEAF_BYTES // 4)

    return data


def _hash_leaf(data: bytes) -> bytes:
    digest = b""
    for _ in range(ROUNDS):
        h = hashlib.sha256(digest)
        h.update(data)  # releases the GIL for large buffers
        digest = h.digest()
    return digest


def _combine(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(left + right).digest()


def build_graph() -> Graph:
    """The demo graph; task names are strings like ``"leaf[3]"`` and ``"node[2][0]"``."""
    g = Graph()
    level = []
    for i in range(LEAVES):
        g.add(f"data[{i}]", _make_data(i))
        level.append(g.add(f"leaf[{i}]", _hash_leaf, deps=[f"data[{i}]"]))
    depth = 1
    while len(level) > 1:
        name = "root" if len(level) == 2 else None
        level = [
            g.add(name or f"node[{depth}][{k}]", _combine, deps=[level[2 * k], level[2 * k + 1]])
            for k in range(len(level) // 2)
        ]
        depth += 1
    return g


def _serial(g: Graph) -> dict[Hashable, Any]:
    """The floor: every task in insertion order (which is topological here), one thread."""
    values: dict[Hashable, Any] = {}
    for name, task in g.tasks.items():
        values[name] = task.fn(*[values[d] for d in task.deps])
    return values


def main(
    *, trace_path: str | None = None, gantt_path: str | None = None, out: TextIO | None = None
) -> int:
    """Run the demo and print what it shows; return the process exit code."""
    out = out or sys.stdout
    g = build_graph()
    workers = os.cpu_count() or 1
    print(
        f"dagexec demo: {len(g)} tasks, {LEAVES} leaves of {LEAF_BYTES >> 20} MiB, "
        f"{ROUNDS} SHA-256 rounds each, {workers} workers",
        file=out,
    )

    # One untimed pass first: the first touch of fresh multi-megabyte buffers pays
    # page faults that would otherwise be charged to whichever side runs first.
    run(g, workers=workers)
    t0 = time.perf_counter()
    expected = _serial(g)
    serial = time.perf_counter() - t0

    t0 = time.perf_counter()
    tracing = bool(trace_path or gantt_path)
    result = run(g, workers=workers, trace=tracing)
    parallel = time.perf_counter() - t0
    if result["root"] != expected["root"]:
        print("dagexec demo: MISMATCH between serial and parallel root digests", file=out)
        return 1
    print(f"  serial loop     {serial:7.3f} s", file=out)
    print(f"  dagexec.run     {parallel:7.3f} s   speedup {serial / parallel:.2f}x", file=out)
    print(f"  root digest     {result['root'].hex()[:16]}... (matches the serial loop)", file=out)
    stats = result.stats
    print(
        f"  bounds          peak in flight {stats.peak_in_flight} <= cap {stats.effective_cap}; "
        f"tasks per worker {stats.tasks_per_worker}",
        file=out,
    )

    inner = "node[2][1]"
    partial = run(g, targets=[inner], workers=workers)
    ran = sorted(str(name) for name in partial.status)
    print(
        f"  partial run     targets=[{inner!r}]: {partial.stats.tasks_run} of {len(g)} tasks ran",
        file=out,
    )
    print(f"                  ran: {', '.join(ran)}", file=out)
    if partial[inner] != expected[inner]:
        print("dagexec demo: MISMATCH in the partial run", file=out)
        return 1

    if trace_path:
        result.trace_to_chrome(trace_path)
        print(f"  trace written   {trace_path} (open in https://ui.perfetto.dev)", file=out)
    if gantt_path:
        result.gantt_svg(gantt_path)
        print(f"  gantt written   {gantt_path}", file=out)
    return 0
