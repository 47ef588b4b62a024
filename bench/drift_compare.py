"""Phoenix's drift detectors against Gemini CLI's and OpenHands' loop detectors, same traces.

    .venv/bin/python bench/drift_compare.py            # prints Markdown, writes bench/results/drift_compare.md
    .venv/bin/python bench/drift_compare.py -v         # ... and every trace's verdicts

The traces are ``bench/drift_traces.py`` (labelled, deterministic); the two baselines are the
re-implementations in ``bench/drift_baselines.py`` (sources and constants cited there). Phoenix
is fed exactly as its heartbeat feeds it (``StateStore._track_actions``): one ``Action`` per
tool call at the call's end (PostToolUse), the input digested by ``_hooks._digest``, progress =
a successful call of a tool in ``_drift.EDIT_TOOLS``, a ring of the last ``DriftConfig.keep``
actions, ``last_progress_ms`` falling back to the start of the work, ``detect`` after every
call that is not progress. Assistant text and context-window errors never reach Phoenix's
hooks, so they are invisible to it.

A detector *detects* a drift trace when its first alarm is at or after the trace's
``drift_start``; an alarm before it is an early (false) alarm and the trace counts as missed.
Steps to detection = index of the alarm step - ``drift_start`` (0: on the first drifting step);
minutes = from the start of the first drifting step to the end of the alarm step. On a normal
trace any alarm is a false positive.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # drift_traces, drift_baselines (also when imported by the tests)

from drift_baselines import Detection, run_gemini, run_openhands  # noqa: E402
from drift_traces import DRIFT_PATTERNS, NORMAL_PATTERNS, PHOENIX_CLAIMS, T0, Trace, traces  # noqa: E402

from phoenix_protocol.agent._drift import Action, DriftConfig, command_exempt, observe  # noqa: E402
from phoenix_protocol.integrations._clients import CLAUDE_CODE  # noqa: E402
from phoenix_protocol.integrations._hooks import _digest, _shell_command  # noqa: E402

__all__ = ["DETECTORS", "Outcome", "evaluate", "run_phoenix"]


def run_phoenix(trace: Trace, config: DriftConfig | None = None, *, durations: bool = True) -> Detection | None:
    """Replay a trace through Phoenix's heartbeat logic; the first step at which it signals.
    ``durations=False``: as from a CLI that sends no ``duration_ms`` (the gaps stand in)."""
    cfg = config or DriftConfig.from_config(None)
    ring: list[Action] = []
    last_progress_ms: int | None = None
    work_started_ms = T0
    for i, step in enumerate(trace.steps):
        if step.kind != "tool":
            continue  # no hook fires for text or a context-window error
        now = step.end_ms
        # The heartbeat's own step (phoenix_protocol.agent._drift.observe), with the hook's
        # normalized command and digest.
        tool_input, command = _shell_command(step.tool, step.input, CLAUDE_CODE)
        ring, progressed, signals = observe(
            ring,
            now_ms=now,
            tool=step.tool,
            digest=_digest(tool_input) or "-",
            ok=step.ok,
            duration_ms=step.duration_ms if durations else None,
            config=cfg,
            last_progress_ms=last_progress_ms or work_started_ms,
            exempt=command is not None and command_exempt(command, cfg.exempt_commands),
        )
        if progressed:
            last_progress_ms = now
            continue
        if signals:
            return Detection(i, signals[0].kind, signals[0].detail)
    return None


def run_phoenix_without_durations(trace: Trace) -> Detection | None:
    """Phoenix as fed by a CLI that sends no ``duration_ms`` (the gaps between calls stand in)."""
    return run_phoenix(trace, durations=False)


DETECTORS: dict[str, Callable[[Trace], Detection | None]] = {
    "Phoenix": run_phoenix,
    "Phoenix, no durations": run_phoenix_without_durations,
    "Gemini CLI": run_gemini,
    "OpenHands": run_openhands,
}


@dataclass(frozen=True)
class Outcome:
    trace: Trace
    detector: str
    detection: Detection | None

    @property
    def fired(self) -> bool:
        return self.detection is not None

    @property
    def early(self) -> bool:
        start = self.trace.drift_start
        return self.detection is not None and start is not None and self.detection.index < start

    @property
    def detected(self) -> bool:
        return self.trace.is_drift and self.fired and not self.early

    @property
    def steps(self) -> int | None:
        if not self.detected or self.detection is None or self.trace.drift_start is None:
            return None
        return self.detection.index - self.trace.drift_start

    @property
    def minutes(self) -> float | None:
        if not self.detected or self.detection is None or self.trace.drift_start is None:
            return None
        begin = self.trace.steps[self.trace.drift_start].ts_ms
        return (self.trace.steps[self.detection.index].end_ms - begin) / 60_000


def evaluate(every: list[Trace] | None = None) -> list[Outcome]:
    every = traces() if every is None else every
    return [Outcome(t, name, run(t)) for t in every for name, run in DETECTORS.items()]


# ------------------------------------------------------------------------------------------------
# report


def _median(values: list[float]) -> str:
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:.0f}" if m == int(m) else f"{m:.1f}"


def _rules(outcomes: list[Outcome]) -> str:
    kinds = Counter(o.detection.kind for o in outcomes if o.detection is not None and not o.early)
    return ", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "-"


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f} %)" if n else "-"


def _detector_table(name: str, outcomes: list[Outcome]) -> list[str]:
    mine = [o for o in outcomes if o.detector == name]
    lines = [
        f"### {name}",
        "",
        "| drift pattern | traces | detected | early alarm | median steps to detection | median minutes | rules that fired |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for pattern in DRIFT_PATTERNS:
        rows = [o for o in mine if o.trace.pattern == pattern and o.trace.is_drift]
        hit = [o for o in rows if o.detected]
        claim = " (claimed)" if name == "Phoenix" and pattern in PHOENIX_CLAIMS else ""
        lines.append(
            f"| `{pattern}`{claim} | {len(rows)} | {_pct(len(hit), len(rows))} | {sum(o.early for o in rows)} "
            f"| {_median([float(o.steps) for o in hit if o.steps is not None])} "
            f"| {_median([o.minutes for o in hit if o.minutes is not None])} | {_rules(rows)} |"
        )
    drift = [o for o in mine if o.trace.is_drift]
    hit = [o for o in drift if o.detected]
    lines.append(
        f"| **all drift** | {len(drift)} | **{_pct(len(hit), len(drift))}** | {sum(o.early for o in drift)} "
        f"| {_median([float(o.steps) for o in hit if o.steps is not None])} "
        f"| {_median([o.minutes for o in hit if o.minutes is not None])} | |"
    )
    lines += ["", "| normal pattern | traces | false positives | rules that fired |", "|---|---:|---:|---|"]
    for pattern in NORMAL_PATTERNS:
        rows = [o for o in mine if o.trace.pattern == pattern and not o.trace.is_drift]
        hard = " (hard)" if rows and rows[0].trace.hard else ""
        fired = [o for o in rows if o.fired]
        kinds = Counter(o.detection.kind for o in fired if o.detection is not None)
        lines.append(
            f"| `{pattern}`{hard} | {len(rows)} | {_pct(len(fired), len(rows))} "
            f"| {', '.join(f'{k} {n}' for k, n in kinds.most_common()) or '-'} |"
        )
    normal = [o for o in mine if not o.trace.is_drift]
    easy = [o for o in normal if not o.trace.hard]
    lines.append(f"| **all normal** | {len(normal)} | **{_pct(sum(o.fired for o in normal), len(normal))}** | |")
    lines.append(f"| **normal, not hard** | {len(easy)} | **{_pct(sum(o.fired for o in easy), len(easy))}** | |")
    return lines


def _summary(outcomes: list[Outcome]) -> list[str]:
    names = list(DETECTORS)
    lines = [
        "| drift pattern | traces | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]

    def cell(rows: list[Outcome]) -> str:
        hit = [o for o in rows if o.detected]
        steps = _median([float(o.steps) for o in hit if o.steps is not None])
        return f"{len(hit)}/{len(rows)}" + (f" · {steps} steps" if hit else "")

    for pattern in DRIFT_PATTERNS:
        cells = [cell([o for o in outcomes if o.detector == n and o.trace.pattern == pattern]) for n in names]
        count = sum(1 for o in outcomes if o.detector == names[0] and o.trace.pattern == pattern)
        lines.append(f"| `{pattern}` | {count} | " + " | ".join(cells) + " |")
    drift_n = sum(1 for o in outcomes if o.detector == names[0] and o.trace.is_drift)
    lines.append(
        f"| **detection rate** | {drift_n} | "
        + " | ".join(f"**{_pct(sum(o.detected for o in outcomes if o.detector == n), drift_n)}**" for n in names)
        + " |"
    )
    for title, keep in (
        ("false positives, ordinary normal traces", lambda t: not t.hard),
        ("false positives, hard cases (polling, read-only review)", lambda t: t.hard),
        ("false positives, all normal", lambda t: True),
    ):
        rows_by = {
            n: [o for o in outcomes if o.detector == n and not o.trace.is_drift and keep(o.trace)] for n in names
        }
        n_rows = len(rows_by[names[0]])
        lines.append(
            f"| **{title}** | {n_rows} | "
            + " | ".join(f"**{_pct(sum(o.fired for o in rows_by[n]), n_rows)}**" for n in names)
            + " |"
        )
    return lines


def _verdict(pattern: str, rows: list[Outcome], names: list[str]) -> str:
    """The conclusion for one pattern, computed from its outcomes (no prose written in advance)."""
    drift = rows[0].trace.is_drift
    score = {n: sum((o.detected if drift else not o.fired) for o in rows if o.detector == n) for n in names}
    total = sum(1 for o in rows if o.detector == names[0])
    best = max(score.values())
    leaders = [n for n in names if score[n] == best]
    phoenix = score["Phoenix"]
    if drift:
        if phoenix == 0:
            label = f"a Phoenix blind spot (0/{total})"
        elif phoenix < total:
            label = f"Phoenix catches {phoenix}/{total}"
        else:
            label = f"Phoenix catches all {total}"
        hit = [o for o in rows if o.detector == "Phoenix" and o.detected]
        if hit:
            steps = _median([float(o.steps) for o in hit if o.steps is not None])
            label += f", median {steps} steps after the drift begins"
        others = ", ".join(f"{n} {score[n]}/{total}" for n in names if n != "Phoenix")
        lead = "best: " + " and ".join(leaders) if best > 0 else "no detector catches it"
        return f"  Computed: {label}; {others}; {lead}."
    fired = total - phoenix
    kinds = Counter(o.detection.kind for o in rows if o.detector == "Phoenix" and o.detection is not None)
    which = f" ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})" if kinds else ""
    hard = " (a hard case)" if rows[0].trace.hard else ""
    label = f"Phoenix false positives {fired}/{total}{which}" if fired else f"no Phoenix false positive (0/{total})"
    others = ", ".join(f"{n} {total - score[n]}/{total}" for n in names if n != "Phoenix")
    return f"  Computed{hard}: {label}; false positives of {others}."


def _catches(outcomes: list[Outcome]) -> list[str]:
    """Per pattern: who catches, who misses (with the traces missed), how each detector works on
    it (``MECHANISMS``: what the rules look at, never an outcome), and the computed verdict."""
    names = list(DETECTORS)
    lines = []
    for pattern, what in {**DRIFT_PATTERNS, **NORMAL_PATTERNS}.items():
        rows = [o for o in outcomes if o.trace.pattern == pattern]
        drift = rows[0].trace.is_drift
        parts = []
        for n in names:
            mine = [o for o in rows if o.detector == n]
            good = [o for o in mine if (o.detected if drift else not o.fired)]
            bad = [o for o in mine if o not in good]
            text = f"{n} {len(good)}/{len(mine)}"
            if bad:
                listed = ", ".join(
                    o.trace.name.rsplit("-", 1)[1] + ("" if drift or o.detection is None else f" {o.detection.kind}")
                    for o in bad
                )
                text += f" ({'missed' if drift else 'flagged'} #{listed})"
            parts.append(text)
        verb = "caught" if drift else "left alone"
        lines.append(f"- **`{pattern}`**: {what}. {verb.capitalize()}: " + "; ".join(parts) + ".")
        how = MECHANISMS.get(pattern)
        if how:
            lines.append(f"  How: {how}")
        lines.append(_verdict(pattern, rows, names))
    return lines


def conclusions(outcomes: list[Outcome]) -> list[str]:
    """The headline, computed: detection on the patterns Phoenix claims and on the others, false
    positives on the easy and on the hard normal traces, per detector."""
    names = list(DETECTORS)

    def rate(n: str, keep: Callable[[Trace], bool], hit: Callable[[Outcome], bool]) -> tuple[int, int]:
        rows = [o for o in outcomes if o.detector == n and keep(o.trace)]
        return sum(hit(o) for o in rows), len(rows)

    lines = []
    for n in names:
        claimed = rate(n, lambda t: t.is_drift and t.pattern in PHOENIX_CLAIMS, lambda o: o.detected)
        other = rate(n, lambda t: t.is_drift and t.pattern not in PHOENIX_CLAIMS, lambda o: o.detected)
        easy = rate(n, lambda t: not t.is_drift and not t.hard, lambda o: o.fired)
        hard = rate(n, lambda t: not t.is_drift and t.hard, lambda o: o.fired)
        lines.append(
            f"- **{n}**: detects {_pct(*claimed)} of the drift traces of the patterns Phoenix claims and "
            f"{_pct(*other)} of the others; false positives on {_pct(*easy)} of the ordinary normal traces "
            f"and on {_pct(*hard)} of the hard ones (legitimate polling and read-only work)."
        )
    blind = [
        p
        for p in DRIFT_PATTERNS
        if not any(o.detected for o in outcomes if o.detector.startswith("Phoenix") and o.trace.pattern == p)
    ]
    if blind:
        lines.append("- Drift patterns no Phoenix variant catches: " + ", ".join(f"`{p}`" for p in blind) + ".")
    flagged = sorted(
        {o.trace.pattern for o in outcomes if o.detector == "Phoenix" and not o.trace.is_drift and o.fired}
    )
    if flagged:
        lines.append(
            "- Normal patterns where Phoenix raises a false alarm: " + ", ".join(f"`{p}`" for p in flagged) + "."
        )
    return lines


MECHANISMS: dict[str, str] = {
    "repeat_identical": "Phoenix's digest drops whitespace runs, Bash's `description`/`timeout`, and normalises "
    "shell commands (`cd … &&`, `| tail -N`, flags, numbers: `_drift.normalize_command`); its repetition rule "
    "fires when one action passes `repeat_limit` (3) since the last progress. Gemini hashes the raw arguments "
    "and needs 5 identical calls in a row. OpenHands compares whole actions, the model's `thought` included, "
    "and needs 4 equal action/observation pairs (a Bash `description` is not a field of its `CmdRunAction`).",
    "cycle_ab": "Gemini counts only *consecutive* identical calls (its LLM check is left out). OpenHands has an "
    "A-B-A-B-A-B rule. Phoenix counts each action since the last progress and has a cycle rule for periods 2-4.",
    "cycle_abc": "Phoenix's cycle rule covers periods 2-4; OpenHands' pattern rule is A-B only and Gemini's is "
    "A-A only.",
    "repeat_error": "OpenHands has a rule for 3 equal actions with `ErrorObservation`s, but a failing *shell "
    "command* is a `CmdOutputObservation` with an exit code (its 4-pair rule applies). Gemini needs 5 identical "
    "raw calls. Phoenix: repetition of the normalised action, and persistent failure (70 % of the last 10 "
    "calls since progress failing).",
    "error_rate": "Only Phoenix measures failures over a window (a rise over the previous window, and "
    "persistent failure); the baselines need the same action repeated.",
    "slowdown": "Only Phoenix looks at time: durations when the CLI sends them, else the gaps between calls "
    "(the `Phoenix, no durations` column), which include the model's think time.",
    "no_progress": "Only Phoenix tracks progress (a successful edit, a change to its own state); distinct reads "
    "never repeat, so the baselines have nothing to count. Phoenix's rule needs 10 calls within "
    "`stall_minutes` (20) and no progress for as long.",
    "monologue": "Text without tool calls never reaches Phoenix's hooks. OpenHands needs 3 *identical* "
    "messages; Gemini's content rule needs a 50-char chunk 10 times with an average spacing of at most 250 "
    "chars.",
    "content_chant": "Gemini's content rule looks inside one message as it streams; OpenHands compares whole "
    "messages and Phoenix sees no text.",
    "context_loop": "OpenHands has a context-window rule (condensations) and its A-B rule; Phoenix sees only the "
    "tool calls, not the error nor the trimming; Gemini's count is not reset by a context error.",
    "edit_cycle": "Every successful edit is progress for Phoenix unless the very same edit already succeeded "
    "recently (`is_progress`); edits that alternate between several contents reset its counts. OpenHands' A-B "
    "and 4-pair rules see 2-step flip-flops and identical rewrites; Gemini sees 5 identical writes in a row.",
    "polling_build": "Polling the same thing every 30 s *is* the same action repeated without progress. "
    "Phoenix exempts only the polling commands of `drift_exempt_commands` (kubectl rollout status, gh run "
    "watch, …) and what the model exempts (`phx drift exempt --command`); these traces poll with `tail`, "
    "`sleep && tail`, BashOutput and Read, which are not exempt by default. OpenHands compares command and exit "
    "code (not the growing output) for shell commands, the output for a Read or BashOutput.",
    "review_task": "A read-only task has no edit to count as progress: Phoenix's `no_progress` applies unless "
    "the task is exempt (`phx drift exempt no_progress`, not used in these runs); the baselines have no notion "
    "of progress.",
    "thinking_pause": "Phoenix's `no_progress` treats a pause of half the stall time or more as a fresh start, "
    "so calls after a long think are measured from the pause.",
    "read_burst": "Phoenix's slowdown compares each call's duration with its tool's median over three windows "
    "of 10 calls; bursts of reads have long-tailed durations.",
    "noisy_durations": "Phoenix's slowdown needs a rise over three windows (m1 < m2 < m3, m3 >= 2 x m1, and the "
    "raw median at least 1 s and 2 x the first).",
    "flaky_errors": "Phoenix's error-rate rule fires at 50 % of a window of 10 after less than half that rate; "
    "its persistent-failure rule at 70 % since the last progress.",
    "edit_test_fix": "The same test command between edits: each edit is progress (Phoenix) or breaks the run of "
    "identical calls (Gemini, OpenHands).",
}
"""How each detector works on each pattern: facts about the rules, never an outcome (the outcomes and the
verdicts are computed: ``_verdict``, ``conclusions``)."""

CAVEATS = (
    "Caveats. The traces are synthetic and were written alongside Phoenix's detector: the `error_rate`, "
    "`slowdown` and `no_progress` patterns are by construction signals only Phoenix measures, so its detection "
    "rate over *all* patterns says more about coverage than about quality; read the table per pattern. The "
    "baselines are ports of their rules, run outside their agents: Gemini CLI without its LLM check, OpenHands "
    "with Claude Code's tools mapped onto its events (see `bench/drift_baselines.py`). Gemini CLI and OpenHands "
    "*stop* the agent when they fire; Phoenix warns the model once and takes an emergency recovery checkpoint, "
    "so a false positive costs them more than it costs Phoenix."
)


def _machine() -> str:
    cores = os.cpu_count() or 0
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {cores} cores ({model or 'unknown CPU'}), Python {platform.python_version()}"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=False, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def report(outcomes: list[Outcome], elapsed: float) -> str:
    every = sorted({id(o.trace): o.trace for o in outcomes}.values(), key=lambda t: t.name)
    n_drift = sum(t.is_drift for t in every)
    n_normal = len(every) - n_drift
    n_hard = sum(t.hard for t in every)
    lines = [
        "## Drift detection: Phoenix vs Gemini CLI vs OpenHands, on the same synthetic traces",
        "",
        "```sh",
        ".venv/bin/python bench/drift_compare.py",
        "```",
        "",
        f"**{time.strftime('%Y-%m-%d')}**, {_machine()}, phoenix-protocol commit {_commit()}. "
        f"{len(every)} traces ({n_drift} drift, {n_normal} normal of which {n_hard} hard cases), "
        f"{sum(len(t.steps) for t in every):,} steps, all {len(DETECTORS)} detectors in {elapsed:.1f} s.",
        "",
        "Traces: `bench/drift_traces.py` (deterministic). Baselines: `bench/drift_baselines.py`, ported from "
        "Gemini CLI's `packages/core/src/services/loopDetectionService.ts` (tool-call loop: 5 identical calls in a "
        "row; content loop: a 50-char chunk 10 times close together; its LLM check after 30 turns needs a model "
        "and is left out) and OpenHands' `openhands/controller/stuck.py` (4 equal action/observation pairs; 3 "
        "equal actions with errors; 3 equal agent messages; A-B-A-B-A-B; 10 condensations; 3 empty messages). "
        "Phoenix: `phoenix_protocol.agent._drift.detect` with its defaults (`repeat_limit` 3, `window` 10, "
        "`stall_minutes` 20, `drift_failure_share` 0.7, the default `drift_exempt_commands`), fed as its "
        "PostToolUse heartbeat feeds it (shell commands normalised): it sees tool calls only, not text. "
        "`Phoenix, no durations`: the same, as from a CLI that sends no `duration_ms`.",
        "",
        "A drift trace counts as detected when the first alarm comes at or after the step where the drift "
        "begins (an *early alarm* in the ordinary work before it counts as a miss); steps to detection are "
        "counted from that step (0 = on it). On a normal trace any alarm is a false positive.",
        "",
        CAVEATS,
        "",
        "### Conclusions (computed from the numbers below)",
        "",
        *conclusions(outcomes),
        "",
        "### Side by side (detected/traces · median steps to detection)",
        "",
        *_summary(outcomes),
        "",
    ]
    for name in DETECTORS:
        lines += [*_detector_table(name, outcomes), ""]
    lines += ["### Where each catches or misses", "", *_catches(outcomes), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="print every trace's verdicts")
    parser.add_argument("--out", default=str(HERE / "results" / "drift_compare.md"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    outcomes = evaluate()
    elapsed = time.perf_counter() - started
    text = report(outcomes, elapsed)
    print(text)
    if args.verbose:
        by_trace: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by_trace.setdefault(o.trace.name, []).append(o)
        for name, rows in by_trace.items():
            t = rows[0].trace
            cells = []
            for o in rows:
                d = o.detection
                cells.append(
                    f"{o.detector}: " + ("-" if d is None else f"{d.kind}@{d.index}" + (" EARLY" if o.early else ""))
                )
            print(f"{name:24} start={t.drift_start!s:4} steps={len(t.steps):3} | " + " | ".join(cells) + f"  {t.note}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
