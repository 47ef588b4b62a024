"""Seed 004's parts found missing when tried as a user would (issue 32), each on both engines of
the team store (SQLite ``phoenix.db`` and PostgreSQL): the outbox with delivery state, recorded
progress (by hand and from the hooks' Write/Edit calls), a teammate re-attaching to its task,
the ZOMBIE episode at resume, stale teammates and the next checkpoint, non-members refused,
message id conflicts, and future-stamped heartbeats classed by when the store received them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._clock import ManualClock, iso_from_ms
from phoenix_protocol.core._errors import LockTimeoutError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._team_outbox import delivery, flush, send_queued
from phoenix_protocol.services._team_resume import EXIT_ATTACHED, EXIT_PERMANENT, resume
from phoenix_protocol.store._db import open_database
from phoenix_protocol.store._team_outbox import Outbox
from phoenix_protocol.store._team_store import MessageConflictError
from phoenix_protocol.store._teams import ClaimConflictError, NotAMemberError, Team

MINUTE = 60.0
TARGET = "http://10.0.0.5:8765"


@pytest.fixture
def team(backend: str, home: Home, clock: ManualClock) -> Team:
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    return team


# -- the outbox (seed 004 §4.3) -----------------------------------------------------------------


class Unreachable(LockTimeoutError):
    """What the transport raises while the network is partitioned (retryable)."""


def test_a_send_that_cannot_reach_the_server_is_queued_and_retried_with_its_id(team: Team, home: Home) -> None:
    outbox = Outbox(open_database(home, team.config), clock=team.clock)
    posted: list[str] = []
    network = {"up": False}

    def post(row: dict[str, Any]) -> dict[str, Any]:  # the server: team.send by the message's own id
        posted.append(row["msg_id"])
        if not network["up"]:
            raise Unreachable("the Phoenix server at http://10.0.0.5:8765 could not be reached")
        m = row["message"]
        return team.send(m["sender"], m["to"], subject=m["subject"], body=m["body"], msg_id=row["msg_id"]).as_dict()

    def retryable(exc: Exception) -> bool:
        return isinstance(exc, Unreachable)

    box = team.mailbox
    first = box.prepare("lead", "alice", type="question", subject="What's your status?", body="", msg_id="msg-001")
    row = send_queued(outbox, TARGET, team.id, first, post, retryable)
    assert row["state"] == "queued" and row["attempts"] == 1 and "could not be reached" in row["error"]
    second = box.prepare("lead", "*", type="info", subject="standup", body="in 5", msg_id=None)
    assert send_queued(outbox, TARGET, team.id, second, post, retryable)["state"] == "queued"
    assert [r["msg_id"] for r in outbox.queued(TARGET, team.id)] == ["msg-001", second["msg_id"]]
    assert box.stats()["count"] == 0  # nothing reached the team

    # The sender sees each message's state while the network is down.
    states = delivery(outbox, TARGET, team.id, "lead", lambda ids: team.delivery("lead", msg_ids=ids))
    assert [(m["msg_id"], m["state"], m["delivered"]) for m in states] == [
        ("msg-001", "queued", False),
        (second["msg_id"], "queued", False),
    ]
    # The same id with other content is a conflict, not a second message.
    other = box.prepare("lead", "alice", type="question", subject="something else", body="", msg_id="msg-001")
    with pytest.raises(MessageConflictError, match="different content"):
        send_queued(outbox, TARGET, team.id, other, post, retryable)

    # The network heals: the next flush sends both, in order, with their ids.
    network["up"] = True
    result = flush(outbox, TARGET, team.id, post, retryable)
    assert result == {"sent": ["msg-001", second["msg_id"]], "refused": [], "queued": 0, "error": None}
    assert [m.msg_id for m in box.replay(10)] == ["msg-001", second["msg_id"]]
    assert flush(outbox, TARGET, team.id, post, retryable)["sent"] == []  # nothing left to send

    # A post that reached the server but whose answer was lost is sent again: stored once.
    lost = box.prepare("lead", "bob", type="info", subject="lost answer", body="", msg_id="msg-003")
    team.send("lead", "bob", subject="lost answer", body="", msg_id="msg-003")
    assert send_queued(outbox, TARGET, team.id, lost, post, retryable)["state"] == "sent"
    assert box.stats()["count"] == 3

    # Delivery, read, acknowledged: per message and per recipient.
    def states_now() -> dict[str, tuple[str, list[str], list[str]]]:
        found = delivery(outbox, TARGET, team.id, "lead", lambda ids: team.delivery("lead", msg_ids=ids))
        return {m["msg_id"]: (m["state"], m["read_by"], m["acked_by"]) for m in found}

    assert states_now()["msg-001"] == ("delivered", [], [])
    inbox = box.fetch("alice")
    box.mark_delivered("alice", inbox.through_seq)
    assert states_now()["msg-001"] == ("read", ["alice"], [])
    assert states_now()[second["msg_id"]] == ("delivered", ["alice"], [])  # the broadcast: bob has not read it
    box.ack("alice", 1)
    assert states_now()["msg-001"] == ("acked", ["alice"], ["alice"])
    box.mark_delivered("bob", box.fetch("bob").through_seq)
    box.ack("bob", 2)
    box.ack("alice", 2)
    assert states_now()[second["msg_id"]] == ("acked", ["alice", "bob"], ["alice", "bob"])


def test_a_refused_message_is_not_sent_again(team: Team, home: Home) -> None:
    outbox = Outbox(open_database(home, team.config), clock=team.clock)
    team.send("lead", "alice", subject="taken", body="first", msg_id="msg-9")
    fields = team.mailbox.prepare("lead", "alice", type="info", subject="taken", body="second", msg_id="msg-9")

    def post(row: dict[str, Any]) -> dict[str, Any]:
        m = row["message"]
        return team.send(m["sender"], m["to"], subject=m["subject"], body=m["body"], msg_id=row["msg_id"]).as_dict()

    with pytest.raises(MessageConflictError):
        send_queued(outbox, TARGET, team.id, fields, post, lambda exc: False)
    row = outbox.get(TARGET, team.id, "msg-9")
    assert row is not None and row["state"] == "refused" and "MessageConflictError" in row["last_error"]
    assert outbox.queued(TARGET, team.id) == []
    with pytest.raises(MessageConflictError, match="was refused"):  # sent again as it was: still refused
        send_queued(outbox, TARGET, team.id, fields, post, lambda exc: False)


def test_an_error_to_fix_keeps_the_message_queued(team: Team, home: Home) -> None:
    outbox = Outbox(open_database(home, team.config), clock=team.clock)
    fields = team.mailbox.prepare("lead", "alice", type="info", subject="s", body="b", msg_id="msg-7")
    token = {"valid": False}

    def post(row: dict[str, Any]) -> dict[str, Any]:
        if not token["valid"]:
            raise UsageError("the server wants a valid bearer token")
        m = row["message"]
        return team.send(m["sender"], m["to"], subject=m["subject"], body=m["body"], msg_id=row["msg_id"]).as_dict()

    with pytest.raises(UsageError, match="bearer token"):
        send_queued(outbox, TARGET, team.id, fields, post, lambda exc: False)
    (row,) = outbox.queued(TARGET, team.id)
    assert row["msg_id"] == "msg-7" and "UsageError" in row["last_error"]
    token["valid"] = True
    assert flush(outbox, TARGET, team.id, post, lambda exc: False)["sent"] == ["msg-7"]


def test_delivery_of_local_messages(team: Team) -> None:
    team.send("alice", "bob", subject="one", body="", msg_id="a-1")
    team.send("alice", "*", subject="all", body="", msg_id="a-2")
    team.send("bob", "alice", subject="not alice's", body="")
    sent = team.delivery("alice")
    assert [(m["msg_id"], m["state"], m["recipients"]) for m in sent] == [
        ("a-1", "delivered", ["bob"]),
        ("a-2", "delivered", ["lead", "bob"]),
    ]
    assert [m["msg_id"] for m in team.delivery("alice", msg_ids=["a-2", "nope"])] == ["a-2"]
    with pytest.raises(NotAMemberError):
        team.delivery("mallory")


# -- progress, from the CLI and from the hooks ---------------------------------------------------


def test_progress_is_a_checkpoint_a_reassigned_task_hands_over(team: Team, clock: ManualClock) -> None:
    tid = team.add_task("Engine semantic")["task_id"]
    team.claim(tid, "alice")
    before = team.latest_checkpoint()
    clock.advance(seconds=30)
    task = team.record_progress(None, "alice", files=["yawl/engine/YNetRunner.java"], check="red", note="guard fixed")
    point = task["checkpoint"]
    assert point["files_modified"] == ["yawl/engine/YNetRunner.java"] and point["check_status"] == "red"
    assert point["note"] == "guard fixed" and point["notes"][-1]["by"] == "alice"
    assert point["last_progress_at"] == clock.now_iso()
    latest = team.latest_checkpoint()
    assert latest is not None and before is not None and latest["seq"] > before["seq"]
    assert latest["task"]["checkpoint"]["note"] == "guard fixed"  # the checkpoint holds the progress
    assert point["name"] == f"checkpoint-{latest['seq']:08d}.json"

    # The files alice's Write/Edit calls changed, noted by the PostToolUse hook, go with the task.
    from phoenix_protocol.agent._heartbeats import note_files

    note_files(team.heartbeat_dir, "alice", ["yawl/engine/YTask.java", "yawl/engine/YNetRunner.java"])
    handed = team.reassign(tid, "bob")
    assert handed["assigned_to"] == "bob" and handed["checkpoint"]["inherited_from"] == "alice"
    assert handed["checkpoint"]["files_modified"] == ["yawl/engine/YNetRunner.java", "yawl/engine/YTask.java"]
    assert handed["checkpoint"]["note"] == "guard fixed" and handed["checkpoint"]["check_status"] == "red"

    with pytest.raises(ClaimConflictError, match="held by bob"):
        team.record_progress(tid, "alice", note="still mine?")
    with pytest.raises(NotAMemberError):
        team.record_progress(tid, "mallory", note="x")
    with pytest.raises(UsageError, match="holds no unfinished task"):
        team.record_progress(None, "alice", note="which task?")
    with pytest.raises(UsageError, match="check must be"):
        team.record_progress(tid, "bob", check="purple")


def test_noted_files_survive_a_failed_take(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    from phoenix_protocol.agent._heartbeats import note_files

    tid = team.add_task("t")["task_id"]
    team.claim(tid, "alice")
    note_files(team.heartbeat_dir, "alice", ["a.py"])

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise LockTimeoutError("the database is busy")

    monkeypatch.setattr(team, "_progress", broken)
    with pytest.raises(LockTimeoutError):
        team.absorb_files("alice")
    monkeypatch.undo()
    assert team.absorb_files("alice") == ["a.py"]  # still there for the next take
    assert team.read()["tasks"][0]["checkpoint"]["files_modified"] == ["a.py"]
    assert team.absorb_files("alice") == []


def test_the_post_tool_use_hook_records_edited_files(
    backend: str, home: Home, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix_protocol.integrations import _hooks

    team = Team.create(home, "hooks", lead="lead", team_id="hooks-1")  # the hooks use the real clock
    team.join("alice")
    tid = team.add_task("Write the parser")["task_id"]
    team.claim(tid, "alice")
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    monkeypatch.setenv("PHOENIX_HOME", home.root)
    monkeypatch.setenv("PHOENIX_TEAM", team.id)
    monkeypatch.setenv("PHOENIX_TEAMMATE", "alice")
    monkeypatch.chdir(project)

    def tool(name: str, tool_input: dict[str, Any], response: dict[str, Any] | None = None) -> None:
        payload = {
            "session_id": "sess-1",
            "cwd": str(project),
            "hook_event_name": "PostToolUse",
            "tool_name": name,
            "tool_input": tool_input,
            "tool_response": response or {},
        }
        code, _out, err = _hooks.run(["post-tool-use"], json.dumps(payload).encode())
        assert code == 0 and err == ""

    tool("Write", {"file_path": str(project / "src" / "parser.py"), "content": "x"})
    tool("Edit", {"file_path": "tests/test_parser.py", "old_string": "a", "new_string": "b"})
    tool("Bash", {"command": "pytest"})  # not a file tool: nothing noted
    tool("Read", {"file_path": str(project / "README.md")})
    view = team.status_for("alice")  # the teammate's next look (SessionStart, phx team status --as)
    (mine,) = view["tasks"]
    assert mine["checkpoint"]["files_modified"] == ["src/parser.py", "tests/test_parser.py"]


# -- a teammate re-attaching to its task -----------------------------------------------------------


def test_attach_loads_the_tasks_checkpoint(team: Team, clock: ManualClock) -> None:
    tid = team.add_task("Engine semantic")["task_id"]
    team.claim(tid, "alice")
    team.record_progress(tid, "alice", files=["engine.py"], check="green", note="tests pass, not committed")
    team.send("lead", "alice", subject="ping", body="")

    # alice's session died; a new one attaches to the task.
    clock.advance(seconds=10 * MINUTE)
    info = team.attach("alice", tid, session_id="claude-tm-NEW")
    assert info["task"]["task_id"] == tid and info["task"]["assigned_to"] == "alice"
    assert info["checkpoint"]["files_modified"] == ["engine.py"] and info["checkpoint"]["check_status"] == "green"
    assert info["checkpoint"]["note"] == "tests pass, not committed"
    assert info["team_checkpoint"]["task"]["task_id"] == tid  # the team checkpoint that recorded it
    assert info["unread"] == 1
    mate = next(m for m in team.roster() if m["name"] == "alice")
    assert mate["session_id"] == "claude-tm-NEW" and mate["current_task"] == tid
    assert team.liveness("alice")["class"] == "online"  # attaching is a sign of life

    # Another teammate's task: refused, with the way to take it over.
    with pytest.raises(ClaimConflictError, match="phx team reassign"):
        team.attach("bob", tid)
    team.reassign(tid, "bob")
    taken = team.attach("bob", tid)
    assert taken["checkpoint"]["inherited_from"] == "alice" and taken["checkpoint"]["files_modified"] == ["engine.py"]
    # A pending task is claimed; a completed one and a stranger are refused.
    other = team.add_task("docs")["task_id"]
    assert team.attach("alice", other)["task"]["status"] == "in_progress"
    team.done(other, "alice")
    with pytest.raises(ClaimConflictError, match="completed"):
        team.attach("alice", other)
    with pytest.raises(NotAMemberError):
        team.attach("mallory", tid)
    with pytest.raises(UsageError, match="no task"):
        team.attach("alice", "task-9999")


# -- resume: the ZOMBIE episode, stale teammates, the next checkpoint --------------------------------


def test_resume_reports_the_zombie_episode_and_asks_for_status(team: Team, home: Home, clock: ManualClock) -> None:
    assert resume(home, team.id, session_id="lead-1", clock=clock).exit_code == EXIT_ATTACHED
    tid = team.add_task("Engine semantic")["task_id"]
    team.claim(tid, "alice")
    team.heartbeat("alice")
    team.heartbeat("bob")
    clock.advance(seconds=5 * MINUTE, ms=1)
    detected = clock.now_ms()
    assert team.status_for("alice")["zombie"] is True  # alice's periodic check: ZOMBIE mode
    for _ in range(6):
        clock.advance(seconds=30)
        team.heartbeat("alice")
        team.heartbeat("bob")
        team.record_progress(tid, "alice", files=["engine.py"], check="green", note="fixed guard logic")
        team.status_for("alice")

    probed = resume(home, team.id, session_id="lead-2", clock=clock, attach=False)
    zombie = next(s for s in probed.steps if s["step"] == "zombie")
    assert zombie["level"] == "warn" and zombie["detail"].startswith(
        f"Detected ZOMBIE at {iso_from_ms(detected)[11:16]}"
    )
    assert zombie["zombie"]["detected_at"] == iso_from_ms(detected)
    (alice,) = zombie["zombie"]["teammates"]
    assert alice["name"] == "alice" and alice["tasks"][0]["checkpoint"]["note"] == "fixed guard logic"
    latest = team.latest_checkpoint()
    assert latest is not None and zombie["zombie"]["latest_checkpoint"]["seq"] == latest["seq"]
    assert team.mailbox.stats()["count"] == 0  # a probe asks nobody

    result = resume(home, team.id, session_id="lead-2", clock=clock)
    assert result.exit_code == EXIT_ATTACHED
    zombie = next(s for s in result.steps if s["step"] == "zombie")
    assert [a["name"] for a in zombie["zombie"]["asked"]] == ["alice"]
    (question,) = team.mailbox.fetch("alice")
    assert question.subject == f"Detected ZOMBIE at {iso_from_ms(detected)[11:16]}. Status?"
    assert question.sender == "lead" and question.type == "question"
    assert "check green" in question.body and "engine.py" in question.body and "fixed guard logic" in question.body
    assert team.mailbox.fetch("bob") == []  # bob held no task and never noticed
    log = team.read()["session_log"]
    assert log["lead_timeout_detected_at"] is None and log["zombie_teammates"] == []
    assert log["last_zombie_episode"]["teammates"] == ["alice"]
    # Resumed again at once: no new episode, nobody asked twice.
    again = resume(home, team.id, session_id="lead-2", clock=clock)
    assert "zombie" not in [s["step"] for s in again.steps]
    assert team.mailbox.stats()["count"] == 1


def test_an_episode_nobody_noticed_is_found_from_the_leads_silence(team: Team, home: Home, clock: ManualClock) -> None:
    resume(home, team.id, session_id="lead-1", clock=clock)
    attached = clock.now_ms()
    tid = team.add_task("t")["task_id"]
    team.claim(tid, "bob")
    clock.advance(seconds=12 * MINUTE)
    team.heartbeat("bob")
    result = resume(home, team.id, session_id="lead-2", clock=clock)
    zombie = next(s for s in result.steps if s["step"] == "zombie")["zombie"]
    assert zombie["detected_ms"] == attached + 5 * 60_000 and [m["name"] for m in zombie["teammates"]] == ["bob"]
    assert [m.subject for m in team.mailbox.fetch("bob")] == [
        f"Detected ZOMBIE at {iso_from_ms(attached + 300_000)[11:16]}. Status?"
    ]


def test_stale_teammates_warn_and_all_stale_fails(team: Team, home: Home, clock: ManualClock) -> None:
    resume(home, team.id, session_id="lead-1", clock=clock)
    team.heartbeat("alice")
    team.heartbeat("bob")
    clock.advance(seconds=61 * MINUTE)
    team.heartbeat("alice")
    team.heartbeat("lead")
    result = resume(home, team.id, session_id="lead-1", clock=clock)
    step = next(s for s in result.steps if s["step"] == "probe teammates")
    assert result.exit_code == EXIT_ATTACHED and step["level"] == "warn"
    assert "stale" in step["detail"] and "bob" in step["detail"] and "phx team sweep" in step["detail"]

    clock.advance(seconds=61 * MINUTE)
    team.heartbeat("lead")
    failed = resume(home, team.id, session_id="lead-1", clock=clock)
    step = next(s for s in failed.steps if s["step"] == "probe teammates")
    assert failed.exit_code == EXIT_PERMANENT and not failed.attached and step["level"] == "error"
    assert "start a new team" in step["detail"] and "--allow-stale" in step["detail"]
    forced = resume(home, team.id, session_id="lead-1", clock=clock, allow_stale=True)
    assert forced.exit_code == EXIT_ATTACHED and forced.attached


def test_the_next_checkpoint_is_never_in_the_past(team: Team, home: Home, clock: ManualClock) -> None:
    team.checkpoint()
    clock.advance(seconds=3 * MINUTE)
    soon = resume(home, team.id, session_id="lead-1", clock=clock).summary["next_checkpoint_at"]
    assert soon == iso_from_ms(clock.now_ms() + 2 * 60_000)  # the periodic snapshot, 5 min after the last
    clock.advance(seconds=47 * MINUTE)
    team.heartbeat("alice")
    late = resume(home, team.id, session_id="lead-1", clock=clock)
    assert late.summary["next_checkpoint_at"] == clock.now_iso()  # overdue: due now, not 45 minutes ago


# -- non-members, conflicts ----------------------------------------------------------------------


def test_a_stranger_has_no_inbox(team: Team, home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    from phoenix_protocol.cli._main import cli

    team.send("lead", "*", subject="all hands", body="")
    code = cli(["team", "inbox", team.id, "--as", "mallory", "--json", "--home", home.root])
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and data["error"]["type"] == "NotAMemberError" and "mallory" in data["error"]["message"]
    assert team.mailbox.readers() == []  # no cursor made
    assert cli(["team", "ack", team.id, "1", "--as", "mallory", "--home", home.root]) == 2
    assert cli(["team", "inbox", team.id, "--as", "alice", "--json", "--home", home.root]) == 0
    assert [m["subject"] for m in json.loads(capsys.readouterr().out)["messages"]] == ["all hands"]


def test_a_reused_message_id_with_other_content_is_a_conflict(
    team: Team, home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.cli._main import cli

    base = ["team", "send", team.id, "--from", "alice", "--to", "bob", "--subject", "s", "--id", "msg-1"]
    assert cli([*base, "--body", "one", "--json", "--home", home.root]) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["duplicate"] is False and sent["queued"] is False  # the keys --server gives too
    assert cli([*base, "--body", "one", "--json", "--home", home.root]) == 0
    assert json.loads(capsys.readouterr().out)["duplicate"] is True
    assert cli([*base, "--body", "two", "--json", "--home", home.root]) == 4
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "MessageConflictError" and error["exit_code"] == 4
    assert team.mailbox.stats()["count"] == 1


# -- heartbeats stamped in the future ------------------------------------------------------------


def _age_arrival(team: Team, name: str, minutes: float) -> None:
    """Make the store's record of when ``name``'s last beat arrived ``minutes`` older (the
    database server's clock on PostgreSQL, the heartbeat file's time on SQLite)."""
    if team.store.shared_beats:
        team.store.db.transaction(
            lambda tx: tx.execute(
                "UPDATE phx_heartbeats SET observed_ms = observed_ms - ? WHERE team_id = ? AND name = ?",
                (int(minutes * 60_000), team.id, name),
            )
        )
        return
    path = os.path.join(team.heartbeat_dir, name + ".json")
    then = time.time() - minutes * 60
    os.utime(path, (then, then))


def test_a_future_heartbeat_is_classed_by_when_it_arrived(team: Team, clock: ManualClock) -> None:
    skewed = clock.now_ms() + 2 * 60 * 60_000  # alice's clock runs two hours fast
    team.store.beat("alice", now_ms=skewed, session_id=None)
    _age_arrival(team, "alice", 40)  # ... and she went silent 40 minutes ago; nobody looked meanwhile
    live = team.liveness("alice")
    assert live["skew"] is True and live["class"] == "suspended", live
    clock.advance(seconds=25 * MINUTE)
    assert team.liveness("alice")["class"] == "stale"  # and it keeps ageing

    # A skewed beat that arrived just now is a sign of life.
    team.store.beat("bob", now_ms=skewed, session_id=None)
    assert team.liveness("bob")["class"] == "online"
    clock.advance(seconds=11 * MINUTE)
    assert team.liveness("bob")["class"] == "idle"  # its stamp, still in the future, keeps nothing online


def test_a_leads_future_heartbeat_does_not_hide_its_silence(team: Team, clock: ManualClock) -> None:
    tid = team.add_task("t")["task_id"]
    team.claim(tid, "alice")
    clock.advance(seconds=10 * MINUTE)  # the lead's binding (creation) is 10 minutes old
    team.store.beat("lead", now_ms=clock.now_ms() + 2 * 60 * 60_000, session_id=None)  # the lead's clock: 2 h fast
    assert team.status_for("alice")["zombie"] is False  # it just arrived: the lead is there
    _age_arrival(team, "lead", 6)  # ... six minutes ago, and nothing since
    view = team.status_for("alice")
    assert view["zombie"] is True and 6 * 60_000 <= view["lead_silence_ms"] < 7 * 60_000
