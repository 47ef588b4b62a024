"""A PAIF session round trip across two real processes, and what restore and identity refuse.

Process 1 sets up an agent (an identity with an immutable name and role and some mutable
beliefs), begins a session the way the SessionStart hook does, works on a task with notes, adds a
belief and a skill, records drift checks and memories, and ends the session with a summary.
Process 2, a fresh interpreter, begins the next session: everything the session checkpoint holds
must come back. Time is injected (``ManualClock`` in both processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import change_checkpoint, plant_checkpoint, rewrite_checkpoint
from phoenix_protocol.agent._identity import Identity, IdentityCoreError, digest_of
from phoenix_protocol.core._clock import ManualClock, iso_from_ms
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import CheckpointOwnershipError

PY = sys.executable
T1 = 1_767_258_000_000  # 2026-01-01T09:00:00Z: process 1 begins
WORK_S = 5400  # process 1 works 90 minutes
T2 = T1 + 86_400_000  # the next day: process 2 begins

TASK = "Port the scheduler to asyncio"
SUMMARY = "Ported the timer wheel; the drift under load is still open"
IDENTITY_YAML = """\
# Written by hand before Phoenix first touched it.
immutable:
  name: zero
  role: release engineer
  principles: [tests before merge, small commits]
mutable:
  state:
    current_focus: ''
  beliefs:
  - subject: small commits review faster
    confidence: 0.9
"""

PROCESS_1 = r"""
import json, sys
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home

home, start_ms, work_s, task, summary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
clock = ManualClock(start_ms)
agent = Agent.open("zero", home=Home(home), clock=clock)
agent.identity.set("state.current_focus", "Scheduler on asyncio")  # the first write seals the core

agent.state.start_session("s1")  # what the SessionStart hook records before the PAIF restore
started = _sessions.begin(agent, "s1")
agent.state.set_status("working", task, session_id="s1")
agent.state.add_note("open_loop", "Timer drift under load")
agent.state.add_note("next_action", "Benchmark with 1k timers")
current = _sessions.read_current(agent)
current["memory_ids"] = ["mem-0007", "mem-0008"]  # what a memory system records during the session
current["last_recall_query"] = "asyncio timer drift"
_sessions.storage(agent).set_current(current)
clock.advance(600)
agent.identity.add("belief", {"subject": "asyncio timers drift under load", "confidence": 0.7})
agent.identity.add("skill", {"name": "asyncio", "level": "advanced"})
agent.record("drift_check", "ok", {"passed": True})
agent.record("drift_check", "ok", {"passed": True})
agent.record("drift_check", "warn", {"passed": False})
agent.write_brief()
clock.advance(work_s - 600)
info = _sessions.end(agent, "s1", summary=summary)
print(json.dumps({"begin": started.as_dict(), "checkpoint": info.as_dict()}))
"""

PROCESS_2 = r"""
import json, sys
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home

home, start_ms = sys.argv[1], int(sys.argv[2])
agent = Agent.open("zero", home=Home(home), clock=ManualClock(start_ms))
started = _sessions.begin(agent, "s2")
checkpoint = started.checkpoint
state = agent.state.read()
print(json.dumps({
    "begin": started.as_dict(),
    "checkpoint_type": checkpoint.checkpoint_type,
    "agent_id": checkpoint.agent_id,
    "summary": checkpoint.summary,
    "identity_updates": checkpoint.section("identity_updates"),
    "metadata": checkpoint.section("metadata"),
    "state": {"task": state.current_task, "open_loops": [n["text"] for n in state.open_loops],
              "next_actions": [n["text"] for n in state.next_actions]},
    "sessions": _sessions.list_sessions(agent),
}))
"""


def run(program: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([PY, "-P", "-c", program, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_a_session_comes_back_in_a_fresh_process(project: Path) -> None:
    home = Home(str(project / ".phoenix"))
    agent = Agent.open("zero", home=home, clock=ManualClock(T1))
    agent.ensure()
    Path(agent.identity.path).write_text(IDENTITY_YAML)
    (project / "scheduler.py").write_text("import asyncio\n")  # a file being worked on

    first = run(PROCESS_1, home.root, str(T1), str(WORK_S), TASK, SUMMARY)
    assert first["begin"]["checkpoint"] is None  # nothing to restore from yet
    assert first["begin"]["identity"]["mutable"]["accumulated_experience"] == 1
    name = first["checkpoint"]["name"]
    assert first["checkpoint"]["checkpoint_type"] == "session" and name.endswith("_session.checkpoint")
    brief = Path(agent.brief_path).read_text()
    assert TASK in brief
    identity = agent.identity.read()
    assert identity.mutable["state"]["last_session_at"] == iso_from_ms(T1 + WORK_S * 1000)  # set by end
    # The state and its log are lost (a lost state.json alone is rebuilt from the log): the
    # checkpoint must bring the task and notes back.
    os.unlink(agent.state.path)
    for path in agent.ops.log.files():
        os.unlink(path)

    second = run(PROCESS_2, home.root, str(T2))
    begin = second["begin"]
    assert begin["checkpoint"] == name, "process 2 must restore process 1's session checkpoint"
    assert begin["problems"] == []
    assert (second["checkpoint_type"], second["agent_id"], second["summary"]) == ("session", "zero", SUMMARY)
    restored = begin["restored"]

    context = restored["context"]
    assert context["current_focus"] == "Scheduler on asyncio"
    assert context["conversation_summary"] == SUMMARY
    assert context["pending_items"] == ["Timer drift under load", "Benchmark with 1k timers"]
    assert context["active_project_ids"] == ["project"]

    working = restored["working_memory"]
    assert working["context_stack"] == [TASK, "Benchmark with 1k timers"]
    assert working["scratchpad"] == brief
    assert "scheduler.py" in working["open_files"]

    assert restored["recent_memories"] == {
        "memory_ids": ["mem-0007", "mem-0008"],
        "last_recall_query": "asyncio timer drift",
    }
    assert restored["phoenix_state"]["restored"] == ["current_task", "open_loops", "next_actions"]
    assert second["state"] == {
        "task": TASK,
        "open_loops": ["Timer drift under load"],
        "next_actions": ["Benchmark with 1k timers"],
    }

    updates = second["identity_updates"]
    assert updates["new_beliefs"] == [{"subject": "asyncio timers drift under load", "confidence": 0.7}]
    assert updates["new_skills"] == [{"name": "asyncio", "level": "advanced"}]
    assert updates["new_relationships"] == []
    assert updates["drift_checks"] == {"passed": 2, "failed": 1}

    metadata = second["metadata"]
    assert metadata["session_id"] == "s1"
    assert metadata["started_at"] == iso_from_ms(T1)
    assert metadata["ended_at"] == iso_from_ms(T1 + WORK_S * 1000)
    assert metadata["duration_seconds"] == WORK_S
    assert metadata["checkpoint_version"] == "1.0"
    assert metadata["agent_id"] == "zero"

    identity = agent.identity.read()
    assert identity.immutable == {
        "name": "zero",
        "role": "release engineer",
        "principles": ["tests before merge", "small commits"],
    }
    assert identity.mutable["accumulated_experience"] == 2  # once per session start
    assert identity.mutable["state"]["last_session_at"] == iso_from_ms(T2)
    assert begin["identity"]["mutable"]["accumulated_experience"] == 2
    assert [b["subject"] for b in identity.mutable["beliefs"]] == [
        "small commits review faster",
        "asyncio timers drift under load",
    ]
    assert Path(agent.identity.path).read_text().startswith("# Written by hand")  # the header is kept

    sessions = second["sessions"]
    assert [s["session_id"] for s in sessions] == ["s1", "s2"]
    assert sessions[0]["started_at"] == iso_from_ms(T1)
    assert sessions[0]["ended_at"] == iso_from_ms(T1 + WORK_S * 1000)
    assert sessions[0]["duration_seconds"] == WORK_S
    assert sessions[0]["checkpoint"] == name and sessions[0]["summary"] == SUMMARY
    assert sessions[1]["started_at"] == iso_from_ms(T2) and sessions[1]["ended_at"] is None
    assert sessions[1]["restored_from"] == name


# -- what restore refuses ----------------------------------------------------------------------------


def session_checkpoint(agent: Agent, summary: str) -> str:
    agent.state.start_session("s-" + agent.id)
    agent.state.set_status("working", f"task of {agent.id}")
    name = agent.checkpoints.create("session", summary=summary).name
    agent.checkpoints.flush()  # its named file is written behind the durable log record
    return name


def test_restoring_another_agents_checkpoint_is_refused(home: Home, clock: ManualClock) -> None:
    mine = Agent.open("alpha", home=home, clock=clock)
    other = Agent.open("beta", home=home, clock=clock)
    own = session_checkpoint(mine, "alpha's own")
    clock.advance(60)
    foreign = session_checkpoint(other, "beta's work")
    state_before = Path(mine.state.path).read_bytes()

    copied = foreign  # copied as it is
    plant_checkpoint(other, foreign, mine, copied)
    disguised = foreign.replace("beta_", "alpha_", 1).replace("-00000001_", "-00000009_")
    plant_checkpoint(other, foreign, mine, disguised)  # renamed as if it were alpha's
    for name in (copied, disguised):
        with pytest.raises(CheckpointOwnershipError, match="belongs to beta"):
            mine.checkpoints.restore(name)
        with pytest.raises(CheckpointOwnershipError):
            mine.checkpoints.restore(name, force=True)
    assert Path(mine.state.path).read_bytes() == state_before
    events, _ = mine.ops.read()
    assert not [e for e in events if e["event"] == "checkpoint_restored"]

    # The newest file in alpha's directory is beta's: latest() reports it and falls back.
    checkpoint, problems = mine.checkpoints.latest()
    assert checkpoint is not None and checkpoint.name == own
    assert len(problems) == 1 and disguised in problems[0] and "beta" in problems[0]
    assert _sessions.begin(mine, "next").checkpoint is not None


def test_a_damaged_checkpoint_is_refused_and_the_session_restores_the_previous(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)
    good = session_checkpoint(agent, "the good one")
    clock.advance(60)
    bad = agent.checkpoints.create("session", summary="damaged later").name
    # One character: still valid JSON, but the checksum no longer matches.
    change_checkpoint(agent, bad, lambda content: content.replace("damaged later", "Damaged later"))

    with pytest.raises(CorruptStateError, match="checksum mismatch"):
        agent.checkpoints.restore(bad)
    started = _sessions.begin(agent, "s2")
    assert started.checkpoint is not None and started.checkpoint.name == good
    assert len(started.problems) == 1 and bad in started.problems[0]
    # With no valid one left, the session starts from nothing and says why.
    change_checkpoint(agent, good, lambda content: "{}")
    started = _sessions.begin(agent, "s3")
    assert started.checkpoint is None
    assert len(started.problems) == 1 and "no valid checkpoint" in started.problems[0] and bad in started.problems[0]


def test_a_checkpoint_from_a_newer_phoenix_is_refused(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)
    good = session_checkpoint(agent, "readable")
    clock.advance(60)
    newer = agent.checkpoints.create("session", summary="from the future").name
    envelope = agent.checkpoints.read(newer).data

    envelope["schema_version"] = 2
    rewrite_checkpoint(agent, newer, envelope)  # a valid checksum: only the version is wrong
    with pytest.raises(SchemaVersionError, match="newer Phoenix") as raised:
        agent.checkpoints.restore(newer)
    assert (raised.value.found, raised.value.supported) == (2, 1)
    started = _sessions.begin(agent, "s2")
    assert started.checkpoint is not None and started.checkpoint.name == good
    assert len(started.problems) == 1 and "schema 2" in started.problems[0]

    envelope["schema_version"] = 1  # the same bytes with the version put back read fine
    rewrite_checkpoint(agent, newer, envelope)
    assert agent.checkpoints.restore(newer).checkpoint.summary == "from the future"


# -- the immutable core -------------------------------------------------------------------------------


def sealed_identity(agent: Agent) -> None:
    agent.ensure()
    Path(agent.identity.path).write_text(IDENTITY_YAML)
    agent.identity.add("belief", {"subject": "asyncio timers drift under load", "confidence": 0.7})  # seals


def test_the_api_cannot_change_the_core(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)
    sealed_identity(agent)
    before = Path(agent.identity.path).read_bytes(), Path(agent.identity.digest_path).read_bytes()

    for path in ("immutable.name", "immutable.role", "immutable"):
        with pytest.raises(IdentityCoreError, match="immutable"):
            agent.identity.set(path, "someone else")

    def rename(identity: Identity) -> None:
        identity.mutable["accumulated_experience"] = 99
        identity.immutable["name"] = "someone else"

    def add_principle(identity: Identity) -> None:
        identity.immutable["principles"].append("move fast")

    for mutate in (rename, add_principle):
        with pytest.raises(IdentityCoreError, match="cannot be changed by an update"):
            agent.identity.update(mutate)
    assert (Path(agent.identity.path).read_bytes(), Path(agent.identity.digest_path).read_bytes()) == before

    agent.identity.set("mutable.state.current_focus", "benchmarks")  # the mutable part still changes
    identity = agent.identity.read()
    assert identity.current_focus == "benchmarks" and identity.immutable["name"] == "zero"


def test_a_core_edited_by_hand_is_refused_until_reset(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)
    sealed_identity(agent)
    path = Path(agent.identity.path)
    old_digest = Path(agent.identity.digest_path).read_text().splitlines()[0]
    edited = path.read_text().replace("role: release engineer", "role: database administrator")
    path.write_text(edited)

    with pytest.raises(IdentityCoreError, match="changed outside Phoenix"):
        agent.identity.read()
    with pytest.raises(IdentityCoreError, match="changed outside Phoenix"):
        agent.identity.set("state.current_focus", "anything")
    with pytest.raises(IdentityCoreError):
        agent.identity.add("skill", {"name": "sql"})
    assert path.read_text() == edited  # nothing was written
    started = _sessions.begin(agent, "s1", restore=False)  # the session starts, and says why not fully
    assert started.identity is None and any("changed outside Phoenix" in p for p in started.problems)

    identity = agent.identity.reset_core()  # the explicit, logged acceptance
    assert identity.immutable["role"] == "database administrator"
    assert agent.identity.read().immutable["role"] == "database administrator"
    new_digest = Path(agent.identity.digest_path).read_text().splitlines()[0]
    assert new_digest == digest_of(identity.immutable) != old_digest
    events, _ = agent.ops.read()
    resets = [e for e in events if e["event"] == "identity_core_reset"]
    assert len(resets) == 1
    assert resets[0]["meta"] == {"old_digest": old_digest, "new_digest": new_digest, "immutable": identity.immutable}
    agent.identity.set("state.current_focus", "migrations")  # writes work again
    assert agent.identity.read().current_focus == "migrations"
