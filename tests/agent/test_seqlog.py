"""The sequenced JSON-lines log behind ops.jsonl: seq, torn tails, corrupt lines, rotation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phoenix_protocol.agent._ops import OpsLog
from phoenix_protocol.agent._seqlog import SeqLog
from phoenix_protocol.core._clock import ManualClock


def test_seq_is_monotonic_and_survives_reopening(tmp_path: Path) -> None:
    log = SeqLog(str(tmp_path / "log.jsonl"))
    assert [log.append({"n": i}) for i in range(3)] == [1, 2, 3]
    again = SeqLog(str(tmp_path / "log.jsonl"))
    assert again.append({"n": 3}) == 4
    records, problems = again.read()
    assert [r["seq"] for r in records] == [1, 2, 3, 4] and not problems
    assert list(records[0]) == ["seq", "n"]


def test_torn_tail_is_skipped_then_repaired_without_reusing_an_acknowledged_seq(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = SeqLog(str(path))
    log.append({"n": 1})
    with path.open("ab") as fh:
        fh.write(b'{"seq":2,"n":')
    records, problems = log.read()
    assert len(records) == 1 and problems[0].kind == "torn-tail" and "log.jsonl" in str(problems[0])
    assert log.append({"n": 2}) == 2
    records, problems = log.read()
    assert [r["n"] for r in records] == [1, 2] and not problems
    assert log.repaired_bytes == len(b'{"seq":2,"n":')


def test_a_corrupt_middle_line_is_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = SeqLog(str(path))
    log.append({"n": 1})
    with path.open("ab") as fh:
        fh.write(b"garbage\n")
    log.append({"n": 2})
    records, problems = log.read()
    assert [r["seq"] for r in records] == [1, 2]
    assert problems[0].kind == "corrupt-line" and problems[0].line == 2


def test_last_seq_falls_back_when_the_newest_line_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = SeqLog(str(path))
    log.append({"n": 1})
    log.append({"n": 2})
    with path.open("ab") as fh:
        fh.write(b"not json\n")
    assert log.append({"n": 3}) == 3


def test_rotation_keeps_seq_and_readers_read_across_files(tmp_path: Path) -> None:
    path = tmp_path / "ops.jsonl"
    log = SeqLog(str(path), max_bytes=4096, keep=3)
    for i in range(400):
        log.append({"event": "e", "pad": "x" * 40, "i": i})
    files = log.files()
    assert len(files) == 4 and files[-1] == str(path)
    records, problems = log.read()
    seqs = [r["seq"] for r in records]
    assert not problems and seqs == list(range(seqs[0], 401))
    assert seqs[0] > 1  # the oldest rotation was dropped
    tail, _ = log.tail(150)
    assert [r["seq"] for r in tail] == list(range(251, 401))


def test_rotated_empty_current_file_still_continues_seq(tmp_path: Path) -> None:
    path = tmp_path / "ops.jsonl"
    log = SeqLog(str(path), max_bytes=4096, keep=2)
    while len(log.files()) < 2:
        log.append({"pad": "y" * 100})
    last = log.last_seq()
    path.rename(str(path) + ".tmpmove")
    Path(str(path) + ".tmpmove").rename(str(path) + ".1")
    assert log.append({"after": True}) == last + 1


def test_ops_entries_have_the_seed_fields(tmp_path: Path) -> None:
    ops = OpsLog(str(tmp_path / "ops.jsonl"), clock=ManualClock())
    ops.record("session_start", "ok", {"source": "startup"}, trusted=True)
    ops.record("task_started")
    records, _ = ops.read()
    assert records[0] == {
        "seq": 1,
        "ts": "2026-01-01T00:00:00.000Z",
        "event": "session_start",
        "status": "ok",
        "meta": {"source": "startup"},
    }
    assert "meta" not in records[1]


def test_since_reads_backwards_and_agrees_with_read(tmp_path: Path) -> None:
    """``since`` (what the PostgreSQL store's sync passes on) returns what ``read(since_seq=)``
    returns, across rotations, with a torn tail and an unreadable line, for any block size."""
    path = tmp_path / "log.jsonl"
    log = SeqLog(str(path), max_bytes=600, keep=3)
    for i in range(40):
        log.append({"n": i, "text": "é" * (i % 7)})
    rotated = f"{path}.1"
    with open(rotated, "r+b") as fh:  # damage one line in the middle of a rotated file
        data = fh.read()
        cut = data.index(b"\n", len(data) // 2) + 1
        fh.seek(cut)
        fh.write(b"#")
    with path.open("ab") as fh:
        fh.write(b'{"seq": 41, "n": ')  # a torn tail
    expected_all, problems = log.read()
    assert problems and all(r["seq"] <= 40 for r in expected_all)
    for since in (0, 1, 17, 25, 39, 40, 99):
        expected = [r for r in expected_all if r["seq"] > since]
        for block in (7, 64, 65536):
            got: list[dict[str, Any]] = []
            for p in reversed(log.files()):
                chunk = [r for r in SeqLog._backwards(p, block) if r is not None]
                got = [r for r in reversed(chunk) if r["seq"] > since] + got
            assert got == expected, (since, block)
        assert log.since(since) == expected, since


def test_tail_reads_backwards_and_names_problems_exactly(tmp_path: Path) -> None:
    """``tail`` reads from the end; a damaged line among what it reads sends it to the exact scan,
    which names the problem with its file and line, as before."""
    path = tmp_path / "log.jsonl"
    log = SeqLog(str(path), max_bytes=500, keep=4)
    for i in range(30):
        log.append({"n": i})
    records, problems = log.tail(12)
    assert [r["n"] for r in records] == list(range(18, 30)) and problems == []
    assert [r["n"] for r in log.tail(100)[0]] == [r["n"] for r in log.read()[0]]
    with path.open("ab") as fh:
        fh.write(b'{"seq": 31, "n"')
    records, problems = log.tail(3)
    assert [r["n"] for r in records] == [27, 28, 29]
    assert [(p.kind, p.path) for p in problems] == [("torn-tail", str(path))]
    for block in (5, 17, 4096):  # any block size: the file's records, newest first
        for file in log.files():
            forward = [r for r, _problem in log._read_file(file) if r is not None]
            assert [r for r in SeqLog._backwards(file, block) if r is not None] == forward[::-1]
