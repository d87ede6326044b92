"""The docs stay findable: docs/README.md links every page, by reader, and
docs/design.md's table names every module of the package with its one job.

When you add a module to ``dagexec/``, add a row for it to the table under
"## Modules" in docs/design.md (its path under ``dagexec/`` and its one job);
when you add a page to ``docs/``, link it from docs/README.md under "For users"
or "For maintainers". These tests say which one is missing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dagexec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
DESIGN = DOCS / "design.md"
PACKAGE = Path(dagexec.__file__).resolve().parent  # a checkout's, or the installed wheel's

USER_SUBJECTS = ["tasks and graphs", "running", "checkpoints and explain", "processes",
                 "observing", "command line", "testing helpers", "dask", "recipes"]  # fmt: skip
MAINTAINER_SUBJECTS = ["design", "thread safety", "internals and speed", "development"]


def _section(text: str, heading: str) -> str:
    """The body of a ``## heading`` section, up to the next ``## `` heading."""
    body = text.split(f"\n## {heading}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def _linked_pages(text: str) -> set[str]:
    return set(re.findall(r"\]\(([\w.-]+\.md)(?:#[^)]*)?\)", text))


def test_every_docs_page_is_linked_from_the_docs_index() -> None:
    linked = _linked_pages(INDEX.read_text(encoding="utf-8"))
    pages = {p.name for p in DOCS.glob("*.md")} - {INDEX.name}
    missing = sorted(pages - linked)
    assert not missing, f"docs/README.md does not link {missing}: add a row for each"


def test_the_readme_links_the_docs_index() -> None:
    assert "(docs/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_index_has_one_part_per_reader_with_its_subjects() -> None:
    text = INDEX.read_text(encoding="utf-8")
    readers = (("For users", USER_SUBJECTS), ("For maintainers", MAINTAINER_SUBJECTS))
    for heading, subjects in readers:
        rows = re.findall(r"^\| ([^|]*?) \|", _section(text, heading), re.M)
        named = [r for r in rows if r and r not in ("subject", "---")]
        assert named == subjects, (heading, named)


def _needs_a_row(module: Path) -> bool:
    """Every module, except a package's ``__init__.py`` that holds only its docstring."""
    if module.name != "__init__.py" or module.parent == PACKAGE:
        return True
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return any(
        not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
        for node in tree.body
    )


def _design_rows() -> list[str]:
    table = _section(DESIGN.read_text(encoding="utf-8"), "Modules")
    return re.findall(r"^\| `([\w/]+\.py)` \| \S", table, re.M)


def test_the_design_table_lists_every_module_once() -> None:
    rows = _design_rows()
    modules = sorted(
        p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _needs_a_row(p)
    )
    missing = [m for m in modules if m not in rows]
    assert not missing, (
        f"docs/design.md, '## Modules', has no row for {missing}: add "
        "'| `<path under dagexec/>` | <its one job> |' in its room"
    )
    stale = [r for r in rows if not (PACKAGE / r).is_file()]
    assert not stale, f"docs/design.md, '## Modules', lists modules that do not exist: {stale}"
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert not twice, f"docs/design.md, '## Modules', lists these twice: {twice}"


def test_a_module_without_a_row_is_caught(tmp_path: Path) -> None:
    # The rule above, on a module it has not seen: it needs a row unless it is a
    # docstring-only __init__.py of a subpackage.
    (tmp_path / "pkg").mkdir()
    bare = tmp_path / "pkg" / "__init__.py"
    bare.write_text('"""Only a docstring."""\nfrom __future__ import annotations\n')
    assert not _needs_a_row(bare)
    bare.write_text('"""A docstring."""\nLOADERS = {}\n')
    assert _needs_a_row(bare)
    assert _needs_a_row(tmp_path / "pkg" / "new_module.py")
