"""Teams on the real PostgreSQL server: killed connections, an unreachable server, the hooks
(issue 8), LISTEN/NOTIFY. The races (fifty claimers, concurrent senders) run on both engines in
``test_team_store_races``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import HOOK_PREFIX
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import StorageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store import _pg
from phoenix_protocol.store._teams import Team

UNREACHABLE = "postgresql://postgres@127.0.0.1:5499/test"


def _team(home: Home, clock: ManualClock, names: list[str]) -> Team:
    team = Team.create(home, "load", lead="lead", team_id="load-1", clock=clock)
    for name in names:
        team.join(name)
    return team


@pytest.fixture
def store(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    return pg_url


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _kill_my_backend(conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(_pg_server(conn), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))


def _pg_server(conn: psycopg.Connection[Any]) -> str:
    info = conn.info
    return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"


def _counter(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT last_seq FROM phx_team_seq WHERE team_id = 'load-1'").fetchone()
        assert row is not None
        return int(row[0])


def test_a_killed_connection_leaves_no_partial_write_and_safe_work_is_retried(
    store: str, home: Home, clock: ManualClock
) -> None:
    _team(home, clock, ["alice"])
    attempts: list[int] = []

    def work(conn: psycopg.Connection[Any]) -> int:
        attempts.append(conn.info.backend_pid)
        conn.execute("UPDATE phx_team_seq SET last_seq = last_seq + 100 WHERE team_id = 'load-1'")
        if len(attempts) == 1:
            _kill_my_backend(conn)  # mid-transaction: the next statement meets a dead connection
        conn.execute("UPDATE phx_team_seq SET last_seq = last_seq + 1 WHERE team_id = 'load-1'")
        return len(attempts)

    assert _pg.transaction(store, work, retry=True) == 2  # ran again on a fresh connection
    assert attempts[0] != attempts[1]
    assert _counter(store) == 101  # the killed attempt left nothing

    attempts.clear()
    with pytest.raises(StorageError, match=r"postgresql://127\.0\.0\.1:5432/test"):
        _pg.transaction(store, work, retry=False)  # unsafe: fails at once, clearly
    assert len(attempts) == 1 and _counter(store) == 101


def test_a_connection_lost_at_commit_is_reported_as_unknown_never_retried(
    store: str, home: Home, clock: ManualClock
) -> None:
    _team(home, clock, ["alice"])
    attempts: list[int] = []

    def work(conn: psycopg.Connection[Any]) -> None:
        attempts.append(1)
        conn.execute("UPDATE phx_team_seq SET last_seq = last_seq + 7 WHERE team_id = 'load-1'")
        _kill_my_backend(conn)  # the COMMIT goes to a dead connection

    with pytest.raises(StorageError, match="outcome is unknown"):
        _pg.transaction(store, work, retry=True)
    assert attempts == [1] and _counter(store) == 0


def test_a_claim_whose_connection_is_killed_is_retried_once_and_applied_once(
    store: str, home: Home, clock: ManualClock
) -> None:
    team = _team(home, clock, ["alice"])
    task = team.add_task("Write the parser")
    killed: list[int] = []
    original = team.store.change

    def change(mutate: Any, **kwargs: Any) -> Any:
        def killing(data: dict[str, Any]) -> Any:
            if not killed:  # the team's row and tasks are locked, nothing is written yet
                with psycopg.connect(_server_only(store), autocommit=True) as other:
                    rows = other.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                        "AND state = 'idle in transaction' AND query LIKE '%FROM phx_tasks%ORDER BY position%'"
                    ).fetchall()
                killed.append(len(rows))
            return mutate(data)

        return original(killing, **kwargs)

    team.store.change = change  # type: ignore[method-assign]
    claimed = team.claim(task["task_id"], "alice")
    assert killed and killed[0] == 1
    assert claimed["assigned_to"] == "alice"
    stored = team.read()
    assert stored["tasks"][0]["status"] == "in_progress"
    assert stored["session_log"]["last_action"] in ("task_assignment", "checkpoint_saved")


def _server_only(url: str) -> str:
    return url.split("?", 1)[0]


def test_an_unreachable_server_is_a_clear_error_naming_it(
    home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_STORE", UNREACHABLE)
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:5499/test"):
        Team.create(home, "x", lead="lead", team_id="x-1", clock=clock)
    assert time.monotonic() - started < 10
    assert not os.path.exists(os.path.join(home.root, "teams"))  # nothing written, not even locally
    proc = subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", "team", "list", "--home", home.root],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PHOENIX_STORE": UNREACHABLE},
    )
    assert proc.returncode not in (0, 2) and "127.0.0.1:5499" in proc.stderr and "Traceback" not in proc.stderr


def _hook_payload(project: Path, event: str, **extra: Any) -> bytes:
    body = {"session_id": "sess-1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "hook_event_name": event}
    return json.dumps({**body, **extra}).encode()


def test_hooks_share_heartbeats_and_survive_an_unreachable_server(
    store: str, project: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Home(str(project / ".phoenix"))
    team = Team.create(home, "hooks", lead="lead", team_id="hooks-1", clock=clock)
    team.join("alice")
    monkeypatch.setenv("PHOENIX_TEAM", "hooks-1")
    monkeypatch.setenv("PHOENIX_TEAMMATE", "alice")
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    payload = _hook_payload(project, "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={})
    assert run(["post-tool-use"], payload)[0] == 0
    beat = team.store.read_beat("alice")
    assert beat is not None and beat["seq"] == 1 and beat["session_id"] == "sess-1"
    assert run(["post-tool-use"], payload)[0] == 0
    again = team.store.read_beat("alice")
    assert again is not None and again["seq"] == 1  # within 30 s: only the local file

    # The server goes away: every hook still exits 0, says so once, and records an ops event.
    monkeypatch.setenv("PHOENIX_STORE", UNREACHABLE)
    os.unlink(_marker(home))
    code, _out, err = run(["post-tool-use"], payload)
    assert code == 0 and err == ""
    # This machine's copy of the log (the server holding the rest is the one gone).
    events = [e for e in Agent.open("default", home=home).ops.log.read()[0] if e["event"] == "hook_failed"]
    assert events and "127.0.0.1:5499" in events[-1]["meta"]["error"]
    proc = subprocess.run(
        [*HOOK_PREFIX, "session-start"],
        input=_hook_payload(project, "SessionStart", source="resume"),
        capture_output=True,
        check=False,
        env={**os.environ, "PHOENIX_STORE": UNREACHABLE},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "could not read the team state" in context and "127.0.0.1:5499" in context


def _marker(home: Home) -> str:
    from phoenix_protocol.integrations._hooks import SYNC_MARK

    return os.path.join(home.agent_dir("default"), SYNC_MARK)


def test_many_threads_share_one_pool(store: str, home: Home, clock: ManualClock) -> None:
    team = _team(home, clock, ["alice"])
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            for _ in range(20):
                team.store.beat("alice", now_ms=clock.now_ms(), session_id=None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=beat) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    last = team.store.read_beat("alice")
    assert last is not None and last["seq"] == 320  # every upsert counted once


def test_the_hook_passes_the_heartbeat_on_from_a_detached_process(
    store: str, project: Path, clock: ManualClock
) -> None:
    home = Home(str(project / ".phoenix"))
    team = Team.create(home, "hooks", lead="lead", team_id="hooks-1", clock=clock)
    team.join("alice")
    env = {**os.environ, "PHOENIX_TEAM": "hooks-1", "PHOENIX_TEAMMATE": "alice"}
    env.pop("PHOENIX_HOOK_INLINE", None)
    payload = _hook_payload(project, "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={})
    proc = subprocess.run([*HOOK_PREFIX, "post-tool-use"], input=payload, capture_output=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    deadline = time.monotonic() + 30
    while team.store.read_beat("alice") is None and time.monotonic() < deadline:
        time.sleep(0.1)
    beat = team.store.read_beat("alice")
    assert beat is not None and beat["session_id"] == "sess-1"


def test_migration_4_backfills_the_unread_counters(store: str, home: Home, clock: ManualClock) -> None:
    team = _team(home, clock, ["alice", "bob"])
    for i in range(9):
        team.send(
            ("alice", "bob", "lead")[i % 3], "*" if i % 4 == 0 else ("bob", "alice")[i % 2], subject=f"{i}", body=""
        )
    box = team.mailbox
    box.mark_delivered("bob", box.fetch("bob", limit=2).through_seq)
    expected = {name: len(box.fetch(name)) for name in ("lead", "alice", "bob")}
    with psycopg.connect(store, autocommit=True) as conn:  # the database as migration 3 left it
        conn.execute(
            "DROP TABLE phx_mailbox_counts; ALTER TABLE phx_team_seq DROP COLUMN broadcasts; "
            "ALTER TABLE phx_cursors DROP COLUMN addressed; "
            "DROP TABLE phx_checkpoint_seq, phx_checkpoints, phx_checkpoint_operations, phx_session_current, "
            "phx_session_log, phx_agent_state, phx_ops_events, phx_identity, phx_tokens, phx_file_imports, "
            "phx_lg_checkpoints, phx_lg_writes, phx_cc_messages, phx_cc_tasks, phx_cc_members, phx_cc_teams, phx_oa_sessions, phx_oa_items; "
            "DROP TABLE phx_memory_terms, phx_memory_vectors; DROP TRIGGER phx_memories_changed ON phx_memories; "
            "DROP FUNCTION phx_memories_changed(); "
            "ALTER TABLE phx_memories DROP COLUMN seq, DROP COLUMN analyzed, DROP COLUMN term_count; "
            "DROP TABLE phx_team_outbox; ALTER TABLE phx_heartbeats DROP COLUMN observed_ms; "
            "DROP INDEX phx_messages_from; "
            "DELETE FROM phx_schema_migrations WHERE version >= 4"
        )
    assert _pg.status(store)["current"] == 3
    from phoenix_protocol.store._schema import MIGRATIONS

    assert [m["version"] for m in _pg.migrate(store)] == [m.version for m in MIGRATIONS if m.version >= 4]
    assert {name: box.unread_count(name) for name in expected} == expected


def test_inbox_follow_wakes_on_notify_without_polling(
    store: str, home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = _team(home, clock, ["alice", "bob"])
    box = team.mailbox
    calls: list[int] = []
    original = box.unread_count

    def counting(reader: str) -> int:
        calls.append(1)
        return original(reader)

    monkeypatch.setattr(box, "unread_count", counting)
    assert box.wait("bob", timeout=1.5) is False
    assert len(calls) == 1  # looked once, then slept on LISTEN: no polling

    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "phoenix_protocol",
            "team",
            "inbox",
            team.id,
            "--as",
            "bob",
            "--follow",
            "--json",
            "--home",
            home.root,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PHOENIX_STORE": store},
    )
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())  # the (empty) inbox at start
        assert first["messages"] == []
        time.sleep(1.0)  # the follower is waiting now
        sent_at = time.monotonic()
        team.send("alice", "bob", subject="wake up", body="")
        line = follower.stdout.readline()
        assert time.monotonic() - sent_at < 5
        assert [m["subject"] for m in json.loads(line)["messages"]] == ["wake up"]
    finally:
        follower.kill()
        follower.communicate(timeout=30)
