"""How many bytes a task's value keeps alive, estimated at a small bounded cost.

What the memory-aware depth (:mod:`.depth`) reads. ``sys.getsizeof`` alone
misjudges the values dask graphs return in two ways, both measured on dask's
own workloads:

* An array *view* (a row of a chunk, ``x[-1:]``, a transposed block) reports
  its own bytes (100 B-8 KB) while it keeps its whole base buffer (8 MB) alive:
  ``x.cumsum(axis=0)`` returned such views for half its tasks, the depth opened
  up to 34 tasks and the run peaked at 4x dask threaded's memory. So a value
  with an integer ``nbytes`` is counted by the buffer at the root of its
  ``base`` chain (duck-typed: numpy is never imported here, since every run
  with default bounds sizes its values).
* A pandas object's ``__sizeof__`` is ``memory_usage(deep=True)``, which visits
  every Python object it holds: 0.35-0.82 s of a 1.1-2.2 s dask merge went into
  it. So a pandas object is counted from its arrays' ``nbytes`` (cheap), plus,
  for columns of Python objects, a few sampled elements scaled to the length.

Every estimate looks at a bounded number of things: :data:`ELEMENTS_SAMPLED`
elements per container, :data:`_ARRAYS_SAMPLED` arrays per frame, containers
nested at most :data:`_NESTING` deep, and at most :data:`_BASE_HOPS` bases.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["ELEMENTS_SAMPLED", "FLAT", "estimate_bytes", "looks_inside"]

# How many elements of a list, tuple, set, dict or object array are looked at to
# estimate what they hold: more is closer, but costs time per sample.
ELEMENTS_SAMPLED = 4

# How deep containers are looked into: a dict of tuples of arrays (a dask shuffle
# group's value, a bag partition of records) is two levels.
_NESTING = 2

# How many arrays of one pandas frame are sized (a frame has one per dtype block,
# usually a handful; a frame built column by column may have thousands).
_ARRAYS_SAMPLED = 16

# How many ``base`` links of a view are followed to the buffer it keeps alive.
_BASE_HOPS = 4

# How each type is sized, found once per type: an estimate runs on a thread whose
# caches a worker has just flushed, where every attribute looked up costs about
# a microsecond, so the per-type decisions (is it pandas? a container?) are not
# made again per value.
_FLAT, _PANDAS, _OTHER = "flat", "pandas", "other"
_CONTAINERS = (list, tuple, set, frozenset, dict)
# The types whose values are sized from their own header (sys.getsizeof, which
# cannot raise for them): exactly these, not their subclasses, which _how decides.
FLAT: frozenset[type] = frozenset((int, float, bool, str, bytes, bytearray, complex, type(None)))
_HOW: dict[type, Any] = dict.fromkeys(FLAT, _FLAT)
_HOW_MOST = 1024  # types remembered; forgotten all at once past this (types made on the fly)


def estimate_bytes(value: Any) -> int:
    """Roughly how many bytes ``value`` keeps alive; never raises (0 if it cannot tell)."""
    try:
        return int(_estimate(value, _NESTING))
    except OverflowError:  # a __sizeof__ past sys.maxsize: as large as it says
        return sys.maxsize
    except Exception:  # a hostile __sizeof__, __len__ or nbytes: count it as small
        return 0


def looks_inside(value: Any) -> bool:
    """Whether sizing ``value`` looks into what it holds (a list, tuple, set or dict,
    or a pandas object): 10-200 us with cold caches, where a number, a string or an
    array is sized from its own header (~1 us warm). Only these are worth timing."""
    try:
        cls = type(value)
        how = _HOW.get(cls)
        if how is None:
            how = _how(cls)
        return how is _PANDAS or how in _CONTAINERS
    except Exception:  # a class whose __module__ is hostile
        return True


def _how(cls: type) -> Any:
    """How values of ``cls`` are sized: flat, pandas, a built-in container type, or other."""
    how: Any = _OTHER
    if cls.__module__.partition(".")[0] == "pandas":
        how = _PANDAS
    else:
        for kind in _CONTAINERS:
            if issubclass(cls, kind):
                how = kind
                break
    if len(_HOW) >= _HOW_MOST:
        _HOW.clear()
    _HOW[cls] = how
    return how


def _estimate(value: Any, nesting: int) -> int:
    cls = type(value)
    how = _HOW.get(cls)
    if how is None:
        how = _how(cls)
    if how is _FLAT:
        return sys.getsizeof(value)
    if how is _PANDAS:
        return _pandas_bytes(value)
    if how is _OTHER:
        nbytes = getattr(value, "nbytes", None)
        if type(nbytes) is int:
            return _array_bytes(value, nbytes, nesting)
        return sys.getsizeof(value)
    # A container's own shell, by its built-in type's __sizeof__: a subclass may
    # override it to size every element (dask's ShuffleGroupResult, a dict of
    # frames, asks dask's sizeof of each: 3-4 ms a call).
    # Its elements, likewise, through the built-in type's own methods: a subclass's
    # __len__, __iter__ or __getitem__ may do anything (an LRU dict moves the key it
    # is asked for to its end), and sizing must not change a value or run its code.
    size: int = how.__sizeof__(value)
    n = how.__len__(value)
    if nesting and n:
        sample: list[Any] = []
        if how is dict:
            for item in dict.items(value):
                sample += item
                if len(sample) >= 2 * ELEMENTS_SAMPLED:
                    break
            n *= 2
        else:
            for x in how.__iter__(value):
                sample.append(x)
                if len(sample) >= ELEMENTS_SAMPLED:
                    break
        size += sum(_estimate(x, nesting - 1) for x in sample) * n // len(sample)
    return size


def _array_bytes(value: Any, nbytes: int, nesting: int) -> int:
    """An array-like's bytes: the largest of its own and the buffer at the root of
    its ``base`` chain, which a view keeps alive; plus, for an array of Python
    objects (its dtype ``hasobject``), what a few sampled elements suggest they hold."""
    size = nbytes
    root, base = None, getattr(value, "base", None)
    hops = 0
    while base is not None and hops < _BASE_HOPS:
        root, base = base, getattr(base, "base", None)
        hops += 1
    if root is not None:
        held = getattr(root, "nbytes", None)
        size = max(size, held if type(held) is int else sys.getsizeof(root))
    dtype = getattr(value, "dtype", None)
    if nesting and getattr(dtype, "hasobject", False) is True:
        size += _objects_bytes(value, nesting)
    return size


def _objects_bytes(array: Any, nesting: int) -> int:
    """What the Python objects of an object array hold, from a few spread over it."""
    flat = array.reshape(-1) if getattr(array, "ndim", 1) > 1 else array
    n = len(flat)
    if not n:
        return 0
    step = max(1, n // ELEMENTS_SAMPLED)
    sample = [flat[i] for i in range(0, n, step)][:ELEMENTS_SAMPLED]
    return sum(_estimate(x, nesting - 1) for x in sample) * n // len(sample)


def _pandas_bytes(value: Any) -> int:
    """A pandas object's bytes from its arrays (sampled), never ``memory_usage(deep=True)``.

    A frame's arrays are its block manager's (``_mgr.arrays``: one per dtype
    block, ~4 us for a frame where ``memory_usage`` takes ~0.5 ms); a Series or
    Index has one (``.array``). Anything else of pandas' (a groupby, a scalar)
    is asked ``sys.getsizeof``.
    """
    arrays = getattr(getattr(value, "_mgr", None), "arrays", None)
    if arrays is None:
        try:
            arrays = [value.array]
        except Exception:  # no array (a groupby, a scalar) or none in one (a MultiIndex)
            return sys.getsizeof(value)
    size = _index_bytes(value) + 200 * len(arrays)
    sample = arrays[:_ARRAYS_SAMPLED]
    total = 0
    for array in sample:
        total += _column_bytes(array)
    return size + total * len(arrays) // len(sample)


def _column_bytes(array: Any) -> int:
    """One array of a pandas object: a pyarrow-backed one (pandas' default strings)
    by the buffers it holds (``get_total_buffer_size``, ~4 us cold, where its
    ``nbytes`` works out a slice's exact share: 50-90 us on a 26-row string column
    in a dask run, most of a small frame's estimate); any other by :func:`_array_bytes`."""
    arrow = getattr(array, "_pa_array", None)
    if arrow is not None:
        buffers = getattr(arrow, "get_total_buffer_size", None)
        if buffers is not None:
            return int(buffers())
    nbytes = getattr(array, "nbytes", None)
    return _array_bytes(array, nbytes, 1) if type(nbytes) is int else sys.getsizeof(array)


def _index_bytes(value: Any) -> int:
    """The bytes of a frame's or series' row index (0 for an Index itself, and for a
    ``RangeIndex``, which holds no array: its ``nbytes`` sizes three ints, 10-20 us)."""
    index = getattr(value, "index", None)
    if index is None or type(index).__name__ == "RangeIndex":
        return 0
    data = getattr(index, "__dict__", {}).get("_data")  # an Index's array, if it has one
    if data is not None:
        return _column_bytes(data)
    nbytes = getattr(index, "nbytes", None)  # a MultiIndex, ...
    return nbytes if type(nbytes) is int else 0
