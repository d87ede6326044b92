"""Rendering user objects (task names, exceptions, hooks) for notes and log lines.

Names, exceptions and callbacks are user objects: a hostile ``__repr__``,
``__str__`` or ``__notes__`` must never break the scheduler, or the task's own
exception would not reach the caller. Every function here never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from .errors import describe

__all__ = ["add_note", "hook_for_message", "str_for_message", "task_for_message"]

log = logging.getLogger("dagexec")


def task_for_message(name: Hashable) -> str:
    """``describe(name)``, or a stand-in when the name's ``__repr__`` raises."""
    try:
        return describe(name)
    except Exception:
        return f"<{type(name).__qualname__} object at {id(name):#x} (its repr raised)>"


def str_for_message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__qualname__} (its str raised)>"


def hook_for_message(hook: Callable[..., Any]) -> str:
    try:
        name = getattr(hook, "__qualname__", None)
        return name if isinstance(name, str) else repr(hook)
    except Exception:
        return f"<{type(hook).__qualname__} object at {id(hook):#x}>"


def add_note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc`` unless it is there; never raises.

    ``add_note`` refuses an exception whose ``__notes__`` is not a list (a task may
    have set a tuple); such notes are copied into a list with ours at the end. Any
    other value (a string, say) is kept whole as one note: iterating it would
    split a string into characters, and ``in`` would test for a substring.
    """
    try:
        notes = getattr(exc, "__notes__", None)
        if notes is None:
            exc.add_note(note)
        elif isinstance(notes, list):
            if note not in notes:
                exc.add_note(note)
        elif isinstance(notes, tuple):
            if note not in notes:
                exc.__notes__ = [*notes, note]
        else:
            exc.__notes__ = [notes, note]
    except Exception:
        log.debug("could not add the note %r to a %s", note, type(exc).__qualname__)
