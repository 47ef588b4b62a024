"""The checkpoint catalogue (``_checkpoint_index``): the write-ahead log reused in place, settling,
write-behind, and repair.

Crashes of real writer processes are in test_checkpoint_crash.py; these tests set up each state a
crash or a power loss can leave (a torn frame, a lost file, frames of an earlier generation, a log
older than its snapshot, a reboot, a log of the earlier format) directly on disk and check what
the next reader and writer make of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import xxhash

import phoenix_protocol._checkpoint_index as index_mod
import phoenix_protocol._durable as durable_mod
from phoenix_protocol._agent import Agent
from phoenix_protocol._checkpoint_index import HEADER_SIZE, INLINE_LIMIT, LOG_LIMIT, frame
from phoenix_protocol._checkpoints import CheckpointStore, CollectContext
from phoenix_protocol._clock import ManualClock
from phoenix_protocol._errors import StorageError
from phoenix_protocol._home import Home
from phoenix_protocol._jsonio import dumps_line, loads

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


def v1_frame(meta: dict[str, object], body: bytes = b"") -> bytes:
    """A frame of the earlier, append-only log format (``@<length> <crc32>``)."""
    payload = dumps_line(meta).encode("ascii") + b"\n" + body
    return b"@%d %08x\n" % (len(payload), zlib.crc32(payload)) + payload


def damaged_by_a_power_loss(store: CheckpointStore, names: list[str]) -> dict[str, bytes]:
    """Files written behind without a flush, as a power loss leaves them: ``names[1]`` allocated
    and never written, ``names[2]`` half written. Returns each file's bytes as they were written."""
    originals = {n: Path(store.dir, n).read_bytes() for n in names}
    Path(store.dir, names[1]).write_bytes(b"")
    Path(store.dir, names[2]).write_bytes(originals[names[2]][:100])
    return originals


def header(store: CheckpointStore) -> dict[str, object]:
    data = log_bytes(store)[:HEADER_SIZE]
    meta = loads(data[data.index(b"\n") + 1 : data.index(b"\n", data.index(b"\n") + 1)])
    assert isinstance(meta, dict)
    return meta


class Frame:
    def __init__(self, at: int, end: int, digest: int, meta: dict[str, object], content: bytes) -> None:
        self.at, self.end, self.digest, self.meta, self.content = at, end, digest, meta, content


def frames(store: CheckpointStore) -> list[Frame]:
    """Every frame the header's chain accepts."""
    data = log_bytes(store)
    seed = int(str(header(store)["salt"]))
    pos, out = HEADER_SIZE, list[Frame]()
    while True:
        nl = data.find(b"\n", pos, pos + 60)
        if data[pos : pos + 1] != b"@" or nl < 0:
            return out
        length, chained, digest = data[pos + 1 : nl].split(b" ")
        payload = data[nl + 1 : nl + 1 + int(length)]
        if int(chained, 16) != seed or len(payload) != int(length):
            return out
        if xxhash.xxh3_64_intdigest(payload, seed=seed) != int(digest, 16):
            return out
        meta, _, content = payload.partition(b"\n")
        decoded = loads(meta)
        assert isinstance(decoded, dict)
        seed = int(digest, 16)
        out.append(Frame(pos, nl + 1 + int(length), seed, decoded, content))
        pos = nl + 1 + int(length)


def test_a_small_checkpoint_is_in_the_log_and_a_large_one_only_named(tmp_path: Path) -> None:
    small = open_store(tmp_path / "a")
    name = take(small)
    small.flush()
    data = Path(small.dir, name).read_bytes()
    assert [f.content for f in frames(small) if f.meta["name"] == name] == [data]  # the durable copy

    large = open_store(tmp_path / "b", size=INLINE_LIMIT + 1000)
    name = take(large)
    assert Path(large.dir, name).stat().st_size > INLINE_LIMIT  # flushed on its own before create returned
    assert [len(f.content) for f in frames(large)] == [0]  # metadata only
    assert reopened(large).latest()[0] is not None


def test_the_named_file_is_written_behind_and_read_meanwhile(tmp_path: Path) -> None:
    """The durable point is the log's frame; the named file follows (flush waits for it). Until
    then this process reads the checkpoint from memory, another process from the log."""
    store = open_store(tmp_path)
    import phoenix_protocol._background as background

    gate = __import__("threading").Event()
    background.submit("hold", gate.wait)  # keep the worker busy: the write-behind waits its turn
    try:
        name = take(store, summary="behind")
        assert not Path(store.dir, name).exists()
        assert store.read(name).summary == "behind"
        other = reopened(store)
        assert other.entries()[0].name == name and other.read(name).summary == "behind"
        assert other.latest()[1] == []
    finally:
        gate.set()
    store.flush()
    assert Path(store.dir, name).exists()
    events, _problems = store.agent.ops.tail(5)
    assert [e["event"] for e in events][-1:] == ["checkpoint_created"]


def test_a_failed_write_behind_is_raised_by_flush_and_repaired_by_the_next_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, checkpoint_files_delay=0)
    real = durable_mod.atomic_create

    def full_disk(path: str, data: bytes, **kwargs: object) -> None:
        raise StorageError(f"could not write {path}: No space left on device.", path=path)

    monkeypatch.setattr(index_mod, "atomic_create", full_disk)
    name = take(store, summary="kept in the log")
    with pytest.raises(StorageError, match="No space left"):
        store.flush()
    assert not Path(store.dir, name).exists()
    assert reopened(store).read(name).summary == "kept in the log"  # durable all the same
    monkeypatch.setattr(index_mod, "atomic_create", real)
    take(store)
    store.flush()
    assert Path(store.dir, name).exists()


def test_a_write_whose_flush_fails_raises_and_announces_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bookkeeping and the ops event are prepared while the frame flushes; when the flush
    fails, ``create`` raises, the event is taken back, and the next write goes on from the disk."""
    store = open_store(tmp_path)
    first = take(store)
    real = durable_mod._datasync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable_mod, "_datasync", failing)
    with pytest.raises(StorageError, match="Input/output error"):
        take(store)
    monkeypatch.setattr(durable_mod, "_datasync", real)
    store.flush()
    events = [e for e in store.agent.ops.read()[0] if e["event"] == "checkpoint_created"]
    assert [e["meta"]["name"] for e in events] == [first]
    third = take(store)
    assert store.entries()[0].name == third and store.latest()[1] == []


def test_a_checkpoint_dropped_within_the_delay_never_gets_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, keep_routine=1, checkpoint_files_delay=60)
    created: list[str] = []
    real = durable_mod.atomic_create

    def counted(path: str, data: bytes, **kwargs: bool) -> None:
        created.append(os.path.basename(path))
        real(path, data, **kwargs)

    monkeypatch.setattr(index_mod, "atomic_create", counted)
    names = [take(store, "routine") for _ in range(20)]
    store.flush()
    assert created == [names[-1]]  # one file in the end, no create-then-remove for the other 19
    assert sorted(n for n in os.listdir(store.dir) if n.endswith(".checkpoint")) == [names[-1]]


def test_a_file_another_writer_created_is_removed_when_its_checkpoint_is_dropped(tmp_path: Path) -> None:
    """Writer B creates from the log the file of a checkpoint writer A has not written yet (B
    cannot tell a slow writer from a dead one); A then drops that checkpoint before its own
    write-behind ran. The file must go, or the next generation would take it for a checkpoint."""
    a = open_store(tmp_path, keep_routine=3, checkpoint_files_delay=3600)
    b = open_store(tmp_path, checkpoint_files_delay=3600)
    first = take(a, "routine")
    take(b, "session")  # B's load finds A's frame, and no file: B creates it
    assert Path(a.dir, first).exists()
    for _ in range(3):
        take(a, "routine")  # the fourth drops the first, which A never wrote itself
    a.rebuild_index()  # settles: the dropped names are removed, the new generation forgets them
    a.flush()
    b.flush()
    assert not Path(a.dir, first).exists()
    assert first not in [e.name for e in reopened(a).entries()]


def test_events_written_behind_keep_the_process_order(tmp_path: Path) -> None:
    store = open_store(tmp_path, checkpoint_files_delay=60)
    agent = store.agent
    take(store, summary="first")
    agent.record("something_else", "ok")  # written now: what waits behind goes first
    take(store, summary="second")
    events, _problems = agent.ops.read()
    assert [e["event"] for e in events] == ["checkpoint_created", "something_else", "checkpoint_created"]
    assert [e["seq"] for e in events] == [1, 2, 3]


def test_what_waits_behind_is_bounded_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "BEHIND_BYTES", 100_000)
    store = open_store(tmp_path, size=30_000, keep_session_checkpoints=100, checkpoint_files_delay=3600)
    names = [take(store) for _ in range(12)]
    deadline = time.monotonic() + 10
    while Path(store.dir, names[5]).exists() is False and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path(store.dir, names[5]).exists()  # written long before the hour's delay
    assert store.catalog._behind_bytes <= 100_000 + 40_000


def test_a_log_holds_several_frames_of_a_large_checkpoint(tmp_path: Path) -> None:
    """Checkpoints near INLINE_LIMIT go through the log too; it grows to LOG_FRAMES of them
    (rather than settling every few writes) and is then reused in place."""
    store = open_store(tmp_path, size=1_000_000, keep_session_checkpoints=100)
    for _ in range(index_mod.LOG_FRAMES - 1):
        take(store)
        store.flush()
    assert not Path(store.index_path).exists()  # never settled: no snapshot yet
    assert len(frames(store)) == index_mod.LOG_FRAMES - 1  # all in the log, which went past LOG_LIMIT
    assert os.stat(store.catalog.log_path).st_size > LOG_LIMIT
    take(store)  # past LOG_FRAMES: asks the write-behind to settle
    store.flush()
    assert Path(store.index_path).exists()  # settled once, started again from the header
    assert len(frames(store)) < index_mod.LOG_FRAMES
    size = os.stat(store.catalog.log_path).st_size
    for _ in range(10):
        take(store)
        store.flush()
    assert os.stat(store.catalog.log_path).st_size <= size + 4096  # each generation about where the first went


def test_another_process_sees_each_write(tmp_path: Path) -> None:
    writer = open_store(tmp_path)
    reader = reopened(writer)
    assert reader.entries() == []
    names = [take(writer) for _ in range(3)]
    assert [e.name for e in reader.entries()] == names[::-1]
    names.append(take(writer))
    latest, problems = reader.latest()
    assert latest is not None and latest.name == names[-1] and problems == []


def test_the_log_is_reused_in_place(tmp_path: Path) -> None:
    """Once the log has wrapped, a write changes neither its size nor its inode (so its
    fdatasync flushes data only); readers in other processes follow every generation."""
    store = open_store(tmp_path, size=200_000, keep_session_checkpoints=5)
    reader = reopened(store)
    for _ in range(60):  # 12 MB: the 4 MB log wraps several times
        take(store)
        store.flush()  # the settle the write past the capacity asked for, done at once
    first = os.stat(store.catalog.log_path)
    assert first.st_size <= LOG_LIMIT + 210_000  # the write that found it full went past, then it settled
    generation = header(store)["generation"]
    assert isinstance(generation, int) and generation >= 2
    store.rebuild_index()  # a new generation: the next five frames are well within the file
    names = []
    for _ in range(5):
        names.append(take(store))
        st = os.stat(store.catalog.log_path)
        assert (st.st_ino, st.st_size) == (first.st_ino, first.st_size)
    assert [e.name for e in reader.entries()] == names[::-1]
    assert [e.name for e in reopened(store).entries()] == names[::-1]
    latest = reader.latest()[0]
    assert latest is not None and latest.name == names[-1]


def test_frames_of_an_earlier_generation_are_not_taken(tmp_path: Path) -> None:
    """After a settle the old frames stay in the file past the new end: the new salt breaks
    their chain, so neither a fresh reader nor one that knew the old generation takes them."""
    store = open_store(tmp_path)
    old = [take(store) for _ in range(4)]
    old_reader = reopened(store)
    assert len(old_reader.entries()) == 4
    store.rebuild_index()  # settles: new generation, new salt; the four frames are still in the file
    assert len(log_bytes(store)) > HEADER_SIZE + 4 * 2000
    Path(store.dir, old[1]).unlink()  # gone from the directory: no stale frame may bring it back
    newer = take(store)
    for reader in (old_reader, reopened(store)):
        assert [e.name for e in reader.entries()] == [newer, old[3], old[2], old[0]]
    assert [f.meta["name"] for f in frames(store)] == [newer]


def test_a_torn_frame_is_ignored_then_written_over(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    names = [take(store) for _ in range(2)]
    last = frames(store)[-1]
    record, _ = frame(
        {"k": "put", "name": "cat_x", "seq": 99, "checkpoint_type": "session", "timestamp_ms": 1},
        b"y" * 500,
        seed=last.digest,
    )
    with open(store.catalog.log_path, "r+b") as fh:
        fh.seek(last.end)
        fh.write(record[: len(record) // 2])  # a writer killed in the middle of its write

    reader = reopened(store)
    assert [e.name for e in reader.entries()] == names[::-1]
    nxt = take(reader)
    assert reader.entries()[0].name == nxt and reader.entries()[0].seq == 3
    assert [f.meta["seq"] for f in frames(store)] == [1, 2, 3]
    assert [e.seq for e in reopened(store).entries()] == [3, 2, 1]


def test_a_frame_with_a_bad_hash_ends_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    take(store)
    second = take(store)
    store.flush()
    at = frames(store)[-1].at
    data = bytearray(log_bytes(store))
    data[at + 200] ^= 0xFF  # inside the last frame's checkpoint bytes
    Path(store.catalog.log_path).write_bytes(bytes(data))
    Path(store.dir, second).unlink()
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [1]  # the damaged frame does not count


def test_a_killed_writer_file_is_read_from_the_log_and_created_by_the_next_writer(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    name = take(store)
    store.flush()
    original = Path(store.dir, name).read_bytes()
    Path(store.dir, name).unlink()  # as if the writer died before its write-behind
    reader = reopened(store)
    assert reader.entries()[0].name == name
    latest, problems = reader.latest()
    assert latest is not None and latest.name == name and problems == []
    assert not Path(store.dir, name).exists()  # readers never write
    take(reader)
    assert Path(store.dir, name).read_bytes() == original


def test_a_large_record_without_its_file_is_hidden_and_never_reused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    take(store)
    store.flush()
    ghost = index_mod.make_name("cat", 2, BASE_MS + 5000, "session")
    last = frames(store)[-1]
    record, _ = frame(
        {"k": "put", "name": ghost, "seq": 2, "checkpoint_type": "session", "timestamp_ms": BASE_MS + 5000},
        seed=last.digest,
    )
    with open(store.catalog.log_path, "r+b") as fh:  # a large write killed before its file appeared
        fh.seek(last.end)
        fh.write(record)
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [1]
    nxt = reopened(store)
    assert take(nxt) and [e.seq for e in nxt.entries()] == [3, 1]  # seq 2 stays unused


def test_settling_writes_the_snapshot_and_starts_a_new_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_mod, "LOG_RECORDS", 5)
    store = open_store(tmp_path, keep_routine=3)
    names = []
    for _ in range(12):
        names.append(take(store, "routine"))
        store.flush()  # the write-behind, and the settle a write past the capacity asked for
    snapshot = loads(Path(store.index_path).read_bytes())
    assert snapshot["generation"] >= 2 and header(store)["generation"] == snapshot["generation"]
    assert {e["name"] for e in snapshot["entries"]} <= set(names)
    assert len(frames(store)) < 5  # the log holds what came after the last settle only
    for fresh in (store, reopened(store)):
        assert [e.name for e in fresh.entries()] == names[-3:][::-1]
    on_disk = sorted(n for n in os.listdir(store.dir) if n.endswith(".checkpoint"))
    assert on_disk == sorted(names[-3:])


def test_a_write_past_the_capacity_asks_the_write_behind_to_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write that finds the log full is not the one that settles it: it writes its frame past
    the capacity and asks the write-behind, which settles while writes go on."""
    import phoenix_protocol._background as background

    monkeypatch.setattr(index_mod, "LOG_RECORDS", 5)
    asked: list[tuple[object, float]] = []
    monkeypatch.setattr(background, "submit", lambda key, task, *, delay=0.0: asked.append((task, delay)))
    store = open_store(tmp_path, keep_session_checkpoints=50)
    names = [take(store) for _ in range(6)]
    assert not Path(store.index_path).exists()  # the 6th write did not settle
    assert len(frames(store)) == 6
    assert any(delay == 0.0 for _task, delay in asked)  # ... it asked for it at once
    assert [e.name for e in reopened(store).entries()] == names[::-1]
    store.catalog.flush_deferred()  # what the worker thread runs
    assert loads(Path(store.index_path).read_bytes())["generation"] == 1
    assert frames(store) == []  # a new generation, from the header
    assert sorted(n for n in os.listdir(store.dir) if n.endswith(".checkpoint")) == sorted(names)
    for fresh in (store, reopened(store)):
        assert [e.name for e in fresh.entries()] == names[::-1]


def test_a_write_settles_itself_at_twice_the_capacity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write-behind never came (a worker starved, a process that never flushes): the log
    stops at twice its capacity, where a write settles it before writing."""
    import phoenix_protocol._background as background

    monkeypatch.setattr(index_mod, "LOG_RECORDS", 5)
    monkeypatch.setattr(background, "submit", lambda key, task, *, delay=0.0: None)
    store = open_store(tmp_path, keep_session_checkpoints=50)
    names = [take(store) for _ in range(10)]
    assert not Path(store.index_path).exists() and len(frames(store)) == 10
    names.append(take(store))
    assert len(frames(store)) == 1  # settled, then written
    assert [e["name"] for e in loads(Path(store.index_path).read_bytes())["entries"]] == names[:10]
    assert [e.name for e in reopened(store).entries()] == names[::-1]


def test_a_settle_behind_flushes_the_files_without_the_lock_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers wait only for the end of a settle behind: the named files the log holds are
    flushed without the lock, and those are not flushed again under it."""
    import phoenix_protocol._background as background

    monkeypatch.setattr(background, "submit", lambda key, task, *, delay=0.0: None)
    monkeypatch.setattr(index_mod, "LOG_RECORDS", 40)
    store = open_store(tmp_path, keep_session_checkpoints=100)
    names = [take(store) for _ in range(41)]
    lock_path = store.index_path.rsplit("/", 1)[0]
    calls: list[tuple[list[str], bool]] = []
    real = durable_mod.fsync_files

    def spy(paths: list[str]) -> list[str]:
        locked = any(held.startswith(lock_path) for held in durable_mod._held)
        calls.append(([os.path.basename(p) for p in paths], locked))
        return real(paths)

    monkeypatch.setattr(index_mod, "fsync_files", spy)
    store.catalog.flush_deferred()
    assert calls[0] == (names, False)  # all of them, without the lock
    assert calls[-1] == ([], True)  # under the lock: none left
    assert Path(store.index_path).exists() and frames(store) == []


def test_the_log_stays_bounded(tmp_path: Path) -> None:
    """Without waiting for anything: the write-behind settles the log once past its capacity
    while writes go on, and a write settles it itself at twice the capacity."""
    store = open_store(tmp_path, size=20_000)
    for _ in range(600):
        take(store, "routine")
    store.flush()
    total = sum(p.stat().st_size for p in Path(store.dir).iterdir())
    assert os.stat(store.catalog.log_path).st_size <= 2 * LOG_LIMIT
    assert total < 2 * LOG_LIMIT + 200_000
    assert len(store.entries()) == store.agent.config.keep_routine


def test_writes_and_reads_never_ask_for_the_logs_timestamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the log is open, neither a writer nor a reader ``stat``s it: on Linux 6.13+ a query of
    a file's timestamps makes its next write record a fine-grained time, and the ``fdatasync`` of
    the next checkpoint then commits the journal (0.12 -> 0.18 ms per write, bench/fsync_costs.py).
    Changes are found by reading the header and what follows the known end instead."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd on this system (the log is stat-ed there)")
    store = open_store(tmp_path)
    take(store)  # the log is started and opened
    log = os.path.realpath(store.catalog.log_path)
    asked: list[str] = []
    real_stat, real_fstat = os.stat, os.fstat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if isinstance(path, str) and os.path.realpath(path) == log:
            asked.append("stat")
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def fstat(fd: int) -> os.stat_result:
        if os.readlink(f"/proc/self/fd/{fd}") == log:
            asked.append("fstat")
        return real_fstat(fd)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "fstat", fstat)
    other = reopened(store)  # another view of the same files (this process shares the descriptor)
    for _ in range(3):
        take(store)
        assert other.latest()[0] is not None and other.entries()
    store.flush()
    assert asked == []
    assert [e.seq for e in other.entries()] == [4, 3, 2, 1]


def test_a_reader_notices_a_log_deleted_and_started_again_by_another_process(tmp_path: Path) -> None:
    """A reader looks at the log through the descriptor it has while the directory is unchanged;
    deleting the log (by hand) and another process starting a new one change the directory, so the
    reader's next load opens the new file instead of reading the deleted one."""
    store = open_store(tmp_path)
    names = [take(store) for _ in range(3)]
    store.flush()
    time.sleep(0.06)  # the file system's timestamp granularity: the reader takes the directory as settled
    reader = reopened(store)
    assert [e.name for e in reader.entries()] == names[::-1]
    log = Path(store.catalog.log_path)
    log.unlink()  # by hand: the files and the snapshot remain
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), "z", "1", "100"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    ((_seq, name),) = (line.split() for line in out.stdout.splitlines())
    assert [e.name for e in reader.entries()] == [name, *names[::-1]]
    view = reader.catalog._view
    assert view is not None and view.log_ino == log.stat().st_ino  # the new file, not the deleted one


def test_a_log_older_than_the_snapshot_is_ignored(tmp_path: Path) -> None:
    """A crash between replacing the snapshot and rewriting the log's header leaves the old
    generation's header and frames."""
    store = open_store(tmp_path)
    take(store)
    take(store)
    old_log = log_bytes(store)
    store.rebuild_index()  # settles: snapshot generation 1
    Path(store.catalog.log_path).write_bytes(old_log)  # the old header (generation 0) is back
    reader = reopened(store)
    assert [e.seq for e in reader.entries()] == [2, 1]
    take(reader)
    assert [e.seq for e in reopened(store).entries()] == [3, 2, 1]
    assert header(store)["generation"] == 1


def test_after_a_reboot_the_first_writer_rewrites_files_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    names = [take(store) for _ in range(3)]
    store.flush()
    originals = damaged_by_a_power_loss(store, names)
    Path(store.dir, names[0]).unlink()  # lost by it too

    monkeypatch.setattr(index_mod, "_boot", "another-boot")
    writer = reopened(store)
    take(writer)
    for name, data in originals.items():
        assert Path(store.dir, name).read_bytes() == data
    assert header(store)["boot"] == "another-boot"  # settled in this boot
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
    store.flush()
    store.entries()
    copied = index_mod.make_name("cat", 7, BASE_MS + 60_000, "session")
    Path(store.dir, copied).write_bytes(Path(store.dir, first).read_bytes())
    assert copied in [e.name for e in reopened(store).entries()]
    assert take(store).endswith("_session.checkpoint") and store.entries()[0].seq == 8


def test_a_log_of_the_earlier_format_is_read_and_converted(tmp_path: Path) -> None:
    """A home from before the log was reused in place: crc32 frames appended to a file whose
    first frame opens it. Readers take it as it is; the first writer makes the files it holds
    durable, settles, and starts a log of the current format."""
    store = open_store(tmp_path)
    kept = take(store)  # a checkpoint with its file and in the snapshot
    store.rebuild_index()
    store.flush()
    logged = index_mod.make_name("cat", 2, BASE_MS + 9000, "session")
    donor = open_store(tmp_path / "donor")
    take(donor)  # the donor's second checkpoint is a #2, as the log names it
    donor_name = take(donor, summary="only in the old log")
    donor.flush()
    content = Path(donor.dir, donor_name).read_bytes()
    old = v1_frame({"k": "open", "generation": 1, "boot": index_mod.boot_id(), "agent_id": "cat"}) + v1_frame(
        {"k": "put", "name": logged, "seq": 2, "checkpoint_type": "session", "timestamp_ms": BASE_MS + 9000},
        content,
    )
    Path(store.catalog.log_path).unlink()
    Path(store.catalog.log_path).write_bytes(old)

    reader = reopened(store)
    assert [e.name for e in reader.entries()] == [logged, kept]
    assert reader.read(logged).summary == "only in the old log"
    assert not Path(store.dir, logged).exists()

    writer = reopened(store)
    nxt = take(writer)
    assert Path(store.dir, logged).read_bytes() == content
    assert header(store)["v"] == 2 and [f.meta["name"] for f in frames(store)] == [nxt]
    assert [e.seq for e in reopened(store).entries()] == [3, 2, 1]


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
    assert on_disk == set(listed)  # each writer finished its write-behind before it exited
    assert store.latest()[1] == []
    assert Path(store.index_path).exists()  # 60 x 80 KB went past the log's limit: it settled


def test_descriptors_kept_open_stay_bounded(tmp_path: Path) -> None:
    """A long-running process (the memory bridge, the watchdog) opens a store per request or per
    agent: the log and lock descriptors it keeps between calls stay bounded, whatever becomes of
    the store objects."""
    before = len(os.listdir("/proc/self/fd"))
    for i in range(150):
        agent = Agent.open(
            f"agent{i}", home=Home(str(tmp_path / "home")), config_overrides={"checkpoint_files_delay": 0}
        )
        agent.checkpoints.create("routine")
        assert agent.checkpoints.latest()[0] is not None
    assert len(os.listdir("/proc/self/fd")) - before <= durable_mod._IN_PLACE_MAX + durable_mod._IDLE_MAX + 8


def test_a_log_whose_header_is_damaged_gives_back_the_checkpoints_only_it_held(tmp_path: Path) -> None:
    """A writer killed before its write-behind leaves a checkpoint only in index.log; if the log's
    header is then damaged, the next writer keeps the log beside it and writes that checkpoint's
    file from its frame (each frame carries its own seed) before it starts a new log."""
    store = open_store(tmp_path)
    take(store, summary="on disk")
    store.flush()
    child = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from pathlib import Path\n"
        "from test_checkpoint_index import open_store\n"
        "store = open_store(Path(sys.argv[1]), checkpoint_files_delay=30)\n"
        "store.agent.clock.advance(5)\n"
        "print(store.create('session', summary='only in the log').name, flush=True)\n"
        "os._exit(0)\n"  # killed before its write-behind
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    )
    newest = done.stdout.strip()
    directory = Path(store.catalog.dir)
    assert newest and not (directory / newest).exists()
    log = Path(store.catalog.log_path)
    data = bytearray(log.read_bytes())
    data[39] ^= 1  # the header's JSON no longer reads (its head line is "@<length> <seed> <hash>\n")
    log.write_bytes(bytes(data))

    # A reader (a session's restore) before any writer: the newest checkpoint is read from its
    # frame, and the damage is said; nothing is written.
    reader = reopened(store)
    checkpoint, problems = reader.latest()
    assert checkpoint is not None and (checkpoint.name, checkpoint.summary) == (newest, "only in the log")
    assert len(problems) == 1 and "header does not read" in problems[0]
    assert not (directory / newest).exists() and log.read_bytes() == bytes(data)

    writer = reopened(store)
    take(writer, kind="routine", summary="next write")
    writer.flush()
    assert (directory / newest).exists() and newest in [e.name for e in writer.entries()]
    assert writer.read(newest).summary == "only in the log"
    kept = [p for p in directory.iterdir() if p.name.startswith("index.log.corrupt-")]
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)
    [told] = [e for e in writer.agent.ops.read()[0] if e["event"] == "checkpoint_log_salvaged"]
    assert "1 checkpoint(s)" in told["meta"]["detail"] and newest in told["meta"]["detail"]


def test_a_checkpoint_that_does_not_read_is_skipped_by_latest_and_reported_by_doctor(tmp_path: Path) -> None:
    """A file the store cannot read (permissions, an I/O error; here a directory under its name)
    costs that checkpoint only: `latest` falls back to the newest that reads, doctor reports it."""
    from phoenix_protocol._doctor import check_agent

    store = open_store(tmp_path)
    good = take(store, summary="valid")
    store.flush()
    bad = good.replace("-00000001_", "-00000009_")
    os.mkdir(os.path.join(store.catalog.dir, bad))
    other = reopened(store)
    checkpoint, problems = other.latest()
    assert checkpoint is not None and checkpoint.name == good
    assert len(problems) == 1 and bad in problems[0]
    [finding] = [f for f in check_agent(other.agent, repair=False) if (f.path or "").endswith(bad)]
    assert finding.level == "error" and "skips it" in finding.message


def test_a_reader_racing_a_settle_still_gets_the_newest_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader finds no file for the newest checkpoint (still only in the log, its writer's
    write-behind pending), and before it reads the log, another process settles: the file is
    written and the frame gone. The reader must read the file, not report the checkpoint gone
    and fall back to an older one (seen once in 20,000 reads with two writers)."""
    writer = open_store(tmp_path, checkpoint_files_delay=3600)
    older = take(writer, summary="older")
    writer.flush()
    newest = take(writer, summary="newest")
    assert not Path(writer.dir, newest).exists()  # only in the log for now
    reader = reopened(writer)
    assert reader.files is not None
    plain_read = reader.files.read

    def read_then_settle(name: str) -> bytes | None:
        data = plain_read(name)
        if name == newest:
            assert data is None
            other = reopened(writer)
            other.rebuild_index()  # settles: the file is written, the frame goes with the generation
            other.flush()
            assert Path(writer.dir, newest).exists()
        return data

    monkeypatch.setattr(reader.files, "read", read_then_settle)
    checkpoint, problems = reader.latest()
    assert checkpoint is not None
    assert (checkpoint.name, problems) == (newest, [])
    assert older != newest


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_a_lost_snapshot_is_reported_and_never_hands_out_a_seq_again(tmp_path: Path, damage: str) -> None:
    """The newest checkpoint was released (its operation succeeded) and the log settled since:
    only the snapshot remembered its seq. Lost, the next writer must not give a new checkpoint
    that number (ops events and `phx checkpoint show 4` name checkpoints by it)."""
    store = open_store(tmp_path)
    take(store, "routine")
    take(store, "session")
    with store.pre_operation("migrate db") as held:
        assert held.checkpoint.seq == 3
    assert [e.seq for e in store.entries()] == [2, 1]  # released
    store.rebuild_index()  # settled: a new log, no frame names #3 any more
    index = Path(store.catalog.index_path)
    garbled = index.read_bytes()[:50]
    if damage == "deleted":
        index.unlink()
    else:
        index.write_bytes(garbled)
    writer = reopened(store)
    assert take(writer).endswith("-00000004_session.checkpoint")
    assert [e.seq for e in reopened(store).entries()] == [4, 2, 1]
    [event] = [e for e in writer.agent.ops.read()[0] if e["event"] == "checkpoint_index_rebuilt"]
    assert event["status"] == "warn" and "the next number 4" in event["meta"]["detail"]
    kept = [p.read_bytes() for p in Path(store.dir).glob("index.json.corrupt-*")]
    assert kept == ([] if damage == "deleted" else [garbled])


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_after_a_reboot_a_lost_snapshot_does_not_cost_the_files_their_copy_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Files written behind without a flush, damaged by a power loss, and index.json lost too:
    the first writer must rewrite the files from the log before the settle that rebuilds the
    snapshot restarts the log (which held their only good copy)."""
    store = open_store(tmp_path)
    take(store)
    store.rebuild_index()  # settled once: a snapshot and a log of generation 1
    names = [take(store) for _ in range(3)]  # in the log; their files written behind, unflushed
    store.flush()
    originals = damaged_by_a_power_loss(store, names)
    index = Path(store.catalog.index_path)
    if damage == "deleted":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:40])
    monkeypatch.setattr(index_mod, "_boot", "another-boot")
    take(reopened(store))
    assert {n: Path(store.dir, n).read_bytes() for n in names} == originals
    assert [e for e in reopened(store).agent.ops.read()[0] if e["event"] == "checkpoint_index_rebuilt"]


def test_an_unreadable_snapshot_next_to_a_log_of_the_earlier_format_is_kept_and_reported(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    take(store)
    store.rebuild_index()
    store.flush()
    Path(store.catalog.log_path).unlink()
    Path(store.catalog.log_path).write_bytes(
        v1_frame({"k": "open", "generation": 1, "boot": index_mod.boot_id(), "agent_id": "cat"})
    )
    index = Path(store.catalog.index_path)
    garbled = index.read_bytes()[:50]
    index.write_bytes(garbled)
    writer = reopened(store)
    take(writer)
    assert [p.read_bytes() for p in Path(store.dir).glob("index.json.corrupt-*")] == [garbled]
    assert [e for e in writer.agent.ops.read()[0] if e["event"] == "checkpoint_index_rebuilt"]


def _damage_header(store: CheckpointStore, at: int = 45) -> None:
    """One bit of the header flipped: at 45, a letter of its JSON (which still reads, salt
    included, but no longer verifies); at 20, a digit of its head line's seed or hash."""
    log = Path(store.catalog.log_path)
    data = bytearray(log.read_bytes())
    data[at] ^= 1
    log.write_bytes(bytes(data))


def test_a_header_damaged_only_in_its_seed_or_one_hash_digit_still_reads(tmp_path: Path) -> None:
    """The header's seed is always 0 and its payload verifies against a hash one hex digit off:
    the damage is in the head line, not in what it says. Nothing to salvage; nothing lost."""
    store = open_store(tmp_path)
    take(store, summary="older")
    newest = take(store, summary="newest")
    log = Path(store.catalog.log_path)
    intact = log.read_bytes()
    head = intact[: intact.index(b"\n")].split(b" ")  # @<length> <seed> <hash>
    seed_at, hash_at = len(head[0]) + 2, len(head[0]) + len(head[1]) + 10
    for at in (seed_at, hash_at):  # a digit of the seed, then one of the hash: another hex digit
        damaged = bytearray(intact)
        damaged[at] = ord("1") if intact[at] == ord("0") else ord("0")
        log.write_bytes(bytes(damaged))
        reader = reopened(store)
        checkpoint, problems = reader.latest()
        assert checkpoint is not None and (checkpoint.name, problems) == (newest, [])
        log.write_bytes(intact)  # back as it was
    take(reopened(store))
    assert not list(Path(store.dir).glob("index.log.corrupt-*"))


def test_a_damaged_log_and_a_lost_snapshot_never_hand_out_a_released_seq_and_are_reported(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for _ in range(4):
        take(store, "routine")
    with store.pre_operation("migrate db") as held:
        released = held.checkpoint.seq  # logged, then dropped
    store.rebuild_index()  # settled: only the header (next seq) and stale frames know #5 now
    store.flush()
    _damage_header(store)
    Path(store.catalog.index_path).unlink()
    writer = reopened(store)
    assert int(take(writer).split("-")[1].split("_")[0]) > released
    writer.flush()
    events = [e["event"] for e in writer.agent.ops.read()[0]]
    assert "checkpoint_log_salvaged" in events and "checkpoint_index_rebuilt" in events
    assert Path(store.catalog.index_path).exists()


def test_the_salvage_of_a_damaged_log_after_a_reboot_repairs_damaged_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss damages files written behind without a flush and the log's header: the
    salvage writes each file whose bytes differ from its verified frame, not only missing ones."""
    store = open_store(tmp_path)
    take(store)
    store.rebuild_index()
    names = [take(store) for _ in range(3)]
    store.flush()
    originals = damaged_by_a_power_loss(store, names)
    _damage_header(store)
    monkeypatch.setattr(index_mod, "_boot", "another-boot")
    writer = reopened(store)
    take(writer)
    writer.flush()
    assert {n: Path(store.dir, n).read_bytes() for n in names} == originals


def test_a_log_of_the_earlier_format_after_a_reboot_rewrites_the_files_before_settling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    take(store)
    store.rebuild_index()
    names = [take(store) for _ in range(3)]
    store.flush()
    infos = {e.name: e for e in store.entries()}
    originals = damaged_by_a_power_loss(store, names)
    log = v1_frame({"k": "open", "generation": 1, "boot": "the-boot-before", "agent_id": "cat"})
    for n in names:
        log += v1_frame({"k": "put", **infos[n].as_dict()}, originals[n])
    Path(store.catalog.log_path).unlink()
    Path(store.catalog.log_path).write_bytes(log)  # as an earlier Phoenix left it
    monkeypatch.setattr(index_mod, "_boot", "another-boot")
    writer = reopened(store)
    take(writer)
    writer.flush()
    assert {n: Path(store.dir, n).read_bytes() for n in names} == originals


def test_a_damaged_log_and_a_lost_snapshot_do_not_bring_back_a_checkpoint_of_an_earlier_generation(
    tmp_path: Path,
) -> None:
    """The log is reused in place: past the current generation's frames lie earlier ones'. With
    the snapshot lost too, only the chain from the header's salt tells which frames are current."""
    store = open_store(tmp_path)
    for _ in range(4):
        take(store, "routine")
    with store.pre_operation("migrate db") as held:
        released = held.checkpoint.name  # 5
        store.rebuild_index()  # generation 1: the snapshot lists it
    store.rebuild_index()  # generation 2: it is gone (dropped in generation 1)
    store.flush()
    take(store, "session")  # generation 2's frame, over the start of generation 1's
    store.flush()
    _damage_header(store)
    Path(store.catalog.index_path).unlink()
    assert released not in [e.name for e in reopened(store).entries()]
    writer = reopened(store)
    take(writer)
    writer.flush()
    assert not Path(store.dir, released).exists()


def test_a_damaged_log_never_hands_out_the_seq_of_a_large_released_checkpoint(tmp_path: Path) -> None:
    """A checkpoint over INLINE_LIMIT has a frame without its bytes, which still reserves its seq."""
    store = open_store(tmp_path, size=1_400_000)
    take(store, "routine")
    store.rebuild_index()
    with store.pre_operation("migrate db") as held:
        released = held.checkpoint.seq
    store.flush()
    _damage_header(store, at=39)  # the header's JSON does not read: only the frames tell
    Path(store.catalog.index_path).unlink()
    writer = reopened(store)
    assert int(take(writer).split("-")[1].split("_")[0]) > released


def test_a_damaged_log_does_not_bring_back_a_dropped_checkpoint_whose_file_stayed(tmp_path: Path) -> None:
    """Its writer was killed between the drop record and the unlink: with the log intact the next
    writer removes the file; with its header damaged, the salvage must do the same."""
    store = open_store(tmp_path)
    for _ in range(3):
        take(store, "routine")
    store.rebuild_index()
    with store.pre_operation("migrate db") as held:
        released = held.checkpoint.name
        store.flush()
        saved = Path(store.dir, released).read_bytes()
    store.flush()
    Path(store.dir, released).write_bytes(saved)  # killed before its unlink
    _damage_header(store, at=39)
    assert released not in [e.name for e in reopened(store).entries()]
    reopened(store).flush()  # a writer's load
    assert not Path(store.dir, released).exists()
    assert released not in [e.name for e in reopened(store).entries()]


def test_a_record_damaged_in_the_middle_of_the_log_does_not_end_it(tmp_path: Path) -> None:
    """Bit rot in one record, with the header and the records after it intact: readers read past
    it (the records after it chain on its stated hash), so a checkpoint only the log holds is not
    lost and no number is given again; the next writer keeps the log aside, settles it and says so."""
    store = open_store(tmp_path)
    names = [take(store, summary=f"c{i}") for i in range(5)]
    store.flush()
    damaged = frames(store)[1]
    assert damaged.meta["name"] == names[1]
    data = bytearray(log_bytes(store))
    data[damaged.end - 10] ^= 1  # in its checkpoint's bytes
    Path(store.catalog.log_path).write_bytes(bytes(data))
    os.unlink(Path(store.dir, names[3]))  # its writer killed before the write-behind: only the log holds it

    reader = reopened(store)
    assert [e.name for e in reader.entries()][::-1] == names  # the damaged one from its file
    assert reader.read(names[3]).summary == "c3"
    latest, problems = reader.latest()
    assert latest is not None and latest.name == names[4]
    assert len(problems) == 1 and "1 record(s) damaged in the middle of the log" in problems[0]

    writer = reopened(store)
    newest = take(writer, summary="after")
    assert writer.read(newest).seq == 6
    writer.flush()
    assert writer.read(names[3]).summary == "c3" and os.path.exists(Path(store.dir, names[3]))
    assert writer.read(names[1]).summary == "c1"
    events = [e for e in writer.agent.ops.read()[0] if e["event"] == "checkpoint_log_frame_damaged"]
    assert len(events) == 1 and "1 record(s) damaged" in events[0]["meta"]["detail"]
    assert [n for n in os.listdir(store.dir) if n.startswith("index.log.corrupt-")]
    again = reopened(store)
    assert [e.name for e in again.entries()][::-1] == [*names, newest]
    take(again)
    assert len([e for e in again.agent.ops.read()[0] if e["event"] == "checkpoint_log_frame_damaged"]) == 1


def test_a_torn_last_record_is_still_a_torn_tail(tmp_path: Path) -> None:
    """The last record damaged, nothing after it: a writer killed mid-write, not bit rot."""
    store = open_store(tmp_path)
    names = [take(store, summary=f"c{i}") for i in range(3)]
    store.flush()
    last = frames(store)[-1]
    data = bytearray(log_bytes(store))
    data[last.end - 10] ^= 1
    Path(store.catalog.log_path).write_bytes(bytes(data))
    writer = reopened(store)
    take(writer)
    assert not [e for e in writer.agent.ops.read()[0] if e["event"] == "checkpoint_log_frame_damaged"]
    assert writer.read(names[2]).summary == "c2"  # from its file


def test_the_number_of_a_damaged_record_is_never_given_again(tmp_path: Path) -> None:
    """A damaged checkpoint record followed only by the record that released it (an operation
    that succeeded): no later checkpoint says how far numbering went; the damaged record's own
    metadata, still legible, does."""
    store = open_store(tmp_path)
    take(store, summary="before")
    with store.pre_operation("migrate db"):
        pass  # released on success: its file removed, a record saying so
    store.flush()
    put, released = frames(store)[-2:]
    assert put.meta["checkpoint_type"] == "pre-operation" and released.meta["k"] == "drop"
    data = bytearray(log_bytes(store))
    data[put.end - 10] ^= 1
    Path(store.catalog.log_path).write_bytes(bytes(data))
    writer = reopened(store)
    newest = take(writer, summary="after")
    assert writer.read(newest).seq == int(str(put.meta["seq"])) + 1


def test_doctor_reports_and_settles_a_record_damaged_in_the_middle(tmp_path: Path) -> None:
    from phoenix_protocol._doctor import check_agent

    store = open_store(tmp_path)
    names = [take(store, summary=f"c{i}") for i in range(3)]
    store.flush()
    data = bytearray(log_bytes(store))
    data[frames(store)[0].end - 10] ^= 1
    Path(store.catalog.log_path).write_bytes(bytes(data))
    agent = reopened(store).agent
    found = [f for f in check_agent(agent, repair=False) if "damaged in the middle" in f.message]
    assert [f.level for f in found] == ["error"]
    fixed = [f for f in check_agent(agent) if "damaged in the middle" in f.message]
    assert [(f.level, f.repaired) for f in fixed] == [("warn", True)]
    assert [e["event"] for e in agent.ops.read()[0]].count("checkpoint_log_frame_damaged") == 1
    assert not [f for f in check_agent(agent) if "damaged in the middle" in f.message]
    assert [e.name for e in reopened(store).entries()][::-1] == names


def test_a_record_read_while_it_was_being_written_is_no_damage(tmp_path: Path) -> None:
    """Found in review: a reader without the lock read a record while its writer was copying it
    (the log is reused in place: its tail held the old generation's bytes), then saw the next
    record chain on it, and took the record for damage: it left it out, and its own next write
    settled the log without it, while its file was still to come from the writer's write-behind.
    The record is read again once a later one shows it whole."""
    writer = open_store(tmp_path, size=20000, checkpoint_files_delay=3600)
    for i in range(8):
        take(writer, summary=f"old{i}")
    writer.flush()
    writer.rebuild_index()  # settled: the next records are written over the old ones
    writer.flush()
    take(writer, summary="a")
    writer.flush()
    reader = reopened(writer)
    reader.latest()
    before = log_bytes(writer)
    n = take(writer, summary="N")  # its file still to be written behind
    take(writer, summary="N+1")
    final = log_bytes(writer)
    frame_n = next(f for f in frames(writer) if f.meta.get("name") == n)
    half = bytearray(final)
    half[frame_n.at + 4096 :] = before[frame_n.at + 4096 : len(final)]  # N half copied, N+1 not yet
    log = Path(writer.catalog.log_path)
    log.write_bytes(bytes(half))
    looked = reader.catalog._past_damage

    def the_writer_finishes_first(*args: Any) -> Any:
        log.write_bytes(final)
        return looked(*args)

    reader.catalog._past_damage = the_writer_finishes_first  # type: ignore[method-assign,assignment]
    latest, problems = reader.latest()
    assert latest is not None and latest.summary == "N+1" and problems == []
    assert n in {e.name for e in reader.entries()}
    reader.catalog._past_damage = looked  # type: ignore[method-assign]
    take(reader, summary="the reader's process writes next")
    assert not [e for e in reader.agent.ops.read()[0] if e["event"] == "checkpoint_log_frame_damaged"]
    writer.flush()
    assert Path(writer.dir, n).exists() and n in {e.name for e in reopened(writer).entries()}


def test_a_crafted_negative_length_is_no_frame(tmp_path: Path) -> None:
    """Found in review: a head with a negative length whose stated hash was an earlier record's
    seed sent a reader back to that record, forever."""
    store = open_store(tmp_path, size=300)
    names = [take(store, summary=f"c{i}") for i in range(6)]
    store.flush()
    fr = frames(store)
    data = bytearray(log_bytes(store))
    back, at = fr[1], fr[4]  # from record 4 back to record 1
    for width in range(1, 12):  # a length whose own digits make the jump land on record 1
        size = len(b"@%d %016x %016x\n" % (-(10 ** (width - 1)), fr[3].digest, fr[0].digest))
        head = b"@%d %016x %016x\n" % (back.at - at.at - size, fr[3].digest, fr[0].digest)
        if len(head) == size:
            break
    data[at.at : at.at + len(head)] = head
    Path(store.catalog.log_path).write_bytes(bytes(data))
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(reopened(store).latest()), daemon=True)
    worker.start()
    worker.join(10)
    assert result, "latest() did not return"
    assert {e.name for e in reopened(store).entries()} == set(names)  # the files are all there


def test_the_number_of_a_record_damaged_in_its_metadata_is_never_given_again(tmp_path: Path) -> None:
    """Found in review: damage in the record's metadata line hid its number; the record that
    released it names it, and that name holds the number."""
    store = open_store(tmp_path)
    take(store, summary="before")
    with store.pre_operation("migrate db"):
        pass
    store.flush()
    put, _released = frames(store)[-2:]
    data = bytearray(log_bytes(store))
    quote = data.index(b'"', data.index(b"\n", put.at) + 3)  # a quote of its metadata's JSON
    data[quote] = ord("'")
    Path(store.catalog.log_path).write_bytes(bytes(data))
    writer = reopened(store)
    assert writer.read(take(writer, summary="after")).seq == int(str(put.meta["seq"])) + 1


def test_damage_found_with_a_lost_snapshot_is_kept_and_told_once(tmp_path: Path) -> None:
    """Found in review: with index.json lost too, the writer settled through the snapshot's repair
    and neither kept the damaged log nor said so; the process then reported the damage again in
    the new log."""
    store = open_store(tmp_path)
    for i in range(4):
        take(store, summary=f"c{i}")
    store.flush()
    store.rebuild_index()
    store.flush()
    names = [take(store, summary=f"d{i}") for i in range(4)]
    store.flush()
    data = bytearray(log_bytes(store))
    data[frames(store)[1].end - 10] ^= 1
    Path(store.catalog.log_path).write_bytes(bytes(data))
    os.unlink(store.catalog.index_path)
    writer = reopened(store)
    take(writer)
    events = [e["event"] for e in writer.agent.ops.read()[0]]
    assert events.count("checkpoint_log_frame_damaged") == 1 and events.count("checkpoint_index_rebuilt") == 1
    assert [n for n in os.listdir(store.dir) if n.startswith("index.log.corrupt-")]
    assert writer.latest()[1] == [] and set(names) <= {e.name for e in writer.entries()}


@pytest.mark.parametrize("field", ["at-sign", "length", "seed", "hash", "seed-not-hex", "newline", "length-past-end"])
def test_a_record_whose_head_line_is_damaged_is_read_whole(tmp_path: Path, field: str) -> None:
    """Found in review: one flipped byte in a record's head line (its length, seed, hash or
    framing) ended the log as a torn tail does. Its payload is whole, and the next record's seed
    is its hash: the record is read, and so is everything after it; the next writer settles the
    log (writing the record's file from the bytes it read) and says so."""
    store = open_store(tmp_path)
    names = [take(store, summary=f"c{i}") for i in range(5)]
    store.flush()
    originals = {n: Path(store.dir, n).read_bytes() for n in names}
    damaged = frames(store)[3 if field == "length-past-end" else 1]
    data = bytearray(log_bytes(store))
    head = bytes(data[damaged.at : data.index(b"\n", damaged.at)])
    length, seed, _digest = head[1:].split(b" ")
    where = {
        "at-sign": 0,
        "length": 1 + len(length) - 1,
        "seed": 1 + len(length) + 1 + 3,
        "hash": 1 + len(length) + 1 + len(seed) + 1 + 5,
        "seed-not-hex": 1 + len(length) + 1 + 3,
        "newline": len(head),
        "length-past-end": 1,
    }[field]
    replaced = {"at-sign": "Z", "seed-not-hex": "s", "newline": "J", "length-past-end": "9"}.get(field)
    data[damaged.at + where] = ord(replaced or ("7" if data[damaged.at + where] != ord("7") else "8"))
    if field == "length-past-end":
        assert damaged.at + int(bytes(data[damaged.at + 1 : damaged.at + 1 + len(length)])) > len(data)
    Path(store.catalog.log_path).write_bytes(bytes(data))
    for n in (names[1], names[3]):
        os.unlink(Path(store.dir, n))  # only the log holds them

    reader = reopened(store)
    assert [e.name for e in reader.entries()][::-1] == names
    assert reader.read(names[1]).summary == "c1" and reader.read(names[3]).summary == "c3"
    writer = reopened(store)
    assert writer.read(take(writer, summary="after")).seq == 6
    writer.flush()
    assert {n: Path(store.dir, n).read_bytes() for n in names} == originals
    assert [e["event"] for e in writer.agent.ops.read()[0]].count("checkpoint_log_frame_damaged") == 1


def test_a_reader_looks_again_for_what_follows_a_broken_last_record(tmp_path: Path) -> None:
    """Found in review: a reader that found no record after a broken last one never looked
    again, though another writer (whose view was past it) wrote after it since; its own next
    write then went over them."""
    writer = open_store(tmp_path, size=3000)
    names = [take(writer, summary=f"c{i}") for i in range(4)]
    writer.flush()
    last = frames(writer)[-1]
    data = bytearray(log_bytes(writer))
    digit = data.index(b"\n", last.at) - 3  # one digit of its hash field
    data[digit] = ord("7") if data[digit] != ord("7") else ord("8")
    Path(writer.catalog.log_path).write_bytes(bytes(data))
    reader = reopened(writer)
    assert len(reader.entries()) == 4
    more = [take(writer, summary=f"after{i}") for i in range(3)]  # written after the broken record
    writer.flush()
    for name in more:
        os.unlink(Path(writer.dir, name))  # only the log holds them
    take(reader, summary="the reader's process writes")  # a writer looks again at once
    assert {e.name for e in reopened(writer).entries()} >= set(names + more)
