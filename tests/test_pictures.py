"""Chrome trace JSON, Gantt SVG, and DOT/Mermaid drawings."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Hashable
from pathlib import Path

import pytest

import dagexec
from dagexec import Graph, RunResult, RunStats, TaskState, TraceRecord
from dagexec._observation.gantt import MAX_BARS, gantt_svg

SVG = "{http://www.w3.org/2000/svg}"


def _classes(el: ET.Element) -> list[str]:
    return el.get("class", "").split()


def _diamond() -> Graph:
    """
    a --> b --> d
    a --> c --> d
    """
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    g.add("c", lambda a: a * 2, deps=["a"])
    g.add("d", lambda b, c: b + c, deps=["b", "c"])
    return g


def _synthetic(records: list[TraceRecord], workers: int, wall: float) -> RunResult:
    status: dict[Hashable, TaskState] = {r.name: r.state for r in records}
    stats = RunStats(
        tasks_planned=len(records),
        tasks_run=len(records),
        wall_seconds=wall,
        workers=workers,
        queue_cap=2,
        max_in_flight=2 * workers,
        effective_cap=2 * workers,
        peak_in_flight=workers,
        peak_queue_depth=(1,) * workers,
        tasks_per_worker=(len(records) // workers,) * workers,
    )
    return RunResult({}, status, {}, stats, tuple(records))


# ---------------------------------------------------------------- chrome trace
def test_chrome_trace_loads_and_has_one_slice_per_task(
    tmp_path: Path, failing_graph: Graph
) -> None:
    result = dagexec.run(failing_graph, workers=2, on_error="continue", trace=True)
    path = tmp_path / "trace.json"
    result.trace_to_chrome(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert sorted(e["name"] for e in slices) == ["a", "bad", "ok"]
    by_name = {r.name: r for r in result.trace}
    for e in slices:
        for field in ("name", "ph", "ts", "dur", "pid", "tid", "args"):
            assert field in e
        rec = by_name[e["name"]]
        assert e["tid"] == rec.worker
        assert e["ts"] == pytest.approx(rec.started * 1e6, abs=0.01)
        assert e["dur"] == pytest.approx((rec.ended - rec.started) * 1e6, abs=0.01)
        assert e["args"]["state"] == rec.state.value
        assert e["args"]["dispatched_ms"] == pytest.approx(rec.dispatched * 1e3, abs=1e-5)
    assert {e["name"]: e["args"]["state"] for e in slices}["bad"] == "failed"
    thread_names = {
        e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert thread_names == {0: "worker 0", 1: "worker 1"}
    counters = [e["args"]["tasks"] for e in events if e["ph"] == "C"]
    assert counters[-1] == 0
    assert 1 <= max(counters) <= result.stats.effective_cap


def test_chrome_trace_refuses_untraced_result(tmp_path: Path) -> None:
    result = dagexec.run(_diamond(), workers=2)
    with pytest.raises(ValueError, match="trace=True"):
        result.trace_to_chrome(tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_chrome_trace_names_are_strings(tmp_path: Path) -> None:
    g = Graph()
    g.add(("part", 1), lambda: 1)
    g.add(7, lambda: 2)
    result = dagexec.run(g, workers=1, trace=True)
    result.trace_to_chrome(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert names == {"('part', 1)", "7"}


# ----------------------------------------------------------------------- gantt
def test_gantt_has_one_bar_per_task_with_hover_names(tmp_path: Path, failing_graph: Graph) -> None:
    g = failing_graph
    g.add('<odd & "name">', lambda: 0)
    result = dagexec.run(g, workers=2, on_error="continue", trace=True)
    path = tmp_path / "gantt.svg"
    result.gantt_svg(path)
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    bars = [el for el in root.iter(f"{SVG}rect") if "task" in _classes(el)]
    assert len(bars) == len(result.trace) == 4
    assert sorted(_classes(b)[1] for b in bars) == ["done", "done", "done", "failed"]
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    for name in ("a", "bad", "ok", '<odd & "name">'):
        assert any(t.startswith(f"{name}: ") for t in titles), name
    # one lane per worker, labelled
    assert len([el for el in root.iter(f"{SVG}rect") if "lane" in _classes(el)]) == 2
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "worker 0" in texts
    assert "worker 1" in texts
    assert any(t and t.startswith("time (") for t in texts)


def test_gantt_bars_sit_in_their_worker_lane_in_time_order() -> None:
    records = [
        TraceRecord("first", 0, TaskState.DONE, 0.0, 0.0, 0.0, 0.4),
        TraceRecord("second", 1, TaskState.DONE, 0.0, 0.0, 0.5, 1.0),
    ]
    root = ET.fromstring(gantt_svg(_synthetic(records, workers=2, wall=1.0)))
    lanes = [el for el in root.iter(f"{SVG}rect") if "lane" in _classes(el)]
    bars = [el for el in root.iter(f"{SVG}rect") if "task" in _classes(el)]
    first, second = bars
    assert float(lanes[0].get("y", "")) < float(first.get("y", "")) < float(lanes[1].get("y", ""))
    assert float(second.get("y", "")) > float(lanes[1].get("y", ""))
    assert float(first.get("x", "")) < float(second.get("x", ""))
    # a bar's width is proportional to its duration: 0.4 s vs 0.5 s
    ratio = float(first.get("width", "")) / float(second.get("width", ""))
    assert ratio == pytest.approx(0.8, rel=0.01)


def test_gantt_aggregates_ten_thousand_tiny_tasks() -> None:
    """10,000 tasks of 50 us on 4 workers: far too thin for a bar each."""
    records = []
    for i in range(10_000):
        w, k = divmod(i, 2500)
        start = k * 100e-6
        state = TaskState.FAILED if i == 7 else TaskState.DONE
        records.append(TraceRecord(f"t{i}", w, state, start, start, start, start + 50e-6))
    svg = gantt_svg(_synthetic(records, workers=4, wall=0.25))
    root = ET.fromstring(svg)
    assert not [el for el in root.iter(f"{SVG}rect") if "task" in _classes(el)]
    agg = [el for el in root.iter(f"{SVG}rect") if "agg" in _classes(el)]
    assert agg
    # the one failure is visible as a mixed column in worker 0's lane
    assert any("mixed" in _classes(el) for el in agg)
    title = root.find(f"{SVG}title")
    assert title is not None
    assert "aggregated" in (title.text or "")
    # every task is counted once across the aggregated rectangles' hover text
    started = 0
    for g in root.iter(f"{SVG}g"):
        t = g.find(f"{SVG}title")
        match = re.search(r": (\d+) tasks? started", (t.text or "") if t is not None else "")
        if match:
            started += int(match.group(1))
    assert started == 10_000
    assert len(svg) < 400_000  # grows with the picture's width, not the task count


def test_gantt_small_run_is_never_aggregated_even_if_bars_are_thin() -> None:
    records = [
        TraceRecord(f"t{i}", 0, TaskState.DONE, 0.0, 0.0, i * 1e-6, (i + 1) * 1e-6)
        for i in range(10)
    ]
    root = ET.fromstring(gantt_svg(_synthetic(records, workers=1, wall=1.0)))
    assert len([el for el in root.iter(f"{SVG}rect") if "task" in _classes(el)]) == 10


def test_gantt_too_many_tasks_is_aggregated_even_if_bars_are_wide() -> None:
    n = MAX_BARS + 1
    records = [TraceRecord(f"t{i}", 0, TaskState.DONE, 0.0, 0.0, i, i + 1.0) for i in range(n)]
    root = ET.fromstring(gantt_svg(_synthetic(records, workers=1, wall=float(n))))
    assert not [el for el in root.iter(f"{SVG}rect") if "task" in _classes(el)]


def test_gantt_refuses_untraced_result(tmp_path: Path) -> None:
    result = dagexec.run(_diamond(), workers=2)
    with pytest.raises(ValueError, match="trace=True"):
        result.gantt_svg(tmp_path / "g.svg")


# ------------------------------------------------------------------ dot/mermaid
DIAMOND_DOT = """\
digraph dagexec {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
  n0 [label="a"];
  n1 [label="b"];
  n2 [label="c"];
  n3 [label="d", penwidth=2];
  n0 -> n1;
  n0 -> n2;
  n1 -> n3;
  n2 -> n3;
}
"""

DIAMOND_MERMAID = """\
flowchart LR
  n0["a"]
  n1["b"]
  n2["c"]
  n3["d"]
  n0 --> n1
  n0 --> n2
  n1 --> n3
  n2 --> n3
  classDef target stroke-width:3px
  class n3 target
"""


def test_dot_of_diamond() -> None:
    assert _diamond().to_dot() == DIAMOND_DOT


def test_mermaid_of_diamond() -> None:
    assert _diamond().to_mermaid() == DIAMOND_MERMAID


def test_targets_draw_only_the_pruned_part() -> None:
    assert _diamond().to_dot(targets=["b"]) == (
        "digraph dagexec {\n"
        "  rankdir=LR;\n"
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
        'fontname="Helvetica"];\n'
        '  n0 [label="a"];\n'
        '  n1 [label="b", penwidth=2];\n'
        "  n0 -> n1;\n"
        "}\n"
    )
    assert _diamond().to_mermaid(targets=["c"]) == (
        'flowchart LR\n  n0["a"]\n  n1["c"]\n  n0 --> n1\n'
        "  classDef target stroke-width:3px\n  class n1 target\n"
    )


def test_result_colours_states(failing_graph: Graph) -> None:
    g = failing_graph
    result = dagexec.run(g, workers=2, on_error="continue")
    assert g.to_dot(result=result) == (
        "digraph dagexec {\n"
        "  rankdir=LR;\n"
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
        'fontname="Helvetica"];\n'
        '  n0 [label="a", fillcolor="#c8e6c9", tooltip="done"];\n'
        '  n1 [label="bad", fillcolor="#ffcdd2", tooltip="failed"];\n'
        '  n2 [label="after", fillcolor="#fff3c4", tooltip="skipped", penwidth=2];\n'
        '  n3 [label="ok", fillcolor="#c8e6c9", tooltip="done", penwidth=2];\n'
        "  n0 -> n1;\n"
        "  n1 -> n2;\n"
        "  n0 -> n3;\n" + DOT_LEGEND + "}\n"
    )
    assert g.to_mermaid(result=result) == (
        "flowchart LR\n"
        '  n0["a"]\n'
        '  n1["bad"]\n'
        '  n2["after"]\n'
        '  n3["ok"]\n'
        "  n0 --> n1\n"
        "  n1 --> n2\n"
        "  n0 --> n3\n"
        "  subgraph legend [legend]\n"
        '    legend_done["done"]\n'
        '    legend_failed["failed"]\n'
        '    legend_skipped["skipped: an upstream task failed"]\n'
        '    legend_cancelled["cancelled: never started, the run stopped"]\n'
        '    legend_target["thick border: a target"]\n'
        "  end\n"
        "  classDef done fill:#c8e6c9\n"
        "  class n0,n3,legend_done done\n"
        "  classDef failed fill:#ffcdd2\n"
        "  class n1,legend_failed failed\n"
        "  classDef skipped fill:#fff3c4\n"
        "  class n2,legend_skipped skipped\n"
        "  classDef cancelled fill:#e0e0e0\n"
        "  class legend_cancelled cancelled\n"
        "  classDef target stroke-width:3px\n"
        "  class n2,n3,legend_target target\n"
    )


DOT_LEGEND = (
    '  subgraph cluster_legend { label="legend"; fontname="Helvetica";\n'
    '    legend_done [label="done", fillcolor="#c8e6c9"];\n'
    '    legend_failed [label="failed", fillcolor="#ffcdd2"];\n'
    "    legend_done -> legend_failed [style=invis];\n"
    '    legend_skipped [label="skipped: an upstream task failed", fillcolor="#fff3c4"];\n'
    "    legend_failed -> legend_skipped [style=invis];\n"
    '    legend_cancelled [label="cancelled: never started, the run stopped", '
    'fillcolor="#e0e0e0"];\n'
    "    legend_skipped -> legend_cancelled [style=invis];\n"
    '    legend_target [label="thick border: a target", penwidth=2];\n'
    "    legend_cancelled -> legend_target [style=invis];\n"
    "  }\n"
)
"""The legend a drawing coloured by a result carries: what each fill means."""


def test_awkward_names_are_escaped_and_ids_stay_safe() -> None:
    g = Graph()
    g.add('say "hi"\\now', lambda: 1)
    g.add(("tuple", 1), lambda x: x, deps=['say "hi"\\now'])
    g.add("a\nb <#&`>", lambda x, y: x, deps=[("tuple", 1), ("tuple", 1)])
    dot = g.to_dot()
    assert 'n0 [label="say \\"hi\\"\\\\now"];' in dot
    assert "n1 [label=\"('tuple', 1)\"];" in dot
    assert 'n2 [label="a\\nb <#&`>", penwidth=2];' in dot
    assert dot.count("n1 -> n2;") == 1  # a repeated dependency is one edge
    mermaid = g.to_mermaid()
    assert 'n0["say #34;hi#34;\\now"]' in mermaid
    assert "n1[\"('tuple', 1)\"]" in mermaid
    assert 'n2["a b #60;#35;#38;#96;#62;"]' in mermaid


def test_drawing_a_cyclic_graph_raises_cycle_error() -> None:
    g = Graph()
    g.add("a", lambda b: b, deps=["b"])
    g.add("b", lambda a: a, deps=["a"])
    with pytest.raises(dagexec.CycleError):
        g.to_dot()
    with pytest.raises(dagexec.UnknownTargetError):
        _diamond().to_mermaid(targets=["zzz"])


def _svg_text(svg: str) -> str:
    return " ".join(t.text or "" for t in ET.fromstring(svg).iter() if t.text)


def test_gantt_says_how_many_tasks_were_too_short_to_draw() -> None:
    """10 tasks, 3 of them far under a pixel: drawn 1 px wide, and counted in the note."""
    records = [
        TraceRecord(f"t{i}", 0, TaskState.DONE, 0.0, 0.0, float(i), i + (1e-9 if i < 3 else 1.0))
        for i in range(10)
    ]
    text = _svg_text(gantt_svg(_synthetic(records, workers=1, wall=10.0)))
    assert "3 tasks were too short to draw to scale (under a pixel): each drawn 1 px wide" in text
    wide = [TraceRecord(f"t{i}", 0, TaskState.DONE, 0.0, 0.0, float(i), i + 1.0) for i in range(10)]
    assert "too short" not in _svg_text(gantt_svg(_synthetic(wide, workers=1, wall=10.0)))


def test_aggregated_gantt_counts_the_merged_tasks() -> None:
    records = [
        TraceRecord(f"t{i}", 0, TaskState.DONE, 0.0, 0.0, i * 1e-4, i * 1e-4 + 5e-5)
        for i in range(1000)
    ]
    text = _svg_text(gantt_svg(_synthetic(records, workers=1, wall=0.1)))
    assert "1000 tasks were too short to draw to scale (under a pixel): merged into" in text


def test_a_drawing_without_a_result_has_no_legend() -> None:
    assert "legend" not in _diamond().to_dot()
    assert "legend" not in _diamond().to_mermaid()


# ------------------------------------------------- issue 23 item 6: what runs how
def _batch() -> Graph:
    g = Graph()
    g.add("find", lambda: [1, 2])
    g.map("parse", lambda f: f, over="find", retries=2, resources={"db": 1})
    g.add("upload", lambda p: p, deps=["parse"], timeout=30, retries=1)
    g.add("cleanup", lambda u: None, deps=["upload"], run_if="all_done")
    return g


def test_dot_marks_maps_cleanup_edges_retries_timeouts_and_resources() -> None:
    """Issue 23: maps, cleanup edges, resources and retries were drawn like plain tasks."""
    assert _batch().to_dot() == (
        "digraph dagexec {\n"
        "  rankdir=LR;\n"
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
        'fontname="Helvetica"];\n'
        '  n0 [label="find"];\n'
        '  n1 [label="parse\\nmap over find\\nretries=2\\nresources: db=1", shape=box3d];\n'
        '  n2 [label="upload\\nretries=1\\ntimeout=30 s"];\n'
        '  n3 [label="cleanup\\ncleanup: run_if=all_done", penwidth=2];\n'
        "  n0 -> n1;\n"
        "  n1 -> n2;\n"
        "  n2 -> n3 [style=dashed];\n"
        "}\n"
    )


def test_mermaid_marks_maps_cleanup_edges_retries_timeouts_and_resources() -> None:
    assert _batch().to_mermaid() == (
        "flowchart LR\n"
        '  n0["find"]\n'
        '  n1[["parse<br/>map over find<br/>retries=2<br/>resources: db=1"]]\n'
        '  n2["upload<br/>retries=1<br/>timeout=30 s"]\n'
        '  n3["cleanup<br/>cleanup: run_if=all_done"]\n'
        "  n0 --> n1\n"
        "  n1 --> n2\n"
        "  n2 -.-> n3\n"
        "  classDef target stroke-width:3px\n"
        "  class n3 target\n"
    )


def test_a_notes_line_with_syntax_characters_is_escaped() -> None:
    g = Graph()
    g.add('a"b', lambda: [1])
    g.map("m", lambda x: x, over='a"b')
    assert 'label="m\\nmap over a\\"b", shape=box3d' in g.to_dot()
    assert 'n1[["m<br/>map over a#34;b"]]' in g.to_mermaid()


def _load(name: str) -> str:
    return name


def _parse(text: str) -> str:
    return text.upper()


def _explode(text: str) -> str:
    raise ValueError(text)


def test_gantt_colours_bars_by_group_with_a_legend(tmp_path: Path) -> None:
    """Issue 23: every bar was the same green, so steps could not be told apart."""
    g = Graph()
    g.add("files", lambda: ["a", "b", "c"])
    for f in ("a", "b"):
        g.add(("load", f), _load, args=(f,))
    g.map("parse", _parse, over="files")
    g.add("bad", _explode, args=("no",))
    result = dagexec.run(g, workers=2, on_error="continue", trace=True)
    groups = {r.name: r.group for r in result.trace}
    assert groups == {
        "files": "files",  # a lambda with a plain name: its name
        ("load", "a"): "_load",
        ("load", "b"): "_load",
        ("parse", 0): "parse",  # a map's items: the map's name
        ("parse", 1): "parse",
        ("parse", 2): "parse",
        "bad": "_explode",
    }
    path = tmp_path / "g.svg"
    result.gantt_svg(path)
    root = ET.parse(path).getroot()
    fill = {
        bar.get("data-group"): bar.get("fill")
        for bar in root.iter(f"{SVG}rect")
        if "task" in _classes(bar)
    }
    assert len(fill) == 4 and len(set(fill.values())) == 4  # one colour per group
    bars = [b for b in root.iter(f"{SVG}rect") if "task" in _classes(b)]
    by_group: dict[str | None, set[str | None]] = {}
    for bar in bars:
        by_group.setdefault(bar.get("data-group"), set()).add(bar.get("fill"))
    assert all(len(fills) == 1 for fills in by_group.values())  # the same within a group
    failed = [b for b in bars if "failed" in _classes(b)]
    assert [b.get("stroke") for b in failed] == ["#e53935"]
    legend = _svg_text(path.read_text(encoding="utf-8"))
    for name in ("files", "_load", "parse", "_explode", "failed (red outline)"):
        assert name in legend
    swatches = {r.get("fill") for r in root.iter(f"{SVG}rect") if "legend" in _classes(r)}
    assert set(fill.values()) <= swatches


def test_gantt_groups_beyond_the_palette_share_other() -> None:
    from dagexec._observation.gantt import GROUP_COLORS, OTHER_COLOR, group_colors

    records = [
        TraceRecord(f"t{i}", 0, TaskState.DONE, 0, 0, i, i + 1, group=f"g{i % 12}")
        for i in range(12 * 3 + 1)  # g0 is the biggest group: 4 tasks
    ]
    colors, others = group_colors(records)
    assert others == 12 - (len(GROUP_COLORS) - 1)
    assert colors["g0"] == GROUP_COLORS[0]
    assert OTHER_COLOR not in colors.values()
    svg = gantt_svg(_synthetic(records, workers=1, wall=40.0))
    assert f"other ({others} groups)" in _svg_text(svg)


def test_aggregated_gantt_colours_columns_by_their_main_group() -> None:
    from dagexec._observation.gantt import GROUP_COLORS

    # 10,000 tiny tasks: the first half "load", the second "parse", one failure.
    records = [
        TraceRecord(
            f"t{i}",
            0,
            TaskState.FAILED if i == 9000 else TaskState.DONE,
            0,
            0,
            i * 1e-4,
            i * 1e-4 + 5e-5,
            group="load" if i < 5000 else "parse",
        )
        for i in range(10_000)
    ]
    svg = gantt_svg(_synthetic(records, workers=1, wall=1.0))
    root = ET.fromstring(svg)
    fills = [r.get("fill") for r in root.iter(f"{SVG}rect") if "agg" in _classes(r)]
    assert fills.count(GROUP_COLORS[0]) >= 1 and fills.count(GROUP_COLORS[1]) >= 1
    assert fills.index(GROUP_COLORS[0]) < fills.index(GROUP_COLORS[1])  # load, then parse
    assert "#e53935" in fills or "#fb8c00" in fills  # the failure still shows
    text = _svg_text(svg)
    assert "load" in text and "parse" in text and "done and failed in one column" in text
