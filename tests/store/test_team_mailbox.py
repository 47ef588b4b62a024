"""The team mailbox's rules, on both engines (SQLite ``phoenix.db`` and PostgreSQL): what a send
checks before it writes, redaction, who a broadcast is for, delivery only once handed over,
through-seqs, acknowledgements and the reader's cursor state."""

from __future__ import annotations

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import InvalidIdError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._team_store import MAX_BODY_BYTES, Inbox, Mailbox
from phoenix_protocol.store._teams import Team


@pytest.fixture
def team(backend: str, home: Home, clock: ManualClock) -> Team:
    team = Team.create(home, "mail", lead="lead", team_id="mail-1", clock=clock)
    for name in ("alice", "bob", "carol"):
        team.join(name)
    return team


@pytest.fixture
def box(team: Team) -> Mailbox:
    return team.mailbox


def reopen(team: Team) -> Mailbox:
    """The mailbox as another process would open it."""
    return Team.open(team.home, team.id, clock=team.clock).mailbox


def test_send_validates_before_writing(box: Mailbox) -> None:
    with pytest.raises(InvalidIdError):
        box.send("../alice", "bob", subject="s", body="b")
    with pytest.raises(InvalidIdError):
        box.send("alice", "bob/x", subject="s", body="b")
    with pytest.raises(InvalidIdError):
        box.send("alice", "bob", subject="s", body="b", msg_id="has space")
    with pytest.raises(UsageError, match="type must be one of"):
        box.send("alice", "bob", type="gossip", subject="s", body="b")
    with pytest.raises(UsageError, match="subject"):
        box.send("alice", "bob", subject="  ", body="b")
    with pytest.raises(UsageError, match="longer than 1024 bytes"):
        box.send("alice", "bob", subject="s" * 1025, body="b")
    with pytest.raises(UsageError, match="64 KB"):
        box.send("alice", "bob", subject="s", body="é" * (MAX_BODY_BYTES // 2 + 1))
    assert box.stats()["count"] == 0
    box.send("alice", "bob", subject="s", body="x" * MAX_BODY_BYTES)  # the limit itself is fine
    assert [m.seq for m in box.replay(5)] == [1]


def test_a_team_send_checks_the_roster_and_writes_nothing_else(team: Team) -> None:
    with pytest.raises(UsageError, match="'mallory' is not in team"):
        team.send("mallory", "bob", subject="s", body="b")
    with pytest.raises(UsageError, match=r"'mallory' is not in team mail-1 \(use \* to broadcast\)"):
        team.send("alice", "mallory", subject="s", body="b")
    tasks_before = team.read()["tasks"]
    team.add_task("A task the sends must not rewrite")
    rows_before = team.store.db.read(
        lambda tx: tx.all("SELECT task_id, record FROM phx_tasks WHERE team_id = ? ORDER BY task_id", (team.id,))
    )
    for i in range(7):
        team.send("alice", "*", subject=f"note {i}", body="")
    rows_after = team.store.db.read(
        lambda tx: tx.all("SELECT task_id, record FROM phx_tasks WHERE team_id = ? ORDER BY task_id", (team.id,))
    )
    assert rows_after == rows_before and tasks_before == []
    log = team.read()["session_log"]
    assert log["last_action"] in ("message_sent", "checkpoint_saved") and team.mailbox.stats()["count"] == 7


def test_subject_and_body_are_redacted(team: Team, box: Mailbox) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    message = box.send("alice", "bob", subject=f"token {token}", body=f"export GITHUB_TOKEN={token}")
    assert token not in message.subject and token not in message.body and "[REDACTED:" in message.body
    stored = team.store.db.read(lambda tx: tx.one("SELECT subject, body FROM phx_messages WHERE seq = 1"))
    assert stored is not None and token not in stored[0] + stored[1]


def test_broadcast_reaches_everyone_but_its_sender(box: Mailbox) -> None:
    box.send("lead", "*", subject="kickoff", body="go", msg_id="k")
    box.send("alice", "bob", subject="direct", body="to bob", msg_id="d1")
    box.send("bob", "*", subject="from bob", body="all", msg_id="b1")
    box.send("alice", "alice", subject="note to self", body="n", msg_id="self")
    assert [m.msg_id for m in box.fetch("bob")] == ["k", "d1"]
    assert [m.msg_id for m in box.fetch("alice")] == ["k", "b1", "self"]
    assert [m.msg_id for m in box.fetch("lead")] == ["b1"]
    assert [m.msg_id for m in box.fetch("carol")] == ["k", "b1"]
    for reader in ("bob", "alice", "lead", "carol"):
        assert box.unread_count(reader) == len(box.fetch(reader))


def test_fetch_does_not_deliver_and_the_cursor_only_moves_forward(team: Team, box: Mailbox) -> None:
    for i in range(5):
        box.send("alice", "bob", subject=f"m{i}", body="")
    first = box.fetch("bob")
    assert [m.seq for m in box.fetch("bob")] == [m.seq for m in first] == [1, 2, 3, 4, 5]
    assert box.unread_count("bob") == 5
    assert box.cursor_state("bob")["delivered_seq"] == 0
    box.mark_delivered("bob", 3)
    assert [m.seq for m in box.fetch("bob")] == [4, 5]
    box.mark_delivered("bob", 1)  # backwards: ignored
    assert box.cursor_state("bob")["delivered_seq"] == 3
    assert [m.seq for m in reopen(team).fetch("bob")] == [4, 5]
    with pytest.raises(UsageError, match="the mailbox ends at #5"):
        box.mark_delivered("bob", 6)
    with pytest.raises(UsageError):
        box.mark_delivered("bob", -1)
    box.mark_delivered("bob", 5)
    assert box.fetch("bob") == [] and box.unread_count("bob") == 0


def test_fetch_limit_and_through_seq(box: Mailbox) -> None:
    box.send("alice", "bob", subject="1", body="", msg_id="a")
    box.send("alice", "carol", subject="2", body="", msg_id="b")
    box.send("alice", "bob", subject="3", body="", msg_id="c")
    box.send("alice", "carol", subject="4", body="", msg_id="d")
    box.send("alice", "carol", subject="5", body="", msg_id="e")
    page = box.fetch("bob", limit=1)
    assert isinstance(page, Inbox)
    assert [m.seq for m in page] == [1] and page.through_seq == 1
    box.mark_delivered("bob", page.through_seq)
    rest = box.fetch("bob")
    assert [m.seq for m in rest] == [3] and rest.through_seq == 5  # saw everything up to #5
    box.mark_delivered("bob", rest.through_seq)
    assert box.fetch("bob").through_seq == 5
    with pytest.raises(UsageError):
        box.fetch("bob", limit=0)


def test_ack_requires_delivery_and_a_recipient(box: Mailbox) -> None:
    box.send("alice", "bob", subject="direct", body="", msg_id="d")
    box.send("alice", "*", subject="broadcast", body="", msg_id="b")
    box.send("bob", "*", subject="bob's broadcast", body="", msg_id="own")
    with pytest.raises(UsageError, match="not been delivered to bob"):
        box.ack("bob", 1)
    box.mark_delivered("bob", 3)
    with pytest.raises(UsageError, match="not for bob"):
        box.ack("bob", 3)  # his own broadcast
    box.mark_delivered("carol", 3)
    with pytest.raises(UsageError, match="addressed to bob, not for carol"):
        box.ack("carol", 1)
    with pytest.raises(UsageError, match="no message #9"):
        box.ack("bob", 9)
    box.ack("bob", 1)
    box.ack("bob", 2)
    box.ack("carol", 2)
    box.ack("bob", 2)  # idempotent
    assert box.acked_by(1) == ["bob"]
    assert box.acked_by(2) == ["bob", "carol"]
    assert box.acked_by(3) == [] and box.acked_by(99) == []
    assert [m.acked_by for m in box.replay(3)] == [["bob"], ["bob", "carol"], []]


def test_acks_out_of_order_and_the_cursor_state(team: Team, box: Mailbox) -> None:
    for i in range(10):  # bob gets the even ones, carol the odd ones
        box.send("alice", "bob" if i % 2 == 0 else "carol", subject=str(i), body="", msg_id=f"x{i}")
    box.mark_delivered("bob", 10)
    for seq in (5, 1, 9):
        box.ack("bob", seq)
    state = box.cursor_state("bob")
    assert state["acked_through"] == 1 and state["acked_ranges"] == [[5, 5], [9, 9]]
    box.ack("bob", 3)  # 1, 3, 5 are bob's first three, carol's 2 and 4 in between
    state = box.cursor_state("bob")
    assert state["acked_through"] == 5 and state["acked_ranges"] == [[9, 9]]
    box.ack("bob", 7)
    assert box.cursor_state("bob") == {
        "schema_version": 1,
        "reader": "bob",
        "delivered_seq": 10,
        "acked_through": 9,
        "acked_ranges": [],
    }
    assert reopen(team).cursor_state("bob")["acked_through"] == 9
    assert all(box.acked_by(s) == [] for s in (2, 4, 6, 8, 10))
    assert box.readers() == ["bob"]
