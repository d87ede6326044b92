"""``dagexec.testing.explore`` and ``replay_schedule``: run a graph under many
schedules and report the one that changes its result, smallest first.

The first run takes the plain order (what a run on one worker does): the
reference. Each later run lets a strategy (:mod:`dagexec._engine.run.strategies`)
choose every step (:mod:`dagexec._engine.run.explore_driver`) and is compared with
it (:mod:`dagexec._engine.front.divergence`). Tasks are black boxes: what makes two
schedules differ is a task reading what another writes (a file, a table, a
module global) without a declared dependency, and the failure names both.

Runs go on a private executor made per call: ``workers`` threads, each inbox one
deep, ``max_in_flight=workers``; its runs have no chains and no memory-aware
depth, and their driver and balancer are the exploring ones. Nothing of this
touches a plain run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..._core.graph import Graph
from ..._core.plan import Plan, check_resources, normalise_targets
from ..._core.result import RunResult
from ..._core.safe import add_note
from ..._state.resources import exact
from ..run.explore_driver import Chooser, Controller, take_control
from ..run.scheduler import Run
from ..run.strategies import (
    Exhaustive,
    Natural,
    Pairs,
    Pct,
    RandomOrder,
    Replay,
    count_schedules,
)
from .divergence import (
    Observed,
    describe_difference,
    describe_unstable,
    first_difference,
    inversions,
    shrink,
)
from .executor import Executor
from .run_checks import Job, RunOptions, check_capacity, prepare
from .schedule import Schedule, ScheduleDivergence
from .schedule_fit import check_fits

__all__ = ["Exploration", "explore", "replay_schedule"]

STRATEGIES = ("random", "pct", "exhaustive")

# Run options explore refuses, and why: each would make runs differ (or agree)
# for reasons that are not their order.
_REFUSED = {
    "checkpoint": "a checkpoint loads saved values instead of running tasks, which hides "
    "their order; explore runs without one",
}


@dataclass(frozen=True)
class Exploration:
    """What :func:`explore` ran when every schedule agreed.

    Attributes:
        runs: schedules run besides the plain order.
        distinct: how many of them differed from each other.
        uncovered: for ``strategy="exhaustive"``, schedules it did not reach
            (0 when it covered them all; exact for a graph without maps or
            retries when counting them is quick, else a lower bound; never
            negative); None otherwise.
        result: the plain order's ``RunResult`` (None if that run raised).
    """

    runs: int
    distinct: int
    uncovered: int | None
    result: RunResult | None


class _ExploringExecutor(Executor):
    """An executor whose runs a :class:`Controller` drives, one step at a time."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, queue_cap=1, max_in_flight=workers)
        self.control: Controller | None = None

    def __enter__(self) -> _ExploringExecutor:
        return self

    def _new_run(self, job: Any, plan: Plan, capacity: Mapping[str, float], context: Any) -> Run:
        if self.control is not None:
            plan = replace(plan, chain_next=(-1,) * len(plan.names))  # no chains
        run = super()._new_run(job, plan, capacity, context)
        if self.control is not None:
            take_control(run, self.control)
        return run


def _check_count(where: str, name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{where}: {name} must be >= {low}, got {value!r}")
    return value


def _check_callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(
            f"explore: {name} must be a function or None, got {type(value).__name__} {value!r}"
        )


def _run_options(where: str, options: dict[str, Any]) -> dict[str, Any]:
    """``Executor.run``'s options for each run; a conflicting or unknown one refused."""
    for name, why in _REFUSED.items():
        if name in options:
            raise ValueError(f"{where}: {name}= is refused: {why}")
    allowed = [f for f in RunOptions._fields if f not in _REFUSED]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"{where}() got unknown options {unknown}; it takes those of Executor.run: "
            f"{', '.join(allowed)}"
        )
    # Every task's state is compared, so a failure must not stop the run.
    return {"on_error": "continue", **options}


def _prepare(
    graph: Graph, targets: tuple[Hashable, ...] | None, options: dict[str, Any]
) -> tuple[Job, dict[str, float]]:
    """The engine's own checks of a run (graph, targets, every option, the
    resources its tasks need), made once before anything runs: a mistake is
    raised here, never compared as if a schedule had made it."""
    checked = RunOptions(**options)
    job = prepare(graph, targets, checked)
    capacity = check_capacity("resources", checked.resources)
    check_resources(job.plan, capacity)
    return job, capacity


def _one_run(
    ex: _ExploringExecutor,
    graph: Graph,
    targets: tuple[Hashable, ...] | None,
    chooser: Chooser,
    options: dict[str, Any],
    setup: Callable[[], object] | None,
    check: Callable[[RunResult], object] | None,
) -> Observed:
    """Run the graph once under ``chooser``'s schedule."""
    if setup is not None:
        setup()
    control = ex.control = Controller(chooser, ex.workers)
    result: RunResult | None = None
    raised: BaseException | None = None
    try:
        result = ex.run(graph, targets, **options)
    except Exception as exc:  # on_error="raise", timeout=: compared like a state
        raised = exc
    finally:
        ex.control = None
    failed: BaseException | None = None
    if result is not None and check is not None:
        try:
            verdict = check(result)
        except AssertionError as exc:
            failed = exc
        else:
            if verdict is False:
                failed = AssertionError("check(result) returned False")
    own = raised is not None and any(raised is e for e in control.errors.values())
    return Observed(
        Schedule(steps=tuple(control.steps)), control.values, result, raised, failed, own
    )


def _chooser(strategy: str, run_seed: int, length: int) -> Chooser:
    rng = random.Random(run_seed)
    if strategy == "pct":
        return Pct(rng, length)
    return RandomOrder(rng)


def explore(
    graph: Graph,
    targets: Iterable[Hashable] | None = None,
    *,
    runs: int = 100,
    seed: int = 0,
    strategy: str = "random",
    check: Callable[[RunResult], object] | None = None,
    equal: Callable[[Any, Any], object] | None = None,
    setup: Callable[[], object] | None = None,
    workers: int = 2,
    max_schedules: int | None = None,
    **run_options: Any,
) -> Exploration:
    """Run ``graph`` under the plain order and then ``runs`` schedules chosen by
    ``strategy``; raise :class:`ScheduleDivergence` at the first that disagrees.

    See docs/explore.md. Each run: ``setup()`` first, then the run (with
    ``run_options``, those of :meth:`Executor.run`; ``on_error`` defaults to
    ``"continue"``, so every task's state is compared), then ``check(result)``,
    which must not raise ``AssertionError`` or return False. Runs agree when
    every task ends in the same state (errors by type and message) with
    ``equal`` values (default ``==``, which must give a bool).

    Args:
        runs: schedules to try after the plain order (``"exhaustive"``: the most,
            unless ``max_schedules`` says otherwise).
        seed: run ``i`` uses seed ``seed + i``; a divergence's ``seed`` with
            ``runs=1`` runs its schedule first.
        strategy: ``"random"``, ``"pct"`` or ``"exhaustive"``.
        workers: threads; with two or more, schedules overlap tasks too.
        max_schedules: ``"exhaustive"`` only: the most schedules to walk.

    Returns:
        An :class:`Exploration` saying what ran.

    Raises:
        ScheduleDivergence: a schedule changed the result (an ``AssertionError``).
        AssertionError: ``check`` failed on the plain order itself.
        TypeError, ValueError: a parameter is wrong (named), or the graph, a
            target or a run option is one ``Executor.run`` would refuse; nothing
            has run.
        Exception: what the plain order's run raised, when it is not a task's
            own failure (a run ``timeout=``, a callback's error), or when it is
            and ``check`` cannot be called.
    """
    _check_explore_args(runs, seed, strategy, check, equal, setup, workers, max_schedules)
    options = _run_options("explore", run_options)
    wanted = None if targets is None else normalise_targets(targets)
    job, capacity = _prepare(graph, wanted, options)
    same: Callable[[Any, Any], object] = equal if equal is not None else _equals
    with _ExploringExecutor(workers) as ex:
        ref = _one_run(ex, graph, wanted, Natural(), options, setup, check)
        _reference_raised(ref, check)
        if ref.check_failed is not None:
            raise AssertionError(
                f"explore: check(result) failed on the plain order, before any other "
                f"schedule: {ref.check_failed}"
            ) from ref.check_failed
        length = len(ref.order)
        seen: set[str] = set()
        prefix: list[int] | None = []
        limit = max_schedules if max_schedules is not None else runs
        done, uncovered = 0, None
        walker: Exhaustive | None = None
        chooser: Chooser
        while done < limit:
            if strategy == "exhaustive":
                if prefix is None:
                    break
                chooser = walker = Exhaustive(prefix, overlap=workers > 1)
            else:
                chooser = _chooser(strategy, seed + done, length)
            obs = _one_run(ex, graph, wanted, chooser, options, setup, check)
            seen.add(str(obs.schedule))
            found = first_difference(ref, obs, same)
            if found is not None or obs.check_failed is not None:
                raise _divergence(
                    ex, graph, wanted, options, setup, check, same, ref, obs, seed + done, found
                )
            done += 1
            if walker is not None:
                prefix = walker.next_prefix()
                uncovered = 0 if prefix is None else walker.untaken() + 1
        if uncovered:  # stopped early: exactly how many, when the graph is static
            total = _static_count(job.plan, capacity, ref, workers > 1)
            if total is not None and total >= done:
                uncovered = total - done
    return Exploration(done, len(seen), uncovered, ref.result)


def _check_replayed(replay: Replay, obs: Observed, steps: int) -> None:
    """Refuse a replayed schedule the run drifted from, or did not reach the end of."""
    if obs.raised is None and replay.drift is None and replay.at < steps:
        replay.drift = f"the run ended after step {replay.at}; the schedule has {steps} steps"
    if replay.drift is not None:  # the run stopped there
        raise ValueError(f"replay_schedule: the schedule does not fit this graph: {replay.drift}")


def _check_explore_args(
    runs: int,
    seed: int,
    strategy: str,
    check: object,
    equal: object,
    setup: object,
    workers: int,
    max_schedules: int | None,
) -> None:
    """:func:`explore`'s own parameters checked, each named when refused."""
    _check_count("explore", "runs", runs)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"explore: seed must be an int, got {type(seed).__name__} {seed!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"explore: strategy must be one of {STRATEGIES}, got {strategy!r}")
    for name, fn in (("check", check), ("equal", equal), ("setup", setup)):
        _check_callable(name, fn)
    _check_count("explore", "workers", workers)
    if max_schedules is not None:
        if strategy != "exhaustive":
            raise ValueError(
                f"explore: max_schedules= bounds strategy='exhaustive' only; with "
                f"strategy={strategy!r} use runs="
            )
        _check_count("explore", "max_schedules", max_schedules)


def _reference_raised(ref: Observed, check: Callable[[RunResult], object] | None) -> None:
    """Raise what the plain order raised, unless it is a task's own failure (under
    ``on_error="raise"``) and there is no ``check`` to call: only that is a state
    the other schedules can be compared with. Anything else (a run timeout, a
    callback's error) says the run itself cannot go, whatever the order."""
    raised = ref.raised
    if raised is None or (ref.raised_by_task and check is None):
        return
    if ref.raised_by_task:
        add_note(
            raised,
            "explore: the plain order raised this task's exception (on_error='raise'), "
            "so check(result) could not be called; use on_error='continue' (the default) "
            "to check a result with failed tasks",
        )
    else:
        add_note(raised, "explore: raised by the run in the plain order, before any other")
    raise raised


def _static_count(
    plan: Plan, capacity: Mapping[str, float], ref: Observed, overlap: bool
) -> int | None:
    """All the exhaustive walk's paths, if every task ran once and none is a map's
    item, and counting them is quick (else None: the lower bound stands)."""
    index = plan.index
    if len(ref.order) != len(ref.schedule.order) or not all(n in index for n in ref.order):
        return None
    ran = set(ref.order)
    deps = {
        n: [plan.names[d] for d in plan.deps[index[n]] if plan.names[d] in ran] for n in ref.order
    }
    needs = plan.needs

    def together(a: Hashable, b: Hashable) -> bool:
        if needs is None:
            return True
        total: dict[str, Any] = {}
        for r, amount in (*needs[index[a]], *needs[index[b]]):
            total[r] = total.get(r, 0) + exact(amount)
        return all(amount <= exact(capacity.get(r, 0)) for r, amount in total.items())

    return count_schedules(deps, overlap, together)


def _equals(a: Any, b: Any) -> object:
    """``==``, except that two float NaNs are the same value (no order made them)."""
    if type(a) is float and type(b) is float and a != a and b != b:
        return True
    return a == b


def _divergence(
    ex: _ExploringExecutor,
    graph: Graph,
    targets: tuple[Hashable, ...] | None,
    options: dict[str, Any],
    setup: Callable[[], object] | None,
    check: Callable[[RunResult], object] | None,
    same: Callable[[Any, Any], object],
    ref: Observed,
    obs: Observed,
    run_seed: int,
    found: tuple[Hashable | None, str] | None,
) -> ScheduleDivergence:
    """The failure for ``obs``, with its schedule shrunk to the fewest pairs."""
    task, how = found if found is not None else (None, f"failed check(result): {obs.check_failed}")

    def diverges(pairs: Sequence[tuple[Hashable, Hashable]]) -> bool:
        again = _one_run(ex, graph, targets, Pairs(pairs), options, setup, check)
        return again.check_failed is not None or first_difference(ref, again, same) is not None

    if diverges(()):  # the plain order itself, run again, differs: no order is to blame
        shrunk, first = Schedule(pairs=()), describe_unstable(task, how)
        shown, replay = "(none: the plain order alone differs)", obs.schedule
    else:
        pairs = inversions(ref, obs)
        # The pairs of the task that differed first are usually the whole story: try them alone.
        own = [p for p in pairs if task in p]
        smallest = (shrink(own, diverges) if own and len(own) < len(pairs) else None) or shrink(
            pairs, diverges
        )
        shrunk = Schedule(pairs=tuple(smallest)) if smallest is not None else obs.schedule
        first = describe_difference(task, how, shrunk, obs, ref, graph.tasks)
        shown, replay = str(shrunk), shrunk
    message = (
        f"{first}\n"
        f"  schedule (seed {run_seed}): {obs.schedule}\n"
        f"  shrunk: {shown}\n"
        f"  replay: dagexec.testing.replay_schedule(graph, {str(replay)!r})\n"
        f"  plain order: {' '.join(map(str, ref.order))}\n"
        f"  this order:  {' '.join(map(str, obs.order))}"
    )
    error = ScheduleDivergence(
        message,
        seed=run_seed,
        schedule=obs.schedule,
        orders=(ref.order, obs.order),
        task=task,
        shrunk=shrunk,
    )
    if obs.check_failed is not None:
        error.__cause__ = obs.check_failed
    return error


def replay_schedule(graph: Graph, schedule: Schedule | str, **run_options: Any) -> RunResult:
    """Run ``graph`` once under exactly ``schedule`` (a :class:`Schedule` or its
    string): the same steps, workers and overlaps; as often as wanted.

    ``run_options`` are those of :meth:`Executor.run` (``on_error`` defaults to
    ``"continue"``), plus ``targets=`` and ``workers=`` (default: as many as the
    schedule names, at least 2).

    Raises:
        TypeError: ``schedule`` is neither; an option is unknown.
        ValueError: the string is not a schedule, or the schedule does not fit
            the graph: an unknown name, a step before its task's dependency, a
            pair against a declared dependency (all refused before anything
            runs), or a step whose tasks were not ready (the run stops there).
            Each names the step or pair.
    """
    if isinstance(schedule, str):
        schedule = Schedule.parse(schedule)
    elif not isinstance(schedule, Schedule):
        raise TypeError(
            f"replay_schedule: schedule must be a Schedule or its string, got "
            f"{type(schedule).__name__}"
        )
    targets = run_options.pop("targets", None)
    needed = max((w + 1 for step in schedule.steps for _, w in step), default=1)
    workers = _check_count("replay_schedule", "workers", run_options.pop("workers", max(2, needed)))
    if workers < needed:
        raise ValueError(
            f"replay_schedule: the schedule uses {needed} workers, got workers={workers}"
        )
    options = _run_options("replay_schedule", run_options)
    wanted = None if targets is None else normalise_targets(targets)
    job, _ = _prepare(graph, wanted, options)
    check_fits(schedule, job.plan)
    replay = Replay(schedule.steps) if schedule.pairs is None else None
    chooser: Chooser = replay if replay is not None else Pairs(schedule.pairs or ())
    with _ExploringExecutor(workers) as ex:
        obs = _one_run(ex, graph, wanted, chooser, options, None, None)
    if replay is not None:
        _check_replayed(replay, obs, len(schedule.steps))
    if obs.raised is not None:
        raise obs.raised
    assert obs.result is not None
    return obs.result
