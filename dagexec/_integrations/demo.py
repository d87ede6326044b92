"""``python -m dagexec demo``: what threads buy, timed against a serial loop.

Stage 1, on every interpreter: a Merkle-style hashing graph. SHA-256 over
multi-megabyte buffers releases the GIL, so two workers on two cores really run
two tasks at once. The graph::

    data[i] -> leaf[i]   (16 leaves, 4 MiB each, hashed in several rounds)
    leaf[2k], leaf[2k+1] -> node[1][k] -> ... -> root   (a binary rollup)

Then it asks for one inner node and shows that only that node's ancestors ran.

Stage 2, only with the GIL off (free-threaded CPython, 3.13t and later): 8
chains of 25 tasks of pure-Python arithmetic and a fan-in, which no thread pool
can speed up while a GIL lets one thread run Python code at a time. On a GIL
build the demo says so instead of running it.

Each side is timed several times, alternating, and the medians are compared: the
machines this runs on are often shared, and one unlucky run says little. A
speedup below :data:`BUSY_SPEEDUP` with two or more workers is reported as a
machine that looks busy, not as a result.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import sys
import sysconfig
from collections.abc import Callable, Hashable
from functools import partial
from time import perf_counter
from typing import Any, TextIO

from .._core.graph import Graph
from .._core.result import RunResult
from .._engine.front.oneshot import run

__all__ = ["build_cpu_graph", "build_graph", "gil_enabled", "interpreter", "main"]

LEAVES = 16
LEAF_BYTES = 4 * 1024 * 1024
# Rounds of hashing per leaf: enough that hashing (GIL released) dwarfs the
# per-task overhead and the buffer creation (GIL held); few enough that three
# timed repeats of each side stay around a second serial on a 2-core machine.
ROUNDS = 8

# Timed runs per side; the median is reported.
REPEATS = 3

# Below this speedup with two or more workers, the demo says the machine looks
# busy: two free cores give about 1.9x on the hashing stage.
BUSY_SPEEDUP = 1.2

# The pure-Python stage: CPU_CHAINS chains of CPU_LENGTH tasks, each
# CPU_LOOPS iterations of integer arithmetic (a few ms), then one fan-in.
CPU_CHAINS = 8
CPU_LENGTH = 25
CPU_LOOPS = 25_000


def gil_enabled() -> bool:
    """Whether the GIL is on right now (always, before Python 3.13)."""
    is_enabled: Callable[[], bool] | None = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def interpreter() -> str:
    """One line naming the interpreter, its build and the GIL's state."""
    name = f"{platform.python_implementation()} {platform.python_version()}"
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return f"{name}, GIL build (the GIL is on)"
    if gil_enabled():
        return (
            f"{name}, free-threaded build, but the GIL is ON "
            "(PYTHON_GIL=1, -X gil=1, or an extension module that re-enabled it)"
        )
    return f"{name}, free-threaded build, GIL off"


# ------------------------------------------------------------ stage 1: hashing
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
    """The hashing graph; task names are strings like ``"leaf[3]"`` and ``"node[2][0]"``."""
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


# ------------------------------------------------------ stage 2: pure Python
def _crunch(seed: int, *prev: int) -> int:
    """A few milliseconds of pure-Python integer arithmetic (holds the GIL throughout).

    Its numbers are made per call rather than written as constants: on CPython
    3.13t a module's int constants are shared by every thread, and two threads
    updating their reference counts on every iteration ran this stage at 1.2x
    instead of 1.95x on 2 workers (docs/free-threading.md).
    """
    mult, inc, mask = int("1103515245"), int("12345"), int("4294967295")
    x = seed + sum(prev)
    for i in range(CPU_LOOPS):
        x = (x * mult + inc + i) & mask
    return x


def _fold(*ends: int) -> int:
    return sum(ends) & 0xFFFFFFFF


def build_cpu_graph() -> Graph:
    """CPU_CHAINS chains of CPU_LENGTH pure-Python tasks, then a fan-in named ``"total"``."""
    g = Graph()
    ends = []
    for c in range(CPU_CHAINS):
        prev: list[Hashable] = []
        for i in range(CPU_LENGTH):
            prev = [g.add(f"py[{c}][{i}]", partial(_crunch, c * 1000 + i), deps=prev)]
        ends.extend(prev)
    g.add("total", _fold, deps=ends)
    return g


# ------------------------------------------------------------------- timing
def _serial(g: Graph) -> dict[Hashable, Any]:
    """The floor: every task in insertion order (which is topological here), one thread."""
    values: dict[Hashable, Any] = {}
    for name, task in g.tasks.items():
        values[name] = task.fn(*[values[d] for d in task.deps])
    return values


def _compare(
    g: Graph, workers: int, *, trace: bool = False
) -> tuple[float, float, dict[Hashable, Any], RunResult]:
    """Median seconds of the serial loop and of ``run``, alternating; their last values."""
    serial_times: list[float] = []
    parallel_times: list[float] = []
    expected: dict[Hashable, Any] = {}
    result: RunResult | None = None
    for _ in range(REPEATS):
        t0 = perf_counter()
        expected = _serial(g)
        serial_times.append(perf_counter() - t0)
        t0 = perf_counter()
        result = run(g, workers=workers, trace=trace)
        parallel_times.append(perf_counter() - t0)
    assert result is not None
    return statistics.median(serial_times), statistics.median(parallel_times), expected, result


def _report_speed(serial: float, parallel: float, workers: int, out: TextIO) -> None:
    speedup = serial / parallel
    print(f"  serial loop     {serial:7.3f} s   (median of {REPEATS})", file=out)
    print(f"  dagexec.run     {parallel:7.3f} s   speedup {speedup:.2f}x", file=out)
    if workers >= 2 and speedup < BUSY_SPEEDUP:
        print(
            f"  warning         speedup below {BUSY_SPEEDUP}x with {workers} workers: this "
            "machine looks busy (other processes are using its cores); run the demo "
            "again when it is quieter",
            file=out,
        )


def main(
    *, trace_path: str | None = None, gantt_path: str | None = None, out: TextIO | None = None
) -> int:
    """Run the demo and print what it shows; return the process exit code."""
    out = out or sys.stdout
    g = build_graph()
    workers = os.cpu_count() or 1
    print(f"dagexec demo on {interpreter()}, {workers} workers", file=out)
    print(
        f"hashing: {len(g)} tasks, {LEAVES} leaves of {LEAF_BYTES >> 20} MiB, "
        f"{ROUNDS} SHA-256 rounds each (hashlib releases the GIL)",
        file=out,
    )

    # One untimed pass first: the first touch of fresh multi-megabyte buffers pays
    # page faults that would otherwise be charged to whichever side runs first.
    run(g, workers=workers)
    tracing = bool(trace_path or gantt_path)
    serial, parallel, expected, result = _compare(g, workers, trace=tracing)
    if result["root"] != expected["root"]:
        print("dagexec demo: MISMATCH between serial and parallel root digests", file=out)
        return 1
    _report_speed(serial, parallel, workers, out)
    print(f"  root digest     {result['root'].hex()[:16]}... (matches the serial loop)", file=out)
    stats = result.stats
    print(
        f"  bounds          peak in flight {stats.peak_in_flight} <= cap {stats.effective_cap}; "
        f"tasks per worker {stats.tasks_per_worker}",
        file=out,
    )

    inner = "node[2][1]"
    partial_run = run(g, targets=[inner], workers=workers)
    ran = sorted(str(name) for name in partial_run.status)
    print(
        f"  partial run     targets=[{inner!r}]: {partial_run.stats.tasks_run} of {len(g)} "
        "tasks ran",
        file=out,
    )
    print(f"                  ran: {', '.join(ran)}", file=out)
    if partial_run[inner] != expected[inner]:
        print("dagexec demo: MISMATCH in the partial run", file=out)
        return 1

    if not _pure_python_stage(workers, out):
        return 1

    if trace_path:
        result.trace_to_chrome(trace_path)
        print(f"  trace written   {trace_path} (open in https://ui.perfetto.dev)", file=out)
    if gantt_path:
        result.gantt_svg(gantt_path)
        print(f"  gantt written   {gantt_path}", file=out)
    return 0


def _pure_python_stage(workers: int, out: TextIO) -> bool:
    """Run the pure-Python stage with the GIL off, or say why it is skipped; False on mismatch."""
    shape = (
        f"{CPU_CHAINS} chains x {CPU_LENGTH} tasks of pure-Python arithmetic "
        f"({CPU_LOOPS:,} loop iterations each), then a fan-in"
    )
    if gil_enabled():
        print(f"pure Python: skipped ({shape})", file=out)
        print(
            "  With the GIL on, only one thread runs Python code at a time, so pure-Python "
            "tasks\n  would not speed up here (threads help only work that releases the "
            "GIL, like hashlib\n  above). On a free-threaded CPython (python3.13t or later, "
            "GIL off) this demo also\n  times that stage.",
            file=out,
        )
        return True
    g = build_cpu_graph()
    print(f"pure Python: {len(g)} tasks, {shape}; GIL off, so they run in parallel", file=out)
    serial, parallel, expected, result = _compare(g, workers)
    if result["total"] != expected["total"]:
        print("dagexec demo: MISMATCH in the pure-Python stage", file=out)
        return False
    _report_speed(serial, parallel, workers, out)
    return True
