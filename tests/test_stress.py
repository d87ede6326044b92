"""Stress: the property tests and randomized concurrent runs, many times over.

By default one short round runs (20 examples: a smoke test, so the plain test
command skips nothing); ``DAGEXEC_STRESS=N`` runs N full rounds of 100 examples,
each its own test (so each has its own timeout). CI sets it on the free-threaded
build, where the threads really run at once, and on the GIL build. Every round
runs with ``sys.setswitchinterval(1e-6)`` on a GIL build, so threads are swapped
every few bytecodes and interleavings the default 5 ms interval almost never
produces happen all the time.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Hashable

import pytest
import test_properties as props
from hypothesis import HealthCheck, given, settings
from switching import fast_switching

import dagexec
from dagexec import TaskState
from dagexec.testing import ConcurrencyProbe, InFlightRecorder, assert_within_bounds

ROUNDS = int(os.environ.get("DAGEXEC_STRESS") or 0)
# Without DAGEXEC_STRESS: one short round (a few seconds), not a skip.
EXAMPLES_PER_ROUND = 100 if ROUNDS >= 1 else 20

# The property test's body, drawn afresh each round (no example database, so
# every round explores new graphs instead of replaying the last round's).
_property = settings(
    max_examples=EXAMPLES_PER_ROUND,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)(
    given(props.cases())(
        props.test_random_dags_respect_order_targets_values_and_bounds.hypothesis.inner_test
    )
)


@pytest.mark.parametrize("round_", range(max(ROUNDS, 1)))
def test_property_tests_hold_under_contention(round_: int) -> None:
    with fast_switching():
        _property()


def _random_graph(
    rng: random.Random, probe: ConcurrencyProbe
) -> tuple[dagexec.Graph, dict[Hashable, int]]:
    """A random DAG whose values are sums of their deps plus one; and those values."""
    n = rng.randint(1, 120)
    g = dagexec.Graph()
    expected: dict[Hashable, int] = {}
    for i in range(n):
        deps = rng.sample(range(i), min(i, rng.randint(0, 3)))
        g.add(i, probe.wrap(lambda *xs: sum(xs) + 1), deps=deps)
        expected[i] = sum(expected[d] for d in deps) + 1
    return g, expected


@pytest.mark.parametrize("round_", range(max(ROUNDS, 1)))
def test_concurrent_random_runs_with_every_feature_on(round_: int) -> None:
    # Three threads at once: two share one executor (their runs are serialised),
    # one runs its own; callbacks, trace and random bounds on every run.
    rng = random.Random(round_)
    shared = dagexec.Executor(workers=rng.randint(1, 4), queue_cap=rng.randint(1, 3))
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(3)

    def runner(seed: int, own: bool) -> None:
        local = random.Random(seed)
        barrier.wait()
        try:
            for _ in range(40):
                probe = ConcurrencyProbe()
                g, expected = _random_graph(local, probe)
                recorder = InFlightRecorder()
                targets = local.sample(sorted(expected), local.randint(1, min(3, len(expected))))
                if own:
                    result = dagexec.run(
                        g,
                        targets,
                        workers=local.randint(1, 4),
                        queue_cap=local.randint(1, 4),
                        max_in_flight=local.randint(1, 8),
                        callbacks=[recorder],
                        trace=True,
                    )
                else:
                    result = shared.run(g, targets, callbacks=[recorder], trace=True)
                assert dict(result) == {t: expected[t] for t in targets}
                assert all(s is TaskState.DONE for s in result.status.values())
                assert len(result.trace) == result.stats.tasks_run == probe.entered
                assert recorder.in_flight == 0
                assert_within_bounds(result)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=runner, args=(round_ * 3 + k, k == 2)) for k in range(3)]
    with fast_switching():
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            shared.shutdown()
    assert errors == []
