"""The README and every page in docs/ are real: their examples run, their links
resolve, and known false statements cannot come back.

Every ```python block of README.md and docs/*.md is extracted and run, in a fresh
namespace and a temporary directory; a block that defines ``test_*`` functions
has them called too. A block whose first line is ``# fragment: ...`` is shown as
a fragment (for example, call signatures) and is only checked to be marked that
way; each page may have at most two. Blocks that use dask are skipped when the
dask extra is not installed (on the free-threaded build, where it cannot be).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import docs_checks as dc
import pytest

import dagexec

ROOT = Path(__file__).resolve().parent.parent
# The package imported (a checkout, or the installed wheel CI tests): its files.
PACKAGE = Path(dagexec.__file__).resolve().parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FRAGMENT = "# fragment:"
MAX_FRAGMENTS_PER_PAGE = 2
MAX_README_LINES = 500


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _shown(file: Path) -> str:
    """A file's repository path: dagexec/... for the package, wherever it is installed."""
    base = PACKAGE.parent if file.is_relative_to(PACKAGE) else ROOT
    return file.relative_to(base).as_posix()


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of every ```python block of one page."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)
    ]


BLOCKS = [(page, line, code) for page in PAGES for line, code in python_blocks(page)]
README_BLOCKS = [code for page, _, code in BLOCKS if page == README]


def _needs_dask(code: str) -> bool:
    return bool(re.search(r"^\s*(import|from) (dask|distributed)|dagexec\.dask", code, re.M))


@pytest.fixture(scope="module")
def offload_thread() -> None:
    # distributed keeps one process-wide offload thread, started on first use and
    # never stopped: start it before the leak check's snapshot (as test_dask does).
    if importlib.util.find_spec("distributed") is not None:
        from distributed.utils import _offload_executor

        _offload_executor.submit(int).result(timeout=30)


def _run_block(page: Path, line: int, code: str) -> None:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    # Blank lines up to the block's own line, so a traceback points into the page.
    source = "\n" * (line - 1) + code
    try:
        exec(compile(source, str(page), "exec"), namespace)
        for name, value in namespace.items():  # run the test functions a block defines
            if name.startswith("test_") and callable(value):
                value()
    finally:
        if _needs_dask(code):
            import dagexec.dask

            dagexec.dask.shutdown()


@pytest.mark.parametrize(
    ("page", "line", "code"), BLOCKS, ids=[f"{_rel(p)}:{line}" for p, line, _ in BLOCKS]
)
def test_python_block_runs(
    page: Path,
    line: int,
    code: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    offload_thread: None,
) -> None:
    if code.startswith(FRAGMENT):
        pytest.skip(f"{_rel(page)} line {line}: marked as a fragment")
    if _needs_dask(code):
        for module in ("dask", "distributed"):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"{_rel(page)} line {line} needs the dask extra ({module})")
    monkeypatch.chdir(tmp_path)  # examples may write files (traces, SVGs)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        _run_block(page, line, code)


def test_every_page_has_few_fragments() -> None:
    assert len(README_BLOCKS) >= 3
    assert sum(len(python_blocks(p)) for p in PAGES) >= 20
    for page in PAGES:
        fragments = [line for line, code in python_blocks(page) if code.startswith(FRAGMENT)]
        assert len(fragments) <= MAX_FRAGMENTS_PER_PAGE, (
            f"{_rel(page)}: fragments at lines {fragments}: make them runnable"
        )


def test_the_development_guide_counts_the_fragments_it_says_are_skipped() -> None:
    fragments = sum(1 for _, _, code in BLOCKS if code.startswith(FRAGMENT))
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| (\d+) fragments", text, re.M) == [str(fragments)]


def test_readme_opens_with_the_demo_and_the_whole_test_suite() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)\n```", text, re.S)[:2]
    assert commands[0] == "python -m dagexec demo"
    # .ci/run greps the first line starting so, and runs it.
    assert commands[1].startswith("python -m venv .venv && ")
    assert "'.[test,dask]'" in commands[1]  # the dask tests are part of the suite
    assert commands[1].endswith(".venv/bin/python -m pytest")
    [ci_line] = [line for line in text.splitlines() if line.startswith("python -m venv .venv && ")]
    assert ci_line == commands[1]


def test_quick_start_runs_as_pasted_and_prints_the_report() -> None:
    [code] = [c for c in README_BLOCKS if "def make_report" in c]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "__docs__"})
    assert out.getvalue() == "3 values, total 6\n"


def test_nightly_batch_recipe_prints_what_its_comments_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [code] = [c for c in README_BLOCKS if "def list_files" in c]
    for feature in ("g.map(", "retries=", "timeout=", '"db"', 'run_if="all_done"',
                    "checkpoint=", "progress=True", "report_html(", "logs=True"):  # fmt: skip
        assert feature in code, feature
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(code, str(README), "exec"), {"__name__": "__docs__"})
    assert out.getvalue() == "30 ok\n2 {'db': 2}\n"
    assert err.getvalue().startswith("dagexec: ")  # progress: one summary line, not a tty


# --- structure -------------------------------------------------------------------


def _headings(page: Path, level: int) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return re.findall(rf"^{'#' * level} (.+)$", text, re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_readme_fits_and_keeps_its_order() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES
    sections = [_slug(h) for h in _headings(README, 2)]
    order = ["why", "quick-start", "install", "a-nightly-batch", "api", "errors",
             "guarantees", "testing-helpers", "command-line"]  # fmt: skip
    found = [next(i for i, s in enumerate(sections) if s.startswith(o)) for o in order]
    assert found == sorted(found), sections


def test_readme_table_of_contents_is_rendered_and_complete() -> None:
    text = README.read_text(encoding="utf-8")
    assert "<!--" not in text  # an HTML comment is invisible once rendered
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"^- \[.+\]\(#([^)]+)\)$", contents, re.M)
    sections = [_slug(h) for h in _headings(README, 2) if h != "Contents"]
    assert links == [s for s in sections if s != "license"]


def test_required_docs_pages_exist() -> None:
    # Every other page is linked from docs/README.md (tests/test_docs_index.py).
    for name in ("README", "performance", "design", "free-threading", "dask",
                 "checkpoints", "thread-safety"):  # fmt: skip
        assert (DOCS / f"{name}.md").is_file(), name
    assert "Layers" in _headings(DOCS / "design.md", 2)


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{_rel(page)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


# Statements that were once in the README and became false; each must stay out.
CONTRADICTIONS = {
    r"\bno retries\b": "retries exist (retries=)",
    r"per-task\s+timeouts,\s+persistence": "per-task timeouts and checkpoints exist",
    r"persistence\s+of\s+results\s+between\s+runs": "checkpoint= persists results",
    r"tasks\s+cannot\s+add\s+tasks": "g.map adds tasks while a graph runs",
    r"graphs\s+that\s+change\s+while\s+running": "g.map adds tasks while a graph runs",
    r"a\s+static\s+graph": "g.map grows the graph at run time",
    r"pip install ['\"]?dagexec\b": "dagexec is on no index: install from a clone or a URL",
    r"-e '\.\[test\]' && \.venv/bin/python -m pytest": "the test command installs .[test,dask]",
    r"re-runs\s+it\s+and\s+everything\s+downstream": (
        "a task downstream of a map or a checkpoint=False task loads when its inputs "
        "come back equal (issue 31)"
    ),
    # issue 28's list of drifts
    r"tasks\s+run\s+on\s+threads\s+(only|in\s+one\s+process)": 'isolate="process" exists',
    r"use\s+`?concurrent\.futures\.ProcessPoolExecutor`?\s+\(call\s+it": 'isolate="process" exists',
    r"only\s+the\s+call\s+in\s+`?_engine/(\w+/)?worker\.py`?\s+changes": "backends: isolate=",
    r"elsewhere:\s+the\s+call\s+in\s+`?_engine/(\w+/)?worker\.py": "backends: isolate=",
    r"\(`g\.add`\s+and\s+`@g\.task`\s+only\)": "g.map takes run_if too",
    r"one\s+(trace\s+)?record\s+per\s+task": "the trace has one record per attempt",
    r"per\s+task\s+that\s+ran\s+\(its\s+last": "the trace has one record per attempt",
    r"skip\w*\s+only\s+(what|tests\s+that)\s+cannot\s+run": "docs/development.md lists more",
    r"ownership\s+table\s+is\s+in\s+the\s+header": "the one table is docs/thread-safety.md",
}

# Statements a page must keep (a behaviour a reader would otherwise not expect).
REQUIRED = {
    "docs/run-control.md": [r"a task loaded from a checkpoint is dispatched, started and ended"],
    "docs/recipes.md": [r"## I/O on threads, CPU on processes, in one graph"],
}


def test_required_statements_are_kept() -> None:
    missing = [
        f"{page}: {pattern}"
        for page, patterns in REQUIRED.items()
        for pattern in patterns
        if not re.search(pattern, (ROOT / page).read_text(encoding="utf-8"), re.I)
    ]
    assert not missing, missing


@pytest.mark.parametrize("pattern", CONTRADICTIONS)
def test_no_known_contradiction_comes_back(pattern: str) -> None:
    code = [f for d in (PACKAGE, ROOT / "tests", ROOT / "benchmarks") for f in d.rglob("*.py")]
    files = [*PAGES, *sorted(f for f in code if f != Path(__file__).resolve())]
    hits = [
        f"{_shown(f)}: {m.group(0)!r}"
        for f in files
        for m in re.finditer(pattern, f.read_text(encoding="utf-8"), re.I)
    ]
    assert not hits, f"{CONTRADICTIONS[pattern]}: {hits}"


# --- names, paths, commands and figures (conventions: tests/docs_checks.py) ------------


def test_every_name_in_backticks_is_in_the_api() -> None:
    commands = dc.cli_options()
    bad = [
        f"{_rel(page)}:{line}: {problem}"
        for page in PAGES
        for line, code in dc.spans(page.read_text(encoding="utf-8"))
        for problem in [*dc.name_problems_in(code), *dc.cli_problems_in(code, commands)]
    ]
    assert not bad, "\n".join(bad)


def test_every_command_line_shown_exists() -> None:
    commands = dc.cli_options()
    bad = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for line, command in dc.shell_lines(text):
            problems = [*dc.cli_problems_in(command, commands), *dc.benchmark_problems_in(command)]
            bad += [f"{_rel(page)}:{line}: {p}" for p in problems]
        for line, code in dc.spans(text):
            bad += [f"{_rel(page)}:{line}: {p}" for p in dc.benchmark_problems_in(code)]
    assert not bad, "\n".join(bad)


def _code_files() -> list[Path]:
    return [f for d in (PACKAGE, ROOT / "tests", ROOT / "benchmarks") for f in d.rglob("*.py")]


def test_every_repository_path_exists() -> None:
    bad = []
    for page in PAGES:
        text = dc.prose(page.read_text(encoding="utf-8"))
        bad += [f"{_rel(page)}:{p}" for p in dc.path_problems_in(text)]
    for file in _code_files():
        for line, doc in dc.docstrings(file):
            bad += [f"{_shown(file)}:{p}" for p in dc.path_problems_in(doc, line)]
    assert not bad, "\n".join(bad)


def test_measured_figures_live_on_the_measured_pages() -> None:
    bad = [p for page in PAGES for p in dc.figure_problems(page, _rel(page))]
    assert not bad, "\n".join(bad)


def test_the_readme_pins_the_tag_of_this_version() -> None:
    # .ci/readme_installs.py tags a copy of the clone v<version>, as a release is,
    # and installs the README's git URL from it: a stale tag fails there too.
    tags = re.findall(r"github\.com/OWNER/dagexec@(v[\w.]+)", README.read_text(encoding="utf-8"))
    assert tags and set(tags) == {f"v{dagexec.__version__}"}, tags
