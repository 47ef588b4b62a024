"""The team mailbox (``_mailbox``): idempotent sends, broadcasts, cursors, acknowledgements,
replay, rotation, compaction, crash leftovers, and reads that cost what is new."""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol import _durable, _mailbox
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._errors import InvalidIdError, SchemaVersionError, UsageError
from phoenix_protocol._mailbox import ARCHIVE_DIR, INDEX_DIR, MAX_BODY_BYTES, Inbox, Mailbox, Message


@pytest.fixture
def box(tmp_path: Path, clock: ManualClock) -> Iterator[Mailbox]:
    with Mailbox(str(tmp_path / "team"), team_id="team-1", clock=clock) as mailbox:
        yield mailbox


def reopen(box: Mailbox, **kwargs: Any) -> Mailbox:
    """A second Mailbox on the same directory: what another process sees."""
    return Mailbox(box.directory, team_id=box.team_id, clock=box.clock, max_bytes=box.max_bytes, **kwargs)


def lines(box: Mailbox) -> list[dict[str, Any]]:
    records, problems = box.log.read()
    assert not problems
    return records


def send(box: Mailbox, sender: str, to: str, n: int, prefix: str = "m", **kwargs: Any) -> list[Message]:
    return [
        box.send(sender, to, subject=f"{prefix} {i}", body=f"body {i}", msg_id=f"{prefix}-{i}", **kwargs)
        for i in range(n)
    ]


# -- sending -------------------------------------------------------------------------------------


def test_send_stores_one_line_per_message_with_gap_free_seq(box: Mailbox) -> None:
    first = box.send("alice", "bob", type="question", subject="Status?", body="Where are you at?", msg_id="q-1")
    second = box.send("bob", "*", type="resolution", subject="Done", body="Merged.")
    assert (first.seq, second.seq) == (1, 2)
    assert first.as_dict() == {
        "seq": 1,
        "msg_id": "q-1",
        "from": "alice",
        "to": "bob",
        "type": "question",
        "subject": "Status?",
        "body": "Where are you at?",
        "ts": "2026-01-01T00:00:00.000Z",
        "ts_ms": 1_767_225_600_000,
        "acked_by": [],
    }
    assert second.msg_id.startswith("m-") and not second.duplicate
    records = lines(box)
    assert [r["seq"] for r in records] == [1, 2]
    assert records[0] == {
        "seq": 1,
        "schema_version": 1,
        "kind": "message",
        "msg_id": "q-1",
        "from": "alice",
        "to": "bob",
        "type": "question",
        "subject": "Status?",
        "body": "Where are you at?",
        "ts": "2026-01-01T00:00:00.000Z",
        "ts_ms": 1_767_225_600_000,
    }


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
    assert not os.path.exists(box.path)
    box.send("alice", "bob", subject="s", body="x" * MAX_BODY_BYTES)  # the limit itself is fine
    assert [r["seq"] for r in lines(box)] == [1]


def test_subject_and_body_are_redacted(box: Mailbox) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    message = box.send("alice", "bob", subject=f"token {token}", body=f"export GITHUB_TOKEN={token}")
    raw = Path(box.path).read_text()
    assert token not in raw and "[REDACTED:" in raw
    assert token not in message.subject and token not in message.body


def test_files_are_private_and_readable_as_json(box: Mailbox) -> None:
    send(box, "alice", "bob", 3)
    box.mark_delivered("bob", 2)
    box.ack("bob", 1)
    box.reindex()
    for root, dirs, files in os.walk(box.directory):
        for d in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode) == 0o700
        for name in files:
            path = os.path.join(root, name)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
            if name.endswith(".lock"):
                continue
            text = Path(path).read_text()
            if name.endswith(".jsonl"):
                records = [json.loads(line) for line in text.splitlines()]
            else:
                records = [json.loads(text)]
            assert records and all(r["schema_version"] == 1 for r in records), path


# -- idempotency ---------------------------------------------------------------------------------


def test_same_id_twice_stores_once_and_returns_the_original(box: Mailbox) -> None:
    original = box.send("alice", "bob", subject="first", body="one", msg_id="retry-1")
    size = os.path.getsize(box.path)
    again = box.send("alice", "bob", subject="first", body="one", msg_id="retry-1")
    other = box.send("carol", "*", type="challenge", subject="changed", body="two", msg_id="retry-1")
    assert again.duplicate and other.duplicate and not original.duplicate
    for dup in (again, other):
        assert {k: v for k, v in dup.as_dict().items() if k != "duplicate"} == original.as_dict()
    assert os.path.getsize(box.path) == size
    assert [r["msg_id"] for r in lines(box)] == ["retry-1"]


def test_duplicates_are_found_by_another_process_in_every_place_a_message_can_be(
    tmp_path: Path, clock: ManualClock
) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="t", clock=clock, max_bytes=2048)
    send(box, "alice", "bob", 40)  # several rotated segments
    box.reindex()  # the first 40 in the id index
    send(box, "alice", "bob", 5, prefix="late")  # past the index: found in the tail
    box.mark_delivered("bob", 45)
    for seq in range(1, 46):
        box.ack("bob", seq)
    archived = box.compact(["alice", "bob"])["archived"]
    assert archived  # the oldest segments now live in mailbox.archive/
    other = reopen(box)
    for msg_id in ["m-0", "m-17", "m-39", "late-0", "late-4"]:
        dup = other.send("zed", "alice", subject="x", body="y", msg_id=msg_id)
        assert dup.duplicate and dup.sender == "alice" and dup.to == "bob", msg_id
    assert len(lines(box)) == 45


def test_index_lost_is_rebuilt_and_still_deduplicates(box: Mailbox) -> None:
    send(box, "alice", "bob", 30)
    box.reindex()
    for root, _dirs, files in os.walk(os.path.join(box.directory, INDEX_DIR), topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
    fresh = reopen(box)
    assert fresh.send("alice", "bob", subject="x", body="y", msg_id="m-3").duplicate
    assert fresh.unread_count("bob") == 30
    assert box.send("alice", "bob", subject="x", body="y", msg_id="m-29").duplicate  # a long-lived object too
    assert fresh.reindex() == 30
    assert len(lines(box)) == 30


# -- broadcasts, fetch and the delivered cursor -------------------------------------------------


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


def test_fetch_does_not_deliver_and_the_cursor_only_moves_forward(box: Mailbox) -> None:
    send(box, "alice", "bob", 5)
    first = box.fetch("bob")
    assert [m.seq for m in box.fetch("bob")] == [m.seq for m in first] == [1, 2, 3, 4, 5]
    assert box.unread_count("bob") == 5
    assert box.cursor_state("bob")["delivered_seq"] == 0
    box.mark_delivered("bob", 3)
    assert [m.seq for m in box.fetch("bob")] == [4, 5]
    box.mark_delivered("bob", 1)  # backwards: ignored
    assert box.cursor_state("bob")["delivered_seq"] == 3
    assert [m.seq for m in reopen(box).fetch("bob")] == [4, 5]
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


def test_delivery_timeout_redelivers_until_marked(box: Mailbox) -> None:
    """A reader that fetched but died before handing the messages over gets them again."""
    send(box, "lead", "bob", 3)
    reader = reopen(box)
    assert [m.seq for m in reader.fetch("bob")] == [1, 2, 3]
    del reader  # the reader "times out" before mark_delivered
    retry = reopen(box)
    got = retry.fetch("bob")
    assert [m.seq for m in got] == [1, 2, 3]
    retry.mark_delivered("bob", got[-1].seq)
    assert reopen(box).fetch("bob") == []


# -- acknowledgements ----------------------------------------------------------------------------


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
    journal = Path(box.directory, "mailbox.cursors", "bob.jsonl")
    size = journal.stat().st_size
    box.ack("bob", 2)  # idempotent: nothing written
    assert journal.stat().st_size == size
    assert box.acked_by(1) == ["bob"]
    assert box.acked_by(2) == ["bob", "carol"]
    assert box.acked_by(3) == [] and box.acked_by(99) == []
    assert [m.acked_by for m in box.replay(3)] == [["bob"], ["bob", "carol"], []]


def test_acks_out_of_order_merge_into_ranges(box: Mailbox) -> None:
    for i in range(10):  # bob gets the even ones, carol the odd ones
        box.send("alice", "bob" if i % 2 == 0 else "carol", subject=str(i), body="", msg_id=f"x{i}")
    box.mark_delivered("bob", 10)
    for seq in (5, 1, 9):
        box.ack("bob", seq)
    state = box.cursor_state("bob")
    assert state["acked_through"] == 1 and state["acked_ranges"] == [[5, 5], [9, 9]]
    box.ack("bob", 3)  # 1, 3, 5 are bob's first three: merged, carol's 2 and 4 in between
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
    assert reopen(box).cursor_state("bob")["acked_through"] == 9
    assert all(box.acked_by(s) == [] for s in (2, 4, 6, 8, 10))


def test_reader_state_survives_a_lost_or_stale_snapshot(box: Mailbox) -> None:
    send(box, "alice", "bob", 6)
    box.mark_delivered("bob", 6)
    for seq in (1, 2, 4):
        box.ack("bob", seq)
    expected = box.cursor_state("bob")
    snapshot = Path(box.directory, "mailbox.cursors", "bob.json")
    old = snapshot.read_text()
    box.ack("bob", 6)
    newer = box.cursor_state("bob")
    snapshot.write_text(old)  # stale: the journal holds one more event
    assert reopen(box).cursor_state("bob") == newer
    snapshot.unlink()  # lost: folded from the journal alone
    assert reopen(box).cursor_state("bob") == newer
    snapshot.write_text("{not json")
    assert reopen(box).cursor_state("bob") == newer
    assert expected["acked_through"] == 2


# -- replay, stats, rotation, compaction -------------------------------------------------------------


def test_replay_returns_the_newest_across_segments(tmp_path: Path, clock: ManualClock) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="t", clock=clock, max_bytes=1024)
    assert box.replay(5) == []
    send(box, "alice", "*", 20)
    assert [m.seq for m in box.replay(3)] == [18, 19, 20]
    assert [m.seq for m in box.replay(12)] == list(range(9, 21))
    assert [m.seq for m in box.replay(100)] == list(range(1, 21))
    assert box.replay(0) == []


def test_rotation_renames_never_deletes_and_reads_span_segments(tmp_path: Path, clock: ManualClock) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="t", clock=clock, max_bytes=1024)
    send(box, "alice", "bob", 30)
    names = sorted(n for n in os.listdir(box.directory) if n.startswith("mailbox.0"))
    assert len(names) >= 4
    spans = [tuple(int(x) for x in n[len("mailbox.") : -len(".jsonl")].split("-")) for n in names]
    assert spans[0][0] == 1 and all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    assert [r["seq"] for r in lines(box)] == list(range(1, 31))
    stats = box.stats()
    assert stats["count"] == 30 and stats["first_seq"] == 1
    assert stats["segments"] == len(names) + 1 and stats["archived_segments"] == 0
    assert stats["bytes"] == sum(os.path.getsize(p) for p in box.log.files())
    # a cursor in an old segment reads on into the newer ones
    box.mark_delivered("bob", 3)
    assert [m.seq for m in reopen(box).fetch("bob")] == list(range(4, 31))
    box.reindex()
    assert [m.seq for m in reopen(box).fetch("bob", limit=4)] == [4, 5, 6, 7]
    assert reopen(box).unread_count("bob") == 27
    for seq in (1, 9, 17, 30):
        got = reopen(box).get(seq)
        assert got is not None and got.msg_id == f"m-{seq - 1}"


def test_rotation_right_after_a_full_segment_keeps_the_seq(tmp_path: Path, clock: ManualClock) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="t", clock=clock, max_bytes=1024)
    box.send("alice", "bob", subject="first", body="")
    while not any(n.startswith("mailbox.0") for n in os.listdir(box.directory)):
        box.send("alice", "bob", subject="fill", body="x" * 100)
    count = box.stats()["count"]
    assert reopen(box).send("alice", "bob", subject="next", body="").seq == count + 1


def test_compaction_archives_only_fully_acknowledged_segments(tmp_path: Path, clock: ManualClock) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="t", clock=clock, max_bytes=1024)
    roster = ["lead", "alice", "bob"]
    for i in range(24):
        if i % 3 == 0:
            box.send("lead", "*", subject=f"all {i}", body="", msg_id=f"m{i}")
        else:
            box.send("lead", "alice" if i % 3 == 1 else "bob", subject=f"one {i}", body="", msg_id=f"m{i}")
    nothing = box.compact(roster)
    assert nothing["archived"] == [] and nothing["kept"][0]["first_unacked"] == 1
    segments = [(f, last) for f, last, p in box.log.rotated()]
    first_seg_last = segments[0][1]
    for reader in ("alice", "bob"):
        box.mark_delivered(reader, 24)
        for seq in range(1, first_seg_last + 1):
            message = box.get(seq)
            assert message is not None
            if message.addressed_to(reader):
                box.ack(reader, seq)
    # one message of the second segment unacked by bob: that segment stays
    result = box.compact(roster)
    assert result["archived"] == [os.path.basename(box.log.rotated()[0][2])]
    assert result["kept"] and result["kept"][0]["reader"] in ("alice", "bob")
    assert os.listdir(os.path.join(box.directory, ARCHIVE_DIR)) == result["archived"]
    stats = box.stats()
    assert stats["archived_segments"] == 1 and stats["first_seq"] == first_seg_last + 1
    # archived messages stay readable, and nothing was lost
    assert [r["seq"] for r in lines(box)] == list(range(1, 25))
    assert reopen(box).get(1) is not None
    assert [m.seq for m in reopen(box).replay(24)] == list(range(1, 25))
    assert [m.msg_id for m in reopen(box).fetch("newcomer")][:1] == ["m0"]  # joined later: still readable
    # the recipients function form, with the active segment never archived
    everyone = box.compact(lambda m: set())
    assert os.path.exists(box.path) and everyone["kept"] == []
    assert len(os.listdir(os.path.join(box.directory, ARCHIVE_DIR))) == len(segments)


# -- crash leftovers and damaged files ---------------------------------------------------------------


def test_torn_tail_is_skipped_then_repaired(box: Mailbox) -> None:
    send(box, "alice", "bob", 3)
    with open(box.path, "ab") as f:
        f.write(b'{"seq":4,"schema_version":1,"kind":"message","msg_id":"to')  # a writer killed mid-line
    other = reopen(box)
    assert [m.seq for m in other.fetch("bob")] == [1, 2, 3]
    assert other.stats()["count"] == 3
    message = other.send("alice", "bob", subject="after", body="crash", msg_id="after")
    assert message.seq == 4
    assert [r["msg_id"] for r in lines(box)] == ["m-0", "m-1", "m-2", "after"]


def test_corrupt_line_in_the_middle_is_reported_and_skipped(box: Mailbox) -> None:
    send(box, "alice", "bob", 3)
    data = Path(box.path).read_bytes().split(b"\n")
    data[1] = b"#### disk error ####"
    Path(box.path).write_bytes(b"\n".join(data))
    other = reopen(box)
    assert [m.seq for m in other.fetch("bob")] == [1, 3]
    assert other.problems and other.problems[0].kind == "corrupt-line"


def test_newer_schema_is_refused(box: Mailbox) -> None:
    box.send("alice", "bob", subject="s", body="b")
    with open(box.path, "a") as f:
        f.write('{"seq":2,"schema_version":99,"kind":"message","msg_id":"x","from":"a","to":"bob"}\n')
    with pytest.raises(SchemaVersionError):
        reopen(box).fetch("bob")


def test_unfinished_indexing_leftovers_are_cut_off(box: Mailbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """An indexing killed after appending some entries but before advancing ``indexed_seq``
    leaves entries past it: readers ignore them and the next indexing cuts them off."""
    send(box, "alice", "bob", 10)
    box.send("alice", "*", subject="all", body="", msg_id="all")
    box.reindex()
    send(box, "alice", "bob", 5, prefix="n")
    box.send("carol", "*", subject="all 2", body="", msg_id="all2")
    calls = {"n": 0}
    real = _durable.atomic_write

    def crash_before_state(path: str, data: bytes, *, durable: bool = True) -> None:
        if path.endswith("state.json"):
            calls["n"] += 1
            raise OSError("killed")
        real(path, data, durable=durable)

    monkeypatch.setattr(_mailbox, "atomic_write", crash_before_state)
    with pytest.raises(OSError):
        box.reindex()
    monkeypatch.undo()
    assert calls["n"] == 1
    to_bob = Path(box.directory, INDEX_DIR, "to.bob.jsonl")
    assert len(to_bob.read_bytes().splitlines()) == 15  # 5 entries past indexed_seq
    other = reopen(box)
    assert other.stats()["indexed_seq"] == 11
    assert other.unread_count("bob") == 17 == len(other.fetch("bob"))
    with open(to_bob, "ab") as f:
        f.write(b'{"schema_version":1,"seq":  ')  # and a torn entry on top
    assert other.reindex() == 17
    assert len(to_bob.read_bytes().splitlines()) == 15
    fresh = reopen(box)
    assert fresh.unread_count("bob") == 17 == len(fresh.fetch("bob"))
    assert [m.seq for m in fresh.fetch("bob")] == [*range(1, 12), *range(12, 18)]


# -- cost proportional to what is new ------------------------------------------------------------


def bulk(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {
            "schema_version": 1,
            "kind": "message",
            "msg_id": f"bulk-{i}",
            "from": "alice" if i % 2 else "bob",
            "to": ("carol", "*", "bob", "lead")[i % 4],
            "type": "info",
            "subject": f"finding {i}",
            "body": "x" * 200,
            "ts": "2026-01-01T00:00:00.000Z",
            "ts_ms": 1_767_225_600_000,
        }


@pytest.mark.slow
def test_reads_of_a_200k_mailbox_touch_only_what_is_new(tmp_path: Path, clock: ManualClock) -> None:
    box = Mailbox(str(tmp_path / "team"), team_id="big", clock=clock)
    box._bulk_load(bulk(200_000))
    box.reindex()
    box.mark_delivered("carol", 199_990)
    for i in range(5):
        box.send("dave", "carol", subject=f"new {i}", body="fresh", msg_id=f"new-{i}")
    size = box.stats()["bytes"]
    assert size > 60_000_000

    reader = reopen(box)  # a fresh process
    got = reader.fetch("carol")
    assert [m.msg_id for m in got][-5:] == [f"new-{i}" for i in range(5)]
    assert len(got) == 4 + 5  # carol's messages in 199,991..200,000, then the new ones
    assert reader.bytes_read < 64 * 1024, reader.bytes_read

    for what in ("unread", "replay", "stats", "far-behind", "duplicate"):
        fresh = reopen(box)
        if what == "unread":
            assert fresh.unread_count("lead") == 100_000  # never read anything: counted, not scanned
        elif what == "replay":
            assert [m.msg_id for m in fresh.replay(5)] == [f"new-{i}" for i in range(5)]
        elif what == "stats":
            assert fresh.stats()["count"] == 200_005
        elif what == "far-behind":
            assert [m.seq for m in fresh.fetch("lead", limit=3)] == [2, 4, 6]
        else:
            assert fresh.send("x", "y", subject="s", body="b", msg_id="bulk-123456").duplicate
        assert fresh.bytes_read < 256 * 1024, (what, fresh.bytes_read)


def test_fetch_cost_does_not_grow_with_the_mailbox(tmp_path: Path, clock: ManualClock) -> None:
    """Bytes read by a fresh reader for 3 new messages, in a small and a 20x larger mailbox."""
    read = []
    for n in (1_000, 20_000):
        box = Mailbox(str(tmp_path / f"team{n}"), team_id="t", clock=clock)
        box._bulk_load(bulk(n))
        box.reindex()
        box.mark_delivered("carol", n)
        for i in range(3):
            box.send("dave", "carol", subject="new", body="", msg_id=f"new-{i}")
        reader = reopen(box)
        assert len(reader.fetch("carol")) == 3
        read.append(reader.bytes_read)
    assert read[1] < read[0] * 2, read
