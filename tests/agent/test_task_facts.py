"""Facts tied to their task and to their session (issue 30, items 3 and 6): notes belong to the
task they were written under, a new task starts clean, a session counts only its own tool calls,
an error is not carried into a new session, and what the agent did is recorded."""

from __future__ import annotations

import json
from pathlib import Path

from phoenix_protocol.agent._replay import rebuild_state
from phoenix_protocol.agent._state import WORK_KEEP, other_tasks, task_notes, untagged_notes
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.services._agent import Agent


def _texts(items: list[dict[str, object]]) -> list[object]:
    return [item["text"] for item in items]


def test_notes_belong_to_their_task_and_a_new_task_starts_clean(agent: Agent) -> None:
    agent.state.set_status("working", "Add rate limiting")
    agent.state.add_note("open_loop", "Limits per API key, not per IP")
    agent.state.add_note("next_action", "Write the middleware")
    agent.state.set_status("working", "Migrate users table")
    agent.state.add_note("next_action", "Backfill the email column")

    state = agent.state.read()
    loops, actions = task_notes(state)
    assert (loops, _texts(actions)) == ([], ["Backfill the email column"])
    assert other_tasks(state) == [("Add rate limiting", 2)]
    # Nothing is lost: every note is still in state.json, with its task.
    tasks = {item["text"]: item["task"] for item in state.open_loops + state.next_actions}
    assert tasks == {
        "Limits per API key, not per IP": "Add rate limiting",
        "Write the middleware": "Add rate limiting",
        "Backfill the email column": "Migrate users table",
    }

    agent.state.set_status("working", "Add rate limiting")  # back to the first task: its notes again
    state = agent.state.read()
    assert _texts(task_notes(state)[1]) == ["Write the middleware"]
    assert other_tasks(state) == [("Migrate users table", 1)]


def test_notes_written_before_any_task_are_adopted_by_the_next_one(agent: Agent) -> None:
    agent.state.add_note("next_action", "Look at the flaky login test")
    agent.state.set_status("working", "Fix the login flow")
    state = agent.state.read()
    assert _texts(task_notes(state)[1]) == ["Look at the flaky login test"]
    assert other_tasks(state) == []
    # ...but a task's notes are not adopted by the next task, even after `phx state idle`.
    agent.state.set_status("idle", event="state_idle")
    agent.state.set_status("working", "Something else")
    assert other_tasks(agent.state.read()) == [("Fix the login flow", 1)]


def test_a_rebuild_from_the_log_gives_the_notes_the_same_tasks(agent: Agent) -> None:
    agent.state.add_note("open_loop", "no task yet")
    agent.state.set_status("working", "Task A")
    agent.state.add_note("next_action", "A's action")
    agent.state.set_status("working", "Task B")
    agent.state.add_note("next_action", "B's action")
    live = agent.state.read()
    events, _ = agent.ops.read()
    rebuilt, _used = rebuild_state(events)
    assert rebuilt.open_loops == live.open_loops and rebuilt.next_actions == live.next_actions


def test_notes_an_earlier_phoenix_wrote_get_their_task_from_the_ops_log(agent: Agent) -> None:
    """A state.json (and ops log) written before notes carried their task: the next write tags each
    note with the task the log shows it was written under; one the log does not show gets the
    current task. Nothing is lost."""
    agent.state.set_status("working", "Add rate limiting")
    agent.state.add_note("next_action", "Write the middleware")
    agent.state.set_status("working", "Migrate users table")
    agent.state.add_note("next_action", "Backfill the email column")
    # Make it look as 0.2 wrote it: no task on the notes, none in the note_added events.
    data = json.loads(Path(agent.state.path).read_text())
    for item in data["next_actions"]:
        del item["task"]
    data["next_actions"].append({"id": 9, "text": "a note the log never saw", "added_at": "2026-01-01T00:00:00.000Z"})
    Path(agent.state.path).write_text(json.dumps(data))
    log = Path(agent.ops.path)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        line.get("meta", {}).pop("task", None) if line["event"] == "note_added" else None
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))

    before = agent.state.read()  # a read alone changes nothing: the untagged notes count as the current task's
    assert len(task_notes(before)[1]) == 3
    agent.state.heartbeat(session_id=None, tool="Bash")  # not the hot path's heartbeat (it would read the log)
    assert untagged_notes(agent.state.read())
    agent.state.start_session("s9")  # any other write tags them
    state = agent.state.read()
    tasks = {item["text"]: item["task"] for item in state.next_actions}
    assert tasks == {
        "Write the middleware": "Add rate limiting",
        "Backfill the email column": "Migrate users table",
        "a note the log never saw": "Migrate users table",
    }
    assert other_tasks(state) == [("Add rate limiting", 1)]


def test_a_session_counts_its_own_tool_calls_and_not_stop(agent: Agent, clock: ManualClock) -> None:
    agent.state.start_session("s1")
    for _ in range(3):
        agent.state.heartbeat(session_id="s1", tool="Bash")
    agent.state.heartbeat(session_id="s1", tool=None)  # the Stop hook: a heartbeat, not a tool call
    state = agent.state.read()
    assert (state.tool_calls, state.heartbeat_seq) == (3, 4)
    assert state.last_tool is not None and state.last_tool["name"] == "Bash"
    clock.advance(seconds=30)
    agent.state.start_session("s2")
    agent.state.heartbeat(session_id="s2", tool="Read")
    state = agent.state.read()
    assert state.tool_calls == 1 and state.heartbeat_seq == 5
    assert state.last_tool is not None and state.last_tool["at"] == clock.now_iso()


def test_an_error_does_not_survive_into_the_next_session(agent: Agent) -> None:
    agent.state.start_session("s1")
    agent.state.set_status("error", "stalled: process gone", source="watchdog", event="stalled")
    _before, after = agent.state.start_session("s2")
    assert (after.status, after.error_message) == ("working", None)
    agent.state.set_status("error", "the build broke")
    assert agent.state.end_session("s2").error_message is None
    events, _ = agent.ops.read()
    rebuilt, _used = rebuild_state(events)
    assert (rebuilt.status, rebuilt.error_message) == ("idle", None)


def test_what_was_done_is_recorded_once_each_bounded_and_per_task(agent: Agent, clock: ManualClock) -> None:
    agent.state.set_status("working", "Task A")
    agent.state.heartbeat(session_id=None, tool="Write", work="src/a.py")
    clock.advance(seconds=1)
    agent.state.heartbeat(session_id=None, tool="Bash", work="pytest -q", ok=False)
    clock.advance(seconds=1)
    agent.state.heartbeat(session_id=None, tool="Edit", work="src/a.py")  # again: moves to the end
    work = agent.state.read().recent_work
    assert [entry[1:] for entry in work] == [["Bash", "pytest -q", False], ["Edit", "src/a.py", True]]
    assert work[-1][0] == clock.now_ms()
    for i in range(WORK_KEEP + 5):
        agent.state.heartbeat(session_id=None, tool="Bash", work=f"make step-{i}")
    work = agent.state.read().recent_work
    assert len(work) == WORK_KEEP and work[-1][2] == f"make step-{WORK_KEEP + 4}"
    agent.state.set_status("working", "Task A")  # the same task: kept
    assert len(agent.state.read().recent_work) == WORK_KEEP
    agent.state.set_status("working", "Task B")  # another task starts clean
    assert agent.state.read().recent_work == []


def test_a_restore_keeps_each_note_with_its_task(agent: Agent) -> None:
    agent.state.set_status("working", "Task A")
    agent.state.add_note("next_action", "A's action")
    agent.state.set_status("working", "Task B")
    agent.state.add_note("open_loop", "B's loop")
    agent.checkpoints.create("routine", summary="both tasks")
    agent.state.resolve_note(1)
    agent.state.resolve_note(2)
    agent.checkpoints.restore(force=True)  # the checkpoint's notes in place of state.json's
    state = agent.state.read()
    assert [(i["text"], i["task"]) for i in state.open_loops + state.next_actions] == [
        ("B's loop", "Task B"),
        ("A's action", "Task A"),
    ]
    assert other_tasks(state) == [("Task A", 1)]


def test_phx_note_list_and_state_show_the_tasks_notes_apart(agent: Agent) -> None:
    import os
    import subprocess
    import sys

    agent.state.set_status("working", "Task A")
    agent.state.add_note("next_action", "A's action")
    agent.state.set_status("working", "Task B")
    agent.state.add_note("next_action", "B's action")
    env = {"PHOENIX_HOME": agent.home.root, "PHOENIX_AGENT": agent.id, "COLUMNS": "200"}

    def phx(*args: str) -> str:
        cmd = [sys.executable, "-m", "phoenix_protocol", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **env}).stdout

    listed = phx("note", "list")
    assert listed.index("B's action") < listed.index("Earlier task Task A") < listed.index("A's action")
    shown = phx("state", "show")
    assert "B's action" in shown and "A's action" not in shown and "Task A: 1 open item" in shown
