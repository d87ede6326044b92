"""Every Python example in the README is real code: extract each one and run it.

A block whose first line is ``# fragment: ...`` is shown as a fragment (for
example, call signatures) and is only checked to be marked that way; every
other block runs on its own, in a fresh namespace and a temporary directory.
Blocks that use dask are skipped when the dask extra is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FRAGMENT = "# fragment:"


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of every ```python block."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(r"```python\n(.*?)```", text, re.S)
    ]


BLOCKS = python_blocks()


def _needs_dask(code: str) -> bool:
    return bool(re.search(r"^\s*(import|from) (dask|distributed)|dagexec\.dask", code, re.M))


@pytest.fixture(scope="module")
def offload_thread() -> None:
    # distributed keeps one process-wide offload thread, started on first use and
    # never stopped: start it before the leak check's snapshot (as test_dask does).
    if importlib.util.find_spec("distributed") is not None:
        from distributed.utils import _offload_executor

        _offload_executor.submit(int).result(timeout=30)


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[f"line{line}" for line, _ in BLOCKS])
def test_readme_python_block_runs(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offload_thread: None
) -> None:
    if code.startswith(FRAGMENT):
        pytest.skip(f"README line {line}: marked as a fragment")
    if _needs_dask(code):
        for module in ("dask", "distributed"):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"README line {line} needs the dask extra ({module})")
    monkeypatch.chdir(tmp_path)  # examples may write files (traces, SVGs)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    # Blank lines up to the block's own line, so a traceback points into the README.
    source = "\n" * (line - 1) + code
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, str(README), "exec"), namespace)
        for name, value in namespace.items():  # run the test functions a block defines
            if name.startswith("test_") and callable(value):
                value()
    finally:
        if _needs_dask(code):
            import dagexec.dask

            dagexec.dask.shutdown()


def test_every_python_block_runs_or_is_marked_a_fragment() -> None:
    fragments = [line for line, code in BLOCKS if code.startswith(FRAGMENT)]
    assert len(BLOCKS) >= 10
    assert len(fragments) <= 2, f"fragments at README lines {fragments}: make them runnable"


def test_readme_opens_with_the_demo_and_the_test_command() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)\n```", text, re.S)[:2]
    assert commands[0] == "python -m dagexec demo"
    assert "pip install" in commands[1] and "'.[test]'" in commands[1]
    assert commands[1].endswith("python -m pytest")


def test_quick_start_runs_as_pasted_and_prints_the_report() -> None:
    [code] = [c for _, c in BLOCKS if "def make_report" in c]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    assert out.getvalue() == "3 values, total 6\n"
