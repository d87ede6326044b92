"""Deterministic benchmark graphs, described once and built by every implementation.

A workload is a plain :class:`Spec`: task name -> (function, dependency names), in an
order where every dependency comes before its task. Each implementation (dagexec and
the peers in :mod:`peers`) builds its own structure from the same spec, so every
implementation runs exactly the same functions on exactly the same graph, and their
results can be compared for equality.

Task functions are module-level (not lambdas) so that profiles name them, and they
return small checkable values instead of ``None``: a no-op task returns "one more than
its first argument", which costs ~50 ns and proves that results were passed along.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

TaskDef = tuple[Callable[..., Any], tuple[str, ...]]

MIB = 1 << 20


@dataclass
class Spec:
    """One benchmark graph.

    ``targets`` is what every implementation is asked for (``None``: every sink);
    ``tasks_run`` is how many tasks that request executes, the denominator of the
    per-task numbers.
    """

    name: str
    tasks: dict[str, TaskDef]
    targets: list[str] | None = None
    tasks_run: int = 0
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tasks_run:
            self.tasks_run = len(needed(self.tasks, self.request()))

    def sinks(self) -> list[str]:
        has_dependent = {d for _, deps in self.tasks.values() for d in deps}
        return [n for n in self.tasks if n not in has_dependent]

    def request(self) -> list[str]:
        """The explicit target list (the sinks when ``targets`` is None)."""
        return self.sinks() if self.targets is None else list(self.targets)


def needed(tasks: dict[str, TaskDef], targets: list[str]) -> set[str]:
    """Targets and all their ancestors."""
    seen = set(targets)
    stack = list(targets)
    while stack:
        for d in tasks[stack.pop()][1]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


def subgraph(spec: Spec, name: str) -> Spec:
    """Only the tasks ``spec``'s request needs, as a graph of its own."""
    keep = needed(spec.tasks, spec.request())
    tasks = {n: t for n, t in spec.tasks.items() if n in keep}
    return Spec(name, tasks, targets=spec.request())


# --------------------------------------------------------------------- task fns
def step(*args: int) -> int:
    """A no-op task: one more than its first argument (0 for a root)."""
    return args[0] + 1 if args else 0


def total(*args: int) -> int:
    """A fan-in sink: the sum of every input, so a lost input changes the result."""
    return sum(args)


def sha_link(buf: bytes, *prev: bytes) -> bytes:
    """Hash the inputs' digests, then ``buf``. hashlib releases the GIL for large updates."""
    h = hashlib.sha256()
    for p in prev:
        h.update(p)
    h.update(buf)
    return h.digest()


def digest_all(*digests: bytes) -> str:
    return hashlib.sha256(b"".join(digests)).hexdigest()


def crunch(loops: int, seed: int, *prev: int) -> int:
    """Pure-Python integer arithmetic: holds the GIL all along (unless there is none).

    The three numbers are made per call, not written as constants: on CPython
    3.13t the constants of an imported module's code are objects shared by every
    thread, and two threads updating the reference count of the same int on
    every loop iteration ran *slower* than one (0.5x over serial for two bare
    threads here, 2.0x with the numbers made per call; the same function defined
    in ``__main__`` scaled either way). That is the interpreter's cost, not the
    executor's, and user code meets it too (docs/free-threading.md).
    """
    mult, inc, mask = int("1103515245"), int("12345"), int("4294967295")
    x = seed + sum(prev)
    for i in range(loops):
        x = (x * mult + inc + i) & mask
    return x


def fold(*ends: int) -> int:
    return sum(ends) & 0xFFFFFFFF


def make_big(size: int) -> bytes:
    return bytes(size)


_ROTATE = bytes((i + 1) % 256 for i in range(256))


def derive_big(value: bytes) -> bytes:
    """A new object of the same size derived from the input (one allocation)."""
    return value.translate(_ROTATE)


def big_len(value: bytes) -> int:
    return len(value)


# -------------------------------------------------------------------- workloads
def wide(n: int = 10_000) -> Spec:
    tasks: dict[str, TaskDef] = {"root": (step, ())}
    for i in range(n):
        tasks[f"c{i}"] = (step, ("root",))
    tasks["sink"] = (total, tuple(f"c{i}" for i in range(n)))
    return Spec("wide", tasks, notes=f"1 root -> {n:,} no-op children -> 1 fan-in sink")


def chain(n: int = 10_000) -> Spec:
    tasks: dict[str, TaskDef] = {"t0": (step, ())}
    for i in range(1, n):
        tasks[f"t{i}"] = (step, (f"t{i - 1}",))
    return Spec("chain", tasks, notes=f"{n:,} no-op tasks in a line")


def layered_tasks(
    layers: int, width: int, seed: int, max_deps: int = 3, prefix: str = "n"
) -> dict[str, TaskDef]:
    """``layers`` x ``width`` no-op tasks; each has 1..max_deps deps in the layer before."""
    rng = random.Random(seed)
    tasks: dict[str, TaskDef] = {}
    prev: list[str] = []
    for layer in range(layers):
        cur = [f"{prefix}{layer}_{i}" for i in range(width)]
        for name in cur:
            deps = tuple(rng.sample(prev, rng.randint(1, max_deps))) if prev else ()
            tasks[name] = (step, deps)
        prev = cur
    return tasks


def layered(n: int = 20_000, layers: int = 100, seed: int = 1) -> Spec:
    tasks = layered_tasks(layers, n // layers, seed)
    return Spec("layered", tasks, notes=f"{n:,} no-op tasks, {layers} layers, 1-3 deps each")


def cpu(chains: int = 8, length: int = 25, buf_mib: int = 4) -> Spec:
    buf = bytes(range(256)) * (buf_mib * MIB // 256)
    tasks: dict[str, TaskDef] = {}
    ends = []
    for c in range(chains):
        tasks[f"h{c}_0"] = (partial(sha_link, buf), ())
        for i in range(1, length):
            tasks[f"h{c}_{i}"] = (partial(sha_link, buf), (f"h{c}_{i - 1}",))
        ends.append(f"h{c}_{length - 1}")
    tasks["digest"] = (digest_all, tuple(ends))
    notes = f"{chains} chains of {length} sha256 tasks over {buf_mib} MiB, then a fan-in"
    return Spec("cpu", tasks, notes=notes)


PYCPU_LOOPS = 25_000
"""Iterations per ``pycpu`` task: ~2.5 ms on CPython 3.11, ~3 ms on 3.13t (2-core VM)."""


def pycpu(chains: int = 8, length: int = 25, loops: int = PYCPU_LOOPS) -> Spec:
    """Like ``cpu``, but each task is pure-Python arithmetic instead of hashing.

    With a GIL no thread pool can speed this up; on free-threaded CPython the
    chains really run in parallel. ``extra`` describes the chains for the bare
    thread baseline (:class:`peers.BareThreads`).
    """
    tasks: dict[str, TaskDef] = {}
    chain_names = []
    for c in range(chains):
        names = [f"py{c}_{i}" for i in range(length)]
        for i, name in enumerate(names):
            tasks[name] = (partial(crunch, loops, c * 1000 + i), (names[i - 1],) if i else ())
        chain_names.append(names)
    tasks["fold"] = (fold, tuple(names[-1] for names in chain_names))
    notes = (
        f"{chains} chains of {length} pure-Python tasks ({loops:,} loop iterations each), "
        "then a fan-in"
    )
    return Spec("pycpu", tasks, notes=notes, extra={"chains": chain_names, "sink": "fold"})


def partial_request(n: int = 20_000, layers: int = 100, seed: int = 2) -> Spec:
    """One output of a layered graph whose ancestors are ~1% of it.

    The target is the first task (walking up the layers) whose ancestor set reaches
    1% of the graph, so the fraction is fixed by construction, not by luck.
    """
    width = n // layers
    tasks = layered_tasks(layers, width, seed, prefix="p")
    goal = max(2, n // 100)
    target = next(
        f"p{layer}_0"
        for layer in range(layers)
        if len(needed(tasks, [f"p{layer}_0"])) >= goal or layer == layers - 1
    )
    spec = Spec("partial", tasks, targets=[target])
    spec.notes = f"1 target of a {n:,}-task layered graph; {spec.tasks_run} tasks needed"
    return spec


def _sha_seconds(size: int) -> float:
    buf = bytes(size)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        hashlib.sha256(buf).digest()
        best = min(best, time.perf_counter() - t)
    return best


def skewed(
    layers: int = 4, width: int = 50, long_ms: float = 50.0, short_ms: float = 0.5, seed: int = 3
) -> Spec:
    """A few long tasks among many short ones; all GIL-free (sha256), so 2 workers overlap.

    One task per layer is long; the rest are short. Buffer sizes are calibrated on
    this machine so the durations hold on a faster or slower one.
    """
    per_byte = _sha_seconds(4 * MIB) / (4 * MIB)
    long_buf = bytes(int(long_ms / 1000 / per_byte))
    short_buf = bytes(max(4096, int(short_ms / 1000 / per_byte)))
    rng = random.Random(seed)
    tasks: dict[str, TaskDef] = {}
    prev: list[str] = []
    for layer in range(layers):
        cur = [f"s{layer}_{i}" for i in range(width)]
        slow = rng.randrange(width)
        for i, name in enumerate(cur):
            buf = long_buf if i == slow else short_buf
            deps = tuple(rng.sample(prev, rng.randint(1, 2))) if prev else ()
            tasks[name] = (partial(sha_link, buf), deps)
        prev = cur
    total_s = sum(per_byte * len(long_buf) for _ in range(layers)) + per_byte * len(short_buf) * (
        layers * width - layers
    )
    notes = (
        f"{layers * width} sha256 tasks in {layers} layers: {layers} of ~{long_ms:g} ms, "
        f"the rest ~{short_ms:g} ms (serial work {total_s * 1e3:.0f} ms)"
    )
    return Spec("skewed", tasks, notes=notes, extra={"serial_work_s": total_s})


def memory(length: int = 100, size_mib: int = 8) -> Spec:
    size = size_mib * MIB
    tasks: dict[str, TaskDef] = {"m0": (partial(make_big, size), ())}
    for i in range(1, length):
        tasks[f"m{i}"] = (derive_big, (f"m{i - 1}",))
    tasks["size"] = (big_len, (f"m{length - 1}",))
    notes = f"{length}-task chain of {size_mib} MiB bytes values, then their length"
    return Spec("memory", tasks, notes=notes, extra={"value_bytes": size})


def scale_deps(layers: int, width: int, seed: int = 4) -> list[tuple[str, tuple[str, ...]]]:
    """Names and deps of the scale graph, generated before any build is timed.

    Deps are drawn with integer arithmetic rather than ``random.sample`` so that
    generating a million tasks takes about a second, not ten.
    """
    rng = random.Random(seed)
    rand = rng.getrandbits
    out: list[tuple[str, tuple[str, ...]]] = []
    prev: list[str] = []
    for layer in range(layers):
        cur = [f"z{layer}_{i}" for i in range(width)]
        if not prev:
            out.extend((name, ()) for name in cur)
        else:
            for name in cur:
                k = 1 + rand(2) % 3
                picks = {prev[rand(20) % width] for _ in range(k)}
                out.append((name, tuple(picks)))
        prev = cur
    return out


WORKLOADS: dict[str, Callable[[bool], Spec]] = {
    "wide": lambda quick: wide(2_000 if quick else 10_000),
    "chain": lambda quick: chain(2_000 if quick else 10_000),
    "layered": lambda quick: layered(4_000 if quick else 20_000, 20 if quick else 100),
    "cpu": lambda quick: cpu(8, 6 if quick else 25, 1 if quick else 4),
    "pycpu": lambda quick: pycpu(8, 6 if quick else 25),
    "partial": lambda quick: partial_request(4_000 if quick else 20_000, 20 if quick else 100),
    "skewed": lambda quick: skewed(4, 25 if quick else 50),
    "memory": lambda quick: memory(20 if quick else 100),
}
"""Every workload but ``scale``, which has its own driver in ``run.py``."""
