"""What tests/test_readme.py checks the docs against: names, paths, commands, figures.

Each ``*_problems`` function returns readable lines (``page:line: what is wrong``),
empty when the docs agree with the code. The conventions, stated once:

- **Receivers.** In an inline code span, ``g.X`` / ``graph.X`` is a ``Graph``
  attribute, ``ex.X`` / ``executor.X`` an ``Executor`` one, ``result.X`` a
  ``RunResult`` one, ``future.X`` / ``run.X`` a ``RunFuture`` one, and ``C.X``
  for a public class ``C`` of dagexec is an attribute of ``C`` (private
  ``_names`` are internals, not checked). A dotted
  ``dagexec.X.Y`` (``dagexec.testing.X``, ``dagexec.dask.X``, a module path)
  must import or resolve, unless quoted (``"dagexec.resources"`` is a dask config
  key). ``python -m dagexec SUB --opt`` needs subcommand SUB
  with option --opt.
- **Paths.** ``dagexec/...``, ``tests/...``, ``benchmarks/...``, ``docs/...`` and a
  layer-relative ``_engine/workers/worker.py`` must exist; a bare ``_<module>.py``
  must be the name of a file of the package (a module name from before the layers
  is not).
- **Benchmark commands.** ``python benchmarks/<script> --opt`` needs the script and,
  in its argparse calls, the option.
- **Measured figures** (a number with MiB, GiB, KiB, MB, GB, ms, us, s or x) live on
  MEASURED_PAGES: a table cell holding one anywhere else fails, except in at most
  two README tables each linking to a measured page just above it; and a memory
  figure said to be a peak fails anywhere else.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagexec

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(dagexec.__file__).resolve().parent  # a checkout's, or the installed wheel's
MEASURED_PAGES = {"docs/performance.md", "docs/dask.md"}
README_FIGURE_TABLES = 2

RECEIVERS: dict[str, Any] = {
    "g": dagexec.Graph,
    "graph": dagexec.Graph,
    "ex": dagexec.Executor,
    "executor": dagexec.Executor,
    "result": dagexec.RunResult,
    "future": dagexec.RunFuture,
    "run": dagexec.RunFuture,
}
FILE_SUFFIXES = {"py", "md", "json", "svg", "sqlite", "txt", "csv", "toml", "html"}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_NUMBER_UNIT = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:MiB|GiB|KiB|MB|GB|ms|us|µs|s|x)(?![\w²])")
_MEMORY = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:MiB|GiB|KiB|MB|GB)\b")


# --- reading pages -------------------------------------------------------------------


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def prose(text: str) -> str:
    """The page with fenced blocks blanked (newlines kept, so line numbers hold)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def spans(text: str) -> Iterator[tuple[int, str]]:
    """(line, content) of every inline code span outside fenced blocks."""
    body = prose(text)
    for m in _SPAN.finditer(body):
        yield _line(body, m.start()), m.group(2)


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line, command) of every line of ```sh blocks (continuations joined)."""
    for m in _FENCE.finditer(text):
        if m.group(1) not in ("sh", "bash", "console"):
            continue
        start = _line(text, m.start(2))
        joined = m.group(2).replace("\\\n", " ")
        for n, command in enumerate(joined.splitlines()):
            yield start + n, command


# --- names ---------------------------------------------------------------------------


def has_attribute(cls: Any, name: str) -> bool:
    """Whether instances of ``cls`` have ``name``: a class attribute, a dataclass
    field, a slot or an annotated instance attribute."""
    if hasattr(cls, name):
        return True
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    for klass in getattr(cls, "__mro__", ()):
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
    return False


def resolves(dotted: str) -> bool:
    """Whether ``dagexec.a.b.c`` names a module, or an attribute of one.

    Names under ``dagexec.dask`` count as resolved where the dask extra is not
    installed (the free-threaded CI job): they are checked where it is.
    """
    if dotted.startswith("dagexec.dask") and importlib.util.find_spec("dask") is None:
        return True
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for i, attr in enumerate(parts[cut:]):
            if isinstance(obj, type) and i == len(parts) - cut - 1:
                return has_attribute(obj, attr)
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


_PUBLIC_CLASSES = {n: getattr(dagexec, n) for n in dagexec.__all__ if n[0].isupper()}
_RECEIVER = re.compile(r"(?<![\w./\-])(" + "|".join(RECEIVERS) + r")\.([A-Za-z]\w*)")
_CLASS_ATTR = re.compile(r"(?<![\w./\-])(" + "|".join(_PUBLIC_CLASSES) + r")\.([A-Za-z]\w*)")
_DOTTED = re.compile(r"(?<![\w./\-'\"])dagexec(?:\.[A-Za-z_]\w*)+")


def name_problems_in(code: str) -> list[str]:
    """The names of one code span that the API does not have."""
    bad = []
    for m in _RECEIVER.finditer(code):
        receiver, attr = m.groups()
        if attr not in FILE_SUFFIXES and not has_attribute(RECEIVERS[receiver], attr):
            bad.append(f"{receiver}.{attr} ({RECEIVERS[receiver].__name__} has no {attr!r})")
    for m in _CLASS_ATTR.finditer(code):
        cls, attr = m.groups()
        if not has_attribute(_PUBLIC_CLASSES[cls], attr):
            bad.append(f"{cls}.{attr} ({cls} has no {attr!r})")
    for m in _DOTTED.finditer(code):
        if m.group(0).rsplit(".", 1)[1] not in FILE_SUFFIXES and not resolves(m.group(0)):
            bad.append(f"{m.group(0)} (does not import or resolve)")
    return bad


def cli_options() -> dict[str, set[str]]:
    """Each subcommand of ``python -m dagexec`` and the options it takes."""
    import argparse

    from dagexec._integrations.cli_parser import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()
    }


def cli_problems_in(command: str, commands: dict[str, set[str]]) -> list[str]:
    """What one ``python -m dagexec ...`` command uses that the CLI does not have."""
    m = re.search(r"python -m dagexec\b(.*)", command)
    if not m:
        return []
    words = m.group(1).split()
    if not words or words[0].startswith("-"):
        return []
    if words[0] not in commands:
        if words[0].isupper():  # a placeholder: COMMAND, SUB
            return []
        return [f"python -m dagexec {words[0]} (no such subcommand)"]
    options = commands[words[0]]
    return [
        f"python -m dagexec {words[0]} {w} (no such option)"
        for w in words[1:]
        if re.fullmatch(r"--[a-z][\w-]*", w.split("=")[0]) and w.split("=")[0] not in options
    ]


# --- paths ---------------------------------------------------------------------------

_REPO_PATH = re.compile(r"(?<![\w./\-~])(?:dagexec|tests|benchmarks|docs)/[\w./{},*\-]*")
_LAYER_PATH = re.compile(r"(?<![\w./\-])(_[a-z]+/[\w/]*\w\.py)\b")
_PRIVATE_MODULE = re.compile(r"(?<![\w./\-])(_[a-z]\w*\.py)\b")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [e for alt in m.group(1).split(",") for e in _expand(path.replace(m.group(0), alt))]


def path_exists(path: str) -> bool:
    """Whether a repository path exists (``dagexec/`` read from the imported package)."""
    path = path.rstrip(".,:;)")
    for one in _expand(path):
        base = PACKAGE.parent if one.startswith("dagexec/") else ROOT
        if not (any(base.glob(one.rstrip("/"))) if "*" in one else (base / one).exists()):
            return False
    return True


def package_basenames() -> set[str]:
    return {p.name for p in PACKAGE.rglob("*.py")}


def path_problems_in(text: str, first_line: int = 1) -> list[str]:
    """(line: path) for every repository path in ``text`` that does not exist."""
    bad = []
    names = package_basenames()
    for m in _REPO_PATH.finditer(text):
        if not path_exists(m.group(0)):
            bad.append(f"{first_line + text.count(chr(10), 0, m.start())}: {m.group(0)}")
    for m in _LAYER_PATH.finditer(text):
        if not (PACKAGE / m.group(1)).exists():
            bad.append(f"{first_line + text.count(chr(10), 0, m.start())}: {m.group(1)}")
    for m in _PRIVATE_MODULE.finditer(text):
        if m.group(1) not in names:
            line = first_line + text.count(chr(10), 0, m.start())
            bad.append(f"{line}: {m.group(1)} (no module of that name)")
    return bad


def docstrings(file: Path) -> Iterator[tuple[int, str]]:
    """(first line, text) of every docstring of one Python file."""
    tree = ast.parse(file.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc


# --- benchmark commands --------------------------------------------------------------


def benchmark_options(script: Path) -> set[str]:
    """The options a benchmark script's argparse calls declare (and --help)."""
    options = {"-h", "--help"}
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            options |= {
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and str(a.value).startswith("-")
            }
    return options


_BENCH = re.compile(r"python3? benchmarks/(\w+\.py)((?:\s+(?:-[\w-]+|[\w.,=:/-]+))*)")


def benchmark_problems_in(text: str) -> list[str]:
    bad = []
    for m in _BENCH.finditer(text):
        script = ROOT / "benchmarks" / m.group(1)
        if not script.is_file():
            bad.append(f"python benchmarks/{m.group(1)} (no such script)")
            continue
        options = benchmark_options(script)
        bad += [
            f"python benchmarks/{m.group(1)} {w} (no such option)"
            for w in m.group(2).split()
            if w.startswith("-") and w.split("=")[0] not in options
        ]
    return bad


# --- measured figures ----------------------------------------------------------------


def _cells(row: str) -> list[str]:
    without_code = _SPAN.sub("", row)
    return [c.strip() for c in without_code.strip().strip("|").split("|")]


def tables(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, rows) of every Markdown table outside fenced blocks."""
    lines = prose(text).splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            yield start + 1, lines[start:i]
        i += 1


def figure_problems(page: Path, rel: str) -> list[str]:
    if rel in MEASURED_PAGES:
        return []
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    bad, allowed = [], README_FIGURE_TABLES if rel == "README.md" else 0
    for start, rows in tables(text):
        figures = [f for row in rows for c in _cells(row) for f in _NUMBER_UNIT.findall(c)]
        if not figures:
            continue
        above = "\n".join(lines[max(0, start - 8) : start - 1])
        links_source = any(f"(docs/{Path(p).name}" in above for p in MEASURED_PAGES)
        if allowed and links_source:
            allowed -= 1
            continue
        bad.append(
            f"{rel}:{start}: a table of measured figures ({', '.join(figures[:3])}); "
            f"they live in {', '.join(sorted(MEASURED_PAGES))}: link there"
        )
    body = prose(text)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", body):
        chunk = _SPAN.sub("", paragraph.group(0))
        if re.search(r"\bpeak", chunk) and _MEMORY.search(chunk) and not chunk.startswith("|"):
            bad.append(
                f"{rel}:{_line(body, paragraph.start())}: a measured peak "
                f"({_MEMORY.search(chunk).group(0)}); it lives on a measured page"  # type: ignore[union-attr]
            )
    return bad
