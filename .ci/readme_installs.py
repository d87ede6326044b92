"""CI: run every install command README.md's Install section shows, as a user would.

Usage: ``python .ci/readme_installs.py PYTHON`` from the root of a clean clone.

Each ``pip install`` (a command of the section's ``sh`` block, or a
``requirements.txt`` line of its text) runs in a fresh virtual environment made
by PYTHON; then dagexec is imported from an unrelated directory and must come
from where that command put it (the environment, or the clone for ``-e``). The
hosted URL becomes this clone served as ``git+file://``, from a copy tagged the
way a release is (``v`` + the version), and ``/path/to/dagexec`` becomes the
clone made by the section's ``git clone`` line. A line this script does not know
how to run fails it: a new install line needs a way to be tested here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTED = "https://github.com/OWNER/dagexec"
LOCAL = "/path/to/dagexec"


def run(*args: str | Path, cwd: Path | None = None) -> str:
    print("   $", " ".join(map(str, args)), flush=True)
    done = subprocess.run(list(map(str, args)), cwd=cwd, text=True, capture_output=True)
    if done.returncode:
        sys.exit(f"== FAIL ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


def install_section() -> tuple[list[str], list[str]]:
    """The section's shell commands (comments dropped) and requirements.txt lines."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)
    commands = [line.split("  #")[0].strip() for line in block.splitlines()]
    requirements = re.findall(r"`(dagexec @ [^`]+)`", section)
    return [c for c in commands if c], requirements


def check_import(python: Path, expect_under: Path, extra: bool, scratch: Path) -> None:
    code = "import dagexec, dagexec.testing; print(dagexec.__file__)"
    if extra:
        code = "import dagexec.dask, dask, distributed; " + code
    where = Path(run(python, "-c", code, cwd=scratch).strip()).resolve()
    if expect_under not in where.parents:
        sys.exit(f"== FAIL: dagexec imported from {where}, not from {expect_under}")
    print(f"   dagexec from {where}")


def main(python: str) -> None:
    version = re.search(r'__version__ = "(.+)"', (ROOT / "dagexec/_core/version.py").read_text())
    assert version, "no __version__ in dagexec/_core/version.py"
    commands, requirements = install_section()
    work = Path(tempfile.mkdtemp(prefix="dagexec-installs-"))
    origin = work / "origin"  # the "hosted" repository: this clone, tagged as released
    run("git", "clone", "-q", ROOT, origin)
    run("git", "-C", origin, "tag", f"v{version.group(1)}")
    clone: Path | None = None
    pips = [shlex.split(c) for c in commands if c.startswith("pip ")]
    pips += [["pip", "install", "-r", line] for line in requirements]
    for command in commands:
        if not command.startswith("pip "):
            if not re.fullmatch(rf"git clone {re.escape(HOSTED)} && cd dagexec", command):
                sys.exit(f"== FAIL: README install line not known to {__file__}: {command}")
            clone = work / "user" / "dagexec"
            run("git", "clone", "-q", f"file://{origin}", clone)
    if clone is None:
        sys.exit("== FAIL: the README's install section has no git clone line")
    for words in pips:
        # file://localhost/...: pip's requirement parser wants a host in a git+file URL.
        hosted = f"file://localhost{origin}"
        args = [w.replace(HOSTED, hosted).replace(LOCAL, str(clone)) for w in words]
        print(f"== README install: {shlex.join(words)}", flush=True)
        venv = Path(tempfile.mkdtemp(prefix="venv-", dir=work))
        run(python, "-m", "venv", venv)
        if args[2] == "-r":  # a requirements.txt holding that one line
            (venv / "requirements.txt").write_text(args[3] + "\n")
            args[3] = str(venv / "requirements.txt")
        if args[:2] != ["pip", "install"]:
            sys.exit(f"== FAIL: README install line not known to {__file__}: {shlex.join(words)}")
        run(venv / "bin/python", "-m", "pip", "install", "-q", *args[2:], cwd=clone)
        editable = "-e" in args
        check_import(venv / "bin/python", clone if editable else venv, "[dask]" in args[-1], work)
    print(f"== README install lines: {len(pips)} run, each in a fresh environment")


if __name__ == "__main__":
    main(sys.argv[1])
