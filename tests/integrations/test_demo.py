"""phx demo: the real hooks, a real SIGKILL, a real recovery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _phx() -> str:
    return str(Path(sys.executable).parent / "phx")


def test_demo_json_recovers_the_killed_session() -> None:
    proc = subprocess.run([_phx(), "demo", "--json"], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["recovery_detected"] is True
    assert "Add JWT authentication to the API" in data["context"]
    assert "Refresh tokens are not implemented yet" in data["context"]
    assert "is gone" in data["context"]
    # Issue 30: short, each fact once, no bookkeeping; what the killed session did.
    context = data["context"]
    assert len(context) <= 2000, len(context)
    assert context.count("Add JWT authentication to the API") == 1
    assert "wrote `src/auth.py`" in context and ": 5 tool calls" in context
    for noise in ("input_digest", "Recent Activity", "state.json (before", "checkpoint", "identity", ".claude/"):
        assert noise not in context, noise
    kinds = [s["kind"] for s in data["steps"]]
    assert kinds.index("crash") < kinds.index("check") < kinds.index("recovery")
    check = next(s for s in data["steps"] if s["kind"] == "check")
    assert check["process_alive"] is False and check["state"]["status"] == "working"
    hooks = [s for s in data["steps"] if s["kind"] == "hook"]
    assert {h["title"] for h in hooks} >= {"SessionStart", "PostToolUse", "PostToolUseFailure", "SessionEnd"}
    assert all(r["exit"] == 0 and r["stderr"] == "" for h in hooks for r in h["results"])
    events = [e["event"] for e in data["events"]]
    assert events[0] == "session_start" and "session_end" in events[-4:]
    assert events[-1] == "session_checkpointed"  # PAIF: the session ends with a session checkpoint
    assert "tool_failed" in events
    assert data["workdir"] is None  # cleaned up


def test_demo_human_output() -> None:
    proc = subprocess.run([_phx(), "demo"], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "RECOVERY DETECTED" in proc.stdout and "recovered" in proc.stdout
