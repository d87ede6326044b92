"""dagexec.explain: why a checkpointed run would run each task (issue 23 item 5)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import dagexec


class Recorder:
    """The tasks that really ran, by name (a module-level instance: not part of identities)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: set[Any] = set()

    def __call__(self) -> None:
        with self.lock:
            self.names.add(dagexec.current_task().name)

    def take(self) -> set[Any]:
        with self.lock:
            names, self.names = self.names, set()
        return names


RAN = Recorder()
# A value whose bytes no longer match their digest: damaged below SQLite.
_GARBLE = "UPDATE dagexec_values SET value = CAST(X'00' || value AS BLOB)"


def plus(*xs: int) -> int:
    RAN()
    return sum(xs) + 1


def times(*xs: int) -> int:
    RAN()
    return sum(xs) * 2 + 1


def minus(*xs: int) -> int:
    RAN()
    return sum(xs) - 3


def total(xs: list[int]) -> int:
    RAN()
    return sum(xs)


def listing() -> list[int]:
    RAN()
    return [1, 2, 3]


CODES = (plus, times, minus)


def _diamond(b_code: Any = plus, c_const: int = 1, d_deps: tuple[str, ...] = ("b", "c")) -> Any:
    g = dagexec.Graph()
    g.add("a", plus, args=(0,))
    g.add("b", b_code, deps=["a"], args=(0,))
    g.add("c", plus, deps=["a"], args=(c_const,))
    g.add("d", plus, deps=list(d_deps), args=(0,))
    return g


def _reasons(explanation: Any) -> dict[Any, str]:
    return {name: reason.kind for name, reason in explanation.run.items()}


def test_every_reason_in_its_precedence(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    first = dagexec.explain(_diamond(), checkpoint=path)
    assert _reasons(first) == dict.fromkeys("abcd", "not stored")
    assert not path.exists()  # explain never creates the file
    dagexec.run(_diamond(), checkpoint=path)
    assert _reasons(dagexec.explain(_diamond(), checkpoint=path)) == {}
    assert dagexec.explain(_diamond(), checkpoint=path).load == ("d",)

    edited = dagexec.explain(_diamond(b_code=times), checkpoint=path)
    assert _reasons(edited) == {"b": "code changed", "d": "upstream changed"}
    assert "function 'times'" in str(edited.run["b"])
    assert "upstream task 'b' changed" in str(edited.run["d"])
    assert set(edited.load) == {"a", "c"}

    constant = dagexec.explain(_diamond(c_const=5), checkpoint=path)
    assert _reasons(constant) == {"c": "constant changed", "d": "upstream changed"}

    rewired = dagexec.explain(_diamond(d_deps=("c", "b")), checkpoint=path)
    assert _reasons(rewired) == {"d": "upstream changed"}

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM dagexec_values WHERE name = ?", ("'d'",))
        conn.execute(
            "UPDATE dagexec_values SET value = CAST(X'00' || value AS BLOB) WHERE name = ?",
            ("'b'",),
        )
    damaged = dagexec.explain(_diamond(), checkpoint=path)
    assert _reasons(damaged) == {"d": "not stored", "b": "damaged"}
    assert "deleted" in str(damaged.run["d"])


def test_not_checkpointed_and_decided_during_the_run(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("files", lambda: ["x", "y"], checkpoint=False)
    g.map("parsed", str.upper, over="files")
    g.add("total", lambda parsed: "".join(parsed), deps=["parsed"])
    g.add("count", len, deps=["files"])
    dagexec.run(g, checkpoint=path)
    e = dagexec.explain(g, checkpoint=path)
    assert _reasons(e) == {"files": "not checkpointed"}
    assert set(e.during_run) == {"parsed", "total", "count"}
    assert "downstream of map 'parsed'" in e.during_run["total"]
    assert "downstream of 'files' (checkpoint=False)" in e.during_run["count"]
    assert "the list it maps over ('files') is made during the run" in e.during_run["parsed"]
    text = str(e)
    assert text.startswith("1 would run, 0 would load, 3 decided during the run")


def test_bad_arguments_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="graph must be a dagexec.Graph"):
        dagexec.explain("g", checkpoint=tmp_path / "c")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        dagexec.explain(_diamond(), checkpoint=3)  # type: ignore[arg-type]


def test_command_line_explain(tmp_path: Path) -> None:
    source = tmp_path / "job.py"
    source.write_text(
        "import dagexec\n"
        "K = 1\n"
        "graph = dagexec.Graph()\n"
        "graph.add('a', lambda: K)\n"
        "graph.add('b', lambda a: a + 1, deps=['a'])\n"
    )
    path = tmp_path / "c.sqlite"
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dagexec", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    assert cli("run", f"{source}:graph", "--checkpoint", str(path)).returncode == 0
    source.write_text(source.read_text().replace("K = 1", "K = 2"))
    out = cli("explain", f"{source}:graph", "--checkpoint", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "2 would run, 0 would load, 0 decided during the run",
        "run   'a': its code changed (function '<lambda>'"
        ", or a helper, class or constant of its module that it uses)",
        "run   'b': upstream task 'a' changed",
    ]
    missing = cli("explain", f"{source}:graph")
    assert missing.returncode == 2 and "--checkpoint" in missing.stderr
    foreign = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as conn, conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    os.chmod(foreign, 0o600)
    refused = cli("explain", f"{source}:graph", "--checkpoint", str(foreign))
    assert refused.returncode == 1
    assert refused.stderr.startswith("dagexec: error: ") and "something else" in refused.stderr


# The prediction is the run's decision: tests/test_explain_edits.py edits random graphs.
