"""Checkpoints under crashes, on both engines (SQLite's ``phoenix.db`` and PostgreSQL): real writer
processes SIGKILLed at random moments, concurrent writers, and rows damaged by hand.

A child takes routine checkpoints in a loop (each with a registered ``payload`` section of 50-400
KB, so that a write takes a while: collect, redact, encode, the transaction and its commit) and
prints ``ack <seq> <name>`` after each ``create`` returned. The parent kills it after a random
number of acknowledgements plus a short random delay, then checks the contract:

- ``latest()`` returns a checkpoint that verifies (checksum, schema, and the payload's own
  digest), with no problem reported, whose seq is the last acknowledged one or the one after it
  (the write in flight, if its transaction committed before the kill), never a torn one;
- ``entries()`` lists every acknowledged checkpoint retention keeps, newest first, without a
  duplicate seq, each readable;
- no seq is ever reused, and after the next successful ``create`` the store holds exactly what
  retention keeps.

A kill inside the transaction (after the insert, before the commit) leaves nothing; a row damaged
by hand is reported and skipped by ``latest``, refused by ``read``, and reported by the doctor.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import CorruptStateError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import Checkpoint, CheckpointInfo, CheckpointStore, CollectContext
from phoenix_protocol.store import _db

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ROUND_MS = 3_600_000  # each round's child starts its clock an hour after the previous one

CHILD = r"""
import hashlib, os, sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
import phoenix_protocol.core._redact  # warm the lazy imports, so that kills land in real work
import phoenix_protocol.services._checkpoint_providers

home, agent_id, start_ms, keep, lo, hi = sys.argv[1:7]
clock = ManualClock(int(start_ms))
agent = Agent.open(agent_id, home=Home(home), clock=clock, config_overrides={"keep_routine": int(keep)})
store = agent.checkpoints
store._collectors.clear()
lo, hi = int(lo), int(hi)


def payload(ctx):
    size = lo + int.from_bytes(os.urandom(4), "big") % (hi - lo)
    blob = os.urandom(size // 2).hex()
    return {"digest": hashlib.sha256(blob.encode()).hexdigest(), "chunks": [blob[i : i + 64] for i in range(0, len(blob), 64)]}


store.register("payload", payload)
store.entries()  # the database opened and migrated before the first kill
out = sys.stdout
out.write("ready\n")
out.flush()
while True:
    clock.advance(1)
    info = store.create("routine", summary="loop")
    out.write(f"ack {info.seq} {info.name}\n")
    out.flush()
"""

# Killed by itself inside the write's transaction: the row inserted, the commit not yet sent.
INSIDE_CHILD = r"""
import os, signal, sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _checkpoints as rows

home, agent_id, start_ms = sys.argv[1:4]
agent = Agent.open(agent_id, home=Home(home), clock=ManualClock(int(start_ms)))
store = agent.checkpoints
insert = rows.CheckpointRows.insert


def insert_then_die(self, *args, **kwargs):
    insert(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)


rows.CheckpointRows.insert = insert_then_die
store.create("routine", summary="never committed")
print("ack", flush=True)
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC}


def tiny_payload(ctx: CollectContext) -> dict[str, bool]:
    return {"probe": True}


def open_store(home: str, agent_id: str, keep: int, clock: ManualClock) -> CheckpointStore:
    """The parent's view of a worker's agent; its own creates carry a tiny payload."""
    agent = Agent.open(agent_id, home=Home(home), clock=clock, config_overrides={"keep_routine": keep})
    store = agent.checkpoints
    store._collectors.clear()
    store.register("payload", tiny_payload)
    return store


def verify_payload(checkpoint: Checkpoint) -> None:
    """The payload's own digest matches its data (a second check beyond the checksum)."""
    payload = checkpoint.section("payload")
    assert isinstance(payload, dict), checkpoint.name
    if payload.get("probe"):
        return
    blob = "".join(payload["chunks"])
    assert hashlib.sha256(blob.encode()).hexdigest() == payload["digest"], f"{checkpoint.name}: payload damaged"


def parse_acks(out: str) -> list[tuple[int, str]]:
    acks = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ack":
            acks.append((int(parts[1]), parts[2]))
        elif line != "ready":
            raise AssertionError(f"unexpected child output line {line!r}")
    return acks


def sigkill(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[str, str]:
    """SIGKILL ``proc``; return the rest of its stdout and stderr."""
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=timeout)
    return out, err


def check_after_kill(
    store: CheckpointStore, last_acked: int, acks: list[tuple[int, str]], where: str
) -> tuple[int, bool]:
    """Every invariant that must hold the moment a writer died; returns the last acknowledged seq
    and whether the write in flight was committed."""
    seqs = [seq for seq, _name in acks]
    assert seqs == sorted(set(seqs)), f"acknowledged seqs not increasing {seqs} {where}"
    assert not seqs or seqs[0] > last_acked, f"seq {seqs[0]} reused (last acknowledged {last_acked}) {where}"
    acked = seqs[-1] if seqs else last_acked
    checkpoint, problems = store.latest()
    assert problems == [], f"problems after a kill {problems} {where}"
    in_flight = False
    if acked:
        assert checkpoint is not None, f"no checkpoint although {acked} was acknowledged {where}"
    if checkpoint is not None:
        assert checkpoint.seq in (acked, acked + 1), f"latest is seq {checkpoint.seq}, acknowledged {acked} {where}"
        in_flight = checkpoint.seq == acked + 1
        verify_payload(checkpoint)
    entries = store.entries()
    names = [e.name for e in entries]
    keep = store.agent.config.keep_routine
    # The write in flight may have pushed the oldest of the newest `keep` out; no other may be gone.
    for _seq, name in acks[len(acks) - keep + 1 :] if keep > 1 else []:
        assert name in names, f"acknowledged checkpoint {name} (still within retention) is not listed {where}"
    entry_seqs = [e.seq for e in entries]
    assert entry_seqs == sorted(set(entry_seqs), reverse=True), f"entries out of order or duplicated {where}"
    assert len(names) <= keep, f"{len(names)} routine checkpoints listed, keep {keep} {where}"
    for name in names:
        verify_payload(store.read(name))
    return (acked + 1 if in_flight else acked), in_flight


def check_next_create(store: CheckpointStore, where: str) -> int:
    """The next successful create: a fresh seq, and exactly what retention keeps."""
    listed = [e.seq for e in store.entries()]
    clock = store.agent.clock
    assert isinstance(clock, ManualClock)
    clock.advance(1)
    info = store.create("routine", summary="probe")
    assert info.seq > max(listed, default=0), f"create took seq {info.seq}, {listed} listed {where}"
    keep = store.agent.config.keep_routine
    assert [e.seq for e in store.entries()] == sorted([*listed, info.seq], reverse=True)[:keep], where
    return info.seq


@pytest.mark.slow
def test_sigkilled_checkpoint_writers_never_leave_a_torn_latest(backend: str, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    clock = ManualClock(BASE_MS)
    kills = acks_total = in_flight = 0
    for agent_id, keep, size in (("ckpt0", 3, (50_000, 400_000)), ("ckpt1", 1, (500_000, 1_500_000))):
        store = open_store(home, agent_id, keep, clock)
        last_acked = 0
        for round_no in range(25):
            where = f"({backend}, agent {agent_id}, seed {seed}, round {round_no})"
            start_ms = BASE_MS + (round_no + 1) * ROUND_MS
            proc = subprocess.Popen(
                [PY, "-c", CHILD, home, agent_id, str(start_ms), str(keep), str(size[0]), str(size[1])],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            if ready != "ready\n":
                proc.kill()
                raise AssertionError(f"child did not start {where}: {ready!r} {proc.communicate()[1]}")
            seen = "".join(proc.stdout.readline() for _ in range(rng.randrange(0, 4)))
            time.sleep(rng.uniform(0, 0.06))
            out, err = sigkill(proc)
            assert proc.returncode == -signal.SIGKILL, f"child died on its own {where}: {err}"
            kills += 1
            acks = parse_acks(seen + out)
            acks_total += len(acks)
            last_acked, flight = check_after_kill(store, last_acked, acks, where)
            in_flight += flight
            clock.set(start_ms + ROUND_MS // 2)
            last_acked = check_next_create(store, where)
    print(f"\n{backend}: {kills} kills, {acks_total} acknowledged, {in_flight} in flight committed (seed {seed})")
    assert acks_total > kills, "the children must get real work done between kills"


def test_a_writer_killed_inside_its_transaction_leaves_nothing(backend: str, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    store = open_store(home, "pt", 3, ManualClock(BASE_MS))
    last = store.create("routine", summary="before")
    proc = subprocess.run(
        [PY, "-c", INSIDE_CHILD, home, "pt", str(BASE_MS + ROUND_MS)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == ""
    fresh = open_store(home, "pt", 3, ManualClock(BASE_MS + 2 * ROUND_MS))
    assert [e.name for e in fresh.entries()] == [last.name]
    checkpoint, problems = fresh.latest()
    assert checkpoint is not None and checkpoint.name == last.name and problems == []
    assert fresh.create("routine").seq == last.seq + 1  # the seq of the write rolled back, given again: never seen


def test_concurrent_writers_in_many_processes_lose_nothing_and_share_no_seq(backend: str, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    store = open_store(home, "many", 100, ManualClock(BASE_MS))
    store.entries()  # migrated once, before the writers race
    writer = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home
agent = Agent.open("many", home=Home(sys.argv[1]), config_overrides={"keep_routine": 100})
for i in range(8):
    info = agent.checkpoints.create("routine", summary=f"{sys.argv[2]}-{i}")
    print(info.seq, info.name, flush=True)
"""
    procs = [
        subprocess.Popen([PY, "-c", writer, home, f"w{n}"], stdout=subprocess.PIPE, text=True, env=child_env())
        for n in range(4)
    ]
    acked = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        acked += [line.split() for line in out.splitlines()]
    seqs = sorted(int(s) for s, _n in acked)
    assert seqs == list(range(1, 33))
    listed = {e.name for e in store.entries()}
    assert {n for _s, n in acked} == listed
    threads_seen: list[int] = []

    def take() -> None:
        threads_seen.append(store.create("routine").seq)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(threads_seen) == list(range(33, 37))


# -- damage by hand ----------------------------------------------------------------------------------


def damage_rows(store: CheckpointStore, name: str, change: Callable[[str, str], tuple[str, str]]) -> None:
    def work(tx: _db.Tx) -> None:
        row = tx.one("SELECT content, checksum FROM phx_checkpoints WHERE name = ?", (name,))
        assert row is not None
        content, checksum = change(str(row[0]), str(row[1]))
        tx.execute("UPDATE phx_checkpoints SET content = ?, checksum = ? WHERE name = ?", (content, checksum, name))

    store.backend.db.transaction(work)


def truncate(content: str, checksum: str) -> tuple[str, str]:
    return content[: len(content) // 2], checksum


def flip_char(content: str, checksum: str) -> tuple[str, str]:
    i = content.index('"summary"') + 14
    return content[:i] + ("X" if content[i] != "X" else "Y") + content[i + 1 :], checksum


def flip_checksum(content: str, checksum: str) -> tuple[str, str]:
    return content, checksum[:-1] + ("0" if checksum[-1] != "0" else "1")


def empty(content: str, checksum: str) -> tuple[str, str]:
    return "", checksum


def unknown_algorithm(content: str, checksum: str) -> tuple[str, str]:
    return content, "blake9:" + checksum.rsplit(":", maxsplit=1)[-1]


@pytest.mark.parametrize("damage", [truncate, flip_char, flip_checksum, empty, unknown_algorithm])
def test_a_damaged_newest_checkpoint_is_reported_and_skipped(
    backend: str, tmp_path: Path, damage: Callable[[str, str], tuple[str, str]]
) -> None:
    clock = ManualClock(BASE_MS)
    store = open_store(str(tmp_path / "home"), "hand", 5, clock)
    store.register("payload", lambda ctx: {"chunks": ["ab" * 32] * 2000, "probe": True})
    infos: list[CheckpointInfo] = []
    for _ in range(3):
        clock.advance(1)
        infos.append(store.create("routine", summary=f"number {len(infos)}"))
    damage_rows(store, infos[-1].name, damage)

    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == infos[-2].name
    assert len(problems) == 1 and infos[-1].name in problems[0]
    with pytest.raises(CorruptStateError) as raised:
        store.read(infos[-1].name)
    assert raised.value.path == store.backend.where(infos[-1].name)
    assert store.restore().checkpoint.name == infos[-2].name

    damage_rows(store, infos[-2].name, flip_char)
    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == infos[0].name
    assert [infos[-1].name in problems[0], infos[-2].name in problems[1]] == [True, True]

    from phoenix_protocol.services._doctor import check_agent

    errors = [f for f in check_agent(store.agent) if f.level == "error"]
    assert sorted(str(f.path) for f in errors) == sorted(store.backend.where(i.name) for i in infos[1:])

    # The damaged rows are kept as evidence (listed, never dropped silently); the next takes a fresh seq.
    clock.advance(1)
    info = store.create("routine")
    assert info.seq == infos[-1].seq + 1
    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == info.name and problems == []
    assert {infos[-1].name, infos[-2].name} <= {e.name for e in store.entries()}
