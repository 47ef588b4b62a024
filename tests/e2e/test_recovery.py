"""End to end: the recovery context with the real Claude Code CLI (issue 30, items 2, 3, 5, 6, 7).

Each test plays one scenario of docs/recovery.md with ``claude -p`` against ``FakeAnthropic``
and checks the first model request after each event: what must be in it, what must not, how big
Phoenix's part of it is, and how long the SessionStart hook took (Claude Code's own measure, the
``durationMs`` it records in the transcript). A crash is a SIGKILL of Claude Code's process
group while a tool runs. The model's own writes (``state-update``, ``phx note``) run the code
under test (``PYTHONPATH``).

With ``RECOVERY_E2E_REPORT=<file>`` each measurement is appended to that file as a JSON line (the
figures of docs/recovery.md).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from claude_code import ClaudeProject, ClaudeRun, FakeAnthropic, RecordedRequest, Turn, ensure_claude_code

import phoenix_protocol
from phoenix_protocol import Agent
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._watchdog import check_agent

BIN = os.path.dirname(sys.executable)
STATE_UPDATE = os.path.join(BIN, "state-update")
PHX = os.path.join(BIN, "phx")
CODE = {"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))}
ALLOW = [
    "--allowedTools",
    "Bash(echo *)",
    "Bash(sleep *)",
    f"Bash({STATE_UPDATE} *)",
    f"Bash({PHX} *)",
    "--output-format",
    "json",
]
BRIEF = "# Brief: agent"
NOISE = ("input_digest", "Recent Activity", "state.json (before", "checkpoint_", "session_begun", "identity_sealed")
MAX_CONTEXT = 2000  # characters of Phoenix's context in a request (the demo's measure)
MAX_HOOK_MS = 1000


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        yield created


@pytest.fixture(scope="module")
def baseline(claude_argv: list[str]) -> float:
    """Seconds from starting ``claude -p`` to its first model request in a project without
    Phoenix's hooks (the median of three): what the scenarios' figures are compared with."""
    seconds = []
    with ClaudeProject.create(claude_argv) as bare:
        with open(bare.settings_path, "w", encoding="utf-8") as fh:
            json.dump({}, fh)
        for _ in range(3):
            started = time.monotonic()
            with FakeAnthropic([Turn.say("Hi.")]) as api:
                run = bare.run(["-p", "hello", *ALLOW], api=api, env=CODE)
            assert run.returncode == 0, run.describe()
            seconds.append(api.main_requests()[0].received - started)
    return sorted(seconds)[1]


def state_update(task: str) -> Turn:
    return Turn.bash(f"{shlex.quote(STATE_UPDATE)} --working {shlex.quote(task)}")


def note(kind: str, text: str) -> Turn:
    return Turn.bash(f"{shlex.quote(PHX)} note {kind} {shlex.quote(text)}")


def session_of(run: ClaudeRun) -> str:
    data = json.loads(run.stdout.strip().splitlines()[-1])
    return str(data["session_id"])


def texts(request: RecordedRequest) -> str:
    """Every text the request carries in its messages, joined."""
    out = []
    for message in request.body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else [content]:
            out.append(block.get("text", "") if isinstance(block, dict) else str(block))
    return "\n".join(out)


def transcript(project: ClaudeProject, session_id: str) -> list[dict[str, Any]]:
    """The records of the transcript Claude Code wrote for ``session_id`` (under the temporary HOME)."""
    projects = os.path.join(project.home, ".claude", "projects")
    for dirpath, _dirs, files in os.walk(projects):
        if session_id + ".jsonl" in files:
            with open(os.path.join(dirpath, session_id + ".jsonl"), encoding="utf-8") as fh:
                return [json.loads(line) for line in fh if line.strip()]
    raise AssertionError(f"no transcript for session {session_id} under {projects}")


def injected(project: ClaudeProject, session_id: str) -> list[str]:
    """Every hook context Claude Code recorded in the session's transcript, oldest first."""
    return [
        str(r["attachment"]["content"][0])
        for r in transcript(project, session_id)
        if r.get("type") == "attachment" and r["attachment"].get("type") == "hook_additional_context"
    ]


def contexts(request: RecordedRequest, project: ClaudeProject, session_id: str) -> list[str]:
    """Phoenix's hook contexts the request carries, oldest first: those of the session's transcript
    found in it (Claude Code 2.1.330 puts each after ``SessionStart hook additional context:``)."""
    whole = texts(request)
    return [text for text in injected(project, session_id) if "phx-ctx-" in text and text in whole]


def crash_while_sleeping(proc: Any, api: FakeAnthropic, requests: int) -> None:
    """Wait until the model asked for its ``requests``-th turn (the one that runs ``sleep``), let
    the tool start, then SIGKILL Claude Code's process group: no SessionEnd, no PostToolUse."""
    deadline = time.monotonic() + 120
    while len(api.main_requests()) < requests:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the model never got that far"
        time.sleep(0.1)
    time.sleep(2.0)  # the Bash tool starts `sleep`
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def start_hook_ms(project: ClaudeProject, session_id: str, skip: int = 0) -> list[int]:
    """How long each SessionStart hook of the session took, as Claude Code measured it, after the first ``skip``."""
    found = [
        r["attachment"].get("durationMs")
        for r in transcript(project, session_id)
        if r.get("type") == "attachment"
        and r["attachment"].get("type") == "hook_success"
        and r["attachment"].get("hookEvent") == "SessionStart"
    ]
    return [ms for ms in found[skip:] if isinstance(ms, int)]


def report(
    scenario: str,
    event: str,
    request: RecordedRequest,
    context: str,
    hook_ms: list[int],
    started: float,
    baseline: float,
) -> None:
    """Print (and with ``RECOVERY_E2E_REPORT`` keep) a scenario's figures: the context's size, the
    request's, the SessionStart hook's time as Claude Code measured it (none when the hook said
    nothing), the seconds from starting ``claude`` to this request, and that over the baseline
    (a project without Phoenix's hooks): the time Phoenix added."""
    figures = {
        "scenario": scenario,
        "event": event,
        "context_chars": len(context),
        "context_bytes": len(context.encode()),
        "briefs_in_request": texts(request).count(BRIEF),
        "request_bytes": len(request.raw),
        "start_hook_ms": hook_ms,
        "first_request_after_s": round(request.received - started, 2),
        "over_baseline_s": round(request.received - started - baseline, 2),
    }
    path = os.environ.get("RECOVERY_E2E_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(figures) + "\n")
    print(json.dumps(figures))


def check_common(request: RecordedRequest, context: str, hook_ms: list[int]) -> None:
    assert texts(request).count(BRIEF) <= 1, "two copies of the brief in one request"
    assert len(context) <= MAX_CONTEXT, context
    for noise in NOISE:
        assert noise not in context, f"{noise!r} in {context}"
    assert hook_ms and max(hook_ms) < MAX_HOOK_MS, hook_ms


# -- crash mid-task (items 6, 7) ------------------------------------------------------------------


@pytest.mark.e2e
def test_crash_mid_task(project: ClaudeProject, baseline: float) -> None:
    task = "Migrate the billing tables"
    with FakeAnthropic([state_update(task), Turn.bash("echo migrating-invoices"), Turn.bash("sleep 20")]) as api:
        proc = project.start(["-p", "migrate", *ALLOW], api=api, env=CODE)
        crash_while_sleeping(proc, api, 3)
    before = project.state()
    assert before["status"] == "working" and before["tool_calls"] == 2  # the killed `sleep` never finished
    tool_at = before["last_tool"]["at"]
    # The watchdog finds the process gone: its write moves last_active, not the last tool call.
    agent = Agent.open("default", home=Home(project.phoenix_home), config_overrides={"watchdog_grace": 0})
    time.sleep(1.1)
    assert check_agent(agent, now_ms=agent.clock.now_ms()).verdict == "stalled"
    assert project.state()["last_active"] != tool_at

    started = time.monotonic()
    with FakeAnthropic([Turn.say("Carrying on.")]) as api:
        run = project.run(["-p", "carry on", *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    first = api.main_requests()[0]
    [context] = contexts(first, project, session_of(run))
    hook_ms = start_hook_ms(project, session_of(run))
    report("crash mid-task", "new session (startup)", first, context, hook_ms, started, baseline)
    check_common(first, context, hook_ms)
    assert "RECOVERY DETECTED" in context and texts(first).count(BRIEF) == 1
    assert context.count(task) == 1 and context.count("**error**") == 1
    assert context.count("is gone") == 1  # the watchdog's error, once
    # The tool's time, not the watchdog's ("HH:MM:SSZ", or "YYYY-MM-DD HH:MMZ" past midnight).
    shown = {f"{tool_at[11:19]}Z", f"{tool_at[:10]} {tool_at[11:16]}Z"}
    assert any(f"Last tool call: {when}, Bash ok" in context for when in shown), context
    assert ": 2 tool calls" in context  # that session's calls: no Stop hook, no earlier session
    assert "ran `echo migrating-invoices`" in context and "state-update" not in context


# -- a task switch, then a crash (items 2, 3) ---------------------------------------------------------


@pytest.mark.e2e
def test_task_switch_then_crash(project: ClaudeProject, baseline: float) -> None:
    a, b = "Add rate limiting", "Migrate users table"
    a_notes = ("Limits per API key, not per IP", "Write the middleware")
    with FakeAnthropic(
        [state_update(a), note("open-loop", a_notes[0]), note("next-action", a_notes[1]), Turn.say("Stopping here.")]
    ) as api:
        first = project.run(["-p", "rate limits", *ALLOW], api=api, env=CODE)
    assert first.returncode == 0, first.describe()  # ended cleanly: a session checkpoint on task A

    with FakeAnthropic(
        [state_update(b), note("next-action", "Backfill the email column"), Turn.bash("sleep 20")]
    ) as api:
        proc = project.start(["-p", "users table", *ALLOW], api=api, env=CODE)
        crash_while_sleeping(proc, api, 3)
        handed = api.main_requests()[0]
    crashed_session = project.state()["session_id"]
    [handover] = contexts(handed, project, crashed_session)
    assert "RECOVERY DETECTED" not in handover and all(n in handover for n in a_notes)

    # `claude -p --continue`: the same conversation, which holds the hand-over brief of task A.
    started = time.monotonic()
    with FakeAnthropic([Turn.say("Resuming the migration.")]) as api:
        resumed = project.run(["-p", "--continue", "go on", *ALLOW], api=api, env=CODE)
    assert resumed.returncode == 0, resumed.describe()
    assert session_of(resumed) == crashed_session
    request = api.main_requests()[0]
    context = contexts(request, project, crashed_session)[-1]
    hook_ms = start_hook_ms(project, crashed_session, skip=1)
    report("task switch then crash", "--continue (resume)", request, context, hook_ms, started, baseline)
    check_common(request, context, hook_ms)
    assert "RECOVERY DETECTED" in context and BRIEF not in context
    assert f"- Task now: {b}" in context
    assert f"(was: {a}; its 2 open items stay with it)" in context
    assert "- Next action [3]: Backfill the email column" in context
    whole = texts(request)
    for mixed in ("Last session summary", "open items remain", "Context stack", "Pending:"):
        assert mixed not in whole
    for text in a_notes:  # only in the hand-over brief the conversation already held, never again
        assert whole.count(text) == 1 and text not in context

    # A new conversation instead: the whole brief, of task B, with task A by name and count only.
    started = time.monotonic()
    with FakeAnthropic([Turn.say("Starting over.")]) as api:
        fresh = project.run(["-p", "hello", *ALLOW], api=api, env=CODE)
    assert fresh.returncode == 0, fresh.describe()
    request = api.main_requests()[0]
    [context] = contexts(request, project, session_of(fresh))
    hook_ms = start_hook_ms(project, session_of(fresh))
    report("task switch then crash", "new session (startup)", request, context, hook_ms, started, baseline)
    check_common(request, context, hook_ms)
    assert f"Last task: {b}" in context and "[3] Backfill the email column" in context
    assert f"- {a}: 2 open items" in context
    for text in (*a_notes, "open items remain", "Context stack", "Pending:"):
        assert text not in texts(request)


# -- resume and compaction (item 5) -------------------------------------------------------------------


@pytest.mark.e2e
def test_resume_and_compaction_carry_one_copy(project: ClaudeProject, baseline: float) -> None:
    """startup -> resume -> /compact -> resume: never two copies of the brief in one request
    (before: three copies of about 2.6 KB each in the last request)."""
    Agent.open("default", home=Home(project.phoenix_home)).state.set_status("working", "Port the scheduler")
    every: list[RecordedRequest] = []

    started = time.monotonic()
    with FakeAnthropic([Turn.bash("echo cron"), Turn.say("First.")]) as api:
        run = project.run(["-p", "port it", *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    sid = session_of(run)
    request = api.main_requests()[0]
    [context] = contexts(request, project, sid)
    report(
        "resume and compaction", "startup (recovery)", request, context, start_hook_ms(project, sid), started, baseline
    )
    assert "RECOVERY DETECTED" in context and BRIEF in context
    every += api.messages_requests()

    started = time.monotonic()
    with FakeAnthropic([note("next-action", "Translate the cron syntax"), Turn.say("Second.")]) as api:
        run = project.run(["-p", "again", "--resume", sid, *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    request = api.main_requests()[0]
    assert len(contexts(request, project, sid)) == 1  # it ended cleanly, nothing changed: nothing new
    report(
        "resume and compaction",
        "resume, nothing changed",
        request,
        "",
        start_hook_ms(project, sid, 1),
        started,
        baseline,
    )
    every += api.messages_requests()

    with FakeAnthropic(fallback_text="<summary>We ported the cron parser.</summary>") as api:
        run = project.run(["-p", "/compact", "--resume", sid, *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    every += api.messages_requests()
    # The resume before the compaction says what the model wrote since (its note); the compaction
    # then keeps the newest messages verbatim (Claude Code lists them in its compact_boundary):
    # the start after it gets the whole brief only if the brief was not among them.
    resume_ctx, compact_ctx = injected(project, sid)[-2:]
    assert BRIEF not in resume_ctx and "- New next action [1]: Translate the cron syntax" in resume_ctx
    boundary = [r for r in transcript(project, sid) if r.get("subtype") == "compact_boundary"][-1]
    kept = set(boundary["compactMetadata"]["preservedMessages"]["uuids"])
    startup_kept = any(
        r.get("uuid") in kept and "RECOVERY DETECTED" in str(r.get("attachment", {}).get("content"))
        for r in transcript(project, sid)
    )
    assert (BRIEF in compact_ctx) is not startup_kept, (startup_kept, compact_ctx)

    started = time.monotonic()
    with FakeAnthropic([Turn.say("Third.")]) as api:
        run = project.run(["-p", "more", "--resume", sid, *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    request = api.main_requests()[0]
    every += api.messages_requests()
    held = contexts(request, project, sid)
    assert texts(request).count(BRIEF) == 1, held  # the compaction's brief (or the one it kept), once
    assert "Translate the cron syntax" in "\n".join(held)
    report(
        "resume and compaction", "resume after /compact", request, "", start_hook_ms(project, sid, 3), started, baseline
    )
    for each in every:
        assert texts(each).count(BRIEF) <= 1, [c[:80] for c in contexts(each, project, sid)]
    with open(os.path.join(project.agent_dir(), "injections.json"), encoding="utf-8") as fh:
        records = json.load(fh)["injections"]
    assert sorted(r["source"] for r in records.values()) == ["compact", "resume", "startup"]


class Conversation:
    """One ``claude -p --input-format stream-json`` process fed one user message at a time: a
    session typed into, ``/compact`` included, without a resume in between."""

    def __init__(self, project: ClaudeProject, api: FakeAnthropic) -> None:
        self.proc = subprocess.Popen(
            [
                *project.claude,
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                *ALLOW[:-2],
            ],
            cwd=project.dir,
            env=project.env(api, CODE),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def say(self, text: str) -> None:
        """Send a user message and wait for the turn's result."""
        assert self.proc.stdin is not None
        done = sum('"type":"result"' in line for line in self.lines)
        self.proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 120
        while sum('"type":"result"' in line for line in self.lines) <= done:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.lines[-5:]
            time.sleep(0.1)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.mark.e2e
def test_compaction_mid_session(project: ClaudeProject, baseline: float) -> None:
    """``/compact`` typed in a running session: the start after it gets the brief back (Claude
    Code has not written the compaction yet when the hook runs: the hook goes by the messages a
    compaction keeps), and no request carries it twice."""
    Agent.open("default", home=Home(project.phoenix_home)).state.set_status("working", "Port the scheduler")
    with FakeAnthropic(
        [
            Turn.bash("echo cron"),
            Turn.say("First."),
            note("next-action", "Translate the cron syntax"),
            Turn.say("Noted."),
        ],
        fallback_text="<summary>We ported the cron parser.</summary>",
    ) as api:
        chat = Conversation(project, api)
        chat.say("port it")
        chat.say("note what is next")
        sid = project.state()["session_id"]
        before = len(api.messages_requests())
        chat.say("/compact")
        started = time.monotonic()
        chat.say("after")
        chat.close()
    after = [r for r in api.messages_requests()[before:] if "after" in texts(r)]
    request = after[-1]
    compact_ctx = injected(project, sid)[-1]
    hook_ms = start_hook_ms(project, sid, skip=1)
    report("compaction", "/compact in a running session", request, compact_ctx, hook_ms, started, baseline)
    check_common(request, compact_ctx, hook_ms)
    assert "(compact)" in compact_ctx and BRIEF in compact_ctx and "Translate the cron syntax" in compact_ctx
    assert texts(request).count(BRIEF) == 1 and compact_ctx in texts(request)
    for each in api.messages_requests():
        assert texts(each).count(BRIEF) <= 1


# -- a damaged state.json -----------------------------------------------------------------------------


@pytest.mark.e2e
def test_damaged_state(project: ClaudeProject, baseline: float) -> None:
    with FakeAnthropic([state_update("Write the importer"), Turn.say("Done for now.")]) as api:
        run = project.run(["-p", "import", *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    with open(os.path.join(project.agent_dir(), "state.json"), "w", encoding="utf-8") as fh:
        fh.write('{"status": "work')

    started = time.monotonic()
    with FakeAnthropic([Turn.say("I see the damage.")]) as api:
        run = project.run(["-p", "carry on", *ALLOW], api=api, env=CODE)
    assert run.returncode == 0, run.describe()
    request = api.main_requests()[0]
    [context] = [text for text in injected(project, session_of(run)) if text in texts(request)]
    hook_ms = start_hook_ms(project, session_of(run))
    report("damaged state", "new session (startup)", request, context, hook_ms, started, baseline)
    assert "RECOVERY DETECTED" in context and "not valid JSON" in context and "phx doctor" in context
    assert "The last brief.md (written " in context and "Write the importer" in context
    assert texts(request).count(BRIEF) == 1 and hook_ms and max(hook_ms) < MAX_HOOK_MS
    with open(os.path.join(project.agent_dir(), "state.json"), encoding="utf-8") as fh:
        assert fh.read() == '{"status": "work'  # left for `phx doctor`
