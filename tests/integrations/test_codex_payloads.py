"""Codex's payloads and outputs as the hooks handle them (``_clients.adapt_payload``,
``adapt_output``), with the payloads Codex 0.171.0 sent (tests/e2e/test_codex.py runs the real one):
no timestamp, a string ``tool_response``, ``apply_patch`` for file edits, no session-id variable."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from phoenix_protocol.integrations._clients import CLAUDE_CODE, CODEX, adapt_output, adapt_payload
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.integrations._install import install_hooks

PATCH = (
    "*** Begin Patch\n*** Add File: notes/plan.md\n+# Plan\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch\n"
)


def _payload(project: Path, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "01a21f80-94ce-77d1-9c72-1bee5f6276a2",
        "transcript_path": str(project / "rollout.jsonl"),
        "cwd": str(project),
        "hook_event_name": event,
        "model": "gpt-5.5",
        "permission_mode": "bypassPermissions",
        **extra,
    }


def test_apply_patch_names_its_files_and_its_failure(tmp_path: Path) -> None:
    done = adapt_payload(
        CODEX,
        _payload(
            tmp_path,
            "PostToolUse",
            tool_name="apply_patch",
            tool_input={"command": PATCH},
            tool_response="Exit code: 0\nWall time: 0.1 seconds\nOutput:\nSuccess. Updated the following files:\n",
        ),
    )
    assert done["tool_input"]["file_path"] == "notes/plan.md (+1 more)"
    assert isinstance(done["tool_response"], str)  # success stays as it came
    failed = adapt_payload(
        CODEX,
        _payload(
            tmp_path,
            "PostToolUse",
            tool_name="apply_patch",
            tool_input={"command": "*** Begin Patch\n*** Delete File: gone.txt\n*** End Patch\n"},
            tool_response="Exit code: 1\nWall time: 0.0 seconds\nOutput:\nFailed to find gone.txt\n",
        ),
    )
    assert failed["tool_input"]["file_path"] == "gone.txt"
    assert failed["tool_response"] == {"success": False, "error": "apply_patch exited 1: Failed to find gone.txt"}
    # A shell command's response is its output only: nothing to tell, left alone.
    shell = _payload(tmp_path, "PostToolUse", tool_name="Bash", tool_input={"command": "false"}, tool_response="")
    assert adapt_payload(CODEX, dict(shell)) == shell
    # Claude Code's payloads are not Codex's.
    claude = _payload(tmp_path, "PostToolUse", tool_name="apply_patch", tool_input={"command": PATCH})
    assert "file_path" not in adapt_payload(CLAUDE_CODE, claude)["tool_input"]


def test_session_start_output_always_carries_hook_specific_output() -> None:
    assert adapt_output(CODEX, "session-start", None) is None  # nothing printed is fine
    notice = json.loads(adapt_output(CODEX, "session-start", '{"systemMessage": "Phoenix Protocol: ..."}') or "")
    assert notice == {"systemMessage": "Phoenix Protocol: ...", "hookSpecificOutput": {"hookEventName": "SessionStart"}}
    full = '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "x"}}'
    assert adapt_output(CODEX, "session-start", full) == full
    assert adapt_output(CLAUDE_CODE, "session-start", '{"systemMessage": "x"}') == '{"systemMessage": "x"}'
    assert adapt_output(CODEX, "post-tool-use", '{"systemMessage": "x"}') == '{"systemMessage": "x"}'


def test_codex_session_through_the_hooks(project: Path) -> None:
    """Codex's payloads, as 0.171.0 sent them, through ``phx hook --client codex``: no timestamp
    anywhere (Phoenix's clock times everything), the session recorded with its client, the patch's
    file in the brief's recent work, a failed hook's notice still a valid SessionStart output."""
    argv = ["--client", "codex"]
    code, out, err = run(
        ["session-start", *argv], json.dumps(_payload(project, "SessionStart", source="startup")).encode()
    )
    assert code == 0 and err == "", err
    if out:
        assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    for tool, tool_input, response in [
        ("Bash", {"command": "pytest -q"}, "3 passed\n"),
        ("apply_patch", {"command": PATCH}, "Exit code: 0\nWall time: 0.1 seconds\nOutput:\nSuccess.\n"),
    ]:
        payload = _payload(
            project,
            "PostToolUse",
            turn_id="t-1",
            tool_name=tool,
            tool_input=tool_input,
            tool_response=response,
            tool_use_id="call_1",
        )
        assert run(["post-tool-use", *argv], json.dumps(payload).encode()) == (0, "", "")
    stop = _payload(project, "Stop", turn_id="t-1", stop_hook_active=False, last_assistant_message="Done.")
    assert run(["stop", *argv], json.dumps(stop).encode()) == (0, "", "")
    end = {
        k: v
        for k, v in _payload(project, "SessionEnd", reason="other").items()
        if k not in ("model", "permission_mode")
    }
    assert run(["session-end", *argv], json.dumps(end).encode())[0] == 0
    agent_dir = project / ".phoenix" / "agents" / "default"
    state = json.loads((agent_dir / "state.json").read_text())
    assert state["status"] == "idle" and state["tool_calls"] == 2
    assert [w[1:3] for w in state["recent_work"]] == [["Bash", "pytest -q"], ["apply_patch", "notes/plan.md (+1 more)"]]
    events = [json.loads(line) for line in (agent_dir / "ops.jsonl").read_text().splitlines()]
    [start] = [e for e in events if e["event"] == "session_start"]
    assert start["meta"]["client"] == "codex"

    # A SessionStart that fails (a directory where state.json was) still answers as Codex wants it.
    (agent_dir / "state.json").unlink()
    (agent_dir / "state.json").mkdir()
    code, out, err = run(
        ["SessionStart", *argv], json.dumps(_payload(project, "SessionStart", source="startup")).encode()
    )
    assert code == 0 and err.count("\n") == 1 and err.startswith("phoenix: session-start hook:")
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "SessionStart"


def test_codex_entries_raise_the_context_limit(project: Path) -> None:
    result = install_hooks("codex", "project", project_dir=str(project))
    hooks = json.loads(Path(result.path).read_text())["hooks"]
    [entry] = hooks["SessionStart"][0]["hooks"]
    assert entry["additionalContextLimit"] == 10_000  # tokens: 10,000 characters of up to 4 bytes
    assert all(
        "additionalContextLimit" not in g["hooks"][0] for e, gs in hooks.items() if e != "SessionStart" for g in gs
    )
    assert hooks["SessionEnd"][0]["hooks"][0]["timeout"] <= 3  # Codex clamps a longer one
    assert result.notes and any("Trust all and continue" in n for n in result.notes)
    assert os.path.basename(result.path) == "hooks.json"
