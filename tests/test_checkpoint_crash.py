"""Checkpoints under crashes: real writer processes SIGKILLed at random moments, hundreds of times.

A child takes routine checkpoints in a loop (each with a registered ``payload`` section of 50-400
KB, so that a write takes a while: collect, redact, encode, the log frame and its fdatasync, and
behind it the named file, the removals and the ops event) and prints ``ack <seq> <name>`` after
each ``create`` returned. The parent kills it after a random number of acknowledgements plus a
short random delay, then checks the contract:

- ``latest()`` returns a checkpoint that verifies (checksum, schema, and the payload's own
  digest), with no problem reported, whose seq is the last acknowledged one or the one after it
  (the write in flight, once its frame is durable), never a torn one; every checkpoint file on
  disk verifies (a final name is only ever given to a whole file);
- ``entries()`` lists every acknowledged checkpoint retention keeps, newest first, without a
  duplicate seq, each readable (from its file, or from the log when the writer died before
  creating the file behind); a file on disk that is not listed is one the log dropped;
- no seq is ever reused, and after the next successful ``create`` and its write-behind the disk
  holds exactly what retention keeps (``keep_routine`` routine checkpoints, all of them listed);
- temporary files belong only to killed writers (counted, not needed for correctness).

Crash points are also hit deterministically (the child SIGKILLs itself at a chosen step), and a
checkpoint corrupted by hand is reported and skipped by ``latest`` and refused by ``read``.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from phoenix_protocol._agent import Agent
from phoenix_protocol._checkpoint_index import INLINE_LIMIT
from phoenix_protocol._checkpoints import Checkpoint, CheckpointInfo, CheckpointStore, CollectContext, parse_name
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._durable import host_tag, temp_writer
from phoenix_protocol._errors import CorruptStateError
from phoenix_protocol._home import Home

PY = sys.executable
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ROUND_MS = 3_600_000  # each round's child starts its clock an hour after the previous one

# The writer. Time is injected (a ManualClock that moves one second per checkpoint); the payload
# carries the digest of its own data so that the parent can check it beyond the file's checksum.
CHILD = r"""
import hashlib, os, sys
from phoenix_protocol._agent import Agent
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._home import Home
import phoenix_protocol._redact  # warm the lazy imports, so that kills land in real work
import phoenix_protocol._checkpoint_providers

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
out = sys.stdout
out.write("ready\n")
out.flush()
while True:
    clock.advance(1)
    info = store.create("routine", summary="loop")
    out.write(f"ack {info.seq} {info.name}\n")
    out.flush()
"""

# The same writer, killed by itself at one chosen step of ``create``.
CRASH_POINT_CHILD = r"""
import hashlib, os, signal, sys
from phoenix_protocol._agent import Agent
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._home import Home

home, agent_id, start_ms, keep, point, size = sys.argv[1:7]
clock = ManualClock(int(start_ms))
agent = Agent.open(agent_id, home=Home(home), clock=clock, config_overrides={"keep_routine": int(keep)})
store = agent.checkpoints
store._collectors.clear()
blob = "p" * int(size)
store.register("payload", lambda ctx: {"digest": hashlib.sha256(blob.encode()).hexdigest(), "chunks": [blob]})


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


import phoenix_protocol._checkpoint_index as index
import phoenix_protocol._background as background
from phoenix_protocol._ops import OpsLog

if point == "before-write":  # nothing written yet
    index.InPlaceFile.write = die
elif point == "before-behind":  # the frame is durable; no named file, no removal, no event yet
    background.submit = die
elif point == "before-link":  # behind: the named file's temporary is written, not linked
    os.link = die
elif point == "before-remove":  # the named file is there, what retention dropped is still on disk
    store.catalog._unlink = die
elif point == "before-log":  # everything is on disk, the ops event not yet written
    OpsLog.flush_later = die
elif point == "large-before-file":  # a large checkpoint: the log reserved its seq, its file is not created
    index.atomic_create = die
elif point.startswith("settle-"):  # the write finds the log full (3 records) and asks for a settle;
    index.LOG_RECORDS = 3  # nothing runs in the worker thread: flush() below runs the settle behind
    background.submit = lambda key, task, delay=0.0: None
info = store.create("routine", summary="crash point")
if point == "settle-before-snapshot":  # named files made durable, the snapshot not written
    index.atomic_write = die
elif point == "settle-before-header":  # the snapshot written, the log's header not yet rewritten
    index.InPlaceFile.write = die
store.flush()
print(f"ack {info.seq} {info.name}", flush=True)
"""


def tiny_payload(ctx: CollectContext) -> dict[str, bool]:
    return {"probe": True}


def open_store(home: str, agent_id: str, keep: int, clock: ManualClock) -> CheckpointStore:
    """The parent's view of a worker's agent; its own creates carry a tiny payload."""
    agent = Agent.open(agent_id, home=Home(home), clock=clock, config_overrides={"keep_routine": keep})
    store = agent.checkpoints
    store._collectors.clear()
    store.register("payload", tiny_payload)
    return store


def checkpoint_files(store: CheckpointStore) -> list[str]:
    names = os.listdir(store.dir) if os.path.isdir(store.dir) else []
    return sorted(n for n in names if parse_name(n) is not None)


def temp_files(store: CheckpointStore) -> list[str]:
    names: list[str] = []
    for directory in (store.agent.dir, store.dir):
        with_tmp = [n for n in os.listdir(directory) if n.endswith(".tmp")] if os.path.isdir(directory) else []
        names += with_tmp
    return names


def verify_payload(checkpoint: Checkpoint) -> None:
    """The payload's own digest matches its data (a second check beyond the file checksum)."""
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
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout)
    proc.stdout.close()
    proc.stderr.close()
    return out, err


@dataclass
class Stats:
    kills: int = 0
    acks: int = 0
    in_flight_visible: int = 0  # latest() was the write the kill interrupted (already durable)
    over_retention: int = 0  # more routine files than keep_routine on disk (killed before the removals)
    log_only: int = 0  # listed checkpoints whose file the killed writer had not created yet
    tmp_files: int = 0  # temporary files left by killed writers

    def add(self, other: Stats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def check_after_kill(
    store: CheckpointStore, last_acked: int, acks: list[tuple[int, str]], killed: set[int], where: str, stats: Stats
) -> int:
    """Every invariant that must hold the moment a writer died; returns the last acknowledged seq."""
    seqs = [seq for seq, _name in acks]
    assert seqs == sorted(set(seqs)), f"acknowledged seqs not increasing {seqs} {where}"
    assert not seqs or seqs[0] > last_acked, f"seq {seqs[0]} reused (last acknowledged {last_acked}) {where}"
    for seq, name in acks:
        parsed = parse_name(name)
        assert parsed is not None and parsed[1] == seq and parsed[0] == store.agent.id, name
    acked = seqs[-1] if seqs else last_acked

    on_disk = checkpoint_files(store)
    for name in on_disk:  # a final name is only ever given to a whole file
        verify_payload(store.read(name))

    checkpoint, problems = store.latest()
    assert problems == [], f"problems after a kill {problems} {where}"
    if acked:
        assert checkpoint is not None, f"no checkpoint although {acked} was acknowledged {where}"
    if checkpoint is not None:
        assert checkpoint.seq in (acked, acked + 1), f"latest is seq {checkpoint.seq}, acknowledged {acked} {where}"
        if checkpoint.seq == acked and acks:  # the write in flight did not get as far as its frame
            assert checkpoint.name == acks[-1][1]
        stats.in_flight_visible += checkpoint.seq == acked + 1
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
    for name in names:  # listed: readable, from its file or (not created yet) from the log
        verify_payload(store.read(name))
        stats.log_only += name not in on_disk
    # A file the log dropped may outlive a writer killed before its write-behind removed it: not
    # listed, and removed by the next writer. Every other file is listed.
    unlisted = set(on_disk) - set(names)
    assert unlisted <= store.catalog.load().dropped, f"{unlisted} on disk, neither listed nor dropped {where}"
    stats.over_retention += len(on_disk) > keep

    for name in temp_files(store):
        writer = temp_writer(name)
        assert writer is not None and writer[1] == host_tag(), name
        pid = writer[0]
        assert pid in killed, f"temporary file {name} of a writer that was not killed {where}"
    return acked


def check_next_create(store: CheckpointStore, where: str) -> int:
    """The next successful create: a fresh seq, and on disk exactly what retention keeps."""
    listed = [e.seq for e in store.entries()]
    files = [p[1] for p in map(parse_name, checkpoint_files(store)) if p is not None]
    highest = max([*listed, *files], default=0)
    clock = store.agent.clock
    assert isinstance(clock, ManualClock)
    clock.advance(1)
    info = store.create("routine", summary="probe")
    store.flush()
    # A large write killed after its log record reserved a seq leaves that seq unused (never reused).
    assert highest < info.seq <= highest + 2, f"create took seq {info.seq}, {highest} seen {where}"
    after = [p for p in map(parse_name, checkpoint_files(store)) if p is not None]
    routine_after = sorted(p[1] for p in after if p[3] == "routine")
    keep = store.agent.config.keep_routine
    assert routine_after == sorted([*listed, info.seq])[-keep:], f"retention not enforced {routine_after} {where}"
    assert [e.seq for e in store.entries()] == sorted((p[1] for p in after), reverse=True), where
    return info.seq


def crash_worker(home: str, agent_id: str, rounds: int, seed: int, keep: int, size: tuple[int, int]) -> Stats:
    rng = random.Random(seed)
    clock = ManualClock(BASE_MS)
    store = open_store(home, agent_id, keep, clock)
    stats = Stats()
    killed: set[int] = set()
    last_acked = 0
    for round_no in range(rounds):
        where = f"(agent {agent_id}, seed {seed}, round {round_no})"
        start_ms = BASE_MS + (round_no + 1) * ROUND_MS
        proc = subprocess.Popen(
            [PY, "-P", "-c", CHILD, home, agent_id, str(start_ms), str(keep), str(size[0]), str(size[1])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready != "ready\n":
            proc.kill()
            raise AssertionError(f"child did not start {where}: {ready!r} {proc.communicate()[1]}")
        # A random moment: after a random number of acknowledged checkpoints, plus a random delay
        # that lands inside the next one (a checkpoint takes some 10-60 ms here).
        seen = "".join(proc.stdout.readline() for _ in range(rng.randrange(0, 4)))
        time.sleep(rng.uniform(0, 0.06))
        out, err = sigkill(proc)
        assert proc.returncode == -signal.SIGKILL, f"child died on its own {where}: {err}"
        killed.add(proc.pid)
        stats.kills += 1
        acks = parse_acks(seen + out)
        stats.acks += len(acks)
        last_acked = check_after_kill(store, last_acked, acks, killed, where, stats)
        clock.set(start_ms + ROUND_MS // 2)
        last_acked = check_next_create(store, where)
    stats.tmp_files += len(temp_files(store))
    return stats


@pytest.mark.slow
def test_sigkilled_checkpoint_writers_never_leave_a_torn_latest(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    seed = random.randrange(1 << 30)
    # (rounds, keep_routine, payload bytes): 4 workers in parallel, 328 kills in all. Payloads up to
    # INLINE_LIMIT go through the log; larger ones are flushed as their own file.
    plans = [
        (82, 3, (50_000, 400_000)),
        (82, 1, (50_000, 200_000)),
        (82, 2, (INLINE_LIMIT - 300_000, INLINE_LIMIT + 300_000)),  # on both sides of the log's limit
        (82, 3, (50_000, 150_000)),
    ]
    with ThreadPoolExecutor(len(plans)) as pool:
        futures = [
            pool.submit(crash_worker, home, f"ckpt{i}", rounds, seed + i, keep, size)
            for i, (rounds, keep, size) in enumerate(plans)
        ]
        results = [f.result() for f in futures]
    total = Stats()
    for s in results:
        total.add(s)
    print(f"\ncheckpoint writers: {total} (seed {seed})")
    assert total.kills >= 300
    assert total.acks > total.kills, "the children must get real work done between kills"


# -- crash points hit on purpose ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "size", "new_file", "visible", "over_retention"),
    [
        ("before-write", 20_000, False, False, False),
        ("before-behind", 20_000, False, True, False),
        ("before-link", 20_000, False, True, False),
        ("before-remove", 20_000, True, True, True),
        ("before-log", 20_000, True, True, False),
        ("large-before-file", INLINE_LIMIT + 200_000, False, False, False),
        ("settle-before-snapshot", 20_000, True, True, False),
        ("settle-before-header", 20_000, True, True, False),
    ],
)
def test_kill_at_each_step_of_create(
    tmp_path: Path, point: str, size: int, new_file: bool, visible: bool, over_retention: bool
) -> None:
    """The windows a random kill rarely hits: the new file is whole or absent, ``latest`` is the
    last acknowledged checkpoint or the new one (once its frame is durable, even before its file
    exists: readers read it from the log, the next writer creates the file), and the next create
    neither reuses a seq nor leaves anything retention should have removed."""
    home = str(tmp_path / "home")
    keep = 2
    store = open_store(home, "pt", keep, ManualClock(BASE_MS))
    for _ in range(3):
        store.agent.clock.advance(1)  # type: ignore[attr-defined]
        last = store.create("routine")
    store.flush()
    before = set(checkpoint_files(store))
    events_before = len(store.agent.ops.read()[0])
    proc = subprocess.Popen(
        [PY, "-P", "-c", CRASH_POINT_CHILD, home, "pt", str(BASE_MS + ROUND_MS), str(keep), point, str(size)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    assert out == ""  # the create (and its flush) never returned
    if point.startswith("settle-"):  # killed inside the settle: before or after the snapshot
        assert os.path.exists(store.index_path) == (point == "settle-before-header")
    added = set(checkpoint_files(store)) - before
    assert len(added) == int(new_file)
    temps = temp_files(store)
    assert (point == "before-link") == any(".checkpoint." in t for t in temps), temps
    checkpoint, problems = store.latest()
    assert problems == []
    assert checkpoint is not None
    assert checkpoint.seq == last.seq + int(visible)
    if visible:
        verify_payload(checkpoint)
    assert len(store.agent.ops.read()[0]) == events_before  # the event comes last: lost with the process

    stats = Stats()
    check_after_kill(store, last.seq, [], {proc.pid}, point, stats)
    assert stats.over_retention == int(over_retention)
    assert stats.log_only == int(visible and not new_file)
    seq = check_next_create(store, point)
    assert seq == last.seq + 1 + int(point != "before-write")
    assert stats.in_flight_visible == int(visible)
    if visible:  # the next writer created the file the killed one had not
        assert os.path.exists(os.path.join(store.dir, checkpoint.name))


# -- damage by hand ----------------------------------------------------------------------------------


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flip_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def flip_checksum(data: bytes) -> bytes:
    i = data.rindex(b'"checksum": "xxh3-128:') + len(b'"checksum": "xxh3-128:') + 5
    return data[:i] + (b"0" if data[i : i + 1] != b"0" else b"1") + data[i + 1 :]


def empty(data: bytes) -> bytes:
    return b""


def drop_last_line(data: bytes) -> bytes:
    return data[: data.rstrip(b"\n").rfind(b"\n") + 1]


@pytest.mark.parametrize("damage", [truncate, flip_byte, flip_checksum, empty, drop_last_line])
def test_a_damaged_newest_checkpoint_is_reported_and_skipped(tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
    clock = ManualClock(BASE_MS)
    store = open_store(str(tmp_path / "home"), "hand", 5, clock)
    store.register("payload", lambda ctx: {"chunks": ["ab" * 32] * 2000, "probe": True})
    infos: list[CheckpointInfo] = []
    for _ in range(3):
        clock.advance(1)
        infos.append(store.create("routine", summary=f"number {len(infos)}"))
    store.rebuild_index()  # settled: the checkpoint log no longer holds copies
    newest = Path(store.dir, infos[-1].name)
    newest.write_bytes(damage(newest.read_bytes()))

    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == infos[-2].name
    assert len(problems) == 1 and infos[-1].name in problems[0]
    with pytest.raises(CorruptStateError) as raised:
        store.read(infos[-1].name)
    assert raised.value.path == str(newest)
    result = store.restore()
    assert result.checkpoint.name == infos[-2].name

    # Two damaged: the third is returned, both are named.
    second = Path(store.dir, infos[-2].name)
    second.write_bytes(flip_byte(second.read_bytes()))
    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == infos[0].name
    assert [infos[-1].name in problems[0], infos[-2].name in problems[1]] == [True, True]

    # The damaged files are kept as evidence; the next checkpoint takes a fresh seq.
    clock.advance(1)
    info = store.create("routine")
    assert info.seq == infos[-1].seq + 1
    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == info.name and problems == []
    assert {infos[-1].name, infos[-2].name} <= set(checkpoint_files(store))


@pytest.mark.parametrize("damage", [truncate, flip_byte, flip_checksum, empty, drop_last_line])
def test_a_damaged_checkpoint_the_log_still_holds_is_read_from_the_log(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    """Until the log is settled it holds each checkpoint's bytes: a damaged file is reported, its
    logged copy is returned, and the repair writes the file back."""
    clock = ManualClock(BASE_MS)
    store = open_store(str(tmp_path / "home"), "hand", 5, clock)
    store.register("payload", lambda ctx: {"chunks": ["ab" * 32] * 2000, "probe": True})
    infos = []
    for _ in range(3):
        clock.advance(1)
        infos.append(store.create("routine"))
    store.flush()
    newest = Path(store.dir, infos[-1].name)
    original = newest.read_bytes()
    newest.write_bytes(damage(original))

    checkpoint, problems = store.latest()
    assert checkpoint is not None and checkpoint.name == infos[-1].name
    assert len(problems) == 1 and infos[-1].name in problems[0] and "checkpoint log" in problems[0]
    assert store.repair_from_log(infos[-1].name)
    assert newest.read_bytes() == original
    assert store.latest()[1] == []
