"""Shared fixtures: every test must leave no thread behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dagexec.testing import no_leaked_threads


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    # Like CPython's threading_setup/threading_cleanup: a thread that outlives its
    # test is a bug (a worker never stopped, a scheduler never finished).
    with no_leaked_threads():
        yield
