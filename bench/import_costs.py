"""What an import costs a fresh process: ``phx``'s fast paths against click and argparse.

    PYTHONPATH=src .venv/bin/python bench/import_costs.py [--runs 15] [--python PATH]
        [--case NAME=CODE ...]    # instead of the default cases

Each case is ``python -X importtime -c CODE`` in a fresh process, interleaved round-robin so that
machine noise hits all alike. Prints per case the median whole-process time, the median sum of
``-X importtime``'s self times (every module the process imported, the interpreter's own start
included) and how many modules that is. Python modules are byte-compiled first.

The default cases ask why ``cli/_entry.py`` parses ``phx team resume|probe TEAM --json`` by hand:
what the resume path imports anyway (``resume``), the same with click or argparse on top, and the
full CLI (click, rich and every command module), which any other ``phx`` command loads.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESUME = (
    "import uuid, phoenix_protocol.cli._entry, phoenix_protocol.core._home, phoenix_protocol.core._jsonio, "
    "phoenix_protocol.services._team_resume"
)
CASES = {
    "bare interpreter": "pass",
    "phx entry (cli/_entry)": "import phoenix_protocol.cli._entry",
    "resume fast path": RESUME,
    "resume + click": RESUME + ", click",
    "resume + argparse": RESUME + ", argparse",
    "full CLI": "import phoenix_protocol.cli._entry; from phoenix_protocol.cli._main import cli",
}


def measure(python: str, code: str) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.run([python, "-X", "importtime", "-c", code], capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{code}: {proc.stderr[-1500:]}")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:") and "self [us]" not in line]
    own = sum(int(line.split("|")[0].split(":")[1]) for line in lines) / 1000
    return wall, own, len(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--case", action="append", default=[], metavar="NAME=CODE")
    args = parser.parse_args()
    cases = dict(c.split("=", 1) for c in args.case) if args.case else CASES
    src = Path(__file__).resolve().parent.parent / "src"
    compileall.compile_dir(str(src), quiet=1)
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, code in cases.items():
            results[name].append(measure(args.python, code))
    print(f"{args.runs} runs each, {args.python}\n")
    print("| case | process (ms) | imports (ms) | modules |")
    print("|---|---:|---:|---:|")
    for name, rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        own = statistics.median(r[1] for r in rows)
        print(f"| {name} | {wall:.1f} | {own:.1f} | {rows[-1][2]} |")


if __name__ == "__main__":
    main()
