"""Phoenix from Python: record work, crash, and hand the next session its brief.

    python examples/quickstart.py

Runs in a temporary home, so it touches nothing of yours.
"""

from __future__ import annotations

import tempfile

from phoenix_protocol import Agent, Home


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent.open("quickstart", home=Home(tmp))
        # What hooks do automatically in Claude Code, done by hand here:
        agent.state.start_session("session-1")
        agent.state.set_status("working", "Add pagination to the /orders endpoint")
        agent.state.add_note("open_loop", "Cursor encoding not decided (opaque vs. offset)")
        agent.state.add_note("next_action", "Write the test for an empty last page")
        agent.state.heartbeat(session_id="session-1", tool="Edit")
        # ... the process dies here: no session end is recorded ...

        # A new session starts; it learns what the last one was doing.
        before, _after = agent.state.start_session("session-2")
        print(f"previous status: {before.status}; last task: {before.current_task}")
        print(agent.render_brief(before))


if __name__ == "__main__":
    main()
