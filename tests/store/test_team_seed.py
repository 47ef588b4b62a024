"""Seed 004's six tests (section 8, "Testing"), with an injected clock: nothing sleeps.

- Test 1: Resume after 5 min timeout (happy path)
- Test 2: Resume after 60 min timeout (ZOMBIE mode)
- Test 3: Teammate offline, reassign task
- Test 4: Partial consolidation recovery
- Test 5: Network partition + message delivery timeout
- Test 6: Clock skew (negative elapsed) handling
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import git
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._team_resume import EXIT_ATTACHED, probe, resume
from phoenix_protocol.store._teams import ClaimConflictError, Team

MINUTE = 60.0


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))


@pytest.fixture
def phome(project: Path) -> Home:
    return Home(str(project / ".phoenix"))


def seed_team(home: Home, clock: ManualClock, **kwargs: Any) -> Team:
    """The seed's team: a lead and three teammates, a schema → engine → test chain of tasks."""
    team = Team.create(home, "τ-engine+schema+test", lead="lead", clock=clock, **kwargs)
    team.join("engineer-a", role="engineer")
    team.join("engineer-b", role="engineer")
    team.join("tester-c", role="tester")
    schema = team.add_task("Schema")["task_id"]
    engine = team.add_task("Engine semantic", after=[schema])["task_id"]
    team.add_task("Integration tests", after=[engine])
    return team


def step(result: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in result.steps if s["step"] == name)
    return found


def test_1_resume_after_5_min_timeout_happy_path(phome: Home, clock: ManualClock) -> None:
    team = seed_team(phome, clock)
    assert resume(phome, team.id, session_id="claude-lead-ABC123", clock=clock).exit_code == EXIT_ATTACHED
    team.claim("task-0001", "engineer-b")
    team.done("task-0001", "engineer-b", files=["schema/workflow.xsd"])
    team.claim("task-0002", "engineer-a")
    team.send("engineer-a", "lead", type="info", subject="State machine finding", body="Found deadlock at line 427")
    team.checkpoint(reason="routine")

    # The lead times out; its teammates keep beating.
    clock.advance(seconds=5 * MINUTE, ms=1)
    for name in ("engineer-a", "engineer-b", "tester-c"):
        team.heartbeat(name)
    result = resume(phome, team.id, session_id="claude-lead-NEW", clock=clock)

    assert result.exit_code == EXIT_ATTACHED and result.attached
    assert step(result, "lead session")["level"] == "warn"  # re-attached over the silent session
    assert step(result, "probe teammates")["level"] == "ok"
    assert step(result, "verify facts")["level"] == "ok"
    assert [m["subject"] for m in step(result, "load mailbox")["recent"]] == ["State machine finding"]
    s = result.summary
    assert s["tasks"] == {"completed": 1, "in_progress": 1, "pending": 1}
    assert s["teammates"] == {"online": 4}  # the lead's own heartbeat came with the attach
    assert s["status"] == "active"
    data = team.read()
    assert data["lead_session_id"] == "claude-lead-NEW"
    assert data["tasks"][1]["assigned_to"] == "engineer-a" and data["tasks"][1]["status"] == "in_progress"
    # The whole sequence stayed within the seed's 5-minute SLA by construction: no step waits.


def test_2_resume_after_60_min_timeout_zombie_mode(phome: Home, clock: ManualClock) -> None:
    team = seed_team(phome, clock)
    resume(phome, team.id, session_id="lead-1", clock=clock)
    team.claim("task-0001", "engineer-a")
    team.heartbeat("engineer-a")

    # The lead goes silent. After 5 minutes engineer-a's periodic check enters ZOMBIE mode and
    # keeps working, checkpointing every 30 s; the others stop beating.
    clock.advance(seconds=5 * MINUTE, ms=1)
    view = team.status_for("engineer-a")
    assert view["zombie"] is True and "checkpoint" in view
    detected = team.read()["session_log"]["lead_timeout_detected_at"]
    assert detected == clock.now_iso()
    zombie_checkpoints = 1
    for _ in range(110):  # 55 more minutes of work, one check every 30 s
        clock.advance(seconds=30)
        team.heartbeat("engineer-a")
        team.record_progress("task-0001", "engineer-a", files=["schema/workflow.xsd"], check="green")
        view = team.status_for("engineer-a")
        assert view["zombie"] is True
        zombie_checkpoints += "checkpoint" in view
    assert zombie_checkpoints == 111, "a checkpoint every 30 s while ZOMBIE"
    team.done("task-0001", "engineer-a")
    assert team.read()["session_log"]["lead_timeout_detected_at"] == detected

    result = resume(phome, team.id, session_id="lead-2", clock=clock)
    assert result.exit_code == EXIT_ATTACHED
    assert "silent for 60 min" in step(result, "lead session")["detail"]
    classes = {m["name"]: m["class"] for m in step(result, "probe teammates")["teammates"]}
    assert classes == {"lead": "stale", "engineer-a": "online", "engineer-b": "stale", "tester-c": "stale"}
    assert result.summary["tasks"] == {"completed": 1, "pending": 2}
    latest = team.latest_checkpoint(kind="full")
    assert latest is not None and latest["reason"].startswith("ZOMBIE")
    assert team.read()["session_log"]["lead_timeout_detected_at"] is None
    assert team.status_for("engineer-a")["zombie"] is False
    # The lead's ZOMBIE-era checkpoint holds engineer-a's progress.
    task = next(t for t in latest["metadata"]["tasks"] if t["task_id"] == "task-0001")
    assert task["checkpoint"]["files_modified"] == ["schema/workflow.xsd"]


def test_3_teammate_offline_reassign_task(phome: Home, clock: ManualClock) -> None:
    team = seed_team(phome, clock)
    team.claim("task-0001", "engineer-a")
    team.heartbeat("engineer-a")
    team.heartbeat("engineer-b")
    team.record_progress("task-0001", "engineer-a", files=["yawl/engine/YNetRunner.java"], check="pending")
    team.checkpoint(reason="engineer-a auto-save")

    # engineer-a's session dies mid-task; 16 minutes later the lead looks.
    clock.advance(seconds=16 * MINUTE)
    team.heartbeat("engineer-b")
    probed = {m["name"]: m for m in probe(team)["teammates"]}
    assert probed["engineer-a"]["class"] == "idle" and probed["engineer-a"]["current_task"] == "task-0001"
    assert probed["engineer-b"]["class"] == "online"
    latest = team.latest_checkpoint()
    assert latest is not None  # the checkpoint exists (good!)

    # B) manual reassign: engineer-b inherits engineer-a's checkpoint.
    task = team.reassign("task-0001", "engineer-b")
    assert task["assigned_to"] == "engineer-b" and task["checkpoint"]["inherited_from"] == "engineer-a"
    assert task["checkpoint"]["files_modified"] == ["yawl/engine/YNetRunner.java"]
    # engineer-a comes back too late: the task is not his any more.
    with pytest.raises(ClaimConflictError, match="held by engineer-b"):
        team.done("task-0001", "engineer-a")
    team.done("task-0001", "engineer-b", files=["yawl/engine/YEngine.java"])
    done = team.read()["tasks"][0]
    assert done["status"] == "completed"
    assert done["checkpoint"]["files_modified"] == ["yawl/engine/YEngine.java", "yawl/engine/YNetRunner.java"]

    # Without the lead: a teammate offline for 30+ minutes loses its task to the queue (sweep).
    team.claim("task-0002", "engineer-a")
    clock.advance(seconds=31 * MINUTE)
    team.heartbeat("engineer-b")
    assert [t["task_id"] for t in team.sweep()] == ["task-0002"]
    assert [t["task_id"] for t in team.ready()] == ["task-0002"]
    team.claim("task-0002", "engineer-b")


def test_4_partial_consolidation_recovery(phome: Home, project: Path, clock: ManualClock) -> None:
    team = seed_team(phome, clock, check_command="test -f README.md")
    for task_id, who in (("task-0001", "engineer-b"), ("task-0002", "engineer-a"), ("task-0003", "tester-c")):
        team.claim(task_id, who)
        team.done(task_id, who)
    good = git(project, "rev-parse", "HEAD").strip()
    assert team.consolidate()["green"] is True
    # Lead: git add yawl/engine/** schema/** [DONE]; typing the commit message... [TIMEOUT]
    for path in ("yawl/engine/YNetRunner.java", "schema/workflow.xsd"):
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(f"// {path}\n")
    git(project, "add", "yawl", "schema")
    clock.advance(seconds=8 * MINUTE)

    result = resume(phome, team.id, session_id="lead-2", clock=clock)
    assert result.exit_code == EXIT_ATTACHED
    status = step(result, "team status")
    assert status["level"] == "warn" and "partial consolidation" in status["detail"]
    partial = status["partial_consolidation"]
    assert partial["staged"] == ["schema/workflow.xsd", "yawl/engine/YNetRunner.java"]
    assert partial["last_good_commit"] == good and partial["options"] == ["retry", "abort", "inspect"]
    assert team.read()["session_log"]["last_action"] == "lead_attached"

    # C) INSPECT: show me what's staged.
    assert "+// yawl/engine/YNetRunner.java" in team.resolve_consolidation("inspect")["diff"]
    # A) RETRY: the check again, then commit and complete.
    assert team.resolve_consolidation("retry")["green"] is True
    # B) ABORT: back to the last good commit, tasks reopened.
    abort = team.resolve_consolidation("abort")
    assert abort["reset_to"] == good and sorted(abort["reopened"]) == ["task-0001", "task-0002", "task-0003"]
    assert not (project / "yawl").exists()
    assert git(project, "status", "--porcelain", "--untracked-files=no") == ""
    assert team.read()["status"] == "active"
    assert [t["task_id"] for t in team.ready()] == ["task-0001"]

    # And the happy ending after a retry: commit, complete, read-only.
    for task_id, who in (("task-0001", "engineer-b"), ("task-0002", "engineer-a"), ("task-0003", "tester-c")):
        team.claim(task_id, who)
        team.done(task_id, who)
    team.consolidate()
    (project / "done.txt").write_text("done\n")
    git(project, "add", "done.txt")
    assert team.partial_consolidation() is not None
    git(project, "commit", "-qm", "consolidated")
    assert team.partial_consolidation() is None
    assert team.complete()["status"] == "completed"


def test_5_network_partition_message_delivery_timeout(phome: Home, clock: ManualClock) -> None:
    team = seed_team(phome, clock)
    resume(phome, team.id, session_id="lead-1", clock=clock)
    team.claim("task-0001", "engineer-a")
    # The lead asks; the partition hides it from engineer-a (he does not read his inbox).
    sent = team.send("lead", "engineer-a", type="question", subject="What's your status?", body="?", msg_id="msg-001")
    assert sent.seq == 1
    for _ in range(10):  # engineer-a keeps working, checkpointing and beating meanwhile
        clock.advance(seconds=30)
        team.heartbeat("engineer-a")
        team.record_progress("task-0001", "engineer-a", files=["yawl/engine/YNetRunner.java"])

    # After 5 minutes the lead checks the delivery status: still pending.
    cursor = team.mailbox.cursor_state("engineer-a")
    assert cursor["delivered_seq"] < sent.seq and cursor["acked_through"] < sent.seq
    assert team.mailbox.acked_by(sent.seq) == []
    assert team.liveness("engineer-a")["class"] == "online"  # alive: C) wait, or A) retry

    # A) Retry: the same msg_id is stored once, however often it is resent (a retry after a
    # timeout whose first attempt did arrive).
    for _ in range(3):
        again = team.send(
            "lead", "engineer-a", type="question", subject="What's your status?", body="?", msg_id="msg-001"
        )
        assert again.duplicate and again.seq == sent.seq
    assert team.mailbox.stats()["count"] == 1

    # The partition heals. A fetch that was never handed over (the reader died before showing it)
    # does not count as delivered: it comes back.
    first_try = team.mailbox.fetch("engineer-a")
    assert [m.msg_id for m in first_try] == ["msg-001"]
    assert team.status_for("engineer-a")["unread"] == 1
    inbox = team.mailbox.fetch("engineer-a")
    assert [m.msg_id for m in inbox] == ["msg-001"], "exactly once: no duplicate, none lost"
    team.mailbox.mark_delivered("engineer-a", inbox[-1].seq)
    assert list(team.mailbox.fetch("engineer-a")) == []
    with pytest.raises(Exception, match="only a recipient"):
        team.mailbox.ack("engineer-b", sent.seq)
    team.mailbox.ack("engineer-a", sent.seq)
    team.mailbox.ack("engineer-a", sent.seq)  # idempotent
    assert team.mailbox.acked_by(sent.seq) == ["engineer-a"]
    reply = team.send("engineer-a", "lead", type="resolution", subject="Fixed guard logic", body="tests pass")
    assert reply.seq == 2

    # B) Assume offline instead: a teammate who stays unreachable loses the task.
    clock.advance(seconds=35 * MINUTE)
    team.heartbeat("engineer-b")
    back = team.sweep()
    assert [t["task_id"] for t in back] == ["task-0001"]
    exported = Path(team.export(str(phome.root + "-export"))["directory"])
    msgs = [json.loads(line) for line in (exported / "mailbox.jsonl").read_text().splitlines()]
    assert [m["msg_id"] for m in msgs] == ["msg-001", reply.msg_id]
    assert msgs[0]["acked_by"] == ["engineer-a"]


def test_6_clock_skew_negative_elapsed_handling(phome: Home, clock: ManualClock) -> None:
    team = seed_team(phome, clock)
    resume(phome, team.id, session_id="lead-1", clock=clock)
    # engineer-a's clock runs 5 minutes ahead of the lead's.
    a_clock = ManualClock(clock.now_ms() + 5 * 60_000)
    a_view = Team.open(phome, team.id, clock=a_clock)
    a_view.heartbeat("engineer-a")
    team.heartbeat("engineer-b")

    live = team.liveness("engineer-a")
    assert live["elapsed_ms"] == -300_000 and live["elapsed_ms"] < -30_000
    assert live["skew"] is True and live["source"] == "sequence"
    result = resume(phome, team.id, session_id="lead-1", clock=clock)
    probe_step = step(result, "probe teammates")
    assert probe_step["level"] == "warn"
    assert "clock skew from engineer-a: ordered by heartbeat sequence" in probe_step["detail"]

    # engineer-a dies. Timestamps alone would keep him fresh for 15 minutes and "online" for 10
    # of them; by sequence number he is idle after 10 minutes of the lead's clock without a new
    # beat, suspended after 30.
    clock.advance(seconds=9 * MINUTE)
    assert team.liveness("engineer-a")["class"] == "online"
    clock.advance(seconds=2 * MINUTE)  # 11 min: the beat is now 6 min old by its own timestamp
    live = team.liveness("engineer-a")
    assert live["skew"] is False and live["elapsed_ms"] == 6 * 60_000
    assert live["class"] == "idle", "seen 11 min ago by the lead's clock: at least that old"
    clock.advance(seconds=20 * MINUTE)
    assert team.liveness("engineer-a")["class"] == "suspended"

    # A teammate an hour ahead: the sequence is the only ordering that works.
    b_clock = ManualClock(clock.now_ms() + 60 * 60_000)
    b_view = Team.open(phome, team.id, clock=b_clock)
    b_view.heartbeat("engineer-b")  # seq 2
    assert team.liveness("engineer-b")["skew"] is True
    clock.advance(seconds=31 * MINUTE)
    assert team.liveness("engineer-b")["class"] == "suspended", "no new seq for 31 min of our clock"
    team.sweep()
    b_clock.advance(seconds=31 * MINUTE)
    b_view.heartbeat("engineer-b")  # seq 3: alive again, whatever its clock says
    live = team.liveness("engineer-b")
    assert live["skew"] is True and live["seq"] == 3 and live["class"] == "online"

    # Messages order by seq even when timestamps disagree.
    b_view.send("engineer-b", "lead", subject="from the future", body="b")
    team.send("lead", "engineer-b", subject="from the present", body="b")
    a_clock.set(clock.now_ms() - 10 * 60_000)  # and a clock that runs behind
    Team.open(phome, team.id, clock=a_clock).send("engineer-a", "lead", subject="from the past", body="b")
    replayed = team.mailbox.replay(10)
    assert [m.subject for m in replayed] == ["from the future", "from the present", "from the past"]
    assert [m.seq for m in replayed] == [1, 2, 3]
    assert sorted(m.ts_ms for m in replayed) != [m.ts_ms for m in replayed]
