"""CI: the wheel and the sdist hold what a user and a packager need, and nothing else.

Usage: ``python .ci/check_dists.py WHEEL SDIST`` from the root of the clean clone
they were built from. The wheel must hold exactly the tracked files of
``dagexec/`` (every subpackage, ``py.typed``, and the modules process children load
by path, which are among them) plus its metadata; the sdist must also hold every
tracked file of ``tests/``, ``docs/`` and ``benchmarks/``, README.md and LICENSE.
Both must carry the version of ``dagexec/_core/version.py``, its one home.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked(*dirs: str) -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", *dirs], cwd=ROOT, text=True, check=True, capture_output=True
    )
    return set(out.stdout.split()) if out.stdout else set()


def main(wheel: Path, sdist: Path) -> None:
    text = (ROOT / "dagexec/_core/version.py").read_text(encoding="utf-8")
    match = re.search(r'__version__ = "(.+)"', text)
    assert match, "no __version__ in dagexec/_core/version.py"
    version = match.group(1)
    problems = []
    if not wheel.name.startswith(f"dagexec-{version}-"):
        problems.append(f"wheel {wheel.name} does not carry version {version}")
    if sdist.name != f"dagexec-{version}.tar.gz":
        problems.append(f"sdist {sdist.name} does not carry version {version}")

    package = {f for f in tracked("dagexec") if not f.endswith((".pyc", "/"))}
    with zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if not n.endswith("/")}
    in_wheel = {n for n in names if not n.startswith(f"dagexec-{version}.dist-info/")}
    if package - in_wheel:
        problems.append(f"wheel is missing {sorted(package - in_wheel)}")
    if in_wheel - package:
        problems.append(f"wheel has files not tracked in dagexec/: {sorted(in_wheel - package)}")
    for must in ("dagexec/py.typed", "dagexec/_core/version.py"):
        if must not in in_wheel:
            problems.append(f"wheel lacks {must}")

    with tarfile.open(sdist) as t:
        held = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name and m.isfile()}
    wanted = tracked("dagexec", "tests", "docs", "benchmarks") | {"README.md", "LICENSE"}
    if not wanted <= held:
        problems.append(f"sdist is missing {sorted(wanted - held)}")
    if problems:
        sys.exit("== FAIL: " + "\n".join(problems))
    print(f"== {wheel.name}: {len(in_wheel)} package files, exactly dagexec/'s tracked files")
    print(f"== {sdist.name}: {len(held)} files, tests/ docs/ benchmarks/ README LICENSE included")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
