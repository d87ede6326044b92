"""isolate="process" side by side with its peers, in one run (issue 21).

    python benchmarks/processes.py            # full: medians of 5 interleaved rounds
    python benchmarks/processes.py --quick    # smaller graphs, 3 rounds (a smoke run)

Parts, each printed as a table:

1. **pure-Python graph**: 8 chains x 25 tasks of ~15 ms of pure-Python arithmetic
   (``workloads.crunch``), then a fan-in, on 2 workers: a serial loop, dagexec on
   threads, dagexec ``isolate="process"`` on a reused Executor (children warm),
   graphlib + a reused ``ProcessPoolExecutor``, dask's multiprocessing scheduler
   (if installed). Targets: >= 1.85x serial and >= 0.97x graphlib + PPE.
2. **per-task cost**: the same shape with ~0.2 ms tasks (200 tasks): wall time per
   task for dagexec processes, graphlib + a reused PPE, dask multiprocessing, and
   the bare floor: two threads, each driving its own long-lived child over a
   ``multiprocessing.Pipe`` (function + arguments pickled per call). Targets:
   <= 0.7x graphlib + PPE and <= 1.3x the floor (issue 21), <= 1.1x the floor
   (issue 36).
3. **50 MB argument**: one process task taking 50 MB of bytes, against an
   in-process ``pickle.dumps`` + ``loads`` of it; through /dev/shm and through the
   pipe alone. Target: <= 1.5x pickle.
4. **mixed graph**: GIL-releasing hashing (sha256 of a large constant) and pure
   Python, as mixed (hashing on threads, Python in processes), all threads, all
   processes. Target: mixed beats both.
5. **child start-up**, reported apart: a new child answering its first call. The
   children of the timed runs are started (and checked) before any timing.
6. **task length sweep**: speed-up over serial of process tasks from 0.2 to 5 ms,
   to say from what task length processes pay off.
7. **a second ``dagexec.run``** (issue 36): the same graph (8 chains x 10 tasks of
   ~2 ms) by ``dagexec.run`` (a new executor, children shared from the program's
   pool) and by ``ex.run`` on a reused executor, in >= 10 alternating pairs.
   Target: the median ``dagexec.run`` <= 1.1x the median reused run.
8. **the next call sent early** (issue 36, part 2; ``EARLY_SEND`` in
   ``dagexec/_engine/process/early.py``): part 2's graph (8 x 25 tasks of ~0.2 ms)
   and 8 x 10 tasks of ~2 ms on one reused executor, early send switched on and
   off in >= 10 alternating pairs: the median of each, on / off, and the share of
   process calls that went early. Reported, not a target.

9. **the cost of a call**: part 2's shape with calls that do nothing (``crunch`` of 0
   loops), 8 chains x 250: CPU per task in this process, in its calling thread
   (dagexec's scheduler) and in the children, dagexec against the floor. What the
   parent spends on a process task beside the call itself. Reported, not a target.

``--early on|off`` sets ``EARLY_SEND`` for parts 1-7 (default: the module's, off);
part 8 switches it itself.

Every implementation's values are checked against the serial loop's. Beside wall
times, parts 1, 2 and 4 print CPU time per task, in this process and in the
children (from /proc, in 10 ms clock ticks, summed over the rounds), and how much
more that is than the serial loop's: a cost the machine's load moves much less
than wall time. Each part prints the load average; the run ends with every target,
PASS or FAIL.

The comparison with ``ProcessPoolExecutor`` is the one issue 21 describes: graphlib's
``TopologicalSorter``, every ready task submitted at once to a reused, warmed pool
(2 workers, the platform's default start method), and ``wait(FIRST_COMPLETED)``
before handing finished tasks back to the sorter.
"""

from __future__ import annotations

import argparse
import graphlib
import hashlib
import math
import multiprocessing
import os
import pickle
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent)), str(HERE)]

from workloads import crunch  # noqa: E402

import dagexec  # noqa: E402
from dagexec._engine.process import early, transfer  # noqa: E402
from dagexec._engine.process.process_pool import ChildSlot, live_children  # noqa: E402

WORKERS = 2
NAN = math.nan
Graphs = dict[str, tuple[Callable[..., Any], tuple[Any, ...], tuple[str, ...]]]


def fold(*values: int) -> int:
    return sum(values) & 0xFFFFFFFF


def digest(block: bytes, rounds: int, *prev: Any) -> str:
    """GIL-releasing work: sha256 of ``block``, ``rounds`` times."""
    h = hashlib.sha256()
    for _ in range(rounds):
        h.update(block)
    return h.hexdigest()


def chains_graph(chains: int, length: int, loops: int) -> Graphs:
    """``{name: (fn, constants, deps)}``: chains of crunch, then a fan-in."""
    tasks: Graphs = {}
    for c in range(chains):
        for i in range(length):
            deps = (f"py{c}_{i - 1}",) if i else ()
            tasks[f"py{c}_{i}"] = (crunch, (loops, c * 1000 + i), deps)
    tasks["fold"] = (fold, (), tuple(f"py{c}_{length - 1}" for c in range(chains)))
    return tasks


def mixed_graph(length: int, loops: int, block: bytes) -> Graphs:
    """4 chains of pure-Python tasks beside 2 x ``length`` independent hashing tasks
    (each a sha256 of ``block``, a constant): twice as much Python as hashing, so
    threads alone run a third of the work at a time, while the hashing tasks ship
    ``block`` to a child each when they run in processes."""
    tasks: Graphs = {}
    for c in range(4):
        for i in range(length):
            deps = (f"py{c}_{i - 1}",) if i else ()
            tasks[f"py{c}_{i}"] = (crunch, (loops, c * 1000 + i), deps)
    for i in range(2 * length):
        tasks[f"h{i}"] = (digest, (block, 1), ())
    return tasks


# -- implementations: each takes the graph and returns {name: value} -------------------


def serial(tasks: Graphs) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in graphlib.TopologicalSorter({k: v[2] for k, v in tasks.items()}).static_order():
        fn, consts, deps = tasks[name]
        values[name] = fn(*consts, *(values[d] for d in deps))
    return values


def dagexec_graph(tasks: Graphs, isolate: Callable[[str], str | None]) -> dagexec.Graph:
    g = dagexec.Graph()
    for name, (fn, consts, deps) in tasks.items():
        if not deps:  # constants as args: large ones travel out of band
            g.add(name, fn, args=consts, isolate=isolate(name))
        else:  # dagexec passes dependency values first: put the constants after them
            g.add(name, _Tail(fn, consts), deps=list(deps), isolate=isolate(name))
    return g


class _Tail:
    """``fn(*consts, *dep_values)`` called as ``_Tail(...)(*dep_values)``; picklable."""

    __slots__ = ("consts", "fn")

    def __init__(self, fn: Callable[..., Any], consts: tuple[Any, ...]) -> None:
        self.fn, self.consts = fn, consts

    def __call__(self, *dep_values: Any) -> Any:
        return self.fn(*self.consts, *dep_values)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Tail, (self.fn, self.consts))


def graphlib_ppe(tasks: Graphs, pool: ProcessPoolExecutor) -> dict[str, Any]:
    sorter = graphlib.TopologicalSorter({k: v[2] for k, v in tasks.items()})
    sorter.prepare()
    values: dict[str, Any] = {}
    pending: dict[Future[Any], str] = {}
    while sorter.is_active():
        for name in sorter.get_ready():
            fn, consts, deps = tasks[name]
            pending[pool.submit(fn, *consts, *(values[d] for d in deps))] = name
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            name = pending.pop(future)
            values[name] = future.result()
            sorter.done(name)
    return values


def dask_mp(tasks: Graphs) -> dict[str, Any]:
    import dask.multiprocessing

    dsk = {name: (fn, *consts, *deps) for name, (fn, consts, deps) in tasks.items()}
    keys = list(tasks)
    return dict(zip(keys, dask.multiprocessing.get(dsk, keys, num_workers=WORKERS), strict=True))


# -- the floor: two threads, each with its own child over a Pipe ------------------------


def _floor_child(conn: Any) -> None:
    while True:
        try:
            message = conn.recv_bytes()
        except EOFError:
            return
        fn, args = pickle.loads(message)
        conn.send_bytes(pickle.dumps(fn(*args)))


class Floor:
    """Two long-lived spawn children, one per thread; each thread runs whole chains."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns = []
        self.procs = []
        for _ in range(WORKERS):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_floor_child, args=(child,), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def run(self, tasks: Graphs, chains: int, length: int) -> dict[str, Any]:
        values: dict[str, Any] = {}

        def drive(k: int) -> None:
            conn = self.conns[k]
            for c in range(k, chains, WORKERS):
                prev: tuple[Any, ...] = ()
                for i in range(length):
                    name = f"py{c}_{i}"
                    fn, consts, _ = tasks[name]
                    conn.send_bytes(pickle.dumps((fn, (*consts, *prev))))
                    values[name] = pickle.loads(conn.recv_bytes())
                    prev = (values[name],)

        threads = [threading.Thread(target=drive, args=(k,)) for k in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fn, consts, deps = tasks["fold"]
        values["fold"] = fn(*consts, *(values[d] for d in deps))
        return values

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            proc.join(5)


# -- timing ---------------------------------------------------------------------------


class Row(NamedTuple):
    """One implementation's figures: wall seconds (median), and CPU seconds per run
    (mean over the rounds) in this process, in its calling thread alone (dagexec's
    scheduler runs there) and in the children it drives."""

    wall: float
    parent_cpu: float
    children_cpu: float
    caller_cpu: float


def children_cpu(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` used so far (Linux /proc; 0.0 elsewhere).
    Counted in clock ticks (10 ms here): read it summed over many tasks."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.0


def rounds(
    impls: dict[str, Callable[[], dict[str, Any]]],
    expected: dict[str, Any],
    repeat: int,
    keys: list[str],
    children: dict[str, Callable[[], list[int]]] | None = None,
) -> dict[str, Row]:
    """Each implementation over ``repeat`` interleaved rounds: median wall time, and
    its CPU time per run here and in its children (``children[label]()`` lists their
    pids). CPU time moves much less with the machine's load than wall time."""
    children = children or {}
    for label, fn in impls.items():  # warm-up and correctness
        got = fn()
        assert all(got[k] == expected[k] for k in keys), f"{label} returned other values"
    times: dict[str, list[float]] = {label: [] for label in impls}
    cpu: dict[str, list[float]] = {label: [0.0, 0.0, 0.0] for label in impls}
    for _ in range(repeat):
        for label, fn in impls.items():
            pids = children.get(label, list)()
            c0, p0, t0 = children_cpu(pids), time.process_time(), time.perf_counter()
            h0 = time.thread_time()
            fn()
            times[label].append(time.perf_counter() - t0)
            cpu[label][2] += time.thread_time() - h0
            cpu[label][0] += time.process_time() - p0
            cpu[label][1] += children_cpu(pids) - c0
    return {
        label: Row(
            statistics.median(ts),
            cpu[label][0] / repeat,
            cpu[label][1] / repeat if label in children or not label.startswith("dask") else NAN,
            cpu[label][2] / repeat,
        )
        for label, ts in times.items()
    }


def load() -> str:
    """The load averages (1, 5, 15 minutes), to print beside every result."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# (part, target, measured, PASS/FAIL) of every target checked in this run.
RESULTS: list[tuple[str, str, str, str]] = []


def record(part: str, target: str, measured: str, ok: bool) -> None:
    RESULTS.append((part, target, measured, verdict(ok)))
    print(f"  {verdict(ok)}  {target}: {measured}")


def print_cpu(medians: dict[str, Row], n: int, width: int = 30) -> None:
    """CPU per task, here (of which in the calling thread, where dagexec's scheduler
    runs), in the children, and beyond the serial loop's. Children are counted only
    where their pids are known (not dask's, started per call)."""
    base = medians["serial"].parent_cpu / n
    print(
        f"  {'CPU per task (us)':<{width}}{'here':>8}{'caller':>8}{'children':>10}"
        f"{'over serial':>13}"
    )
    for label, row in medians.items():
        here, caller, kids = row.parent_cpu / n, row.caller_cpu / n, row.children_cpu / n
        mine = f"  {label:<{width}}{here * 1e6:8.0f}{caller * 1e6:8.0f}"
        if math.isnan(row.children_cpu):  # children not counted
            print(f"{mine}{'?':>10}{'?':>13}")
        else:
            print(f"{mine}{kids * 1e6:10.0f}{(here + kids - base) * 1e6:13.0f}")


def calibrate(ms: float) -> int:
    """Loop count of ``crunch`` taking about ``ms`` milliseconds here.

    The fastest of several timings: on a shared machine the others include time
    this process spent waiting for a CPU, which would make the tasks too short.
    """
    loops = 50_000
    best = min(_time(crunch, loops, 1) for _ in range(15))
    return max(1, int(loops * ms / 1000 / best))


def _time(fn: Callable[..., Any], *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def have_dask() -> bool:
    try:
        import dask.multiprocessing  # noqa: F401
    except ImportError:
        return False
    return True


def pool_pids(pool: ProcessPoolExecutor) -> list[int]:
    return [proc.pid for proc in getattr(pool, "_processes", {}).values()]


def part_graph(ex: dagexec.Executor, pool: ProcessPoolExecutor, repeat: int, quick: bool) -> None:
    chains, length = 8, (6 if quick else 25)
    loops = calibrate(15.0)
    tasks = chains_graph(chains, length, loops)
    n = chains * length
    expected = serial(tasks)
    threads = dagexec_graph(tasks, lambda name: None)
    procs = dagexec_graph(tasks, lambda name: None if name == "fold" else "process")
    print(
        f"\n== 1. pure-Python graph: {chains} chains x {length} tasks of ~15 ms "
        f"({loops:,} loops), fan-in, {WORKERS} workers; median of {repeat}; {load()}"
    )
    with dagexec.Executor(workers=WORKERS) as tex:
        impls: dict[str, Callable[[], dict[str, Any]]] = {
            "serial": lambda: serial(tasks),
            "dagexec threads": lambda: dict(tex.run(threads, targets=list(tasks)).items()),
            "dagexec isolate=process": lambda: dict(ex.run(procs, targets=list(tasks)).items()),
            "graphlib + PPE (reused)": lambda: graphlib_ppe(tasks, pool),
        }
        if have_dask():
            impls["dask multiprocessing"] = lambda: dask_mp(tasks)
        kids = {
            "dagexec isolate=process": live_children,
            "graphlib + PPE (reused)": lambda: pool_pids(pool),
        }
        medians = rounds(impls, expected, repeat, ["fold"], kids)
    base, ppe = medians["serial"].wall, medians["graphlib + PPE (reused)"].wall
    print(f"  {'implementation':<26}{'seconds':>9}{'x serial':>10}{'x graphlib+PPE':>16}")
    for label, row in medians.items():
        print(f"  {label:<26}{row.wall:9.3f}{base / row.wall:10.2f}{ppe / row.wall:16.2f}")
    print_cpu(medians, n)
    mine = medians["dagexec isolate=process"].wall
    record("1", "isolate=process >= 1.85x serial", f"{base / mine:.2f}x", base / mine >= 1.85)
    record("1", "isolate=process >= 0.97x graphlib + PPE", f"{ppe / mine:.2f}x", ppe / mine >= 0.97)
    print(f"  ({load()})")


def chains_against_floor(
    ex: dagexec.Executor,
    tasks: Graphs,
    chains: int,
    length: int,
    rounds_: int,
    peers: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[], list[int]] | None]],
) -> dict[str, Row]:
    """Part 2's and part 9's rounds: the serial loop, the floor, dagexec's process
    tasks and ``peers`` (label -> (run, the pids of its children or None)) on chains
    of ``tasks``; each implementation's :class:`Row`."""
    expected = serial(tasks)
    procs = dagexec_graph(tasks, lambda name: None if name == "fold" else "process")
    floor = Floor()
    try:
        impls: dict[str, Callable[[], dict[str, Any]]] = {
            "serial": lambda: serial(tasks),
            "floor (2 threads x own child)": lambda: floor.run(tasks, chains, length),
            "dagexec isolate=process": lambda: dict(ex.run(procs, targets=list(tasks)).items()),
        }
        kids: dict[str, Callable[[], list[int]]] = {
            "floor (2 threads x own child)": lambda: [p.pid for p in floor.procs if p.pid],
            "dagexec isolate=process": live_children,
        }
        for label, (run, pids) in peers.items():
            impls[label] = run
            if pids is not None:
                kids[label] = pids
        return rounds(impls, expected, rounds_, ["fold"], kids)
    finally:
        floor.close()


def part_per_task(ex: dagexec.Executor, pool: ProcessPoolExecutor, repeat: int) -> None:
    chains, length = 8, 25
    loops = calibrate(0.2)
    tasks = chains_graph(chains, length, loops)
    n = chains * length
    print(f"\n== 2. per-task cost: {n} tasks, {WORKERS} workers; median of {repeat * 3}; {load()}")
    peers: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[], list[int]] | None]] = {
        "graphlib + PPE (reused)": (lambda: graphlib_ppe(tasks, pool), lambda: pool_pids(pool)),
    }
    if have_dask():
        peers["dask multiprocessing"] = (lambda: dask_mp(tasks), None)
    medians = chains_against_floor(ex, tasks, chains, length, repeat * 3, peers)
    work_us = medians["serial"].wall / n * 1e6
    print(f"  tasks of ~{work_us:.0f} us ({loops:,} loops, calibrated for 200 us)")
    print(
        f"  {'implementation':<30}{'us/task (wall)':>15}{'x serial':>10}{'x PPE':>8}{'x floor':>9}"
    )
    ppe = medians["graphlib + PPE (reused)"].wall
    fl = medians["floor (2 threads x own child)"].wall
    for label, row in medians.items():
        s = row.wall
        print(
            f"  {label:<30}{s / n * 1e6:15.0f}{medians['serial'].wall / s:10.2f}"
            f"{s / ppe:8.2f}{s / fl:9.2f}"
        )
    print_cpu(medians, n)
    mine = medians["dagexec isolate=process"].wall
    record(
        "2",
        "isolate=process <= 0.7x graphlib + PPE per task",
        f"{mine / ppe:.2f}x",
        mine / ppe <= 0.7,
    )
    record("2", "isolate=process <= 1.3x the floor per task", f"{mine / fl:.2f}x", mine / fl <= 1.3)
    record(
        "2",
        "isolate=process <= 1.1x the floor per task (issue 36)",
        f"{mine / fl:.2f}x",
        mine / fl <= 1.1,
    )
    print(f"  ({load()})")


def part_call_cost(ex: dagexec.Executor, repeat: int) -> None:
    chains, length = 8, 250
    tasks = chains_graph(chains, length, 0)
    n = chains * length
    print(f"\n== 9. the cost of a call: {n} calls that do nothing, {WORKERS} workers; {load()}")
    medians = chains_against_floor(ex, tasks, chains, length, repeat, {})
    print(f"  {'implementation':<30}{'us/task (wall)':>15}{'x floor':>9}")
    fl = medians["floor (2 threads x own child)"].wall
    for label, row in medians.items():
        print(f"  {label:<30}{row.wall / n * 1e6:15.1f}{row.wall / fl:9.2f}")
    print_cpu(medians, n)
    print(f"  ({load()})")


def part_large(ex: dagexec.Executor, repeat: int) -> None:
    size = 50 * 1000 * 1000
    data = os.urandom(1 << 20) * (size // (1 << 20))
    g = dagexec.Graph()
    g.add("len", len, args=(data,), isolate="process")

    def in_process() -> None:
        pickle.loads(pickle.dumps(data, protocol=5))

    def through() -> None:
        assert ex.run(g)["len"] == len(data)

    shm_dir = transfer._SHM_DIR

    def pipe_only() -> None:
        transfer._SHM_DIR = "/nonexistent-dagexec"
        try:
            through()
        finally:
            transfer._SHM_DIR = shm_dir

    times: dict[str, list[float]] = {
        "pickle dumps+loads": [],
        "isolate=process": [],
        "isolate=process, pipe only": [],
    }
    fns = dict(zip(times, (in_process, through, pipe_only), strict=True))
    for fn in fns.values():
        fn()
    for _ in range(repeat * 2):
        for label, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t0)
    mib = len(data) / (1 << 20)
    base = statistics.median(times["pickle dumps+loads"])
    print(
        f"\n== 3. a {len(data) / 1e6:.0f} MB bytes argument (shm: "
        f"{'yes' if transfer.shm_dir() else 'no'}); median of {repeat * 2}; {load()}"
    )
    print(f"  {'how':<30}{'ms':>8}{'ms/MiB':>9}{'x pickle':>10}")
    for label, ts in times.items():
        s = statistics.median(ts)
        print(f"  {label:<30}{s * 1e3:8.1f}{s * 1e3 / mib:9.3f}{s / base:10.2f}")
    mine = statistics.median(times["isolate=process"]) / base
    record("3", "50 MB argument <= 1.5x pickle dumps+loads", f"{mine:.2f}x", mine <= 1.5)


def part_mixed(ex: dagexec.Executor, repeat: int, quick: bool) -> None:
    length = 4 if quick else 10
    loops = calibrate(15.0)
    mib = 4
    per_mib = min(_time(digest, os.urandom(mib << 20), 1) for _ in range(5)) / mib
    block = os.urandom(max(1, round(0.015 / per_mib)) << 20)  # ~15 ms of hashing
    tasks = mixed_graph(length, loops, block)
    expected = serial(tasks)
    mixed = dagexec_graph(tasks, lambda name: "process" if name.startswith("py") else None)
    threads = dagexec_graph(tasks, lambda name: None)
    procs = dagexec_graph(tasks, lambda name: "process")
    impls: dict[str, Callable[[], dict[str, Any]]] = {
        "serial": lambda: serial(tasks),
        "mixed (hash: threads, py: processes)": lambda: dict(
            ex.run(mixed, targets=list(tasks)).items()
        ),
        "all threads": lambda: dict(ex.run(threads, targets=list(tasks)).items()),
        "all processes": lambda: dict(ex.run(procs, targets=list(tasks)).items()),
    }
    print(
        f"\n== 4. mixed graph: 4 chains x {length} pure-Python tasks (~15 ms) + "
        f"{2 * length} sha256 tasks of a {len(block) >> 20} MiB constant (~15 ms, GIL "
        f"released); {WORKERS} workers; median of {repeat}; {load()}"
    )
    kids = {label: live_children for label in impls if label != "serial"}
    medians = rounds(impls, expected, repeat, list(tasks), kids)
    print(f"  {'implementation':<40}{'seconds':>9}{'x serial':>10}")
    for label, row in medians.items():
        print(f"  {label:<40}{row.wall:9.3f}{medians['serial'].wall / row.wall:10.2f}")
    print_cpu(medians, len(tasks), 40)
    mixed_s = medians["mixed (hash: threads, py: processes)"].wall
    others = min(medians["all threads"].wall, medians["all processes"].wall)
    record(
        "4",
        "mixed beats all threads and all processes",
        f"{others / mixed_s:.2f}x the better of them",
        mixed_s < others,
    )
    print(f"  ({load()})")


def part_sweep(ex: dagexec.Executor, repeat: int) -> None:
    """From what task length do processes pay off? Speed-up over serial per length."""
    print(f"\n== 6. task length sweep: 8 chains x 25 tasks, {WORKERS} workers; median of {repeat}")
    print(f"  {'task ms':>8}{'serial s':>10}{'processes s':>13}{'x serial':>10}")
    for ms in (0.2, 0.5, 1.0, 2.0, 5.0):
        tasks = chains_graph(8, 25, calibrate(ms))
        expected = serial(tasks)
        procs = dagexec_graph(tasks, lambda name: None if name == "fold" else "process")
        medians = rounds(
            {
                "serial": lambda tasks=tasks: serial(tasks),  # type: ignore[misc]
                "processes": lambda procs=procs, names=list(tasks): dict(  # type: ignore[misc]
                    ex.run(procs, targets=names).items()
                ),
            },
            expected,
            repeat,
            ["fold"],
        )
        s, p = medians["serial"].wall, medians["processes"].wall
        print(f"  {ms:8.1f}{s:10.3f}{p:13.3f}{s / p:10.2f}   {load()}")


def part_startup(repeat: int) -> None:
    """A new child answering its first call: for a stdlib function (the bare cost),
    and for a function of this script, which the child loads by file (importing
    dagexec and everything this script imports)."""
    import operator

    from dagexec._core.isolate import IsolatedCall
    from dagexec._core.policy import CurrentTask

    info = CurrentTask("start", 1, threading.Event())
    print(
        f"\n== 5. child start-up (not in any timing above): a new child answering its "
        f"first call; median of {repeat}; {load()}"
    )
    for label, fn in (("operator.add", operator.add), ("a function of this script", fold)):
        call = IsolatedCall(fn, "start", "process", None, False, ())
        times = []
        for _ in range(repeat):
            slot = ChildSlot()
            t0 = time.perf_counter()
            slot.run(call, (1, 2), info)
            times.append(time.perf_counter() - t0)
            slot.close()
        print(
            f"  {label:<28} median {statistics.median(times) * 1e3:5.0f} ms, "
            f"min {min(times) * 1e3:5.0f} ms"
        )


def part_second_run(ex: dagexec.Executor, repeat: int) -> None:
    chains, length = 8, 10
    loops = calibrate(2.0)
    tasks = chains_graph(chains, length, loops)
    expected = serial(tasks)
    procs = dagexec_graph(tasks, lambda name: None if name == "fold" else "process")
    pairs = max(10, repeat)
    print(
        f"\n== 7. a second dagexec.run vs a reused executor: {chains} x {length} tasks of "
        f"~2 ms, {WORKERS} workers; {pairs} alternating pairs; {load()}"
    )
    targets = list(tasks)
    fresh = lambda: dict(dagexec.run(procs, targets=targets, workers=WORKERS).items())  # noqa: E731
    reused = lambda: dict(ex.run(procs, targets=targets).items())  # noqa: E731
    for fn in (fresh, reused):  # warm-up (the first dagexec.run starts its children)
        assert fn()["fold"] == expected["fold"]
    started = set(live_children())
    times: dict[str, list[float]] = {"dagexec.run": [], "reused ex.run": []}
    for i in range(pairs):
        order = [("dagexec.run", fresh), ("reused ex.run", reused)]
        for label, fn in order if i % 2 == 0 else order[::-1]:
            times[label].append(_time(fn))
    new_children = set(live_children()) - started
    run_s, ex_s = (statistics.median(times[k]) for k in ("dagexec.run", "reused ex.run"))
    for label, ts in times.items():
        print(f"  {label:<16} median {statistics.median(ts):7.3f} s, min {min(ts):7.3f} s")
    print(f"  children started during the pairs: {len(new_children)}")
    record(
        "7", "dagexec.run <= 1.1x a reused executor", f"{run_s / ex_s:.2f}x", run_s / ex_s <= 1.1
    )
    print(f"  ({load()})")


def part_early(ex: dagexec.Executor, repeat: int) -> None:
    pairs = max(10, repeat)
    print(f"\n== 8. the next call sent early, on vs off: {pairs} alternating pairs; {load()}")
    default = early.EARLY_SEND
    sent: list[int] = [0]
    send = early.send_early

    def counting(slot: Any, item: Any) -> Any:
        got = send(slot, item)
        sent[0] += got is not None
        return got

    early.send_early = counting
    try:
        for chains, length, ms in ((8, 25, 0.2), (8, 10, 2.0)):
            _early_pairs(ex, chains, length, ms, pairs, sent)
    finally:
        early.send_early = send
        early.EARLY_SEND = default
    print(f"  ({load()})")


def _early_pairs(
    ex: dagexec.Executor, chains: int, length: int, ms: float, pairs: int, sent: list[int]
) -> None:
    tasks = chains_graph(chains, length, calibrate(ms))
    n = chains * length
    expected = serial(tasks)
    procs = dagexec_graph(tasks, lambda name: None if name == "fold" else "process")
    targets = list(tasks)
    times: dict[bool, list[float]] = {True: [], False: []}
    for on in (True, False):  # warm-up
        early.EARLY_SEND = on
        assert dict(ex.run(procs, targets=targets).items())["fold"] == expected["fold"]
    sent[0] = 0
    for i in range(pairs):
        for on in (True, False) if i % 2 == 0 else (False, True):
            early.EARLY_SEND = on
            times[on].append(_time(ex.run, procs, targets))
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    share = sent[0] / (pairs * n)
    print(
        f"  {n} tasks of ~{ms} ms: on {on_s / n * 1e6:7.0f} us/task, off {off_s / n * 1e6:7.0f} "
        f"us/task (medians), on/off {on_s / off_s:.3f}x; calls sent early {share:.0%}"
    )
    RESULTS.append(
        ("8", f"early send on / off, {n} tasks of ~{ms} ms", f"{on_s / off_s:.3f}x", "INFO")
    )


def _gil() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small graphs, 3 rounds")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--only", default="1,2,3,4,5,6,7", help="parts to run, e.g. 1,2")
    parser.add_argument(
        "--early", choices=("on", "off"), default=None, help="EARLY_SEND for parts 1-7"
    )
    args = parser.parse_args()
    if args.early is not None:
        early.EARLY_SEND = args.early == "on"
    repeat = args.repeat or (3 if args.quick else 5)
    parts = set(args.only.split(","))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {load()}; "
        f"GIL {'on' if _gil() else 'off'}; EARLY_SEND {early.EARLY_SEND}; "
        f"python benchmarks/processes.py {' '.join(sys.argv[1:])}"
    )
    with dagexec.Executor(workers=WORKERS) as ex, ProcessPoolExecutor(WORKERS) as pool:
        warm = dagexec.Graph()
        warm.add("items", list, args=(range(WORKERS * 2),))
        warm.map("warm", fold, over="items", isolate="process")
        for _ in range(10):  # every worker's child started: start-up is part 5, not here
            ex.run(warm)
            if len(live_children()) >= WORKERS:
                break
        list(pool.map(fold, range(WORKERS * 2)))
        print(
            f"children started before timing: dagexec {len(live_children())}, "
            f"PPE {len(pool_pids(pool))}"
        )
        if "1" in parts:
            part_graph(ex, pool, repeat, args.quick)
        if "2" in parts:
            part_per_task(ex, pool, repeat)
        if "3" in parts:
            part_large(ex, repeat)
        if "4" in parts:
            part_mixed(ex, repeat, args.quick)
        if "6" in parts:
            part_sweep(ex, repeat)
        if "7" in parts:
            part_second_run(ex, repeat)
        if "8" in parts:
            part_early(ex, repeat)
        if "9" in parts:
            part_call_cost(ex, repeat)
    if "5" in parts:
        part_startup(repeat)
    if RESULTS:
        print(f"\n== targets (issues 21, 36), this run; {load()}")
        for part, target, measured, ok in RESULTS:
            print(f"  {ok}  part {part}: {target}: {measured}")
    print(f"\n{load()} at the end")


if __name__ == "__main__":
    main()
