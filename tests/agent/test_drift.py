"""Operational drift detectors on synthetic traces, and the hook's once-only warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phoenix_protocol.agent._drift import Action, DriftConfig, detect
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent

MIN = 60_000


def trace(
    keys: list[str], *, step_ms: int = 20_000, ok: bool = True, durations: list[int] | None = None
) -> list[Action]:
    out = []
    for i, key in enumerate(keys):
        tool, _, digest = key.partition(":")
        duration = durations[i] if durations else None
        out.append(
            Action(
                i * step_ms,
                tool,
                digest or tool,
                ok=ok and not key.endswith("!"),
                duration_ms=duration,
                progress=tool == "Edit",
            )
        )
    return out


def kinds(actions: list[Action], **kw: int) -> list[str]:
    now = actions[-1].ts_ms if actions else 0
    return [s.kind for s in detect(actions, now_ms=now, **kw)]  # type: ignore[arg-type]


def test_the_same_action_four_times_is_drift() -> None:
    assert kinds(trace(["Bash:test"] * 3)) == []
    signals = detect(trace(["Bash:test"] * 4), now_ms=60_000)
    assert [s.kind for s in signals] == ["repetition"] and "4 times" in signals[0].detail


def test_progress_resets_repetition() -> None:
    assert kinds(trace(["Bash:test", "Bash:test", "Edit:fix", "Bash:test", "Bash:test", "Bash:test"])) == []


def test_cycles_count_too() -> None:
    assert kinds(trace(["Read:a", "Bash:b"] * 4)) == ["repetition"]
    assert kinds(trace(["Read:a", "Grep:b", "Bash:c"] * 4)) == ["repetition"]
    assert kinds(trace(["Read:a", "Bash:b"] * 3)) == []


def test_varied_work_is_not_drift() -> None:
    keys = [f"Read:file{i}" for i in range(20)] + [f"Bash:cmd{i}" for i in range(10)]
    assert kinds(trace(keys)) == []


def test_error_rate_rising() -> None:
    actions = trace([f"Bash:c{i}" for i in range(10)]) + trace(
        [f"Bash:e{i}!" for i in range(6)] + [f"Read:r{i}" for i in range(4)]
    )
    for i, a in enumerate(actions):
        a.ts_ms = i * 1000
    assert "error_rate" in kinds(actions)
    steady = trace([f"Bash:c{i}{'!' if i % 2 else ''}" for i in range(20)])
    assert "error_rate" not in kinds(steady)


def test_slowdown_over_three_windows() -> None:
    durations = [500] * 10 + [1500] * 10 + [4000] * 10
    actions = trace([f"Bash:c{i}" for i in range(30)], durations=durations)
    assert "slowdown" in kinds(actions)
    flat = trace([f"Bash:c{i}" for i in range(30)], durations=[2000] * 30)
    assert "slowdown" not in kinds(flat)


def test_no_progress_while_calls_keep_coming() -> None:
    actions = trace([f"Read:f{i}" for i in range(40)], step_ms=40_000)  # 26 minutes of reading, nothing written
    assert "no_progress" in kinds(actions)
    # A long think: the calls stopped 30 minutes ago.
    signals = detect(actions, now_ms=actions[-1].ts_ms + 30 * MIN, last_progress_ms=None)
    assert "no_progress" not in [s.kind for s in signals]
    # Progress ten minutes ago.
    signals = detect(actions, now_ms=actions[-1].ts_ms, last_progress_ms=actions[-1].ts_ms - 10 * MIN)
    assert "no_progress" not in [s.kind for s in signals]


def test_thresholds_are_configurable() -> None:
    assert kinds(trace(["Bash:test"] * 3), config=DriftConfig(repeat_limit=2)) == ["repetition"]  # type: ignore[arg-type]


def _payload(project: Path, **extra: object) -> bytes:
    body = {
        "session_id": "s1",
        "cwd": str(project),
        "hook_event_name": "PostToolUse",
        "transcript_path": "/dev/null",
        **extra,
    }
    return json.dumps(body).encode()


def test_hook_warns_the_model_once_and_recovers(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    run(["session-start"], _payload(project, hook_event_name="SessionStart", source="startup"))
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Make the migration pass", session_id="s1")
    agent.state.add_note("next_action", "Check the column types")
    call = {
        "tool_name": "Bash",
        "tool_input": {"command": "alembic  upgrade head", "description": "try 1"},
        "error": "boom",
    }
    outputs = []
    for i in range(6):
        call["tool_input"] = {"command": "alembic upgrade  head", "description": f"try {i}"}  # cosmetic differences
        outputs.append(run(["post-tool-use-failure"], _payload(project, hook_event_name="PostToolUseFailure", **call)))
    warnings = [out for _code, out, _err in outputs if out]
    assert len(warnings) == 1, outputs
    message = json.loads(warnings[0])["hookSpecificOutput"]["additionalContext"]
    assert (
        "going in circles" in message and "Make the migration pass" in message and "Check the column types" in message
    )
    state = agent.state.read()
    assert state.drift is not None and state.refresh_requested is not None
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery"]
    events = [e["event"] for e in agent.ops.read()[0]]
    assert events.count("drift_detected") == 1 and "emergency_recovery" in events
    # Progress clears it; the same loop later warns again.
    agent.state.add_note("open_loop", "alembic fails on the enum type")
    assert agent.state.read().drift is None


def test_alternating_failures_warn_once_per_episode_and_recover_once(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two failing calls taking turns give a new signature on nearly every call (the repetition of
    A, of B, the cycle, the error rate): each is logged once, the model is warned once per episode
    (issue 36: an A-B loop warned on consecutive calls), and only the first warning of the episode
    takes a recovery checkpoint (they used to warn on every other call, each with a ~23 KB
    checkpoint kept for a week)."""
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    run(["session-start"], _payload(project, hook_event_name="SessionStart", source="startup"))
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Make the migration pass", session_id="s1")
    outputs = []
    for i in range(30):
        command = "alembic upgrade head" if i % 2 else "pytest tests/test_db.py"
        call = {"tool_name": "Bash", "tool_input": {"command": command}, "error": "boom"}
        outputs.append(run(["post-tool-use-failure"], _payload(project, hook_event_name="PostToolUseFailure", **call)))
    assert all(code == 0 for code, _out, _err in outputs)
    warnings = [json.loads(out)["hookSpecificOutput"]["additionalContext"] for _code, out, _err in outputs if out]
    events = agent.ops.read()[0]
    detected = [e["meta"] for e in events if e["event"] == "drift_detected"]
    assert len(warnings) == 1 < len(detected)
    signatures = agent.state.read().drift["warned"]  # type: ignore[index]
    assert len(signatures) == len(set(signatures)) == len(detected) <= 6, signatures
    assert [d["episode_opened"] for d in detected] == [True] + [False] * (len(detected) - 1)
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery"]
    assert sum(1 for e in events if e["event"] == "emergency_recovery") == 1
    assert "A recovery checkpoint was taken." in warnings[0]
    # Progress ends the episode: the next loop opens a new one, with its own recovery checkpoint.
    agent.state.add_note("open_loop", "alembic fails on the enum type")
    assert agent.state.read().drift is None
    for _ in range(5):
        call = {"tool_name": "Bash", "tool_input": {"command": "make migrate"}, "error": "boom"}
        run(["post-tool-use-failure"], _payload(project, hook_event_name="PostToolUseFailure", **call))
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery", "recovery"]


def test_warn_once_remembers_the_episode() -> None:
    from phoenix_protocol.agent._drift import Signal, warn_once

    a, b = Signal("repetition", "A", "repeat:a"), Signal("repetition", "B", "repeat:b")
    first = warn_once([a], None, "t1")
    assert first is not None and first[0] is a and first[2] is True
    record = first[1]
    assert warn_once([a], record, "t2") is None
    second = warn_once([a, b], record, "t2")
    assert second is not None and second[0] is b and second[2] is False
    assert second[1]["warned"] == ["repeat:a", "repeat:b"] and second[1]["since"] == "t1"
    # A record written before the list was kept still counts its one signature.
    assert warn_once([a], {"signature": "repeat:a", "at": "t0"}, "t3") is None
