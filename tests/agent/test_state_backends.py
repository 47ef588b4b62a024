"""One conformance suite for agents' state and ops log, run on both stores: the home's files (the
``sqlite`` store keeps them as files) and PostgreSQL (``PHOENIX_STORE=postgresql://…``, a fresh
schema on the real server per test).

On files "elsewhere" is another process on the same home; on PostgreSQL it is another machine:
another home (its own copy of the agent) on the same server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_hook as _hook
from conftest import terminate_transactions_on
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import StatusRefusedError, StorageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._doctor import check_agent as doctor_check
from phoenix_protocol.services._watchdog import known_agents, run_pass
from phoenix_protocol.store._pg import describe

UNREACHABLE = "postgresql://postgres@127.0.0.1:5499/test"


@pytest.fixture
def agent(backend: str, home: Home, clock: ManualClock) -> Agent:
    return Agent.open("zero", home=home, clock=clock)


def elsewhere(agent: Agent, backend: str, tmp_path: Path, name: str = "other") -> Agent:
    """The same agent seen from another process (sqlite: the home's files) or another machine (PostgreSQL)."""
    home = agent.home if backend == "sqlite" else Home(str(tmp_path / name / ".phoenix"))
    return Agent.open(agent.id, home=home, clock=agent.clock)


def tick(agent: Agent, seconds: float = 1) -> None:
    clock = agent.clock
    assert isinstance(clock, ManualClock)
    clock.advance(seconds)


def names(agent: Agent) -> list[str]:
    return [e["event"] for e in agent.ops.read()[0]]


def test_changes_are_seen_elsewhere(backend: str, agent: Agent, tmp_path: Path) -> None:
    agent.state.start_session("s1", process={"pid": 4242, "start_time": 1.0, "host": "box-b"})
    agent.state.set_status("working", "migrate the billing tables")
    agent.state.add_note("open_loop", "the index on invoices is still missing")
    agent.state.add_note("next_action", "run the migration on staging")
    other = elsewhere(agent, backend, tmp_path)
    seen = other.state.read()
    assert seen.to_dict() == agent.state.read().to_dict()
    assert seen.current_task == "migrate the billing tables" and seen.host == "box-b"
    assert [n["text"] for n in seen.next_actions] == ["run the migration on staging"]
    assert names(other) == ["session_start", "task_started", "note_added", "note_added"]
    assert [e["seq"] for e in other.ops.read()[0]] == [1, 2, 3, 4]
    assert [e["event"] for e in other.ops.tail(2)[0]] == ["note_added", "note_added"]
    assert [e["seq"] for e in other.ops.read(since_seq=2)[0]] == [3, 4]
    if backend == "postgres":
        assert not os.path.exists(other.dir)  # reading from another machine writes nothing there


def test_changes_from_two_places_are_all_kept(backend: str, agent: Agent, tmp_path: Path) -> None:
    """Each writer starts from the newest record: no change made elsewhere is lost, numbers of
    notes are never given twice, and both places end up with the same state."""
    other = elsewhere(agent, backend, tmp_path)
    agent.state.set_status("working", "first task")
    for i in range(3):
        tick(agent)
        agent.state.add_note("next_action", f"here {i}")
        tick(agent)
        other.state.add_note("next_action", f"there {i}")
    _state, resolved = other.state.resolve_note(1)
    assert resolved["text"] == "here 0"
    final = agent.state.read()
    assert [(n["id"], n["text"]) for n in final.next_actions] == [
        (2, "there 0"),
        (3, "here 1"),
        (4, "there 1"),
        (5, "here 2"),
        (6, "there 2"),
    ]
    assert other.state.read().to_dict() == final.to_dict()
    events = [e for e in agent.ops.read()[0] if e["event"] in ("note_added", "note_resolved")]
    assert [e["meta"]["id"] for e in events] == [1, 2, 3, 4, 5, 6, 1]


def test_a_verdict_made_elsewhere_stands(backend: str, agent: Agent, tmp_path: Path) -> None:
    """The watchdog's verdict (on another machine) reaches this copy and outranks the model."""
    agent.state.start_session("s1")
    agent.state.set_status("working", "long job")
    tick(agent)
    watchdog = elsewhere(agent, backend, tmp_path)
    watchdog.state.set_status("error", "stalled: no heartbeat", source="watchdog", event="stalled")
    with pytest.raises(StatusRefusedError):
        agent.state.set_status("idle", "done", session_id="s1")
    state = agent.state.read()
    assert (state.status, state.updated_by, state.error_message) == ("error", "watchdog", "stalled: no heartbeat")
    tick(agent)
    agent.state.start_session("s2")  # a new session clears the verdict, wherever it was made
    assert watchdog.state.read().status == "working"


def test_the_hot_path_is_passed_on_by_a_sync(backend: str, agent: Agent, tmp_path: Path) -> None:
    agent.state.start_session("s1")
    tick(agent, 5)
    agent.state.heartbeat(session_id="s1", tool="Bash", input_digest="d1")
    other = elsewhere(agent, backend, tmp_path)
    if backend == "postgres":
        assert other.state.read().heartbeat_seq == 0  # on this machine's copy only, until passed on
        report = agent.sync_store()
        assert report is not None and report["events"] == 1 and not report["pulled"]
        assert agent.sync_store()["events"] == 0  # type: ignore[index]  # nothing new: nothing sent
    else:
        assert agent.sync_store() is None
    seen = other.state.read()
    assert seen.heartbeat_seq == 1 and seen.last_tool and seen.last_tool["name"] == "Bash"
    assert names(other)[-1] == "heartbeat"


def test_heartbeats_survive_a_change_made_elsewhere(backend: str, agent: Agent, tmp_path: Path) -> None:
    """A hot-path heartbeat not yet passed on meets a newer record (a change made elsewhere):
    the copy takes the newer record and keeps its own newer heartbeat fields."""
    agent.state.start_session("s1")
    agent.state.set_status("working", "task A")
    other = elsewhere(agent, backend, tmp_path)
    tick(agent)
    other.state.add_note("next_action", "added elsewhere")
    tick(agent)
    agent.state.heartbeat(session_id="s1", tool="Edit")
    agent.sync_store()
    for view in (agent, other):
        state = view.state.read()
        assert [n["text"] for n in state.next_actions] == ["added elsewhere"]
        assert state.heartbeat_seq == 1 and state.last_tool and state.last_tool["name"] == "Edit"
    assert agent.state.read_local().to_dict() == other.state.read().to_dict()


def test_the_log_rebuilds_a_copy_that_took_the_record(backend: str, agent: Agent, tmp_path: Path) -> None:
    """``phx doctor`` rebuilds a damaged state.json from the ops log; on PostgreSQL the copy's
    log holds the record it took (``state_pulled``) and what it did since."""
    agent.state.set_status("working", "the task")
    agent.state.add_note("open_loop", "loop one")
    other = elsewhere(agent, backend, tmp_path)
    tick(agent)
    other.state.add_note("next_action", "then this")
    expected = other.state.read_local()
    with open(other.state.path, "w") as fh:
        fh.write('{"status": "work')
    findings = doctor_check(other, repair=True)
    assert any(f.repaired and "rebuilt" in f.message for f in findings), [f.message for f in findings]
    rebuilt = other.state.read_local()
    assert (rebuilt.status, rebuilt.current_task) == (expected.status, expected.current_task)
    assert [n["text"] for n in rebuilt.open_loops] == ["loop one"]
    assert [n["text"] for n in rebuilt.next_actions] == ["then this"]


def test_the_watchdog_judges_agents_running_elsewhere(backend: str, agent: Agent, tmp_path: Path) -> None:
    agent.state.start_session("s1", process={"pid": 4242, "start_time": 1.0, "host": "far-away-host"})
    agent.state.set_status("working", "remote work")
    watchdog_home = elsewhere(agent, backend, tmp_path).home
    assert "zero" in known_agents(watchdog_home)
    report = run_pass(watchdog_home, clock=agent.clock)
    assert [(v.agent_id, v.verdict) for v in report.verdicts] == [("zero", "remote")]
    tick(agent, agent.config.watchdog_remote_grace + 1)
    report = run_pass(watchdog_home, clock=agent.clock)
    assert [(v.agent_id, v.verdict, v.action) for v in report.verdicts] == [("zero", "stalled", "marked_stalled")]
    agent.sync_store()
    state = agent.state.read_local()  # this machine's copy took the verdict
    assert (state.status, state.updated_by, state.status_event) == ("error", "watchdog", "stalled")


def test_the_cli_reads_and_writes_on_either_store(
    backend: str, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.cli._main import cli

    def phx(where: Path, *args: str) -> tuple[int, Any]:
        monkeypatch.chdir(where)
        capsys.readouterr()
        code = cli([*args, "--json"])
        out = capsys.readouterr().out
        return code, json.loads(out) if out.strip() else None

    code, _ = phx(project, "state", "working", "ship the release", "--agent", "zero")
    assert code == 0
    assert phx(project, "note", "next-action", "tag v1.2", "--agent", "zero")[0] == 0
    far = tmp_path / "far" if backend == "postgres" else project
    far.mkdir(exist_ok=True)
    code, shown = phx(far, "state", "show", "--agent", "zero")
    assert code == 0 and shown["state"]["status"] == "working"
    assert shown["state"]["current_task"] == "ship the release"
    assert shown["store"] == ("files" if backend == "sqlite" else describe(os.environ["PHOENIX_STORE"]))
    code, log = phx(far, "log", "--agent", "zero")
    assert code == 0 and [e["event"] for e in log["events"]] == ["task_started", "note_added"]


def test_an_unreachable_server_fails_clearly_and_writes_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.cli._main import cli

    monkeypatch.chdir(project)
    monkeypatch.setenv("PHOENIX_STORE", UNREACHABLE)
    code = cli(["state", "working", "anything", "--agent", "zero"])
    err = capsys.readouterr().err
    assert code != 0 and "127.0.0.1:5499" in err
    assert not os.path.exists(project / ".phoenix" / "agents" / "zero" / "state.json")
    agent = Agent.open("zero", home=Home(str(project / ".phoenix")))
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:5499"):
        agent.state.read()


def test_hooks_keep_the_record_on_the_server(project: Path, tmp_path: Path, pg_url: str) -> None:
    """SessionStart and SessionEnd change the record on the server; PostToolUse (the hot path)
    changes this machine's copy and passes it on from a detached process every 30 s; with the
    server gone the hooks still exit 0, change the copy, and the next sync passes it on."""
    env = {"PHOENIX_STORE": pg_url, "PHOENIX_AGENT": "zero"}
    assert _hook(project, "session-start", "SessionStart", env, source="startup").returncode == 0
    tool = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": {}}
    inline = {**env, "PHOENIX_HOOK_INLINE": "1"}
    assert _hook(project, "post-tool-use", "PostToolUse", inline, **tool).returncode == 0
    far = Agent.open("zero", home=Home(str(tmp_path / "far" / ".phoenix")), env={"PHOENIX_STORE": pg_url})
    seen = far.state.read()
    assert (seen.status, seen.session_id, seen.heartbeat_seq) == ("working", "sess-1", 1)  # passed on at once
    assert _hook(project, "post-tool-use", "PostToolUse", inline, **tool).returncode == 0
    assert far.state.read().heartbeat_seq == 1  # within 30 s: this machine's copy only
    ended = _hook(project, "session-end", "SessionEnd", env, reason="logout")
    assert ended.returncode == 0, ended.stderr
    seen = far.state.read()
    assert (seen.status, seen.status_event, seen.heartbeat_seq) == ("idle", "session_end", 2)
    assert "session_end" in [e["event"] for e in far.ops.read()[0]]

    gone = {**env, "PHOENIX_STORE": UNREACHABLE}
    started = _hook(project, "session-start", "SessionStart", gone, source="startup", session_id="sess-2")
    assert started.returncode == 0, started.stderr
    here = Agent.open("zero", home=Home(str(project / ".phoenix")), env={"PHOENIX_STORE": pg_url})
    copy = here.state.read_local()
    assert (copy.status, copy.session_id) == ("working", "sess-2")
    assert "store_unreachable" in [e["event"] for e in here.ops.log.read()[0]]
    assert far.state.read().session_id == "sess-1"  # the server has not heard of it yet
    here.sync_store()
    assert far.state.read().session_id == "sess-2"


CONCURRENT_WRITER = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._pg import describe
agent = Agent.open("zero", home=Home(sys.argv[1]))
for i in range(int(sys.argv[3])):
    agent.state.add_note("next_action", f"{sys.argv[2]} {i}")
"""


def test_writers_on_many_machines_at_once_lose_nothing(pg_url: str, tmp_path: Path) -> None:
    """Six processes, each with its own copy (as on six machines), add notes at the same time:
    every note is kept, every number given once, and every copy converges to the server's record."""
    homes = [str(tmp_path / f"m{i}" / ".phoenix") for i in range(6)]
    env = {**os.environ, "PHOENIX_STORE": pg_url}
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_WRITER, h, f"m{i}", "15"], env=env, stderr=subprocess.PIPE)
        for i, h in enumerate(homes)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    agents = [Agent.open("zero", home=Home(h), env={"PHOENIX_STORE": pg_url}) for h in homes]
    state = agents[0].state.read()
    texts = sorted(n["text"] for n in state.next_actions)
    assert texts == sorted(f"m{i} {j}" for i in range(6) for j in range(15))
    assert sorted(n["id"] for n in state.next_actions) == list(range(1, 91))
    added = [e for e in agents[0].ops.read()[0] if e["event"] == "note_added"]
    assert sorted(e["meta"]["id"] for e in added) == list(range(1, 91))
    for other in agents[1:]:
        other.sync_store()
        assert other.state.read().to_dict() == state.to_dict()


def kill_before_the_push(monkeypatch: pytest.MonkeyPatch, pg_url: str, table: str) -> list[int]:
    """Kill the change's connection once, after the copy changed and before the pushes (the
    list returned gets how many connections were killed)."""
    from phoenix_protocol.agent import _state_pg

    killed: list[int] = []
    original = _state_pg.PgAgentRecord._push_events

    def kill_then_push(self: Any, conn: Any, origin: str) -> int:
        if not killed:
            killed.append(terminate_transactions_on(pg_url, table))
        return original(self, conn, origin)

    monkeypatch.setattr(_state_pg.PgAgentRecord, "_push_events", kill_then_push)
    return killed


def test_a_change_whose_connection_is_killed_is_made_once(
    home: Home, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg_terminate_backend`` after the copy changed, before the commit: the change is passed on
    by the retry on a fresh connection, and made exactly once."""
    import psycopg

    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    agent = Agent.open("zero", home=home, clock=clock)
    agent.state.set_status("working", "before")
    killed = kill_before_the_push(monkeypatch, pg_url, "phx_agent_state")
    agent.state.add_note("next_action", "exactly once")
    assert killed == [1]
    with psycopg.connect(pg_url) as conn:
        notes = conn.execute("SELECT count(*) FROM phx_ops_events WHERE event = 'note_added'").fetchone()
        rev = conn.execute("SELECT rev FROM phx_agent_state WHERE agent_id = 'zero'").fetchone()
    assert notes == (1,) and rev == (2,)
    assert [n["text"] for n in agent.state.read_local().next_actions] == ["exactly once"]
    assert [e["event"] for e in agent.ops.log.read()[0]] == ["task_started", "note_added"]


def test_the_server_keeps_what_the_file_store_keeps(home: Home, clock: ManualClock, pg_url: str) -> None:
    """Retention in SQL: the newest events up to (ops_keep + 1) x ops_max_bytes of lines."""
    import psycopg

    overrides = {"store": pg_url, "ops_max_bytes": 4096, "ops_keep": 1}
    agent = Agent.open("zero", home=home, clock=clock, config_overrides=overrides)
    for i in range(520):
        agent.record("step", "ok", {"i": i, "pad": "x" * 40}, trusted=True)
        if i % 20 == 19:
            agent.sync_store()  # passed on a few at a time, as the hooks do; the last crosses seq 512
    with psycopg.connect(pg_url) as conn:
        total, low, high, count = conn.execute(
            "SELECT sum(length(line) + 1), min(seq), max(seq), count(*) FROM phx_ops_events"
        ).fetchone()  # type: ignore[misc]
    assert total <= 2 * 4096 and high == 520 and count == high - low + 1 and 50 < count < 520
    assert [e["meta"]["i"] for e in agent.ops.tail(3)[0]] == [517, 518, 519]


def test_a_session_moves_to_another_machine_with_its_work(tmp_path: Path, pg_url: str) -> None:
    """The headline: an agent works on machine A (hooks, CLI notes), its session ends; the next
    session starts on machine B, whose SessionStart brief carries the task and notes from A."""
    env = {"PHOENIX_STORE": pg_url, "PHOENIX_AGENT": "zero"}
    machine_a, machine_b = tmp_path / "a", tmp_path / "b"
    for where in (machine_a, machine_b):
        where.mkdir()
    assert _hook(machine_a, "session-start", "SessionStart", env, source="startup").returncode == 0
    a = Agent.open("zero", home=Home(str(machine_a / ".phoenix")), env=env)
    a.state.set_status("working", "port the scheduler to asyncio")
    a.state.add_note("open_loop", "the retry queue still uses threads")
    a.state.add_note("next_action", "replace time.sleep in worker.py")
    assert _hook(machine_a, "session-end", "SessionEnd", env, reason="logout").returncode == 0
    started = _hook(machine_b, "session-start", "SessionStart", env, source="startup", session_id="sess-2")
    assert started.returncode == 0, started.stderr
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    for text in ("port the scheduler to asyncio", "the retry queue still uses threads", "replace time.sleep"):
        assert text in context
    b = Agent.open("zero", home=Home(str(machine_b / ".phoenix")), env=env)
    state = b.state.read_local()  # machine B's copy took the record over
    assert (state.status, state.session_id, state.current_task) == (
        "working",
        "sess-2",
        "port the scheduler to asyncio",
    )
    assert a.state.read().session_id == "sess-2"  # and machine A sees the session on B
    pulled = [e for e in b.ops.log.read()[0] if e["event"] == "state_pulled"]
    assert len(pulled) == 1 and pulled[0]["seq"] > max(e["seq"] for e in a.ops.log.read()[0])


def test_a_copy_without_the_state_never_resets_the_record(pg_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """A machine whose copy holds only events (or lost its state.json) takes the server's record
    before it changes it: a change there never starts from an empty state."""
    env = {"PHOENIX_STORE": pg_url}
    a = Agent.open("zero", home=Home(str(tmp_path / "a")), env=env, clock=clock)
    a.state.set_status("working", "the real task")
    a.state.add_note("next_action", "keep me")
    b = Agent.open("zero", home=Home(str(tmp_path / "b")), env=env, clock=clock)
    b.record("looked_at", "ok", {"by": "b"}, trusted=True)  # events only, no state here
    report = b.sync_store()
    assert report is not None and report["events"] == 1 and not report["pulled"] and report["rev"] is None
    b.state.add_note("next_action", "and me")
    assert [n["text"] for n in a.state.read().next_actions] == ["keep me", "and me"]
    assert a.state.read().current_task == "the real task"
    os.unlink(a.state.path)  # lost on machine A: the next change there takes the record again
    a.state.add_note("open_loop", "still whole")
    state = b.state.read()
    assert [n["text"] for n in state.next_actions] == ["keep me", "and me"]
    assert [n["text"] for n in state.open_loops] == ["still whole"]


def test_phx_db_sync_passes_the_copies_on(
    project: Path, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phoenix_protocol.cli._main import cli

    monkeypatch.chdir(project)
    monkeypatch.setenv("PHOENIX_STORE", pg_url)
    here = Agent.open("zero", home=Home(str(project / ".phoenix")))
    here.state.start_session("s1")
    here.state.heartbeat(session_id="s1", tool="Read")  # the hot path: this copy only
    far = Agent.open("zero", home=Home(str(tmp_path / "far")))
    assert far.state.read().heartbeat_seq == 0
    capsys.readouterr()
    assert cli(["db", "sync", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(r["agent"], r["events"], r["pulled"]) for r in result["agents"]] == [("zero", 1, False)]
    assert result["agents"][0]["rev"] == 2 and far.state.read().heartbeat_seq == 1
    assert cli(["db", "sync"]) == 0 and "zero" in capsys.readouterr().out
    monkeypatch.setenv("PHOENIX_STORE", "files")
    assert cli(["db", "sync"]) == 2 and "not PostgreSQL" in capsys.readouterr().err


KILLED_WRITER = r"""
import sys
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._home import Home
agent = Agent.open("zero", home=Home(sys.argv[1]))
start = int(sys.argv[2])
print("ready", flush=True)
for i in range(start, start + 1000):
    agent.state.add_note("next_action", f"n{i}")
    print(i, flush=True)
"""


def test_writers_killed_mid_change_leave_the_copy_and_the_server_whole(pg_url: str, tmp_path: Path) -> None:
    """SIGKILL a writer at random moments (between its copy's change and the commit, inside the
    transaction, anywhere): every acknowledged change is in the copy, the next sync makes the
    server's record equal to the copy, and the server holds the copy's events exactly once."""
    import random
    import signal

    import psycopg

    rng = random.Random(8)
    home = str(tmp_path / "m" / ".phoenix")
    env = {**os.environ, "PHOENIX_STORE": pg_url}
    acked: list[int] = []
    kills = behind = 0
    for _round in range(40):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, home, str(len(acked) + 1000 * _round)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for _ in range(rng.randrange(0, 4)):
            acked.append(int(proc.stdout.readline()))
        time.sleep(rng.uniform(0, 0.02))
        proc.send_signal(signal.SIGKILL)
        out, _err = proc.communicate(timeout=30)
        acked += [int(line) for line in out.split()]
        kills += proc.returncode == -signal.SIGKILL
        agent = Agent.open("zero", home=Home(home), env={"PHOENIX_STORE": pg_url})
        copy_notes = [n["text"] for n in agent.state.read_local().next_actions]
        assert all(f"n{i}" in copy_notes for i in acked), "an acknowledged change is missing"
        with psycopg.connect(pg_url) as conn:
            before = conn.execute("SELECT state FROM phx_agent_state").fetchone()
        with open(agent.state.path) as fh:
            behind += before is None or before[0] != fh.read()  # killed between the copy and the commit
        agent.sync_store()
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT state FROM phx_agent_state").fetchone()
            lines = [r[0] for r in conn.execute("SELECT line FROM phx_ops_events ORDER BY seq").fetchall()]
        with open(agent.state.path) as fh:
            assert row is not None and row[0] == fh.read()  # the server's record is the copy
        local = [json.dumps(e, separators=(",", ":")) for e in agent.ops.log.read()[0]]
        assert [json.loads(x) for x in lines] == [json.loads(x) for x in local]  # each event once
    # About one kill in five lands between the copy's change and the commit (measured: 6 and 7
    # of 30); the case this test is for must have happened.
    assert kills >= 35 and behind >= 1, (kills, behind)


def test_doctor_reports_and_passes_on_what_the_copy_holds(pg_url: str, tmp_path: Path, clock: ManualClock) -> None:
    env = {"PHOENIX_STORE": pg_url}
    here = Agent.open("zero", home=Home(str(tmp_path / "here")), env=env, clock=clock)
    here.state.start_session("s1")
    tick(here)
    here.state.heartbeat(session_id="s1", tool="Grep")  # the hot path: this copy only

    def copy_finding(agent: Agent, repair: bool) -> Any:
        found = [f for f in doctor_check(agent, repair=repair) if "copy" in f.message or "event(s)" in f.message]
        assert len(found) == 1, [f.message for f in doctor_check(agent, repair=False)]
        return found[0]

    checked = copy_finding(here, repair=False)
    assert checked.level == "warn" and "1 event(s) and the state not yet on" in checked.message
    assert not checked.repaired
    repaired = copy_finding(here, repair=True)
    assert repaired.repaired and "passed on to" in repaired.message
    far = Agent.open("zero", home=Home(str(tmp_path / "far")), env=env, clock=clock)
    assert far.state.read().heartbeat_seq == 1
    assert copy_finding(here, repair=False).level == "ok"
    far.state.add_note("next_action", "changed elsewhere")
    behind = copy_finding(here, repair=False)
    assert behind.level == "ok" and "newer record" in behind.message


def test_a_change_that_took_the_record_and_lost_its_connection_is_passed_on_whole(
    tmp_path: Path, clock: ManualClock, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry after a killed connection passes on the copy as the first attempt left it (the
    record it took plus the change), once; the other machine's change and this one both stand."""

    env = {"PHOENIX_STORE": pg_url}
    a = Agent.open("zero", home=Home(str(tmp_path / "a")), env=env, clock=clock)
    b = Agent.open("zero", home=Home(str(tmp_path / "b")), env=env, clock=clock)
    a.state.set_status("working", "the task")
    b.state.add_note("next_action", "from b")  # a's copy is now behind: a's next change takes the record
    killed = kill_before_the_push(monkeypatch, pg_url, "phx_ops_events")
    a.state.add_note("next_action", "from a")
    assert killed == [1]
    for view in (a, b):
        assert [n["text"] for n in view.state.read().next_actions] == ["from b", "from a"]
    assert [e["event"] for e in a.ops.log.read()[0]] == ["task_started", "state_pulled", "note_added"]  # one pull
    assert [e["event"] for e in b.ops.read()[0]].count("note_added") == 2
