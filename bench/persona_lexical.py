"""The persona check's lexical scorer: time to score 20 texts of 500 characters against a core.

    .venv/bin/python bench/persona_lexical.py [--runs 200]

The Stop hook runs this check on the turn's last answer (seed 002's persona gravity), so its cost
is part of that hook's time. Uses the labelled samples and the ``release`` core of
``tests/data/persona``. Prints best, median and p90 in milliseconds. (This replaces a timed test
assertion, "best of 40 under 5 ms", which failed on a loaded 2-core VM.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from phoenix_protocol.services._persona import LexicalScorer

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "persona"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    cores = {c["persona"]: c for c in map(json.loads, (DATA / "cores.jsonl").read_text().splitlines())}
    samples = [json.loads(line) for line in (DATA / "samples.jsonl").read_text().splitlines()]
    texts = [(" ".join(t for s in samples[i::20] for t in s["texts"]))[:500] for i in range(20)]
    core = cores["release"]["core"]
    scorer = LexicalScorer()
    scorer.analyze(core, texts)  # warm up
    timings = []
    for _ in range(args.runs):
        started = time.perf_counter()
        scorer.analyze(core, texts)
        timings.append((time.perf_counter() - started) * 1000)
    print(
        f"Date: {time.strftime('%Y-%m-%d', time.gmtime())}; {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores; Python {platform.python_version()}; {args.runs} runs."
    )
    p90 = statistics.quantiles(timings, n=10)[-1]
    print(
        f"lexical persona check, 20 texts x 500 chars: best {min(timings):.2f} ms, "
        f"median {statistics.median(timings):.2f} ms, p90 {p90:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
