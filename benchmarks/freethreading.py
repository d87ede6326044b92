"""Free-threaded CPython: pure-Python scaling, and no-op overhead against a GIL build.

    python benchmarks/freethreading.py                      # scaling curve on this interpreter
    python benchmarks/freethreading.py --gil-python PATH    # also: per-task overhead vs PATH

Scaling: the ``pycpu`` workload (8 chains of 25 tasks of a few ms of pure-Python
arithmetic, then a fan-in) run by a serial loop, by dagexec and by bare threads
(one per worker, whole chains each, no scheduler: the ceiling) for 1, 2, ...
workers, alternating so all three see the same machine; medians of ``--repeat``.
With the GIL off, 2 workers should give >= 1.85x over serial (the limit is 2.0x);
with the GIL on, ~1x is all any thread pool can get.

Overhead: ``run.py --only wide,layered`` on this interpreter and on the one given
by ``--gil-python``, each in its own process; dagexec's no-op us/task compared.
Target: the free-threaded build within 1.5x of the GIL build's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [os.environ.get("DAGEXEC_SRC", str(HERE.parent)), str(HERE)]

from peers import BareThreads, Dagexec, Impl, Serial  # noqa: E402
from workloads import pycpu  # noqa: E402

import dagexec  # noqa: E402


def describe_interpreter(python: str = sys.executable) -> str:
    code = (
        "import platform, sys, sysconfig; "
        "ft = bool(sysconfig.get_config_var('Py_GIL_DISABLED')); "
        "gil = getattr(sys, '_is_gil_enabled', lambda: True)(); "
        "print(platform.python_implementation(), platform.python_version(), "
        "'free-threaded build' if ft else 'GIL build', 'GIL on' if gil else 'GIL off', sep=', ')"
    )
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def gil_enabled() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def scaling(workers_list: list[int], repeat: int, quick: bool) -> list[dict[str, Any]]:
    spec = pycpu(8, 6 if quick else 25)
    print(f"\n== scaling: {spec.notes} ({spec.tasks_run} tasks)")
    serial = Serial()
    prepared_serial = serial.prepare(spec)
    expected = serial.run(prepared_serial)
    rows = []
    print(
        f"  {'workers':>7}{'serial ms':>11}{'dagexec ms':>12}{'threads ms':>12}"
        f"{'dagexec x':>11}{'threads x':>11}{'dagexec/threads':>17}"
    )
    for w in workers_list:
        impls: list[tuple[str, Impl]] = [("dagexec", Dagexec(w)), ("threads", BareThreads(w))]
        prepared = {label: impl.prepare(spec) for label, impl in impls}
        for label, impl in impls:  # warm-up and correctness
            assert impl.run(prepared[label]) == expected, f"{label} returned a different result"
            assert impl.last_count == spec.tasks_run, f"{label} ran {impl.last_count} tasks"
        times: dict[str, list[float]] = {"serial": [], "dagexec": [], "threads": []}
        for _ in range(repeat):  # alternate, so a busy moment hits all three alike
            for label, impl, p in [
                ("serial", serial, prepared_serial),
                *[(label, impl, prepared[label]) for label, impl in impls],
            ]:
                t = time.perf_counter()
                impl.run(p)
                times[label].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {
            "workers": w,
            "median_s": med,
            "times_s": times,
            "dagexec_speedup": med["serial"] / med["dagexec"],
            "threads_speedup": med["serial"] / med["threads"],
        }
        rows.append(row)
        print(
            f"  {w:>7}{med['serial'] * 1e3:>11.0f}{med['dagexec'] * 1e3:>12.0f}"
            f"{med['threads'] * 1e3:>12.0f}{row['dagexec_speedup']:>10.2f}x"
            f"{row['threads_speedup']:>10.2f}x{med['dagexec'] / med['threads']:>17.2f}"
        )
    if gil_enabled():
        print("  (GIL on: pure-Python tasks cannot overlap here, so ~1x is expected)")
    return rows


def overhead(gil_python: str, repeat: int, quick: bool) -> dict[str, Any]:
    """dagexec's no-op us/task on wide and layered, here and under ``gil_python``."""
    out: dict[str, Any] = {}
    for label, python in [("this", sys.executable), ("gil", gil_python)]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "out.json"
            cmd = [python, str(HERE / "run.py"), "--only", "wide,layered", "--no-dask"]
            cmd += ["--repeat", str(repeat), "--json", str(path)] + (["--quick"] if quick else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            report = json.loads(path.read_text())
        out[label] = {
            "interpreter": describe_interpreter(python),
            "us_per_task": {
                name: w["rows"]["dagexec"]["median_s"] / w["tasks_run"] * 1e6
                for name, w in report["workloads"].items()
            },
        }
    print("\n== no-op per-task overhead (dagexec, 2 workers; run.py --only wide,layered)")
    for label in ("this", "gil"):
        us = out[label]["us_per_task"]
        cells = "  ".join(f"{name} {v:.2f} us/task" for name, v in us.items())
        print(f"  {out[label]['interpreter']}: {cells}")
    for name in out["this"]["us_per_task"]:
        ratio = out["this"]["us_per_task"][name] / out["gil"]["us_per_task"][name]
        out.setdefault("ratio", {})[name] = ratio
        print(f"  {name}: this / GIL build = {ratio:.2f}x (target <= 1.5x)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    cores = os.cpu_count() or 1
    default_workers = sorted({1, 2, *([4] if cores >= 4 else []), *([cores] if cores > 2 else [])})
    p.add_argument(
        "--workers",
        default=",".join(map(str, default_workers)),
        help="comma-separated worker counts for the scaling curve",
    )
    p.add_argument("--repeat", type=int, default=5, help="timed runs per point (median)")
    p.add_argument("--quick", action="store_true", help="smaller graphs (smoke test)")
    p.add_argument("--gil-python", help="a GIL build to compare no-op overhead against")
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    args = p.parse_args(argv)
    print(f"dagexec {dagexec.__version__} on {describe_interpreter()}")
    print(f"{platform.platform()}, {cores} CPUs")
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        print("note: a GIL build; for the free-threaded numbers run this with python3.13t")
    workers = [int(w) for w in args.workers.split(",") if w]
    report: dict[str, Any] = {
        "interpreter": describe_interpreter(),
        "scaling": scaling(workers, args.repeat, args.quick),
    }
    two = [r for r in report["scaling"] if r["workers"] == 2]
    if two and not gil_enabled():
        s = two[0]["dagexec_speedup"]
        verdict = "PASS" if s >= 1.85 else "MISS"
        print(
            f"  {verdict}  pycpu speedup over serial, 2 workers, GIL off: {s:.2f}x (target >= 1.85)"
        )
    if args.gil_python:
        report["overhead"] = overhead(args.gil_python, args.repeat, args.quick)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
