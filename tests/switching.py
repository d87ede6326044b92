"""Threads interleaved as often as the interpreter allows, for tests that hunt races."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fast_switching(interval: float = 1e-6) -> Iterator[None]:
    """On a GIL build, switch threads every ``interval`` seconds; restore afterwards.

    Without a GIL, threads already run at once and the setting changes nothing.
    """
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
