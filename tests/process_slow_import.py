"""A task module whose import hangs in a dagexec child (60 s), at once elsewhere.

Its own module, importable by name, so that a child imports it fresh.
"""

from __future__ import annotations

import process_tasks

process_tasks.block_in_a_child()


def task() -> str:
    return "imported"
