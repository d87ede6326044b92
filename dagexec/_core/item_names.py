"""The names of a map's items, ``(map, index)``, and the names they collide with.

A map's items are named ``(map_name, i)`` at run time, in status, trace and
callbacks. Such a name is a dict key, and Python makes every number equal to
``i`` (and of equal hash) the same key: ``(m, 0.0)``, ``(m, 0j)``,
``(m, Decimal(0))``, ``(m, Fraction(0))`` and ``(m, False)`` all name item 0.
So a task may not be named like one (it would be overwritten in ``status``), and
a target named like one is refused with what to do instead.

``False`` and ``True`` are included: ``hash(False) == hash(0)`` and
``False == 0``, so ``(m, False)`` *is* the key ``(m, 0)``; allowing it would
bring the collision back.
"""

from __future__ import annotations

import numbers
from collections.abc import Container, Hashable, Iterable

from .errors import DuplicateTaskError, describe

__all__ = [
    "check_item_names",
    "item_dep_message",
    "item_index",
    "item_of",
    "item_target_message",
    "item_task_message",
]


def item_index(value: object) -> int | None:
    """The item index ``value`` equals (as a dict key), or None when it names no item."""
    if not isinstance(value, numbers.Number):
        return None
    try:
        if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
            if value.imag:
                return None
            value = value.real
        k = int(value)  # type: ignore[call-overload]  # nan, inf: ValueError, OverflowError
        return k if k >= 0 and value == k else None
    except Exception:  # a hostile number cannot be an item's name
        return None


def item_of(name: object, maps: Container[Hashable]) -> tuple[Hashable, int] | None:
    """``(map, index)`` when ``name`` is the name of an item of one of ``maps``."""
    if type(name) is not tuple or len(name) != 2:
        return None
    owner, i = name
    try:
        if owner not in maps:
            return None
    except Exception:
        return None
    index = item_index(i)
    return None if index is None else (owner, index)


def item_task_message(name: Hashable, owner: Hashable, index: int) -> str:
    return (
        f"task {describe(name)} has the name of item {index} of map {describe(owner)} (a "
        "map's items are named (map, index) at run time, and any number equal to the "
        "index, 0.0, 0j, Decimal(0), Fraction(0) or False for 0, is the same name); "
        "rename the task or the map"
    )


def item_target_message(name: Hashable, owner: Hashable, index: int) -> str:
    return (
        f"target {describe(name)} is item {index} of map {describe(owner)}: a map's "
        "items exist only once the map expands during the run, so they cannot be "
        f"targets; target the map and index its list: "
        f"run(g, targets=[{describe(owner)}])[{describe(owner)}][{index}]"
    )


def item_dep_message(task: Hashable, name: Hashable, owner: Hashable, index: int) -> str:
    return (
        f"task {describe(task)} depends on {describe(name)}, item {index} of map "
        f"{describe(owner)}: a map's items exist only once the map expands during the "
        "run, so no task can depend on one; depend on the map and index its list: "
        f"deps=[{describe(owner)}] and take value[{index}]"
    )


def check_item_names(names: Iterable[Hashable], maps: Container[Hashable]) -> None:
    """Reject a task named like an item of one of ``maps``.

    ``(m, i)`` names item ``i`` of map ``m`` at run time, so a task of that name
    would be overwritten in ``status``, the trace and the callbacks (and
    ``(m, 0)`` as a dependency would mean either). Checked once per change of a
    graph that has a map, since either may be added first.

    Raises:
        DuplicateTaskError: naming the task, the map and the item.
    """
    for name in names:
        clash = item_of(name, maps)
        if clash is not None:
            raise DuplicateTaskError(name, item_task_message(name, *clash))
