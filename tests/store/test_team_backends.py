"""One conformance suite for teams, run on both engines of the one team store: SQLite
(``phoenix.db`` in the home) and PostgreSQL (``PHOENIX_STORE=postgresql://…``, a fresh schema on
the real server per test)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _teams
from phoenix_protocol.store._team_store import MessageConflictError
from phoenix_protocol.store._teams import (
    ClaimConflictError,
    Team,
    TeamNotFoundError,
    TeamReadOnlyError,
    list_teams,
)


@pytest.fixture
def team(backend: str, home: Home, clock: ManualClock) -> Team:
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    return team


def test_the_configured_engine_is_used(backend: str, team: Team, home: Home) -> None:
    assert team.store.db.engine == ("postgresql" if backend == "postgres" else "sqlite")
    assert os.path.exists(os.path.join(home.root, "phoenix.db")) == (backend != "postgres")
    assert not os.path.exists(os.path.join(home.root, "teams"))  # no team folders any more


def test_create_open_list(team: Team, home: Home, clock: ManualClock) -> None:
    assert team.read()["status"] == "active"  # alice joined
    assert [m["name"] for m in team.roster()] == ["lead", "alice", "bob"]
    with pytest.raises(UsageError, match="already exists"):
        Team.create(home, "again", lead="lead", team_id="release-1", clock=clock)
    with pytest.raises(TeamNotFoundError, match="release-1"):  # names the teams that exist
        Team.open(home, "nope", clock=clock)
    Team.create(home, "other", lead="x", team_id="other-1", clock=clock)
    assert list_teams(home) == ["other-1", "release-1"]
    assert Team.open(home, "release-1", clock=clock).read()["lead"] == "lead"


def test_tasks_claims_and_dependencies(team: Team) -> None:
    parse = team.add_task("Write the parser")
    tests = team.add_task("Test the parser", after=[parse["task_id"]])
    with pytest.raises(UsageError, match="cycle"):
        team.add_dependency(parse["task_id"], tests["task_id"])
    assert [t["task_id"] for t in team.ready()] == [parse["task_id"]]
    claimed = team.claim(parse["task_id"], "alice")
    assert claimed["assigned_to"] == "alice" and claimed["status"] == "in_progress"
    assert team.claim(parse["task_id"], "alice")["assigned_to"] == "alice"  # idempotent for its owner
    with pytest.raises(ClaimConflictError, match="alice"):
        team.claim(parse["task_id"], "bob")
    with pytest.raises(ClaimConflictError, match="waits for"):
        team.claim(tests["task_id"], "bob")
    assert team.claim_next("bob") is None  # the only other task waits for the first
    team.done(parse["task_id"], "alice", files=["src/parser.py"])
    following = team.claim_next("bob")
    assert following is not None and following["task_id"] == tests["task_id"]
    assert next(m for m in team.roster() if m["name"] == "bob")["current_task"] == tests["task_id"]
    released = team.release(tests["task_id"], "bob")
    assert released["status"] == "pending" and released["assigned_to"] is None
    stored = {t["task_id"]: t for t in team.read()["tasks"]}
    assert stored[parse["task_id"]]["status"] == "completed"
    assert stored[parse["task_id"]]["checkpoint"]["files_modified"] == ["src/parser.py"]
    assert stored[tests["task_id"]]["dependencies"] == [parse["task_id"]]


def test_claim_next_takes_tasks_in_order(team: Team) -> None:
    ids = [team.add_task(f"task {i}")["task_id"] for i in range(4)]
    got = [team.claim_next(name) for name in ("alice", "bob", "alice", "bob")]
    assert [t["task_id"] for t in got if t] == ids
    assert team.claim_next("alice") is None


def test_heartbeats_and_liveness(team: Team, clock: ManualClock) -> None:
    first = team.heartbeat("alice", session_id="s-1")
    second = team.heartbeat("alice")
    assert (first["seq"], second["seq"]) == (1, 2)
    assert team.liveness("alice")["class"] == "online"
    clock.advance(45 * 60)
    assert team.liveness("alice")["class"] == "suspended"
    assert team.liveness("bob")["source"] == "roster"


def test_mailbox(team: Team) -> None:
    box = team.mailbox
    one = team.send("alice", "bob", subject="hello", body="parser ready", msg_id="m-1")
    again = team.send("alice", "bob", subject="hello", body="parser ready", msg_id="m-1")
    assert again.duplicate and again.seq == one.seq
    team.send("bob", "*", type="question", subject="who owns CI?", body="")
    token = "ghp_" + "a" * 36
    team.send("lead", "alice", subject="creds", body=f"use {token}")
    with pytest.raises(MessageConflictError, match="different content"):
        team.send("alice", "bob", subject="hello", body="something else", msg_id="m-1")
    with pytest.raises(MessageConflictError):
        team.send("bob", "alice", subject="hello", body="parser ready", msg_id="m-1")
    assert [m.seq for m in box.replay(10)] == [1, 2, 3]  # no gap for the duplicate or the conflicts
    inbox = box.fetch("bob")
    assert [m.subject for m in inbox] == ["hello"] and inbox.through_seq == 3  # not its own broadcast
    assert box.unread_count("alice") == 2
    alice = box.fetch("alice", limit=1)
    assert [m.seq for m in alice] == [2] and alice.through_seq == 2
    box.mark_delivered("alice", alice.through_seq)
    rest = box.fetch("alice")
    assert [m.seq for m in rest] == [3] and token not in rest[0].body
    with pytest.raises(UsageError, match="not been delivered"):
        box.ack("alice", 3)
    with pytest.raises(UsageError, match="not for"):
        box.ack("alice", 1)
    box.mark_delivered("alice", rest.through_seq)
    box.mark_delivered("alice", 1)  # never moves back
    box.ack("alice", 3)
    box.ack("alice", 3)
    assert box.acked_by(3) == ["alice"] and box.get(3) is not None
    assert box.unread_count("alice") == 0
    assert box.cursor_state("alice")["delivered_seq"] == 3
    assert box.stats()["count"] == 3
    with pytest.raises(UsageError, match="ends at"):
        box.mark_delivered("bob", 99)


def test_wait_wakes_on_a_new_message(team: Team) -> None:
    box = team.mailbox
    assert box.wait("bob", timeout=0.2) is False

    def later() -> None:
        time.sleep(0.3)
        Team.open(team.home, team.id, clock=team.clock).send("alice", "bob", subject="ping", body="")

    sender = threading.Thread(target=later)
    started = time.monotonic()
    sender.start()
    assert box.wait("bob", timeout=20) is True
    sender.join()
    assert time.monotonic() - started < 10


def test_checkpoints_and_retention(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_teams, "KEEP_CHECKPOINTS", 3)
    task = team.add_task("Write the parser")
    team.claim(task["task_id"], "alice")  # a task checkpoint
    info = team.checkpoint(kind="full", reason="by hand")
    latest = team.latest_checkpoint()
    assert latest is not None and latest["seq"] == info["seq"] and latest["checkpoint_type"] == "full"
    assert latest["metadata"]["tasks"][0]["assigned_to"] == "alice"
    for _ in range(4):
        team.checkpoint(kind="messages")
    names = team.store.checkpoint_names()
    assert len(names) == 3 and names[-1] == f"checkpoint-{info['seq'] + 4:08d}.json"
    full = team.latest_checkpoint(kind="full")
    assert full is None or full["seq"] >= info["seq"]


def test_completed_team_is_read_only(team: Team) -> None:
    task = team.add_task("Ship")
    team.claim(task["task_id"], "alice")
    team.done(task["task_id"], "alice")
    team.transition("consolidating")
    team.transition("completed")
    with pytest.raises(TeamReadOnlyError):
        team.add_task("more")
    with pytest.raises(TeamReadOnlyError):
        team.claim_next("bob")
    with pytest.raises(TeamReadOnlyError):
        team.send("alice", "bob", subject="late", body="")
    assert team.read()["status"] == "completed"


def test_schema_version_and_roster_survive_a_reopen(team: Team, clock: ManualClock) -> None:
    again = Team.open(team.home, team.id, clock=clock)
    data: dict[str, Any] = again.read()
    assert data["schema_version"] == _teams.SCHEMA_VERSION
    assert again.roster() == team.roster()


def test_the_watchdog_sweeps_a_silent_teammates_task(team: Team, clock: ManualClock) -> None:
    from phoenix_protocol.services._watchdog import check_teams

    task = team.add_task("Write the parser")
    team.claim(task["task_id"], "alice")
    team.heartbeat("alice")
    team.heartbeat("bob")
    clock.advance(45 * 60)  # alice falls silent
    team.heartbeat("bob")
    team.heartbeat("lead")
    rows = {r["name"]: r for r in check_teams(team.home, clock=clock)}
    assert rows["alice"]["class"] == "suspended" and rows["alice"]["action"] == "tasks_returned"
    assert rows["bob"]["class"] == "online"
    assert [t["task_id"] for t in team.ready()] == [task["task_id"]]


def test_unread_counts_match_the_inboxes_through_random_traffic(team: Team) -> None:
    import random

    rng = random.Random(8)
    names = ["lead", "alice", "bob"]
    box = team.mailbox
    for step in range(60):
        if rng.random() < 0.7:
            sender = rng.choice(names)
            to = rng.choice(["*", *[n for n in names if n != sender]])
            msg_id = f"m-{step}" if step % 7 else "m-dup"
            try:
                team.send(sender, to, subject=f"step {step}", body="", msg_id=msg_id)
            except MessageConflictError:
                assert msg_id == "m-dup" and step > 0  # the id is taken by other content
        else:
            reader = rng.choice(names)
            inbox = box.fetch(reader, limit=rng.randint(1, 4))
            box.mark_delivered(reader, inbox.through_seq)
        for reader in names:
            assert box.unread_count(reader) == len(box.fetch(reader)), (step, reader)
