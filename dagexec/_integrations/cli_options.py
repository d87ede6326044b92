"""The run options of ``python -m dagexec`` that need more than argparse checks.

``--resources db=2,gpu=1``, ``--timeout SECONDS`` and ``--log-level LEVEL`` are
parsed here, each refusing bad input with a message that names the option and
shows a correct one; argparse turns those into exit status 2. The graph's own
resource needs are checked against ``--resources`` before anything runs, so a
missing or mistyped resource names the task, the resource and the option to add.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import math
from collections.abc import Mapping

from .._core.errors import describe
from .._core.plan import Plan

__all__ = [
    "LOG_LEVELS",
    "check_resources_given",
    "configure_logging",
    "log_level",
    "parse_resources",
    "seconds",
]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_EXAMPLE = "e.g. --resources db=2,gpu=1"


def parse_resources(text: str) -> dict[str, float]:
    """``db=2,gpu=1`` as ``{"db": 2, "gpu": 1}``; every capacity a finite number > 0."""
    capacities: dict[str, float] = {}
    for item in text.split(","):
        name, sep, amount = (part.strip() for part in item.partition("="))
        if not sep or not name or not amount:
            raise argparse.ArgumentTypeError(
                f"expected NAME=CAPACITY items separated by commas, got {item.strip()!r} "
                f"in {text!r}; {_EXAMPLE}"
            )
        try:
            value = float(amount)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"capacity of {name!r} must be a number, got {amount!r}; {_EXAMPLE}"
            ) from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(
                f"capacity of {name!r} must be a number > 0 (how much of it the tasks "
                f"running at once may hold), got {amount}; {_EXAMPLE}"
            )
        if name in capacities:
            raise argparse.ArgumentTypeError(f"{name!r} is given twice in {text!r}; give it once")
        capacities[name] = int(value) if value.is_integer() else value
    return capacities


def seconds(text: str) -> float:
    """A number of seconds > 0, for ``--timeout``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, got {text!r}; e.g. --timeout 600"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0, got {text}; leave it out for no limit"
        )
    return value


def log_level(text: str) -> str:
    """A logging level name, in any case."""
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(LOG_LEVELS)} (any case), got {text!r}"
        )
    return level


def configure_logging(level: str) -> None:
    """Show log records of ``level`` and above on stderr: dagexec's and the tasks' own."""
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def check_resources_given(plan: Plan, given: Mapping[str, float]) -> str | None:
    """What is wrong with ``--resources`` for this plan, or None.

    Only the names are checked here; a need above a capacity is the run's own
    error, which names the task and the amounts.
    """
    if plan.needs is None:
        return None
    for task, need in enumerate(plan.needs):
        for name, _ in need:
            if name in given:
                continue
            close = [g for g in given if g.lower() == name.lower()]
            close = close or difflib.get_close_matches(name, list(given), n=1)
            if close:
                return (
                    f"task {describe(plan.names[task])} needs resource {name!r}, which "
                    f"--resources does not give; did you mean {close[0]!r}? "
                    f"write --resources {name}=N"
                )
            example = ",".join([*(f"{k}={v:g}" for k, v in given.items()), f"{name}=N"])
            return (
                f"task {describe(plan.names[task])} needs resource {name!r}, which has no "
                f"capacity in this run; add --resources {example} (N: how much of "
                f"{name!r} the tasks running at once may hold)"
            )
    return None
