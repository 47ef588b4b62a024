"""The checkpoint catalogue (``_checkpoint_index``): the write-ahead log, settling, and repair.

Crashes of real writer processes are in test_checkpoint_crash.py; these tests set up each state a
crash or a power loss can leave (a torn log tail, a lost file, a log older than its snapshot, a
reboot) directly on disk and check what the next reader and writer make of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import phoenix_protocol._checkpoint_index as index_mod
from phoenix_protocol._agent import Agent
from phoenix_protocol._checkpoint_index import INLINE_LIMIT, frame
from phoenix_protocol._checkpoints import CheckpointStore, CollectContext
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._home import Home
from phoenix_protocol._jsonio import loads

BASE_MS = 1_767_225_600_000


def open_store(home: Path, size: int = 2000, **overrides: object) -> CheckpointStore:
    agent = Agent.open("cat", home=Home(str(home)), clock=ManualClock(BASE_MS), config_overrides=overrides)
    store = agent.checkpoints
    store._collectors.clear()

    def payload(ctx: CollectContext) -> dict[str, object]:
        return {"blob": "x" * size, "summary": ctx.summary}

    store.register("payload", payload)
    return store


def take(store: CheckpointStore, kind: str = "session", summary: str | None = None) -> str:
    clock = store.agent.clock
    assert isinstance(clock, ManualClock)
    clock.advance(1)
    return store.create(kind, summary=summary).name


def reopened(store: CheckpointStore) -> CheckpointStore:
    """The same agent in a fresh object: no view in memory, as another process."""
    return open_store(Path(store.agent.home.root))


def log_bytes(store: CheckpointStore) -> bytes:
    return Path(store.catalog.log_path).read_bytes()


def test_a_small_checkpoint_is_in_the_log_and_a_large_one_only_named(tmp_path: Path) -> None:
    small = open_store(tmp_path / "a")
    name = take(small)
    data = Path(small.dir, name).read_bytes()
    assert data in log_bytes(small)  # the durable copy

    large = open_store(tmp_path / "b", size=INLINE_LIMIT + 1000)
    name = take(large)
    assert Path(large.dir, name).stat().st_size > INLINE_LIMIT
    assert len(log_bytes(large)) < 2000  # metadata only
    assert reopened(large).latest()[0] is not None


def test_another_process_sees_each_write(tmp_path: Path) -> None:
    writer = open_store(tmp_path)
    reader = reopened(writer)
    assert reader.entries() == []
    names = [take(writer) for _ in range(3)]
    assert [e.name for e in reader.entries()] == names[::-1]
    names.append(take(writer))
    latest, problems = reader.latest()
    assert latest is not None and latest.name == names[-1] and problems == []


def test_a_torn_log_tail_is_ignored_then_cut_by_the_next_writer(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    names = [take(store) for _ in range(2)]
    whole = len(log_bytes(store))
    record = frame(
        {"k": "put", "name": "cat_x", "seq": 99, "checkpoint_type": "session", "timestamp_ms": 1}, b"y" * 500
    )
    with open(store.catalog.log_path, "ab") as fh:
        fh.write(record[: len(record) // 2])  # a writer killed in the middle of its append

    reader = reopened(store)
    assert [e.name for e in reader.entries()] == names[::-1]
    nxt = take(reader)
    assert reader.entries()[0].name == nxt and reader.entries()[0].seq == 3
    data = log_bytes(store)
    assert data[whole:].startswith(b"@")  # the torn half was cut before the new record
    assert [e.seq for e in reopened(store).entries()] == [3, 2, 1]


def test_a_record_with_a_bad_crc_ends_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    take(store)
    second = take(store)
    data = bytearray(log_bytes(store))
    data[-10] ^= 0xFF  # inside the last record's checkpoint bytes
    Path(store.catalog.log_path).write_bytes(bytes(data))
    Path(store.dir, second).unlink()
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [1]  # the damaged record does not count


def test_a_killed_writer_file_is_linked_from_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    name = take(store)
    original = Path(store.dir, name).read_bytes()
    Path(store.dir, name).unlink()  # as if the writer died between its record and its file
    reader = reopened(store)
    assert reader.entries()[0].name == name
    assert Path(store.dir, name).read_bytes() == original
    latest, problems = reader.latest()
    assert latest is not None and latest.name == name and problems == []


def test_a_large_record_without_its_file_is_hidden_and_never_reused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    take(store)
    ghost = index_mod.make_name("cat", 2, BASE_MS + 5000, "session")
    with open(store.catalog.log_path, "ab") as fh:  # a large write killed before its file appeared
        fh.write(
            frame({"k": "put", "name": ghost, "seq": 2, "checkpoint_type": "session", "timestamp_ms": BASE_MS + 5000})
        )
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [1]
    nxt = reopened(store)
    assert take(nxt) and [e.seq for e in nxt.entries()] == [3, 1]  # seq 2 stays unused


def test_settling_writes_the_snapshot_and_starts_an_empty_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "LOG_RECORDS", 5)
    store = open_store(tmp_path, keep_routine=3)
    names = [take(store, "routine") for _ in range(12)]
    snapshot = loads(Path(store.index_path).read_bytes())
    assert snapshot["generation"] >= 2
    assert {e["name"] for e in snapshot["entries"]} <= set(names)
    assert len(log_bytes(store)) < 5 * 2500  # the log holds what came after the last settle only
    for fresh in (store, reopened(store)):
        assert [e.name for e in fresh.entries()] == names[-3:][::-1]
    on_disk = sorted(n for n in os.listdir(store.dir) if n.endswith(".checkpoint"))
    assert on_disk == sorted(names[-3:])


def test_the_log_stays_bounded(tmp_path: Path) -> None:
    store = open_store(tmp_path, size=20_000)
    for _ in range(600):
        take(store, "routine")
    total = sum(p.stat().st_size for p in Path(store.dir).iterdir())
    assert total < index_mod.LOG_LIMIT + 200_000
    assert len(store.entries()) == store.agent.config.keep_routine


def test_a_log_older_than_the_snapshot_is_ignored(tmp_path: Path) -> None:
    """A crash between replacing the snapshot and replacing the log leaves the old log."""
    store = open_store(tmp_path)
    take(store)
    old_log = log_bytes(store)
    take(store)
    store.rebuild_index()  # settles: snapshot generation 1, new log
    Path(store.catalog.log_path).write_bytes(old_log)  # the old log is back (generation 0)
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [2, 1]
    take(reader)
    assert [e.seq for e in reopened(store).entries()] == [3, 2, 1]
    assert loads(log_bytes(store).split(b"\n")[1])["generation"] == 1


def test_after_a_reboot_the_first_writer_rewrites_files_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    names = [take(store) for _ in range(3)]
    originals = {n: Path(store.dir, n).read_bytes() for n in names}
    Path(store.dir, names[0]).unlink()  # lost by a power loss
    Path(store.dir, names[1]).write_bytes(b"")  # allocated, never written
    Path(store.dir, names[2]).write_bytes(originals[names[2]][:100])  # half written

    monkeypatch.setattr(index_mod, "_boot", "another-boot")
    writer = reopened(store)
    take(writer)
    for name, data in originals.items():
        assert Path(store.dir, name).read_bytes() == data
    assert loads(log_bytes(store).split(b"\n")[1])["boot"] == "another-boot"  # settled in this boot
    assert reopened(store).latest()[1] == []


def test_a_file_deleted_by_hand_after_settling_disappears_from_the_list(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    names = [take(store) for _ in range(3)]
    store.rebuild_index()
    Path(store.dir, names[1]).unlink()
    assert [e.name for e in store.entries()] == [names[2], names[0]]
    assert [e.name for e in reopened(store).entries()] == [names[2], names[0]]


def test_a_file_copied_in_by_hand_is_listed(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    first = take(store)
    store.entries()
    copied = index_mod.make_name("cat", 7, BASE_MS + 60_000, "session")
    Path(store.dir, copied).write_bytes(Path(store.dir, first).read_bytes())
    assert copied in [e.name for e in reopened(store).entries()]
    assert take(store).endswith("_session.checkpoint") and store.entries()[0].seq == 8


WRITER = r"""
import sys
from phoenix_protocol._agent import Agent
from phoenix_protocol._home import Home

home, tag, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
agent = Agent.open("cat", home=Home(home), config_overrides={"keep_session_checkpoints": 1000})
store = agent.checkpoints
store._collectors.clear()
store.register("payload", lambda ctx: {"blob": tag * size})
for i in range(count):
    info = store.create("session" if i % 3 else "routine", summary=f"{tag}-{i}")
    print(info.seq, info.name, flush=True)
"""


def test_concurrent_writer_processes_share_one_catalogue(tmp_path: Path) -> None:
    """Four processes write checkpoints of one agent at once (small ones in the log, large ones
    as files, the log settling on the way): every seq is used once, every acknowledged session
    checkpoint is listed and reads back, routine retention holds, and a fresh reader agrees."""
    import subprocess
    import sys

    home = tmp_path / "home"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), tag, "60", str(size)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag, size in (("a", 2_000), ("b", 80_000), ("c", INLINE_LIMIT + 1), ("d", 500))
    ]
    acks: list[tuple[int, str]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        acks += [(int(seq), name) for seq, name in (line.split() for line in out.splitlines())]
    seqs = [seq for seq, _name in acks]
    assert len(seqs) == 240 and len(set(seqs)) == 240  # no seq given twice
    store = open_store(home)
    listed = {e.name: e for e in store.entries()}
    sessions = {name for _seq, name in acks if name.endswith("_session.checkpoint")}
    assert sessions <= set(listed)
    routine = [e for e in listed.values() if e.checkpoint_type == "routine"]
    assert len(routine) == store.agent.config.keep_routine
    assert sorted(e.seq for e in routine) == sorted(seq for seq, name in acks if "_routine." in name)[-3:]
    for name in sessions:
        checkpoint = store.read(name)
        tag = checkpoint.summary.split("-")[0] if checkpoint.summary else "?"
        assert (
            checkpoint.section("payload")["blob"]
            == tag * {"a": 2_000, "b": 80_000, "c": INLINE_LIMIT + 1, "d": 500}[tag]
        )
    on_disk = {n for n in os.listdir(store.dir) if n.endswith(".checkpoint")}
    assert on_disk == set(listed)
    assert store.latest()[1] == []
    assert Path(store.index_path).exists()  # 60 x 80 KB went past the log's limit: it settled
