"""Every ``phx team`` command through ``cli([...])``: the JSON answers and the exit codes.

Time is pinned with ``PHOENIX_NOW_MS`` (the system clock honours it), so liveness, ZOMBIE mode
and lead re-attachment are tested without sleeping.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import git, phx_unread
from phoenix_protocol.cli._main import cli


def metadata_row(project: Path, team_id: str, text: str | None = None) -> str:
    """The team's metadata column in ``.phoenix/phoenix.db`` (replaced by ``text``, a hand edit)."""
    with sqlite3.connect(project / ".phoenix" / "phoenix.db") as db:
        if text is not None:
            db.execute("UPDATE phx_teams SET metadata = ? WHERE team_id = ?", (text, team_id))
        return str(db.execute("SELECT metadata FROM phx_teams WHERE team_id = ?", (team_id,)).fetchone()[0])


T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MIN = 60_000


def phx(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """Run ``phx ARGS --json``; the exit code and the JSON document it printed."""
    capsys.readouterr()
    code = cli([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def at(monkeypatch: pytest.MonkeyPatch, ms: int) -> None:
    monkeypatch.setenv("PHOENIX_NOW_MS", str(ms))


@pytest.fixture(autouse=True)
def _in_project(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    at(monkeypatch, T0)


@pytest.fixture
def team_id(capsys: pytest.CaptureFixture[str]) -> str:
    code, data = phx(capsys, "team", "create", "release 2.0", "--lead", "lead", "--check-command", "true")
    assert code == 0
    for name in ("alice", "bob"):
        assert phx(capsys, "team", "join", data["team"]["team_id"], name)[0] == 0
    return str(data["team"]["team_id"])


def test_create_join_list(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, data = phx(
        capsys, "team", "create", "τ engine+schema", "--lead", "lead", "--facts-command", "git rev-parse HEAD"
    )
    assert code == 0 and data["ok"] is True
    team = data["team"]
    tid = team["team_id"]
    assert tid.startswith("engine-schema-") and team["status"] == "pending" and team["schema_version"] == "1.1"
    assert team["settings"] == {"check_command": None, "facts_command": "git rev-parse HEAD"}
    assert json.loads(metadata_row(project, tid))["team_id"] == tid
    assert not (project / ".phoenix" / "teams").exists()

    code, data = phx(capsys, "team", "join", tid, "alice", "--role", "tester", "--session", "claude-tm-1")
    assert code == 0 and data["teammate"]["role"] == "tester" and data["teammate"]["session_id"] == "claude-tm-1"
    code, data = phx(capsys, "team", "join", tid, "bob", "--role", "astronaut")
    assert code == 2 and data["ok"] is False and "role must be one of" in data["error"]["message"]
    code, data = phx(capsys, "team", "join", tid, "../bob")
    assert code == 2 and data["error"]["type"] == "InvalidIdError"

    code, data = phx(capsys, "team", "list")
    assert code == 0 and data["teams"] == [
        {"team_id": tid, "name": "τ engine+schema", "status": "active", "lead": "lead", "tasks": 0}
    ]

    # Text mode: the id is the last line of `phx team create` (for scripts).
    capsys.readouterr()
    assert cli(["team", "create", "second", "--lead", "lead"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("second-") and json.loads(metadata_row(project, last))["name"] == "second"
    assert cli(["team", "list"]) == 0 and last in capsys.readouterr().out


def test_unknown_team_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = phx(capsys, "team", "tasks", "no-such-team")
    assert code == 2 and data["error"]["type"] == "TeamNotFoundError"
    assert phx(capsys, "team", "list")[1]["teams"] == []
    code, data = phx(capsys, "team", "create", "  ", "--lead", "lead")
    assert code == 2 and "needs a name" in data["error"]["message"]
    capsys.readouterr()
    assert cli(["team", "create", "x"]) == 2  # --lead is required
    assert "Missing option '--lead'" in capsys.readouterr().err


def test_tasks_dependencies_and_ready(capsys: pytest.CaptureFixture[str], team_id: str) -> None:
    code, data = phx(capsys, "team", "task", "add", team_id, "Schema")
    assert code == 0 and data["task"]["task_id"] == "task-0001" and data["task"]["status"] == "pending"
    code, data = phx(capsys, "team", "task", "add", team_id, "Engine", "--after", "task-0001")
    assert data["task"]["dependencies"] == ["task-0001"]
    code, data = phx(capsys, "team", "task", "add", team_id, "Tests")
    code, data = phx(capsys, "team", "task", "depend", team_id, "task-0003", "--on", "task-0002")
    assert code == 0 and data["task"]["dependencies"] == ["task-0002"]
    code, data = phx(capsys, "team", "task", "depend", team_id, "task-0001", "--on", "task-0003")
    assert code == 2 and "cycle: task-0001 → task-0003 → task-0002 → task-0001" in data["error"]["message"]
    code, data = phx(capsys, "team", "task", "add", team_id, "Orphan", "--after", "task-0042")
    assert code == 2 and "no task 'task-0042'" in data["error"]["message"]

    code, data = phx(capsys, "team", "tasks", team_id)
    assert code == 0 and [t["task_id"] for t in data["tasks"]] == ["task-0001", "task-0002", "task-0003"]
    code, data = phx(capsys, "team", "ready", team_id)
    assert code == 0 and [t["task_id"] for t in data["ready"]] == ["task-0001"]
    capsys.readouterr()
    assert cli(["team", "tasks", team_id]) == 0
    text = capsys.readouterr().out
    assert "task-0003" in text and "task-0002" in text and "Schema" in text


def test_claim_release_done_reassign_sweep(
    capsys: pytest.CaptureFixture[str], team_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for title in ("One", "Two"):
        phx(capsys, "team", "task", "add", team_id, title)
    code, data = phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    assert code == 0 and data["task"]["assigned_to"] == "alice" and data["task"]["status"] == "in_progress"
    code, data = phx(capsys, "team", "claim", team_id, "task-0001", "--as", "bob")
    assert code == 4 and data["error"]["type"] == "ClaimConflictError"
    assert "already claimed by alice" in data["error"]["message"]
    code, data = phx(capsys, "team", "claim", team_id, "task-0001", "--as", "mallory")
    assert code == 2
    code, data = phx(capsys, "team", "release", team_id, "task-0001", "--as", "bob")
    assert code == 4
    code, data = phx(capsys, "team", "release", team_id, "task-0001", "--as", "alice")
    assert code == 0 and data["task"]["status"] == "pending" and data["task"]["assigned_to"] is None

    phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    code, data = phx(
        capsys, "team", "done", team_id, "task-0001", "--as", "alice", "--check", "red", "--file", "src/a.py"
    )
    assert code == 0 and data["task"]["status"] == "blocked"
    assert data["task"]["checkpoint"]["check_status"] == "red"
    assert data["task"]["checkpoint"]["files_modified"] == ["src/a.py"]
    code, data = phx(capsys, "team", "reassign", team_id, "task-0001", "bob")
    assert code == 0 and data["task"]["assigned_to"] == "bob"
    assert data["task"]["checkpoint"]["inherited_from"] == "alice"
    assert data["task"]["checkpoint"]["files_modified"] == ["src/a.py"]
    code, data = phx(capsys, "team", "done", team_id, "task-0001", "--as", "bob", "--file", "src/b.py")
    assert code == 0 and data["task"]["status"] == "completed"
    assert data["task"]["checkpoint"]["files_modified"] == ["src/a.py", "src/b.py"]
    latest = data["task"]["checkpoint"]["name"]
    code, exported = phx(capsys, "team", "export", team_id, ".team-state")
    assert code == 0 and exported["directory"] == str(Path(".team-state", team_id))
    assert json.loads((Path(".team-state") / team_id / "checkpoints" / latest).read_text())["team_id"] == team_id
    code, data = phx(capsys, "team", "reassign", team_id, "task-0001", "alice")
    assert code == 4
    capsys.readouterr()
    assert cli(["team", "done", team_id, "task-0001", "--as", "bob", "--check", "purple"]) == 2

    # Sweep: alice holds task-0002 and goes silent for 31 minutes; bob keeps beating.
    phx(capsys, "team", "claim", team_id, "task-0002", "--as", "alice")
    phx(capsys, "team", "heartbeat", team_id, "alice")
    code, data = phx(capsys, "team", "sweep", team_id)
    assert code == 0 and data["returned"] == []
    at(monkeypatch, T0 + 31 * MIN)
    phx(capsys, "team", "heartbeat", team_id, "bob")
    code, data = phx(capsys, "team", "sweep", team_id)
    assert code == 0 and [t["task_id"] for t in data["returned"]] == ["task-0002"]
    assert data["returned"][0]["checkpoint"]["inherited_from"] == "alice"


def test_send_inbox_ack_replay(capsys: pytest.CaptureFixture[str], team_id: str) -> None:
    code, data = phx(
        capsys, "team", "send", team_id, "--from", "alice", "--to", "bob", "--type", "question",
        "--subject", "Deadlock?", "--body", "line 427", "--id", "msg-001",
    )  # fmt: skip
    assert code == 0 and data["duplicate"] is False
    message = data["message"]
    assert (
        message["seq"] == 1 and message["from"] == "alice" and message["to"] == "bob" and message["type"] == "question"
    )
    code, data = phx(
        capsys, "team", "send", team_id, "--from", "alice", "--to", "bob", "--type", "question",
        "--subject", "Deadlock?", "--body", "line 427", "--id", "msg-001",
    )  # fmt: skip
    assert code == 0 and data["duplicate"] is True and data["message"]["seq"] == 1
    code, data = phx(
        capsys, "team", "send", team_id, "--from", "alice", "--to", "bob", "--subject", "Deadlock?",
        "--body", "another body", "--id", "msg-001",
    )  # fmt: skip
    assert code == 4 and data["error"]["type"] == "MessageConflictError"
    code, data = phx(capsys, "team", "send", team_id, "--from", "bob", "--to", "*", "--subject", "all", "--body", "b")
    assert code == 0 and data["message"]["seq"] == 2
    code, data = phx(
        capsys, "team", "send", team_id, "--from", "bob", "--to", "nobody", "--subject", "s", "--body", "b"
    )
    assert code == 2

    # Ack before delivery is refused; the inbox delivers; a second look has nothing new.
    code, data = phx(capsys, "team", "ack", team_id, "1", "--as", "bob")
    assert code == 2 and "not been delivered" in data["error"]["message"]
    code, data = phx(capsys, "team", "inbox", team_id, "--as", "bob")
    assert code == 0 and [m["msg_id"] for m in data["messages"]] == ["msg-001"]  # not his own broadcast
    code, data = phx(capsys, "team", "inbox", team_id, "--as", "bob")
    assert code == 0 and data["messages"] == []
    code, data = phx(capsys, "team", "inbox", team_id, "--as", "alice", "--limit", "1")
    assert [m["seq"] for m in data["messages"]] == [2]
    code, data = phx(capsys, "team", "ack", team_id, "1", "--as", "bob")
    assert code == 0 and data == {"ok": True, "seq": 1, "acked_by": ["bob"]}
    code, data = phx(capsys, "team", "ack", team_id, "1", "--as", "alice")
    assert code == 2 and "only a recipient" in data["error"]["message"]
    code, data = phx(capsys, "team", "replay", team_id, "--last", "5")
    assert code == 0 and [m["seq"] for m in data["messages"]] == [1, 2]
    assert data["messages"][0]["acked_by"] == ["bob"]

    capsys.readouterr()
    assert cli(["team", "inbox", team_id, "--as", "bob"]) == 0
    assert "(no new messages)" in capsys.readouterr().out
    assert cli(["team", "replay", team_id]) == 0
    assert "Deadlock?" in capsys.readouterr().out


def test_heartbeat_status_and_zombie_mode(
    capsys: pytest.CaptureFixture[str], team_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_SESSION_ID", "claude-tm-7")
    code, data = phx(capsys, "team", "heartbeat", team_id, "alice")
    assert code == 0 and data["heartbeat"]["seq"] == 1 and data["heartbeat"]["ms"] == T0
    assert data["heartbeat"]["session_id"] == "claude-tm-7"
    assert phx(capsys, "team", "heartbeat", team_id, "alice")[1]["heartbeat"]["seq"] == 2
    monkeypatch.setenv("PHOENIX_SESSION_ID", "")  # set but empty: no session (found in review)
    assert phx(capsys, "team", "heartbeat", team_id, "alice")[1]["heartbeat"]["seq"] == 3
    monkeypatch.setenv("PHOENIX_SESSION_ID", "claude-tm-7")
    code, data = phx(capsys, "team", "heartbeat", team_id, "mallory")
    assert code == 2

    code, data = phx(capsys, "team", "status", team_id)
    assert code == 0 and data["team"]["team_id"] == team_id
    classes = {m["name"]: m["class"] for m in data["probe"]["teammates"]}
    assert classes == {"lead": "online", "alice": "online", "bob": "online"}
    phx(capsys, "team", "task", "add", team_id, "Parser")
    phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    code, data = phx(capsys, "team", "status", team_id, "--as", "alice")
    assert code == 0 and data["zombie"] is False and [t["task_id"] for t in data["tasks"]] == ["task-0001"]

    at(monkeypatch, T0 + 6 * MIN)  # the lead, silent since it created the team
    code, data = phx(capsys, "team", "status", team_id, "--as", "alice")
    assert code == 0 and data["zombie"] is True and data["lead_silence_ms"] == 6 * MIN
    assert data["checkpoint"]["kind"] == "full"
    capsys.readouterr()
    assert cli(["team", "status", team_id, "--as", "alice"]) == 0
    assert "ZOMBIE mode" in capsys.readouterr().out
    assert cli(["team", "status", team_id]) == 0
    out = capsys.readouterr().out
    assert "alice: online" in out and "lead: online" in out

    # A skewed clock: alice's beat from 5 minutes in the future.
    at(monkeypatch, T0 + 11 * MIN)
    phx(capsys, "team", "heartbeat", team_id, "alice")
    at(monkeypatch, T0 + 6 * MIN)
    code, data = phx(capsys, "team", "status", team_id)
    alice = next(m for m in data["probe"]["teammates"] if m["name"] == "alice")
    assert alice["skew"] is True and alice["source"] == "sequence" and alice["elapsed_ms"] == -5 * MIN


def test_checkpoint_consolidate_complete(capsys: pytest.CaptureFixture[str], team_id: str, project: Path) -> None:
    code, data = phx(capsys, "team", "checkpoint", team_id)
    assert code == 0 and data["checkpoint"] == {"name": "checkpoint-00000001.json", "seq": 1, "kind": "full"}
    phx(capsys, "team", "task", "add", team_id, "Ship")
    phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    phx(capsys, "team", "done", team_id, "task-0001", "--as", "alice")
    head = git(project, "rev-parse", "HEAD").strip()

    code, data = phx(capsys, "team", "complete", team_id)
    assert code == 4 and "only a consolidating team can complete" in data["error"]["message"]
    code, data = phx(capsys, "team", "consolidate", team_id)
    assert code == 0 and data["consolidation"]["green"] is True and data["consolidation"]["head"] == head
    assert phx(capsys, "team", "tasks", team_id)[0] == 0

    # The lead stages work and dies: a partial consolidation, seen by probe and resume.
    (project / "new.py").write_text("x = 1\n")
    git(project, "add", "new.py")
    code, data = phx(capsys, "team", "probe", team_id)
    assert code == 0
    status = next(s for s in data["steps"] if s["step"] == "team status")
    assert status["partial_consolidation"]["staged"] == ["new.py"]
    code, data = phx(capsys, "team", "consolidate", team_id, "--resolve", "inspect")
    assert code == 0 and "+x = 1" in data["consolidation"]["diff"]
    capsys.readouterr()
    assert cli(["team", "consolidate", team_id, "--resolve", "inspect"]) == 0
    assert "new.py" in capsys.readouterr().out
    code, data = phx(capsys, "team", "consolidate", team_id, "--resolve", "retry")
    assert code == 0 and data["consolidation"]["choice"] == "retry" and data["consolidation"]["green"] is True
    code, data = phx(capsys, "team", "consolidate", team_id, "--resolve", "abort")
    assert code == 0 and data["consolidation"] == {"choice": "abort", "reset_to": head, "reopened": ["task-0001"]}
    assert not (project / "new.py").exists()

    phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    phx(capsys, "team", "done", team_id, "task-0001", "--as", "alice")
    assert phx(capsys, "team", "consolidate", team_id)[0] == 0
    (project / "README.md").write_text("# released\n")
    code, data = phx(capsys, "team", "complete", team_id)
    assert code == 4 and "uncommitted changes" in data["error"]["message"]
    git(project, "commit", "-qam", "release")
    code, data = phx(capsys, "team", "complete", team_id)
    assert code == 0 and data == {"ok": True, "team_id": team_id, "status": "completed"}

    # Completed: read-only (exit 4), still readable, resume is a permanent error (exit 2).
    code, data = phx(capsys, "team", "task", "add", team_id, "More")
    assert code == 4 and data["error"]["type"] == "TeamReadOnlyError"
    assert phx(capsys, "team", "claim", team_id, "task-0001", "--as", "bob")[0] == 4
    assert phx(capsys, "team", "tasks", team_id)[0] == 0
    code, data = phx(capsys, "team", "resume", team_id, "--session", "lead-1")
    assert code == 2 and data["ok"] is False and data["steps"][-1]["step"] == "team status"
    code, data = phx(capsys, "team", "list")
    assert data["teams"][0]["status"] == "completed"


def test_consolidate_red_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = phx(capsys, "team", "create", "red", "--lead", "lead", "--check-command", "exit 3")
    tid = data["team"]["team_id"]
    phx(capsys, "team", "join", tid, "alice")
    code, data = phx(capsys, "team", "consolidate", tid)
    assert code == 0 and data["consolidation"]["green"] is False and data["consolidation"]["exit_code"] == 3
    assert phx(capsys, "team", "list")[1]["teams"][0]["status"] == "active"
    capsys.readouterr()
    assert cli(["team", "consolidate", tid]) == 0
    assert "check red" in capsys.readouterr().out
    code, data = phx(capsys, "team", "consolidate", tid, "--resolve", "abort")
    assert code == 4 and "no last good commit" in data["error"]["message"]


def test_resume_and_probe_exit_codes(
    capsys: pytest.CaptureFixture[str], team_id: str, monkeypatch: pytest.MonkeyPatch, project: Path
) -> None:
    code, data = phx(capsys, "team", "resume", "no-such-team", "--session", "lead-1")
    assert code == 2 and data["ok"] is False and data["steps"][0]["step"] == "discovery"
    code, data = phx(capsys, "team", "probe", "no-such-team")
    assert code == 2

    code, data = phx(capsys, "team", "resume", team_id, "--session", "lead-1")
    assert code == 0 and data["ok"] is True and data["attached"] is True and data["exit_code"] == 0
    assert [s["step"] for s in data["steps"]] == [
        "discovery",
        "team status",
        "lead session",
        "probe teammates",
        "verify facts",
        "load mailbox",
        "summary",
    ]
    assert data["summary"]["teammates"] == {"online": 3}

    # Another session while lead-1 is active (seen 2 minutes ago): transient, exit 1.
    at(monkeypatch, T0 + 2 * MIN)
    code, data = phx(capsys, "team", "resume", team_id, "--session", "lead-2")
    assert code == 1 and data["attached"] is False and "lead-1" in data["steps"][-1]["detail"]
    code, data = phx(capsys, "team", "probe", team_id)  # probing never fails on the binding
    assert code == 0 and data["attached"] is False
    assert "attached in session lead-1" in next(s for s in data["steps"] if s["step"] == "lead session")["detail"]
    monkeypatch.setenv("PHOENIX_SESSION_ID", "lead-1")
    code, data = phx(capsys, "team", "probe", team_id)
    assert code == 0 and data["attached"] is False
    code, data = phx(capsys, "team", "resume", team_id)  # the session from $PHOENIX_SESSION_ID
    assert code == 0
    monkeypatch.delenv("PHOENIX_SESSION_ID")

    # After 5 minutes of silence, a new session re-attaches; facts changed: a warning, still 0.
    assert phx(capsys, "team", "checkpoint", team_id)[0] == 0  # records the facts
    at(monkeypatch, T0 + 8 * MIN)
    (project / "README.md").write_text("# changed\n")
    code, data = phx(capsys, "team", "resume", team_id, "--session", "lead-2")
    assert code == 0 and data["attached"] is True
    levels = {s["step"]: s["level"] for s in data["steps"]}
    assert levels["lead session"] == "warn" and levels["verify facts"] == "warn"
    capsys.readouterr()
    assert cli(["team", "resume", team_id, "--session", "lead-2"]) == 0
    text = capsys.readouterr().out
    assert "summary" in text and f"Team {team_id}" in text

    # A corrupt metadata record: permanent (resume exit 2); other commands say "corrupt" (exit 3).
    metadata_row(project, team_id, "{")
    code, data = phx(capsys, "team", "resume", team_id, "--session", "lead-2")
    assert code == 2 and "not valid JSON" in data["steps"][0]["detail"]
    code, data = phx(capsys, "team", "tasks", team_id)
    assert code == 3 and data["error"]["type"] == "CorruptStateError"


def test_newer_schema_exit_3(capsys: pytest.CaptureFixture[str], team_id: str, project: Path) -> None:
    data = json.loads(metadata_row(project, team_id))
    data["schema_version"] = "9.0"
    metadata_row(project, team_id, json.dumps(data))
    code, out = phx(capsys, "team", "ready", team_id)
    assert code == 3 and out["error"]["type"] == "SchemaVersionError" and "newer Phoenix" in out["error"]["message"]
    code, out = phx(capsys, "team", "list")
    assert code == 0 and "newer Phoenix" in out["teams"][0]["error"]
    code, out = phx(capsys, "team", "resume", team_id, "--session", "s")
    assert code == 2


def test_resume_and_probe_json_fast_path(capsys: pytest.CaptureFixture[str], team_id: str) -> None:
    """``phx team resume|probe TEAM --json`` skip click and rich (``_entry``); same answers."""
    from phoenix_protocol.cli._entry import main

    def entry(*args: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = main(list(args))
        return code, json.loads(capsys.readouterr().out)

    code, fast = entry("team", "resume", team_id, "--json", "--session", "lead-1")
    assert code == 0 and fast["ok"] is True and fast["attached"] is True
    code, full = phx(capsys, "team", "resume", team_id, "--session", "lead-1")
    assert code == 0 and [s["step"] for s in fast["steps"]] == [s["step"] for s in full["steps"]]
    assert set(fast) == set(full) and fast["summary"].keys() == full["summary"].keys()
    code, probed = entry("team", "probe", team_id, "--json")
    assert code == 0 and probed["attached"] is False
    code, busy = entry("team", "resume", team_id, "--json", "--session", "lead-2")
    assert code == 1 and busy["ok"] is False
    code, missing = entry("team", "resume", "no-such-team", "--json", "--session", "lead-1")
    assert code == 2 and missing["steps"][0]["step"] == "discovery"
    # What the fast path does not handle goes to the full CLI: the same exit codes and errors.
    code, bad = entry("team", "resume", "../escape", "--json")
    assert code == 2 and bad["error"]["type"] == "InvalidIdError"
    capsys.readouterr()
    assert main(["team", "probe", team_id, "--json", "--session", "x"]) == 2  # probe has no --session
    assert "No such option" in json.loads(capsys.readouterr().out)["error"]["message"]  # as JSON too


def test_inspected_diff_shows_control_characters(
    capsys: pytest.CaptureFixture[str], team_id: str, project: Path
) -> None:
    """`phx team consolidate --resolve inspect` prints teammates' staged changes: an ESC or a
    bidi override in them is shown (visible), not sent to the terminal; --json has the text as it is."""
    phx(capsys, "team", "task", "add", team_id, "Ship")
    phx(capsys, "team", "claim", team_id, "task-0001", "--as", "alice")
    phx(capsys, "team", "done", team_id, "task-0001", "--as", "alice")
    assert phx(capsys, "team", "consolidate", team_id)[0] == 0
    (project / "evil.py").write_text("x = '\x1b]0;pwned\x07\x1b[2J'  # \u202eevil\n\tindented\n")
    git(project, "add", "evil.py")
    capsys.readouterr()
    assert cli(["team", "consolidate", team_id, "--resolve", "inspect"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out and "\\u202eevil" in out
    assert "\n+\tindented\n" in out  # the layout stays
    code, data = phx(capsys, "team", "consolidate", team_id, "--resolve", "inspect")
    assert code == 0 and "+x = '\x1b]0;pwned\x07\x1b[2J'  # \u202eevil" in data["consolidation"]["diff"]


@pytest.mark.parametrize("as_json", [False, True])
def test_inbox_follow_whose_reader_went_away_stops_and_delivers_nothing(
    capsys: pytest.CaptureFixture[str], team_id: str, as_json: bool
) -> None:
    """`phx team inbox --follow | ...` whose reader went away ends (exit 0) instead of waiting
    forever, and marks nothing delivered: the message is still there for the next look."""
    code, _data = phx(
        capsys, "team", "send", team_id, "--from", "alice", "--to", "bob", "--subject", "s", "--body", "b"
    )
    assert code == 0
    proc = phx_unread(["team", "inbox", team_id, "--as", "bob", "--follow"] + (["--json"] if as_json else []))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode("utf-8", "replace")
    code, data = phx(capsys, "team", "inbox", team_id, "--as", "bob")
    assert code == 0 and [m["subject"] for m in data["messages"]] == ["s"]
