"""No module of ``dagexec`` grows past 500 lines (issue 20, step 4).

A module that long has usually taken on a second job; splitting it along
that seam keeps each one readable alone (the project's style aims for files
under about 400 lines; 500 is the hard stop). A module let over it for a
while would be listed in ``OVER_THE_LIMIT`` with the reason; the list is empty
now and only shrinks. Reads the files of the package imported (a checkout, or the
installed wheel CI tests); no threads.
"""

from __future__ import annotations

from pathlib import Path

import dagexec

# The package imported, whether a checkout or an installed wheel (as CI tests it).
PACKAGE = Path(dagexec.__file__).resolve().parent

MAX_LINES = 500

# Modules (paths under dagexec/) allowed over MAX_LINES for now, with the reason:
# none since _engine/front/executor.py was split (its queued path is _engine/front/queued.py).
OVER_THE_LIMIT: dict[str, str] = {}


def line_counts() -> dict[str, int]:
    """Lines per module, by path under dagexec/ ('_core/graph.py')."""
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def over_the_limit(counts: dict[str, int], allowed: dict[str, str]) -> dict[str, int]:
    """Modules longer than MAX_LINES and not allowed to be, with their lengths."""
    return {m: n for m, n in counts.items() if n > MAX_LINES and m not in allowed}


def stale_entries(counts: dict[str, int], allowed: dict[str, str]) -> list[str]:
    """Allowed modules that are within MAX_LINES now (or gone): their entries must go."""
    return [m for m in allowed if counts.get(m, 0) <= MAX_LINES]


def test_no_module_is_longer_than_the_limit() -> None:
    too_long = over_the_limit(line_counts(), OVER_THE_LIMIT)
    assert not too_long, (
        f"modules over {MAX_LINES} lines: {too_long}; split each along a seam into "
        "modules with one job (docs/design.md, Modules, lists where each job lives)"
    )


def test_every_module_allowed_over_the_limit_still_is() -> None:
    """An entry for a module that was split (or removed) must go, so the list only shrinks."""
    stale = stale_entries(line_counts(), OVER_THE_LIMIT)
    assert not stale, f"OVER_THE_LIMIT lists modules within {MAX_LINES} lines, drop them: {stale}"


def test_the_checks_flag_a_long_module_and_a_stale_entry() -> None:
    # With nothing allowed, the two tests above pass on any tree within the
    # limit; the checks themselves must still see a module one line over it.
    counts = {"_engine/long.py": MAX_LINES + 1, "_core/short.py": MAX_LINES}
    assert over_the_limit(counts, {}) == {"_engine/long.py": MAX_LINES + 1}
    assert over_the_limit(counts, {"_engine/long.py": "why"}) == {}
    assert stale_entries(counts, {"_engine/long.py": "why"}) == []
    assert stale_entries(counts, {"_core/short.py": "why", "gone.py": "why"}) == [
        "_core/short.py",
        "gone.py",
    ]


def test_the_count_sees_every_module_and_counts_lines() -> None:
    # The checker itself must not be blind: it finds modules in every layer
    # folder and counts what wc -l counts.
    counts = line_counts()
    assert {"__init__.py", "_core/graph.py", "_state/runstate.py"} <= set(counts)
    text = (PACKAGE / "_core" / "version.py").read_text(encoding="utf-8")
    assert counts["_core/version.py"] == text.count("\n") > 0
