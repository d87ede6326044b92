"""The memory-aware dispatch depth (no bound given) and dask.local's order in dask.get."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dagexec
import dagexec._engine.run.depth
from dagexec._engine.run.depth import BUDGET_BYTES, Depth, estimate_bytes
from dagexec._engine.workers.wire import CHAIN, DONE, FAILED


class Chunk:
    """A value standing for ``size`` bytes of data, counting how many are alive."""

    lock = threading.Lock()
    live = peak = 0

    def __init__(self, size: int = 8 << 20) -> None:
        self.size = size
        with Chunk.lock:
            Chunk.live += 1
            Chunk.peak = max(Chunk.peak, Chunk.live)

    def __sizeof__(self) -> int:
        return self.size

    def __del__(self) -> None:
        with Chunk.lock:
            Chunk.live -= 1

    @staticmethod
    def reset() -> None:
        Chunk.live = Chunk.peak = 0


@pytest.fixture(autouse=True)
def _unbudgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests feed batches far faster than a driver makes them, so the sampling
    budget (tests/test_sizing_budget.py) would put samples off, by how loaded the
    machine is: it is lifted here, where the rule is what is tested."""
    monkeypatch.setattr(dagexec._engine.run.depth, "_ALLOWANCE", float("inf"))


def _report(value: Any) -> tuple[Any, ...]:
    return (0, 0, DONE, value, 0.0, 0.0)


# ------------------------------------------------------------------ the rule, alone
def test_depth_is_one_per_worker_until_a_value_is_seen() -> None:
    depth = Depth(workers=2, full=130)
    assert depth.cap() == 2
    assert depth.after([(0, 0, FAILED, ValueError(), 0.0, 0.0)]) == 2  # no value in it


def test_small_values_open_the_full_depth_and_large_ones_close_it() -> None:
    depth = Depth(workers=2, full=130)
    depth.note(28)
    assert depth.cap() == 130
    depth.note(8 << 20)
    assert depth.cap() == 2
    # A view or a sum among big chunks does not open it at once...
    depth.note(24)
    assert depth.cap() == 2
    # ...a run of small values does: the remembered size decays.
    for _ in range(200):
        depth.note(24)
    assert depth.cap() == 130


def _memory() -> list[int]:
    """Stands for a plan's ``first_depth``: Depth's memory across a plan's runs."""
    return [0]


def test_a_rerun_of_a_plan_starts_where_its_last_run_first_asked_to_go() -> None:
    plan, other = _memory(), _memory()
    first = Depth(workers=2, full=130, memory=plan)
    assert first.start == 2  # nothing known: one task per worker
    assert first.after([_report(1)]) == 4  # small values: deeper, twice as deep at most
    assert Depth(workers=2, full=130, memory=plan).start == 130  # its rerun starts there
    assert Depth(workers=2, full=64, memory=plan).start == 64  # never past its own full
    assert Depth(workers=2, full=130, memory=other).start == 2  # another plan does not
    assert Depth(workers=2, full=130).start == 2  # nor a run without a plan


def test_big_inputs_then_small_results_start_the_rerun_shallow() -> None:
    # A run whose opening tasks make big chunks and whose later ones reduce them
    # goes deep by its end; its rerun must not start there, or it would make ~130
    # chunks before the first report narrows it (what this module exists to stop).
    plan = _memory()
    depth = Depth(workers=2, full=130, memory=plan)
    assert depth.after([_report(b"x" * (8 << 20))]) == 2
    for _ in range(300):  # the reduction's small values open it up
        depth.after([_report(1)])
    assert depth.current == 130
    assert Depth(workers=2, full=130, memory=plan).start == 2


def test_one_small_first_value_does_not_open_the_depth_to_big_ones() -> None:
    # dask's x.cumsum(axis=0): the first task to end makes a 8 KB row, the next
    # ones 8 MB blocks. Opening to the full depth on that row let 34 tasks go and
    # peaked at 4x dask threaded's memory; the depth now at most doubles per
    # sample, and the rerun starts at the lowest depth the first samples asked for.
    plan = _memory()
    depth = Depth(workers=2, full=130, memory=plan)
    assert depth.after([_report(bytes(8 << 10))]) == 4
    assert depth.after([_report(Chunk(8 << 20))]) == 2
    rerun = Depth(workers=2, full=130, memory=plan)
    assert rerun.start == 2
    # A run of small values still reaches the full depth, doubling: 4, 8, ..., 130.
    small = Depth(workers=2, full=130)
    assert [small.after([_report(1)]) for _ in range(7)] == [4, 8, 16, 32, 64, 128, 130]


def test_a_first_cap_at_the_worker_count_is_remembered_too() -> None:
    # A rerun that lands where the last run stood writes nothing (a speed cut):
    # but a first run whose first cap is its own worker count still leaves it,
    # so a rerun with fewer workers starts there, not at its own count.
    plan = _memory()
    four = Depth(workers=4, full=260, memory=plan)
    assert four.after([_report(b"x" * (8 << 20))]) == 4
    assert plan == [4]
    again = Depth(workers=2, full=130, memory=plan)
    assert again.start == 4
    assert again.after([_report(b"x" * (8 << 20))]) == 2  # its own first cap: written
    assert plan == [2]


def test_a_plans_runs_remember_its_first_depth_on_it() -> None:
    g = dagexec.Graph()
    g.add("root", lambda: 1)
    for i in range(8):
        g.add(f"m{i}", lambda r: r + 1, deps=["root"])
    plan = g._plan(None)
    assert plan.first_depth == [0]  # not run yet: nothing known
    with dagexec.Executor(workers=2) as ex:
        result = ex.run(g)
    # Small values: the first samples asked for the full depth, kept for a rerun.
    assert plan.first_depth == [result.stats.effective_cap]
    assert Depth(workers=2, full=result.stats.effective_cap, memory=plan.first_depth).start == (
        result.stats.effective_cap
    )


def test_batches_are_sampled_each_time_until_the_depth_is_full() -> None:
    depth = Depth(workers=2, full=130)
    assert depth.after([_report(Chunk(8 << 20))]) == 2
    assert depth.after([_report(1)]) == 2  # sampled: still big on the whole
    for _ in range(200):
        depth.after([_report(1)])
    assert depth.current == 130
    # At the full depth a big value is seen within a few batches, not at once.
    seen = [depth.after([_report(Chunk(8 << 20))]) for _ in range(8)]
    assert seen[-1] == 2


def test_a_chain_report_is_sampled_by_its_value() -> None:
    """Today a run of chains only (no job reports) never left one task per worker."""
    from dagexec._state.events import ChainEnd

    depth = Depth(workers=2, full=130)
    assert depth.after([(0, (1, 2), CHAIN, ChainEnd(2, True, 5, None), 0.0, 0.0)]) == 4
    failed = Depth(workers=2, full=130)
    assert failed.after([(0, (1, 2), CHAIN, ChainEnd(0, False, OSError(), None), 0.0, 0.0)]) == 2


def test_chains_of_small_values_go_deep() -> None:
    g = dagexec.Graph()
    for c in range(40):
        g.add(f"h{c}", lambda: 1)
        g.add(f"t{c}", lambda x: x + 1, deps=[f"h{c}"])  # h -> t: one chain, one item
    result = dagexec.run(g, workers=2)
    assert result.stats.peak_in_flight > 2


def test_depth_in_between_keeps_the_budget_of_fresh_values() -> None:
    depth = Depth(workers=2, full=130)
    depth.note(BUDGET_BYTES // 4)
    assert depth.cap() == 2 + 4


def test_size_estimates_look_into_containers_and_survive_hostile_objects() -> None:
    words = ["word" * 25] * 1000
    assert estimate_bytes(words) > 1000 * 100
    assert estimate_bytes({i: "x" * 1000 for i in range(100)}) > 100 * 1000

    class Hostile:
        def __sizeof__(self) -> int:
            raise RuntimeError("no")

    assert estimate_bytes(Hostile()) == 0


# ---------------------------------------------------------------- in a real run
def _fan_in(n: int, make: Any) -> dagexec.Graph:
    g = dagexec.Graph()
    for i in range(n):
        g.add(f"part{i}", make)
    g.add("total", lambda *parts: len(parts), deps=[f"part{i}" for i in range(n)])
    return g


def test_large_values_go_one_task_per_worker_by_default() -> None:
    """Today every root went out at once (up to 130): all 40 chunks made before use."""
    result = dagexec.run(_fan_in(40, lambda: bytes(4 << 20)), workers=2)
    assert result["total"] == 40
    assert result.stats.peak_in_flight <= 2
    assert result.stats.effective_cap == 2 * 65  # the bound it never goes beyond


def test_small_values_go_as_deep_as_the_inboxes_by_default() -> None:
    result = dagexec.run(_fan_in(400, lambda: 1), workers=2)
    assert result.stats.peak_in_flight > 20


@pytest.mark.parametrize("bounds", [{"queue_cap": 64}, {"max_in_flight": 130}])
def test_an_explicit_bound_keeps_its_fixed_meaning(bounds: dict[str, Any]) -> None:
    gate = threading.Event()

    def part() -> bytes:
        gate.wait(30)
        return bytes(1 << 20)

    with dagexec.Executor(2, **bounds) as ex:
        future = ex.submit(_fan_in(40, part))
        gate.set()
        result = future.result(timeout=60)
    assert result.stats.peak_in_flight == 40  # every root went out at once


# ------------------------------------------------------- dask graphs: dask's policy
dask = pytest.importorskip(
    "dask", reason="needs the dask extra: pip install -e '.[dask]' from a clone"
)

import dagexec.dask  # noqa: E402


@pytest.fixture(autouse=True)
def _stop_cached_workers() -> Iterator[None]:
    yield
    dagexec.dask.shutdown()


def _transpose_sum(n: int) -> tuple[dict[Any, Any], str]:
    """``(x + x.T).sum()`` on an n x n grid of chunks, as dask.array builds it."""
    dsk: dict[Any, Any] = {}
    for i in range(n):
        for j in range(n):
            dsk[("x", i, j)] = (Chunk,)
            dsk[("t", i, j)] = (lambda c: Chunk(), ("x", j, i))
            dsk[("a", i, j)] = (lambda p, q: Chunk(), ("x", i, j), ("t", i, j))
            dsk[("s", i, j)] = (lambda c: 1, ("a", i, j))
    dsk["total"] = (sum, [("s", i, j) for i in range(n) for j in range(n)])
    return dsk, "total"


@pytest.mark.dask
def test_dask_graphs_keep_as_few_chunks_alive_as_dask_local() -> None:
    """Strict dask.order rank with deep dispatch kept most of the 36 input chunks
    alive at once; dask.local's policy (last readied first, rank on ties) a few."""
    dsk, key = _transpose_sum(6)
    Chunk.reset()
    assert dask.get(dsk, key) == 36  # dask.local's synchronous scheduler
    theirs = Chunk.peak
    Chunk.reset()
    assert dagexec.dask.get(dsk, key, num_workers=1) == 36
    assert Chunk.peak <= theirs
    Chunk.reset()
    assert dagexec.dask.get(dsk, key, num_workers=2) == 36
    assert Chunk.peak <= theirs + 4


def test_a_rerun_that_asks_for_its_last_start_takes_one_first_sample_not_two() -> None:
    plan = _memory()
    first = Depth(workers=2, full=130, memory=plan)
    for _ in range(10):
        first.after([_report(1)])
    rerun = Depth(workers=2, full=130, memory=plan)
    assert rerun.start == 130
    assert rerun.after([_report(1)]) == 130
    assert rerun.countdown == 8  # the next sample 8 batches on, as at the full depth


_SIZES = st.sampled_from([0, 24, 800, 2000, 4100, 8 << 10, 300 << 10, 8 << 20])


@given(
    workers=st.integers(1, 4),
    full=st.sampled_from([1, 2, 8, 130, 260, 1 << 20]),
    runs=st.lists(st.lists(st.tuples(_SIZES, st.booleans()), max_size=40), max_size=4),
)
def test_the_calm_fast_path_equals_the_general_one(
    workers: int, full: int, runs: list[list[tuple[int, bool]]]
) -> None:
    """``Depth.after``'s fast path (a sample at the full depth that keeps it full)
    against the general one (``calm`` at -1.0 turns it off), slot by slot after
    every batch, over reruns of one plan: a batch is a value of some size, or
    (False) a report with nothing to sample."""
    fast_memory, slow_memory = _memory(), _memory()
    for batches in runs:
        fast = Depth(workers, full, memory=fast_memory)
        slow = Depth(workers, full, memory=slow_memory)
        slow.calm = -1.0
        for size, sampled in batches:
            report = _report(Chunk(size)) if sampled else (0, 0, FAILED, None, 0.0, 0.0)
            assert fast.after([report]) == slow.after([report])
            for name in Depth.__slots__:
                if name != "calm":
                    assert getattr(fast, name) == getattr(slow, name), name
        assert fast_memory == slow_memory


def test_a_rerun_at_the_full_depth_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case the fast path is for (a small run's rerun), shown to take it: with
    the general path's helpers made to fail, its sample still lands."""
    plan = _memory()
    first = Depth(workers=2, full=130, memory=plan)
    for _ in range(10):
        first.after([_report(1)])
    rerun = Depth(workers=2, full=130, memory=plan)

    def not_called(*args: object) -> None:
        raise AssertionError("the general path was taken")

    for name in ("cap", "next_look", "remember"):
        monkeypatch.setattr(Depth, name, not_called)
    assert rerun.after([_report(1)]) == 130
    assert rerun.countdown == 8 and rerun.samples == 2 and rerun.typical > 0
    # A big value is not calm: the general path takes it (and here, fails).
    big = Depth(workers=2, full=130, memory=plan)
    with pytest.raises(AssertionError, match="general path"):
        big.after([_report(Chunk(8 << 20))])


def test_small_values_among_big_ones_never_open_the_depth() -> None:
    """dask's ``(x + x.T).sum()``: each 8 MB chunk's small sum follows it. After 64
    unsampled batches at one task per worker a big value used to be forgotten, so
    two small samples in a row doubled the depth twice (peak 131-151 MiB against
    dask threaded's 86); a big value is now forgotten by a run of small ones only."""
    depth = Depth(workers=2, full=130)
    caps = [depth.after([_report(Chunk(8 << 20))])]
    pattern = [Chunk(100), Chunk(100), Chunk(8 << 20)]
    for i in range(3000):
        caps.append(depth.after([_report(pattern[i % 3])]))
    assert max(caps) == 2
    for _ in range(300):  # a true switch to small values still opens it
        caps.append(depth.after([_report(1)]))
    assert caps[-1] == 130
