"""The team store with real processes, on both engines (SQLite ``phoenix.db``, and PostgreSQL
through ``PHOENIX_STORE``): senders SIGKILLed at random and restarted to resend everything
(idempotency keys), a sender killed after its commit or in the middle of its transaction,
readers SIGKILLed while writers write (per-reader cursors), claimers SIGKILLed while they race for
a thousand tasks, and a PostgreSQL connection terminated in the middle of a write. Every id is
stored once, seqs run 1..N with no gap or duplicate, every reader receives each of its messages in
order and none twice except those it was killed before confirming, and no task is claimed twice."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import terminate_transactions_on
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import StorageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team

PY = sys.executable
READERS = ["lead", "r1", "r2"]

# Sends messages 0..n-1 of writer `me` (ids <me>-<k>) and prints how many were new and how many
# were already stored. Half-way it waits for the file `gate`, so that no sender can finish before
# the test has killed enough of them, however fast the machine.
SENDER = r"""
import os, sys, time
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team

home, team_id, me, n, gate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
box = Team.open(Home(home), team_id).mailbox
targets = ["lead", "r1", "r2", "*"]
new = dup = 0
for k in range(n):
    while k == n // 2 and not os.path.exists(gate):
        time.sleep(0.01)
    m = box.send(me, targets[k % 4], subject=f"{me} #{k}", body="payload " * 20, msg_id=f"{me}-{k}")
    if m.duplicate:
        dup += 1
    else:
        new += 1
print("done", new, dup, flush=True)
"""

# Sends one message and dies: "after-commit" (stored, the answer never arrives) or
# "in-transaction" (the message row written, the commit never sent).
CUT_OFF = r"""
import os, signal, sys
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._team_store import Mailbox
from phoenix_protocol.store._teams import Team

home, team_id, where, msg_id = sys.argv[1:5]
team = Team.open(Home(home), team_id)
if where == "in-transaction":
    real = Mailbox.insert
    def dying(self, tx, fields, **kwargs):
        real(self, tx, fields, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    Mailbox.insert = dying
team.send("lead", "bob", type="question", subject="status?", body="are you there", msg_id=msg_id)
os.kill(os.getpid(), signal.SIGKILL)
"""

# Reads its inbox until it has seen `count` messages: prints the batch ("got" and the seqs), then
# confirms it (mark_delivered, an ack of each), then prints "marked <through>".
READER = r"""
import sys, time
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team

home, team_id, me, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
box = Team.open(Home(home), team_id).mailbox
while box.cursor_state(me)["delivered_seq"] == 0 or box.unread_count(me) or count > 0:
    inbox = box.fetch(me, limit=7)
    if inbox:
        print("got", *[m.seq for m in inbox], flush=True)
        box.mark_delivered(me, inbox.through_seq)
        for m in inbox:
            box.ack(me, m.seq)
        print("marked", inbox.through_seq, flush=True)
        count -= len(inbox)
        if count <= 0:
            break
    else:
        box.wait(me, timeout=0.5)
"""


def start(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def mailbox_team(home: Home, writers: list[str]) -> Team:
    team = Team.create(home, "race", lead="lead", team_id="race-1", clock=ManualClock())
    for name in [*READERS[1:], "bob", *writers]:
        team.join(name)
    return team


def check_mailbox(team: Team, expected_ids: set[str]) -> list[Any]:
    """Every id once, seqs 1..N."""
    stored = team.mailbox.replay(len(expected_ids) + 10)
    assert [m.seq for m in stored] == list(range(1, len(expected_ids) + 1)), "gap or duplicate seq"
    ids = [m.msg_id for m in stored]
    assert len(ids) == len(set(ids)), "a message stored twice"
    assert set(ids) == expected_ids, "a message lost"
    return stored


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_senders_sigkilled_and_resending_everything_store_each_id_once(backend: str, home: Home) -> None:
    writers, n = 8, 200
    names = [f"w{i}" for i in range(writers)]
    team = mailbox_team(home, names)
    rng = random.Random(4)
    gate = Path(home.root) / "gate"
    procs = {name: start(SENDER, home.root, team.id, name, n, gate) for name in names}
    kills = 0

    def stored_by(name: str) -> int:
        sql = "SELECT count(*) FROM phx_messages WHERE team_id = ? AND sender = ?"
        return int(team.store.db.read(lambda tx: tx.scalar(sql, (team.id, name))))

    finished: dict[str, str] = {}
    deadline = time.monotonic() + 400
    while len(finished) < writers:
        assert time.monotonic() < deadline, "senders did not finish"
        time.sleep(rng.uniform(0.05, 0.3))
        for name, proc in list(procs.items()):
            if name not in finished and proc.poll() is not None:
                out, err = proc.communicate()
                assert proc.returncode == 0, err
                finished[name] = out.strip().splitlines()[-1]
        # Killed in the middle of its messages: the resend then finds what it had stored.
        running = [name for name in procs if name not in finished and 0 < stored_by(name) < n]
        if running and kills < 12:
            victim = rng.choice(running)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].communicate()
            kills += 1
            procs[victim] = start(SENDER, home.root, team.id, victim, n, gate)  # retry everything, same ids
        if kills >= 8:
            gate.touch()
    assert kills >= 8
    check_mailbox(team, {f"w{i}-{k}" for i in range(writers) for k in range(n)})
    assert any(line.split()[2] != "0" for line in finished.values()), "no resend found a duplicate"
    box = team.mailbox
    assert box.stats()["count"] == writers * n
    for reader in READERS:  # a quarter of each writer's messages, plus the broadcasts
        got = box.fetch(reader)
        assert len(got) == 2 * writers * n // 4 == box.unread_count(reader)
        assert [m.seq for m in got] == sorted({m.seq for m in got})
    assert all(box.send("w0", "lead", subject="w0 #0", body="payload " * 20, msg_id="w0-0").duplicate for _ in range(3))
    assert box.stats()["count"] == writers * n


@pytest.mark.parametrize("where", ["after-commit", "in-transaction"])
def test_a_sender_killed_then_retrying_with_the_same_id_stores_once(backend: str, home: Home, where: str) -> None:
    team = mailbox_team(home, [])
    team.send("r1", "bob", subject="before", body="", msg_id="before")
    proc = start(CUT_OFF, home.root, team.id, where, "net-1")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    # The sender never learnt whether its message went through: it retries, same id.
    retry = Team.open(home, team.id).send(
        "lead", "bob", type="question", subject="status?", body="are you there", msg_id="net-1"
    )
    assert retry.duplicate == (where == "after-commit")
    assert retry.seq == 2
    check_mailbox(team, {"before", "net-1"})
    assert [m.msg_id for m in team.mailbox.fetch("bob")] == ["before", "net-1"]
    assert team.mailbox.stats()["count"] == 2 and team.mailbox.unread_count("bob") == 2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readers_killed_while_writers_write_lose_nothing_and_repeat_only_what_they_never_confirmed(
    backend: str, home: Home
) -> None:
    writers, n = 4, 120
    names = [f"w{i}" for i in range(writers)]
    team = mailbox_team(home, names)
    expected = {"r1": writers * n // 2, "r2": writers * n // 2}  # targets cycle lead, r1, r2, *
    outputs: dict[str, list[str]] = {"r1": [], "r2": []}
    readers = {name: start(READER, home.root, team.id, name, count) for name, count in expected.items()}
    gate = Path(home.root) / "gate"
    gate.touch()  # open from the start: here the readers are the ones killed
    senders = [start(SENDER, home.root, team.id, name, n, gate) for name in names]
    rng = random.Random(8)
    kills = 0
    while any(p.poll() is None for p in senders) or readers["r2"].poll() is None:
        time.sleep(rng.uniform(0.05, 0.3))
        proc = readers["r2"]  # r2 is killed at random and restarted; r1 never
        if kills < 5 and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            out, _err = proc.communicate()
            outputs["r2"] += out.splitlines()
            kills += 1
            readers["r2"] = start(READER, home.root, team.id, "r2", 1)
        elif proc.poll() is not None:
            out, err = proc.communicate()
            assert proc.returncode == 0, err
            outputs["r2"] += out.splitlines()
            if team.mailbox.unread_count("r2") or any(p.poll() is None for p in senders):
                readers["r2"] = start(READER, home.root, team.id, "r2", 1)
            else:
                break
    for proc in senders:
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    out, err = readers["r1"].communicate(timeout=300)
    assert readers["r1"].returncode == 0, err
    outputs["r1"] = out.splitlines()
    while team.mailbox.unread_count("r2"):  # what r2 had left when the writers finished
        proc = start(READER, home.root, team.id, "r2", 1)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs["r2"] += out.splitlines()
    stored = check_mailbox(team, {f"w{i}-{k}" for i in range(writers) for k in range(n)})
    for name in ("r1", "r2"):
        want = [m.seq for m in stored if m.to in (name, "*")]
        got: list[int] = []
        unconfirmed: set[int] = set()
        pending: list[int] = []
        for line in outputs[name]:
            kind, *values = line.split()
            if kind == "got":
                unconfirmed.update(pending)  # a batch with no "marked" after it: the reader died
                pending = [int(v) for v in values]
                got += pending
            elif kind == "marked":
                pending = []
        counts = Counter(got)
        assert set(counts) == set(want), f"{name} missed messages"
        assert {s for s, c in counts.items() if c > 1} <= unconfirmed | set(pending), (
            f"{name} got a confirmed one twice"
        )
        if name == "r1":
            assert got == want, "r1 (never killed) got each message once, in order"
        state = team.mailbox.cursor_state(name)
        assert state["delivered_seq"] >= want[-1] and team.mailbox.unread_count(name) == 0
        acked = {s for s in want if s <= state["acked_through"]}
        acked |= {s for first, last in state["acked_ranges"] for s in range(first, last + 1)}
        # Every confirmed batch is acknowledged; a batch whose reader was killed between marking it
        # delivered and acknowledging it may stay unacknowledged (it is not delivered again).
        assert set(want) - unconfirmed - set(pending) <= acked
    assert kills >= 1


CLAIMER = r"""
import json, random, sys
from phoenix_protocol.core._errors import LockTimeoutError, StorageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import ClaimConflictError, Team

home, team_id, me, log_path = sys.argv[1:5]
team = Team.open(Home(home), team_id)
rng = random.Random()
log = open(log_path, "a", buffering=1)


def retry(call, *args, **kwargs):
    while True:
        try:
            return call(*args, **kwargs)
        except LockTimeoutError:
            log.write("lock-timeout\n")
        except StorageError as exc:  # a connection lost (the shared server's other tests terminate some)
            log.write(f"storage-error {' '.join(str(exc).split())[:200]}\n")
            sys.exit(3)  # restarted as after a kill: what it may hold is found on start


log.write("start\n")
for task in retry(team.read)["tasks"]:  # restarted after a SIGKILL: what it holds comes first
    if task["assigned_to"] == me and task["status"] == "in_progress":
        log.write(f"resumed {task['task_id']}\n")
while True:
    if rng.random() < 0.5:
        task = retry(team.claim_next, me)
        if task is None:
            break
        task_id = task["task_id"]
    else:
        ready = retry(team.ready)
        if not ready:
            continue
        task_id = rng.choice(ready[:4])["task_id"]  # a small window: claimers collide often
        try:
            retry(team.claim, task_id, me)
        except ClaimConflictError:
            log.write(f"conflict {task_id}\n")
            continue
    log.write(f"claimed {task_id}\n")
log.write("exit\n")
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_claimers_sigkilled_while_racing_for_the_tasks_claim_each_once(
    backend: str, home: Home, tmp_path: Path
) -> None:
    """8 claimers over 1,000 tasks on SQLite, 50 over 400 on PostgreSQL (fifty processes that each
    read the whole task list every turn keep two cores busy: 400 tasks keep the suite's time)."""
    workers = 50 if backend == "postgres" else 8
    count = 400 if backend == "postgres" else 1000
    team = Team.create(home, "race", lead="lead", team_id="claims-1", clock=ManualClock())
    names = [f"c{i:02d}" for i in range(workers)]
    for name in names:
        team.join(name)

    template = team.add_task("task 1")

    def more(data: dict[str, Any]) -> None:  # the other tasks in one change
        for i in range(2, count + 1):
            data["tasks"].append(json.loads(json.dumps(template)) | {"task_id": f"task-{i:04d}", "title": f"task {i}"})
        data["task_seq"] = count

    team.store.change(more)
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {name: start(CLAIMER, home.root, team.id, name, logs / f"{name}.log") for name in names}
    rng = random.Random(4)
    kills = 0
    t0 = time.monotonic()
    while any(p.poll() is None for p in procs.values()):
        assert time.monotonic() - t0 < 800, "the race did not finish"
        time.sleep(rng.uniform(0.3, 1.0))
        running = [n for n, p in procs.items() if p.poll() is None]
        if running and kills < 10:
            victim = rng.choice(running)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].communicate()
            if procs[victim].returncode == -signal.SIGKILL:
                kills += 1
                procs[victim] = start(CLAIMER, home.root, team.id, victim, logs / f"{victim}.log")
        for name, proc in procs.items():
            if proc.poll() == 3:  # its connection was lost: it starts again, as after a kill
                proc.communicate()
                procs[name] = start(CLAIMER, home.root, team.id, name, logs / f"{name}.log")
    for name, proc in procs.items():
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{name}: {err}"
    tasks = {t["task_id"]: t for t in team.read()["tasks"]}
    assert len(tasks) == count and all(t["status"] == "in_progress" for t in tasks.values())
    claimed: Counter[str] = Counter()
    owner: dict[str, set[str]] = {}
    for name in names:
        for line in (logs / f"{name}.log").read_text().splitlines():
            kind, _, task_id = line.partition(" ")
            if kind in ("claimed", "resumed"):
                owner.setdefault(task_id, set()).add(name)
                claimed[task_id] += kind == "claimed"
    assert max(claimed.values()) == 1, [t for t, n in claimed.items() if n > 1]
    assert set(owner) <= set(tasks)
    for task_id, who in owner.items():
        assert who == {tasks[task_id]["assigned_to"]}, (task_id, who)
    assert sum(1 for who in owner.values() if who) and len({tasks[t]["assigned_to"] for t in tasks}) > 1
    assert kills >= 1


def test_a_terminated_postgres_connection_mid_write_is_a_clean_error_and_leaves_the_state(
    pg_url: str, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    team = mailbox_team(home, [])
    team.send("r1", "bob", subject="before", body="", msg_id="before")
    task = team.add_task("Write the parser")
    before = (team.read(), team.roster(), [m.as_dict() for m in team.mailbox.replay(10)])
    from phoenix_protocol.store import _pg

    monkeypatch.setattr(_pg, "RETRIES", 1)  # no retry: the failure itself is what is looked at
    original = team.store.db.transaction

    def killed_in_the_middle(work: Any, **kwargs: Any) -> Any:
        if not kwargs.get("write", True):
            return original(work, **kwargs)

        def then_terminated(tx: Any) -> Any:
            result = work(tx)  # everything written, nothing committed
            tx.execute("SELECT 1 FROM phx_teams WHERE team_id = 'marker'")
            assert terminate_transactions_on(pg_url, "marker") == 1
            tx.execute("SELECT 1")
            return result

        return original(then_terminated, **kwargs)

    monkeypatch.setattr(team.store.db, "transaction", killed_in_the_middle)
    for attempt in (
        lambda: team.send("r1", "bob", subject="lost", body="", msg_id="lost"),
        lambda: team.claim(task["task_id"], "r1"),
        lambda: team.join("carol"),
    ):
        with pytest.raises(StorageError, match=r"postgresql://127\.0\.0\.1:5432/test"):
            attempt()
    monkeypatch.undo()
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    again = Team.open(home, team.id)
    assert (again.read(), again.roster(), [m.as_dict() for m in again.mailbox.replay(10)]) == before
    assert again.send("r1", "bob", subject="lost", body="", msg_id="lost").seq == 2  # no gap
