"""What a class or an object is made of, as the identity encoding reads it: the
Python functions behind a class attribute, an instance's state, what a decorator's
result wraps. Kept apart from :mod:`.encoding`, which decides what each part counts for."""

from __future__ import annotations

import functools
import types

__all__ = ["dunder_or_sunder", "functions_of", "state_of", "wrapped_by"]


def dunder_or_sunder(name: str) -> bool:
    """``__module__``, ``_order_``: Python's and enum's own names, not constants."""
    return len(name) > 2 and name[0] == "_" and name[-1] == "_"


def state_of(obj: object) -> list[tuple[str, object]] | None:
    """``obj``'s attributes from its ``__dict__`` and ``__slots__``, sorted by name;
    None if it has neither (or they cannot be read without running its code)."""
    state: dict[str, object] = {}
    found = False
    for klass in type(obj).__mro__:
        slots = vars(klass).get("__slots__")
        if slots is None:
            continue
        found = True
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            descriptor = vars(klass).get(slot)
            try:
                state[slot] = descriptor.__get__(obj, klass)  # type: ignore[union-attr]
            except Exception:  # an unfilled slot, a hostile descriptor
                continue
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        own = None
    if isinstance(own, dict):
        found = True
        state.update((k, v) for k, v in own.items() if type(k) is str)
    return sorted(state.items()) if found else None


def wrapped_by(fn: object) -> object | None:
    """What a decorator's result wraps (``__wrapped__``), if it is callable; else None."""
    try:
        wrapped = getattr(fn, "__wrapped__", None)
    except Exception:  # a hostile __getattr__
        return None
    return wrapped if wrapped is not fn and callable(wrapped) else None


def functions_of(member: object) -> list[types.FunctionType]:
    """The Python functions behind a class attribute: method, static, class, property,
    cached property."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    elif isinstance(member, functools.cached_property):
        member = member.func
    if isinstance(member, property):
        return [
            f for f in (member.fget, member.fset, member.fdel) if isinstance(f, types.FunctionType)
        ]
    return [member] if isinstance(member, types.FunctionType) else []
