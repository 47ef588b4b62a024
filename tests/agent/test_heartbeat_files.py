"""The files a teammate's Write/Edit calls changed (``_heartbeats.note_files``, the PostToolUse
hook) and their take into the task's checkpoint (``take_files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phoenix_protocol.agent._heartbeats import MAX_FILES_BYTES, note_files, take_files


def test_a_noted_files_file_larger_than_one_read_is_taken_whole(tmp_path: Path) -> None:
    # Thousands of edits between two takes: the file outgrows one read (it used to be refused).
    paths = [f"src/pkg/module_{i:05d}/{'x' * 60}.py" for i in range(5000)]
    for path in paths:
        note_files(str(tmp_path), "alice", [path])
    note_files(str(tmp_path), "alice", paths[:10])  # noted again: taken once
    assert (tmp_path / "alice.files").stat().st_size > MAX_FILES_BYTES
    kept: list[list[str]] = []
    assert take_files(str(tmp_path), "alice", kept.append) == paths
    assert kept == [paths]
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    assert take_files(str(tmp_path), "alice", kept.append) == []


def test_a_take_that_fails_leaves_the_files_noted(tmp_path: Path) -> None:
    note_files(str(tmp_path), "bob", ["a.py", "b.py"])

    def fail(_paths: list[str]) -> None:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        take_files(str(tmp_path), "bob", fail)
    assert take_files(str(tmp_path), "bob", lambda _p: None) == ["a.py", "b.py"]
