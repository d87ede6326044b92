"""The process backend: one child process per worker thread for ``isolate="process"``.

Not loaded by ``import dagexec``: the first isolated call asks for it by name
(:func:`dagexec._core.isolate.runner_for` calls :func:`register`), so a program that
never uses a child never imports the pool, its exit hook or its shared-memory code.
The child's side (``child.py``, ``transfer.py``) is loaded by path in a bare
interpreter and imports nothing from dagexec (``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Make ``isolate="process"`` runnable: load the pool and enter its runner."""
    from ..._core.isolate import RUNNERS
    from .calls import call_in_child

    RUNNERS["process"] = call_in_child
