"""Sizing values for the memory-aware depth: views by what they keep alive, pandas
objects sampled, every estimate at a bounded cost, and no numpy import in the core."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from dagexec._engine.run.sizing import ELEMENTS_SAMPLED, estimate_bytes


class Buffer:
    """Duck-typed array owning ``nbytes`` (numpy's protocol: ``nbytes``, ``base``)."""

    base = None

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


class View:
    """Duck-typed view: a few bytes of its own, keeping ``base`` alive."""

    def __init__(self, base: Any, nbytes: int = 8) -> None:
        self.base = base
        self.nbytes = nbytes


def test_a_duck_typed_view_counts_the_buffer_it_keeps_alive() -> None:
    buffer = Buffer(8 << 20)
    assert estimate_bytes(View(buffer)) >= 8 << 20
    assert estimate_bytes(View(View(View(buffer)))) >= 8 << 20  # a view of a view
    assert estimate_bytes(View(bytes(1 << 20))) >= 1 << 20  # a base without nbytes
    assert estimate_bytes(Buffer(100)) == 100


def test_numpy_views_count_their_base() -> None:
    np = pytest.importorskip("numpy")
    x = np.ones((1000, 1000))  # 8 MB
    for view in (x[-1:], x.T, x[::2, ::2], x[10:][5:], x.reshape(-1)[:10]):
        assert sys.getsizeof(view) < 1 << 20  # what the depth used to read
        assert estimate_bytes(view) >= x.nbytes
    assert estimate_bytes(x[-1:].copy()) < 10_000  # a copied row is small
    assert estimate_bytes([x[i] for i in range(ELEMENTS_SAMPLED)]) >= x.nbytes


def test_an_object_array_is_sized_from_sampled_elements() -> None:
    np = pytest.importorskip("numpy")
    words = np.array(["w" * 1000] * 10_000, dtype=object)
    assert estimate_bytes(words) >= 10_000 * 1000


def test_a_pandas_frame_is_sized_by_sampling_never_by_deep_memory_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    n = 20_000
    frame = pd.DataFrame(
        {
            "k": np.arange(n),
            "v": np.random.default_rng(0).random(n),
            "o": pd.Series([("x" * 100, i) for i in range(n)], dtype=object),
        }
    )
    deep = int(frame.memory_usage(deep=True).sum())

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("memory_usage visits every object: too slow to size with")

    monkeypatch.setattr(pd.DataFrame, "memory_usage", refuse)
    monkeypatch.setattr(pd.Series, "memory_usage", refuse)
    assert deep / 2 <= estimate_bytes(frame) <= deep * 2
    series = frame["v"]
    assert series.nbytes <= estimate_bytes(series) <= 2 * series.nbytes + 1000
    # A slice of a frame keeps the frame's blocks alive, as a numpy view does.
    assert estimate_bytes(frame.iloc[:10]) >= frame["v"].nbytes
    # Shuffle groups: a dict of frames.
    groups = {i: frame.iloc[i::4].copy() for i in range(4)}
    assert estimate_bytes(groups) >= deep / 2


class Counted:
    """Counts how often it is sized."""

    calls = 0

    def __sizeof__(self) -> int:
        Counted.calls += 1
        return 1000


def test_every_estimate_looks_at_a_bounded_number_of_things() -> None:
    Counted.calls = 0
    flat = [Counted() for _ in range(100_000)]
    assert estimate_bytes(flat) >= 100_000 * 1000
    assert Counted.calls <= ELEMENTS_SAMPLED
    Counted.calls = 0
    nested = [[Counted() for _ in range(1000)] for _ in range(1000)]
    assert estimate_bytes(nested) >= 1000 * 1000 * 1000
    assert Counted.calls <= ELEMENTS_SAMPLED**2
    Counted.calls = 0
    assert estimate_bytes({i: [Counted()] * 1000 for i in range(1000)}) > 0
    assert Counted.calls <= 2 * ELEMENTS_SAMPLED * ELEMENTS_SAMPLED
    # A deep nest is looked into two levels deep, no further.
    deep: Any = Counted()
    for _ in range(1000):
        deep = [deep]
    Counted.calls = 0
    estimate_bytes(deep)
    assert Counted.calls == 0


def test_hostile_array_likes_count_as_small() -> None:
    class Hostile:
        nbytes = 10

        @property
        def base(self) -> Any:
            raise RuntimeError("no")

    class Cyclic:
        nbytes = 10

        def __init__(self) -> None:
            self.base = self

    assert estimate_bytes(Hostile()) == 0
    assert estimate_bytes(Cyclic()) == 10  # the base chain is followed a few links only


def test_a_default_run_does_not_import_numpy() -> None:
    code = (
        "import sys, dagexec\n"
        "g = dagexec.Graph()\n"
        "for i in range(200): g.add(i, lambda: bytes(1000))\n"
        "dagexec.run(g, workers=2)\n"
        "assert 'numpy' not in sys.modules, 'the core imported numpy'\n"
        "assert 'pandas' not in sys.modules, 'the core imported pandas'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pyarrow_strings_are_sized_by_their_buffers_not_by_nbytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pandas' default strings are pyarrow-backed: their ``nbytes`` works out a slice's
    exact share (50-90 us on a 26-row column, most of a small frame's estimate in a
    dask groupby-agg); the buffers they hold are what they keep alive, and cheap."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    n = 20_000
    words = pd.array([f"word-{i:06d}" * 4 for i in range(n)], dtype="string[pyarrow]")
    frame = pd.DataFrame({"w": words, "k": range(n)}, index=pd.Index(words, name="key"))
    arrow_type = type(frame["w"].array)
    deep = int(frame.memory_usage(deep=True).sum())

    def refuse(self: Any) -> int:
        raise AssertionError("nbytes of a pyarrow array: too slow to size with")

    monkeypatch.setattr(arrow_type, "nbytes", property(refuse))
    assert deep / 2 <= estimate_bytes(frame) <= deep * 2
    # A slice keeps the whole buffers alive, as a numpy view keeps its base.
    assert estimate_bytes(frame.iloc[:10]) >= n * 24
    assert estimate_bytes(pd.Series(words)) >= n * 24


def test_a_range_index_is_not_asked_its_nbytes(monkeypatch: pytest.MonkeyPatch) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"v": [1.0] * 1000})
    assert type(frame.index).__name__ == "RangeIndex"

    def refuse(self: Any) -> int:
        raise AssertionError("a RangeIndex holds no array: nothing to size")

    monkeypatch.setattr(type(frame.index), "nbytes", property(refuse))
    assert 8000 <= estimate_bytes(frame) <= 8000 + 1000
