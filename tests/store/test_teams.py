"""Teams (seed 004): ids, schema versions and migration, tasks and claims, heartbeats and liveness,
clock skew, lifecycle, the lead binding and ZOMBIE mode, consolidation, resume, facts,
checkpoints, the git mirror, Claude Code hooks and the watchdog. Time is a ``ManualClock``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import git
from phoenix_protocol.agent._heartbeats import classify, read_beat
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import (
    CorruptStateError,
    InvalidIdError,
    RefusedError,
    SchemaVersionError,
    UsageError,
)
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._ids import is_valid_id
from phoenix_protocol.core._jsonio import loads
from phoenix_protocol.integrations import _hooks
from phoenix_protocol.services._team_resume import EXIT_ATTACHED, EXIT_PERMANENT, EXIT_TRANSIENT, resume
from phoenix_protocol.services._watchdog import check_teams
from phoenix_protocol.store._teams import (
    ClaimConflictError,
    Team,
    TeamNotFoundError,
    TeamReadOnlyError,
    generate_team_id,
    list_teams,
)

MINUTE = 60.0


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeats go to $XDG_RUNTIME_DIR: keep them inside the test's directory."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))


@pytest.fixture
def phome(project: Path) -> Home:
    """A home inside the git project (for facts, consolidation and the git mirror)."""
    return Home(str(project / ".phoenix"))


def make_team(home: Home, clock: ManualClock, *mates: str, **kwargs: Any) -> Team:
    team = Team.create(home, "engine + schema", lead="lead", clock=clock, **kwargs)
    for name in mates or ("alice", "bob"):
        team.join(name)
    return team


def checkpoints(team: Team) -> list[dict[str, Any]]:
    return team.store.read_checkpoints()


def raw_metadata(team: Team) -> Any:
    """The team's metadata column as the database holds it."""
    return team.store.db.read(lambda tx: tx.scalar("SELECT metadata FROM phx_teams WHERE team_id = ?", (team.id,)))


def set_raw_metadata(team: Team, text: str) -> None:
    """Replace the team's metadata column with ``text`` (a hand edit of ``phoenix.db``)."""
    team.store.db.transaction(
        lambda tx: tx.execute("UPDATE phx_teams SET metadata = ? WHERE team_id = ?", (text, team.id))
    )


def task_of(team: Team, task_id: str) -> dict[str, Any]:
    return next(t for t in team.read()["tasks"] if t["task_id"] == task_id)


def QuickThresholds() -> Config:
    """Liveness thresholds of 1 / 2 / 3 minutes (the ``team_*_minutes`` settings)."""
    return Config({"team_online_minutes": 1.0, "team_idle_minutes": 2.0, "team_suspended_minutes": 3.0})


def MirrorConfig() -> Config:
    """``team_git_mirror`` on."""
    return Config({"team_git_mirror": True})


# -- ids ----------------------------------------------------------------------------------------


def test_team_ids_are_generated_readable_and_safe(home: Home, clock: ManualClock) -> None:
    tid = generate_team_id("τ-engine+schema+test")
    assert re.fullmatch(r"engine-schema-test-[0-9a-f]{5}", tid), tid
    assert len({generate_team_id("release") for _ in range(200)}) > 190  # 5 random hex characters
    for name in ("../../etc/passwd", "a/b\\c", "\x00\x1b[31m", "ünïcödé ✓", "-" * 100, "x" * 300, ".hidden"):
        tid = generate_team_id(name)
        assert is_valid_id(tid) and "/" not in tid and not tid.startswith("."), (name, tid)
        assert len(tid) <= 46
    assert generate_team_id("✓✓✓").startswith("team-")

    team = Team.create(home, "Release 2.0", lead="lead", clock=clock)
    assert team.id.startswith("release-2-0-")
    assert team.exists() and os.path.isfile(os.path.join(home.root, "phoenix.db"))
    assert not os.path.exists(os.path.join(home.root, "teams"))
    assert list_teams(home) == [team.id]
    for bad in ("../escape", "a/b", ".git", "x" * 65):
        with pytest.raises(InvalidIdError):
            Team.create(home, "x", lead="lead", team_id=bad, clock=clock)
        with pytest.raises(InvalidIdError):
            Team.open(home, bad)
    with pytest.raises(InvalidIdError):
        Team.open(home, "")
    with pytest.raises(InvalidIdError):
        Team.create(home, "x", lead="../lead", clock=clock)
    with pytest.raises(UsageError, match="already exists"):
        Team.create(home, "again", lead="lead", team_id=team.id, clock=clock)
    with pytest.raises(TeamNotFoundError, match=team.id):  # names the teams that do exist
        Team.open(home, "no-such-team")
    assert list_teams(home) == [team.id]


# -- schema versions and migration -------------------------------------------------------------


def test_every_record_has_a_schema_version(phome: Home, clock: ManualClock, tmp_path: Path) -> None:
    team = make_team(phome, clock)
    task = team.add_task("Parse the schema")
    team.claim(task["task_id"], "alice")  # the first checkpoint is a full one
    team.release(task["task_id"], "alice")  # then task checkpoints
    team.heartbeat("alice")
    for i in range(6):
        team.send("alice", "bob" if i % 2 else "*", subject=f"note {i}", body="b")
    inbox = team.mailbox.fetch("bob")
    team.mailbox.mark_delivered("bob", inbox[-1].seq)
    team.mailbox.ack("bob", inbox[0].seq)
    team.checkpoint()

    exported = Path(team.export(str(tmp_path / "export"))["directory"])
    assert loads((exported / "metadata.json").read_bytes())["schema_version"] == "1.1"
    assert loads((exported / "teammates.json").read_bytes())["schema_version"] == "1.1"
    records = checkpoints(team)
    assert records and all(r["schema_version"] == "1.1" for r in records)
    assert {r["checkpoint_type"] for r in records} >= {"full", "task", "messages"}
    assert read_beat(team.heartbeat_dir, "alice")["schema_version"] == 1  # type: ignore[index]
    lines = (exported / "mailbox.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["schema_version"] == 1 for line in lines)
    assert team.mailbox.cursor_state("bob")["schema_version"] == 1
    assert team.mailbox.stats()["schema_version"] == 1


def _write_1_0_team(home: Home, team_id: str) -> Path:
    """A team as a Phoenix writing schema 1.0 left it: no checkpoint_seq anywhere."""
    directory = Path(home.root, "teams", team_id)
    directory.mkdir(parents=True)
    task: dict[str, Any] = {
        "task_id": "task-0001",
        "title": "Engine semantic",
        "assigned_to": "alice",
        "status": "in_progress",
        "dependencies": [],
        "created_at": "2026-02-20T14:23:00.000Z",
        "started_at": "2026-02-20T14:34:00.000Z",
        "completed_at": None,
        "checkpoint": {
            "last_progress_at": "2026-02-20T14:44:00.000Z",
            "files_modified": ["yawl/engine/YNetRunner.java"],
            "check_status": "green",
        },
    }
    metadata = {
        "kind": "phoenix.team",
        "schema_version": "1.0",
        "team_id": team_id,
        "name": "old team",
        "created_at": "2026-02-20T14:23:00.000Z",
        "created_ms": 1771597380000,
        "status": "active",
        "lead": "lead",
        "lead_session_id": "claude-lead-ABC123",
        "lead_last_seen": None,
        "lead_last_seen_ms": None,
        "settings": {"check_command": None, "facts_command": None},
        "task_seq": 1,
        "tasks": [task],
        "session_log": {"last_action": "task_assignment", "last_action_at": "2026-02-20T14:34:00.000Z"},
    }
    roster = {
        "schema_version": "1.0",
        "teammates": [
            {"name": "lead", "role": "lead", "session_id": None, "status": "active", "current_task": None},
            {"name": "alice", "role": "engineer", "session_id": None, "status": "active", "current_task": "task-0001"},
        ],
    }
    (directory / "metadata.json").write_text(json.dumps(metadata, indent=2))
    (directory / "teammates.json").write_text(json.dumps(roster, indent=2))
    return directory


def test_migration_1_0_to_1_1_adds_checkpoint_seq_0(home: Home, clock: ManualClock) -> None:
    directory = _write_1_0_team(home, "old-team-abcde")
    before = (directory / "metadata.json").read_bytes()
    team = Team.open(home, "old-team-abcde", clock=clock)  # the folder moves into the database
    (kept,) = Path(home.root).glob("teams.migrated-*")
    data = team.read()
    assert data["schema_version"] == "1.1"
    assert data["checkpoint_seq"] == 0
    assert data["tasks"][0]["checkpoint"]["checkpoint_seq"] == 0
    assert data["tasks"][0]["checkpoint"]["files_modified"] == ["yawl/engine/YNetRunner.java"]
    assert (kept / "old-team-abcde" / "metadata.json").read_bytes() == before, "the old folder is kept as it was"
    assert not directory.exists()
    roster = team.roster()
    assert [m["name"] for m in roster] == ["lead", "alice"]
    stored = json.loads(raw_metadata(team))
    assert stored["schema_version"] == "1.1" and stored["checkpoint_seq"] == 0 and "tasks" not in stored
    team.add_task("Schema")
    assert [t["checkpoint"]["checkpoint_seq"] for t in team.read()["tasks"]] == [0, 0]
    team.join("bob")
    assert [m["name"] for m in team.roster()] == ["lead", "alice", "bob"]


def test_a_newer_schema_is_refused_clearly(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    data = json.loads(raw_metadata(team))
    data["schema_version"] = "2.0"
    set_raw_metadata(team, json.dumps(data))
    before = raw_metadata(team)
    with pytest.raises(SchemaVersionError, match=r"newer Phoenix \(team schema 2\.0; this one reads up to 1\.1\)"):
        team.read()
    with pytest.raises(SchemaVersionError):
        team.add_task("anything")
    assert raw_metadata(team) == before, "the record was left as it is"
    result = resume(home, team.id, session_id="s1", clock=clock)
    assert result.exit_code == EXIT_PERMANENT and "newer Phoenix" in result.steps[-1]["detail"]

    data["schema_version"] = "one.zero"
    set_raw_metadata(team, json.dumps(data))
    with pytest.raises(CorruptStateError, match="not a version"):
        team.read()
    set_raw_metadata(team, "{not json")
    with pytest.raises(CorruptStateError, match="not valid JSON"):
        team.read()


# -- tasks and claims ---------------------------------------------------------------------------


def test_tasks_with_dependencies_cycles_refused_and_ready(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    schema = team.add_task("Schema")
    engine = team.add_task("Engine", after=[schema["task_id"]])
    tests = team.add_task("Tests", after=[engine["task_id"], schema["task_id"]])
    assert [schema["task_id"], engine["task_id"], tests["task_id"]] == ["task-0001", "task-0002", "task-0003"]
    assert tests["dependencies"] == ["task-0002", "task-0001"]
    assert tests["status"] == "pending" and tests["assigned_to"] is None
    with pytest.raises(UsageError, match="no task 'task-0099'"):
        team.add_task("Orphan", after=["task-0099"])
    with pytest.raises(UsageError, match="a title"):
        team.add_task("   ")

    # Cycles: a direct one, a longer one, a task on itself. Nothing is changed.
    before = team.read()
    with pytest.raises(UsageError, match=r"cycle: task-0001 → task-0003 → .*task-0001; refused"):
        team.add_dependency("task-0001", "task-0003")
    with pytest.raises(UsageError, match="cycle"):
        team.add_dependency("task-0001", "task-0002")
    with pytest.raises(UsageError, match="cycle"):
        team.add_dependency("task-0002", "task-0002")
    assert team.read() == before
    docs = team.add_task("Docs")
    assert team.add_dependency(docs["task_id"], "task-0003")["dependencies"] == ["task-0003"]
    team.add_dependency(docs["task_id"], "task-0003")  # idempotent
    assert task_of(team, docs["task_id"])["dependencies"] == ["task-0003"]

    assert [t["task_id"] for t in team.ready()] == ["task-0001"]
    with pytest.raises(ClaimConflictError, match="waits for task-0001"):
        team.claim("task-0002", "alice")
    team.claim("task-0001", "alice")
    assert team.ready() == []  # claimed tasks are not ready
    team.done("task-0001", "alice")
    assert [t["task_id"] for t in team.ready()] == ["task-0002"]
    team.claim("task-0002", "bob")
    team.done("task-0002", "bob")
    assert [t["task_id"] for t in team.ready()] == ["task-0003"]


CLAIMER = r"""
import os, sys, time
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import ClaimConflictError, Team

home, team_id, me, go = sys.argv[1:5]
team = Team.open(Home(home), team_id)
tasks = [t["task_id"] for t in team.read()["tasks"]]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
for task_id in tasks:
    try:
        team.claim(task_id, me)
        print("won", task_id, flush=True)
    except ClaimConflictError:
        print("lost", task_id, flush=True)
"""


def test_claim_is_atomic_exactly_one_of_two_wins(home: Home, clock: ManualClock, tmp_path: Path) -> None:
    team = make_team(home, clock)
    with pytest.raises(UsageError, match="not in team"):
        team.claim("task-0001", "mallory")
    task = team.add_task("Contended")
    team.claim(task["task_id"], "alice")
    assert team.claim(task["task_id"], "alice")["assigned_to"] == "alice"  # already ours: idempotent
    with pytest.raises(ClaimConflictError, match="already claimed by alice"):
        team.claim(task["task_id"], "bob")

    # Two processes racing for the same 20 tasks, in the same order, released at the same instant.
    for i in range(20):
        team.add_task(f"race {i}")
    team.release(task["task_id"], "alice")
    team.claim(task["task_id"], "lead")  # leave this one out of the race: both must lose it
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, home.root, team.id, name, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alice", "bob")
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    go.write_text("go")
    results: dict[str, dict[str, str]] = {}
    for name, proc in zip(("alice", "bob"), procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results[name] = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    tasks = {t["task_id"]: t for t in team.read()["tasks"]}
    for task_id, t in tasks.items():
        wins = [name for name in results if results[name][task_id] == "won"]
        if task_id == task["task_id"]:
            assert wins == [] and t["assigned_to"] == "lead"
        else:
            assert len(wins) == 1, (task_id, results["alice"][task_id], results["bob"][task_id])
            assert t["assigned_to"] == wins[0] and t["status"] == "in_progress"


def test_release_reassign_and_checkpoint_inheritance(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock, "alice", "bob", "carol")
    task = team.add_task("Engine semantic")
    tid = task["task_id"]
    team.claim(tid, "alice")
    with pytest.raises(ClaimConflictError, match="held by alice, not bob"):
        team.release(tid, "bob")
    released = team.release(tid, "alice")
    assert released["status"] == "pending" and released["assigned_to"] is None
    assert [t["task_id"] for t in team.ready()] == [tid]
    assert next(m for m in team.roster() if m["name"] == "alice")["current_task"] is None

    team.claim(tid, "alice")
    clock.advance(seconds=40)
    team.record_progress(tid, "alice", files=["yawl/engine/YNetRunner.java"], check="red")
    team.record_progress(tid, "alice", files=["yawl/engine/YEngine.java"])
    with pytest.raises(ClaimConflictError):
        team.record_progress(tid, "bob", files=["x"])
    seq_before = task_of(team, tid)["checkpoint"]["checkpoint_seq"]

    moved = team.reassign(tid, "bob")  # the seed's --force-reassign
    assert moved["assigned_to"] == "bob" and moved["status"] == "in_progress"
    cp = moved["checkpoint"]
    assert cp["inherited_from"] == "alice"
    assert cp["files_modified"] == ["yawl/engine/YEngine.java", "yawl/engine/YNetRunner.java"]
    assert cp["check_status"] == "red"
    assert cp["checkpoint_seq"] > seq_before and cp["name"] == f"checkpoint-{cp['checkpoint_seq']:08d}.json"
    saved = team.store.read_checkpoint(cp["name"])
    assert saved is not None
    assert saved["reason"] == f"{tid} reassigned from alice"
    assert (saved.get("task") or next(t for t in saved["metadata"]["tasks"] if t["task_id"] == tid))[
        "assigned_to"
    ] == "bob"
    mates = {m["name"]: m for m in team.roster()}
    assert mates["alice"]["current_task"] is None and mates["bob"]["current_task"] == tid
    with pytest.raises(ClaimConflictError, match="held by bob, not alice"):
        team.done(tid, "alice")
    with pytest.raises(UsageError, match="not in team"):
        team.reassign(tid, "mallory")
    team.done(tid, "bob")
    with pytest.raises(ClaimConflictError, match="completed"):
        team.reassign(tid, "carol")


def test_task_records_files_check_status_and_latest_checkpoint(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    tid = team.add_task("Parser")["task_id"]
    claimed = team.claim(tid, "alice")
    assert claimed["started_at"] == clock.now_iso()
    blocked = team.done(tid, "alice", check="red", files=["src/parser.py"])
    assert blocked["status"] == "blocked" and blocked["checkpoint"]["check_status"] == "red"
    assert next(m for m in team.roster() if m["name"] == "alice")["current_task"] == tid  # still hers
    clock.advance(seconds=10)
    done = team.done(tid, "alice", check="green", files=["tests/test_parser.py", "src/parser.py"])
    assert done["status"] == "completed" and done["completed_at"] == clock.now_iso()
    cp = done["checkpoint"]
    assert cp["files_modified"] == ["src/parser.py", "tests/test_parser.py"]
    assert cp["check_status"] == "green" and cp["last_progress_at"] == clock.now_iso()
    latest = team.latest_checkpoint()
    assert latest is not None and cp["checkpoint_seq"] == latest["seq"]
    assert cp["name"] == f"checkpoint-{latest['seq']:08d}.json"
    assert latest["reason"] == f"{tid} done"
    with pytest.raises(UsageError, match="check must be one of"):
        team.done(tid, "alice", check="blue")


def test_sweep_returns_tasks_of_dead_teammates(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock, "alice", "bob", "carol")
    a, b, c = (team.add_task(f"task {i}")["task_id"] for i in range(3))
    team.claim(a, "alice")
    team.claim(b, "bob")
    team.claim(c, "lead")
    for name in ("alice", "bob", "lead"):
        team.heartbeat(name)
    team.record_progress(a, "alice", files=["a.py"])
    assert team.sweep() == []
    clock.advance(seconds=25 * MINUTE)
    team.heartbeat("bob")
    assert team.sweep() == []  # alice is idle (25 min), not dead
    clock.advance(seconds=10 * MINUTE)  # alice: 35 min (suspended); bob 10 min (idle); lead 35 min
    back = team.sweep()
    assert [t["task_id"] for t in back] == [a]
    assert back[0]["status"] == "pending" and back[0]["assigned_to"] is None
    assert back[0]["checkpoint"]["inherited_from"] == "alice"
    assert back[0]["checkpoint"]["files_modified"] == ["a.py"]  # the checkpoint stays with the task
    assert task_of(team, b)["assigned_to"] == "bob"
    assert task_of(team, c)["assigned_to"] == "lead", "the lead's tasks are never swept"
    assert next(m for m in team.roster() if m["name"] == "alice")["current_task"] is None
    assert team.sweep() == []
    # carol never sent a heartbeat: she counts from when she joined; stale after an hour.
    clock.advance(seconds=30 * MINUTE)
    team.heartbeat("bob")
    d = team.add_task("task 3")["task_id"]
    team.claim(d, "carol")
    assert [t["task_id"] for t in team.sweep()] == [d]


# -- heartbeats, liveness, clock skew ----------------------------------------------------------


def test_heartbeats_carry_utc_ms_and_a_sequence(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    first = team.heartbeat("alice", session_id="claude-tm-DEF456")
    clock.advance(seconds=60)
    second = team.heartbeat("alice")
    assert (first["seq"], second["seq"]) == (1, 2)
    assert first["ms"] == clock.now_ms() - 60_000 and second["ms"] == clock.now_ms()
    assert first["session_id"] == "claude-tm-DEF456" and first["host"]
    on_disk = read_beat(team.heartbeat_dir, "alice")
    assert on_disk == second
    assert team.heartbeat_dir.startswith(str(Path(os.environ["XDG_RUNTIME_DIR"])))
    assert oct(os.stat(team.heartbeat_dir).st_mode & 0o777) == "0o700"
    with pytest.raises(UsageError, match="not in team"):
        team.heartbeat("mallory")
    # A torn or foreign heartbeat file reads as "no heartbeat", never as a crash.
    Path(team.heartbeat_dir, "bob.json").write_text('{"seq": "x"')
    assert read_beat(team.heartbeat_dir, "bob") is None
    assert team.heartbeat("bob")["seq"] == 1


def test_liveness_classes_and_configurable_thresholds(home: Home, clock: ManualClock) -> None:
    m = 60_000
    assert [classify(x) for x in (0, 10 * m - 1, 10 * m, 30 * m - 1, 30 * m, 60 * m - 1, 60 * m)] == [
        "online",
        "online",
        "idle",
        "idle",
        "suspended",
        "suspended",
        "stale",
    ]
    assert classify(90_000, online_minutes=1, idle_minutes=2, suspended_minutes=3) == "idle"

    team = make_team(home, clock)
    team.heartbeat("alice")
    seen = []
    for minutes in (0, 9, 1, 20, 15, 30):  # cumulative: 0, 9, 10, 30, 45, 75
        clock.advance(seconds=minutes * MINUTE)
        seen.append(team.liveness("alice")["class"])
    assert seen == ["online", "online", "idle", "suspended", "suspended", "stale"]
    live = team.liveness("alice")
    assert live["elapsed_ms"] == 75 * m and live["seq"] == 1 and live["source"] == "heartbeat"
    assert team.liveness("bob")["source"] == "roster"  # no heartbeat yet: counts from joining
    with pytest.raises(UsageError):
        team.liveness("mallory")

    quick = Team(home, team.id, clock=clock, config=QuickThresholds())
    team.heartbeat("alice")
    got = []
    for _ in range(4):
        got.append(quick.liveness("alice")["class"])
        clock.advance(seconds=MINUTE)
    assert got == ["online", "idle", "suspended", "stale"]


def test_clock_skew_is_reported_and_ordering_falls_back_to_sequences(home: Home, clock: ManualClock) -> None:
    lead = make_team(home, clock)
    ahead = ManualClock(clock.now_ms() + 5 * 60_000)  # alice's machine: 5 minutes fast
    alice = Team.open(home, lead.id, clock=ahead)
    alice.heartbeat("alice")
    live = lead.liveness("alice")
    assert live["skew"] is True and live["elapsed_ms"] == -300_000 and live["source"] == "sequence"
    assert live["class"] == "online"

    # Alice goes silent. By timestamps her beat would look fresh for 15 minutes (5 fast + 10);
    # by sequence number, nothing new was seen for 11 minutes of the lead's own clock: idle.
    clock.advance(seconds=11 * MINUTE)
    ahead.advance(seconds=11 * MINUTE)
    live = lead.liveness("alice")
    assert live["skew"] is False and live["elapsed_ms"] == 6 * 60_000  # by its timestamp: 6 min, "online"
    assert live["class"] == "idle", "the beat was seen 11 minutes ago: it is at least that old"
    # Within 30 s of the future is not skew, just jitter.
    jitter = ManualClock(clock.now_ms() + 20_000)
    Team.open(home, lead.id, clock=jitter).heartbeat("bob")
    assert lead.liveness("bob") == {
        "class": "online",
        "elapsed_ms": -20_000,
        "skew": False,
        "seq": 1,
        "source": "heartbeat",
    }

    # Far ahead (an hour): only the sequence number says anything.
    far = ManualClock(clock.now_ms() + 60 * 60_000)
    alice_far = Team.open(home, lead.id, clock=far)
    alice_far.heartbeat("alice")  # seq 2
    assert lead.liveness("alice")["class"] == "online"
    clock.advance(seconds=11 * MINUTE)
    live = lead.liveness("alice")
    assert live["skew"] and live["seq"] == 2 and live["class"] == "idle"  # 11 min since seq 2 was seen
    clock.advance(seconds=25 * MINUTE)
    assert lead.liveness("alice")["class"] == "suspended"
    far.set(far.now_ms() - 10 * 60_000)  # her clock even steps back: the sequence still advances
    assert alice_far.heartbeat("alice")["seq"] == 3
    live = lead.liveness("alice")
    assert live["skew"] and live["seq"] == 3 and live["class"] == "online"
    assert lead.roster()[1]["last_heartbeat_seq"] == 3

    # The mailbox orders by seq, not by timestamps: a message stamped earlier but sent later
    # comes later.
    alice_far.send("alice", "bob", subject="first", body="from the future")
    lead.send("lead", "bob", subject="second", body="from the present")
    inbox = lead.mailbox.fetch("bob")
    assert [m.subject for m in inbox] == ["first", "second"]
    assert inbox[0].ts_ms > inbox[1].ts_ms and inbox[0].seq < inbox[1].seq


# -- lifecycle ----------------------------------------------------------------------------------


def test_lifecycle_is_enforced_and_completed_is_read_only(phome: Home, clock: ManualClock) -> None:
    team = Team.create(phome, "lifecycle", lead="lead", clock=clock)
    assert team.read()["status"] == "pending"
    with pytest.raises(RefusedError, match="cannot go from pending to consolidating"):
        team.consolidate()
    with pytest.raises(UsageError, match="status must be one of"):
        team.transition("paused")
    team.join("alice")
    assert team.read()["status"] == "active"
    with pytest.raises(RefusedError, match="cannot go from active to completed"):
        team.transition("completed")
    with pytest.raises(RefusedError, match="cannot go from active to pending"):
        team.transition("pending")
    team.transition("suspended", reason="night")
    assert team.read()["session_log"]["last_action"] == "status_suspended: night"
    team.transition("active")
    tid = team.add_task("Ship")["task_id"]
    team.claim(tid, "alice")
    team.done(tid, "alice")
    assert team.consolidate()["green"] is True
    assert team.read()["status"] == "consolidating"
    team.complete()
    assert team.read()["status"] == "completed"

    metadata = team.read()
    roster = team.roster()
    for attempt in (
        lambda: team.add_task("more"),
        lambda: team.add_dependency(tid, tid),
        lambda: team.release(tid, "alice"),
        lambda: team.join("bob"),
        lambda: team.transition("active"),
        lambda: team.send("alice", "lead", subject="s", body="b"),
        lambda: team.reassign(tid, "lead"),
    ):
        with pytest.raises((TeamReadOnlyError, RefusedError)):
            attempt()
    with pytest.raises(TeamReadOnlyError, match="read-only"):
        team.add_task("more")
    assert team.read() == metadata
    assert team.roster() == roster
    assert team.read()["tasks"][0]["status"] == "completed"  # reading still works
    assert resume(phome, team.id, session_id="s", clock=clock).exit_code == EXIT_PERMANENT


# -- the lead binding and ZOMBIE mode ----------------------------------------------------------


def test_lead_binding_zombie_mode_and_reattach(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    first = resume(home, team.id, session_id="lead-1", clock=clock)
    assert first.exit_code == EXIT_ATTACHED and first.attached
    data = team.read()
    assert data["lead_session_id"] == "lead-1" and data["lead_last_seen_ms"] == clock.now_ms()
    assert data["lead_last_seen"] == clock.now_iso()

    clock.advance(seconds=4 * MINUTE)
    view = team.status_for("alice")
    assert view["zombie"] is False and view["lead_silence_ms"] == 240_000
    # The lead's heartbeat refreshes the binding (at most once a minute in metadata.json).
    team.heartbeat("lead")
    assert team.read()["lead_last_seen_ms"] == clock.now_ms()
    clock.advance(seconds=5 * MINUTE, ms=1)
    n_before = len(checkpoints(team))
    view = team.status_for("alice")
    assert view["zombie"] is True and view["lead_silence_ms"] == 300_001
    assert "checkpoint" in view, "entering ZOMBIE mode checkpoints at once"
    assert team.read()["session_log"]["lead_timeout_detected_at"] == clock.now_iso()
    assert team.status_for("lead")["zombie"] is False  # the lead itself is never a zombie
    clock.advance(seconds=20)
    assert "checkpoint" not in team.status_for("alice")  # less than 30 s since the last one
    clock.advance(seconds=10)
    assert team.status_for("bob")["checkpoint"]["kind"] == "full"  # every 30 s while ZOMBIE
    assert len(checkpoints(team)) == n_before + 2
    # Teammates keep working in ZOMBIE mode.
    tid = team.add_task("keep going")["task_id"]
    team.claim(tid, "alice")
    team.done(tid, "alice", files=["x.py"])

    # A lead still active elsewhere (seen 2 min ago) refuses a new session: transient, exit 1.
    team.heartbeat("lead")
    clock.advance(seconds=2 * MINUTE)
    busy = resume(home, team.id, session_id="lead-2", clock=clock)
    assert busy.exit_code == EXIT_TRANSIENT and not busy.attached
    assert busy.steps[-1]["step"] == "lead session" and "lead-1" in busy.steps[-1]["detail"]
    assert team.read()["lead_session_id"] == "lead-1"
    # The same session takes the fast path.
    again = resume(home, team.id, session_id="lead-1", clock=clock)
    assert again.exit_code == EXIT_ATTACHED
    assert next(s for s in again.steps if s["step"] == "lead session")["detail"].startswith("fast path")

    # The lead crashes; 6 minutes later a new session re-attaches: no file deleted by hand.
    clock.advance(seconds=6 * MINUTE)
    assert team.status_for("alice")["zombie"] is True
    new = resume(home, team.id, session_id="lead-2", clock=clock)
    assert new.exit_code == EXIT_ATTACHED and new.attached
    step = next(s for s in new.steps if s["step"] == "lead session")
    assert step["level"] == "warn" and "re-attaching" in step["detail"] and "lead-1" in step["detail"]
    data = team.read()
    assert data["lead_session_id"] == "lead-2" and data["session_log"]["lead_timeout_detected_at"] is None
    assert team.status_for("alice")["zombie"] is False


# -- consolidation ------------------------------------------------------------------------------


def test_consolidate_runs_the_check_and_records_the_last_good_commit(
    phome: Home, project: Path, clock: ManualClock
) -> None:
    team = make_team(phome, clock, check_command="test -f README.md && echo checked")
    head = git(project, "rev-parse", "HEAD").strip()
    result = team.consolidate()
    assert result["green"] is True and result["exit_code"] == 0 and result["head"] == head
    assert "checked" in result["output_tail"]
    data = team.read()
    assert data["status"] == "consolidating"
    assert data["session_log"]["last_good_commit"] == head
    assert data["session_log"]["consolidation"]["green"] is True
    assert team.latest_checkpoint(kind="full")["reason"] == "pre-consolidation"  # type: ignore[index]

    # A red check sends the team back to active; the last good commit is kept.
    (project / "README.md").rename(project / "GONE.md")
    result = team.consolidate()
    assert result["green"] is False and result["exit_code"] == 1
    data = team.read()
    assert data["status"] == "active" and data["session_log"]["last_good_commit"] == head
    (project / "GONE.md").rename(project / "README.md")

    # Completing refuses uncommitted changes unless forced.
    team.consolidate()
    (project / "README.md").write_text("changed\n")
    with pytest.raises(RefusedError, match="uncommitted changes"):
        team.complete()
    git(project, "commit", "-qam", "consolidated")
    assert team.complete()["status"] == "completed"


def test_consolidation_output_is_redacted(phome: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-proj-" + "A1b2C3d4" * 6
    monkeypatch.setenv("TEST_SECRET", secret)
    team = make_team(phome, clock, check_command='echo "OPENAI_API_KEY=$TEST_SECRET"')
    result = team.consolidate()
    assert secret not in result["output_tail"] and "[REDACTED:" in result["output_tail"]
    assert secret not in json.dumps(team.read())


def test_partial_consolidation_retry_abort_inspect(phome: Home, project: Path, clock: ManualClock) -> None:
    team = make_team(phome, clock, check_command="true")
    tid = team.add_task("Engine")["task_id"]
    team.claim(tid, "alice")
    team.done(tid, "alice", files=["engine.py"])
    good = git(project, "rev-parse", "HEAD").strip()
    assert team.partial_consolidation() is None  # not consolidating
    team.consolidate()
    assert team.partial_consolidation() is None  # consolidating, but nothing staged or dirty

    # The lead stages the work and dies before committing.
    (project / "engine file.py").write_text("print('engine')\n")
    (project / "README.md").write_text("# changed\n")
    git(project, "add", "engine file.py", "README.md")
    (project / "README.md").write_text("# changed again\n")
    partial = team.partial_consolidation()
    assert partial == {
        "staged": ["README.md", "engine file.py"],
        "dirty": ["README.md"],
        "last_good_commit": good,
        "options": ["retry", "abort", "inspect"],
    }
    result = resume(phome, team.id, session_id="lead-2", clock=clock)
    assert result.exit_code == EXIT_ATTACHED
    status = next(s for s in result.steps if s["step"] == "team status")
    assert status["level"] == "warn" and "retry | abort | inspect" in status["detail"]
    assert status["partial_consolidation"] == partial

    inspect = team.resolve_consolidation("inspect")
    assert "engine file.py" in inspect["diff"] and "+print('engine')" in inspect["diff"]
    assert team.read()["status"] == "consolidating"  # inspecting changes nothing

    retry = team.resolve_consolidation("retry")
    assert retry["choice"] == "retry" and retry["green"] is True
    assert team.read()["status"] == "consolidating"

    with pytest.raises(UsageError, match="retry, abort or inspect"):
        team.resolve_consolidation("commit")
    abort = team.resolve_consolidation("abort")
    assert abort == {"choice": "abort", "reset_to": good, "reopened": [tid]}
    assert git(project, "rev-parse", "HEAD").strip() == good
    assert git(project, "status", "--porcelain", "--untracked-files=no") == ""
    assert (project / "README.md").read_text() == "# test project\n"
    data = team.read()
    assert data["status"] == "active" and data["session_log"]["last_action"] == "consolidation_aborted"
    assert task_of(team, tid)["status"] == "pending" and task_of(team, tid)["assigned_to"] is None
    assert team.partial_consolidation() is None


def test_abort_without_a_last_good_commit_is_refused(phome: Home, project: Path, clock: ManualClock) -> None:
    team = make_team(phome, clock, check_command="false")
    team.transition("consolidating")
    (project / "README.md").write_text("dirty\n")
    with pytest.raises(RefusedError, match="no last good commit"):
        team.resolve_consolidation("abort")
    assert (project / "README.md").read_text() == "dirty\n"


# -- resume ------------------------------------------------------------------------------------


def test_resume_validation_sequence(phome: Home, project: Path, clock: ManualClock) -> None:
    missing = resume(phome, "no-such-team", session_id="s", clock=clock)
    assert missing.exit_code == EXIT_PERMANENT and missing.steps[0]["step"] == "discovery"
    assert missing.as_dict()["attached"] is False

    team = make_team(phome, clock, "alice", "bob", "carol")
    tids = [team.add_task(f"t{i}")["task_id"] for i in range(4)]
    team.claim(tids[0], "alice")
    team.done(tids[0], "alice")
    team.claim(tids[1], "alice")
    team.claim(tids[2], "bob")
    team.heartbeat("alice")
    team.heartbeat("bob")
    for i in range(7):
        team.send("alice", "lead", subject=f"status {i}", body="b", msg_id=f"m-{i}")
    clock.advance(seconds=15 * MINUTE)
    team.heartbeat("alice")

    result = resume(phome, team.id, session_id="lead-9", clock=clock)
    assert result.exit_code == EXIT_ATTACHED and result.attached
    assert [s["step"] for s in result.steps] == [
        "discovery",
        "team status",
        "lead session",
        "probe teammates",
        "zombie",  # the lead was silent for 15 minutes while alice and bob held tasks
        "verify facts",
        "load mailbox",
        "summary",
    ]
    steps = {s["step"]: s for s in result.steps}
    classes = {m["name"]: m["class"] for m in steps["probe teammates"]["teammates"]}
    assert classes == {"lead": "idle", "alice": "online", "bob": "idle", "carol": "idle"}
    assert [m["name"] for m in steps["zombie"]["zombie"]["teammates"]] == ["alice", "bob"]
    mailbox = steps["load mailbox"]
    assert [m["subject"] for m in mailbox["recent"]] == [f"status {i}" for i in range(2, 7)]
    assert mailbox["unread"] == 7 and "7 messages" in mailbox["detail"]
    s = result.summary
    assert s["tasks"] == {"completed": 1, "in_progress": 2, "pending": 1}
    assert s["teammates"] == {"idle": 3, "online": 1}
    assert s["created_seconds_ago"] == 15 * 60 and s["last_action"] == "lead_attached"
    as_json = json.loads(json.dumps(result.as_dict()))
    assert as_json["exit_code"] == 0 and as_json["summary"]["team_id"] == team.id

    # A suspended team becomes active again on attach.
    team.transition("suspended")
    assert resume(phome, team.id, session_id="lead-9", clock=clock).exit_code == EXIT_ATTACHED
    assert team.read()["status"] == "active"

    # A probe runs the same sequence without binding anything, and never fails on the lead's
    # binding (probing is not attaching): the whole sequence runs.
    probe_only = resume(phome, team.id, session_id="someone", clock=clock, attach=False)
    assert probe_only.exit_code == EXIT_ATTACHED and not probe_only.attached
    lead_step = next(s for s in probe_only.steps if s["step"] == "lead session")
    assert lead_step["level"] == "ok" and "attached in session lead-9" in lead_step["detail"]
    assert probe_only.steps[-1]["step"] == "summary"
    assert team.read()["lead_session_id"] == "lead-9"
    assert resume(phome, team.id, session_id="someone", clock=clock).exit_code == EXIT_TRANSIENT

    # Corrupt metadata: permanent.
    set_raw_metadata(team, "{")
    assert resume(phome, team.id, session_id="lead-9", clock=clock).exit_code == EXIT_PERMANENT


def test_verify_facts_default_and_configured(phome: Home, project: Path, clock: ManualClock) -> None:
    team = make_team(phome, clock)
    facts = team.facts_hash()
    assert facts["source"] == "git HEAD + tracked changes" and facts["hash"].startswith("sha256:")
    assert team.facts_hash() == facts  # stable
    team.checkpoint()
    assert team.latest_checkpoint(kind="full")["facts"] == facts  # type: ignore[index]
    ok = resume(phome, team.id, session_id="s", clock=clock)
    assert next(s for s in ok.steps if s["step"] == "verify facts")["level"] == "ok"

    (project / "README.md").write_text("# edited\n")  # a tracked change
    changed = team.facts_hash()
    assert changed["hash"] != facts["hash"]
    warn = resume(phome, team.id, session_id="s", clock=clock)
    step = next(s for s in warn.steps if s["step"] == "verify facts")
    assert warn.exit_code == EXIT_ATTACHED, "a mismatch is a warning, not a failure"
    assert step["level"] == "warn" and "facts changed" in step["detail"] and step["stored"] == facts["hash"]
    (project / "untracked.txt").write_text("x")
    assert team.facts_hash() == changed, "untracked files are not facts"
    git(project, "commit", "-qam", "edit")
    assert team.facts_hash()["hash"] != changed["hash"], "a new HEAD is a new fact"

    configured = Team.create(phome, "facts", lead="lead", clock=clock, facts_command="cat facts.txt")
    (project / "facts.txt").write_text("observatory v1\n")
    first = configured.facts_hash()
    assert first["source"] == "cat facts.txt"
    configured.checkpoint()
    assert resume(phome, configured.id, session_id="s", clock=clock, verify_facts=True).steps[3]["level"] == "ok"
    (project / "facts.txt").write_text("observatory v2\n")
    assert configured.facts_hash()["hash"] != first["hash"]
    again = resume(phome, configured.id, session_id="s", clock=clock)
    assert next(s for s in again.steps if s["step"] == "verify facts")["level"] == "warn"
    skipped = resume(phome, configured.id, session_id="s", clock=clock, verify_facts=False)
    assert "verify facts" not in [s["step"] for s in skipped.steps]


# -- checkpoints ------------------------------------------------------------------------------


def test_checkpoint_triggers(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    assert checkpoints(team) == []
    on_demand = team.checkpoint(reason="on demand")
    assert on_demand == {"name": "checkpoint-00000001.json", "seq": 1, "kind": "full"}
    full = checkpoints(team)[0]
    assert full["checkpoint_type"] == "full" and full["reason"] == "on demand"
    assert full["metadata"]["team_id"] == team.id and [m["name"] for m in full["teammates"]] == [
        "lead",
        "alice",
        "bob",
    ]
    assert set(full) >= {"heartbeats", "mailbox", "facts", "timestamp", "timestamp_ms", "seq"}

    # Every task transition.
    tid = team.add_task("A")["task_id"]
    kinds = []
    steps: list[Callable[[], object]] = [
        lambda: team.claim(tid, "alice"),
        lambda: team.release(tid, "alice"),
        lambda: team.claim(tid, "alice"),
        lambda: team.reassign(tid, "bob"),
        lambda: team.done(tid, "bob", check="red"),
        lambda: team.done(tid, "bob"),
    ]
    for step in steps:
        before = len(checkpoints(team))
        step()
        after = checkpoints(team)
        assert len(after) == before + 1
        kinds.append(after[-1]["checkpoint_type"])
    assert kinds == ["task"] * 6
    assert checkpoints(team)[-1]["task"]["status"] == "completed"

    # Every 5 messages (within 30 s)...
    n = len(checkpoints(team))
    for i in range(4):
        team.send("alice", "bob", subject=f"m{i}", body="b")
    assert len(checkpoints(team)) == n
    team.send("alice", "bob", subject="m4", body="b")
    assert len(checkpoints(team)) == n + 1 and checkpoints(team)[-1]["checkpoint_type"] == "messages"
    assert checkpoints(team)[-1]["mailbox"]["stats"]["count"] == 5
    team.send("alice", "bob", subject="m5", body="b", msg_id="fixed")
    team.send("alice", "bob", subject="m5", body="b", msg_id="fixed")  # a duplicate counts for nothing
    assert len(checkpoints(team)) == n + 1
    # ... or 30 s after the last checkpoint.
    clock.advance(seconds=31)
    team.send("alice", "bob", subject="late", body="b")
    assert len(checkpoints(team)) == n + 2

    # A periodic full snapshot: the first transition 5 minutes after the last full one is full.
    clock.advance(seconds=5 * MINUTE)
    t2 = team.add_task("B")["task_id"]
    team.claim(t2, "alice")
    assert checkpoints(team)[-1]["checkpoint_type"] == "full"
    team.release(t2, "alice")
    assert checkpoints(team)[-1]["checkpoint_type"] == "task"


def test_checkpoints_are_pruned(home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("phoenix_protocol.store._teams.KEEP_CHECKPOINTS", 3)
    team = make_team(home, clock)
    for _ in range(6):
        team.checkpoint()
    assert team.store.checkpoint_names() == [f"checkpoint-{i:08d}.json" for i in (4, 5, 6)]
    assert team.latest_checkpoint()["seq"] == 6  # type: ignore[index]


def test_git_mirror_leaves_branch_index_and_work_tree_alone(phome: Home, project: Path, clock: ManualClock) -> None:
    # The user has work in progress: a staged file and an unstaged edit.
    (project / "staged.txt").write_text("staged\n")
    git(project, "add", "staged.txt")
    (project / "README.md").write_text("# unstaged edit\n")
    team = make_team(phome, clock)
    mirrored = Team(phome, team.id, clock=clock, config=MirrorConfig())
    git_dir = project / ".git"
    head = (git_dir / "HEAD").read_bytes()
    branch = git(project, "rev-parse", "HEAD")
    index = (git_dir / "index").read_bytes()
    tree = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}

    first = mirrored.checkpoint(reason="mirror 1")
    second = mirrored.checkpoint(reason="mirror 2")
    team.checkpoint()  # mirror off: no commit

    assert (git_dir / "HEAD").read_bytes() == head
    assert (git_dir / "index").read_bytes() == index, "the index was touched"
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert {p: b for p, b in after.items() if ".phoenix" not in p.parts} == {
        p: b for p, b in tree.items() if ".phoenix" not in p.parts
    }
    assert git(project, "rev-parse", "HEAD") == branch
    ref = f"refs/phoenix/teams/{team.id}"
    log = git(project, "log", "--format=%s", ref).splitlines()
    assert log == [f"phoenix team {team.id}: {second['name']}", f"phoenix team {team.id}: {first['name']}"]
    content = git(project, "show", f"{ref}:checkpoints/{second['name']}")
    assert json.loads(content) == team.store.read_checkpoint(second["name"])
    assert json.loads(content)["reason"] == "mirror 2"
    # Each commit is seed 004's layout, what `phx team export` writes.
    assert git(project, "ls-tree", "--name-only", ref).split() == [
        "checkpoints",
        "mailbox.jsonl",
        "metadata.json",
        "teammates.json",
    ]
    assert json.loads(git(project, "show", f"{ref}:metadata.json"))["team_id"] == team.id
    assert git(project, "ls-tree", "--name-only", f"{ref}:checkpoints").split() == [
        f"checkpoint-{i:08d}.json" for i in range(1, second["seq"] + 1)
    ]
    assert ref not in git(project, "branch", "-a")
    assert git(project, "status", "--porcelain", "--untracked-files=no").splitlines() == [
        " M README.md",
        "A  staged.txt",
    ]


# -- the mailbox through the team --------------------------------------------------------------


def test_team_messages_are_checked_and_idempotent(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    with pytest.raises(UsageError, match="not in team"):
        team.send("mallory", "bob", subject="s", body="b")
    with pytest.raises(UsageError, match="use \\* to broadcast"):
        team.send("alice", "mallory", subject="s", body="b")
    first = team.send("alice", "*", type="question", subject="Deadlock?", body="line 427", msg_id="msg-001")
    again = team.send("alice", "*", type="question", subject="Deadlock?", body="line 427", msg_id="msg-001")
    assert first.seq == again.seq == 1 and again.duplicate and not first.duplicate
    assert [m.msg_id for m in team.mailbox.fetch("bob")] == ["msg-001"]
    assert [m.msg_id for m in team.mailbox.fetch("alice")] == []  # not to its own sender
    assert team.status_for("bob")["unread"] == 1 and team.status_for("alice")["unread"] == 0


# -- Claude Code integration --------------------------------------------------------------------


def test_hooks_inject_the_team_summary_and_send_heartbeats(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(str(project / ".phoenix"))
    team = Team.create(home, "hooks", lead="lead")  # the hooks use the real clock
    for name in ("alice", "bob", "carol"):
        team.join(name)
    tid = team.add_task("Write the parser")["task_id"]
    team.claim(tid, "alice")
    team.send("bob", "alice", subject="hello", body="schema is ready")
    team.send("bob", "*", subject="all", body="standup")
    team.heartbeat("bob")
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    monkeypatch.chdir(project)

    payload = {"session_id": "sess-1", "cwd": str(project), "source": "startup", "hook_event_name": "SessionStart"}
    code, out, _err = _hooks.run(["session-start"], json.dumps(payload).encode())
    assert code == 0 and f"Team {team.id}" not in out  # no binding: nothing about teams

    monkeypatch.setenv("PHOENIX_TEAM", team.id)
    monkeypatch.setenv("PHOENIX_TEAMMATE", "alice")
    code, out, _err = _hooks.run(["session-start"], json.dumps(payload).encode())
    assert code == 0
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert f"=== Team {team.id} (active); you are alice, lead lead ===" in context
    assert f"Your task {tid} [in_progress]: Write the parser" in context
    assert "Unread messages: 2" in context
    online = next(line for line in context.splitlines() if line.startswith("Online:"))
    assert "bob" in online and "carol" in online  # carol joined just now; bob beat
    assert "ZOMBIE" not in context

    assert read_beat(team.heartbeat_dir, "alice") is None
    tool = {
        "session_id": "sess-1",
        "cwd": str(project),
        "hook_event_name": "PostToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": "src/parser.py"},
        "tool_response": {},
    }
    for expected_seq in (1, 2):
        code, _out, err = _hooks.run(["post-tool-use"], json.dumps(tool).encode())
        assert code == 0 and err == ""
        beat = read_beat(team.heartbeat_dir, "alice")
        assert beat is not None and beat["seq"] == expected_seq and beat["session_id"] == "sess-1"
    assert team.liveness("alice")["class"] == "online"

    # The lead silent for 6 minutes: SessionStart tells the teammate it is in ZOMBIE mode.
    monkeypatch.setenv("PHOENIX_NOW_MS", str(team.read()["created_ms"] + 6 * 60_000))
    code, out, _err = _hooks.run(["session-start"], json.dumps(payload).encode())
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "ZOMBIE mode: the lead has been silent for 6 min" in context

    # A team that is not there: one line, no crash.
    monkeypatch.setenv("PHOENIX_TEAM", "gone-team")
    code, out, _err = _hooks.run(["session-start"], json.dumps(payload).encode())
    assert code == 0 and "Team gone-team: could not read the team state" in out


# -- the watchdog -------------------------------------------------------------------------------


def test_watchdog_check_teams_returns_tasks_of_stale_teammates(home: Home, clock: ManualClock) -> None:
    team = make_team(home, clock)
    a = team.add_task("alice's")["task_id"]
    b = team.add_task("bob's")["task_id"]
    team.claim(a, "alice")
    team.claim(b, "bob")
    team.heartbeat("alice")
    team.heartbeat("bob")
    clock.advance(seconds=61 * MINUTE)
    team.heartbeat("bob")

    dry = check_teams(home, clock=clock, act=False)
    rows = {r["name"]: r for r in dry}
    assert rows["alice"]["class"] == "stale" and "action" not in rows["alice"]
    assert rows["bob"]["class"] == "online" and rows["bob"]["task"] == b
    assert task_of(team, a)["assigned_to"] == "alice"

    rows = {r["name"]: r for r in check_teams(home, clock=clock)}
    assert rows["alice"]["action"] == "tasks_returned" and rows["alice"]["returned"] == [a]
    assert "action" not in rows["bob"]
    assert task_of(team, a)["status"] == "pending" and task_of(team, b)["assigned_to"] == "bob"

    # A completed team is skipped; a broken one is reported, not fatal.
    team.transition("consolidating")
    team.complete(force=True)
    assert check_teams(home, clock=clock) == []
    broken = Team.create(home, "broken", lead="lead", clock=clock)
    set_raw_metadata(broken, "{")
    rows_broken = check_teams(home, clock=clock)
    assert len(rows_broken) == 1 and rows_broken[0]["team"] == broken.id
    assert "not valid JSON" in rows_broken[0]["error"]


def test_emergency_recovery_reports_to_the_lead(phome: Home, clock: ManualClock) -> None:
    from phoenix_protocol.services._agent import Agent

    team = Team.create(phome, "recovering", lead="lead", clock=clock)
    team.join("alice")
    agent = Agent.open("alice", home=phome, clock=clock)
    agent.state.set_status("working", "Port the parser")
    info = agent.checkpoints.emergency_recovery("drift: the same Bash call 4 times without progress")
    inbox = team.mailbox.fetch("lead")
    assert [m.subject for m in inbox] == ["Emergency recovery: alice"]
    assert info.name in inbox[0].body and "4 times" in inbox[0].body
    events = [e for e in agent.ops.read()[0] if e["event"] == "emergency_recovery"]
    assert events[-1]["meta"]["reported_to"] == [f"{team.id}:lead"]
    # An agent in no team reports to nobody.
    loner = Agent.open("loner", home=phome, clock=clock)
    loner.state.set_status("working", "x")
    loner.checkpoints.emergency_recovery("manual")
    assert "reported_to" not in [e for e in loner.ops.read()[0] if e["event"] == "emergency_recovery"][-1]["meta"]
