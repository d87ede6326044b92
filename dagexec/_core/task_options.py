"""A task's options (everything but its name, function, deps and constants), as one record.

``Graph.add``, ``Graph.map`` and ``@g.task`` take the same options and pass them
on as one dict: :class:`TaskOptions` lists them once, with their defaults, and
:func:`check_task_options` checks them all. ``Graph.add``'s fast path is keyed
on "no option given", so it cannot miss one added later.

To add an option: one field in :class:`TaskOptions` (its default meaning "not
set"), the same name in :class:`TaskOptionArgs` (what type checkers show the
caller; a test keeps the two equal), and its check in :func:`check_task_options`.
The graph keeps the checked record of every task given an option
(``Graph._options``, sparse), so the code that implements an option reads it
from there.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Mapping
from typing import NamedTuple, TypedDict

from .errors import describe
from .options import check_priority, check_resources, safe_repr
from .policy import Policy, check_policy

__all__ = [
    "DEFAULTS",
    "CheckedOptions",
    "TaskOptionArgs",
    "TaskOptions",
    "check_checkpoint_flag",
    "check_task_options",
]


class TaskOptions(NamedTuple):
    """The options of one task, as given; a field left at its default is not set."""

    priority: int = 0
    resources: Mapping[str, float] | None = None
    retries: int = 0
    retry_delay: float = 0.0
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception
    timeout: float | None = None
    run_if: str = "all_success"
    checkpoint: bool = True
    isolate: str | None = None


class TaskOptionArgs(TypedDict, total=False):
    """The keyword options of ``Graph.add``/``map``/``task``, for type checkers."""

    priority: int
    resources: Mapping[str, float] | None
    retries: int
    retry_delay: float
    retry_on: type[BaseException] | tuple[type[BaseException], ...]
    timeout: float | None
    run_if: str
    checkpoint: bool
    isolate: str | None


DEFAULTS = TaskOptions()
_FIELDS = frozenset(TaskOptions._fields)


class CheckedOptions(NamedTuple):
    """:class:`TaskOptions` checked, in the forms the graph stores."""

    given: TaskOptions
    priority: int
    needs: tuple[tuple[str, float], ...]  # sorted (resource, amount) pairs
    policy: Policy | None


def check_task_options(
    name: Hashable, given: Mapping[str, object], caller: str
) -> CheckedOptions | None:
    """Check every option in ``given``; None when all are their defaults.

    Raises:
        TypeError: an unknown option (with the closest known one), or an option
            of the wrong type; the message names the task and the option.
        ValueError: an option of the right type with a value it cannot take.
    """
    unknown = [key for key in given if key not in _FIELDS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), sorted(_FIELDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TypeError(
            f"{caller}() got an unexpected keyword argument {safe_repr(key)} (task "
            f"{describe(name)}); {hint}the task options are {', '.join(TaskOptions._fields)}"
        )
    options = TaskOptions(**given)  # type: ignore[arg-type]
    try:
        unset = options == DEFAULTS
    except Exception:  # a hostile value's __eq__: its check below names it
        unset = False
    if unset:
        return None
    priority = check_priority(name, options.priority)
    needs = () if options.resources is None else check_resources(name, options.resources)
    policy = check_policy(
        name,
        options.retries,
        options.retry_delay,
        options.retry_on,
        options.timeout,
        options.run_if,
    )
    if options.checkpoint is not True:
        check_checkpoint_flag(name, options.checkpoint)
    if options.isolate is not None and not isinstance(options.isolate, str):
        raise TypeError(
            f"task {describe(name)}: isolate must be None (a worker thread) or 'process' "
            f"(a child process), got {safe_repr(options.isolate)}"
        )
    return CheckedOptions(options, priority, needs, policy)


def check_checkpoint_flag(name: Hashable, checkpoint: object) -> None:
    """Refuse a ``checkpoint=`` that is not a bool (a path belongs to ``run``)."""
    if not isinstance(checkpoint, bool):
        raise TypeError(
            f"task {describe(name)}: checkpoint must be True or False (whether a "
            f"checkpointed run stores this task's value), got {safe_repr(checkpoint)}; "
            "the checkpoint file is given to run(checkpoint=...)"
        )
