"""A task's value as the checkpoint keeps it: pickled bytes and their digest.

Where pickling happens: on the thread that calls
:meth:`~dagexec._persist.checkpoint.CheckpointStore.save_nowait` (or
:func:`pickle_value`), not on the writer. Pickling on the writer would take the
cost off the caller, but the value would have to stay alive and unchanged until
the writer reached it, and a task that mutates its argument in place would race
with the writer: the store could hold a value the task never returned, or
pickling could fail with "dictionary changed size during iteration". Pickling at
the moment the task ends takes a snapshot, and the error for an unpicklable
value is raised right there, naming the task. The engine should therefore pickle
on the *worker* thread, right after the task returns and before its value is
handed to any other task, and pass the bytes along (see
``benchmarks/bench_checkpoint.py`` for what each side costs).

Each stored value carries a BLAKE2b digest of its bytes, so damage below SQLite
(a bad disk, a file copied while written) is detected on load: such a value, or
one that no longer unpickles (its class was renamed), is treated as missing
with a warning, never as a crash. Unpickling runs code named in the data; which
files may be read at all is :mod:`dagexec._persist.checkpoint_file`'s rule.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
from collections.abc import Hashable
from typing import Any

from .._core.errors import CheckpointError

__all__ = ["describe_safely", "digest", "pickle_value", "unpickle_checked"]

log = logging.getLogger("dagexec")

_NAME_TEXT_MAX = 1000
_PICKLE_PROTOCOL = 5


def describe_safely(name: object) -> str:
    """``repr(name)`` for a message, even when the name's ``__repr__`` raises."""
    try:
        text = repr(name)
    except Exception:
        return f"<{type(name).__name__} name whose repr() raised>"
    if len(text) > _NAME_TEXT_MAX:
        text = text[: _NAME_TEXT_MAX - 3] + "..."
    return text


def pickle_value(value: Any, name: Hashable) -> bytes:
    """Pickle a task's value for the store; safe to call on any thread.

    Raises:
        CheckpointError: the value cannot be pickled; the message names the task
            and the value's type, ``__cause__`` is pickle's own error.
    """
    try:
        return pickle.dumps(value, protocol=_PICKLE_PROTOCOL)
    except Exception as exc:
        raise CheckpointError(
            f"task {describe_safely(name)} returned a {type(value).__name__} that cannot "
            f"be pickled for the checkpoint ({type(exc).__name__}: {exc}); return a "
            "picklable value, or run this graph without a checkpoint",
            task=name,
        ) from exc


def digest(data: bytes) -> bytes:
    """The digest stored beside a value's bytes and checked on every load."""
    # hashlib releases the GIL for buffers over 2 KiB, so checking a large value
    # does not hold up the scheduler.
    return hashlib.blake2b(data, digest_size=16).digest()


def unpickle_checked(path: str, name: str, stored_digest: bytes, data: bytes) -> tuple[bool, Any]:
    """``(True, value)`` for intact bytes that unpickle, else ``(False, None)`` and a warning.

    ``name`` is the task name as the file keeps it (its repr); ``path`` names
    the file in the warning.
    """
    if digest(data) != stored_digest:
        log.warning(
            "checkpoint %r: the stored value of task %s is damaged (digest mismatch); "
            "it will be computed again",
            path,
            name,
        )
        return False, None
    try:
        return True, pickle.loads(data)
    except Exception as exc:
        log.warning(
            "checkpoint %r: the stored value of task %s cannot be unpickled (%s: %s); "
            "it will be computed again",
            path,
            name,
            type(exc).__name__,
            exc,
        )
        return False, None
