"""Checkpoints and sessions of an earlier release come into the database with nothing lost, on
both engines: a home written by 0.1.0 (its files imported on first use, kept aside, re-runnable
after a SIGKILL), and a PostgreSQL database at schema 8 (bodies with their checksum line)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli as main
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store import _db, _schema

DATA = Path(__file__).resolve().parent.parent / "data" / "homes"
EXPECTED = json.loads((DATA / "expected-0.1.0.json").read_text())
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def old_home(tmp_path: Path) -> str:
    with tarfile.open(DATA / "home-0.1.0.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return str(tmp_path / "home")


def phx_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def without_size(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "size"} for row in rows]


def test_every_checkpoint_and_session_of_a_0_1_0_home_comes_back(
    backend: str, old_home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for agent_id, expected in EXPECTED["agents"].items():
        listed = phx_json(capsys, "checkpoint", "list", "--agent", agent_id, "--home", old_home)
        assert without_size(listed["checkpoints"]) == without_size(expected["checkpoints"]["checkpoints"])
        sessions = phx_json(capsys, "sessions", "--agent", agent_id, "--home", old_home)
        assert sessions["sessions"] == expected["sessions"]["sessions"]
        # Imported, verified, and only then kept aside (never deleted).
        agent_dir = os.path.join(old_home, "agents", agent_id)
        assert not os.path.exists(os.path.join(agent_dir, "checkpoints"))
        assert not os.path.exists(os.path.join(agent_dir, "sessions"))
        (kept,) = glob.glob(os.path.join(agent_dir, "checkpoints.migrated-*"))
        assert len(glob.glob(os.path.join(kept, "*.checkpoint"))) == len(expected["checkpoints"]["checkpoints"])
        assert glob.glob(os.path.join(agent_dir, "sessions.migrated-*"))
        # Each one reads, checksum verified; the operation that failed is still known as failed.
        agent = Agent.open(agent_id, home=Home(old_home))
        for row in expected["checkpoints"]["checkpoints"]:
            checkpoint = agent.checkpoints.read(row["name"])
            assert checkpoint.summary == row["label"]
        failed = [r["operation_id"] for r in expected["checkpoints"]["checkpoints"] if r["operation_status"]]
        assert all(agent.checkpoints.operation_outcomes()[op] == "failed" for op in failed)
        # The open session is still open: its record came along.
        from phoenix_protocol.services._sessions import read_current

        assert (read_current(agent) or {}).get("session_id") == f"{agent_id}-s2"
        # Writing goes on past the imported numbers.
        info = agent.checkpoints.create("routine")
        assert info.seq == max(r["seq"] for r in expected["checkpoints"]["checkpoints"]) + 1
        events = [json.loads(line) for line in Path(agent_dir, "ops.jsonl").read_text().splitlines()]
        assert [e for e in events if e["event"] == "checkpoints_imported"]


def test_a_checkpoint_only_the_log_held_is_imported_and_a_damaged_file_is_kept_and_reported(
    backend: str, old_home: str
) -> None:
    directory = os.path.join(old_home, "agents", "alpha", "checkpoints")
    newest = sorted(glob.glob(os.path.join(directory, "*.checkpoint")))[-1]
    os.unlink(newest)  # a writer killed before its write-behind: index.log holds it
    damaged = sorted(glob.glob(os.path.join(directory, "*_routine.checkpoint")))[0]
    data = Path(damaged).read_bytes()
    Path(damaged).write_bytes(data.replace(b'"routine"', b'"rout1ne"', 1))
    agent = Agent.open("alpha", home=Home(old_home))
    names = [e.name for e in agent.checkpoints.entries()]
    assert os.path.basename(newest) in names and os.path.basename(damaged) in names
    assert agent.checkpoints.read(os.path.basename(newest)).checkpoint_type == "session"
    with pytest.raises(Exception, match="checksum mismatch"):
        agent.checkpoints.read(os.path.basename(damaged))
    findings = [
        f
        for f in __import__("phoenix_protocol.services._doctor", fromlist=["x"]).check_agent(agent)
        if f.level == "error"
    ]
    assert any(os.path.basename(damaged) in (f.path or "") for f in findings)


_IMPORT = """
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home
print([e.name for e in Agent.open(sys.argv[2], home=Home(sys.argv[1])).checkpoints.entries()], flush=True)
"""


def test_an_import_killed_at_any_point_is_done_by_the_next_use_with_nothing_lost_or_doubled(
    backend: str, old_home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    for delay in (0.05, 0.15, 0.3, 0.45, 0.6, 0.8):
        child = subprocess.Popen([sys.executable, "-c", _IMPORT, old_home, "alpha"], env=env)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
    expected = EXPECTED["agents"]["alpha"]
    listed = phx_json(capsys, "checkpoint", "list", "--agent", "alpha", "--home", old_home)
    assert without_size(listed["checkpoints"]) == without_size(expected["checkpoints"]["checkpoints"])
    assert (
        phx_json(capsys, "sessions", "--agent", "alpha", "--home", old_home)["sessions"]
        == (expected["sessions"]["sessions"])
    )
    agent = Agent.open("alpha", home=Home(old_home))
    operations = agent.checkpoints.backend.operations()
    assert len(operations) == len({(o["id"], o["outcome"]) for o in operations}) == 2
    assert len(glob.glob(os.path.join(old_home, "agents", "alpha", "checkpoints.migrated-*"))) == 1


def test_a_postgresql_database_at_schema_8_migrates_its_checkpoints_forward(
    pg_url: str, old_home: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.store import _pg

    old = [m for m in _schema.MIGRATIONS if m.version <= 8]
    monkeypatch.setattr(_schema, "MIGRATIONS", old)
    monkeypatch.setattr(_schema, "LATEST", 8)
    home = Home(old_home)
    db = _db.open_database(home, Config({"store": pg_url}))
    db.migrate()
    directory = os.path.join(old_home, "agents", "alpha", "checkpoints")
    files = sorted(glob.glob(os.path.join(directory, "*.checkpoint")))
    garbage = b"\xff\xfe not a checkpoint"

    def fill(tx: _db.Tx) -> None:  # what PgCheckpoints wrote: the file's bytes, checksum line included
        from phoenix_protocol.store._checkpoints import parse_name

        for path in files:
            name = os.path.basename(path)
            _aid, seq, ms, kind = parse_name(name) or ("", 0, 0, "")
            data = Path(path).read_bytes()
            tx.execute(
                "INSERT INTO phx_checkpoints (agent_id, name, seq, checkpoint_type, timestamp_ms, label, "
                "operation_id, size, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ("alpha", name, seq, kind, ms, None, None, len(data), data),
            )
        tx.execute(
            "INSERT INTO phx_checkpoints (agent_id, name, seq, checkpoint_type, timestamp_ms, label, "
            "operation_id, size, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("alpha", "alpha_20261127184500000-00000099_routine.checkpoint", 99, "routine", 0, None, None, 3, garbage),
        )
        tx.execute("INSERT INTO phx_checkpoint_seq (agent_id, next_seq) VALUES (?, ?)", ("alpha", 100))

    db.transaction(fill)
    monkeypatch.undo()
    _pg.ready.clear()
    os.rename(directory, directory + ".elsewhere")  # the rows are the store here
    os.rename(os.path.join(old_home, "agents", "alpha", "sessions"), directory + ".sessions-elsewhere")
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    assert [m["version"] for m in db.migrate()] == [m.version for m in _schema.MIGRATIONS if m.version > 8]
    rows = db.read(lambda tx: tx.all("SELECT name, checksum, content, legacy FROM phx_checkpoints ORDER BY seq"))
    converted = [r for r in rows if r[1].startswith("line:xxh3-128:")]
    assert len(converted) == len(files)
    assert all(json.loads(r[2])["kind"] == "phoenix.checkpoint" and r[3] is None for r in converted)
    assert rows[-1][1] == "legacy" and bytes(rows[-1][3]) == garbage  # kept, reported on read
    agent = Agent.open("alpha", home=home)
    for path in files:
        assert agent.checkpoints.read(os.path.basename(path)).seq > 0
    latest, problems = agent.checkpoints.latest()
    assert latest is not None and latest.name == os.path.basename(files[-1])
    assert problems and "00000099" in problems[0]
    assert agent.checkpoints.create("routine").seq == 100


def test_the_doctor_reports_files_not_imported_then_imports_them_and_names_what_it_left_out(
    backend: str, old_home: str
) -> None:
    from phoenix_protocol.services._doctor import check_agent

    alpha_file = sorted(glob.glob(os.path.join(old_home, "agents", "alpha", "checkpoints", "*.checkpoint")))[0]
    beta_dir = os.path.join(old_home, "agents", "beta")
    shutil.copy(alpha_file, os.path.join(beta_dir, "checkpoints"))  # copied in by hand
    beta = Agent(  # no store used yet: nothing imported by opening it
        "beta", Home(old_home)
    )
    [pending] = [f for f in check_agent(beta, repair=False) if "not imported" in f.message]
    assert pending.level == "warn" and os.path.isdir(os.path.join(beta_dir, "checkpoints"))
    findings = check_agent(beta)
    [imported] = [f for f in findings if "imported into" in f.message]
    assert imported.repaired and "6 checkpoint(s)" in imported.message
    [left] = [f for f in findings if "not imported" in f.message]
    assert left.level == "error" and os.path.basename(alpha_file) in left.message
    (kept,) = glob.glob(os.path.join(beta_dir, "checkpoints.migrated-*"))
    assert os.path.exists(os.path.join(kept, os.path.basename(alpha_file)))
    assert any(f.message == "6 checkpoint(s) verified" for f in findings)
