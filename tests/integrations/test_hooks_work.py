"""The PostToolUse hook records what the agent did (issue 30, item 7): the commands it ran and the
files it wrote, screened for secrets, bounded, without Phoenix's own bookkeeping calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import _WORK_CHARS, run
from phoenix_protocol.services._agent import Agent

SECRET = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"


def _tool(project: Path, tool: str, tool_input: dict[str, Any], *, failed: bool = False) -> None:
    event = "PostToolUseFailure" if failed else "PostToolUse"
    body = {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(project),
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
        **({"error": "Exit code 1"} if failed else {"tool_response": {"stdout": "", "stderr": ""}}),
    }
    code, out, err = run(["post-tool-use-failure" if failed else "post-tool-use"], json.dumps(body).encode())
    assert (code, out, err) == (0, "", "")


def _work(project: Path) -> list[list[Any]]:
    return Agent.open("default", home=Home(str(project / ".phoenix"))).state.read().recent_work


def test_commands_and_files_are_recorded_and_bookkeeping_is_not(project: Path) -> None:
    _tool(project, "Bash", {"command": 'phx state working "Migrate users table"'})
    _tool(project, "Bash", {"command": "/opt/venv/bin/state-update --working x"})
    _tool(project, "Write", {"file_path": str(project / "src" / "users.py"), "content": "x = 1\n"})
    _tool(project, "Read", {"file_path": str(project / "README.md")})
    _tool(project, "Edit", {"file_path": "/elsewhere/notes.txt", "old_string": "a", "new_string": "b"})
    _tool(project, "Bash", {"command": "pytest -q tests/test_users.py"}, failed=True)
    _tool(project, "Bash", {"command": "cat <<'EOF' > x.sql\nCREATE TABLE users ();\nEOF"})
    work = _work(project)
    assert [entry[1:] for entry in work] == [
        ["Write", "src/users.py", True],
        ["Edit", "/elsewhere/notes.txt", True],
        ["Bash", "pytest -q tests/test_users.py", False],
        ["Bash", "cat <<'EOF' > x.sql …", True],
    ]
    state = Agent.open("default", home=Home(str(project / ".phoenix"))).state.read()
    assert state.tool_calls == 7  # every call counts, bookkeeping or not


def test_a_secret_in_a_command_never_reaches_state_json(project: Path) -> None:
    _tool(project, "Bash", {"command": f"git push https://{SECRET}@github.com/acme/app.git main"})
    _tool(project, "Bash", {"command": f"export GITHUB_TOKEN={SECRET} && gh pr list"})
    text = (project / ".phoenix" / "agents" / "default" / "state.json").read_text()
    assert SECRET[:12] not in text and SECRET[-12:] not in text
    details = [entry[2] for entry in _work(project)]
    assert details == ["git push […] main", "export […] && gh pr list"]


def test_a_long_command_is_cut_at_a_word(project: Path) -> None:
    words = " ".join(f"file_{i}.py" for i in range(200))
    _tool(project, "Bash", {"command": f"ruff check {words}"})
    [entry] = _work(project)
    assert entry[2].startswith("ruff check file_0.py") and entry[2].endswith(" …")
    assert len(entry[2]) <= _WORK_CHARS + 2
    assert entry[2][:-2].split(" ")[-1].startswith("file_")  # whole words only
