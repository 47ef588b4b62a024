"""Sessions from Python: ``agent.sessions.begin``/``end`` and ``with agent.session()`` do what
``phx restore`` and the Claude Code hooks do (the session in the state, ``restore_on_start``,
the identity, the start record; the session checkpoint per ``checkpoint_on_exit``, its summary
and duration, the end record)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import phoenix_protocol
from phoenix_protocol import Agent, Home, ManualClock, SessionStart, SessionStore, StorageError
from phoenix_protocol.services import _sessions


def opened(home: Home, clock: ManualClock, toml: str = "") -> Agent:
    if toml:
        os.makedirs(home.root, exist_ok=True)
        Path(home.root, "phoenix.toml").write_text(toml)
    return Agent.open("py", home=home, clock=clock)


def test_the_names_a_typed_user_needs_are_public() -> None:
    for name in (
        "SessionStore",
        "SessionStart",
        "CheckpointStore",
        "CheckpointInfo",
        "CheckpointOwnershipError",
        "CollectContext",
        "IdentityCoreError",
        "IdentityStore",
    ):
        assert name in phoenix_protocol.__all__ and getattr(phoenix_protocol, name).__doc__


def test_a_session_begun_and_ended_from_python_is_a_whole_session(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock)
    assert isinstance(agent.sessions, SessionStore)
    agent.identity.set("state.current_focus", "ship 1.2")
    started = agent.sessions.begin("s-1")
    state = agent.state.read()
    assert isinstance(started, SessionStart) and started.session_id == "s-1" and started.problems == []
    assert state.session_id == "s-1" and state.status == "working" and state.pid == os.getpid()
    assert agent.identity.read().mutable["accumulated_experience"] == 1
    assert agent.sessions.current()["session_id"] == "s-1"  # type: ignore[index]
    agent.state.set_status("working", "Port the scheduler")
    clock.advance(seconds=600)
    info = agent.sessions.end(summary="scheduler ported")
    assert info is not None
    meta = agent.checkpoints.read(info.name).data["metadata"]
    # without the state's session these were None (begin() alone did not start it)
    assert (meta["session_id"], meta["started_at"], meta["duration_seconds"]) == ("s-1", started.started_at, 600)
    assert agent.state.read().status == "idle" and agent.read_brief()
    [row] = agent.sessions.entries()
    assert row["status"] == "ended" and row["duration_seconds"] == 600 and row["summary"] == "scheduler ported"


def test_begin_follows_restore_on_start(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock, "[paif_config.session_protocol]\nrestore_on_start = false\n")
    agent.checkpoints.create("session", summary="yesterday")
    started = agent.sessions.begin()
    assert started.checkpoint is None and started.restore is None  # restored anyway before
    assert agent.ops.read()[0][-1]["event"] == "session_begun"
    assert agent.sessions.begin(restore=True).checkpoint is not None  # asked for: restored
    on = opened(Home(home.root + "-on"), clock)
    on.checkpoints.create("session", summary="yesterday")
    assert on.sessions.begin().checkpoint is not None  # the default setting restores


def test_end_follows_checkpoint_on_exit(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock, "checkpoint_on_exit = false\n")
    agent.sessions.begin("s-1")
    assert agent.sessions.end() is None
    assert agent.checkpoints.entries("session") == [] and agent.state.read().status == "idle"
    agent.sessions.begin("s-2")
    assert agent.sessions.end(checkpoint=True) is not None  # asked for: taken


def test_ending_a_session_the_state_no_longer_holds_takes_no_checkpoint(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock)
    agent.sessions.begin("s-1")
    agent.sessions.begin("s-2")
    assert agent.sessions.end("s-1") is None  # as the SessionEnd hook of a stale session
    assert agent.state.read().status == "working"


def test_the_session_block_ends_the_session_with_its_summary(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock)
    agent.checkpoints.create("session", summary="yesterday")
    with agent.session() as started:
        assert started.checkpoint is not None and agent.state.read().status == "working"
        clock.advance(seconds=30)
        started.summary = "did the thing"
    [row] = agent.sessions.entries()
    assert row["session_id"] == started.session_id and row["status"] == "ended"
    assert row["summary"] == "did the thing" and row["duration_seconds"] == 30


def test_the_session_block_ends_the_session_when_it_raises(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock)
    with pytest.raises(RuntimeError, match="boom"), agent.session(summary="stopped half-way") as started:
        raise RuntimeError("boom")
    [row] = agent.sessions.entries()
    assert row["session_id"] == started.session_id and row["status"] == "ended"
    assert row["summary"] == "stopped half-way" and agent.state.read().status == "idle"
    ends = [e for e in agent.ops.read()[0] if e["event"] == "session_end"]
    assert ends[-1]["meta"]["reason"] == "exception"


def test_a_failure_to_end_the_session_is_a_note_on_the_blocks_exception(
    home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = opened(home, clock)

    def refuse(*args: object, **kwargs: object) -> None:
        raise StorageError("disk full")

    monkeypatch.setattr(_sessions, "end_session", refuse)
    with pytest.raises(RuntimeError) as info, agent.session():
        raise RuntimeError("boom")
    assert "could not end session" in "".join(info.value.__notes__) and "disk full" in info.value.__notes__[0]
    with pytest.raises(StorageError), agent.session():  # a block that succeeded: the failure is raised
        pass


def test_an_invalid_session_id_is_refused_before_anything_is_written(
    home: Home, clock: ManualClock, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``phx restore --session`` went through the same start: it wrote the bad id into
    state.json before begin() refused it."""
    from phoenix_protocol import InvalidIdError
    from phoenix_protocol.cli._main import cli

    agent = opened(home, clock)
    with pytest.raises(InvalidIdError):
        agent.sessions.begin("bad id!")
    assert not os.path.exists(agent.state.path)
    monkeypatch.chdir(project)
    assert cli(["restore", "--session", "bad id!", "--json"]) == 2
    assert "InvalidIdError" in capsys.readouterr().out
    assert not (project / ".phoenix/agents/default/state.json").exists()


def test_a_session_id_that_is_a_secret_is_refused_and_never_shown(
    home: Home, clock: ManualClock, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session id is stored and logged in clear: one that is a credential is refused, in the
    library, the CLI and a team's roster, and the refusal does not repeat it."""
    from phoenix_protocol import InvalidIdError
    from phoenix_protocol.cli._main import cli

    secret = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"
    agent = opened(home, clock)
    with pytest.raises(InvalidIdError, match="looks like a secret") as refused:
        agent.sessions.begin(secret)
    assert secret not in str(refused.value)
    assert not os.path.exists(agent.state.path)
    monkeypatch.chdir(project)
    assert cli(["restore", "--session", secret, "--json"]) == 2
    out = capsys.readouterr().out
    assert "looks like a secret" in out and secret not in out
    assert not (project / ".phoenix/agents/default/state.json").exists()
    from phoenix_protocol.store._teams import Team

    team = Team.create(home, "Release", lead="lead", clock=clock)
    with pytest.raises(InvalidIdError, match="looks like a secret"):
        team.join("dev", session_id=secret)
    # Found in review: the other ways in (ending a session, the state's own session calls, a
    # teammate's heartbeat, a lead's resume) took it as it was.
    team.join("dev")
    from phoenix_protocol.services._team_resume import resume

    for call in (
        lambda: agent.sessions.end(secret),
        lambda: agent.state.start_session(secret),
        lambda: agent.state.end_session(secret),
        lambda: team.heartbeat("dev", session_id=secret),
        lambda: resume(home, team.id, session_id=secret, clock=clock),
    ):
        with pytest.raises(InvalidIdError, match="looks like a secret"):
            call()
    stored = [p for p in Path(home.root).rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert stored == []


def test_the_default_summary_counts_what_remains(home: Home, clock: ManualClock) -> None:
    for notes, remains in ((0, "0 open items remain"), (1, "1 open item remains"), (2, "2 open items remain")):
        agent = Agent.open(f"py{notes}", home=home, clock=clock)
        agent.sessions.begin()
        agent.state.set_status("working", "Port the scheduler")
        for i in range(notes):
            agent.state.add_note("next_action", f"step {i}")
        info = agent.sessions.end()
        assert info is not None and info.label == f"Port the scheduler ({remains})"


@contextlib.contextmanager
def held_by_another_thread(path: str) -> Iterator[None]:
    """``path``'s lock held by another thread (threads of a process take turns at a lock, as
    processes do) while the block runs."""
    from phoenix_protocol.core._durable import FileLock

    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with FileLock(path, 1.0):
            held.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        yield
    finally:
        done.set()
        holder.join()


@contextlib.contextmanager
def held_in_the_database(agent: Agent) -> Iterator[None]:
    """The agent's write lock in the database (its checkpoints' and sessions') held by another
    thread, on its own connection, while the block runs."""
    from phoenix_protocol.store._checkpoints import lock_agent

    held, done = threading.Event(), threading.Event()

    def work(tx: Any) -> None:
        lock_agent(tx, agent.id)
        held.set()
        done.wait(10)

    holder = threading.Thread(target=lambda: agent.checkpoints.backend.db.transaction(work))
    holder.start()
    try:
        assert held.wait(5)
        yield
    finally:
        done.set()
        holder.join()


def test_a_session_start_takes_the_open_session_records_lock(home: Home, clock: ManualClock) -> None:
    """A memory recorded while a new session starts must not write the old session's record back:
    the start changes the record under the lock every change takes."""
    agent = Agent.open("py", home=home, clock=clock, config_overrides={"lock_timeout": 0.2})
    agent.sessions.begin("s-1")
    with held_in_the_database(agent), pytest.raises(StorageError):
        agent.sessions.begin("s-2")
    assert agent.sessions.current()["session_id"] == "s-1"  # type: ignore[index]


def test_the_identity_copied_at_a_session_start_is_redacted(home: Home, clock: ManualClock) -> None:
    agent = opened(home, clock)
    agent.identity.set("state.current_focus", "ship")  # written and sealed
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    text = Path(agent.dir, "identity.yaml").read_text()
    Path(agent.dir, "identity.yaml").write_text(text + f"  notes: deploy with {token}\n")
    assert agent.identity.read().mutable["notes"].endswith(token)  # the mutable part may be edited by hand
    agent.sessions.begin("s-1")
    written = _sessions.storage(agent).current_text() or ""
    assert token not in written and "deploy with" in written


def test_ending_a_session_on_a_damaged_state_still_takes_its_checkpoint(home: Home, clock: ManualClock) -> None:
    from phoenix_protocol import CorruptStateError

    agent = opened(home, clock)
    agent.sessions.begin("s-1")
    Path(agent.state.path).write_bytes(b'{"schema_version": 1, "agent_id": "py", "sta')  # torn
    with pytest.raises(CorruptStateError) as raised:
        agent.sessions.end("s-1", summary="parser written")
    [info] = agent.checkpoints.entries()
    assert info.checkpoint_type == "session" and info.label == "parser written"
    assert any(info.name in note for note in raised.value.__notes__)
    [row] = agent.sessions.entries()
    assert (row["session_id"], row["status"]) == ("s-1", "ended")


def test_a_damaged_state_does_not_checkpoint_a_session_a_newer_one_replaced(home: Home, clock: ManualClock) -> None:
    from phoenix_protocol import CorruptStateError

    agent = opened(home, clock)
    agent.sessions.begin("s-1")
    agent.sessions.begin("s-2")
    Path(agent.state.path).write_bytes(b"{")
    with pytest.raises(CorruptStateError):
        agent.sessions.end("s-1")
    assert agent.checkpoints.entries() == []


def test_ending_a_session_on_a_locked_state_waits_for_the_lock_once(home: Home, clock: ManualClock) -> None:
    """The SessionEnd hook has about 1.5 s in all: a state.json held locked costs the session's
    end one lock timeout, then the checkpoint and the end record follow at once (the checkpoint's
    note of its time in the state waits MARK_LOCK_TIMEOUT at most, not a second timeout)."""
    import time

    from phoenix_protocol.core._errors import LockTimeoutError
    from phoenix_protocol.services._checkpoints import MARK_LOCK_TIMEOUT

    agent = Agent.open("py", home=home, clock=clock, config_overrides={"lock_timeout": 1.0})
    agent.sessions.begin("s-1")
    with held_by_another_thread(agent.state.path):
        started = time.monotonic()
        with pytest.raises(LockTimeoutError):
            agent.sessions.end("s-1", summary="ended while locked")
        elapsed = time.monotonic() - started
    assert elapsed < 1.0 + MARK_LOCK_TIMEOUT + 0.6  # a second full timeout would make it 2 s and more
    [row] = agent.sessions.entries()
    assert row["status"] == "ended" and row["summary"] == "ended while locked"
