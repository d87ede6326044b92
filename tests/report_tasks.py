"""Task functions for tests/test_reports_agree.py: importable by name, so that a
checkpoint knows them again on a resume and a child process can find them."""

from __future__ import annotations

import threading
from typing import Any

import dagexec

# Set once a run is over: thread attempts that timed out return then.
RELEASE = threading.Event()


def add_one(*values: Any) -> int:
    return sum(v for v in values if isinstance(v, int)) + 1


def flaky(*values: Any) -> int:
    if dagexec.current_task().attempt == 1:
        raise OSError("flaky: first attempt")
    return add_one(*values)


def boom(*values: Any) -> int:
    raise ValueError("boom")


def hang(*values: Any) -> int:
    RELEASE.wait(0.5)  # a run that could not replace its worker waits for it
    return add_one(*values)


def items(*values: Any) -> list[int]:
    return [1, 2, 3]


def item_flaky(item: int, *values: Any) -> int:
    if dagexec.current_task().attempt == 1 and item == 2:
        raise OSError("flaky item")
    return item
