"""``python -m dagexec run --report OUT.html`` and ``--logs [LEVEL]`` (issue 35)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from test_cli import dagexec

JOB = """\
import logging
from dagexec import Graph
log = logging.getLogger("job")
def load():
    log.debug("load: debug")
    log.info("load: started")
    return 1
def check(x):
    log.info("check got %d", x)
    log.warning("check: about to fail")
    raise ValueError("check failed")
graph = Graph()
graph.add("load", load)
graph.add("check", check, deps=["load"])
"""


def job(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(JOB, encoding="utf-8")
    return path


def page_data(path: Path) -> Any:
    """The run's data as the page holds it (see dagexec/_observation/report.py)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'id="report-data">(.*?)</script>', text, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_logs_prints_a_failed_tasks_records_under_its_traceback(tmp_path: Path) -> None:
    proc = dagexec("run", f"{job(tmp_path)}:graph", "--logs")
    assert proc.returncode == 1
    err = proc.stderr
    # The user's own stream shows what it showed before: WARNING only (lastResort).
    assert err.count("check: about to fail") == 2  # once as the user's, once captured
    assert "check got 1" in err and "load: started" not in err  # only the failed task's
    traceback_at = err.index("ValueError: check failed")
    logged_at = err.index("task check logged (attempt 1: 2 records):")
    assert traceback_at < logged_at < err.index("INFO job: check got 1")


def test_logs_takes_a_level_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    proc = dagexec("run", f"{job(tmp_path)}:graph", "--logs=WARNING")
    assert "check got 1" not in proc.stderr
    assert "task check logged (attempt 1: 1 record):" in proc.stderr
    bad = dagexec("run", f"{job(tmp_path)}:graph", "--logs=LOUD")
    assert bad.returncode == 2 and "--logs" in bad.stderr and "DEBUG" in bad.stderr


def test_report_writes_the_page_with_tracebacks_and_logs(tmp_path: Path) -> None:
    out = tmp_path / "night.html"
    proc = dagexec("run", f"{job(tmp_path)}:graph", "--report", out)
    assert proc.returncode == 1
    assert f"report written to {out}" in proc.stdout
    data = page_data(out)
    assert data["names"] == ["load", "check"]
    assert "ValueError: check failed" in data["tracebacks"]["1"]
    logged = data["logs"]
    assert [r[3] for r in logged["0"][0][2]] == ["load: started"]
    assert len(data["attempts"]) == 2 * 8  # traced: both ran
    # Without --logs the failed task's records are not printed, only kept for the page.
    assert "task check logged" not in proc.stderr


def test_report_with_a_level_keeps_that_level(tmp_path: Path) -> None:
    out = tmp_path / "night.html"
    dagexec("run", f"{job(tmp_path)}:graph", "--report", out, "--logs=DEBUG")
    logged = page_data(out)["logs"]
    assert [r[3] for r in logged["0"][0][2]] == ["load: debug", "load: started"]
