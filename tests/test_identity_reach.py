"""How far an identity reaches, and at what cost (review of issue 31): deep chains of
wrappers, and module-level instances of the task module's own classes."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from dagexec._persist import encoding
from dagexec._persist.identity import task_identities


def _identity(fn: Callable[..., Any]) -> bytes:
    (identity,) = task_identities(["t"], [fn], [()])
    assert identity is not None
    return identity


def _wraps_chain(base: Callable[[int], int], depth: int) -> Callable[..., int]:
    """``depth`` functools.wraps wrappers, each reaching the one below twice: through
    ``__wrapped__`` and through its default ``_f``."""
    fn: Callable[..., int] = base
    for _ in range(depth):
        fn = functools.wraps(fn)(lambda *a, _f=fn: _f(*a))
    return fn


def _plus_one(x: int) -> int:
    return x + 1


def _plus_two(x: int) -> int:
    return x + 2


def test_a_deep_chain_of_wrappers_is_encoded_once_per_level() -> None:
    # Before: each level was encoded twice, so 200 levels took longer than 150 s.
    calls = 0
    parts = encoding._Encoder._function_parts

    def counted(self: encoding._Encoder, fn: Any) -> list[bytes]:
        nonlocal calls
        calls += 1
        return parts(self, fn)

    encoding._Encoder._function_parts = counted  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        _identity(_wraps_chain(_plus_one, 300))
        elapsed = time.perf_counter() - started
    finally:
        encoding._Encoder._function_parts = parts  # type: ignore[method-assign]
    assert calls <= encoding._MAX_DEPTH + 1  # the levels below the cut count by name
    assert elapsed < 5.0  # generous: about a millisecond


def test_an_edit_within_the_depth_limit_is_seen() -> None:
    depth = encoding._MAX_DEPTH - 2
    assert _identity(_wraps_chain(_plus_one, depth)) != _identity(_wraps_chain(_plus_two, depth))
    assert _identity(_wraps_chain(_plus_one, depth)) == _identity(_wraps_chain(_plus_one, depth))


def test_beyond_the_depth_limit_a_function_counts_by_name_only() -> None:
    # Documented in docs/checkpoints.md ("does not see"): deeper than _MAX_DEPTH
    # references, an edit is not seen. Pinned, so that changing it is a choice.
    depth = encoding._MAX_DEPTH + 5
    bases = [lambda x: x + 1, lambda x: x + 2]  # one name (its body is what differs)
    one, two = (_wraps_chain(base, depth) for base in bases)
    assert _identity(one) == _identity(two)
    assert _identity(one) != _identity(_wraps_chain(_plus_one, depth - 1))  # its depth counts
