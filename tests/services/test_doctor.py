"""phx doctor: rebuild a corrupt state.json from the ops log, repair torn logs, tighten modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import change_checkpoint, plant_checkpoint
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._durable import host_tag
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._doctor import (
    TEMP_UNKNOWN_WRITER_AGE_MS,
    abandoned_temp,
    check_agent,
    check_home,
    rebuild_state,
)

PHX = str(Path(sys.executable).parent / "phx")


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    assert proc.wait(timeout=60) == 0
    return proc.pid


def _history(agent: Agent) -> None:
    agent.state.start_session("s1", process={"pid": 4242, "start_time": 1.5, "host": "box"})
    agent.state.set_status("working", "Port the scheduler to asyncio", session_id="s1")
    agent.state.add_note("open_loop", "Timer drift under load")
    agent.state.add_note("next_action", "Benchmark with 1k timers")
    agent.state.add_note("next_action", "Old idea")
    agent.state.resolve_note(3)
    agent.state.heartbeat(session_id="s1", tool="Bash")


def test_rebuild_recovers_what_the_log_knows(agent: Agent) -> None:
    _history(agent)
    before = agent.state.read()
    Path(agent.state.path).write_text('{"status": "work')  # torn by hand
    findings = check_agent(agent)
    repaired = [f for f in findings if f.repaired]
    assert repaired and "rebuilt from" in repaired[-1].message and "ops.jsonl" in repaired[-1].message
    after = agent.state.read()
    assert after.status == before.status == "working"
    assert after.current_task == "Port the scheduler to asyncio"
    assert after.session_id == "s1" and after.pid == 4242
    assert [n["text"] for n in after.open_loops] == ["Timer drift under load"]
    assert [n["text"] for n in after.next_actions] == ["Benchmark with 1k timers"]
    assert after.heartbeat_seq == 1
    kept = [n for n in os.listdir(agent.dir) if n.startswith("state.json.corrupt-")]
    assert len(kept) == 1 and Path(agent.dir, kept[0]).read_text() == '{"status": "work'
    events, _ = agent.ops.read()
    assert events[-1]["event"] == "state_rebuilt"


def test_a_lost_state_json_is_rebuilt_from_the_log_never_started_again(agent: Agent) -> None:
    """state.json deleted (or lost with a disk) while the ops log holds its history: readers see
    the rebuilt state, the next write writes it and logs ``state_rebuilt``; numbering goes on."""
    _history(agent)
    before = agent.state.read()
    os.unlink(agent.state.path)
    seen = agent.state.read()  # a reader: rebuilt, nothing written
    assert not os.path.exists(agent.state.path)
    assert (seen.status, seen.current_task, seen.session_id) == ("working", before.current_task, "s1")
    assert agent.state.read_or_none() is not None
    _state, number = agent.state.add_note("open_loop", "Written after the loss")
    assert number == 4  # not 1 again: notes 1-3 were given before the loss
    after = agent.state.read()
    assert [n["text"] for n in after.open_loops] == ["Timer drift under load", "Written after the loss"]
    assert [n["text"] for n in after.next_actions] == ["Benchmark with 1k timers"]
    events, _ = agent.ops.read()
    rebuilt = [e for e in events if e["event"] == "state_rebuilt"]
    assert len(rebuilt) == 1 and rebuilt[0]["status"] == "warn" and rebuilt[0]["meta"]["reason"] == "missing"
    assert events[-1]["event"] == "note_added"  # logged after the rebuild it needed


def test_an_agent_whose_log_holds_no_state_starts_fresh(agent: Agent) -> None:
    agent.record("note", "ok", {"what": "an event that is no state change"})
    agent.state.add_note("open_loop", "First")
    events, _ = agent.ops.read()
    assert "state_rebuilt" not in [e["event"] for e in events]
    assert check_agent(agent) and not [f for f in check_agent(agent) if "missing" in f.message]


def test_doctor_reports_and_writes_a_lost_state_json(agent: Agent) -> None:
    _history(agent)
    os.unlink(agent.state.path)
    found = [f for f in check_agent(agent, repair=False) if f.path == agent.state.path]
    assert [f.level for f in found] == ["error"] and "missing, though the ops log holds its history" in found[0].message
    assert not os.path.exists(agent.state.path)
    fixed = [f for f in check_agent(agent) if f.path == agent.state.path]
    assert [(f.level, f.repaired) for f in fixed] == [("warn", True)] and "rebuilt from the log" in fixed[0].message
    assert agent.state.read().current_task == "Port the scheduler to asyncio" and os.path.exists(agent.state.path)
    assert [f.level for f in check_agent(agent) if f.path == agent.state.path] == ["ok"]


def test_a_checkpoint_after_a_lost_state_json_holds_the_state(agent: Agent) -> None:
    """Found in review: the checkpoint taken after the loss held an empty state, so the next
    restore from it brought nothing back."""
    _history(agent)
    os.unlink(agent.state.path)
    info = agent.checkpoints.create("routine")
    checkpoint = agent.checkpoints.read(info.name)
    assert checkpoint.section("phoenix_state")["current_task"] == "Port the scheduler to asyncio"
    assert [n["text"] for n in checkpoint.section("phoenix_state")["open_loops"]] == ["Timer drift under load"]


def test_a_rebuilt_state_keeps_the_clocks_of_time_based_checkpoints(agent: Agent, clock: ManualClock) -> None:
    """Found in review: a state rebuilt while working had no work clock, so no routine
    checkpoint or forced refresh was ever due again in that session."""
    agent.state.start_session("s1")
    started = agent.state.read().work_started_ms
    clock.advance(31 * 60)
    due: list[str] = []
    agent.state.heartbeat(session_id="s1", tool="Bash", due=due)
    assert due == ["routine"]
    claimed = agent.state.read().last_checkpoint_ms
    os.unlink(agent.state.path)
    rebuilt = agent.state.read()
    assert (rebuilt.status, rebuilt.work_started_ms, rebuilt.last_checkpoint_ms) == ("working", started, claimed)
    clock.advance(31 * 60)
    again: list[str] = []
    agent.state.heartbeat(session_id="s1", tool="Bash", due=again)
    assert again == ["routine"]


def test_a_lost_state_is_rebuilt_once_per_change_of_the_log_and_never_from_half_of_it(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers do not write the rebuilt state: the process keeps it until the log changes. A
    rotation while the log is read (another process appending) makes it read the log again."""
    from phoenix_protocol.agent import _seqlog

    _history(agent)
    os.unlink(agent.state.path)
    reads: list[str] = []
    original = _seqlog.SeqLog._read_file

    def counted(self: _seqlog.SeqLog, path: str) -> Any:
        reads.append(path)
        return original(self, path)

    monkeypatch.setattr(_seqlog.SeqLog, "_read_file", counted)
    for _ in range(3):
        assert agent.state.read().current_task == "Port the scheduler to asyncio"
    assert len(reads) == 1
    monkeypatch.setattr(_seqlog.SeqLog, "_read_file", original)
    log = agent.ops.log.path
    agent.state.add_note("open_loop", "Kept in the newer file")  # state.json written again...
    os.replace(log, log + ".1")  # ...the log rotated (by hand here), and the state lost again
    agent.state.add_note("open_loop", "Only in the newest file")
    os.unlink(agent.state.path)
    other = Agent.open(agent.id, home=agent.home, clock=agent.clock)
    rotated: list[bool] = []

    def rotating(self: _seqlog.SeqLog, path: str) -> Any:
        yield from original(self, path)
        if not rotated:  # another process's append rotates the log after the oldest file was read
            rotated.append(True)
            os.replace(log + ".1", log + ".2")
            os.replace(log, log + ".1")
            other.record("note", "ok", {"after": "rotation"})

    monkeypatch.setattr(_seqlog.SeqLog, "_read_file", rotating)
    agent.state.add_note("next_action", "Written after the loss")
    assert rotated
    state = agent.state.read()
    assert [n["text"] for n in state.open_loops] == [
        "Timer drift under load",
        "Kept in the newer file",
        "Only in the newest file",
    ]


def test_doctor_leaves_the_postgresql_record_alone_when_the_copy_lost_its_state(
    home: Home, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: on the PostgreSQL store the server's record is the state; a copy that
    lost its state.json is not "missing" state, and must not overwrite the record with a rebuild."""
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    agent = Agent.open("zero", home=home, clock=clock)
    agent.state.start_session("s1")
    agent.state.set_status("working", "the real task")
    good = agent.state.read().to_dict()
    os.unlink(agent.state.path)
    assert not [f for f in check_agent(agent, repair=False) if "missing, though" in f.message]
    check_agent(agent)
    assert agent.state.read().to_dict()["work_started_ms"] == good["work_started_ms"]
    assert "state_rebuilt" not in [e["event"] for e in agent.ops.read()[0]]


def test_rebuild_from_empty_log_is_idle() -> None:
    state, used = rebuild_state([])
    assert state.status == "idle" and used == []


def test_torn_ops_tail_is_repaired(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    with open(agent.ops.path, "ab") as fh:
        fh.write(b'{"seq": 2, "ts": "2026')
    events, problems = agent.ops.read()
    assert len(events) == 1 and problems[0].kind == "torn-tail"
    findings = check_agent(agent)
    assert any("torn last line cut off" in f.message for f in findings)
    assert Path(agent.ops.path).read_bytes().endswith(b"\n")
    assert agent.ops.read()[1] == []


def test_modes_are_tightened(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    os.chmod(agent.state.path, 0o644)
    os.chmod(agent.dir, 0o755)  # noqa: S103 - the test widens it on purpose
    findings = check_home(agent.home, [agent])
    assert sum(1 for f in findings if f.repaired and "wider" in f.message) == 2
    assert os.stat(agent.state.path).st_mode & 0o777 == 0o600
    assert os.stat(agent.dir).st_mode & 0o777 == 0o700


def test_newer_schema_is_reported_not_touched(agent: Agent) -> None:
    agent.ensure()
    Path(agent.state.path).write_text(json.dumps({"schema_version": 99, "status": "idle"}))
    findings = check_agent(agent)
    assert any(f.level == "error" and "newer Phoenix" in f.message for f in findings)
    assert json.loads(Path(agent.state.path).read_text())["schema_version"] == 99


def test_cli_doctor_json_and_exit_codes(agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    _history(agent)
    Path(agent.state.path).write_text("")
    code = cli(["doctor", "--home", agent.home.root, "--agent", agent.id, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["healthy"] is True and data["repaired"] >= 1
    Path(agent.state.path).write_text("{")
    code = cli(["doctor", "--home", agent.home.root, "--agent", agent.id, "--check"])
    assert code == 3
    assert "not valid JSON" in capsys.readouterr().out


def test_doctor_all_agents_with_progress(agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(12):
        other = Agent.open(f"bot-{i}", home=agent.home)
        other.state.set_status("working", f"task {i}")
    Path(agent.home.agent_dir("bot-3"), "state.json").write_text("{")
    code = cli(["doctor", "--home", agent.home.root, "--all-agents"])
    out = capsys.readouterr().out
    assert code == 0 and "rebuilt from" in out and "bot-3" in out
    assert Agent.open("bot-3", home=agent.home).state.read().current_task == "task 3"


def test_doctor_of_one_agent_names_the_agents_it_did_not_check(
    home: Home, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`phx doctor` in a home whose only agent is not the default used to say "healthy" after
    checking nothing, with that agent's identity.yaml damaged."""
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv("PHOENIX_AGENT", raising=False)
    for name in ("zero", "one"):
        Agent.open(name, home=home).state.set_status("working", "x")
    code = cli(["doctor", "--home", home.root])
    out = capsys.readouterr().out
    assert code == 0 and "not checked: 2 other agent(s) in this home (one, zero)" in out and "--all-agents" in out
    code = cli(["doctor", "--home", home.root, "--agent", "zero", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["agents_not_checked"] == ["one"]
    code = cli(["doctor", "--home", home.root, "--all-agents", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["agents_not_checked"] == []


def test_doctor_checks_checkpoints_and_identity(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    agent.checkpoints.create("session")
    second = agent.checkpoints.create("session")
    change_checkpoint(agent, second.name, lambda content: content[:-20])
    agent.identity.set("state.current_focus", "x")
    identity = Path(agent.identity.path)
    identity.write_text(identity.read_text().replace("name: tester", "name: someone-else"))
    findings = check_agent(agent)
    messages = [f.message for f in findings]
    assert any("checksum mismatch" in m for m in messages)
    assert any("changed outside Phoenix" in m for m in messages)
    assert any("1 checkpoint(s) verified" in m for m in messages)
    assert second.name in {e.name for e in agent.checkpoints.entries()}  # reported, never deleted


def _damage(agent: Agent) -> bytes:
    damaged = Path(agent.identity.path)
    broken = damaged.read_bytes()[:-30] + b"\n  - [unclosed\n"
    damaged.write_bytes(broken)
    return broken


def test_a_damaged_identity_is_restored_from_the_newest_checkpoint(agent: Agent, clock: ManualClock) -> None:
    from phoenix_protocol.services._sessions import end_session, start_session

    start_session(agent, "s1", restore=False)
    agent.identity.set("state.current_focus", "Port the scheduler")
    agent.identity.add("belief", {"subject": "timers drift", "confidence": 0.7})
    clock.advance(60)
    taken = agent.checkpoints.create("session")
    copy = agent.checkpoints.read(taken.name).section("identity")
    assert copy["digest"] == Path(agent.identity.digest_path).read_text().splitlines()[0]
    clock.advance(60)
    # After the checkpoint: every kind of change the log carries, replayed over the copy.
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    agent.identity.add("belief", {"subject": "timers drift", "confidence": 0.9})  # updates by subject
    agent.identity.set("state.current_focus", "Review the port")
    agent.identity.set("notes.owner", "ops team")  # a key of the user's own, nested
    agent.identity.update(lambda ident: ident.mutable.update(mood="calm"))
    start_session(agent, "s2", restore=False)  # the session count goes on after it too
    clock.advance(60)
    end_session(agent, "s2", summary="done")
    before = agent.identity.read()
    assert before.mutable["accumulated_experience"] == 2
    broken = _damage(agent)

    checked = check_agent(agent, repair=False)
    assert any(f.level == "error" and not f.repaired and "not valid YAML" in f.message for f in checked)
    assert Path(agent.identity.path).read_bytes() == broken  # --check touches nothing

    findings = check_agent(agent)
    restored = [f for f in findings if f.path == agent.identity.path]
    assert restored[0].level == "error" and restored[0].repaired
    assert restored[1].level == "warn" and restored[1].repaired
    # The newest copy is the session checkpoint s2 ended with; the changes after `taken` are in it.
    newest = agent.checkpoints.entries()[0].name
    assert newest != taken.name and newest in restored[1].message
    assert "without their value" not in restored[1].message
    after = agent.identity.read()  # reads, and its core matches the seal
    assert after.as_dict() == before.as_dict()  # everything, the session count and times included
    kept = [n for n in os.listdir(agent.dir) if n.startswith("identity.yaml.corrupt-")]
    assert len(kept) == 1 and Path(agent.dir, kept[0]).read_bytes() == broken
    events, _ = agent.ops.read()
    assert events[-1]["event"] == "identity_repaired" and events[-1]["meta"]["checkpoint"] == newest
    assert all(f.level != "error" or f.repaired for f in findings)
    assert [f.level for f in check_agent(agent) if f.path == agent.identity.path] == ["ok"]


def test_checkpoints_taken_while_identity_and_state_are_damaged_say_so_and_keep_the_last_copies(
    agent: Agent, clock: ManualClock
) -> None:
    """Found in review: a checkpoint taken over a damaged identity.yaml (or state.json) held
    ``null`` for it, its event said ok, and after three routine checkpoints retention had pruned
    the last copy ``phx doctor`` restores from. Now each such section records its error, the event
    is a warning naming it, and retention keeps the newest checkpoint holding a copy, also through
    ``prune`` and the end of an operation, until a checkpoint holds one again."""
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    agent.identity.set("state.current_focus", "important focus")
    agent.state.set_status("working", "Port the scheduler")
    good = agent.checkpoints.create("routine")
    before = agent.identity.read().as_dict()
    _damage(agent)
    Path(agent.state.path).write_text("{not json")
    for _ in range(4):
        clock.advance(60)
        info = agent.checkpoints.create("routine")
        assert info.failed_sections == ("identity", "phoenix_state")
    agent.checkpoints.flush()
    latest = agent.checkpoints.read(info.name)
    assert "CorruptStateError" in latest.section("identity")["error"]
    assert "CorruptStateError" in latest.section("phoenix_state")["error"]
    created = [e for e in agent.ops.read()[0] if e["event"] == "checkpoint_created"]
    assert created[-1]["status"] == "warn"
    assert created[-1]["meta"]["failed_sections"] == ["identity", "phoenix_state"]
    names = [i.name for i in agent.checkpoints.entries()]
    assert len(names) == 4 and names[-1] == good.name  # the 3 newest routine ones, and the last copy
    assert agent.checkpoints.prune() == []
    with agent.checkpoints.pre_operation("migrate"):
        pass
    assert good.name in [i.name for i in agent.checkpoints.entries()]

    restored = [f for f in check_agent(agent) if f.path == agent.identity.path]
    assert restored and all(f.repaired for f in restored)
    assert agent.identity.read().as_dict() == before
    clock.advance(60)
    assert agent.checkpoints.create("routine").failed_sections == ()  # state.json rebuilt by the doctor too
    assert good.name not in [i.name for i in agent.checkpoints.entries()]  # a copy again: kept no longer


def test_an_identity_deleted_by_hand_fails_its_section_and_keeps_the_last_copy(
    agent: Agent, clock: ManualClock
) -> None:
    """Found in review: identity.yaml deleted while its seal remains was collected as no identity
    (null, no warning), so retention pruned the copies `phx doctor` restores it from."""
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    good = agent.checkpoints.create("routine")
    before = agent.identity.read().as_dict()
    os.unlink(agent.identity.path)
    for _ in range(4):
        clock.advance(60)
        assert agent.checkpoints.create("routine").failed_sections == ("identity",)
    assert good.name in [i.name for i in agent.checkpoints.entries()]
    assert all(f.repaired for f in check_agent(agent) if f.path == agent.identity.path)
    assert agent.identity.read().as_dict() == before


def test_an_identity_gone_with_its_seal_emptied_is_damage_not_a_default_copy(agent: Agent, clock: ManualClock) -> None:
    """Found in review: identity.yaml deleted and identity.digest emptied made each checkpoint hold
    the default identity as a good copy, so the real one was pruned."""
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    good = agent.checkpoints.create("routine")
    os.unlink(agent.identity.path)
    Path(agent.identity.digest_path).write_text("")
    for _ in range(4):
        clock.advance(60)
        info = agent.checkpoints.create("routine")
        assert info.failed_sections == ("identity",)
    assert "is missing" in agent.checkpoints.read(info.name).section("identity")["error"]
    assert good.name in [i.name for i in agent.checkpoints.entries()]


def test_prune_with_an_identity_file_that_cannot_be_looked_at_keeps_the_copy(agent: Agent) -> None:
    """Found in review: a stat error other than a missing file (a symlink loop) made prune, and
    so a successful end-op, fail instead of counting the identity as damaged."""
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    agent.checkpoints.create("routine")
    os.unlink(agent.identity.path)
    os.symlink("identity.yaml", agent.identity.path)  # a loop: stat says ELOOP
    assert agent.checkpoints.prune() == []
    with agent.checkpoints.pre_operation("migrate"):
        pass


def test_doctor_with_many_agents_reports_them_all_when_one_check_stops(
    agent: Agent, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: with ten agents or more (a progress bar), the text output stopped at the
    first agent whose check raised; the others were never checked. (A directory at ops.jsonl,
    which made a check raise then, is now one finding of its own: ``test_doctor_hostile``.)"""
    from phoenix_protocol.core._errors import StorageError
    from phoenix_protocol.services import _doctor

    for i in range(11):
        other = Agent.open(f"a{i}", home=agent.home, clock=agent.clock)
        other.state.set_status("working", f"task {i}")
    real = _doctor._check_log

    def failing(log: Any, aid: str, *args: Any) -> list[dict[str, Any]]:
        if aid == "a1":
            raise StorageError("could not read ops.jsonl: Input/output error.", path=log.path)
        return real(log, aid, *args)

    monkeypatch.setattr(_doctor, "_check_log", failing)
    code = cli(["doctor", "--home", agent.home.root, "--all-agents", "--check"])
    out = capsys.readouterr().out
    assert code == 3 and "its check stopped" in " ".join(out.split())
    assert "a10" in out


def test_a_users_own_identity_collector_that_fails_keeps_nothing_back(agent: Agent, clock: ManualClock) -> None:
    """The last copy is kept for Phoenix's own collectors only: a collector of the user's under
    that name that raises every time must not hold an old checkpoint forever."""
    agent.identity.add("skill", {"name": "python", "level": "expert"})
    first = agent.checkpoints.create("routine")

    def broken(ctx: Any) -> Any:
        raise RuntimeError("my collector is broken")

    agent.checkpoints.register("identity", broken)
    for _ in range(4):
        clock.advance(60)
        assert agent.checkpoints.create("routine").failed_sections == ("identity",)
    assert first.name not in [i.name for i in agent.checkpoints.entries()]


def test_a_damaged_identity_gets_the_changes_logged_after_its_copy(agent: Agent, clock: ManualClock) -> None:
    """Values set, entries added, parts changed by ``update``, a core reset and session starts
    after the last checkpoint are replayed from the ops log; a value logged by its size only (and
    an event written by an earlier version, with the name alone) is named, not invented."""
    from phoenix_protocol.agent._identity import LOGGED_VALUE_MAX
    from phoenix_protocol.services._sessions import start_session

    start_session(agent, "s1", restore=False)
    agent.identity.set("state.current_focus", "Port the scheduler")
    agent.identity.update(lambda ident: ident.mutable.update(scratch="old", mood="tense"))
    clock.advance(60)
    taken = agent.checkpoints.create("routine")
    clock.advance(60)
    agent.identity.set("state.current_focus", "Review the port")
    agent.identity.add("relationship", {"entity": "reviewer-bot", "type": "reviewer"})
    agent.identity.update(lambda ident: (ident.mutable.pop("scratch"), ident.mutable.update(mood="calm")))
    agent.identity.reset_core({"name": "tester", "role": "reviewer"})
    start_session(agent, "s2", restore=False)
    agent.identity.set("huge", "x" * (LOGGED_VALUE_MAX + 1))  # logged by its size only
    agent.record("identity_updated", "ok", {"path": "legacy"}, trusted=True)  # as earlier versions logged
    before = agent.identity.read()
    _damage(agent)

    done = agent.identity.repair()
    assert done is not None and done.checkpoint == taken.name
    assert [line.split(" ", 1)[1] for line in done.replayed] == [
        "set state.current_focus",
        "added relationships reviewer-bot",
        "changed mood, scratch (removed)",
        "core reset",
    ]
    assert [line.split(" ", 1)[1] for line in done.later_changes] == ["set huge", "set legacy"]
    after = agent.identity.read()  # the core is the one sealed by the reset
    assert after.immutable == {"name": "tester", "role": "reviewer"}
    assert after.current_focus == "Review the port"
    assert after.mutable["relationships"] == [{"entity": "reviewer-bot", "type": "reviewer"}]
    assert after.mutable["mood"] == "calm" and "scratch" not in after.mutable
    assert after.mutable["accumulated_experience"] == 2
    assert after.mutable["state"]["last_session_at"] == before.mutable["state"]["last_session_at"]
    assert "huge" not in after.mutable  # named above, never invented
    events, _ = agent.ops.read()
    assert events[-1]["meta"]["replayed"] == 4 and len(events[-1]["meta"]["later_changes"]) == 2


def test_a_logged_change_that_would_break_the_identity_is_named_not_applied(agent: Agent, clock: ManualClock) -> None:
    agent.identity.set("state.current_focus", "Port the scheduler")
    clock.advance(60)
    agent.checkpoints.create("routine")
    clock.advance(60)
    # An ops log edited by hand: a count that is not a number.
    agent.record("identity_updated", "ok", {"path": "accumulated_experience", "value": "many"}, trusted=True)
    agent.identity.set("state.current_focus", "Review the port")
    _damage(agent)
    done = agent.identity.repair()
    assert done is not None and [line.split(" ", 1)[1] for line in done.replayed] == ["set state.current_focus"]
    [named] = done.later_changes
    assert "set accumulated_experience (not applied: " in named
    after = agent.identity.read()
    assert after.current_focus == "Review the port" and after.mutable["accumulated_experience"] == 0


def test_identity_changes_from_concurrent_processes_are_logged_in_the_order_written(
    agent: Agent, clock: ManualClock
) -> None:
    """Each writer logs its change while it still holds the identity's lock, so the log has the
    writes in their order and a replay ends on what the file held. Logging after the lock let a
    writer descheduled before it logged (simulated: a random pause before each log append) log
    after one that wrote later: a counter each write increments came out of order in the log."""
    import subprocess
    import sys

    agent.identity.set("state.current_focus", "start")
    clock.advance(60)
    agent.checkpoints.create("routine")  # the copy; the processes' changes come after it
    agent.checkpoints.flush()
    code = (
        "import random, sys, time; from phoenix_protocol.services._agent import Agent; from phoenix_protocol.core._home import Home\n"
        "from phoenix_protocol.agent._ops import OpsLog\n"
        "append = OpsLog.record\n"
        "def slow(self, *args, **kwargs):\n"
        "    time.sleep(random.random() * 0.006)\n"
        "    return append(self, *args, **kwargs)\n"
        "OpsLog.record = slow\n"
        "a = Agent.open('tester', home=Home(sys.argv[1]))\n"
        "a.identity.read()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()  # all start together\n"
        "def bump(ident):\n"
        "    ident.mutable['counter'] = ident.mutable.get('counter', 0) + 1\n"
        "    ident.mutable['last_writer'] = sys.argv[2]\n"
        "for i in range(50):\n"
        "    a.identity.update(bump)\n"
        "    a.identity.set('state.current_focus', f'{sys.argv[2]}-{i}')\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, agent.home.root, f"p{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.close()
    assert [p.wait(120) for p in procs] == [0] * 4
    counts = [
        e["meta"]["changed"]["counter"]
        for e in agent.ops.read()[0]
        if e["event"] == "identity_updated" and "counter" in e["meta"].get("changed", {})
    ]
    assert counts == list(range(1, 201))
    before = agent.identity.read()
    _damage(agent)
    done = agent.identity.repair()
    assert done is not None and len(done.replayed) == 4 * 50 * 2 and done.later_changes == []
    assert agent.identity.read().as_dict() == before.as_dict()


def test_identity_events_carry_redacted_values(agent: Agent) -> None:
    """What the log holds for a replay is what was written: redacted."""
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    agent.identity.set("state.current_focus", f"token {secret}")
    agent.identity.update(lambda ident: ident.mutable.update(creds=f"key {secret}"))
    text = Path(agent.ops.path).read_text()
    assert secret not in text and secret not in Path(agent.identity.path).read_text()
    events = [e for e in agent.ops.read()[0] if e["event"] == "identity_updated"]
    assert events[0]["meta"]["value"] == agent.identity.read().current_focus
    assert events[1]["meta"]["changed"] == {"creds": agent.identity.read().mutable["creds"]}


def test_a_damaged_identity_without_a_copy_of_its_sealed_core_is_left_as_it_is(agent: Agent) -> None:
    from phoenix_protocol.agent._identity import LOGGED_VALUE_MAX

    agent.identity.set("state.current_focus", "x")
    agent.checkpoints.create("session")  # holds the old core
    core = {"name": "tester", "role": "reviewer", "charter": "y" * (LOGGED_VALUE_MAX + 1)}
    agent.identity.reset_core(core)  # logged by its size only: cannot be replayed
    agent.checkpoints.flush()
    damaged = Path(agent.identity.path)
    damaged.write_text("immutable: {name: tester, role: reviewer}\nmutable: [\n")
    findings = [f for f in check_agent(agent) if f.path == agent.identity.path]
    assert [(f.level, f.repaired) for f in findings] == [("error", False)]
    assert "no valid checkpoint holds a copy of this identity that gives the sealed core" in findings[0].message
    assert damaged.read_text() == "immutable: {name: tester, role: reviewer}\nmutable: [\n"
    assert not [n for n in os.listdir(agent.dir) if n.startswith("identity.yaml.corrupt-")]
    # A checkpoint taken while the identity is damaged is taken all the same, with the error for a copy.
    info = agent.checkpoints.create("session")
    assert info.failed_sections == ("identity",)
    assert "not valid YAML" in agent.checkpoints.read(info.name).section("identity")["error"]


def test_an_agent_directory_copied_under_another_name_is_reported_not_a_crash(agent: Agent) -> None:
    """Found in review: with `read()` refusing a name that says it is another agent's, the doctor
    stopped on it (exit 4, no finding for any agent with --all-agents) instead of reporting it."""
    agent.checkpoints.create("routine")
    agent.checkpoints.create("session")
    renamed = Agent.open("renamed", home=agent.home, clock=agent.clock)
    renamed.ensure()
    for info in agent.checkpoints.entries():  # what a copy of the directory brings along, as rows
        plant_checkpoint(agent, info.name, renamed, info.name)
    found = [f for f in check_agent(renamed, repair=False) if "belongs to agent" in f.message]
    assert len(found) == 2 and all(f.level == "error" and f"{agent.id!r}" in f.message for f in found)
    assert any("belongs to agent" in f.message for f in check_home(agent.home, [agent, renamed], repair=False))


def test_checkpoints_on_postgresql_are_verified(
    home: Home, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    agent = Agent.open("on-pg", home=home, clock=clock)
    agent.checkpoints.create("session", summary="kept on the server")
    findings = check_agent(agent, repair=False)
    verified = [f for f in findings if "checkpoint(s) verified" in f.message]
    assert (
        len(verified) == 1
        and verified[0].message.startswith("1 ")
        and str(verified[0].path).startswith("postgresql://")
    )
    assert not [f for f in findings if f.level == "error"]


def test_the_postgresql_store_is_checked_and_migrated(
    agent: Agent, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix_protocol.store import _pg

    agent.ensure()
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    pending = check_home(agent.home, [agent], repair=False)
    assert any(f.level == "warn" and "pending" in f.message for f in pending)
    assert _pg.status(pg_url)["current"] == 0  # --check changes nothing
    repaired = check_home(agent.home, [agent])
    assert any(f.repaired and "applied" in f.message for f in repaired)
    current = check_home(agent.home, [agent])
    assert any(f.level == "ok" and "is current" in f.message for f in current)

    monkeypatch.setenv("PHOENIX_STORE", "postgresql://postgres@127.0.0.1:5499/test")
    unreachable = check_home(agent.home, [agent])
    assert any(f.level == "error" and "127.0.0.1:5499" in f.message for f in unreachable)


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A running process (it waits for its stdin to close)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)


def test_a_temp_file_of_a_running_writer_is_left_alone(agent: Agent, clock: ManualClock, live_pid: int) -> None:
    """A temp file whose writer still runs is a write in progress, however old it looks."""
    agent.state.set_status("working", "x")
    agent.checkpoints.create("session")
    in_state = Path(agent.dir, f".state.json.{live_pid}.7.tmp")
    in_checkpoints = Path(agent.dir, f".identity.yaml.{live_pid}.8.tmp")
    for path in (in_state, in_checkpoints):
        path.write_text("half written")
    clock.advance(seconds=30 * 86400)
    findings = check_home(agent.home, [agent])
    assert in_state.read_text() == "half written" and in_checkpoints.exists()
    assert not [f for f in findings if "temporary file" in f.message]
    assert not abandoned_temp(str(in_state), clock.now_ms())
    # this very process (a server's doctor while another of its threads writes)
    own = Path(agent.dir, f".state.json.{os.getpid()}.9.tmp")
    own.write_text("half written")
    check_agent(agent)
    assert own.exists()


def test_a_temp_file_of_a_writer_that_is_gone_is_removed(agent: Agent) -> None:
    agent.state.set_status("working", "x")
    agent.checkpoints.create("session")
    dead = _dead_pid()
    in_state = Path(agent.dir, f".state.json.{dead}.1.tmp")
    in_checkpoints = Path(agent.dir, f".brief.md.{dead}.2.tmp")
    for path in (in_state, in_checkpoints):
        path.write_text("half written")
    report = check_agent(agent, repair=False)
    assert {f.path for f in report if "temporary file" in f.message and not f.repaired} == {
        str(in_state),
        str(in_checkpoints),
    }
    assert in_state.exists()  # --check removes nothing
    findings = check_agent(agent)
    assert {f.path for f in findings if f.repaired and "temporary file" in f.message} == {
        str(in_state),
        str(in_checkpoints),
    }
    assert not in_state.exists() and not in_checkpoints.exists()


def test_a_temp_file_of_another_host_is_judged_by_its_age_not_its_pid(
    agent: Agent, clock: ManualClock, live_pid: int
) -> None:
    """On a home shared between machines, a pid in another host's temporary file says nothing
    about this host's processes: the file is left alone until it is an hour old (no write takes
    that long), whether or not a process here has that pid. This host's are judged by the pid."""
    agent.state.set_status("working", "x")
    dead = _dead_pid()
    here = host_tag()
    there = host_tag("another-machine.example.org")
    remote_dead = Path(agent.dir, f".state.json.{dead}.3.{there}.tmp")
    remote_live = Path(agent.dir, f".notes.json.{live_pid}.4.{there}.tmp")
    local_dead = Path(agent.dir, f".state.json.{dead}.5.{here}.tmp")
    local_live = Path(agent.dir, f".notes.json.{live_pid}.6.{here}.tmp")
    for path in (local_dead, local_live):
        path.write_text("half written")  # now (the writer started before)
    written = clock.now_ms() - 1000  # the agent's clock, which the age is measured on
    for path in (remote_dead, remote_live):
        path.write_text("half written")
        os.utime(path, ns=(written * 1_000_000, written * 1_000_000))
    removed = {f.path for f in check_agent(agent) if f.repaired and "temporary file" in f.message}
    assert removed == {str(local_dead)}
    assert remote_dead.exists() and remote_live.exists() and local_live.exists()
    clock.advance(ms=TEMP_UNKNOWN_WRITER_AGE_MS)
    removed = {f.path for f in check_agent(agent) if f.repaired and "temporary file" in f.message}
    assert removed == {str(remote_dead), str(remote_live)}
    assert local_live.exists()  # its writer still runs here


def test_a_temp_file_whose_pid_now_names_a_later_process_is_removed(agent: Agent) -> None:
    """The pid was reused: the process that has it started after the file was last written."""
    agent.state.set_status("working", "x")
    import psutil

    started = psutil.Process(os.getpid()).create_time()
    path = Path(agent.dir, f".state.json.{os.getpid()}.1.tmp")
    path.write_text("half written")
    os.utime(path, (started - 3600, started - 3600))
    [finding] = [f for f in check_agent(agent) if "temporary file" in f.message]
    assert finding.repaired and not path.exists()


def test_a_temp_file_naming_no_writer_is_removed_only_once_old(agent: Agent, clock: ManualClock) -> None:
    agent.state.set_status("working", "x")
    path = Path(agent.dir, ".state.json.tmp")
    path.write_text("half written")
    written = clock.now_ms() - 1000
    os.utime(path, ns=(written * 1_000_000, written * 1_000_000))
    assert not [f for f in check_agent(agent) if "temporary file" in f.message]
    assert path.exists()
    clock.advance(ms=TEMP_UNKNOWN_WRITER_AGE_MS)
    [finding] = [f for f in check_agent(agent) if "temporary file" in f.message]
    assert finding.repaired and not path.exists()
    assert not abandoned_temp(str(path), clock.now_ms())  # gone: nothing to remove


@pytest.mark.slow
def test_doctors_running_alongside_writers_break_no_write(tmp_path: Path) -> None:
    """Real ``phx`` processes write (state, notes, identity, checkpoints) while ``phx doctor``
    processes and this process's doctor repair the same home over and over: every command
    exits 0. (A doctor used to remove the temporary files of writes in progress.)"""
    root = str(tmp_path / "phoenix-home")
    env = {**os.environ, "PHOENIX_HOME": root}
    subprocess.run([PHX, "state", "idle"], env=env, check=True, capture_output=True, timeout=60)
    agent = Agent.open("default", home=Home(root))
    failures: list[str] = []
    for round_ in range(3):
        writers = [
            [PHX, *args]
            for i in range(2)
            for args in (
                ["state", "working", f"task {round_}.{i}"],
                ["note", "open-loop", f"loop {round_}.{i}"],
                ["identity", "set", "state.current_focus", f"focus {round_}.{i}"],
                ["checkpoint", "--summary", f"round {round_}.{i}"],
            )
        ]
        argvs = [*writers, [PHX, "doctor"], [PHX, "doctor"]]
        procs = [
            subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for argv in argvs
        ]
        while any(p.poll() is None for p in procs):
            try:
                check_home(agent.home, [agent])
            except Exception as exc:  # a doctor that fails (the others' writes removed under it)
                failures.append(f"this process's doctor: {exc!r}")
        for argv, proc in zip(argvs, procs, strict=True):
            assert proc.stderr is not None
            if proc.wait() != 0:
                failures.append(f"{argv[1:]} exited {proc.returncode}: {proc.stderr.read().strip()}")
            proc.stderr.close()
    assert failures == []
    assert not [f for f in check_agent(agent) if f.level == "error"]


def test_doctor_reports_hook_commands_that_will_not_run_or_are_out_of_date(project: Path, tmp_path: Path) -> None:
    """The Claude Code hooks ``phx install`` wrote name an interpreter and a directory: after the
    environment moved, or from an earlier Phoenix, ``phx doctor`` says so (and changes nothing:
    the settings are not the home's)."""
    import json
    import shlex

    from phoenix_protocol.integrations._install import install_claude_code

    home = Home(str(project / ".phoenix"))
    agent = Agent.open("zero", home=home)
    agent.state.set_status("working", "x")
    install_claude_code("project", project_dir=str(project), agent="zero")
    install_claude_code("user")
    settings = project / ".claude" / "settings.json"

    def hook_findings() -> list[str]:
        from phoenix_protocol.integrations._install import check_installed

        found = check_home(home, [agent], hook_problems=lambda d: check_installed(project_dir=d))
        return [f.message for f in found if "claude-code" in f.message]

    assert hook_findings() == []

    def rewrite(
        python: str, code: str = "from phoenix_protocol.integrations._hooks import main; main()", flags: str = ""
    ) -> None:
        data = json.loads(settings.read_text())
        for groups in data["hooks"].values():
            for group in groups:
                for entry in group["hooks"]:
                    event = shlex.split(entry["command"])[-3]
                    entry["command"] = f"{shlex.quote(python)} {flags} -P -c {shlex.quote(code)} {event} --agent zero"
        settings.write_text(json.dumps(data))

    # Written by an earlier Phoenix (python -P -c ..., before -S): runs, but not as this one writes.
    rewrite(sys.executable)
    [message] = hook_findings()
    assert "earlier Phoenix" in message and "--scope project" in message
    written = settings.read_bytes()
    check_home(home, [agent])
    assert settings.read_bytes() == written  # reported, not changed
    # The interpreter is gone (the venv moved).
    rewrite("/gone/venv/bin/python", flags="-S")
    [message] = hook_findings()
    assert "/gone/venv/bin/python" in message and "not there any more" in message
    # Another interpreter that is there: another environment's, on purpose; not judged.
    other = tmp_path / "other-venv-python"
    other.symlink_to(sys.executable)
    rewrite(str(other))
    assert hook_findings() == []
    # The interpreter is there but the directory the command imports Phoenix from is gone (an
    # editable install's source tree deleted): every hook would fail on the import.
    gone = tmp_path / "deleted-src"
    for python in (str(other), sys.executable):
        rewrite(
            python,
            code=f"import sys; sys.path.append({str(gone)!r}); from phoenix_protocol.integrations._hooks import main; main()",
            flags="-S",
        )
        [message] = hook_findings()
        assert str(gone) in message and "does not hold it any more" in message
    # The same command naming a directory that holds Phoenix: another environment's, not judged.
    from phoenix_protocol.integrations._install import install_dir

    rewrite(
        str(other),
        code=f"import sys; sys.path.append({install_dir()!r}); from phoenix_protocol.integrations._hooks import main; main()",
        flags="-S",
    )
    assert hook_findings() == []
    # Checked before the home exists too (hooks installed, no session yet).
    rewrite(sys.executable)
    from phoenix_protocol.integrations._install import check_installed

    not_yet = check_home(Home(str(project / "not-yet")), [], hook_problems=lambda d: check_installed(project_dir=d))
    assert [f.level for f in not_yet] == ["ok", "warn"] and "earlier Phoenix" in not_yet[1].message
    # The current command again: nothing to say.
    install_claude_code("project", project_dir=str(project), agent="zero")
    assert hook_findings() == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.unlink(), id="deleted"),
        pytest.param(lambda p: p.write_bytes(b""), id="emptied"),
        pytest.param(
            lambda p: p.write_bytes(p.read_bytes()[: p.read_bytes().index(b"mutable:") + 9]), id="cut-after-mutable"
        ),
        pytest.param(lambda p: p.write_text("foo: bar\n"), id="not-an-identity"),
    ],
)
def test_an_identity_deleted_emptied_or_cut_short_is_damage_restored_not_a_reset(
    agent: Agent, clock: ManualClock, damage: Any
) -> None:
    """A sealed identity whose file went missing, empty or lost its sections is reported as damage
    (not taken for a new identity, nor for a hand edit of the core that only `reset-core` accepts),
    and `phx doctor` restores it from the newest checkpoint: the core and the history come back."""
    from phoenix_protocol.core._errors import CorruptStateError
    from phoenix_protocol.services._sessions import start_session

    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    start_session(agent, "s1", restore=False)
    agent.identity.add("skill", {"name": "rust", "level": "good"})
    clock.advance(60)
    agent.checkpoints.create("routine")
    before = agent.identity.read().as_dict()
    path = Path(agent.identity.path)
    damage(path)

    with pytest.raises(CorruptStateError, match="phx doctor"):
        agent.identity.read()
    with pytest.raises(CorruptStateError):
        agent.identity.set("state.current_focus", "x")  # nothing written over the damage
    with pytest.raises(CorruptStateError):
        agent.identity.reset_core()  # nor a core sealed from what is left
    [checked] = [f for f in check_agent(agent, repair=False) if f.path == agent.identity.path]
    assert checked.level == "error" and not checked.repaired

    restored = [f for f in check_agent(agent) if f.path == agent.identity.path]
    assert [f.level for f in restored] == ["error", "warn"] and all(f.repaired for f in restored)
    assert agent.identity.read().as_dict() == before
    assert [f.level for f in check_agent(agent) if f.path == agent.identity.path] == ["ok"]


def test_an_identity_cut_inside_a_list_is_damage_not_a_shorter_identity(agent: Agent, clock: ManualClock) -> None:
    """Cut at a line inside a list, what is left still reads as YAML, with fewer skills and no
    relationships: without its last line, a file that is not the one Phoenix wrote is damage."""
    from phoenix_protocol.core._errors import CorruptStateError
    from phoenix_protocol.services._sessions import start_session

    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    start_session(agent, "s1", restore=False)
    for name in ("rust", "python", "go"):
        agent.identity.add("skill", {"name": name, "level": "good"})
    agent.identity.add("relationship", {"entity": "lead", "type": "reports-to"})
    clock.advance(60)
    agent.checkpoints.create("routine")
    before = agent.identity.read().as_dict()
    path = Path(agent.identity.path)
    text = path.read_bytes()
    path.write_bytes(text[: text.index(b"- name: python")])  # cut inside the list of skills
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.read()
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.add("skill", {"name": "zig", "level": "new"})  # nothing written over it
    [checked] = [f for f in check_agent(agent, repair=False) if f.path == agent.identity.path]
    assert checked.level == "error" and "cut short" in checked.message
    restored = [f for f in check_agent(agent) if f.path == agent.identity.path]
    assert all(f.repaired for f in restored)
    assert agent.identity.read().as_dict() == before


def test_an_identity_edited_by_hand_is_no_damage(agent: Agent) -> None:
    """Edits by hand that keep the last line (anywhere above it, or entries added after it) are
    edits; without that line, only a file Phoenix wrote is taken as it is. A seal written before
    Phoenix kept the file's digest checks nothing of the kind."""
    from phoenix_protocol.agent._identity import END_MARK
    from phoenix_protocol.core._errors import CorruptStateError

    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    agent.identity.add("skill", {"name": "rust", "level": "good"})
    path = Path(agent.identity.path)
    text = path.read_text()
    path.write_text(text.replace("current_focus: ''", "current_focus: by hand"))
    assert agent.identity.read().current_focus == "by hand"
    path.write_text(
        path.read_text().replace("  relationships: []\n", "") + "  relationships:\n  - entity: ops\n    type: peer\n"
    )
    assert agent.identity.read().mutable["relationships"] == [{"entity": "ops", "type": "peer"}]
    agent.identity.set("state.current_focus", "written by Phoenix again")
    *kept, last = path.read_bytes().splitlines(keepends=True)
    assert last.startswith(END_MARK + b" of agent " + agent.id.encode() + b", sealed sha256:")
    path.write_bytes(b"".join(kept))  # the last line alone taken away
    with pytest.raises(CorruptStateError, match="put that line back"):
        agent.identity.read()
    seal = Path(agent.identity.digest_path)
    seal.write_text(seal.read_text().splitlines()[0] + "\n")  # as written before the file's digest was kept
    assert agent.identity.read().current_focus == "written by Phoenix again"


def test_an_identity_written_again_by_a_yaml_library_is_an_edit(agent: Agent) -> None:
    """A YAML library's load and dump drops every comment, Phoenix's first and last lines alike:
    no cut keeps the end of a file and loses its start, so that is an edit (the seal still checks
    its core), not damage; Phoenix's next write puts both lines back. A cut file keeps its first
    line and is still damage."""
    import yaml

    from phoenix_protocol.agent._identity import END_MARK, IdentityCoreError
    from phoenix_protocol.core._errors import CorruptStateError

    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    agent.identity.add("skill", {"name": "rust", "level": "good"})
    path = Path(agent.identity.path)

    def round_trip(change: Any) -> None:
        document = yaml.safe_load(path.read_text())
        change(document)
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        assert b"#" not in path.read_bytes()

    round_trip(lambda d: d["mutable"]["skills"].append({"name": "go", "level": "new"}))
    assert [s["name"] for s in agent.identity.read().mutable["skills"]] == ["rust", "go"]
    assert [f.level for f in check_agent(agent, repair=False) if f.path == agent.identity.path] == ["ok"]
    agent.identity.set("state.current_focus", "after the tool")
    text = path.read_bytes()
    assert text.startswith(b"# ") and text.splitlines()[-1].startswith(END_MARK)
    assert [s["name"] for s in agent.identity.read().mutable["skills"]] == ["rust", "go"]

    path.write_bytes(text[: text.index(b"- name: go")])  # cut: the first line stays
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.read()
    # Edits that put something before Phoenix's first line (and keep its last) still have
    # comments: cut, they are damage, not edits.
    for top in (b"---\n", b"\n", b"\xef\xbb\xbf"):
        edited = top + text
        path.write_bytes(edited)
        assert [s["name"] for s in agent.identity.read().mutable["skills"]] == ["rust", "go"]
        path.write_bytes(edited[: edited.index(b"- name: go")])
        with pytest.raises(CorruptStateError, match="cut short"):
            agent.identity.read()
    path.write_bytes(
        text.replace(b"current_focus: after the tool", b"current_focus: |-\n      # a heading\n      text")
    )
    assert agent.identity.read().current_focus == "# a heading\ntext"  # an edit that keeps the last line
    document = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(document, sort_keys=False, explicit_start=True))  # a block of text: no comment
    assert agent.identity.read().current_focus == "# a heading\ntext"
    path.write_bytes(text)
    round_trip(lambda d: d["immutable"].update(role="anything goes"))
    with pytest.raises(IdentityCoreError, match="changed outside Phoenix"):
        agent.identity.read()


def test_a_core_sealed_with_a_secret_in_clear_is_reported(agent: Agent) -> None:
    """A core sealed before Phoenix redacted cores written by hand (the seal matches it, secret
    and all): reported, never changed by the doctor (the core is the user's, and the redactor may
    be wrong); `reset-core` seals it with the secret redacted."""
    from phoenix_protocol.agent._identity import digest_of

    token = "ghp_" + "a1B2c3D4e5" * 4
    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    path, seal = Path(agent.identity.path), Path(agent.identity.digest_path)
    path.write_text(path.read_text().replace("role: release engineer", f"role: deploys with {token}"))
    seal.write_text(digest_of({"name": "tester", "role": f"deploys with {token}"}) + "\n")  # as sealed then
    assert agent.identity.read().immutable["role"] == f"deploys with {token}"
    for repair in (False, True):
        [found] = [f for f in check_agent(agent, repair=repair) if f.path == agent.identity.path]
        assert found.level == "warn" and "secret in clear" in found.message and token not in found.message
        assert not found.repaired and token in path.read_text()
    agent.identity.reset_core()
    assert token not in path.read_text() and "REDACTED" in agent.identity.read().immutable["role"]
    assert [f.level for f in check_agent(agent) if f.path == agent.identity.path] == ["ok"]


def test_a_damaged_seal_is_judged_by_the_log_and_written_again(agent: Agent) -> None:
    """`identity.digest` holding garbage is not taken for a hand edit of the core: the ops log's
    last seal vouches for it, and `phx doctor` writes the seal again."""
    from phoenix_protocol.agent._identity import IdentityCoreError, digest_of

    agent.identity.reset_core({"name": "tester", "role": "release engineer"})
    seal = Path(agent.identity.digest_path)
    for bad in (b"garbage\n", b""):
        seal.write_bytes(bad)
        assert agent.identity.read().immutable["role"] == "release engineer"
        [checked] = [f for f in check_agent(agent, repair=False) if f.path == agent.identity.path]
        assert checked.level == "warn" and ("damaged" if bad else "empty") in checked.message
        [fixed] = [f for f in check_agent(agent) if f.path == agent.identity.digest_path]
        assert fixed.repaired and seal.read_text().splitlines()[0] == digest_of(agent.identity.read().immutable)
    assert agent.ops.read()[0][-1]["event"] == "identity_seal_repaired"
    # A damaged seal over a core that is not the one last sealed: refused, and not resealed.
    path = Path(agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "anything goes"))
    seal.write_bytes(b"garbage\n")
    with pytest.raises(IdentityCoreError, match="damaged"):
        agent.identity.read()
    assert [f.level for f in check_agent(agent) if f.path == agent.identity.path] == ["error"]
    assert seal.read_bytes() == b"garbage\n"


def test_doctor_reports_another_agents_checkpoint_and_does_not_count_it(agent: Agent, home: Home) -> None:
    """Copied in under this agent's name (its content, checksum and all, is another agent's):
    `latest` skips it; the doctor must say so too, not count it verified."""
    from phoenix_protocol.store._checkpoints import make_name

    other = Agent.open("other", home=home, clock=agent.clock)
    other.checkpoints.create("session")
    theirs = other.checkpoints.create("session")  # seq 2
    ours = agent.checkpoints.create("session")  # seq 1
    copied = make_name(agent.id, 2, theirs.timestamp_ms + 1, "session")
    plant_checkpoint(other, theirs.name, agent, copied)
    assert copied in [e.name for e in agent.checkpoints.entries()]
    findings = check_agent(agent, repair=False)
    [foreign] = [f for f in findings if f.path == agent.checkpoints.backend.where(copied)]
    assert foreign.level == "error" and "belongs to agent 'other'" in foreign.message
    assert any(f.message == "1 checkpoint(s) verified" for f in findings)
    assert agent.checkpoints.latest()[0].name == ours.name  # type: ignore[union-attr]


def test_doctor_reports_a_damaged_checkpoint_without_counting_it_verified(agent: Agent) -> None:
    info = agent.checkpoints.create("session", summary="damaged later")
    change_checkpoint(agent, info.name, lambda content: content.replace("damaged later", "Damaged later"))
    findings = check_agent(agent, repair=False)
    assert any(f.message == "0 checkpoint(s) verified" for f in findings)
    [damaged] = [f for f in findings if f.path == agent.checkpoints.backend.where(info.name)]
    assert damaged.level == "error" and "checksum mismatch" in damaged.message


def test_a_change_logged_while_a_checkpoint_is_taken_is_replayed_by_the_repair(
    agent: Agent, clock: ManualClock
) -> None:
    """The identity's copy is read while the checkpoint's sections are collected, and the
    checkpoint gets its time later: a change made in between is in neither the copy nor the log
    after the checkpoint's time. The repair replays from when the copy was read."""
    from phoenix_protocol.services._checkpoints import CollectContext

    agent.identity.set("state.current_focus", "Port the scheduler")

    def meanwhile(ctx: CollectContext) -> dict[str, str]:
        clock.advance(1)
        agent.identity.set("notes.owner", "ops team")  # another thread, while the sections are collected
        clock.advance(1)
        return {}

    agent.checkpoints.register("zz_meanwhile", meanwhile)  # collected after the identity's copy
    taken = agent.checkpoints.create("session")
    copy = agent.checkpoints.read(taken.name).section("identity")
    assert "notes" not in copy["document"]["mutable"]  # the copy was read before the change
    before = agent.identity.read()
    _damage(agent)
    findings = check_agent(agent)
    assert any(f.repaired and taken.name in f.message for f in findings)
    assert agent.identity.read().mutable["notes"] == {"owner": "ops team"}
    assert agent.identity.read().as_dict() == before.as_dict()


def test_a_rebuild_keeps_both_notes_a_restarted_numbering_gave_one_number() -> None:
    """A state.json lost and started again numbers its notes from 1: the note the log had under
    that number is kept (numbered after the others), not replaced."""
    events = [
        {
            "seq": 1,
            "ts": "2026-01-01T00:00:00.000Z",
            "event": "note_added",
            "meta": {"kind": "open_loop", "id": 1, "text": "A"},
        },
        {
            "seq": 2,
            "ts": "2026-01-01T00:00:01.000Z",
            "event": "note_added",
            "meta": {"kind": "next_action", "id": 1, "text": "B"},
        },
    ]
    state, _used = rebuild_state(events)
    assert [(n["id"], n["text"]) for n in state.open_loops] == [(2, "A")]
    assert [(n["id"], n["text"]) for n in state.next_actions] == [(1, "B")]
    assert state.note_seq == 2


_CLOCK_OPS = (
    "working",
    "idle",
    "error",
    "hb",
    "hb_due",
    "start",
    "resume",
    "compact",
    "end",
    "routine",
    "session",
    "emergency",
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(_CLOCK_OPS), st.sampled_from([1, 30, 300, 700, 1300, 2000])), max_size=10)
)
def test_a_rebuilt_state_schedules_time_based_checkpoints_as_the_live_one(steps: list[tuple[str, int]]) -> None:
    """Found in review (as a property): a state rebuilt from the log must be due for the same
    time-based checkpoints, at any time after, as the state it stands for, and ask for the same
    forced refresh. (The raw time of the last checkpoint may differ where it does not count: the
    event of a checkpoint is written behind, after the state changed.)"""
    import tempfile

    from phoenix_protocol.agent._state import due_checkpoints
    from phoenix_protocol.core._errors import PhoenixError

    clock = ManualClock()
    agent = Agent.open(
        "zero",
        home=Home(tempfile.mkdtemp(prefix="phx-clocks-")),
        clock=clock,
        config_overrides={"checkpoint_interval_minutes": 10, "refresh_after_minutes": 30},
    )
    state = agent.state
    for i, (op, seconds) in enumerate(steps):
        clock.advance(seconds)
        sid = state.read().session_id or "s0"
        try:
            if op in ("working", "idle", "error"):
                state.set_status(op, f"{op} {i}")
            elif op == "hb":
                state.heartbeat(session_id=sid, tool="Bash")
            elif op == "hb_due":
                due: list[str] = []
                state.heartbeat(session_id=sid, tool="Bash", due=due)
                if due:
                    agent.checkpoints.take_claimed(due, clock.now_ms())
                    agent.checkpoints.release_claim(clock.now_ms())
            elif op in ("start", "resume", "compact"):
                state.start_session(f"s{i}" if op == "start" else sid, source="startup" if op == "start" else op)
            elif op == "end":
                state.end_session(sid)
            elif op in ("routine", "session"):
                agent.checkpoints.create(op)
            else:
                agent.checkpoints.emergency_recovery("drift")
        except PhoenixError:
            pass  # refused by precedence: nothing logged either
    agent.checkpoints.flush()
    if not state.exists():
        return
    live = state.read()
    rebuilt, _used = rebuild_state(agent.ops.read()[0])
    assert (rebuilt.status, rebuilt.work_started_ms) == (live.status, live.work_started_ms)
    assert bool(rebuilt.refresh_requested) == bool(live.refresh_requested)
    now = clock.now_ms()
    for later in (0, 5, 10, 20, 31, 61):
        at = now + later * 60_000
        assert due_checkpoints(rebuilt, agent.config, at) == due_checkpoints(live, agent.config, at), later


def test_a_state_pulled_from_the_server_keeps_its_work_clock_in_a_rebuild() -> None:
    """Found in review: the rebuild restarted the work clock of a state a copy took from the
    PostgreSQL store (``state_pulled``), putting off a forced refresh that was due."""
    from phoenix_protocol.agent._state import AgentState

    pulled = AgentState()
    pulled.status, pulled.work_started_ms, pulled.last_checkpoint_ms = "working", 1_767_225_600_000, 1_767_226_000_000
    events = [
        {"seq": 1, "ts": "2026-01-01T00:00:00.000Z", "event": "state_idle", "meta": {"to": "idle"}},
        {"seq": 2, "ts": "2026-01-01T02:10:00.000Z", "event": "state_pulled", "meta": {"state": pulled.to_dict()}},
    ]
    rebuilt, _used = rebuild_state(events)
    assert (rebuilt.status, rebuilt.work_started_ms) == ("working", pulled.work_started_ms)


def test_an_agent_that_only_takes_checkpoints_never_reads_its_log_for_a_state(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the benchmark: an agent without a state (checkpoints only, from Python) has an ops
    log; each checkpoint read it whole to look for a lost state. Only a state written here (its
    lock file says so) is looked for; `phx doctor` looks all the same."""
    from phoenix_protocol.agent import _seqlog

    for _ in range(3):
        agent.checkpoints.create("routine")
    agent.checkpoints.flush()
    reads: list[str] = []
    original = _seqlog.SeqLog.read

    def counted(self: _seqlog.SeqLog, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.path)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_seqlog.SeqLog, "read", counted)
    for _ in range(3):
        agent.checkpoints.create("routine")
        assert agent.state.read_or_none() is None
    assert reads == [] and not os.path.exists(agent.state.path)
    monkeypatch.setattr(_seqlog.SeqLog, "read", original)
    _history(agent)
    os.unlink(agent.state.path)
    os.unlink(agent.state.path + ".lock")  # both gone: readers start fresh, the doctor looks
    assert agent.state.read().current_task == ""
    fixed = [f for f in check_agent(agent) if f.path == agent.state.path]
    assert [(f.level, f.repaired) for f in fixed] == [("warn", True)]
    assert agent.state.read().current_task == "Port the scheduler to asyncio"
