"""Graph drawings as text: Graphviz DOT and Mermaid flowcharts.

Both draw exactly what a run would plan (the whole graph, or the part that
``targets`` needs) by asking the core planner, so a drawing never disagrees with
a run. Node ids are ``n0, n1, ...`` in plan order rather than the task names:
names are arbitrary hashables, and no escaping scheme makes every ``repr`` a
safe identifier in both languages. The name goes into the escaped label only.
Output is deterministic (insertion order), so it can be diffed and tested.

What a task does at run time is drawn too, since a picture that shows a map
like any task hides the step that becomes six hundred tasks: a map gets a shape
of its own (DOT ``box3d``, Mermaid's subroutine box) and a ``map over X`` line,
edges into a cleanup task (``run_if="all_done"``: it runs even when they fail)
are dashed, and retries, a timeout and resources are lines of the task's label.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from .._core.plan import Plan, plan_run
from .._core.result import TaskState, TraceRecord

if TYPE_CHECKING:
    from .._core.graph import Graph

__all__ = [
    "STATE_FILL",
    "STATE_MEANING",
    "attempt_label",
    "display_name",
    "to_dot",
    "to_mermaid",
]

# Light fills keep black label text readable; the same hues as the Gantt chart.
STATE_FILL: dict[TaskState, str] = {
    TaskState.DONE: "#c8e6c9",
    TaskState.FAILED: "#ffcdd2",
    TaskState.SKIPPED: "#fff3c4",
    TaskState.CANCELLED: "#e0e0e0",
}


# What each fill means, for the legend drawn with a result.
STATE_MEANING: dict[TaskState, str] = {
    TaskState.DONE: "done",
    TaskState.FAILED: "failed",
    TaskState.SKIPPED: "skipped: an upstream task failed",
    TaskState.CANCELLED: "cancelled: never started, the run stopped",
}
_TARGET_MEANING = "thick border: a target"


def display_name(name: Hashable) -> str:
    """A task name as a person reads it: strings bare, anything else as its ``repr``.

    ``repr`` for non-strings keeps the task ``1`` apart from the task ``'1'``.
    """
    return name if isinstance(name, str) else repr(name)


def attempt_label(rec: TraceRecord) -> str:
    """A trace record's name, with its attempt and how it ended when that is news:
    ``load (attempt 2)``, ``fetch (attempt 1, timed out)``."""
    name = display_name(rec.name)
    notes = []
    if rec.attempt > 1 or rec.outcome in _ATTEMPT_OUTCOMES:
        notes.append(f"attempt {rec.attempt}")
    if rec.outcome in _ATTEMPT_OUTCOMES:
        notes.append(rec.outcome)
    return f"{name} ({', '.join(notes)})" if notes else name


# Outcomes of one attempt that its task's final state does not tell.
_ATTEMPT_OUTCOMES = ("retried", "timed out", "abandoned")


def _plan_and_states(
    graph: Graph, targets: Iterable[Hashable] | None, result: Any
) -> tuple[Plan, list[TaskState | None]]:
    plan = plan_run(graph._compile(), targets)
    states: list[TaskState | None] = [None] * len(plan.names)
    if result is not None:
        status = result.status
        for i, name in enumerate(plan.names):
            states[i] = status.get(name)
    return plan, states


def _edges(plan: Plan) -> list[tuple[int, int]]:
    """Data-flow edges (dependency -> task), each once, in plan order."""
    edges: list[tuple[int, int]] = []
    for task, deps in enumerate(plan.deps):
        for dep in dict.fromkeys(deps):
            edges.append((dep, task))
    return edges


def _notes(plan: Plan, task: int) -> list[str]:
    """The label's lines under the name: what the task does beyond being called once."""
    notes = []
    if plan.maps is not None and task in plan.maps:
        notes.append(f"map over {display_name(plan.names[plan.deps[task][0]])}")
    policy = plan.policy[task] if plan.policy is not None else None
    if policy is not None:
        if policy.cleanup:
            notes.append("cleanup: run_if=all_done")
        if policy.retries:
            notes.append(f"retries={policy.retries}")
        if policy.timeout is not None:
            notes.append(f"timeout={policy.timeout:g} s")
    need = plan.needs[task] if plan.needs is not None else ()
    if need:
        notes.append("resources: " + ", ".join(f"{r}={amount:g}" for r, amount in need))
    return notes


def _is_map(plan: Plan, task: int) -> bool:
    return plan.maps is not None and task in plan.maps


def _is_cleanup(plan: Plan, task: int) -> bool:
    policy = plan.policy[task] if plan.policy is not None else None
    return policy is not None and policy.cleanup


def _dot_string(text: str) -> str:
    # Inside a DOT quoted string only `"` needs escaping, but labels interpret
    # backslash sequences (\n, \l, \N), so a literal backslash is doubled too.
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n") + '"'


def to_dot(graph: Graph, targets: Iterable[Hashable] | None = None, result: Any = None) -> str:
    """Graphviz DOT text; targets get a thick border, states (with a result) a fill.

    Raises what planning raises: ``CycleError``, ``MissingDependencyError``,
    ``UnknownTargetError``.
    """
    plan, states = _plan_and_states(graph, targets, result)
    is_target = set(plan.targets)
    lines = [
        "digraph dagexec {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];',
    ]
    for i, name in enumerate(plan.names):
        label = "\n".join([display_name(name), *_notes(plan, i)])
        attrs = [f"label={_dot_string(label)}"]
        if _is_map(plan, i):
            attrs.append("shape=box3d")
        state = states[i]
        if state is not None:
            attrs.append(f'fillcolor="{STATE_FILL[state]}"')
            attrs.append(f'tooltip="{state.value}"')
        if i in is_target:
            attrs.append("penwidth=2")
        lines.append(f"  n{i} [{', '.join(attrs)}];")
    for dep, task in _edges(plan):
        dashed = " [style=dashed]" if _is_cleanup(plan, task) else ""
        lines.append(f"  n{dep} -> n{task}{dashed};")
    if result is not None:
        # A legend, so a picture shared without this text still says what the fills
        # mean; its ids cannot clash with the tasks' n0, n1, ...
        lines.append('  subgraph cluster_legend { label="legend"; fontname="Helvetica";')
        previous = None
        for state, meaning in STATE_MEANING.items():
            node = f"legend_{state.value}"
            lines.append(
                f'    {node} [label={_dot_string(meaning)}, fillcolor="{STATE_FILL[state]}"];'
            )
            if previous is not None:  # invisible edges keep the legend in one column
                lines.append(f"    {previous} -> {node} [style=invis];")
            previous = node
        lines.append(f"    legend_target [label={_dot_string(_TARGET_MEANING)}, penwidth=2];")
        lines.append(f"    {previous} -> legend_target [style=invis];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# Characters Mermaid would read as syntax inside a quoted label; its escape is
# an HTML-like decimal entity written with '#' instead of '&'.
_MERMAID_SPECIAL = frozenset('"#&<>`')


def _mermaid_string(text: str, *more: str) -> str:
    """A quoted Mermaid label; ``more`` are extra lines under the first."""
    parts = []
    for line in (text, *more):
        out = []
        for ch in line:
            if ch in _MERMAID_SPECIAL:
                out.append(f"#{ord(ch)};")
            elif ch in "\r\n":
                out.append(" ")
            else:
                out.append(ch)
        parts.append("".join(out))
    return '"' + "<br/>".join(parts) + '"'


def to_mermaid(graph: Graph, targets: Iterable[Hashable] | None = None, result: Any = None) -> str:
    """Mermaid flowchart text; targets get a thick border, states (with a result) a class.

    Raises what planning raises, like :func:`to_dot`.
    """
    plan, states = _plan_and_states(graph, targets, result)
    lines = ["flowchart LR"]
    for i, name in enumerate(plan.names):
        label = _mermaid_string(display_name(name), *_notes(plan, i))
        # A map is a subroutine box: one step that becomes a task per item.
        lines.append(f"  n{i}[[{label}]]" if _is_map(plan, i) else f"  n{i}[{label}]")
    for dep, task in _edges(plan):
        arrow = "-.->" if _is_cleanup(plan, task) else "-->"
        lines.append(f"  n{dep} {arrow} n{task}")
    if result is not None:
        lines.append("  subgraph legend [legend]")
        for state, meaning in STATE_MEANING.items():
            lines.append(f"    legend_{state.value}[{_mermaid_string(meaning)}]")
        lines.append(f"    legend_target[{_mermaid_string(_TARGET_MEANING)}]")
        lines.append("  end")
        for state, fill in STATE_FILL.items():
            members = [f"n{i}" for i, s in enumerate(states) if s is state]
            members.append(f"legend_{state.value}")
            lines.append(f"  classDef {state.value} fill:{fill}")
            lines.append(f"  class {','.join(members)} {state.value}")
    if plan.targets or result is not None:
        lines.append("  classDef target stroke-width:3px")
        members = [f"n{t}" for t in sorted(plan.targets)]
        if result is not None:
            members.append("legend_target")
        lines.append(f"  class {','.join(members)} target")
    return "\n".join(lines) + "\n"
