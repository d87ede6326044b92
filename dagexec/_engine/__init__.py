"""Threads, queues, clocks and signals, in four rooms: the executor's front
(``front/``), one run (``run/``), the worker threads (``workers/``) and the process
backend (``process/``), each depending only on the rooms after it in that list.

The process backend is entered here by name only: the first ``isolate="process"``
call loads it (see :data:`dagexec._core.isolate.LOADERS`).
"""

from __future__ import annotations

from .._core.isolate import LOADERS


def _load_process_backend() -> None:
    from .process import register

    register()


LOADERS["process"] = _load_process_backend
