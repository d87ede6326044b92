"""Every kind of process a run starts imports the same dagexec: the installed one in CI.

CI installs the wheel built from its clean clone into a fresh virtual environment
and runs this suite from a copy of the repository without ``dagexec/``, with
``DAGEXEC_EXPECT_INSTALLED=1`` (see ``.ci/run``). Then these tests are strict: the
pytest process, a ``python -m dagexec`` subprocess (started from the copy's root,
as the CLI tests start theirs, where ``-m`` puts the working directory first on
``sys.path``) and an ``isolate="process"`` child all import dagexec from the
environment's site-packages, from a non-editable install, and the child loads its
code (``child.py``, by path) from that same package. Anywhere else (an editable
install, a developer's checkout) they check only that the three processes agree.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import process_tasks as pt
import pytest

import dagexec

ROOT = Path(__file__).resolve().parent.parent
STRICT = os.environ.get("DAGEXEC_EXPECT_INSTALLED") == "1"


def _package(file: str) -> Path:
    """The dagexec package directory a module file of it lies in."""
    path = Path(file).resolve()
    return next(p for p in path.parents if p.name == "dagexec")


HERE = _package(dagexec.__file__)


def test_the_pytest_process_imports_the_expected_dagexec() -> None:
    if not STRICT:
        pytest.skip("DAGEXEC_EXPECT_INSTALLED is not 1: only consistency is checked here")
    assert not (ROOT / "dagexec").exists(), "run the installed-wheel suite without dagexec/"
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert purelib / "dagexec" == HERE, (HERE, purelib)
    assert ROOT not in HERE.parents
    direct_url = importlib.metadata.distribution("dagexec").read_text("direct_url.json")
    assert not json.loads(direct_url or "{}").get("dir_info", {}).get("editable"), direct_url
    assert dagexec.__version__ == importlib.metadata.version("dagexec")


def test_a_process_child_imports_the_same_dagexec() -> None:
    g = dagexec.Graph()
    g.add("where", pt.dagexec_origin, isolate="process")
    where = dagexec.run(g, workers=1)["where"]
    assert _package(where["dagexec"]) == HERE
    assert _package(where["child"]) == HERE  # the child's own code, loaded by path


def test_the_command_line_imports_the_same_dagexec(tmp_path: Path) -> None:
    (tmp_path / "where_graph.py").write_text(
        textwrap.dedent(
            """
            import sys

            import dagexec
            import process_tasks

            graph = dagexec.Graph()
            graph.add("cli", lambda: sys.modules["dagexec"].__file__)
            graph.add("child", process_tasks.dagexec_origin, isolate="process")
            """
        )
    )
    out = tmp_path / "values.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}  # for process_tasks
    graph = f"{tmp_path / 'where_graph.py'}:graph"
    subprocess.run(
        [sys.executable, "-m", "dagexec", "run", graph, "--workers", "1", "--json", str(out)],
        cwd=ROOT,  # as the CLI tests run it: -m puts the working directory on sys.path
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    values = json.loads(out.read_text())["values"]
    assert _package(values["cli"]) == HERE
    assert _package(values["child"]["dagexec"]) == HERE
    assert _package(values["child"]["child"]) == HERE
