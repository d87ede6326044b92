"""A run's parameters, checked before any thread starts or anything is queued.

Shared by :func:`dagexec.run`, :meth:`Executor.run` and :meth:`Executor.submit`,
so that all three accept and refuse the same things.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
from collections.abc import Hashable, Iterable, Mapping
from typing import Literal, NamedTuple

from ..._core.graph import Graph
from ..._core.hooks import Hooks, callback_list
from ..._core.options import check_checkpoint_path
from ..._core.plan import Plan

OnError = Literal["raise", "continue"]


class RunOptions(NamedTuple):
    """The options of one run, with their defaults: the one list of them.

    :func:`dagexec.run` and :meth:`Executor.run` take them as keyword
    parameters (a test checks their names and defaults against this record),
    :meth:`Executor.submit` as ``**run_options``, the command line builds one;
    all hand it to :func:`prepare`, which checks every field. A new run option
    is added here, to those two signatures and to :func:`prepare`.
    """

    on_error: OnError = "raise"
    callbacks: Iterable[object] = ()
    trace: bool = False
    progress: bool = False
    resources: Mapping[str, float] | None = None
    timeout: float | None = None
    checkpoint: str | os.PathLike[str] | None = None
    logs: bool | int | str = False


# Ints above this cannot become a float (10**400): refused as capacities, not
# left to overflow in the scheduler's sums mid-run.
_LARGEST_EXACT = int(sys.float_info.max)


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_on_error(on_error: object) -> OnError:
    if not isinstance(on_error, str):
        raise TypeError(
            f"on_error must be a str, 'raise' or 'continue', got {type(on_error).__name__} "
            f"{on_error!r}"
        )
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    return "raise" if on_error == "raise" else "continue"


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def check_capacity(name: str, resources: object) -> dict[str, float]:
    """Capacities as a fresh dict; each a number >= 0 (``math.inf``: unlimited)."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"{name} must be a mapping of resource name to capacity, like {{'gpu': 2}}; "
            f"got {type(resources).__name__} {resources!r}"
        )
    capacity: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str):
            raise TypeError(
                f"{name}: resource names must be strings, got {type(key).__name__} {key!r}"
            )
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise TypeError(
                f"{name}[{key!r}] must be a number (int or float) >= 0, math.inf for no "
                f"limit; got {type(amount).__name__} {amount!r}"
            )
        if isinstance(amount, int) and amount > _LARGEST_EXACT:
            raise ValueError(
                f"{name}[{key!r}] is an int of {len(str(amount))} digits, too large for "
                "the scheduler's sums (more than a float holds); write math.inf for no limit"
            )
        if math.isnan(amount) or amount < 0:
            raise ValueError(
                f"{name}[{key!r}] must be a number >= 0 (math.inf for no limit), got {amount!r}"
            )
        capacity[key] = amount
    return capacity


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds (int or float) > 0, or None for no "
            f"limit; got {type(timeout).__name__} {timeout!r}"
        )
    if isinstance(timeout, int) and timeout > _LARGEST_EXACT:
        timeout = math.inf  # longer than any run: no limit (float() would overflow)
    if math.isnan(timeout) or timeout <= 0:
        raise ValueError(
            f"timeout must be a number of seconds > 0 (None: no limit), got {timeout!r}"
        )
    # A timer cannot wait forever, nor longer than the platform allows (its thread
    # would die of OverflowError): beyond threading.TIMEOUT_MAX, no limit.
    return None if timeout > threading.TIMEOUT_MAX else float(timeout)


def check_logs(logs: object) -> tuple[int, str | None] | None:
    """``logs=``: None for False; else (the least level kept, the logger or None).

    True keeps INFO and up from every logger; a level (``logging.DEBUG``, or a
    level's name in any case, ``"WARNING"``, ``"debug"``) keeps that level and up;
    any other string names a logger, whose records and its children's are kept at
    INFO and up.
    """
    if logs is False:
        return None
    if logs is True:
        return logging.INFO, None
    if isinstance(logs, int) and not isinstance(logs, bool):
        if logs < 0:
            raise ValueError(f"logs= as a level must be >= 0 (logging.DEBUG is 10), got {logs}")
        return logs, None
    if isinstance(logs, str):
        if not logs:
            raise ValueError(
                "logs= must not be empty: True for every logger, a level such as "
                "'DEBUG', or a logger's name"
            )
        level = logging.getLevelNamesMapping().get(logs.upper())
        return (logging.INFO, logs) if level is None else (level, None)
    raise TypeError(
        "logs= must be True or False, a level (logging.DEBUG, 'WARNING') or a logger's "
        f"name (a str); got {type(logs).__name__} {logs!r}"
    )


# The hooks of a run without callbacks, the usual case: made once, not per run
# (binding nine empty hook lists is ~3 us, a few per cent of a small run's
# Python work). Never changed: a Hooks is only read.
_NO_HOOKS = Hooks(())
_NO_CALLBACKS: tuple[()] = ()  # the default, the one empty tuple: told apart by identity


# RunOptions' fields, in its order, as a plain tuple: what prepare() reads, so that
# Executor.run hands them over without making a RunOptions (a named tuple is made
# by a Python-level __new__: ~2,500 instructions more than a tuple, against one of
# ~400; cachegrind). A RunOptions is one of these.
Options = tuple[
    str,
    Iterable[object],
    bool,
    bool,
    Mapping[str, float] | None,
    float | None,
    str | os.PathLike[str] | None,
    bool | int | str,
]


class Job(NamedTuple):
    """A run's checked parameters: everything needed to queue it."""

    plan: Plan
    hooks: Hooks
    on_error: OnError
    trace: bool
    timeout: float | None
    checkpoint: str | None
    identities: list[bytes | None] | None
    logs: tuple[int, str | None] | None = None  # (level, logger name or None)


def prepare(graph: object, targets: Iterable[Hashable] | None, options: Options) -> Job:
    """Check a run's parameters and plan it; starts no thread, reads targets once.

    Shared by :func:`run`, :meth:`Executor.run` and :meth:`Executor.submit`, so
    that all accept and refuse the same things, before any thread starts or
    anything is queued. With a checkpoint, the tasks' identities are computed
    here too (a constant argument that cannot be pickled is refused now).
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a dagexec.Graph, got {type(graph).__name__}")
    # Each check is called only where it may refuse: the values that pass as they
    # are (the defaults, the usual case) are told apart by identity and exact type,
    # which no look-alike passes (``trace=0`` equals False but is not it).
    on_error, callbacks, trace, progress, _, timeout, checkpoint, logs_option = options
    logs = None
    if type(on_error) is not str or (on_error != "raise" and on_error != "continue"):
        on_error = _check_on_error(on_error)
    if trace is not False and trace is not True:
        trace = _check_flag("trace", trace)
    if timeout is not None:
        timeout = _check_timeout(timeout)
    if logs_option is not False:
        logs = check_logs(logs_option)
    path = None if checkpoint is None else check_checkpoint_path(checkpoint)
    hooks = _NO_HOOKS
    if callbacks is not _NO_CALLBACKS or progress is not False:
        callback_objects = callback_list(callbacks)
        if _check_flag("progress", progress):
            from ..._observation.progress import ProgressBar

            callback_objects.append(ProgressBar())
        if callback_objects:
            hooks = Hooks(callback_objects)
    plan = graph._plan(targets)
    identities = None
    if path is not None:
        from ..._persist.resume import checkpoint_identities

        identities = checkpoint_identities(graph, plan)
    # tuple.__new__, not Job(): a named tuple's own __new__ is Python code
    # (~1,400 instructions more a run; cachegrind).
    return tuple.__new__(Job, (plan, hooks, on_error, trace, timeout, path, identities, logs))
