"""``result.report_html`` in a real browser (issue 35): headless Chromium, clicked through.

The page is opened from disk, as a user opens it the morning after, and driven
over Chromium's own DevTools pipe (benchmarks/chromium_pipe.py): real mouse
clicks on the failure list, a row's logs, a map's fold, a column to sort; typed
text in the filter. Each check reads what the page shows. Skipped, saying why,
where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dagexec
from dagexec import Graph, TaskState

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from chromium_pipe import Chromium, find_chromium  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (apt-get install chromium, or set DAGEXEC_CHROMIUM): "
    "the report's browser test needs one",
)

log = logging.getLogger("night")
WAIT = 30.0
# Outside references a page must not make: it opens from disk, offline.
NETWORK = re.compile(
    r"https?:|<link\b|\bsrc\s*=|url\(|@import|<iframe|\bfetch\(|XMLHttpRequest|WebSocket|"
    r"navigator\.sendBeacon|<object|<embed",
    re.I,
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    assert CHROMIUM is not None
    with Chromium(CHROMIUM) as chromium:
        yield chromium


# ---- the night: a map with a bad file, a flaky step, a hang, process tasks, resumed
night_no = [1]


def list_files() -> list[str]:
    return ["a.csv", "b.csv", "bad.csv", "c.csv"]


def parse(name: str) -> int:
    log.info("parsing %s", name)
    if name == "bad.csv":
        log.error("%s has no header", name)
        raise ValueError(f"bad file {name}")
    return len(name)


def flaky() -> str:
    me = dagexec.current_task()
    log.warning("flaky: night %d, attempt %d", night_no[0], me.attempt)
    if night_no[0] == 1 or me.attempt == 1:
        raise ConnectionError("database went away")
    return "ok"


def hang() -> str:
    me = dagexec.current_task()
    log.info("hang: waiting")
    me.cancelled.wait(WAIT)  # until its timeout sets the token
    return "late"


def night_graph() -> Graph:
    import process_tasks

    g = Graph()
    g.add("files", list_files)
    g.map("parse", parse, over="files", resources={"db": 1})
    g.add("flaky", flaky, retries=1, retry_on=(ConnectionError,))
    g.add("hang", hang, timeout=0.2)
    g.add("square", process_tasks.log_lines, args=(2,), isolate="process", checkpoint=False)
    g.add("broken", process_tasks.fail, isolate="process", checkpoint=False)
    g.add("total", lambda xs, f: sum(xs), deps=["parse", "flaky"])
    return g


def run_night(checkpoint: Path) -> dagexec.RunResult:
    options: dict[str, Any] = dict(
        workers=3, resources={"db": 2}, checkpoint=checkpoint, trace=True, logs=True
    )
    return dagexec.run(night_graph(), on_error="continue", **options)


def rows(page: Chromium) -> list[list[str]]:
    """The table's rendered rows, as their cells' text."""
    got: list[list[str]] = page.eval(
        "[...document.querySelectorAll('#table-rows .row')]"
        ".map(r => [...r.children].map(c => c.innerText.trim()))"
    )
    return got


def shown(page: Chromium) -> str:
    text: str = page.eval("document.getElementById('shown').innerText")
    return text


def detail(page: Chromium, part: str) -> str:
    text: str = page.eval(
        f"document.getElementById('detail').hidden ? '(hidden)' : "
        f"(document.getElementById({part!r}) || {{innerText: '(none)'}}).innerText"
    )
    return text


def test_the_report_of_a_real_night_clicked_through(browser: Chromium, tmp_path: Path) -> None:
    night_no[0] = 1
    first = run_night(tmp_path / "night.sqlite")
    assert first.status["flaky"] is TaskState.FAILED
    night_no[0] = 2
    result = run_night(tmp_path / "night.sqlite")  # resumed: what finished is loaded
    assert result.stats.tasks_loaded >= 4 and result.status["flaky"] is TaskState.DONE
    failed = sorted(str(n) for n, s in result.status.items() if s is TaskState.FAILED)
    assert failed == ["('parse', 2)", "broken", "hang"]
    page = tmp_path / "night.html"
    result.report_html(page)
    text = page.read_text(encoding="utf-8")
    assert not NETWORK.search(text), NETWORK.search(text)

    browser.open(page)
    c = result.stats
    counts = {s: sum(1 for v in result.status.values() if v is s) for s in TaskState}
    summary = browser.eval("document.getElementById('sum-check').innerText")
    assert summary.startswith(
        f"{c.tasks_planned} planned = {counts[TaskState.DONE]} done + "
        f"{counts[TaskState.FAILED]} failed + {counts[TaskState.SKIPPED]} skipped + "
        f"{counts[TaskState.CANCELLED]} cancelled; of the done, {c.tasks_loaded} loaded"
    )
    assert sum(counts.values()) == c.tasks_planned
    legend = browser.eval("document.getElementById('legend').innerText")
    # hang's timed-out thread attempt is "abandoned" when the run ends before its
    # thread returns (it runs on: a thread cannot be stopped), else "timed out".
    # Either way the report shows what the trace says.
    [hang_outcome] = [r.outcome for r in result.trace if r.name == "hang"]
    assert hang_outcome in ("timed out", "abandoned")
    for outcome in ("done", "failed", "retried", hang_outcome, "loaded"):
        assert outcome in legend
    assert browser.eval("document.querySelector('svg.resource[data-resource=db]') !== null")

    # A failure's traceback, one click from the failure list.
    failures = browser.eval(
        "[...document.querySelectorAll('#failures li')].map(li => li.innerText)"
    )
    assert len(failures) == 3 and any("ValueError: bad file bad.csv" in f for f in failures)
    k = browser.eval(
        "[...document.querySelectorAll('#failures button')]"
        ".findIndex(b => b.innerText === \"('parse', 2)\")"
    )
    browser.click(f"#failures li:nth-child({k + 1}) button")
    tb = detail(browser, "detail-traceback")
    assert "Traceback (most recent call last)" in tb and "in parse" in tb
    assert "ValueError: bad file bad.csv" in tb
    assert "bad.csv has no header" in detail(browser, "detail-logs")
    browser.click("#detail-close")
    assert detail(browser, "detail-body") == "(hidden)"

    # The timed-out attempt: its traceback says TaskTimeout, its log is there.
    browser.type("#filter", "hang")
    (row,) = rows(browser)
    assert row[0] == "hang" and row[1] == "failed"
    browser.click("#table-rows .row [data-act=traceback]")
    assert "TaskTimeout" in detail(browser, "detail-traceback")
    assert "hang: waiting" in detail(browser, "detail-logs")
    browser.click("#detail-close")

    # A task's logs, one click from its row: the retried task, both attempts.
    browser.eval("document.getElementById('filter').value = ''")
    browser.type("#filter", "flaky")
    assert [r[0] for r in rows(browser)] == ["flaky"]
    assert rows(browser)[0][2] == "2"  # attempts
    browser.click("#table-rows .row [data-act=logs]")
    logs = detail(browser, "detail-logs")
    assert "attempt 1: 1 record" in logs and "attempt 2: 1 record" in logs
    assert "flaky: night 2, attempt 1" in logs and "flaky: night 2, attempt 2" in logs
    browser.click("#detail-close")

    # Filtering by state lists exactly the failed tasks; the text filter narrows more.
    browser.eval("document.getElementById('filter').value = ''")
    browser.eval(
        "(() => { const s = document.getElementById('state-filter'); s.value = 'failed';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    assert sorted(r[0] for r in rows(browser)) == failed
    assert shown(browser).startswith(f"showing 3 of {c.tasks_planned} tasks")
    browser.eval(
        "(() => { const s = document.getElementById('state-filter'); s.value = '';"
        " s.dispatchEvent(new Event('change')); })()"
    )

    # The map's items are folded under it, and unfold with a click.
    before = rows(browser)
    assert [r[0] for r in before if r[0].endswith("parse (4 items)")] == ["\u25b8parse (4 items)"]
    assert not any(r[0].startswith("('parse'") for r in before)
    browser.click("#table-rows .row [data-act=fold]")
    after = [r[0] for r in rows(browser)]
    assert len(after) == len(before) + 4
    assert "('parse', 2)" in after and "('parse', 0)" in after

    # Process tasks ran (not loaded: checkpoint=False), one of them failed.
    by_name = {r[0]: r for r in rows(browser)}
    assert by_name["square"][1] == "done" and by_name["square"][2] == "1"
    assert by_name["square"][8] == "logs (3)"  # streamed from its child process
    square = list(result.status).index("square")
    browser.click(f"#table-rows .row[data-t='{square}'] [data-act=logs]")
    assert "child line 1" in detail(browser, "detail-logs")
    browser.click("#detail-close")
    assert by_name["broken"][1] == "failed"
    assert by_name["files"][7] == "loaded from checkpoint"

    # Sorting by state puts the states in order; again, in reverse (the map folded
    # again: unfolded, its items follow it, sorted among themselves).
    browser.click("#table-rows .row [data-act=fold]")
    assert len(rows(browser)) == len(before)
    browser.click("#table-head span[data-key=state]")
    order = ["done", "failed", "skipped", "cancelled"]
    states = [order.index(r[1]) for r in rows(browser)]
    assert states == sorted(states)
    browser.click("#table-head span[data-key=state]")
    states = [order.index(r[1]) for r in rows(browser)]
    assert states == sorted(states, reverse=True)

    # A bar of the timeline opens its task: the timed-out attempt of 'hang'.
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    hang = browser.eval(f"window.dagexecReport.barOf({list(result.status).index('hang')})")
    browser.click_at(*hang)
    assert browser.eval("document.querySelector('#detail h3').innerText") == "hang"
    assert hang_outcome in detail(browser, "detail-body")
    browser.click("#detail-close")

    # Zooming the timeline narrows the time shown.
    whole = browser.eval("document.getElementById('zoom-range').innerText")
    browser.click("#zoom-in")
    assert browser.eval("document.getElementById('zoom-range').innerText") != whole
    browser.click("#zoom-reset")
    assert browser.eval("document.getElementById('zoom-range').innerText") == whole
    assert browser.eval("document.getElementById('timeline').height") > 0


def test_the_readme_nightly_batch_writes_a_report_a_browser_opens(
    browser: Chromium, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.S | re.M)
    [code] = [b for b in blocks if "def list_files" in b]
    assert "report_html(" in code and "logs=True" in code
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        namespace: dict[str, Any] = {"__name__": "__docs__"}
        exec(compile(code, "README.md", "exec"), namespace)
    # The hung upload's first attempt: "timed out", or "abandoned" if the run ended
    # before its thread returned (as for hang above).
    hung = {r.outcome for r in namespace["result"].trace} & {"timed out", "abandoned"}
    assert hung
    (page,) = tmp_path.glob("*.html")
    assert not NETWORK.search(page.read_text(encoding="utf-8"))
    browser.open(page)
    assert browser.eval("document.getElementById('failures').innerText") == "No task failed."
    legend = browser.eval("document.getElementById('legend').innerText")
    assert "retried" in legend and all(outcome in legend for outcome in hung)
    assert any(r[0].endswith("upload (4 items)") for r in rows(browser))
    browser.type("#filter", "upload', 1")
    assert [r[0] for r in rows(browser)] == ["('upload', 1)"]
    browser.click("#table-rows .row [data-act=logs]")
    logs = detail(browser, "detail-logs")
    assert "attempt 1: 1 record" in logs and "attempt 2: 1 record" in logs
    assert "uploading 3 rows" in logs


def test_many_failures_list_the_first_200_and_say_how_many_more(
    browser: Chromium, tmp_path: Path
) -> None:
    def bad(i: int) -> None:
        raise ValueError(f"bad {i}")

    g = Graph()
    g.add("n", lambda: list(range(250)))
    g.map("bad", bad, over="n")
    result = dagexec.run(g, workers=2, trace=True, on_error="continue")
    page = tmp_path / "many.html"
    result.report_html(page)
    browser.open(page)
    items = browser.eval("[...document.querySelectorAll('#failures li')].map(li => li.innerText)")
    assert len(items) == 201
    assert items[-1] == "and 50 more: filter the table by the state failed"
