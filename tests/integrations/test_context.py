"""What SessionStart injects (issue 30, items 2, 3, 5, 6, 7), through the hook's entry point with
transcripts shaped as Claude Code 2.1.330 writes them (hook context as ``hook_additional_context``
attachments; a compaction as a ``compact_boundary`` record listing the messages it kept verbatim
in ``compactMetadata.preservedMessages``). tests/e2e/test_recovery.py runs the same with the real
CLI."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._context import transcript_ids
from phoenix_protocol.integrations._hooks import RECOVERY_BANNER, run
from phoenix_protocol.services._agent import Agent

BRIEF = "# Brief: agent"
IDS = re.compile(r"phx-ctx-[0-9a-f]{10}")


class Transcript:
    """A Claude Code transcript: what a conversation holds, appended to as Claude Code does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last: str | None = None
        self.uuids: list[tuple[str, str]] = []  # (uuid, type) in order
        path.write_text("")

    def append(self, record: dict[str, Any]) -> str:
        record.setdefault("uuid", str(uuid.uuid4()))
        record.setdefault("parentUuid", self.last)
        self.last = record["uuid"]
        self.uuids.append((record["uuid"], record["type"]))
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        return str(record["uuid"])

    def hook_context(self, text: str) -> str:
        """What Claude Code records for a SessionStart hook's additionalContext."""
        self.append({"type": "attachment", "attachment": {"type": "hook_success", "content": text}})
        attachment = {"type": "hook_additional_context", "content": [text], "hookName": "SessionStart"}
        return self.append({"type": "attachment", "attachment": attachment})

    def message(self, role: str, text: str) -> str:
        return self.append({"type": role, "message": {"role": role, "content": text}})

    def compact(self, project: Path, session: str = "sess-1") -> str | None:
        """``/compact`` as Claude Code 2.1.330 does it: the SessionStart hook (``compact``) runs
        before the compaction is written; then the boundary, which keeps the messages from the last
        assistant message on (``preservedMessages``), the summary, and the hook's context."""
        context = _start(project, "compact", self, session, kept=False)
        last = max(i for i, (_u, kind) in enumerate(self.uuids) if kind == "assistant")
        preserved = [u for u, _kind in self.uuids[last:]]
        metadata = {"trigger": "manual", "preservedMessages": {"uuids": preserved, "allUuids": preserved}}
        self.append({"type": "system", "subtype": "compact_boundary", "parentUuid": None, "compactMetadata": metadata})
        self.message("user", "This session is being continued from a previous conversation ... Summary: ...")
        if context is not None:
            self.hook_context(context)
        return context


def _start(
    project: Path, source: str, transcript: Transcript, session: str = "sess-1", *, kept: bool = True
) -> str | None:
    body = {
        "session_id": session,
        "transcript_path": str(transcript.path),
        "cwd": str(project),
        "hook_event_name": "SessionStart",
        "source": source,
    }
    code, out, err = run(["session-start"], json.dumps(body).encode())
    assert (code, err) == (0, ""), err
    if not out:
        return None
    context = str(json.loads(out)["hookSpecificOutput"]["additionalContext"])
    if kept:
        transcript.hook_context(context)  # Claude Code keeps it in the conversation
    return context


def _end(project: Path, session: str = "sess-1") -> None:
    body = {"session_id": session, "cwd": str(project), "hook_event_name": "SessionEnd", "reason": "other"}
    assert run(["session-end"], json.dumps(body).encode())[0] == 0


def _tool(project: Path, command: str, session: str = "sess-1") -> None:
    body = {
        "session_id": session,
        "cwd": str(project),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_response": {"stdout": "", "stderr": ""},
    }
    assert run(["post-tool-use"], json.dumps(body).encode()) == (0, "", "")


def _agent(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


def test_transcript_ids_follow_claude_codes_compaction(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t.jsonl")
    assert transcript_ids(str(transcript.path)) == set()
    transcript.hook_context("=== x · phx-ctx-00000000aa ===")
    transcript.message("assistant", "quoting phx-ctx-00000000bb is not an injection")
    transcript.hook_context("=== y · phx-ctx-00000000cc ===")
    path = str(transcript.path)
    assert transcript_ids(path) == {"phx-ctx-00000000aa", "phx-ctx-00000000cc"}
    # While compacting (no boundary written yet): what comes from the last assistant message on.
    assert transcript_ids(path, compacting=True) == {"phx-ctx-00000000cc"}
    kept = transcript.last
    metadata = {"preservedMessages": {"uuids": [kept]}}
    transcript.append(
        {"type": "system", "subtype": "compact_boundary", "parentUuid": None, "compactMetadata": metadata}
    )
    transcript.hook_context("=== z · phx-ctx-00000000dd ===")
    assert transcript_ids(path) == {"phx-ctx-00000000cc", "phx-ctx-00000000dd"}
    assert transcript_ids(str(tmp_path / "missing.jsonl")) is None
    assert transcript_ids("relative.jsonl") is None
    assert transcript_ids(str(tmp_path)) is None  # not a regular file


def test_one_copy_of_the_brief_across_startup_resume_compact_resume(project: Path, tmp_path: Path) -> None:
    """Issue 30, item 5: whatever the sequence, the conversation holds the brief once."""
    agent = _agent(project)
    agent.state.set_status("working", "Migrate the billing tables")  # a crash left it working
    transcript = Transcript(tmp_path / "t.jsonl")

    first = _start(project, "startup", transcript)
    assert first is not None and RECOVERY_BANNER in first and BRIEF in first

    _end(project)  # the session ended cleanly; resumed later, nothing changed: nothing to say
    assert _start(project, "resume", transcript) is None

    transcript.message("assistant", "Resumed.")
    agent.state.add_note("next_action", "Backfill March invoices")
    resumed = _start(project, "resume", transcript)  # the model wrote a note since: only that
    assert resumed is not None and BRIEF not in resumed
    assert "- New next action [1]: Backfill March invoices" in resumed

    transcript.message("assistant", "Working on it.")
    compacted = transcript.compact(project)  # the brief is summarized away: the whole brief again
    assert compacted is not None and BRIEF in compacted and "Backfill March invoices" in compacted

    _end(project)
    assert _start(project, "resume", transcript) is None  # it still holds the compaction's brief
    held = transcript_ids(str(transcript.path))
    assert held is not None and sum(BRIEF in c for c in _contexts(transcript, held)) == 1


def test_a_compaction_that_kept_the_brief_gets_only_the_changes(project: Path, tmp_path: Path) -> None:
    """``claude --resume X -p /compact``: the resume's start runs right before the compaction,
    which keeps it (it comes after the last assistant message)."""
    agent = _agent(project)
    agent.state.set_status("working", "Port the scheduler")
    transcript = Transcript(tmp_path / "t.jsonl")
    transcript.message("assistant", "An old conversation, given no brief of ours.")
    resumed = _start(project, "resume", transcript)  # none held: the whole brief (a recovery)
    assert resumed is not None and BRIEF in resumed
    agent.state.add_note("open_loop", "Cron syntax differs")
    compacted = transcript.compact(project)
    assert compacted is not None and BRIEF not in compacted and "- New open loop [1]: Cron syntax differs" in compacted


def test_without_a_transcript_the_records_decide(project: Path, tmp_path: Path) -> None:
    agent = _agent(project)
    agent.state.set_status("working", "Port the scheduler")
    missing = Transcript(tmp_path / "t.jsonl")
    missing.path.unlink()
    first = _start(project, "startup", missing, kept=False)
    assert first is not None and BRIEF in first
    _end(project)
    assert _start(project, "resume", missing, kept=False) is None  # this session was given the brief: it holds it
    compacted = _start(project, "compact", missing, kept=False)
    assert compacted is not None and BRIEF in compacted  # a compaction: summarized away, as far as we know


def test_a_crash_after_a_task_switch_mixes_nothing_in(project: Path, tmp_path: Path) -> None:
    """Issue 30, items 2 and 3: finish a session on task A, start a new one, switch to task B,
    crash. The recovery names task B with its own notes; task A is listed as unfinished with its
    count, and nothing of it (its notes, its checkpoint's summary, pending items, context stack)
    is mixed in."""
    agent = _agent(project)
    a = Transcript(tmp_path / "a.jsonl")
    _start(project, "startup", a, session="sess-a")
    agent.state.set_status("working", "Add rate limiting", session_id="sess-a")
    agent.state.add_note("open_loop", "Limits per API key, not per IP")
    agent.state.add_note("next_action", "Write the middleware")
    _end(project, session="sess-a")  # a session checkpoint: "Add rate limiting (2 open items remain)"

    b = Transcript(tmp_path / "b.jsonl")
    handed_over = _start(project, "startup", b, session="sess-b")
    assert handed_over is not None and RECOVERY_BANNER not in handed_over and "Write the middleware" in handed_over
    agent.state.set_status("working", "Migrate users table", session_id="sess-b")
    agent.state.add_note("next_action", "Backfill the email column")
    _tool(project, "alembic upgrade head", session="sess-b")
    # SIGKILL: no SessionEnd. `claude --continue` resumes sess-b.
    resumed = _start(project, "resume", b, session="sess-b")
    assert resumed is not None and RECOVERY_BANNER in resumed and BRIEF not in resumed
    assert "- Task now: Migrate users table" in resumed
    assert "(was: Add rate limiting; its 2 open items stay with it)" in resumed
    assert "- Next action [3]: Backfill the email column" in resumed
    assert "alembic" not in resumed  # this conversation ran it: its transcript shows it
    for task_a in ("Write the middleware", "Limits per API key", "open items remain", "Pending", "Context stack"):
        assert task_a not in resumed

    # The same crash recovered in a new conversation (`claude` without --continue): the whole brief.
    fresh = _start(project, "startup", Transcript(tmp_path / "c.jsonl"), session="sess-c")
    assert fresh is not None and RECOVERY_BANNER in fresh and BRIEF in fresh
    assert "Working on: Migrate users table" in fresh and "[3] Backfill the email column" in fresh
    assert "- Add rate limiting: 2 open items" in fresh and "ran `alembic upgrade head`" in fresh
    for task_a in ("Write the middleware", "Limits per API key", "open items remain", "Pending", "Context stack"):
        assert task_a not in fresh


def test_every_fact_once_and_no_bookkeeping(project: Path, tmp_path: Path) -> None:
    """Issue 30, items 6 and 7: a stall reported once; the last tool call's own time, not the
    watchdog's; this session's tool calls only; no digests, ids of checkpoints or ops events."""
    from phoenix_protocol.core._clock import iso_from_ms

    agent = _agent(project)
    t = Transcript(tmp_path / "t.jsonl")
    _start(project, "startup", t)
    agent.state.set_status("working", "Fix the flaky upload test", session_id="sess-1")
    for i in range(3):
        _tool(project, f"pytest -q tests/test_upload.py -k case_{i}")
    body = {"session_id": "sess-1", "cwd": str(project), "hook_event_name": "Stop", "stop_hook_active": False}
    assert run(["stop"], json.dumps(body).encode())[0] == 0
    tool_at = agent.state.read().last_tool["at"]  # type: ignore[index]
    import os

    later = agent.clock.now_ms() + 10 * 60_000
    os.environ["PHOENIX_NOW_MS"] = str(later)
    try:  # ten minutes later the watchdog finds the process gone
        agent.state.set_status("error", "stalled: process gone", source="watchdog", event="stalled")
        context = _start(project, "startup", Transcript(tmp_path / "u.jsonl"), session="sess-2")
    finally:
        del os.environ["PHOENIX_NOW_MS"]
    assert context is not None
    assert context.count("stalled: process gone") == 1
    assert context.count("Fix the flaky upload test") == 1
    assert context.count("**error**") == 1 and "Status:" in context
    from phoenix_protocol.agent._brief import short_time  # the tool's own time (with its day after midnight)

    assert f"Last tool call: {short_time(tool_at, iso_from_ms(later))}, Bash ok" in context
    assert "- Session sess-1 since " in context and ": 3 tool calls" in context  # not the Stop hook's beat
    for noise in (
        "input_digest",
        "Recent Activity",
        "checkpoint_",
        "session_begun",
        "identity",
        "Open files",
        ".claude",
    ):
        assert noise not in context
    assert iso_from_ms(later)[:10] in context  # the brief is dated


def _contexts(transcript: Transcript, ids: set[str]) -> list[str]:
    out = []
    for line in transcript.path.read_text().splitlines():
        record = json.loads(line)
        attachment = record.get("attachment") or {}
        if attachment.get("type") == "hook_additional_context":
            text = attachment["content"][0]
            if set(IDS.findall(text)) & ids:
                out.append(text)
    return out


def test_injection_records_that_cannot_be_read_count_as_none(tmp_path: Path) -> None:
    """A FIFO (never opened blocking), a link or a file past the read bound at injections.json:
    the records count as none (the next start injects the brief whole); the doctor moves it aside."""
    import os

    from phoenix_protocol.integrations._context import INJECTIONS, MAX_INJECTIONS_BYTES, load_records

    agent = Agent.open("fifo", home=Home(str(tmp_path / "home")))
    agent.ensure()
    path = os.path.join(agent.dir, INJECTIONS)
    os.mkfifo(path, 0o600)
    assert load_records(agent) == {}
    os.unlink(path)
    os.symlink(tmp_path / "elsewhere.json", path)
    (tmp_path / "elsewhere.json").write_text('{"injections": {"phx-ctx-0123456789": {"ms": 1}}}')
    assert load_records(agent) == {}
    os.unlink(path)
    with open(path, "wb") as fh:
        fh.truncate(MAX_INJECTIONS_BYTES + 1)
    assert load_records(agent) == {}
