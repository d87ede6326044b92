"""``prepare`` calls a run option's check only where the value could fail it.

The defaults (and the other values that pass as they are) are told apart by
identity and exact type, so a run with default options calls no check at all
(tests/test_run_ceremony.py counts them). This compares that path with the
general one, without threads: the same job for equal options given as other
objects, and every look-alike of a default still checked (refused, or made
the canonical value) as before.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from dagexec import Graph
from dagexec._engine.front.run_checks import RunOptions, prepare


def _graph() -> Graph:
    g = Graph()
    g.add("a", lambda: 1)
    return g


def _job_fields(**options: Any) -> tuple[Any, ...]:
    job = prepare(_graph(), None, RunOptions(**options))
    return (job.on_error, job.trace, job.timeout, job.checkpoint, job.logs, job.hooks.any)


def test_the_defaults_make_the_job_that_equal_values_given_as_other_objects_make() -> None:
    default = _job_fields()
    assert default == ("raise", False, None, None, None, False)
    # The general path: each value a different object (or type) from the default.
    assert _job_fields(on_error="".join(["ra", "ise"]), callbacks=[], logs=False) == default
    assert _job_fields(callbacks=iter(()), progress=False) == default
    assert _job_fields(timeout=math.inf) == default  # no limit, as None
    assert _job_fields(on_error="continue", trace=True)[:2] == ("continue", True)


class _Raise(str):
    """A str subclass equal to "raise": passes the check, made the plain str."""


def test_a_look_alike_of_a_default_is_still_checked() -> None:
    job = prepare(_graph(), None, RunOptions(on_error=_Raise("raise")))  # type: ignore[arg-type]
    assert type(job.on_error) is str and job.on_error == "raise"
    with pytest.raises(TypeError, match="trace must be True or False"):
        prepare(_graph(), None, RunOptions(trace=0))  # equals False, is not it
    with pytest.raises(TypeError, match="progress must be True or False"):
        prepare(_graph(), None, RunOptions(progress=0))
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'continue'"):
        prepare(_graph(), None, RunOptions(on_error="Raise"))
    with pytest.raises(TypeError, match="callbacks"):
        prepare(_graph(), None, RunOptions(callbacks=[object()]))
    with pytest.raises(TypeError, match="logs="):
        prepare(_graph(), None, RunOptions(logs=1.5))
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        prepare(_graph(), None, RunOptions(checkpoint=3))
    with pytest.raises(ValueError, match="timeout must be"):
        prepare(_graph(), None, RunOptions(timeout=0))
