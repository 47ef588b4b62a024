"""The mailbox with real processes: concurrent senders SIGKILLed at random and restarted to resend
everything (idempotent retry), senders cut off after the write but before the answer (a network
partition / delivery timeout), a sender killed mid-line, indexing killed half-way, and readers
consuming while writers write. Every id is stored once, seqs run 1..N with no gap or duplicate,
and every reader receives each of its messages exactly once, in order."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phoenix_protocol._errors import LockTimeoutError
from phoenix_protocol._mailbox import Mailbox

PY = sys.executable

# Sends messages k..n-1 of writer `me` (ids w<me>-<k>), printing "ready" first and, at the end,
# how many were new and how many were already stored.
SENDER = r"""
import sys
from phoenix_protocol._mailbox import Mailbox

directory, me, n, max_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
box = Mailbox(directory, team_id="race", max_bytes=max_bytes, lock_timeout=30)
targets = ["lead", "r1", "r2", "*"]
print("ready", flush=True)
new = dup = 0
for k in range(n):
    m = box.send(me, targets[k % 4], type="info", subject=f"{me} #{k}", body="payload " * 20, msg_id=f"{me}-{k}")
    if m.duplicate:
        dup += 1
    else:
        new += 1
print("done", new, dup, flush=True)
"""

# Sends one message, but dies at a chosen point: "after-write" (the line is in the file, the
# fsync that would confirm it never returns), "mid-write" (half a line), "before-write".
CUT_OFF = r"""
import os, signal, sys
from phoenix_protocol import _durable, _seqlog
from phoenix_protocol._mailbox import Mailbox

directory, where, msg_id = sys.argv[1], sys.argv[2], sys.argv[3]
box = Mailbox(directory, team_id="race")

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if where == "after-write":
    os.fsync = die
elif where == "before-write":
    _seqlog.durable_append = die
elif where == "mid-write":
    real = _durable.durable_append
    def half(path, data, durable=True):
        real(path, data[: len(data) // 2], durable=False)
        die()
    _seqlog.durable_append = half
box.send("lead", "bob", type="question", subject="status?", body="are you there", msg_id=msg_id)
print("survived", flush=True)
"""

HOLDER = r"""
import sys, time
from phoenix_protocol._mailbox import Mailbox

box = Mailbox(sys.argv[1], team_id="race")
with box.log.lock():
    print("locked", flush=True)
    time.sleep(120)
"""

# Consumes the inbox of `me` until it received `expected` messages: fetch, hand over (print),
# mark delivered, acknowledge each.
READER = r"""
import sys, time
from phoenix_protocol._mailbox import Mailbox

directory, me, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
box = Mailbox(directory, team_id="race", lock_timeout=30)
got = []
deadline = time.monotonic() + 120
while len(got) < expected and time.monotonic() < deadline:
    inbox = box.fetch(me, limit=50)
    if not inbox:
        time.sleep(0.005)
        continue
    got += [m.seq for m in inbox]
    box.mark_delivered(me, inbox.through_seq)
    for m in inbox:
        box.ack(me, m.seq)
print(" ".join(map(str, got)), flush=True)
"""

# Sends with a tiny index lag and dies in the middle of bringing the indexes up to date.
INDEX_KILLED = r"""
import os, signal, sys
from phoenix_protocol import _mailbox

directory, n = sys.argv[1], int(sys.argv[2])
_mailbox.INDEX_LAG = 40
real = _mailbox.durable_append
calls = [0]
def flaky(path, data, durable=True):
    if "mailbox.index" in path:
        calls[0] += 1
        if calls[0] == 25:
            os.kill(os.getpid(), signal.SIGKILL)
    real(path, data, durable=durable)
_mailbox.durable_append = flaky
box = _mailbox.Mailbox(directory, team_id="race")
for k in range(n):
    box.send("w", ["r1", "*", "r2"][k % 3], subject=f"#{k}", body="b", msg_id=f"ix-{k}")
print("survived", flush=True)
"""


def start(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-P", "-c", code, *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_mailbox(directory: str, expected_ids: set[str]) -> Mailbox:
    """Every id once, seqs 1..N, every complete line parses (a torn tail may remain: nobody
    appended after the last kill)."""
    box = Mailbox(directory, team_id="race")
    records, problems = box.log.read()
    assert all(p.kind == "torn-tail" for p in problems), [str(p) for p in problems]
    assert [r["seq"] for r in records] == list(range(1, len(expected_ids) + 1)), "gap or duplicate seq"
    ids = [r["msg_id"] for r in records]
    assert len(ids) == len(set(ids)), "a message stored twice"
    assert set(ids) == expected_ids, "a message lost"
    return box


@pytest.mark.slow
def test_eight_senders_with_sigkills_and_full_resends(tmp_path: Path) -> None:
    directory = str(tmp_path / "team")
    writers, n, max_bytes = 8, 1000, 256 * 1024  # ~3 MB of messages: a dozen rotations
    rng = random.Random(4)
    procs = {f"w{i}": start(SENDER, directory, f"w{i}", n, max_bytes) for i in range(writers)}
    for proc in procs.values():
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n", proc.communicate()[1]
    kills = 0
    finished: dict[str, str] = {}
    deadline = time.monotonic() + 120
    while len(finished) < writers:
        assert time.monotonic() < deadline, "senders did not finish"
        time.sleep(rng.uniform(0.02, 0.15))
        for name, proc in list(procs.items()):
            if name not in finished and proc.poll() is not None:
                out, err = proc.communicate()
                assert proc.returncode == 0, err
                finished[name] = out.strip().splitlines()[-1]
        running = [name for name in procs if name not in finished]
        if running and kills < 16:
            victim = rng.choice(running)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].communicate()
            kills += 1
            procs[victim] = start(SENDER, directory, victim, n, max_bytes)  # retry everything
            stdout = procs[victim].stdout
            assert stdout is not None
            assert stdout.readline() == "ready\n"
    assert kills >= 8
    expected = {f"w{i}-{k}" for i in range(writers) for k in range(n)}
    box = check_mailbox(directory, expected)
    assert any(line.split()[2] != "0" for line in finished.values()), "no resend found a duplicate"
    stats = box.stats()
    assert stats["count"] == writers * n and stats["segments"] > 5 and stats["indexed_seq"] >= 4096
    # readers see exactly their messages, counted and fetched alike
    for reader in ("lead", "r1", "r2"):  # a quarter of each writer's messages, plus the broadcasts
        share = 2 * writers * n // 4
        got = box.fetch(reader)
        assert len(got) == share == box.unread_count(reader)
        assert [m.seq for m in got] == sorted({m.seq for m in got})
    # a resend now, from yet another process, stores nothing
    again = Mailbox(directory, team_id="race")
    assert all(
        again.send("w0", "lead", subject="x", body="y", msg_id=f"w{i}-{k}").duplicate
        for i, k in [(0, 0), (7, 999), (3, 500)]
    )
    assert Mailbox(directory, team_id="race").stats()["count"] == writers * n


@pytest.mark.parametrize("where", ["after-write", "mid-write", "before-write"])
def test_sender_cut_off_then_retrying_with_the_same_id_stores_once(tmp_path: Path, where: str) -> None:
    directory = str(tmp_path / "team")
    box = Mailbox(directory, team_id="race")
    box.send("alice", "bob", subject="before", body="", msg_id="before")
    proc = start(CUT_OFF, directory, where, "net-1")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    # the sender never learnt whether its message went through: it retries, same id
    retry = Mailbox(directory, team_id="race").send(
        "lead", "bob", type="question", subject="status?", body="are you there", msg_id="net-1"
    )
    assert retry.duplicate == (where == "after-write")
    assert retry.seq == 2
    box = check_mailbox(directory, {"before", "net-1"})
    assert [m.msg_id for m in box.fetch("bob")] == ["before", "net-1"]
    assert Mailbox(directory, team_id="race").send("x", "y", subject="s", body="b", msg_id="net-1").duplicate


def test_send_timing_out_on_a_held_lock_stores_nothing_and_the_retry_stores_once(tmp_path: Path) -> None:
    directory = str(tmp_path / "team")
    Mailbox(directory, team_id="race").send("alice", "bob", subject="first", body="", msg_id="first")
    holder = start(HOLDER, directory)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        impatient = Mailbox(directory, team_id="race", lock_timeout=0.3)
        with pytest.raises(LockTimeoutError, match=r"mailbox\.jsonl"):
            impatient.send("lead", "bob", subject="ping", body="", msg_id="ping-1")
    finally:
        holder.kill()
        holder.communicate()
    assert impatient.send("lead", "bob", subject="ping", body="", msg_id="ping-1").duplicate is False
    assert impatient.send("lead", "bob", subject="ping", body="", msg_id="ping-1").duplicate is True
    check_mailbox(directory, {"first", "ping-1"})


@pytest.mark.slow
def test_indexing_killed_half_way_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    directory = str(tmp_path / "team")
    proc = start(INDEX_KILLED, directory, 200)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    box = Mailbox(directory, team_id="race")
    sent = box.stats()["count"]
    assert 40 <= sent < 200
    assert box.stats()["indexed_seq"] < sent  # the indexing that died never advanced it
    for k in range(200):  # the sender comes back and resends everything
        message = box.send("w", ["r1", "*", "r2"][k % 3], subject=f"#{k}", body="b", msg_id=f"ix-{k}")
        assert message.duplicate == (k < sent)
    check_mailbox(directory, {f"ix-{k}" for k in range(200)})
    box.reindex()
    for reader in ("r1", "r2", "lead"):
        fresh = Mailbox(directory, team_id="race")
        records = fresh.log.read()[0]
        want = [r["seq"] for r in records if r["to"] == reader or r["to"] == "*"]
        assert [m.seq for m in fresh.fetch(reader)] == want
        assert fresh.unread_count(reader) == len(want)


@pytest.mark.slow
def test_readers_receive_each_message_once_while_writers_write(tmp_path: Path) -> None:
    directory = str(tmp_path / "team")
    writers, n = 4, 400
    expected = {"r1": writers * n // 2, "r2": writers * n // 2}  # targets cycle lead, r1, r2, *
    readers = {name: start(READER, directory, name, count) for name, count in expected.items()}
    senders = [start(SENDER, directory, f"w{i}", n, 128 * 1024) for i in range(writers)]
    for proc in senders:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    received = {}
    for name, proc in readers.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        received[name] = [int(x) for x in out.split()]
    box = check_mailbox(directory, {f"w{i}-{k}" for i in range(writers) for k in range(n)})
    records = box.log.read()[0]
    for name, seqs in received.items():
        want = [r["seq"] for r in records if r["to"] in (name, "*")]
        assert seqs == want, f"{name} missed, repeated or reordered messages"
        state = box.cursor_state(name)
        assert state["acked_through"] == want[-1] and state["acked_ranges"] == []
        assert box.unread_count(name) == 0
    acked = box.replay(1)[0]
    assert acked.acked_by == (["r1", "r2"] if acked.to == "*" else [acked.to] if acked.to in expected else [])
    assert os.path.isdir(os.path.join(directory, "mailbox.cursors"))
