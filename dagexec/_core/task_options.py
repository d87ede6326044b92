"""A task's options (everything but its name, function, deps and constants), as one record.

``Graph.add``, ``Graph.map`` and ``@g.task`` take the same options and pass them
on as one dict: :class:`TaskOptions` lists them once, with their defaults, and
:func:`check_task_options` checks them all. ``Graph.add``'s fast path is keyed
on "no option given", so it cannot miss one added later.

Checked, a task's options become one :class:`TaskRecord`, carried whole from
the graph (``Graph._options``, sparse) through the compiled graph and the plan
(``options``: a record per task, :data:`PLAIN` for a task given none, or None
when no task has one) to the run and its map items (an item shares its map's
record). Tasks given equal options added one after another share one record.

To add an option: one field in :class:`TaskOptions` (its default meaning "not
set"), the same name in :class:`TaskOptionArgs` (what type checkers show the
caller; a test keeps the two equal), its checked form in :class:`TaskRecord`
and its check in :func:`check_task_options`: all in this file. The code that
implements it reads ``options[task].<field>`` from the plan or the run. Only an
option the per-task hot path reads (priority, resources, the policy) also has a
flat column of its own, derived from the records by
:func:`dagexec._core.plan.option_columns`; tests/test_task_records.py bounds
how many files name an option.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Mapping
from typing import NamedTuple, TypedDict

from .errors import describe
from .options import check_resources, safe_repr
from .policy import Policy, check_policy

__all__ = [
    "DEFAULTS",
    "PLAIN",
    "TaskOptionArgs",
    "TaskOptions",
    "TaskRecord",
    "check_checkpoint_flag",
    "check_task_options",
    "shared",
    "without_run_options",
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


class TaskRecord(NamedTuple):
    """A task's options, checked, in the forms the graph, the plan and the run read.

    Immutable, so tasks with equal options may share one; a field at its default
    here is an option not set (see :data:`PLAIN`).
    """

    priority: int = 0
    needs: tuple[tuple[str, float], ...] = ()  # sorted (resource, amount) pairs
    policy: Policy | None = None  # retries, timeout, run_if, isolate
    checkpoint: bool = True  # False: a checkpointed run never stores its value


PLAIN = TaskRecord()
"""The record of a task given no option (one object, shared by every such task)."""


def check_task_options(
    name: Hashable, given: Mapping[str, object], caller: str
) -> TaskRecord | None:
    """Check every option in ``given``: their record, or None when all are their defaults.

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
    if options.isolate is not None:
        if not isinstance(options.isolate, str):
            raise TypeError(
                f"task {describe(name)}: isolate must be None (a worker thread) or "
                f"'process' (a child process), got {safe_repr(options.isolate)}"
            )
        # Checked against the function by Graph.add (new_task.isolated_call).
        policy = (policy or Policy())._replace(isolate=options.isolate)
    return TaskRecord(priority, needs, policy, options.checkpoint)


def shared(record: TaskRecord, last: TaskRecord | None) -> TaskRecord:
    """``last`` if it equals ``record`` (so tasks added one after another with the
    same options share one record), else ``record``."""
    try:
        same = record == last
    except Exception:  # a hostile retry_on's __eq__: keep its own record
        return record
    return last if same and last is not None else record


def without_run_options(record: TaskRecord) -> TaskRecord:
    """``record`` for a task loaded from a checkpoint: it is not run again, so it
    holds no resource and has no policy left; it keeps its rank."""
    if not record.needs and record.policy is None:
        return record
    return record._replace(needs=(), policy=None)


def check_priority(name: Hashable, priority: object) -> int:
    """The ``priority=`` option: an int (not a bool); higher runs first."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(
            f"task {describe(name)}: priority must be an int, got "
            f"{type(priority).__name__} {safe_repr(priority)}"
        )
    return priority


def check_checkpoint_flag(name: Hashable, checkpoint: object) -> None:
    """Refuse a ``checkpoint=`` that is not a bool (a path belongs to ``run``)."""
    if not isinstance(checkpoint, bool):
        raise TypeError(
            f"task {describe(name)}: checkpoint must be True or False (whether a "
            f"checkpointed run stores this task's value), got {safe_repr(checkpoint)}; "
            "the checkpoint file is given to run(checkpoint=...)"
        )
