"""What crosses between a worker thread and its child, and what happens to what cannot.

The parent's side of pickling a call and unpickling an answer: a call goes as its
parts (:func:`parts`), so that the child rebuilds it without dagexec's call
classes. What cannot travel fails its task with a message naming the task, the
offender and the fix (:func:`unpicklable`); a task name that does not pickle
travels as its description (:func:`travelling_name`); an exception that does not
pickle in the child or unpickle here is rebuilt as its own class when that class
imports here, so ``retry_on=`` still matches it (:func:`rebuilt_error`).
"""

from __future__ import annotations

import importlib
import pickle
import sys
from collections.abc import Hashable
from typing import Any

from ..._core.bind import BoundCall, KeywordCall
from ..._core.errors import describe
from ..._core.isolate import IsolatedCall
from ..._core.safe import add_note
from .transfer import lift

__all__ = ["parts", "rebuilt_error", "travelling_name", "unpicklable"]


def travelling_name(name: Hashable) -> Hashable:
    """``name`` as the child sees it (``current_task().name``): itself if it pickles,
    else its description (a name is only shown there, never looked up)."""
    if type(name) is str or type(name) is int:
        return name
    try:
        pickle.dumps(name, protocol=5)
    except Exception:
        return describe(name)
    return name


def rebuilt_error(
    name: Hashable,
    what: tuple[str, str, str, str],
    why: str | None,
    data: Any,
    buffers: list[Any],
) -> BaseException:
    """The exception a child sent back for task ``name``: unpickled, or else rebuilt.

    ``what`` is its class's module and qualified name, its message and the child's
    traceback (as a note); ``why`` says
    why the child could not pickle it (None if it did). Rebuilt, it is an instance of
    its own class (made without calling its ``__init__``, its message as its only
    argument) when that class imports here; else a RuntimeError saying what it was.
    """
    if why is None:
        try:
            exc = pickle.loads(data, buffers=buffers)
        except Exception as error:
            why = f"it cannot be unpickled here: {type(error).__name__}: {error}"
        else:
            if isinstance(exc, BaseException):
                add_note(exc, what[3])  # the child's traceback
                return exc
            why = f"it unpickled as a {type(exc).__name__}"
    else:
        why = f"it cannot be pickled: {why}"
    module, qualname, message, note = what
    fix = (
        "make it picklable (pass every argument of its __init__ on to "
        "super().__init__, or define __reduce__)"
    )
    rebuilt = _instance(module, qualname, message)
    if rebuilt is not None:
        rebuilt.add_note(
            f"dagexec: task {describe(name)}'s {qualname} was rebuilt in the parent from "
            f"its class and message, without its other attributes, because {why}; {fix}"
        )
        rebuilt.add_note(note)
        return rebuilt
    stand_in = RuntimeError(
        f"task {describe(name)} raised {qualname}: {message} in its child process, and "
        f"that exception cannot be pickled back ({why}; its class {module}.{qualname} "
        f"cannot be imported here either); {fix}"
    )
    stand_in.add_note(note)
    return stand_in


def _instance(module: str, qualname: str, message: str) -> BaseException | None:
    """An instance of class ``module.qualname`` with ``message``, or None if that fails."""
    try:
        found: Any = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        if not (isinstance(found, type) and issubclass(found, BaseException)):
            return None
        exc = found.__new__(found)
        exc.args = (message,)
        str(exc)  # a __str__ reading attributes __init__ would have set fails here
    except Exception:
        return None
    return exc


def parts(call: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any], tuple[str, ...]]:
    """``call`` as (function, constant args, constant kwargs, keyword-dependency
    parameters), large ``bytes`` constants lifted out of band: the child rebuilds
    the call from these without importing dagexec's call classes."""
    if isinstance(call, KeywordCall):
        return call.fn, lift(call.args), _lift_values(call.kwargs), call.dep_params
    if isinstance(call, BoundCall):
        return call.fn, lift(call.args), _lift_values(call.kwargs), ()
    return call, (), {}, ()


def _lift_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    values = tuple(kwargs.values())
    lifted = lift(values)
    return kwargs if lifted is values else dict(zip(kwargs, lifted, strict=True))


def unpicklable(
    call: IsolatedCall, dep_values: tuple[Any, ...], name: Hashable, exc: Exception
) -> TypeError:
    """The TypeError naming which parameter of the task could not be pickled."""
    parts: list[tuple[str, Any]] = list(zip(call.labels, dep_values, strict=False))
    parts += [(f"argument {i}", v) for i, v in enumerate(dep_values) if i >= len(call.labels)]
    inner = call.call
    if isinstance(inner, (BoundCall, KeywordCall)):
        parts += [(f"args[{i}] (a constant)", v) for i, v in enumerate(inner.args)]
        parts += [(f"kwargs[{k!r}] (a constant)", v) for k, v in inner.kwargs.items()]
        parts.append(("its function", inner.fn))
    else:
        parts.append(("its function", inner))
    what = "an argument"
    for label, value in parts:
        try:
            pickle.dumps(value, protocol=5)
        except Exception:
            what = f"{label}, a {type(value).__name__},"
            break
    return TypeError(
        f"task {describe(name)}: {what} cannot be pickled to send to its child process "
        f"(isolate='process'): {type(exc).__name__}: {exc}; pass a picklable value (not a "
        "lock, an open file, a generator or a lambda), or run the task on a thread (drop "
        "isolate)"
    )
