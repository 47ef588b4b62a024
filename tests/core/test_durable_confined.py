"""Files below a registered root (a home, the runtime directory) are regular files of this user:
each primitive of ``_durable`` refuses a FIFO, a device, a directory, a symbolic link (at the
file or at a directory on the way) and another user's file, at once and without following it,
and a bounded read refuses a file larger than its bound before reading it. Real FIFOs, links,
devices and sparse files of a gigabyte."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core import _durable
from phoenix_protocol.core._durable import (
    FileLock,
    atomic_create,
    atomic_write,
    check_entry,
    confine,
    durable_append,
    ensure_dir,
    fsync_file,
    move_aside,
    open_regular,
    read_bytes,
    read_last_line,
    read_range,
    repair_tail,
    truncate_file,
)
from phoenix_protocol.core._errors import UnsafeFileError

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to another user, mknod")
OTHER_UID = 65534  # nobody


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A registered root with an agent directory in it (as ``Home`` registers a home)."""
    home = tmp_path / "home"
    (home / "agents" / "a").mkdir(parents=True)
    saved = _durable._roots
    confine(str(home))
    yield home
    _durable._roots = saved


def bounded(work: Callable[[], Any], seconds: float = 5.0) -> Any:
    """``work()``, which must return (or raise) within ``seconds``: a FIFO must never block it."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for {seconds} s (left hanging)"
    assert time.monotonic() - started < seconds
    if "error" in result:
        raise result["error"]
    return result.get("value")


def refused(work: Callable[[], Any], kind: str) -> UnsafeFileError:
    with pytest.raises(UnsafeFileError) as caught:
        bounded(work)
    assert caught.value.kind == kind, caught.value
    assert "phx doctor" in str(caught.value)
    return caught.value


EVERY_USE: dict[str, Callable[[str], Any]] = {
    "read_bytes": read_bytes,
    "read_range": lambda p: read_range(p, 0, 10),
    "read_last_line": read_last_line,
    "repair_tail": repair_tail,
    "durable_append": lambda p: durable_append(p, b"line\n"),
    "atomic_write": lambda p: atomic_write(p, b"{}"),
    "lock": lambda p: FileLock(p[: -len(".lock")], timeout=0.5).acquire(),
    "fsync_file": fsync_file,
    "truncate_file": lambda p: truncate_file(p, 0),
    "open_regular": lambda p: os.close(open_regular(p, os.O_RDWR | os.O_CREAT)),
}


@pytest.mark.parametrize("use", list(EVERY_USE))
def test_a_fifo_is_refused_at_once_by_every_primitive(root: Path, use: str) -> None:
    path = root / "agents" / "a" / ("state.json.lock" if use == "lock" else "state.json")
    os.mkfifo(path, 0o600)
    error = refused(lambda: EVERY_USE[use](str(path)), "fifo")
    assert "named pipe" in str(error) and error.path == str(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # left as it was


@pytest.mark.parametrize("use", list(EVERY_USE))
def test_a_symbolic_link_is_never_followed(root: Path, tmp_path: Path, use: str) -> None:
    """Appends, writes, lock files and reads through a link would reach a file outside the
    home: refused, the file behind it untouched (and a missing one not created)."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b'{"status": "idle"}\n')
    path = root / "agents" / "a" / ("state.json.lock" if use == "lock" else "state.json")
    path.symlink_to(outside)
    error = refused(lambda: EVERY_USE[use](str(path)), "symlink")
    assert f"to {outside}" in str(error)
    assert outside.read_bytes() == b'{"status": "idle"}\n' and path.is_symlink()
    missing = tmp_path / "not-there"
    path.unlink()
    path.symlink_to(missing)  # dangling: O_CREAT through it would create the file outside
    refused(lambda: EVERY_USE[use](str(path)), "symlink")
    assert not missing.exists()


@pytest.mark.parametrize("use", list(EVERY_USE))
def test_a_directory_in_place_of_a_file_is_refused(root: Path, use: str) -> None:
    path = root / "agents" / "a" / ("state.json.lock" if use == "lock" else "state.json")
    path.mkdir()
    refused(lambda: EVERY_USE[use](str(path)), "directory")
    assert path.is_dir()


@pytest.mark.parametrize("use", list(EVERY_USE))
def test_a_linked_directory_on_the_way_is_refused(root: Path, tmp_path: Path, use: str) -> None:
    """``agents/a`` a link to a directory outside the home: nothing is read or written there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "state.json").write_bytes(b"{}\n")
    (elsewhere / "state.json.lock").write_bytes(b"")
    agent = root / "agents" / "a"
    agent.rmdir()
    agent.symlink_to(elsewhere, target_is_directory=True)
    name = "state.json.lock" if use == "lock" else "state.json"
    refused(lambda: EVERY_USE[use](str(agent / name)), "symlink")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["state.json", "state.json.lock"]
    assert (elsewhere / "state.json").read_bytes() == b"{}\n"
    refused(lambda: ensure_dir(str(agent / "checkpoints")), "symlink")
    assert not (elsewhere / "checkpoints").exists()


@ROOT_ONLY
@pytest.mark.parametrize("use", ["read_bytes", "durable_append", "atomic_write", "lock"])
def test_another_users_file_or_directory_is_refused(root: Path, use: str) -> None:
    path = root / "agents" / "a" / ("state.json.lock" if use == "lock" else "state.json")
    path.write_bytes(b"{}")
    os.chown(path, OTHER_UID, OTHER_UID)
    error = refused(lambda: EVERY_USE[use](str(path)), "foreign-owner")
    assert f"uid {OTHER_UID}" in str(error) and path.read_bytes() == b"{}"
    path.unlink()
    os.chown(root / "agents" / "a", OTHER_UID, OTHER_UID)
    refused(lambda: EVERY_USE[use](str(path)), "foreign-owner")


@ROOT_ONLY
def test_a_device_is_refused_and_left_alone(root: Path) -> None:
    path = root / "agents" / "a" / "ops.jsonl"
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: a read would never end
    refused(lambda: read_bytes(str(path)), "device")
    refused(lambda: durable_append(str(path), b"x\n"), "device")
    assert check_entry(str(path)) is not None and stat.S_ISCHR(os.lstat(path).st_mode)


def test_outside_a_root_a_fifo_is_refused_too_but_links_are_followed(tmp_path: Path) -> None:
    """Settings files (``.claude/settings.json``) are often links, and they stay readable; a FIFO
    anywhere is never opened for a read that would block."""
    fifo = tmp_path / "settings.json"
    os.mkfifo(fifo)
    refused(lambda: read_bytes(str(fifo)), "fifo")
    real = tmp_path / "real.json"
    real.write_bytes(b"{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_bytes(str(link)) == b"{}"


def test_a_gigabyte_is_refused_unread_when_the_read_is_bounded(root: Path) -> None:
    """A valid state followed by a gigabyte of NULs (sparse: no disk used)."""
    path = root / "agents" / "a" / "state.json"
    path.write_bytes(b'{"status": "idle"}\n')
    os.truncate(path, 1 << 30)
    started = time.monotonic()
    error = refused(lambda: read_bytes(str(path), limit=8 << 20), "too-large")
    assert time.monotonic() - started < 1.0
    assert "1,073,741,824 bytes" in str(error) and "8,388,608" in str(error)
    assert os.path.getsize(path) == 1 << 30
    assert read_range(str(path), 0, 19, limit=2 << 30) == b'{"status": "idle"}\n'  # within a larger bound
    err = check_entry(str(path), limit=8 << 20)
    assert err is not None and err.kind == "too-large"


def test_a_file_that_grows_past_the_bound_while_read_is_refused(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fstat``'s size is a hint: what is read is counted, and never more than the bound and a byte."""
    path = root / "agents" / "a" / "state.json"
    path.write_bytes(b"x" * 5000)
    real_fstat = os.fstat

    class Earlier:  # the size fstat saw before the file grew
        def __init__(self, st: os.stat_result) -> None:
            self.st_size, self.st_mode, self.st_uid = 100, st.st_mode, st.st_uid

    monkeypatch.setattr(os, "fstat", lambda fd: Earlier(real_fstat(fd)))
    refused(lambda: read_bytes(str(path), limit=1000), "too-large")
    assert read_bytes(str(path), limit=5000) == b"x" * 5000


def test_a_torn_tail_longer_than_the_bound_is_refused_not_cut(root: Path) -> None:
    path = root / "agents" / "a" / "ops.jsonl"
    path.write_bytes(b'{"seq": 1}\n' + b"\0" * (3 << 20))
    refused(lambda: repair_tail(str(path), limit=1 << 20), "too-large")
    refused(lambda: read_last_line(str(path), limit=1 << 20), "too-large")
    assert os.path.getsize(path) == 11 + (3 << 20)  # nothing cut
    assert read_last_line(str(path)) == b'{"seq": 1}'  # unbounded, as before
    assert repair_tail(str(path), limit=4 << 20) == 3 << 20


def test_regular_files_of_the_user_work_as_before(root: Path) -> None:
    path = str(root / "agents" / "a" / "state.json")
    atomic_write(path, b"one\n")
    durable_append(path, b"two\n")
    assert read_bytes(path, limit=8) == b"one\ntwo\n"
    assert read_last_line(path) == b"two"
    with FileLock(path, timeout=1):
        pass
    atomic_create(path + ".new", b"x")
    with pytest.raises(FileExistsError):
        atomic_create(path + ".new", b"y")
    ensure_dir(str(root / "agents" / "b" / "checkpoints"))
    assert stat.S_IMODE(os.stat(root / "agents" / "b").st_mode) == 0o700
    assert check_entry(path) is None and check_entry(path + ".missing") is None


def test_a_dotted_path_is_judged_as_what_it_names(root: Path, tmp_path: Path) -> None:
    """``home/agents/../../x`` is not below the home: the rules of files outside apply to it."""
    (tmp_path / "x").write_bytes(b"out")
    assert read_bytes(str(root / "agents" / ".." / ".." / "x")) == b"out"
    (root / "agents" / "a" / "f").write_bytes(b"in")
    assert read_bytes(str(root / "agents" / "b" / ".." / "a" / "f")) == b"in"


def test_a_runtime_root_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """In a shared /tmp another user may have put a link at ``phoenix-<uid>``: a root registered
    with ``follow=False`` refuses it rather than writing heartbeats where it points."""
    target = tmp_path / "theirs"
    target.mkdir()
    runtime = tmp_path / "phoenix-0"
    runtime.symlink_to(target, target_is_directory=True)
    saved = _durable._roots
    confine(str(runtime), follow=False)
    try:
        refused(lambda: ensure_dir(str(runtime / "digest" / "team")), "symlink")
        refused(lambda: atomic_write(str(runtime / "beat.json"), b"{}"), "symlink")
        assert list(target.iterdir()) == []
        confine(str(runtime))  # registered again, following: the stricter registration stays
        refused(lambda: atomic_write(str(runtime / "beat.json"), b"{}"), "symlink")
    finally:
        _durable._roots = saved


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "file"])
def test_move_aside_renames_the_entry_itself(root: Path, tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "foreign.json"
    outside.write_bytes(b"theirs")
    path = root / "agents" / "a" / "state.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(outside)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"kept")
    else:
        path.write_bytes(b"x" * 10)
    before = os.lstat(path)
    kept = move_aside(str(path), 1_700_000_000_000)
    assert kept == f"{path}.quarantine-20231114T221320.000Z"
    assert not os.path.lexists(path)
    after = os.lstat(kept)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # the very entry
    assert outside.read_bytes() == b"theirs"
    os.mkfifo(path)
    assert move_aside(str(path), 1_700_000_000_000).endswith(".quarantine-20231114T221320.000Z-2")
