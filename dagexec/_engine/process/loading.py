"""What a child must know before it unpickles a call: the parent's ``sys.path``,
and the modules it must load from their file rather than import by name.

Sent with a call (its ``extra``) only when new to that child: a path list that
changed since, a module it has not loaded yet (kept in the slot's ``loaded``).
"""

from __future__ import annotations

import os
import sys
from typing import Protocol

from ..._core.isolate import IsolatedCall


class ChildSlot(Protocol):
    """What is read here of a :class:`.process_pool.ChildSlot`: what its child has."""

    sent_path: list[str] | None
    loaded: set[str]


__all__ = ["extra_for"]


def extra_for(
    slot: ChildSlot, call: IsolatedCall, data: bytes
) -> tuple[list[str] | None, dict[str, tuple[str, ...]]] | None:
    """What the child must know before it unpickles this call, if anything new:
    the parent's ``sys.path`` (when it changed) and modules to load by file."""
    paths = None
    if sys.path != slot.sent_path:
        paths = slot.sent_path = list(sys.path)
    files = _files(slot.loaded, call, data)
    return None if paths is None and not files else (paths, files)


def _files(loaded: set[str], call: IsolatedCall, data: bytes) -> dict[str, tuple[str, ...]]:
    """Modules the child must load before it unpickles this call, each as
    ("name", module) or ("file", path): the script as it was started (``python
    -m pkg.module`` by its name, so that its relative imports work; a file by
    its path, each with the parent's ``sys.argv``: a top level that reads its
    command line reads the parent's), and graph files the CLI loaded, by their path."""
    files: dict[str, tuple[str, ...]] = {}
    wanted = [call.by_file] if call.by_file is not None else []
    if "__main__" not in wanted and b"__main__" in data:  # a value of a __main__ class
        wanted.append("__main__")
    for name in wanted:
        if name in loaded:
            continue
        module = sys.modules.get(name)
        spec_name = getattr(getattr(module, "__spec__", None), "name", None)
        path = getattr(module, "__file__", None)
        argv = tuple(sys.argv) if name == "__main__" else ()
        if name == "__main__" and spec_name and spec_name != "__main__":
            files[name] = ("name", spec_name, *argv)
        elif path:
            files[name] = ("file", os.path.abspath(path), *argv)
        else:
            continue
        loaded.add(name)
        if name == "__main__":
            # The child's __main__ classes come back as __mp_main__.<name>.
            sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
    return files
