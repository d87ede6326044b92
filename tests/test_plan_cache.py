"""The plan cache is shared by threads that run one graph at once."""

from __future__ import annotations

import sys
import threading

from dagexec import Graph

# --- the plan cache, shared by threads running one graph ----------------------


def test_plan_cache_survives_many_threads_planning_one_graph() -> None:
    """Sixteen threads plan 400 target sets of one graph (far more than the cache
    holds, so nearly every call builds, inserts and evicts), with the interpreter
    switching threads as often as it can. Unlocked, this raised a bare KeyError
    (two threads evicting the same oldest plan) in every run we tried."""
    from dagexec._core.plan import _PLAN_CACHE_SIZE, plan_run

    g = Graph()
    for i in range(40):
        g.add(i, lambda: 0)
    compiled = g._compile()
    target_sets = [[i, j] for i in range(40) for j in range(40) if i != j][:400]
    assert len(target_sets) > 10 * _PLAN_CACHE_SIZE
    n_threads = 16
    start = threading.Barrier(n_threads, timeout=10)
    errors: list[BaseException] = []

    def plan_many(offset: int) -> None:
        try:
            start.wait()
            for k in range(2000):
                targets = target_sets[(k * 7 + offset * 13) % len(target_sets)]
                plan = plan_run(compiled, targets)
                assert [plan.names[t] for t in plan.targets] == targets
        except BaseException as exc:
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=plan_many, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert len(compiled.plans) <= _PLAN_CACHE_SIZE


# --- a warm graph's whole plan, read without plan_run ---------------------------


def test_graph_plan_is_plan_runs_plan_cold_warm_and_after_a_change() -> None:
    from dagexec._core.plan import plan_run

    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a, deps=["a"])
    cold = g._plan(None)  # compiles, plans, caches
    assert cold is plan_run(g._compile(), None)
    assert g._plan(None) is cold  # warm: the cached plan itself
    assert g._plan(["a"]) is plan_run(g._compile(), ["a"])  # targets: plan_run's path
    g.add("c", lambda b: b, deps=["b"])  # a change drops the compiled graph...
    fresh = g._plan(None)
    assert fresh is not cold and fresh.target_names == ("c",)  # ...and its plans
    assert fresh is plan_run(g._compile(), None)
