"""docs/tasks.md's Python examples run, like the README's (see test_readme.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tasks.md"
BLOCKS = [
    (PAGE.read_text(encoding="utf-8").count("\n", 0, m.start()) + 2, m.group(1))
    for m in re.finditer(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
]


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[f"line{line}" for line, _ in BLOCKS])
def test_docs_tasks_python_block_runs(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if code.startswith("# fragment:"):
        pytest.skip(f"docs/tasks.md line {line}: marked as a fragment")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/tasks.md:{line}", "exec"), {"__name__": "__docs__"})
