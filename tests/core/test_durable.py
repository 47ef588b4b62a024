"""Durable I/O under injected faults, and the primitives' unit behaviour.

Faults are injected by replacing ``os.write``, ``os.fsync``, ``os.fdatasync`` and ``os.replace`` (the functions
``phoenix_protocol.core._durable`` calls) with versions that raise ``ENOSPC`` or ``EIO`` for the file
under test. Whatever fails, the caller gets a ``StorageError`` naming the file, the previous
content is intact and no temporary file is left behind.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core import _durable
from phoenix_protocol.core._durable import (
    FileLock,
    InPlaceFile,
    atomic_write,
    durable_append,
    ensure_dir,
    fsync_files,
    read_last_line,
    repair_tail,
)
from phoenix_protocol.core._errors import LockTimeoutError, StorageError
from phoenix_protocol.core._jsonio import dumps_line
from phoenix_protocol.integrations._hooks import run as run_hook
from phoenix_protocol.services._agent import Agent

# -- fault injection ------------------------------------------------------------------------


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextmanager
def fault(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    code: int,
    *,
    match: str = "",
    skip: int = 0,
    partial: bool = False,
) -> Iterator[list[str]]:
    """Make ``os.<name>`` raise ``OSError(code)`` for targets whose path contains ``match``,
    after letting ``skip`` matching calls through. ``partial`` (``write`` only): the first
    failing call writes half of its data and returns a short count; the next one raises.
    Yields the list of targets that were failed."""
    real: Callable[..., Any] = getattr(os, name)
    failed: list[str] = []
    seen = [0]
    half_written = [False]

    def target(args: tuple[Any, ...]) -> str:
        if name in ("write", "fsync", "fdatasync"):
            return _fd_path(args[0])
        return " -> ".join(str(a) for a in args[:2])

    def fake(*args: Any, **kwargs: Any) -> Any:
        where = target(args)
        if match in where:
            seen[0] += 1
            if seen[0] > skip:
                if partial and not half_written[0]:
                    half_written[0] = True
                    data = bytes(args[1])
                    return real(args[0], data[: max(1, len(data) // 2)])
                failed.append(where)
                raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, name, fake)
        yield failed


def tmp_files(directory: str | Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))


def check_error(exc: StorageError, path: str, code: int) -> None:
    message = str(exc)
    assert path in message, message
    assert exc.path == path
    assert isinstance(exc.__cause__, OSError) and exc.__cause__.errno == code
    assert os.strerror(code) in message
    if code == errno.ENOSPC:
        assert "disk space" in message


FAULTS = [
    pytest.param("write", errno.ENOSPC, False, id="write-ENOSPC"),
    pytest.param("write", errno.ENOSPC, True, id="short-write-then-ENOSPC"),
    pytest.param("write", errno.EIO, False, id="write-EIO"),
    pytest.param("fsync", errno.ENOSPC, False, id="fsync-ENOSPC"),
    pytest.param("fsync", errno.EIO, False, id="fsync-EIO"),
    pytest.param("replace", errno.ENOSPC, False, id="replace-ENOSPC"),
    pytest.param("replace", errno.EIO, False, id="replace-EIO"),
]


@pytest.mark.parametrize(("name", "code", "partial"), FAULTS)
def test_atomic_write_fault_keeps_the_old_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, code: int, partial: bool
) -> None:
    path = str(tmp_path / "file.json")
    atomic_write(path, b"old content\n")
    with (
        fault(monkeypatch, name, code, match="file.json", partial=partial) as failed,
        pytest.raises(StorageError) as info,
    ):
        atomic_write(path, b"new content that is longer than the old one\n" * 100)
    assert failed, "the fault was not hit"
    check_error(info.value, path, code)
    assert Path(path).read_bytes() == b"old content\n"
    assert tmp_files(tmp_path) == []
    # And the next write, with the disk healthy again, works.
    atomic_write(path, b"later\n")
    assert Path(path).read_bytes() == b"later\n"
    assert tmp_files(tmp_path) == []


@pytest.mark.parametrize("write", [atomic_write, _durable.atomic_create])
def test_temp_files_name_their_writers_pid_and_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, write: Callable[[str, bytes], None]
) -> None:
    """``phx doctor`` judges a temporary file by the pid in its name, which means something only
    on the writer's host: the name carries both."""
    seen: list[str] = []
    real_open = os.open

    def watching_open(path: str, flags: int, mode: int = 0o777) -> int:
        seen.append(os.path.basename(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", watching_open)
    write(str(tmp_path / "state.json"), b"{}")
    [temp] = [name for name in seen if name.endswith(".tmp")]
    prefix, pid, counter, tag, suffix = temp.rsplit(".", 4)
    assert (prefix, pid, suffix) == (".state.json", str(os.getpid()), "tmp") and counter.isdecimal()
    assert tag == _durable.host_tag() == _durable.host_tag(os.uname().nodename)
    assert len(tag) == 9 and tag.startswith("h") and int(tag[1:], 16) >= 0
    assert _durable.host_tag("build-7.example.org") != _durable.host_tag("build-8.example.org")
    assert _durable.temp_name("x") != _durable.temp_name("x")  # unique within the process
    assert _durable.temp_writer(temp) == (os.getpid(), tag)


@pytest.mark.parametrize(
    ("name", "writer"),
    [
        (".state.json.4242.7.h0123abcd.tmp", (4242, "h0123abcd")),
        (".a.b.c.4242.7.hffffffff.tmp", (4242, "hffffffff")),
        (".state.json.4242.7.tmp", (4242, None)),  # before host tags: this host's
        (".x.12345678.4242.7.tmp", (4242, None)),
        (".state.json.4242.7.h0123ABCD.tmp", None),  # not a tag, and not a pid either
        (".state.json.4242.h0123abcd.tmp", None),
        (".state.json.tmp", None),
        ("state.json.4242.7.tmp", None),
        (".state.json.4242.7.h0123abcd", None),
        (".state.json.-1.7.tmp", None),
        (".state.json.\u0664.7.tmp".encode().decode("unicode_escape"), None),  # a non-ASCII digit
    ],
)
def test_temp_writer_reads_what_temp_name_wrote(name: str, writer: tuple[int, str | None] | None) -> None:
    assert _durable.temp_writer(name) == writer


def test_atomic_write_directory_fsync_fault_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The rename is done when the directory fsync fails: the file is the old or the new one,
    whole, the error says the write could not be confirmed, and no temp file is left."""
    path = str(tmp_path / "file.json")
    atomic_write(path, b"old\n")
    with (
        fault(monkeypatch, "fsync", errno.EIO, match=str(tmp_path), skip=1) as failed,
        pytest.raises(StorageError) as info,
    ):
        atomic_write(path, b"new\n")
    assert failed == [str(tmp_path)]
    check_error(info.value, path, errno.EIO)
    assert "confirm" in str(info.value)
    assert Path(path).read_bytes() in (b"old\n", b"new\n")
    assert tmp_files(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "code"),
    [("write", errno.ENOSPC), ("write", errno.EIO), ("fdatasync", errno.EIO), ("fdatasync", errno.ENOSPC)],
)
def test_durable_append_fault_raises_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, code: int
) -> None:
    path = str(tmp_path / "log.jsonl")
    durable_append(path, b"one\n")
    with fault(monkeypatch, name, code, match="log.jsonl") as failed, pytest.raises(StorageError) as info:
        durable_append(path, b"two\n")
    assert failed
    check_error(info.value, path, code)
    data = Path(path).read_bytes()
    assert data.startswith(b"one\n")
    if name == "write":
        assert data == b"one\n"
    assert tmp_files(tmp_path) == []


def test_short_append_then_enospc_is_rolled_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A write that gets half a line out and then fails leaves no fragment: the failed append
    cuts the log back to where it was (a torn tail only remains when the writer is killed)."""
    agent = Agent.open("full", home=str(tmp_path / "home"))
    agent.ensure()
    assert agent.ops.record("first", "ok") == 1
    before = Path(agent.ops.path).read_bytes()
    with (
        fault(monkeypatch, "write", errno.ENOSPC, match="ops.jsonl", partial=True),
        pytest.raises(StorageError, match="disk space"),
    ):
        agent.ops.record("second", "ok", {"blob": "z" * 300})
    assert Path(agent.ops.path).read_bytes() == before
    records, problems = agent.ops.read()
    assert [r["seq"] for r in records] == [1] and problems == []
    assert agent.ops.record("third", "ok") == 2, "the failed append's seq was never given out"
    records, problems = agent.ops.read()
    assert problems == []
    assert [(r["seq"], r["event"]) for r in records] == [(1, "first"), (2, "third")]


@pytest.mark.parametrize(("name", "code", "partial"), FAULTS)
def test_state_store_fault_keeps_the_previous_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, code: int, partial: bool
) -> None:
    agent = Agent.open("store", home=str(tmp_path / "home"))
    agent.state.set_status("working", "the task before the fault")
    before = Path(agent.state.path).read_bytes()
    with (
        fault(monkeypatch, name, code, match="state.json", partial=partial) as failed,
        pytest.raises(StorageError) as info,
    ):
        agent.state.set_status("error", "this must not land")
    assert failed
    check_error(info.value, agent.state.path, code)
    assert Path(agent.state.path).read_bytes() == before
    state = agent.state.read()
    assert (state.status, state.current_task) == ("working", "the task before the fault")
    assert tmp_files(agent.dir) == []
    records, problems = agent.ops.read()
    assert problems == [] and [r["seq"] for r in records] == list(range(1, len(records) + 1))
    # Healthy again: the next change lands.
    agent.state.set_status("idle", "recovered")
    assert agent.state.read().last_output == "recovered"


@pytest.mark.parametrize(("name", "code"), [("write", errno.ENOSPC), ("fdatasync", errno.EIO)])
def test_state_change_whose_ops_append_fails_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, code: int
) -> None:
    agent = Agent.open("store", home=str(tmp_path / "home"))
    agent.state.set_status("working", "the task before the fault")
    before = Path(agent.state.path).read_bytes()
    with fault(monkeypatch, name, code, match="ops.jsonl"), pytest.raises(StorageError) as info:
        agent.state.set_status("idle", "this must not land")
    check_error(info.value, agent.ops.path, code)
    assert Path(agent.state.path).read_bytes() == before
    assert agent.state.read().status == "working"
    assert tmp_files(agent.dir) == []


def test_hook_on_a_full_disk_exits_0_and_keeps_the_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PHOENIX_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    agent = Agent.open(home=str(home))
    agent.state.set_status("working", "task")
    before = Path(agent.state.path).read_bytes()
    payload = dumps_line(
        {"session_id": "s1", "tool_name": "Bash", "tool_input": {"command": "ls"}, "cwd": str(tmp_path)}
    ).encode()
    with fault(monkeypatch, "write", errno.ENOSPC, match="state.json"):
        code, out, err = run_hook(["post-tool-use"], payload)
    assert code == 0 and "No space left on device" in json.loads(out)["systemMessage"]  # the user's line
    assert "disk space" in err and "Traceback" not in err and err.count("\n") == 1
    assert Path(agent.state.path).read_bytes() == before
    assert tmp_files(agent.dir) == []


# -- unit behaviour -------------------------------------------------------------------------


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o002, 0o022, 0o077])
def test_atomic_write_and_durable_append_create_0600_files(tmp_path: Path, mask: int) -> None:
    with umask(mask):
        atomic_write(str(tmp_path / "a"), b"x")
        durable_append(str(tmp_path / "b"), b"y\n")
        existing = tmp_path / "c"
        existing.write_bytes(b"old")
        existing.chmod(0o644)
        atomic_write(str(existing), b"new")  # a replacement gets the temp file's mode
    assert mode(tmp_path / "a") == 0o600
    assert mode(tmp_path / "b") == 0o600
    assert mode(existing) == 0o600 and existing.read_bytes() == b"new"


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o277])
def test_ensure_dir_creates_0700_at_every_level(tmp_path: Path, mask: int) -> None:
    outer = tmp_path / "kept"
    outer.mkdir()
    outer.chmod(0o755)
    target = outer / "one" / "two" / "three"
    with umask(mask):
        ensure_dir(str(target))
        ensure_dir(str(target))  # idempotent
    for level in (outer / "one", outer / "one" / "two", target):
        assert level.is_dir() and mode(level) == 0o700, oct(mode(level))
    assert mode(outer) == 0o755, "an existing directory is left as it is"


def test_ensure_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(StorageError, match="f"):
        ensure_dir(str(tmp_path / "f" / "sub"))


def test_durable_append_appends_whole_lines(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    lines = [b"first\n", b"second line\n", b"x" * 100_000 + b"\n"]
    for line in lines:
        durable_append(path, line)
    assert Path(path).read_bytes() == b"".join(lines)


@pytest.mark.parametrize(
    ("content", "removed", "left"),
    [
        (b"a\nb\nfrag", 4, b"a\nb\n"),
        (b"a\nb\n", 0, b"a\nb\n"),
        (b"only a fragment", 15, b""),
        (b"", 0, b""),
        (b"a\n" + b"y" * 10_000, 10_000, b"a\n"),  # fragment longer than one read block
        (b"z" * 9_000 + b"\n" + b"w" * 5_000, 5_000, b"z" * 9_000 + b"\n"),
    ],
)
def test_repair_tail_cuts_only_the_torn_fragment(tmp_path: Path, content: bytes, removed: int, left: bytes) -> None:
    path = tmp_path / "log"
    path.write_bytes(content)
    assert repair_tail(str(path)) == removed
    assert path.read_bytes() == left
    assert repair_tail(str(path)) == 0


def test_repair_tail_of_a_missing_file_is_nothing(tmp_path: Path) -> None:
    assert repair_tail(str(tmp_path / "missing")) == 0
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    ("content", "last"),
    [
        (b"a\nb\nfrag", b"b"),
        (b"a\nb\n", b"b"),
        (b"a\n", b"a"),
        (b"\n", b""),
        (b"fragment only", None),
        (b"", None),
        (b"first\n" + b"L" * 20_000 + b"\n" + b"t" * 30_000, b"L" * 20_000),  # lines longer than a block
        (b"M" * 50_000 + b"\n", b"M" * 50_000),
    ],
)
def test_read_last_line_ignores_a_torn_tail(tmp_path: Path, content: bytes, last: bytes | None) -> None:
    path = tmp_path / "log"
    path.write_bytes(content)
    assert read_last_line(str(path)) == last


def test_read_last_line_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert read_last_line(str(tmp_path / "missing")) is None


def _held_elsewhere(lock_path: str) -> bool:
    """Whether an exclusive flock on ``lock_path`` is held (probed through a separate open file
    description, which flock treats as a different owner even within this process)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock, if it got one
    return False


def test_file_lock_is_reentrant_within_a_process(tmp_path: Path) -> None:
    target = str(tmp_path / "state.json")
    outer, inner = FileLock(target, timeout=0.2), FileLock(target, timeout=0.2)
    assert not _held_elsewhere(outer.lock_path)
    with outer:
        with inner:  # would time out if the lock were not re-entrant
            assert _held_elsewhere(outer.lock_path)
        assert _held_elsewhere(outer.lock_path), "the inner release must not free the outer hold"
        with FileLock(target, timeout=0.2):
            pass
        assert _held_elsewhere(outer.lock_path)
    assert not _held_elsewhere(outer.lock_path)
    assert target + ".lock" not in _durable._held
    assert os.path.exists(outer.lock_path), "lock files are never deleted"


def test_file_lock_excludes_another_process(tmp_path: Path) -> None:
    target = str(tmp_path / "state.json")
    code = (
        "import sys\n"
        "from phoenix_protocol.core._durable import FileLock\n"
        "from phoenix_protocol.core._errors import LockTimeoutError\n"
        "try:\n"
        "    FileLock(sys.argv[1], timeout=0.1).acquire()\n"
        "except LockTimeoutError as exc:\n"
        "    print(exc)\n"
        "    raise SystemExit(3)\n"
    )
    with FileLock(target):
        proc = subprocess.run([sys.executable, "-P", "-c", code, target], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stderr
    assert target in proc.stdout
    proc = subprocess.run([sys.executable, "-P", "-c", code, target], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lock_timeout_error_is_a_storage_error_naming_the_file(tmp_path: Path) -> None:
    target = str(tmp_path / "x.json")
    fd = os.open(target + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(LockTimeoutError) as info:
            FileLock(target, timeout=0.05).acquire()
    finally:
        os.close(fd)
    assert isinstance(info.value, StorageError)
    assert info.value.path == target and target in str(info.value)
    assert target + ".lock" not in _durable._held


# -- InPlaceFile, fsync_files, lock descriptors --------------------------------------------------


def test_in_place_file_overwrites_at_offsets_and_follows_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "log"
    atomic_write(str(path), b"\0" * 64)
    log = InPlaceFile(str(path))
    seen: list[bytes] = []
    log.write([b"abc", memoryview(b"def")], 10, meanwhile=lambda: seen.append(path.read_bytes()[10:16]))
    assert seen == [b"abcdef"]  # written before the flush, the bookkeeping sees it
    assert path.read_bytes()[8:18] == b"\0\0abcdef\0\0" and path.stat().st_size == 64  # in place
    assert log.read(10, 6) == b"abcdef" and log.read(60, 100) == b"\0" * 4
    old_ino = path.stat().st_ino
    atomic_write(str(path), b"new file")  # replaced by another inode
    assert log.read(0, 8, ino=path.stat().st_ino) == b"new file"
    assert path.stat().st_ino != old_ino
    log.close()


@pytest.mark.parametrize("proc", [True, False], ids=["proc-fd", "stat"])
def test_in_place_file_identity_follows_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: bool) -> None:
    """``identity()`` names the file now at the path: the same inode while it stays, a new one
    once it is replaced (renamed over, or deleted and written again), ``None`` while there is
    none; with ``/proc/self/fd`` (checked without a ``stat``) or without it (``stat``)."""
    if not proc:

        def no_proc(path: str) -> str:
            raise OSError(errno.ENOENT, "no /proc here")

        monkeypatch.setattr(os, "readlink", no_proc)
    elif not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd on this system")
    path = tmp_path / "log"
    log = InPlaceFile(str(path))
    assert log.identity() is None
    atomic_write(str(path), b"first")
    first = log.identity()
    assert first == path.stat().st_ino and log.identity() == first
    atomic_write(str(path), b"second")  # renamed over
    second = log.identity()
    assert second == path.stat().st_ino != first
    assert log.read(0, 6, ino=second) == b"second"
    path.unlink()
    assert log.identity() is None
    path.write_bytes(b"third")
    third = log.identity()
    assert third == path.stat().st_ino and log.read(0, 5, ino=third) == b"third"
    log.close()


def test_in_place_file_identity_does_not_stat_an_unchanged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``/proc/self/fd`` shows the descriptor, an unchanged file is recognised without a
    ``stat`` (which on Linux makes the next write's ``fdatasync`` commit the journal)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd on this system")
    path = tmp_path / "log"
    atomic_write(str(path), b"\0" * 64)
    log = InPlaceFile(str(path))
    ino = log.identity()
    stats: list[object] = []
    real_stat, real_fstat = os.stat, os.fstat

    def stat(*args: Any, **kwargs: Any) -> os.stat_result:
        stats.append(args)
        return real_stat(*args, **kwargs)

    def fstat(fd: int) -> os.stat_result:
        stats.append(fd)
        return real_fstat(fd)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "fstat", fstat)
    for _ in range(5):
        assert log.identity() == ino
        log.write([b"x"], 3)
    assert stats == []
    log.close()


def test_in_place_file_write_fault_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "log"
    atomic_write(str(path), b"\0" * 16)
    log = InPlaceFile(str(path))

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_durable, "_datasync", no_space)
    with pytest.raises(StorageError, match=r"could not write .*log: No space left on device\. Free some disk space"):
        log.write([b"x"], 0)


def test_fsync_files_flushes_each_and_reports_the_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(tmp_path / f"f{i}") for i in range(300)]  # more than one batch of descriptors
    for p in paths:
        atomic_write(p, b"x", durable=False)
    synced: list[int] = []
    real = _durable._datasync

    def counted(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(_durable, "_datasync", counted)
    assert fsync_files([*paths, str(tmp_path / "gone")]) == [str(tmp_path / "gone")]
    assert len(synced) == 300


def test_a_lock_file_deleted_by_hand_is_opened_again(tmp_path: Path) -> None:
    """The descriptor kept between two locks is not reused once its file is gone: another process
    that creates the lock file anew must exclude this one."""
    target = str(tmp_path / "state.json")
    with FileLock(target):
        pass
    os.unlink(target + ".lock")
    with FileLock(target):
        assert os.path.exists(target + ".lock")
        probe = subprocess.run(
            [sys.executable, "-c", LOCK_PROBE, target + ".lock"], capture_output=True, text=True, check=True
        )
        assert probe.stdout.strip() == "busy"  # the new file is the one this process holds


LOCK_PROBE = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("busy")
"""


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 12_000, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7])
@pytest.mark.parametrize("offset", [0, 1, 5000])
def test_read_range_reads_to_the_end_whatever_the_size(tmp_path: Path, size: int, offset: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert _durable.read_range(str(path), offset) == data[offset:]
    assert _durable.read_range(str(path), offset, 10) == data[offset : offset + 10]
    if offset == 0:
        assert _durable.read_bytes(str(path)) == data
    assert _durable.read_bytes(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("seen", [0, 100, 12_000])
def test_read_bytes_reads_what_was_appended_after_it_looked_at_the_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen: int
) -> None:
    """The size taken from ``fstat`` is a hint: a file that grew since is still read whole."""
    data = os.urandom(12_000) + os.urandom(2 << 20)
    path = tmp_path / "growing"
    path.write_bytes(data)
    real_fstat = os.fstat

    class Shrunk:
        def __init__(self, st: os.stat_result) -> None:
            self.st_size = min(seen, st.st_size)
            self.st_mode, self.st_uid = st.st_mode, st.st_uid  # still a regular file of this user

    monkeypatch.setattr(os, "fstat", lambda fd: Shrunk(real_fstat(fd)))
    assert _durable.read_bytes(str(path)) == data
