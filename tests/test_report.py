"""``result.report_html``'s file, read without a browser (tests/test_report_browser.py
opens it in one): what it refuses, what its data holds, what no name can break."""

from __future__ import annotations

import json
import logging
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

import dagexec
from dagexec import Graph
from dagexec._observation.report import MAX_TRACEBACK, report_data

log = logging.getLogger("report-test")
HOSTILE = "</script><script>window.pwned = 1</script><!--"


def page_data(path: Path) -> Any:
    found = re.search(r'id="report-data">(.*?)</script>', path.read_text("utf-8"), re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_a_run_without_trace_is_refused_naming_the_fix(tmp_path: Path) -> None:
    g = Graph()
    g.add("a", int)
    result = dagexec.run(g, workers=1)
    with pytest.raises(ValueError, match=r"trace=True"):
        result.report_html(tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_hostile_names_and_messages_stay_data(tmp_path: Path) -> None:
    def shout() -> None:
        log.warning(HOSTILE)
        raise ValueError(HOSTILE)

    g = Graph()
    g.add(HOSTILE, shout)
    result = dagexec.run(g, workers=1, trace=True, logs=True, on_error="continue")
    page = tmp_path / "r.html"
    result.report_html(page)
    text = page.read_text("utf-8")
    assert text.count("</script>") == 2  # the data's and the script's own
    assert "<!--" not in text
    data = page_data(page)
    assert data["names"] == [HOSTILE]
    assert data["logs"]["0"][0][2][0][3] == HOSTILE
    assert HOSTILE in data["tracebacks"]["0"]


def test_the_data_adds_up_and_groups_process_tasks_by_function(tmp_path: Path) -> None:
    import process_tasks

    def boom() -> None:
        raise RecursionError("x" * (3 * MAX_TRACEBACK))

    g = Graph()
    g.add("src", lambda: [1, 2, 3])
    g.map("sq", lambda x: x * x, over="src", resources={"db": 1})
    g.add("square", process_tasks.square, args=(3,), isolate="process")
    g.add("boom", boom)
    g.add("after", lambda b: b, deps=["boom"])
    result = dagexec.run(g, workers=2, trace=True, on_error="continue", resources={"db": 1})
    data = report_data(pickle.loads(pickle.dumps(result)))  # a result kept for later
    summary = data["summary"]
    assert sum(summary["counts"].values()) == summary["planned"] == len(data["names"])
    assert summary["counts"] == {"done": 6, "failed": 1, "skipped": 1, "cancelled": 0}
    groups = [data["groups"][g] for g in data["tasks"]["group"]]
    by_name = dict(zip(data["names"], groups, strict=True))
    assert by_name["square"] == "square" and by_name["('sq', 1)"] == "sq"
    parents = data["tasks"]["parent"]
    assert [data["names"][p] for p in parents if p >= 0] == ["sq", "sq", "sq"]
    assert len(data["attempts"]) == 8 * len(result.trace)
    # The map's own options are its items': the plan says the map needs them too.
    in_map = [k for k, n in enumerate(data["names"]) if n == "sq" or "'sq'" in n]
    assert data["needs"] == {str(k): [["db", 1]] for k in in_map}
    cut = data["tracebacks"][str(data["names"].index("boom"))]
    assert cut.startswith("[... ") and len(cut) < MAX_TRACEBACK + 100
    assert cut.rstrip().endswith("dagexec: raised by task 'boom'")
    assert summary["logs_captured"] is False and data["logs"] == {}
