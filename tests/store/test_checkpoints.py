"""Checkpoints: naming, envelope, providers, restore, time-based checkpoints, forced refresh."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import CorruptStateError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import SECTIONS, CollectContext, decode, encode, parse_name, verify


def _started_over(agent: Agent) -> None:
    """state.json replaced by a fresh one while the ops log keeps its history (as a lost
    state.json was started again before Phoenix rebuilt it from the log): what restore merges."""
    from phoenix_protocol.agent._state import AgentState

    with agent.state.lock():
        agent.state.write_locked(AgentState())


def _working(agent: Agent) -> None:
    agent.state.start_session("s1")
    agent.state.set_status("working", "Port the scheduler to asyncio", session_id="s1")
    agent.state.add_note("open_loop", "Timer drift under load")
    agent.state.add_note("next_action", "Benchmark with 1k timers")


def test_names_follow_the_seed_and_stay_unique_within_a_second(agent: Agent) -> None:
    names = [agent.checkpoints.create("routine").name for _ in range(3)]  # ManualClock: the same millisecond
    assert len(set(names)) == 3
    for name in names:
        parsed = parse_name(name)
        assert parsed is not None and parsed[0] == "tester" and parsed[3] == "routine"
        assert name.startswith("tester_20260101000000000-") and name.endswith("_routine.checkpoint")


def test_envelope_has_every_seed_section_and_a_verified_checksum(agent: Agent) -> None:
    _working(agent)
    info = agent.checkpoints.create("recovery", summary="before the rewrite")
    stored = agent.checkpoints.backend.read(info.name)
    assert stored is not None
    data = verify(stored, info.name)
    for key in ("agent_id", "timestamp", "checkpoint_type", "version", "state", "metadata"):
        assert key in data
    assert (data["agent_id"], data["checkpoint_type"], data["version"]) == ("tester", "recovery", "1.0")
    assert set(data["state"]) == {"current_task", "mailbox", "operational_context", "memory"}
    task = data["state"]["current_task"]
    assert set(task) == {"id", "status", "progress_percentage", "context"} and task["status"] == "in_progress"
    assert set(data["state"]["mailbox"]) == {"last_processed_id", "pending_count"}
    assert set(data["state"]["operational_context"]) == {"goals", "constraints", "decisions"}
    assert set(data["state"]["memory"]) == {"short_term", "session"}
    assert data["context"]["pending_items"] == ["Timer drift under load", "Benchmark with 1k timers"]
    assert data["context"]["conversation_summary"] == "before the rewrite"
    assert set(data["recent_memories"]) == {"memory_ids", "last_recall_query"}
    assert set(data["identity_updates"]) >= {"new_beliefs", "new_skills", "new_relationships", "drift_checks"}
    assert set(data["working_memory"]) == {"scratchpad", "open_files", "context_stack"}
    assert data["metadata"]["session_id"] == "s1" and data["metadata"]["checkpoint_version"] == "1.0"
    assert data["extensions"]["phoenix_state"]["current_task"] == "Port the scheduler to asyncio"
    assert "checksum" not in data and stored.checksum.startswith("xxh3-128:")  # a column of its own
    assert os.stat(os.path.join(agent.home.root, "phoenix.db")).st_mode & 0o777 == 0o600


def _with_checksum_line(data: bytes, line: bytes) -> bytes:
    mark = data.rindex(b'\n  "checksum": "')
    return data[: mark + 1] + b'  "checksum": "' + line + b'"\n}\n'


def test_checkpoints_written_with_sha256_still_verify(agent: Agent) -> None:
    """Files from before the move to xxh3-128 carry a sha256 checksum: read and verified as before."""
    content, _checksum = encode(
        agent.checkpoints.read(agent.checkpoints.create("routine", summary="old format").name).data
    )
    data = content[:-2] + b',\n  "checksum": "x"\n}\n'  # a file of an earlier release
    head = data[: data.rindex(b'\n  "checksum": "') + 1]
    old = _with_checksum_line(data, b"sha256:" + hashlib.sha256(head).hexdigest().encode())
    assert decode(old, "old")["summary"] == "old format"
    with pytest.raises(CorruptStateError, match="checksum mismatch"):
        decode(_with_checksum_line(data, b"sha256:" + hashlib.sha256(head + b" ").hexdigest().encode()), "bad")
    with pytest.raises(CorruptStateError, match="algorithm 'blake2b' is unknown"):
        decode(_with_checksum_line(data, b"blake2b:" + hashlib.blake2b(head).hexdigest().encode()), "blake2b")


def test_custom_provider_collects_and_restores(agent: Agent) -> None:
    restored: list[Any] = []
    agent.checkpoints.register(
        "planner", lambda ctx: {"queue": [1, 2, 3]}, lambda value, a, force: restored.append(value)
    )
    agent.checkpoints.create("routine")
    result = agent.checkpoints.restore()
    assert restored == [{"queue": [1, 2, 3]}]
    assert "planner" in result.applied
    assert set(SECTIONS) <= set(agent.checkpoints.sections())


def test_a_failing_collector_does_not_cost_the_checkpoint(agent: Agent) -> None:
    def broken(ctx: CollectContext) -> Any:
        raise RuntimeError("provider bug")

    restored: list[Any] = []
    agent.checkpoints.register("fragile", broken, lambda value, a, force: restored.append(value))
    info = agent.checkpoints.create("routine")
    checkpoint = agent.checkpoints.read(info.name)
    assert checkpoint.section("fragile") == {"error": "RuntimeError: provider bug", "collector_failed": True}
    agent.checkpoints.flush()
    [event] = [e for e in agent.ops.read()[0] if e["event"] == "checkpoint_created"]
    assert event["status"] == "warn" and event["meta"]["failed_sections"] == ["fragile"]
    # The error is not data: its restorer is not handed it (a cautious restorer would have
    # emptied its queue), and the restore says so.
    result = agent.checkpoints.restore(info.name)
    assert restored == [] and "fragile" not in result.applied
    assert result.problems == [
        "fragile: not restored, its collector failed when the checkpoint was taken: RuntimeError: provider bug"
    ]


def test_a_section_that_looks_like_an_error_is_still_data(agent: Agent) -> None:
    restored: list[Any] = []
    agent.checkpoints.register("last_call", lambda ctx: {"error": "timeout"}, lambda v, a, f: restored.append(v))
    agent.checkpoints.restore(agent.checkpoints.create("routine").name)
    assert restored == [{"error": "timeout"}]


@pytest.mark.parametrize("name", ["metadata", "summary", "extensions", "checksum", "state", "kind"])
def test_a_section_cannot_take_a_field_of_the_envelope(agent: Agent, name: str) -> None:
    """``metadata`` was accepted, stored under ``extensions`` and read back as the envelope's own
    metadata: its restorer got the session's metadata instead of its data."""
    with pytest.raises(UsageError, match="field of the checkpoint itself"):
        agent.checkpoints.register(name, lambda ctx: {"run_id": "r-42"})


def test_unregister_removes_a_section(agent: Agent) -> None:
    agent.checkpoints.register("planner", lambda ctx: {"queue": [1]}, lambda v, a, f: None)
    agent.checkpoints.unregister("planner")
    agent.checkpoints.unregister("never-registered")
    assert "planner" not in agent.checkpoints.sections()
    info = agent.checkpoints.create("routine")
    assert agent.checkpoints.read(info.name).section("planner") is None


def test_registering_while_another_thread_takes_checkpoints(agent: Agent) -> None:
    """``collect`` went over the providers' dict while ``register`` changed it: RuntimeError."""
    import threading

    errors: list[BaseException] = []
    stop = threading.Event()

    def take() -> None:
        try:
            while not stop.is_set():
                agent.checkpoints.create("routine")
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=take)
    worker.start()
    try:
        for i in range(300):
            agent.checkpoints.register(f"extra-{i}", lambda ctx: {"n": 1})
    finally:
        stop.set()
        worker.join()
    assert errors == []


def test_threads_number_checkpoints_in_the_order_they_collected(agent: Agent) -> None:
    """A slow collector in one thread: the checkpoint another thread started later used to get the
    lower number, so ``latest()`` returned the older data."""
    import threading

    value = {"n": 1}
    entered = threading.Event()
    release = threading.Event()

    def progress(ctx: CollectContext) -> Any:
        seen = dict(value)
        if ctx.summary == "slow":
            entered.set()
            release.wait(5)
        return seen

    agent.checkpoints.register("progress", progress)
    slow = threading.Thread(target=lambda: agent.checkpoints.create("routine", summary="slow"))
    slow.start()
    assert entered.wait(5)
    value["n"] = 2
    fast = threading.Thread(target=lambda: agent.checkpoints.create("routine", summary="fast"))
    fast.start()
    fast.join(1.0)  # before the fix the fast one got through first (now it waits for the slow one)
    release.set()
    slow.join()
    fast.join()
    latest, _ = agent.checkpoints.latest()
    assert latest is not None and latest.summary == "fast" and latest.section("progress") == {"n": 2}


def test_restore_fills_an_empty_state_and_force_overwrites(agent: Agent, home: Home, clock: ManualClock) -> None:
    _working(agent)
    info = agent.checkpoints.create("routine")
    os.unlink(agent.state.path)  # lost with its log (a lost state.json alone is rebuilt from the log)
    for path in agent.ops.log.files():
        os.unlink(path)
    result = agent.checkpoints.restore(info.name)
    state = agent.state.read()
    assert state.current_task == "Port the scheduler to asyncio"
    assert [n["text"] for n in state.next_actions] == ["Benchmark with 1k timers"]
    assert set(result.applied["phoenix_state"]["restored"]) >= {"current_task", "open_loops", "next_actions"}
    agent.state.set_status("working", "Something else")
    agent.checkpoints.restore(info.name)
    assert agent.state.read().current_task == "Something else"  # not overwritten without force
    agent.checkpoints.restore(info.name, force=True)
    assert agent.state.read().current_task == "Port the scheduler to asyncio"


def test_secrets_are_redacted_in_checkpoints(agent: Agent) -> None:
    agent.checkpoints.register("env", lambda ctx: {"line": "export OPENAI_API_KEY=sk-proj-" + "Ab1Cd2Ef3" * 6})
    info = agent.checkpoints.create("routine", summary="deploy with password=Hunter2Secret!")
    stored = agent.checkpoints.backend.read(info.name)
    assert stored is not None
    text = stored.content.decode()
    assert "Ab1Cd2Ef3Ab1Cd2Ef3" not in text and "Hunter2Secret" not in text


def test_bad_type_and_name_are_usage_errors(agent: Agent) -> None:
    with pytest.raises(UsageError):
        agent.checkpoints.create("hourly")
    with pytest.raises(UsageError, match="summary must be text, not int"):
        agent.checkpoints.create("routine", summary=123)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        agent.checkpoints.read("../state.json")
    with pytest.raises(UsageError, match="no valid checkpoint"):
        agent.checkpoints.restore()


def test_text_that_was_not_utf8_does_not_stop_checkpoints(agent: Agent) -> None:
    """A task typed in Latin-1 reaches Python with lone surrogates (``surrogateescape``); state.json
    and ops.jsonl keep it (as ``\\udce9``); every later checkpoint used to fail on it."""
    typed = b"fix caf\xe9 parser".decode("utf-8", "surrogateescape")
    agent.state.set_status("working", typed)
    info = agent.checkpoints.create("session", summary=b"bad \xff".decode("utf-8", "surrogateescape"))
    agent.checkpoints.flush()
    checkpoint = agent.checkpoints.read(info.name)
    assert checkpoint.summary == "bad \ufffd" and info.label == "bad \ufffd"
    assert checkpoint.data["state"]["current_task"]["context"]["description"] == "fix caf\ufffd parser"
    assert checkpoint.data["extensions"]["phoenix_state"]["current_task"] == "fix caf\ufffd parser"
    stored = agent.checkpoints.backend.read(info.name)
    assert stored is not None
    stored.content.decode("utf-8")  # the body is UTF-8


def test_a_checkpoint_copied_under_another_name_is_damage_not_that_checkpoint(agent: Agent) -> None:
    store = agent.checkpoints
    routine = store.create("routine", summary="the routine one")
    session = store.create("session", summary="the session one")
    forged = "tester_20991231000000000-00000050_session.checkpoint"
    copied = store.backend.read(routine.name)
    assert copied is not None

    def forge(tx: Any) -> None:
        from phoenix_protocol.store._checkpoints import CheckpointInfo, lock_agent

        lock_agent(tx, agent.id)
        info = CheckpointInfo(forged, 50, "session", 4_102_358_400_000, size=len(copied.content))
        store.backend.put_existing(tx, info, copied.content, copied.checksum, None)

    store.backend.db.transaction(forge)
    fresh = Agent.open(agent.id, home=agent.home, clock=agent.clock).checkpoints
    assert fresh.entries()[0].name == forged  # listed by its name
    checkpoint, problems = fresh.latest("session")
    assert checkpoint is not None and checkpoint.name == session.name
    assert len(problems) == 1 and "is checkpoint #1 (routine), not the one its name says" in problems[0]
    with pytest.raises(CorruptStateError, match="not the one its name says"):
        fresh.restore(forged)
    assert fresh.restore(session.name).checkpoint.summary == "the session one"


def test_a_summary_beyond_the_limit_is_cut_visibly(agent: Agent) -> None:
    from phoenix_protocol.services._checkpoints import SUMMARY_LIMIT

    whole = "word " * 5000
    info = agent.checkpoints.create("session", summary=whole)
    summary = agent.checkpoints.read(info.name).summary
    assert summary is not None and len(summary) <= SUMMARY_LIMIT and summary == info.label
    assert summary.startswith("word word") and summary.endswith("\u2026 [cut: 24,999 characters]")
    exact = "x" * SUMMARY_LIMIT
    assert agent.checkpoints.read(agent.checkpoints.create("session", summary=exact).name).summary == exact


# -- time-based checkpoints -------------------------------------------------------------------


def test_routine_every_30_minutes_of_work(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    assert agent.checkpoints.maybe_checkpoint() == []
    clock.advance(29 * 60)
    assert agent.checkpoints.maybe_checkpoint() == []
    clock.advance(60)
    taken = agent.checkpoints.maybe_checkpoint()
    assert [t.checkpoint_type for t in taken] == ["routine"]
    assert agent.checkpoints.maybe_checkpoint() == []  # the clock restarts at the checkpoint
    clock.advance(30 * 60)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]


def test_no_time_based_checkpoint_while_idle(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    agent.state.set_status("idle", "done")
    clock.advance(3 * 3600)
    assert agent.checkpoints.maybe_checkpoint() == []


def test_two_hours_of_work_force_a_refresh(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    for _ in range(4):
        clock.advance(30 * 60)
        agent.checkpoints.maybe_checkpoint()
    types = [e.checkpoint_type for e in agent.checkpoints.entries()]
    assert types[0] == "recovery"
    state = agent.state.read()
    assert state.refresh_requested is not None and state.refresh_requested["checkpoint"].endswith(
        "_recovery.checkpoint"
    )
    events, _ = agent.ops.read()
    assert any(e["event"] == "forced_refresh" and e["status"] == "warn" for e in events)
    # The next session is the refresh: it clears the flag and restarts the work clock.
    before, after = agent.state.start_session("s2")
    assert before.refresh_requested is not None and after.refresh_requested is None
    assert after.work_started_ms == clock.now_ms()


def test_a_due_checkpoint_is_taken_once_by_threads_and_processes(agent: Agent, clock: ManualClock) -> None:
    """``maybe_checkpoint`` claims what is due under the state lock, as the hook does: eight
    threads, then several processes, used to take one routine checkpoint each for the same due
    interval (and eight forced refreshes), pushing older snapshots out of the three kept."""
    import subprocess
    import sys
    import threading

    _working(agent)
    clock.advance(31 * 60)
    start = threading.Barrier(8)
    taken: list[list[Any]] = []

    def loop() -> None:
        start.wait()
        taken.append(agent.checkpoints.maybe_checkpoint())

    threads = [threading.Thread(target=loop) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(t) for t in taken) == [0] * 7 + [1]
    # Processes, with the clock pinned (PHOENIX_NOW_MS) past the next interval.
    code = (
        "import sys; from phoenix_protocol.services._agent import Agent; from phoenix_protocol.core._home import Home; "
        "a = Agent.open('tester', home=Home(sys.argv[1])); print(len(a.checkpoints.maybe_checkpoint()))"
    )
    env = {**os.environ, "PHOENIX_NOW_MS": str(clock.now_ms() + 31 * 60_000)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, agent.home.root], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(5)
    ]
    counts = sorted(int(p.communicate()[0]) for p in procs)
    assert counts == [0, 0, 0, 0, 1]
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["routine", "routine"]


def test_a_clock_set_back_does_not_stop_time_based_checkpoints(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    clock.advance(31 * 60)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]
    clock.set(clock.now_ms() - 24 * 3_600_000)  # the clock steps back a day
    assert agent.checkpoints.maybe_checkpoint() == []  # the recorded times are brought back to now
    state = agent.state.read()
    assert state.work_started_ms == clock.now_ms() and state.last_checkpoint_ms == clock.now_ms()
    clock.advance(31 * 60)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]


def test_a_claimant_killed_before_its_checkpoint_is_taken_over_after_the_lease(
    agent: Agent, clock: ManualClock
) -> None:
    """A process that claimed a due checkpoint and was SIGKILLed before writing it used to leave
    the interval marked as taken: no checkpoint until the next one was due. The claim is recorded
    until its checkpoint is written; held past the lease, the next caller takes it over."""
    import signal
    import subprocess
    import sys

    from phoenix_protocol.agent._state import CHECKPOINT_CLAIM_LEASE_MS

    _working(agent)
    due_at = clock.now_ms() + 31 * 60_000
    code = (
        "import sys, time; from phoenix_protocol.services._agent import Agent; from phoenix_protocol.core._home import Home\n"
        "a = Agent.open('tester', home=Home(sys.argv[1]))\n"
        "def stuck(ctx):\n"
        "    print('collecting', flush=True); time.sleep(600)\n"
        "a.checkpoints.register('stuck', stuck)\n"
        "a.checkpoints.maybe_checkpoint()\n"
    )
    env = {**os.environ, "PHOENIX_NOW_MS": str(due_at)}
    proc = subprocess.Popen([sys.executable, "-c", code, agent.home.root], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "collecting\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    claim = agent.state.read().checkpoint_claim
    assert claim == {"kinds": ["routine"], "ms": due_at}
    assert agent.checkpoints.entries() == []  # killed before its checkpoint was written
    clock.set(due_at + CHECKPOINT_CLAIM_LEASE_MS - 1)
    assert agent.checkpoints.maybe_checkpoint() == []  # within the lease: the claimant may be at work
    clock.advance(0.001)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]
    [due] = [e for e in agent.ops.read()[0] if e["event"] == "checkpoint_due"][-1:]
    assert due["meta"] == {"types": ["routine"], "taken_over_from": due_at}
    assert agent.state.read().checkpoint_claim is None  # released once taken
    clock.advance(CHECKPOINT_CLAIM_LEASE_MS / 1000)
    assert agent.checkpoints.maybe_checkpoint() == []  # nothing left to take over


def test_a_claim_whose_checkpoint_failed_is_taken_again_after_the_lease(
    agent: Agent, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix_protocol.agent._state import CHECKPOINT_CLAIM_LEASE_MS
    from phoenix_protocol.core._errors import LockTimeoutError

    _working(agent)
    clock.advance(31 * 60)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise LockTimeoutError("could not lock the checkpoint log within 0.3 s")

    monkeypatch.setattr(agent.checkpoints, "create", failing)
    with pytest.raises(LockTimeoutError):
        agent.checkpoints.maybe_checkpoint()
    monkeypatch.undo()
    assert agent.checkpoints.maybe_checkpoint() == []
    clock.advance(CHECKPOINT_CLAIM_LEASE_MS / 1000)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]


def _claim(agent: Agent, now: int) -> None:
    """Claim what is due at ``now``, as a heartbeat does, without taking it."""
    from phoenix_protocol.agent._state import AgentState, claim_due_checkpoints

    def claim(state: AgentState) -> None:
        claim_due_checkpoints(state, agent.config, now)

    agent.state.change(claim)


def test_a_claim_left_by_an_earlier_stretch_of_work_is_dropped(agent: Agent, clock: ManualClock) -> None:
    """A claim abandoned before the agent stopped working belongs to that work: a new stretch
    starts its own clock, and a recovery claim would force a refresh on a fresh session."""
    from phoenix_protocol.agent._state import CHECKPOINT_CLAIM_LEASE_MS

    _working(agent)
    clock.advance(2 * 3600)
    now = clock.now_ms()
    _claim(agent, now)  # a claimant that died
    assert agent.state.read().checkpoint_claim == {"kinds": ["recovery"], "ms": now}
    agent.state.set_status("idle", "stopped for the day")
    clock.advance(3600)
    agent.state.set_status("working", "Next task")
    clock.advance(CHECKPOINT_CLAIM_LEASE_MS / 1000)
    assert agent.checkpoints.maybe_checkpoint() == []
    clock.advance(30 * 60)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]
    assert agent.state.read().checkpoint_claim is None


def test_a_recovery_due_while_a_routine_claim_is_held_takes_over_nothing(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    clock.advance(119 * 60)
    _claim(agent, clock.now_ms())  # a routine checkpoint, claimed and still being taken
    assert agent.state.read().checkpoint_claim == {"kinds": ["routine"], "ms": clock.now_ms()}
    clock.advance(60)
    _claim(agent, clock.now_ms())  # two hours: the recovery is due, within the routine's lease
    assert agent.state.read().checkpoint_claim == {"kinds": ["recovery"], "ms": clock.now_ms()}


def test_a_recovery_claim_sets_the_refresh_flag_at_once(agent: Agent, clock: ManualClock) -> None:
    """The flag used to be set by whoever took the recovery checkpoint (the hook's detached child):
    a session starting meanwhile did not see it, and a child that died never set it. The claim sets
    it; the checkpoint names itself in it, unless a session start has answered the refresh since."""
    from phoenix_protocol.core._clock import iso_from_ms

    _working(agent)
    clock.advance(2 * 3600)
    now = clock.now_ms()
    _claim(agent, now)
    flag = agent.state.read().refresh_requested
    assert flag == {"at": iso_from_ms(now), "reason": "120 minutes of continuous work", "checkpoint": None}
    [info] = agent.checkpoints.take_claimed(["recovery"], now)
    assert agent.state.read().refresh_requested == {**flag, "checkpoint": info.name}
    # Claimed again two hours on; a new session starts before the checkpoint is taken.
    clock.advance(2 * 3600)
    later = clock.now_ms()
    _claim(agent, later)
    before, after = agent.state.start_session("s2")
    assert before.refresh_requested is not None and after.refresh_requested is None
    agent.checkpoints.take_claimed(["recovery"], later)
    assert agent.state.read().refresh_requested is None  # the refresh took place: not asked again
    assert [e.checkpoint_type for e in agent.checkpoints.entries()] == ["recovery", "recovery"]


def test_pre_operation_keeps_the_blocks_outcome_when_bookkeeping_fails(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recording the outcome fails (here: a lock held too long): a migration that succeeded used to
    come out of the ``with`` as a LockTimeoutError, and a failed one had its own exception replaced."""
    from phoenix_protocol.core._errors import LockTimeoutError

    def stuck(*args: Any, **kwargs: Any) -> Any:
        raise LockTimeoutError("could not lock index.json within 0.3 s")

    with agent.checkpoints.pre_operation("migrate db") as op:
        monkeypatch.setattr(agent.checkpoints, "end_operation", stuck)
    monkeypatch.undo()
    assert [e.operation_id for e in agent.checkpoints.entries("pre-operation")] == [op.id]  # kept, not lost
    events = [e for e in agent.ops.read()[0] if e["event"] == "operation_not_released"]
    assert events and events[0]["meta"]["id"] == op.id and "LockTimeoutError" in events[0]["meta"]["error"]

    class MigrationError(Exception):
        pass

    with pytest.raises(MigrationError) as raised, agent.checkpoints.pre_operation("migrate again"):
        monkeypatch.setattr(agent.checkpoints, "end_operation", stuck)
        raise MigrationError("column exists")
    assert any("could not record" in note for note in raised.value.__notes__)


def test_intervals_are_configurable(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("fast", home=home, clock=clock, config_overrides={"checkpoint_interval_minutes": 5})
    _working(agent)
    clock.advance(5 * 60)
    assert [t.checkpoint_type for t in agent.checkpoints.maybe_checkpoint()] == ["routine"]


def test_paif_config_table(tmp_path: Path, clock: ManualClock) -> None:
    home = tmp_path / ".phoenix"
    home.mkdir()
    (home / "phoenix.toml").write_text(
        '[paif_config]\nagent_id = "zero"\n[paif_config.session_protocol]\n'
        "checkpoint_on_exit = false\nrestore_on_start = false\ncheckpoint_interval_minutes = 10\n"
    )
    agent = Agent.open(home=Home(str(home)), clock=clock, env={})
    assert agent.id == "zero"
    assert (agent.config.checkpoint_on_exit, agent.config.restore_on_start) == (False, False)
    assert agent.config.checkpoint_interval_minutes == 10
    assert json.loads(json.dumps(agent.config.as_dict()))["agent_id"] == "zero"


def test_memories_of_the_session_reach_the_session_checkpoint(agent: Agent) -> None:
    from phoenix_protocol.services._sessions import begin, end, record_memory, record_recall

    agent.state.start_session("s1")
    begin(agent, "s1")
    record_memory(agent, "mem-1")
    record_memory(agent, "mem-2")
    record_memory(agent, "mem-1")
    record_recall(agent, "how did we fix the timer drift?")
    info = end(agent, "s1", summary="x")
    section = agent.checkpoints.read(info.name).section("recent_memories")
    assert section == {"memory_ids": ["mem-1", "mem-2"], "last_recall_query": "how did we fix the timer drift?"}
    assert agent.checkpoints.read(info.name).section("metadata")["session_id"] == "s1"


@pytest.mark.parametrize(
    "bad",
    [float("nan"), {"ratio": float("inf")}, {1, 2}, b"raw", object(), "cycle"],
    ids=["nan", "inf", "set", "bytes", "object", "cycle"],
)
def test_a_section_json_cannot_hold_is_recorded_as_an_error_and_the_rest_is_written(agent: Agent, bad: Any) -> None:
    if bad == "cycle":
        bad = []
        bad.append(bad)
    agent.checkpoints.register("numbers", lambda ctx: {"values": bad})
    agent.checkpoints.register("good", lambda ctx: {"kept": True})
    agent.state.set_status("working", "keep going")
    info = agent.checkpoints.create("session", summary="end of day")
    checkpoint = agent.checkpoints.read(info.name)
    assert checkpoint.section("good") == {"kept": True} and checkpoint.summary == "end of day"
    assert set(checkpoint.section("numbers")) == {"error", "collector_failed"}
    assert "JSON cannot hold" in checkpoint.section("numbers")["error"]
    assert checkpoint.data["extensions"]["phoenix_state"]["current_task"] == "keep going"


def test_sections_each_encoder_takes_alone_are_written_together(agent: Agent) -> None:
    """A datetime (which the fast encoder takes) in one section, an integer beyond 64 bits (which
    only the standard library takes) in another: the checkpoint was lost with a TypeError."""
    import datetime as dt

    agent.checkpoints.register("clock", lambda ctx: {"at": dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)})
    agent.checkpoints.register("ledger", lambda ctx: {"total_wei": 2**64})
    info = agent.checkpoints.create("routine")
    checkpoint = agent.checkpoints.read(info.name)
    assert checkpoint.section("clock") == {"at": "2026-11-24T12:00:00+00:00"}
    assert checkpoint.section("ledger") == {"total_wei": 2**64}


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 24197857161011715162171839636988778104])
def test_integers_beyond_64_bits_come_back_exact(agent: Agent, number: int) -> None:
    """They were written exactly and read back as floats (2.4197857161011713e+37)."""
    restored: list[Any] = []
    agent.checkpoints.register("ids", lambda ctx: {"id": number}, lambda v, a, f: restored.append(v))
    info = agent.checkpoints.create("routine")
    agent.checkpoints.flush()
    fresh = Agent.open(agent.id, home=agent.home)
    fresh.checkpoints.register("ids", None, lambda v, a, f: restored.append(v))
    fresh.checkpoints.restore(info.name)
    assert restored == [{"id": number}] and type(restored[0]["id"]) is int
    assert fresh.checkpoints.read(info.name).data["exact_numbers"] is True
    # An ordinary checkpoint does not carry the mark (and is read by the fast reader).
    agent.checkpoints.unregister("ids")
    assert "exact_numbers" not in agent.checkpoints.read(agent.checkpoints.create("routine").name).data


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_a_blank_summary_is_no_summary(agent: Agent, blank: str) -> None:
    from phoenix_protocol.services import _sessions

    info = agent.checkpoints.create("routine", summary=blank)
    assert info.label is None and agent.checkpoints.read(info.name).summary is None
    agent.state.set_status("working", "Port the scheduler")
    agent.state.add_note("next_action", "benchmark it")
    ended = _sessions.end(agent, summary=blank)  # as none: the session's default summary
    assert ended.label == "Port the scheduler (1 open item remains)"
    assert _sessions.list_sessions(agent)[-1]["summary"] == ended.label


def test_restore_does_not_bring_back_what_was_finished_since_the_checkpoint(agent: Agent, clock: ManualClock) -> None:
    """A note resolved and a task cleared after the checkpoint are finished, not lost: the next
    session's restore must not hand them back (it used to put back all notes whenever state.json
    had none, and the task whenever it had none)."""
    _working(agent)
    info = agent.checkpoints.create("routine")
    clock.advance(5)
    state = agent.state.read()
    for note in state.open_loops + state.next_actions:
        agent.state.resolve_note(note["id"])
    agent.state.set_status("idle", event="state_idle")  # `phx state idle`: the task cleared on purpose
    assert agent.state.read().current_task == ""
    result = agent.checkpoints.restore(info.name)
    state = agent.state.read()
    assert (state.current_task, state.open_loops, state.next_actions) == ("", [], [])
    assert result.applied["phoenix_state"]["restored"] == []


def test_restore_puts_back_the_notes_a_lost_state_json_held(agent: Agent, clock: ManualClock) -> None:
    """state.json lost, and a note added since (numbered 1 again): the checkpoint's notes come
    back, the one whose number was taken with the next number; one resolved since does not."""
    _working(agent)
    agent.state.add_note("open_loop", "Resolved after the checkpoint")
    info = agent.checkpoints.create("routine")
    clock.advance(5)
    agent.state.resolve_note(3)
    _started_over(agent)
    _state, number = agent.state.add_note("open_loop", "Written after the loss")
    assert number == 1
    agent.checkpoints.restore(info.name)
    state = agent.state.read()
    notes = {n["text"]: n["id"] for n in state.open_loops + state.next_actions}
    assert set(notes) == {"Written after the loss", "Timer drift under load", "Benchmark with 1k timers"}
    assert len(set(notes.values())) == 3 and notes["Written after the loss"] == 1
    assert state.note_seq >= max(notes.values())
    _state, number = agent.state.add_note("next_action", "Next")
    assert number not in notes.values()


def test_restore_gives_back_notes_of_the_same_text_in_each_list(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    agent.state.add_note("open_loop", "Check the timer tests")
    agent.state.add_note("next_action", "Check the timer tests")
    info = agent.checkpoints.create("routine")
    clock.advance(5)
    _started_over(agent)
    agent.checkpoints.restore(info.name)
    state = agent.state.read()
    assert [n["text"] for n in state.open_loops] == ["Timer drift under load", "Check the timer tests"]
    assert [n["text"] for n in state.next_actions] == ["Benchmark with 1k timers", "Check the timer tests"]


def test_a_note_resolved_under_its_new_number_does_not_come_back(agent: Agent, clock: ManualClock) -> None:
    _working(agent)
    info = agent.checkpoints.create("routine")
    clock.advance(5)
    _started_over(agent)
    agent.state.add_note("open_loop", "Written after the loss")  # takes number 1
    agent.checkpoints.restore(info.name)
    notes = {n["text"]: n["id"] for n in agent.state.read().open_loops}
    agent.state.resolve_note(notes["Timer drift under load"])  # renumbered, then finished
    agent.checkpoints.restore(info.name)  # the next session's start, from the same checkpoint
    assert [n["text"] for n in agent.state.read().open_loops] == ["Written after the loss"]


ROTATING = {"ops_max_bytes": 4096, "ops_keep": 1}
"""An ops log that keeps little: ``rotate_past`` moves its oldest kept event past a checkpoint."""


def rotate_past(agent: Agent) -> None:
    """Later activity that rotates a ``ROTATING`` agent's ops log past what came before."""
    for i in range(200):
        agent.record("note", "ok", {"i": i, "pad": "x" * 100})


def test_restore_after_a_stall_or_rotation_falls_back_to_putting_back(home: Home, clock: ManualClock) -> None:
    """A stall (the watchdog's error) leaves the task unfinished; an ops log rotated past the
    snapshot cannot say what was finished: in both, a lost state gets task and notes back."""
    agent = Agent.open("rot", home=home, clock=clock, config_overrides=ROTATING)
    _working(agent)
    info = agent.checkpoints.create("routine")
    clock.advance(5)
    agent.state.set_status("error", "no progress for 20 minutes", source="watchdog", event="stalled")
    _started_over(agent)
    agent.checkpoints.restore(info.name)
    assert agent.state.read().current_task == "Port the scheduler to asyncio"
    agent.state.resolve_note(1)
    rotate_past(agent)  # the snapshot
    assert agent.ops.read()[0][0]["seq"] > 10
    _started_over(agent)
    agent.checkpoints.restore(info.name)
    assert "Timer drift under load" in [n["text"] for n in agent.state.read().open_loops]  # unknown: back


def _notes(agent: Agent) -> tuple[list[tuple[int, str]], list[tuple[int, str]], int]:
    state = agent.state.read()
    return (
        [(n["id"], n["text"]) for n in state.open_loops],
        [(n["id"], n["text"]) for n in state.next_actions],
        state.note_seq,
    )


def test_restore_replays_what_happened_since_the_checkpoint(agent: Agent, clock: ManualClock) -> None:
    """The truth is the snapshot with the events since replayed over it: a note of the same text
    added and resolved since does not hide the snapshot's; a resolution applies to its own list;
    a task left and resumed comes back; notes added since and lost come back, numbering on."""
    agent.sessions.begin("s1")
    agent.state.set_status("working", "Port the scheduler")
    agent.state.add_note("open_loop", "Write the tests")  # 1
    agent.state.add_note("next_action", "Flaky timer test")  # 2
    agent.state.add_note("open_loop", "Flaky timer test")  # 3
    agent.checkpoints.create("routine")
    clock.advance(5)
    _state, later = agent.state.add_note("next_action", "Write the tests")  # 4, then resolved
    agent.state.resolve_note(later)
    agent.state.resolve_note(2)  # the next action, not the open loop of the same text
    agent.state.set_status("working", "Answer a quick question")
    agent.state.set_status("idle", "answered")
    agent.state.set_status("working", "Port the scheduler")  # resumed
    agent.state.add_note("next_action", "Benchmark")  # 5, added since
    before = agent.state.read().note_seq
    _started_over(agent)
    agent.sessions.begin("s2")
    loops, actions, seq = _notes(agent)
    assert loops == [(1, "Write the tests"), (3, "Flaky timer test")]
    assert actions == [(5, "Benchmark")]
    assert agent.state.read().current_task == "Port the scheduler"
    assert seq >= before
    assert agent.state.add_note("open_loop", "Next")[1] == before + 1


def test_restore_never_gives_two_notes_one_number(home: Home, clock: ManualClock) -> None:
    """A lost state.json numbers from 1 again: the checkpoint's notes put back get numbers of
    their own, with --force as without, and when the ops log cannot tell what happened since."""
    for force, rotated in ((False, False), (True, False), (False, True)):
        overrides = ROTATING if rotated else {}
        agent = Agent.open(f"n{int(force)}{int(rotated)}", home=home, clock=clock, config_overrides=overrides)
        agent.sessions.begin("s1")
        agent.state.add_note("next_action", "Write the migration")  # 1
        agent.checkpoints.create("routine")
        if rotated:
            rotate_past(agent)
        _started_over(agent)
        agent.state.add_note("open_loop", "Why did state.json vanish?")  # 1 again
        agent.sessions.begin("s2", force=force)
        loops, actions, _seq = _notes(agent)
        numbers = [n for n, _t in loops + actions]
        assert len(numbers) == len(set(numbers)), (force, rotated, loops, actions)
        assert "Write the migration" in [t for _n, t in actions]


def _view(agent: Agent) -> tuple[str, list[tuple[int, str]], list[tuple[int, str]]]:
    loops, actions, _seq = _notes(agent)
    return agent.state.read().current_task, loops, actions


def test_a_forced_restore_is_logged_so_the_next_start_and_doctor_agree(agent: Agent, home: Home) -> None:
    from phoenix_protocol.agent._replay import rebuild_state

    agent.sessions.begin("s1")
    agent.state.set_status("working", "Port the scheduler")
    agent.state.add_note("open_loop", "A")  # 1, in the checkpoint
    info = agent.checkpoints.create("routine")
    agent.state.add_note("next_action", "Wrong idea")  # 2, since: --force drops it
    agent.state.resolve_note(1)  # resolved by mistake: --force brings it back
    agent.checkpoints.restore(info.name, force=True)
    forced = _view(agent)
    assert forced == ("Port the scheduler", [(1, "A")], [])
    agent.sessions.begin("s2")  # an ordinary start from the same checkpoint: nothing to undo
    assert _view(agent) == forced
    rebuilt, _used = rebuild_state(agent.ops.read()[0])
    assert ([(n["id"], n["text"]) for n in rebuilt.open_loops], rebuilt.next_actions) == ([(1, "A")], [])


def test_numbering_goes_on_past_every_number_the_log_gave(home: Home, clock: ManualClock) -> None:
    """With --force, and when the log rotated past the snapshot: a lost state.json's next note
    never takes a number the log already gave another note."""
    for force, rotated in ((True, False), (False, True)):
        overrides = ROTATING if rotated else {}
        agent = Agent.open(f"m{int(force)}", home=home, clock=clock, config_overrides=overrides)
        agent.sessions.begin("s1")
        agent.state.add_note("open_loop", "A")  # 1
        agent.checkpoints.create("routine")
        if rotated:
            rotate_past(agent)
        agent.state.add_note("open_loop", "B")  # 2
        agent.state.add_note("open_loop", "C")  # 3
        _started_over(agent)
        agent.sessions.begin("s2", force=force)
        _state, number = agent.state.add_note("open_loop", "D")
        assert number == 4, (force, rotated)


def test_a_task_done_since_the_checkpoint_does_not_come_back(agent: Agent, clock: ManualClock) -> None:
    agent.sessions.begin("s1")
    agent.state.set_status("working", "Port the scheduler")
    agent.checkpoints.create("routine")
    agent.state.set_status("idle", "scheduler merged")  # `phx state done`: the task kept, as done
    _started_over(agent)
    agent.sessions.begin("s2")
    state = agent.state.read()
    assert (state.current_task, state.last_output) == ("", "scheduler merged")
    agent.sessions.end(summary="s2 done")
    agent.state.set_status("working", "Review the port")
    agent.checkpoints.create("routine")
    agent.sessions.end(summary="a session's end leaves the task to the next")
    _started_over(agent)
    agent.sessions.begin("s3")
    assert agent.state.read().current_task == "Review the port"


def test_a_forced_restore_across_both_lists_and_its_task_agree_with_a_rebuild(agent: Agent) -> None:
    """state.json lost and numbering restarted in the other list; then `phx restore --force`
    back to the checkpoint's task and notes: the ops log must say so, for `phx doctor`."""
    from phoenix_protocol.agent._replay import rebuild_state

    agent.sessions.begin("s1")
    agent.state.set_status("working", "Task A")
    agent.state.add_note("open_loop", "A")  # 1
    info = agent.checkpoints.create("routine")
    _started_over(agent)
    agent.state.set_status("working", "Task B")
    agent.state.add_note("next_action", "X")  # 1 again, in the other list
    agent.checkpoints.restore(info.name, force=True)
    forced = _view(agent)
    assert forced == ("Task A", [(1, "A")], [])
    rebuilt, _used = rebuild_state(agent.ops.read()[0])
    loops = [(n["id"], n["text"]) for n in rebuilt.open_loops]
    actions = [(n["id"], n["text"]) for n in rebuilt.next_actions]
    assert (rebuilt.current_task, loops, actions) == forced
    agent.sessions.begin("s2")
    assert _view(agent) == forced
