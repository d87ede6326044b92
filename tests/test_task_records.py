"""A task's options as one record, carried whole from the graph to the run's map items."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import dagexec
from dagexec._core.plan import plan_run
from dagexec._core.task_options import PLAIN, TaskRecord
from dagexec._state.runstate import RunState

PACKAGE = Path(dagexec.__file__).parent

# Files that name ``priority`` for another reason than carrying the task option:
# the dask integration reads dask's own ``priority`` annotation (and writes the
# option back as one), and the explore strategies rank tasks by a random number
# of their own.
_OTHER_PRIORITIES = {
    "_engine/run/strategies.py",
    "_integrations/dask_graph.py",
    "_integrations/dask_local.py",
    "_integrations/dask_settings.py",
    "_integrations/dask_translate.py",
}


def files_naming(word: str) -> set[str]:
    """The package's modules whose code names ``word``: as a name or attribute, or
    as a string literal that is exactly ``word``. Comments and docstrings (other
    string literals) do not count: they explain an option, they do not carry it."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        for token in tokens:
            if (token.type == tokenize.NAME and token.string == word) or (
                token.type == tokenize.STRING and token.string.strip("'\"") == word
            ):
                found.add(path.relative_to(PACKAGE).as_posix())
                break
    return found


def test_an_option_the_run_decides_on_is_carried_in_at_most_four_files() -> None:
    """Counting rule: :func:`files_naming` ("priority") over ``dagexec/``, less the
    files in ``_OTHER_PRIORITIES`` (a ``priority`` that is not the task option).
    Before the record (b08fcc9) it named 12 files, 7 of them the option's own
    (graph, options, validate, plan, task_options, _state/columns, runstate: a
    side table, a compiled-graph field, a plan field, a run column, a copy per map
    item); with the record, 3: its field and check (task_options), its flat
    column and chain rule (plan), and the order it sets (runstate)."""
    carriers = files_naming("priority") - _OTHER_PRIORITIES
    assert len(carriers) <= 4, sorted(carriers)


def test_the_counting_rule_sees_code_and_not_prose(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""priority in a docstring"""\n# priority in a comment\nx = 1\n')
    tokens = list(tokenize.generate_tokens(io.StringIO(module.read_text()).readline))
    assert not any(t.type == tokenize.NAME and t.string == "priority" for t in tokens)
    assert "_core/task_options.py" in files_naming("priority")
    assert "_core/graph.py" not in files_naming("priority")


def test_tasks_given_the_same_options_share_one_record() -> None:
    g = dagexec.Graph()
    for i in range(100):
        g.add(i, int, priority=2, resources={"db": 1})
    g.add("other", int, priority=3)
    records = [g._options[i] for i in range(100)]
    assert all(r is records[0] for r in records)
    assert records[0] == TaskRecord(priority=2, needs=(("db", 1),))
    assert g._options[100] is not records[0] and g._options[100].priority == 3


def test_the_compiled_graph_and_the_plan_carry_the_records_whole() -> None:
    g = dagexec.Graph()
    g.add("a", int)
    g.add("b", int, deps=["a"], retries=2, priority=1)
    g.add("c", int, deps=["b"])
    compiled = g._compile()
    assert compiled.options == (PLAIN, g._options[1], PLAIN)
    assert compiled.options[0] is PLAIN and compiled.options[1] is g._options[1]
    plan = plan_run(compiled, None)
    assert plan.options is compiled.options
    assert plan.priority == (0, 1, 0) and plan.needs is None
    assert plan.policy is not None and plan.policy[1] is g._options[1].policy
    # A plan of tasks given no option carries none: the run pays nothing.
    assert plan_run(compiled, ["a"]).options is None


def test_a_graph_without_options_carries_no_record() -> None:
    g = dagexec.Graph()
    g.add("a", int)
    g.add("b", int, deps=["a"])
    assert g._options == {}
    assert g._compile().options is None


def test_map_items_carry_their_maps_record_in_every_option_column() -> None:
    g = dagexec.Graph()
    g.add("xs", lambda: [1, 2, 3])
    g.map("m", abs, over="xs", priority=4, resources={"db": 1}, retries=1)
    plan = plan_run(g._compile(), None)
    state = RunState(plan, capacity={"db": 1})
    m = plan.index["m"]
    state.add_items(m, [1, 2, 3], None, True)
    for attr in RunState.OPTION_COLUMNS:
        column = getattr(state, attr)
        assert column is not None, attr
        assert len(column) == len(plan) + 3, attr
        assert all(column[t] is column[m] for t in range(len(plan), len(plan) + 3)), attr
    assert state.options is not None and state.options[-1] is g._options[m]


def test_a_loaded_task_keeps_its_rank_but_holds_nothing() -> None:
    from dagexec._core.plan import restrict_plan

    g = dagexec.Graph()
    g.add("a", int, priority=5, resources={"db": 1}, retries=1)
    g.add("b", int, deps=["a"], resources={"db": 1})
    plan = plan_run(g._compile(), None)
    resumed = restrict_plan(plan, {1}, {0: 7}, lambda _i, fn: fn)
    assert resumed.options is not None
    assert resumed.options[0] == TaskRecord(priority=5)
    assert resumed.needs == ((), (("db", 1),))
    assert resumed.policy is None


def test_an_option_dict_changed_after_add_does_not_reach_the_shared_record() -> None:
    g = dagexec.Graph()
    need = {"db": 1}
    g.add("a", int, resources=need)
    need["db"] = 2
    g.add("b", int, resources=need)
    assert g._options[0].needs == (("db", 1),)
    assert g._options[1].needs == (("db", 2),)
