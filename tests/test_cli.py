"""``python -m dagexec``, run in a subprocess as a user would run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PIPELINE = """\
from dagexec import Graph

graph = Graph()
graph.add("load", lambda: 2)
graph.add("square", lambda x: x * x, deps=["load"])
graph.add("double", lambda x: x * 2, deps=["load"])
graph.add("report", lambda s, d: s + d, deps=["square", "double"])
not_a_graph = {"load": 1}
"""

FAILING = """\
from dagexec import Graph

def explode(x):
    raise ValueError("bad input\\non two lines")

graph = Graph()
graph.add("load", lambda: 2)
graph.add("explode", explode, deps=["load"])
graph.add("after", lambda x: x, deps=["explode"])
graph.add("fine", lambda x: x, deps=["load"])
"""

CYCLE = """\
from dagexec import Graph

graph = Graph()
graph.add("a", lambda c: c, deps=["c"])
graph.add("b", lambda a: a, deps=["a"])
graph.add("c", lambda b: b, deps=["b"])
"""


def dagexec(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagexec", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single line a failing command writes to stderr."""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dagexec: error: "), proc.stderr
    return lines[0]


def _task_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line of a task failure's stderr; a short traceback comes before it."""
    lines = proc.stderr.splitlines()
    assert lines[-1].startswith("dagexec: error: task "), proc.stderr
    assert lines[0].startswith("task "), proc.stderr
    assert "--traceback for the full traceback" in lines[0], proc.stderr
    assert sum(line.startswith("dagexec: error:") for line in lines) == 1, proc.stderr
    return lines[-1]


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.py"
    path.write_text(PIPELINE, encoding="utf-8")
    return path


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    path = tmp_path / "failing.py"
    path.write_text(FAILING, encoding="utf-8")
    return path


def _table(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        label, _, value = line.strip().partition("  ")
        rows[label] = value.strip()
    return rows


def test_run_prints_summary_and_writes_pictures(pipeline: Path, tmp_path: Path) -> None:
    trace, gantt = tmp_path / "out.json", tmp_path / "out.svg"
    proc = dagexec(
        "run",
        f"{pipeline}:graph",
        "--workers", "2",
        "--queue-cap", "1",
        "--max-in-flight", "3",
        "--trace", trace,
        "--gantt", gantt,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    rows = _table(proc.stdout)
    assert rows["tasks planned"] == "4"
    assert rows["done"] == "4"
    assert rows["failed"] == "0"
    assert rows["skipped"] == "0"
    assert rows["workers"] == "2"
    peak, _, cap = rows["peak in flight"].partition(" of cap ")
    assert cap == "3"
    assert 1 <= int(peak) <= 3
    assert re.fullmatch(r"\d+\.\d (ms|s)", rows["wall time"]) or re.fullmatch(
        r"\d+\.\d{3} s", rows["wall time"]
    )
    doc = json.loads(trace.read_text(encoding="utf-8"))
    assert sorted(e["name"] for e in doc["traceEvents"] if e["ph"] == "X") == [
        "double",
        "load",
        "report",
        "square",
    ]
    ET.parse(gantt)


def test_run_targets_runs_only_what_they_need(pipeline: Path) -> None:
    proc = dagexec("run", f"{pipeline}:graph", "--targets", "square, double", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout)["tasks planned"] == "3"


def test_run_progress_on_a_pipe_prints_one_summary_line(pipeline: Path) -> None:
    proc = dagexec("run", f"{pipeline}:graph", "--progress", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("dagexec: 4 tasks: 4 done, 0 failed, 0 skipped, 0 cancelled in ")
    assert proc.stderr.count("\n") == 1


def test_task_failure_exits_1_naming_the_task(failing: Path) -> None:
    proc = dagexec("run", f"{failing}:graph", "--workers", "1")
    assert proc.returncode == 1
    assert _task_error_line(proc) == (
        "dagexec: error: task explode failed: ValueError: bad input on two lines"
    )
    assert 'raise ValueError("bad input\\non two lines")' in proc.stderr  # the failing line
    assert "_engine" not in proc.stderr  # the task's frames only
    assert _table(proc.stdout)["failed"] == "1"


def test_continue_runs_the_rest_and_still_exits_1(failing: Path) -> None:
    proc = dagexec("run", f"{failing}:graph", "--on-error", "continue", "--workers", "2")
    assert proc.returncode == 1
    assert "task explode failed" in _task_error_line(proc)
    rows = _table(proc.stdout)
    assert (rows["done"], rows["failed"], rows["skipped"]) == ("2", "1", "1")


def test_show_dot_and_mermaid(pipeline: Path) -> None:
    dot = dagexec("show", f"{pipeline}:graph")
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout.startswith("digraph dagexec {\n")
    assert '  n3 [label="report", penwidth=2];\n' in dot.stdout
    mermaid = dagexec("show", f"{pipeline}:graph", "--format", "mermaid", "--targets", "double")
    assert mermaid.returncode == 0, mermaid.stderr
    assert mermaid.stdout == (
        'flowchart LR\n  n0["load"]\n  n1["double"]\n  n0 --> n1\n'
        "  classDef target stroke-width:3px\n  class n1 target\n"
    )


@pytest.mark.parametrize("command", ["run", "show"])
def test_missing_file(command: str, tmp_path: Path) -> None:
    proc = dagexec(command, f"{tmp_path / 'nope.py'}:graph")
    assert proc.returncode == 1
    assert _error_line(proc) == f"dagexec: error: no such file: {tmp_path / 'nope.py'}"
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["run", "show"])
def test_missing_variable(command: str, pipeline: Path) -> None:
    proc = dagexec(command, f"{pipeline}:grpah")
    assert proc.returncode == 1
    assert _error_line(proc) == (
        f"dagexec: error: {pipeline} has no variable 'grpah'; did you mean 'graph'? "
        "Graph variables in it: graph"
    )


def test_not_a_graph(pipeline: Path) -> None:
    proc = dagexec("run", f"{pipeline}:not_a_graph")
    assert proc.returncode == 1
    assert _error_line(proc) == (
        f"dagexec: error: {pipeline}:not_a_graph is a dict, not a dagexec.Graph; "
        "Graph variables in it: graph"
    )


def test_module_that_fails_to_import(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import no_such_module_anywhere\n", encoding="utf-8")
    proc = dagexec("show", f"{path}:graph")
    assert proc.returncode == 1
    assert "cannot load" in _error_line(proc)
    assert "ModuleNotFoundError" in _error_line(proc)


@pytest.mark.parametrize("command", ["run", "show"])
def test_cycle_reports_its_path(command: str, tmp_path: Path) -> None:
    path = tmp_path / "cycle.py"
    path.write_text(CYCLE, encoding="utf-8")
    proc = dagexec(command, f"{path}:graph")
    assert proc.returncode == 1
    assert "cycle: a -> b -> c -> a" in _error_line(proc)


@pytest.mark.parametrize("command", ["run", "show"])
def test_unknown_target(command: str, pipeline: Path) -> None:
    proc = dagexec(command, f"{pipeline}:graph", "--targets", "square,sqaure")
    assert proc.returncode == 1
    assert "unknown target 'sqaure'" in _error_line(proc)
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "pipeline.py"], "expected FILE:VARIABLE"),
        (["run", "x.py:graph", "--workers", "0"], "must be >= 1, got 0"),
        (["run", "x.py:graph", "--queue-cap", "two"], "expected a whole number, got 'two'"),
        (["run", "x.py:graph", "--on-error", "ignore"], "invalid choice: 'ignore'"),
        (["run", "x.py:graph", "--targets", "a,,b"], "expected task names separated by commas"),
        (["show", "x.py:graph", "--format", "png"], "invalid choice: 'png'"),
        (["run", "x.py:graph", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        ([], "the following arguments are required: COMMAND"),
        (["fly"], "invalid choice: 'fly'"),
    ],
)
def test_bad_command_lines_exit_2(args: list[str], message: str) -> None:
    proc = dagexec(*args)
    assert proc.returncode == 2
    assert message in _error_line(proc)
    assert proc.stdout == ""


def test_help_documents_every_option() -> None:
    top = dagexec("--help")
    assert top.returncode == 0
    for word in ("run", "show", "demo", "Exit status"):
        assert word in top.stdout
    run = dagexec("run", "--help")
    assert run.returncode == 0
    for option in (
        "--targets",
        "--workers",
        "--queue-cap",
        "--max-in-flight",
        "--on-error",
        "--progress",
        "--trace",
        "--gantt",
    ):
        assert option in run.stdout
    show = dagexec("show", "--help")
    assert "--format" in show.stdout
    assert "--targets" in show.stdout
    demo = dagexec("demo", "--help")
    assert "--trace" in demo.stdout
    assert "--gantt" in demo.stdout


def test_sibling_modules_are_importable(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def one():\n    return 1\n", encoding="utf-8")
    (tmp_path / "main.py").write_text(
        textwrap.dedent(
            """\
            from dagexec import Graph
            from helpers import one

            g = Graph()
            g.add("x", one)
            """
        ),
        encoding="utf-8",
    )
    proc = dagexec("run", f"{tmp_path / 'main.py'}:g")
    assert proc.returncode == 0, proc.stderr


def test_demo_writes_trace_and_gantt(tmp_path: Path) -> None:
    trace, gantt = tmp_path / "demo.json", tmp_path / "demo.svg"
    proc = dagexec("demo", "--trace", trace, "--gantt", gantt)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(trace.read_text(encoding="utf-8"))
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    root = ET.parse(gantt).getroot()
    bars = [
        el for el in root.iter("{http://www.w3.org/2000/svg}rect") if "task" in el.get("class", "")
    ]
    assert len(bars) == len(slices) > 0


VALUES = """\
from dagexec import Graph

graph = Graph()
graph.add("n", lambda: 21)
graph.add("double", lambda n: {"twice": n * 2}, deps=["n"])
graph.add("blob", lambda: b"bytes")
graph.add(("load", "a.csv"), lambda: [1, 2])
graph.add(2024, lambda: "int name")
graph.add("2025", lambda: "str name")
graph.add("1", lambda: "the string one")
graph.add(1, lambda: "the int one")
"""


@pytest.fixture
def values(tmp_path: Path) -> Path:
    path = tmp_path / "values.py"
    path.write_text(VALUES, encoding="utf-8")
    return path


def test_print_shows_each_target_value(values: Path) -> None:
    proc = dagexec("run", f"{values}:graph", "--targets", "double,blob", "--print")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["double = {'twice': 42}", "blob = b'bytes'"]


def test_json_writes_what_json_holds_and_notes_the_rest(values: Path, tmp_path: Path) -> None:
    out = tmp_path / "values.json"
    proc = dagexec("run", f"{values}:graph", "--targets", "double,blob", "--json", out)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["values"] == {"double": {"twice": 42}}
    assert document["not_written"]["blob"].startswith("JSON cannot hold it: TypeError")
    assert proc.stderr == (
        "dagexec: note: 1 target value(s) not written to JSON (JSON cannot hold them; "
        "see not_written in the file): blob\n"
    )


def test_targets_are_python_literals_when_they_parse(values: Path) -> None:
    proc = dagexec(
        "run", f"{values}:graph", "--targets", "('load', 'a.csv'), 2024, 2025, '1', 1", "--print"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-5:] == [
        "('load', 'a.csv') = [1, 2]",
        "2024 = 'int name'",  # the literal 2024 is a task
        "2025 = 'str name'",  # the int 2025 is not, the string '2025' is: the text wins
        "1 = 'the string one'",
        "1 = 'the int one'",
    ]
    shown = dagexec("show", f"{values}:graph", "--targets", "('load', 'a.csv')")
    assert shown.returncode == 0 and "('load', 'a.csv')" in shown.stdout


@pytest.mark.parametrize("option", ["--trace", "--gantt", "--report", "--json"])
def test_output_paths_are_checked_before_the_run(option: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "g.py"
    path.write_text(
        "from pathlib import Path\nfrom dagexec import Graph\ngraph = Graph()\n"
        f"graph.add('t', lambda: Path({str(marker)!r}).write_text('x'))\n",
        encoding="utf-8",
    )
    for bad, message in [
        (tmp_path, "is a directory; give a file name"),
        (tmp_path / "no" / "such" / "out", "does not exist"),
    ]:
        proc = dagexec("run", f"{path}:graph", option, bad)
        assert proc.returncode == 1
        assert message in _error_line(proc)
        assert not marker.exists()  # nothing ran
        assert proc.stdout == ""


SYSTEM_EXIT = """\
import sys
from dagexec import Graph

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")

def leave(code):
    sys.exit(code)

def unprintable():
    raise Unprintable()

graph = Graph()
graph.add("message", leave, args=("goodbye",))
graph.add("zero", leave, args=(0,))
graph.add("three", leave, args=(3,))
graph.add("unprintable", unprintable)
"""


@pytest.mark.parametrize(
    ("target", "line"),
    [
        ("message", "dagexec: error: task message failed: SystemExit: goodbye"),
        ("zero", "dagexec: error: task zero failed: SystemExit: 0"),
        ("three", "dagexec: error: task three failed: SystemExit: 3"),
        (
            "unprintable",
            "dagexec: error: task unprintable failed: Unprintable: <Unprintable (its str raised)>",
        ),
    ],
)
def test_system_exit_and_unprintable_errors_are_task_failures(
    target: str, line: str, tmp_path: Path
) -> None:
    """Issue 8 items 8 and 13: exit 1 with the one-line error, never 0 or the task's code."""
    path = tmp_path / "g.py"
    path.write_text(SYSTEM_EXIT, encoding="utf-8")
    for on_error in ("raise", "continue"):
        proc = dagexec("run", f"{path}:graph", "--targets", target, "--on-error", on_error)
        assert proc.returncode == 1, proc.stderr
        assert _task_error_line(proc) == line


def test_traceback_option_prints_every_full_traceback(failing: Path) -> None:
    proc = dagexec("run", f"{failing}:graph", "--traceback", "--on-error", "continue")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == "task explode failed:"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "dagexec: error: task explode failed: ValueError: bad input on two lines"


def test_a_module_calling_sys_exit_is_a_load_error(tmp_path: Path) -> None:
    path = tmp_path / "g.py"
    path.write_text("import sys\nsys.exit(7)\n", encoding="utf-8")
    proc = dagexec("run", f"{path}:graph")
    assert proc.returncode == 1
    assert _error_line(proc) == (
        f"dagexec: error: cannot load {path}: {path}:2: SystemExit: 7 "
        "(--traceback shows the full traceback)"
    )


HOLD = """\
import threading
from dagexec import Graph

release = threading.Event()

def hold():
    print("started", flush=True)
    release.wait(60)  # a running task cannot be interrupted; it is a daemon thread

graph = Graph()
graph.add("hold", hold)
graph.add("after", lambda h: h, deps=["hold"])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_with_progress_ends_the_progress_output_and_exits_130(tmp_path: Path) -> None:
    import signal

    path = tmp_path / "hold.py"
    path.write_text(HOLD, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagexec", "run", f"{path}:graph", "--progress"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"  # the task runs: now interrupt
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    # The logger's WARNING about the interrupt may come first (no handler configured:
    # logging's last resort prints it); the bar's own end line must be there.
    lines = [line for line in stderr.splitlines() if line.startswith("dagexec: ")]
    assert lines[0].startswith("dagexec: interrupted: 2 tasks: 0 done"), stderr
    assert lines[-1] == "dagexec: error: interrupted"


# ---------------------------------------------------------------- issue 23 item 2


def dagexec_in(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m dagexec`` run from ``cwd``, as a user in their project folder would."""
    return subprocess.run(
        [sys.executable, "-m", "dagexec", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _adds_up(rows: dict[str, str]) -> int:
    """The summary's task rows sum to the tasks planned; returns that number."""
    planned = int(rows["tasks planned"].split()[0])
    parts = ("done", "loaded", "failed", "skipped", "cancelled", "running")
    counted = sum(int(rows[p].split()[0]) for p in parts if p in rows)
    assert counted == planned, rows
    return planned


RESOURCES = """\
from dagexec import Graph

graph = Graph()
graph.add("load", lambda: 1)
graph.add("upload", lambda x: x, deps=["load"], resources={"db": 1})
"""


def test_resources_option_gives_capacities(tmp_path: Path) -> None:
    path = tmp_path / "res.py"
    path.write_text(RESOURCES, encoding="utf-8")
    proc = dagexec("run", f"{path}:graph", "--resources", "db=2,gpu=1")
    assert proc.returncode == 0, proc.stderr
    rows = _table(proc.stdout)
    assert rows["peak db"] == "1 of capacity 2"
    assert rows["peak gpu"] == "0 of capacity 1"


def test_a_resource_missing_from_the_command_line_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "res.py"
    path.write_text(RESOURCES, encoding="utf-8")
    proc = dagexec("run", f"{path}:graph")
    assert proc.returncode == 1
    assert _error_line(proc).startswith(
        "dagexec: error: task 'upload' needs resource 'db', which has no capacity in this "
        "run; add --resources db=N"
    )
    typo = dagexec("run", f"{path}:graph", "--resources", "DB=2")
    assert typo.returncode == 1
    assert "did you mean 'DB'? write --resources db=N" in _error_line(typo)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("db", "expected NAME=CAPACITY items separated by commas, got 'db'"),
        ("db=2,", "expected NAME=CAPACITY items separated by commas, got ''"),
        ("db=0", "capacity of 'db' must be a number > 0"),
        ("db=-1", "capacity of 'db' must be a number > 0"),
        ("db=two", "capacity of 'db' must be a number, got 'two'"),
        ("db=nan", "capacity of 'db' must be a number > 0"),
        ("db=1,db=2", "'db' is given twice"),
    ],
)
def test_bad_resources_exit_2_naming_the_option_and_the_fix(value: str, message: str) -> None:
    proc = dagexec("run", "x.py:graph", "--resources", value)
    assert proc.returncode == 2
    line = _error_line(proc)
    assert "argument --resources" in line
    assert message in line
    assert "--resources db=2,gpu=1" in line or "give it once" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "argument --timeout: must be a number of seconds > 0, got 0"),
        (["--timeout", "soon"], "argument --timeout: expected a number of seconds, got 'soon'"),
        (["--log-level", "LOUD"], "argument --log-level: expected one of DEBUG, INFO"),
    ],
)
def test_bad_timeout_and_log_level_exit_2(args: list[str], message: str) -> None:
    proc = dagexec("run", "x.py:graph", *args)
    assert proc.returncode == 2
    assert message in _error_line(proc)


HANGS = """\
import threading
from dagexec import Graph

never = threading.Event()

def hold():
    print("started", flush=True)
    never.wait(60)  # a daemon worker: the command exits without it

graph = Graph()
graph.add("hold", hold)
graph.add("after", lambda h: h, deps=["hold"])
graph.add("quick", lambda: 1)
"""


def test_timeout_stops_the_run_and_the_summary_still_adds_up(tmp_path: Path) -> None:
    path = tmp_path / "hangs.py"
    path.write_text(HANGS, encoding="utf-8")
    proc = dagexec("run", f"{path}:graph", "--timeout", "0.5", "--workers", "2")
    assert proc.returncode == 1
    # dagexec's WARNING about the stop may come first (logging's last resort).
    assert proc.stderr.splitlines()[-1].startswith(
        "dagexec: error: the run timed out after 0.5 s (--timeout 0.5)"
    )
    rows = _table(proc.stdout.replace("started\n", ""))
    assert _adds_up(rows) == 3
    assert rows["done"] == "1"
    assert rows["running"].startswith("1 (abandoned when the run stopped")
    assert rows["cancelled"] == "1"


POLICY = """\
import threading
from dagexec import Graph

gate = threading.Event()
calls = {"flaky": 0}

def flaky():
    calls["flaky"] += 1
    if calls["flaky"] < 3:
        raise OSError("not yet")
    return 1

def slow():
    gate.wait(60)  # released by the cleanup task, which waits 0.2 s for it, then runs

graph = Graph()
graph.add("flaky", flaky, retries=2)
graph.add("slow", slow, timeout=0.05)
graph.add("release", lambda s: gate.set(), deps=["slow"], run_if="all_done", timeout=0.2)
graph.add("files", lambda: list(range(30)))
graph.map("rows", lambda f: f * 2, over="files")
"""


def test_summary_counts_map_items_retries_and_timeouts(tmp_path: Path) -> None:
    path = tmp_path / "policy.py"
    path.write_text(POLICY, encoding="utf-8")
    proc = dagexec(
        "run", f"{path}:graph", "--on-error", "continue", "--workers", "3", "--log-level", "info"
    )
    assert proc.returncode == 1  # slow failed: timed out
    rows = _table(proc.stdout)
    assert _adds_up(rows) == 35
    assert rows["tasks planned"] == "35 (5 in the graph, 30 map items)"
    assert rows["failed"] == "1"
    assert rows["retries"] == "2"
    assert rows["timed out"] == "1 attempt"
    # --log-level INFO shows dagexec's own records, each retry among them.
    assert "INFO dagexec: task 'flaky' failed (attempt 1 of 3: OSError: not yet)" in proc.stderr


def test_summary_adds_up_on_failure(failing: Path) -> None:
    proc = dagexec("run", f"{failing}:graph", "--on-error", "continue")
    rows = _table(proc.stdout)
    assert _adds_up(rows) == 4
    assert (rows["done"], rows["failed"], rows["skipped"]) == ("2", "1", "1")


INTERRUPTED = """\
import threading
from dagexec import Graph

never = threading.Event()
others_done = threading.Semaphore(0)  # one release per task that does not need hold

def hold():
    for _ in range(21):  # "started" only once hold is the one task left running
        others_done.acquire(timeout=60)
    print("started", flush=True)
    never.wait(60)  # a daemon worker: the command exits without it

def quick():
    others_done.release()
    return 1

def files():
    others_done.release()
    return list(range(10))

graph = Graph()
graph.add("hold", hold)
for i in range(20):
    graph.add(("quick", i), quick)
    graph.add(("later", i), lambda h: h, deps=["hold"])
graph.add("files", files)
graph.map("rows", lambda f, h: f, over="files", deps=["hold"])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_prints_a_summary_that_adds_up(tmp_path: Path) -> None:
    """Issue 23: after Ctrl-C it read 607 tasks: 178 done, 0 failed, 0 skipped, 425
    cancelled (4 missing: the tasks still running)."""
    import signal

    path = tmp_path / "interrupted.py"
    path.write_text(INTERRUPTED, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagexec", "run", f"{path}:graph", "--workers", "2", "--progress"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    rows = _table(stdout)
    assert _adds_up(rows) == 43  # the map never expanded: its over ran, hold never ended
    assert rows["running"].startswith("1 ")
    assert rows["wall time"].endswith("(stopped before the end)")
    bar = next(line for line in stderr.splitlines() if line.startswith("dagexec: interrupted"))
    assert "cancelled, 1 unfinished" in bar, bar
    assert stderr.splitlines()[-1] == "dagexec: error: interrupted"


def test_module_colon_variable_is_imported_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "jobs" / "nightly.py").write_text(PIPELINE, encoding="utf-8")
    proc = dagexec_in(tmp_path, "run", "jobs.nightly:graph")
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout)["done"] == "4"
    missing = dagexec_in(tmp_path, "show", "jobs.nightlyy:graph")
    assert missing.returncode == 1
    assert _error_line(missing).startswith("dagexec: error: no module named 'jobs.nightlyy'")


def test_a_mistyped_file_gets_a_suggestion(tmp_path: Path) -> None:
    (tmp_path / "nightly.py").write_text(PIPELINE, encoding="utf-8")
    proc = dagexec_in(tmp_path, "run", "nighty.py:graph")
    assert proc.returncode == 1
    assert _error_line(proc) == (
        "dagexec: error: no such file: nighty.py; did you mean nightly.py?"
    )
    module = dagexec_in(tmp_path, "run", "nighty:graph")
    assert _error_line(module).endswith("; did you mean nightly?")


def test_a_load_error_shows_file_and_line_and_traceback_shows_all(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def load():\n    return {}['missing']\n", "utf-8")
    (tmp_path / "imperr2.py").write_text("x = 1\ny = 2\nz = 1 / 0\n", encoding="utf-8")
    (tmp_path / "imperr3.py").write_text("import helpers\n\nhelpers.load()\n", "utf-8")
    proc = dagexec_in(tmp_path, "run", "imperr2.py:graph")
    assert proc.returncode == 1
    assert _error_line(proc) == (
        "dagexec: error: cannot load imperr2.py: imperr2.py:3: ZeroDivisionError: division "
        "by zero (--traceback shows the full traceback)"
    )
    nested = dagexec_in(tmp_path, "show", "imperr3.py:graph")
    assert "cannot load imperr3.py: helpers.py:2: KeyError: 'missing'" in _error_line(nested)
    full = dagexec_in(tmp_path, "run", "imperr3.py:graph", "--traceback")
    lines = full.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any("imperr3.py" in line and "line 3" in line for line in lines)
    assert any("helpers.py" in line and "line 2" in line for line in lines)
    assert "importlib" not in full.stderr  # the user's frames, not the import machinery's
    assert lines[-1] == "dagexec: error: cannot load imperr3.py: helpers.py:2: KeyError: 'missing'"


def test_syntax_error_shows_its_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("x = 1\ndef (:\n", encoding="utf-8")
    proc = dagexec_in(tmp_path, "run", "bad.py:graph")
    assert _error_line(proc).startswith("dagexec: error: cannot load bad.py: bad.py:2: SyntaxError")


LONG = """\
from dagexec import Graph

graph = Graph()
graph.add("big", lambda: list(range(200)))
graph.add("text", lambda: "x" * 500)
graph.add("small", lambda: [1, 2])
"""


def test_print_shortens_long_values_and_print_full_shows_them(tmp_path: Path) -> None:
    path = tmp_path / "long.py"
    path.write_text(LONG, encoding="utf-8")
    proc = dagexec("run", f"{path}:graph", "--print")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    big = next(line for line in lines if line.startswith("big = "))
    assert big == "big = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...]"
    text = next(line for line in lines if line.startswith("text = "))
    assert len(text) < 100 and "..." in text
    assert "small = [1, 2]" in lines
    assert lines[-1] == (
        "(2 long values shortened with ...; --print-full prints them whole, "
        "--json writes them to a file)"
    )
    full = dagexec("run", f"{path}:graph", "--print-full")
    assert f"big = {list(range(200))!r}" in full.stdout.splitlines()
    assert "shortened" not in full.stdout


def test_help_documents_the_new_options() -> None:
    run = dagexec("run", "--help").stdout
    for option in ("--resources", "--timeout", "--log-level", "--print-full", "jobs.nightly:graph"):
        assert option in run, option
    assert "--print-full prints them whole" in " ".join(run.split())


def test_summary_counts_tasks_loaded_from_the_checkpoint(pipeline: Path, tmp_path: Path) -> None:
    store = tmp_path / "run.sqlite"
    first = _table(dagexec("run", f"{pipeline}:graph", "--checkpoint", store).stdout)
    assert first["loaded"] == "0"
    assert _adds_up(first) == 4
    again = dagexec("run", f"{pipeline}:graph", "--checkpoint", store)
    assert again.returncode == 0, again.stderr
    rows = _table(again.stdout)
    assert _adds_up(rows) >= 1
    assert rows["done"] == "0"  # nothing ran: every value came from the file
    assert rows["loaded"] == rows["tasks planned"]
