"""One conformance suite for agents' checkpoints and sessions, run on both engines: SQLite (the
home's ``phoenix.db``, the default) and PostgreSQL (``PHOENIX_STORE=postgresql://…``, a fresh
schema on the real server per test). Crashes and concurrent writers: ``test_checkpoint_crash``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import run_hook as _hook
from conftest import terminate_transactions_on
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import NotFoundError, SchemaVersionError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import CheckpointOwnershipError, CheckpointStore, encode, parse_name
from phoenix_protocol.store._checkpoints import CheckpointRows


@pytest.fixture
def agent(backend: str, home: Home, clock: ManualClock) -> Agent:
    return Agent.open("zero", home=home, clock=clock)


def store_of(agent: Agent, payload: object = None) -> CheckpointStore:
    store = agent.checkpoints
    if payload is not None:
        store._collectors.clear()
        store.register("payload", lambda ctx: payload)
    return store


def another_process(agent: Agent) -> Agent:
    """The same agent opened afresh (as another process, or another machine on PostgreSQL)."""
    return Agent.open(agent.id, home=agent.home, clock=agent.clock)


def tick(agent: Agent, seconds: float = 1) -> None:
    clock = agent.clock
    assert isinstance(clock, ManualClock)
    clock.advance(seconds)


def test_the_configured_engine_is_used_and_the_body_is_seed_003s_json(backend: str, agent: Agent) -> None:
    store = store_of(agent)
    info = store.create("session", summary="where am I")
    assert isinstance(store.backend, CheckpointRows)
    assert store.backend.db.engine == ("postgresql" if backend == "postgres" else "sqlite")
    path = store.read(info.name).path
    assert path.startswith("postgresql://") if backend == "postgres" else path.startswith(agent.home.root)
    assert not os.path.exists(os.path.join(agent.dir, "checkpoints"))  # no files: rows
    row = store.backend.db.read(
        lambda tx: tx.one("SELECT content, checksum FROM phx_checkpoints WHERE name = ?", (info.name,))
    )
    assert row is not None
    content, checksum = row
    document = json.loads(content)  # the column is JSON text, as `select content ... | jq` reads it
    assert document["summary"] == "where am I" and document["agent_id"] == "zero" and "checksum" not in document
    assert content.startswith('{\n  "kind": "phoenix.checkpoint"') and checksum.startswith("xxh3-128:")


def test_create_list_read_latest(agent: Agent) -> None:
    store = store_of(agent, {"plan": ["a", "b"], "note": "ünïcode ✓"})
    names = []
    for i in range(4):
        tick(agent)
        names.append(store.create("session", summary=f"number {i}").name)
    assert [parse_name(n)[1] for n in names if parse_name(n)] == [1, 2, 3, 4]  # type: ignore[index]
    other = another_process(agent).checkpoints
    assert [e.name for e in other.entries()] == names[::-1]
    assert [e.label for e in other.entries(limit=2)] == ["number 3", "number 2"]
    latest, problems = other.latest()
    assert latest is not None and latest.name == names[-1] and problems == []
    assert latest.section("payload") == {"plan": ["a", "b"], "note": "ünïcode ✓"}
    assert other.read(names[0]).summary == "number 0"
    with pytest.raises(NotFoundError):
        other.read(names[0].replace("-00000001_", "-00000099_"))
    with pytest.raises(UsageError):
        other.read("../state.json")


def test_secrets_never_reach_the_store(agent: Agent) -> None:
    store = store_of(agent, {"env": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"})
    info = store.create("session", summary="deploy with password=Hunter2Secret!")
    raw = store.backend.read(info.name)
    assert raw is not None and b"wJalrXUtnFEMI" not in raw.content and b"Hunter2Secret" not in raw.content


def test_routine_and_session_retention(agent: Agent) -> None:
    agent = Agent.open("zero", home=agent.home, clock=agent.clock, config_overrides={"keep_session_checkpoints": 2})
    store = store_of(agent, {"x": 1})
    for _ in range(5):
        tick(agent)
        store.create("routine")
        store.create("session")
    kinds = [e.checkpoint_type for e in another_process(agent).checkpoints.entries()]
    assert kinds.count("routine") == agent.config.keep_routine and kinds.count("session") == 2
    seqs = [e.seq for e in store.entries()]
    assert seqs == sorted(seqs, reverse=True) and seqs[0] == 10


def test_pre_operation_lifecycle_and_recovery_age(agent: Agent) -> None:
    store = store_of(agent, {"x": 1})
    with store.pre_operation("migrate db"):
        assert [e.checkpoint_type for e in store.entries()] == ["pre-operation"]
    assert store.entries("pre-operation") == []  # released on success
    with pytest.raises(RuntimeError), store.pre_operation("drop table"):
        raise RuntimeError("boom")
    kept = store.entries("pre-operation")
    assert len(kept) == 1 and kept[0].label == "drop table"  # kept on failure
    assert store.backend.completed_operations() and len(store.backend.completed_operations()) == 1

    store.create("recovery", summary="old")
    tick(agent, 8 * 86_400)
    store.create("recovery", summary="new")
    assert [e.label for e in store.entries("recovery")] == ["new"]
    assert store.prune() == []


def test_a_seq_is_never_reused(agent: Agent) -> None:
    store = store_of(agent, {"x": 1})
    op = store.begin_operation("risky")
    store.end_operation(op.id, success=True)  # deletes the newest checkpoint (seq 1)
    assert store.entries() == []
    assert store.create("session").seq == 2
    assert another_process(agent).checkpoints.create("session").seq == 3


def test_restore_applies_the_sections(agent: Agent) -> None:
    agent.state.set_status("working", "the task before the crash")
    info = agent.checkpoints.create("session", summary="end of the day")
    fresh = another_process(agent)
    result = fresh.checkpoints.restore()
    assert result.checkpoint.name == info.name and result.problems == []
    assert result.checkpoint.section("current_task")["context"]["description"] == "the task before the crash"


def test_a_checkpoint_is_found_by_its_number_as_well_as_by_its_name(agent: Agent) -> None:
    store = store_of(agent)
    first = store.create("routine", summary="one")
    tick(agent)
    second = store.create("session", summary="two")
    store.end_operation(store.begin_operation("gone").id, success=True)  # its checkpoint's number is gone
    fresh = another_process(agent).checkpoints
    assert fresh.resolve(str(first.seq)) == first.name and fresh.resolve(f"#{second.seq}") == second.name
    assert fresh.resolve(second.name) == second.name
    assert fresh.read(f"#{first.seq}").summary == "one"
    assert fresh.restore(str(second.seq)).checkpoint.name == second.name
    for missing in ("0", "3", "#99"):
        with pytest.raises(NotFoundError, match="no checkpoint #"):
            fresh.read(missing)
    for wrong in ("#", "-1", "1.0", "\u0661", "x1"):  # "\u0661": a digit, but not an ASCII one
        with pytest.raises(UsageError, match="not a checkpoint name"):
            fresh.resolve(wrong)


def test_a_session_round_trip(agent: Agent) -> None:
    started = _sessions.begin(agent, "s1")
    assert started.checkpoint is None
    agent.state.set_status("working", "write the report")
    info = _sessions.end(agent, "s1", summary="report half done")
    again = _sessions.begin(another_process(agent), "s2")
    assert again.checkpoint is not None and again.checkpoint.name == info.name
    assert again.checkpoint.summary == "report half done"


def test_emergency_recovery_takes_a_recovery_checkpoint(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    info = agent.checkpoints.emergency_recovery("drift detected")
    assert info.checkpoint_type == "recovery"
    assert another_process(agent).checkpoints.latest("recovery")[0] is not None


UNREACHABLE = "postgresql://postgres@127.0.0.1:5499/test"


def test_hooks_checkpoint_to_postgresql_and_survive_it_being_gone(
    project: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SessionEnd writes the session checkpoint to the server, the next SessionStart (a fresh
    process, as on another machine) restores from it; with the server gone both still exit 0."""
    env = {"PHOENIX_STORE": pg_url}
    assert _hook(project, "session-start", "SessionStart", env, source="startup").returncode == 0
    ended = _hook(project, "session-end", "SessionEnd", env, reason="logout")
    assert ended.returncode == 0, ended.stderr
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    with monkeypatch.context() as patch:
        patch.setenv("PHOENIX_STORE", pg_url)
        session = Agent.open("default", home=agent.home).checkpoints.latest("session")[0]
    assert session is not None
    assert not os.path.exists(os.path.join(agent.dir, "checkpoints", session.name))  # on the server only
    started = _hook(project, "session-start", "SessionStart", env, source="resume")
    assert started.returncode == 0, started.stderr
    assert "Phoenix Protocol brief (resume)" in json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    # The context names no checkpoint (bookkeeping: docs/recovery.md); the ops log says which it restored.
    restored = [e["meta"]["name"] for e in agent.ops.read()[0] if e["event"] == "checkpoint_restored"]
    assert restored == [session.name]

    gone = _hook(project, "session-end", "SessionEnd", {"PHOENIX_STORE": UNREACHABLE}, reason="logout")
    assert gone.returncode == 0 and len(gone.stderr.decode().strip().splitlines()) == 1
    assert b"127.0.0.1:5499" in gone.stderr
    events = [e for e in agent.ops.read()[0] if e["event"] == "hook_failed"]
    assert events and "127.0.0.1:5499" in events[-1]["meta"]["error"]


def test_the_cli_on_either_store(
    backend: str, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.cli._main import cli

    monkeypatch.chdir(project)

    def phx(*args: str) -> tuple[int, dict[str, object]]:
        capsys.readouterr()
        code = cli([*args, "--json"])
        return code, json.loads(capsys.readouterr().out)

    assert cli(["state", "working", "Ship the parser"]) == 0
    code, _made = phx("checkpoint", "--summary", "parser half done")
    assert code == 0
    code, listed = phx("checkpoint", "list")
    assert code == 0 and [c["label"] for c in listed["checkpoints"]] == ["parser half done"]  # type: ignore[attr-defined]
    code, shown = phx("checkpoint", "show", "latest")
    assert code == 0 and shown["checkpoint"]["summary"] == "parser half done"  # type: ignore[index]
    code, restored = phx("restore")
    assert code == 0 and restored["checkpoint"] == listed["checkpoints"][0]["name"]  # type: ignore[index]
    assert not os.path.exists(os.path.join(project, ".phoenix/agents/default/checkpoints"))
    exported = project / "exported"
    code, written = phx("checkpoint", "export", str(exported))
    assert code == 0 and written["written"] == [listed["checkpoints"][0]["name"]]  # type: ignore[index]
    (file,) = exported.iterdir()
    assert file.name == listed["checkpoints"][0]["name"]  # type: ignore[index]
    assert json.loads(file.read_text())["summary"] == "parser half done" and oct(file.stat().st_mode)[-3:] == "600"


def test_listing_and_latest_go_past_the_first_page(agent: Agent) -> None:
    store = store_of(agent, {"x": 1})
    first = store.create("routine", summary="the only routine one")
    for i in range(45):
        tick(agent)
        store.create("session", summary=f"s{i}")
    seqs = [e.seq for e in another_process(agent).checkpoints.entries()]
    assert seqs == list(range(46, 0, -1))
    assert [e.seq for e in store.entries(limit=12)] == list(range(46, 34, -1))
    assert [e.seq for e in store.entries("routine")] == [first.seq]
    latest, problems = store.latest("routine")
    assert latest is not None and latest.name == first.name and problems == []


def test_sessions_are_listed_and_carry_their_memories_on_either_store(backend: str, agent: Agent) -> None:
    _sessions.begin(agent, "s1")
    _sessions.record_memory(agent, "mem-0001")
    _sessions.record_memory(agent, "mem-0002")
    _sessions.record_recall(agent, "timer drift")
    tick(agent, 600)
    ended = _sessions.end(agent, "s1", summary="first")
    recent = agent.checkpoints.read(ended.name).section("recent_memories")
    assert recent["memory_ids"] == ["mem-0001", "mem-0002"] and recent["last_recall_query"] == "timer drift"
    elsewhere = another_process(agent)
    _sessions.begin(elsewhere, "s2")
    listed = _sessions.list_sessions(another_process(agent))
    assert [(s["session_id"], s["status"], s["summary"], s["checkpoint"]) for s in listed] == [
        ("s1", "ended", "first", ended.name),
        ("s2", "open", None, None),
    ]
    assert listed[0]["duration_seconds"] is not None and listed[1]["restored_from"] == ended.name
    assert _sessions.read_current(agent)["session_id"] == "s2"  # type: ignore[index]
    assert not os.path.exists(os.path.join(agent.dir, "sessions"))  # rows, on either engine


def test_a_session_that_never_ended_is_listed_as_interrupted_and_a_resumed_one_as_a_new_row(
    backend: str, agent: Agent
) -> None:
    _sessions.begin(agent, "crashed")  # killed before SessionEnd: no end record
    tick(agent, 60)
    _sessions.begin(agent, "s2")
    tick(agent, 60)
    _sessions.end(agent, "s2", summary="first part")
    tick(agent, 60)
    _sessions.end(agent, "s2", summary="second checkpoint")  # a second end updates its row
    tick(agent, 60)
    _sessions.begin(agent, "s2")  # the same conversation resumed
    listed = _sessions.list_sessions(another_process(agent))
    assert [(s["session_id"], s["status"], s["summary"]) for s in listed] == [
        ("crashed", "interrupted", None),
        ("s2", "ended", "second checkpoint"),
        ("s2", "open", None),
    ]
    assert listed[0]["ended_at"] is None and listed[1]["duration_seconds"] == 120
    assert listed[2]["started_at"] > listed[1]["ended_at"]


def test_session_checkpoints_taken_outside_any_session_are_rows_of_their_own(backend: str, agent: Agent) -> None:
    _sessions.end(agent, summary="first, no session started")
    tick(agent)
    _sessions.end(agent, summary="second")
    listed = _sessions.list_sessions(another_process(agent))
    assert [(s["session_id"], s["status"], s["summary"]) for s in listed] == [
        ("unknown", "ended", "first, no session started"),
        ("unknown", "ended", "second"),
    ]


def test_a_damaged_row_is_reported_and_skipped(agent: Agent) -> None:
    store = store_of(agent, {"x": 1})
    good = store.create("session", summary="good")
    tick(agent)
    bad = store.create("session", summary="damaged later")
    store.backend.db.transaction(
        lambda tx: tx.execute(
            "UPDATE phx_checkpoints SET content = replace(content, 'damaged later', 'damaged LATER') WHERE name = ?",
            (bad.name,),
        )
    )
    latest, problems = another_process(agent).checkpoints.latest()
    assert latest is not None and latest.name == good.name
    assert len(problems) == 1 and bad.name in problems[0] and "checksum" in problems[0]
    assert problems[0].startswith(store.backend.db.where)  # named where it is
    assert bad.name in {e.name for e in store.entries()}  # reported, never dropped silently


def put_body(store: CheckpointStore, name: str, envelope: dict[str, Any]) -> None:
    """Replace a checkpoint's body with ``envelope``, its checksum a valid one (as a newer Phoenix,
    or another agent's copy, would have written it)."""
    content, checksum = encode(envelope)
    store.backend.db.transaction(
        lambda tx: tx.execute(
            "UPDATE phx_checkpoints SET content = ?, checksum = ? WHERE name = ?", (content.decode(), checksum, name)
        )
    )


def test_a_checkpoint_of_a_newer_schema_is_refused_and_another_agents_is_not_restored(agent: Agent) -> None:
    store = store_of(agent, {"x": 1})
    old = store.create("session", summary="readable")
    tick(agent)
    newer = store.create("session", summary="from the future")
    put_body(store, newer.name, {**store.read(newer.name).data, "schema_version": 99})
    with pytest.raises(SchemaVersionError, match="newer Phoenix"):
        store.read(newer.name)
    latest, problems = another_process(agent).checkpoints.latest()
    assert latest is not None and latest.name == old.name and "newer Phoenix" in problems[0]
    put_body(store, old.name, {**store.read(old.name).data, "agent_id": "someone-else"})
    with pytest.raises(CheckpointOwnershipError):
        store.restore(old.name)
    assert store.latest()[0] is None
    with pytest.raises(CheckpointOwnershipError):
        store.read(old.name.replace("zero_", "someone-else_"))


def test_a_checkpoint_write_whose_connection_is_killed_is_retried_once_and_written_once(
    home: Home, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg_terminate_backend`` while the write's transaction holds the agent's lock (after the
    catalogue was read, before the insert): nothing of the first attempt remains, the write runs
    again on a fresh connection, and exactly one checkpoint is stored."""
    import psycopg

    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    agent = Agent.open("zero", home=home, clock=clock)
    store = store_of(agent, {"x": 1})
    first = store.create("session")
    killed: list[int] = []
    original = store._retain

    def retain_then_kill(*args: Any, **kwargs: Any) -> Any:
        if not killed:
            killed.append(terminate_transactions_on(pg_url, "phx_checkpoints"))
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "_retain", retain_then_kill)
    second = store.create("session", summary="after the kill")
    assert killed == [1]
    assert second.seq == first.seq + 1
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT seq, name FROM phx_checkpoints WHERE agent_id = 'zero' ORDER BY seq").fetchall()
        counter = conn.execute("SELECT next_seq FROM phx_checkpoint_seq WHERE agent_id = 'zero'").fetchone()
    assert [r[0] for r in rows] == [first.seq, second.seq] and counter == (second.seq + 1,)
    assert another_process(agent).checkpoints.latest()[0].summary == "after the kill"  # type: ignore[union-attr]


def test_an_operation_fails_once_and_its_outcome_is_known(agent: Agent) -> None:
    store = store_of(agent)
    kept, open_one = store.begin_operation("drop table"), store.begin_operation("migrate db")
    assert store.operation_outcomes() == {}
    store.end_operation(kept.id, success=False, error="lock timeout")
    with pytest.raises(UsageError, match="already ended as failed"):
        store.end_operation(kept.id, success=False)
    events = [e["event"] for e in agent.ops.read()[0]]
    assert events.count("operation_failed") == 1
    outcomes = another_process(agent).checkpoints.operation_outcomes()
    assert outcomes == {kept.id: "failed"} and open_one.id not in outcomes
    store.end_operation(kept.id, success=True)  # a success after all releases the checkpoint kept
    assert store.operation_outcomes()[kept.id] == "succeeded"
    assert [e.operation_id for e in store.entries("pre-operation")] == [open_one.id]
    assert store.backend.completed_operations() == {kept.id}
