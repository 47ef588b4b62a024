"""End to end: two real ``claude`` sessions in one project, one SIGKILLed (issue 30, item 4;
docs/lanes.md).

A long-running session is a ``claude -p`` whose model (``FakeAnthropic``) holds its answer
(``Turn.held``) after the session has run a tool: Claude Code stays alive, waiting, as a session
that thinks. Another session starts and ends beside it; then one of them is killed with SIGKILL
(its whole process group, as a crash), ``phx watchdog --once`` reports the crash, and the next
session's first model request carries the recovery of the dead session's task, once.
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
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from claude_code import ClaudeProject, ClaudeRun, FakeAnthropic, RecordedRequest, Turn, ensure_claude_code

import phoenix_protocol
from phoenix_protocol.core._process import liveness

RECOVERY = "RECOVERY DETECTED"
SRC = os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))
WAIT = 90.0


@pytest.fixture(scope="module")
def claude_argv() -> list[str]:
    return ensure_claude_code()


@pytest.fixture
def project(claude_argv: list[str]) -> Iterator[ClaudeProject]:
    with ClaudeProject.create(claude_argv) as created:
        # The model's own writer, `state-update`, from the Phoenix under test (the hooks are; the
        # venv's console script may be another checkout's: the harness clears PYTHONPATH).
        script = os.path.join(created.root, "state-update")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(
                "#!/bin/sh\n"
                f"PYTHONPATH={shlex.quote(SRC)} exec {shlex.quote(sys.executable)} -c "
                "'import sys; from phoenix_protocol.cli._state_update import main; sys.exit(main())' \"$@\"\n"
            )
        os.chmod(script, 0o700)
        yield created


def state_update(project: ClaudeProject) -> str:
    return os.path.join(project.root, "state-update")


def working_turn(project: ClaudeProject, task: str) -> Turn:
    return Turn.bash(f"{shlex.quote(state_update(project))} --working {shlex.quote(task)}")


def allow(project: ClaudeProject) -> list[str]:
    return ["--allowedTools", f"Bash({state_update(project)} *)", "--output-format", "json"]


def wait_until(done: Callable[[], bool], session: subprocess.Popen[str], what: str) -> None:
    """Wait for a real ``claude`` to get somewhere (it runs on its own; nothing here is timed)."""
    deadline = time.monotonic() + WAIT
    while not done():
        if session.poll() is not None:
            out, err = session.communicate()
            raise AssertionError(
                f"claude exited {session.returncode} before {what}\n--- stdout\n{out}\n--- stderr\n{err}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"claude did not get to {what} within {WAIT:.0f}s")
        time.sleep(0.1)


def crash(session: subprocess.Popen[str]) -> None:
    """SIGKILL the session's whole process group: Claude Code and what it started."""
    try:
        os.killpg(session.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    session.communicate()


def first_request(api: FakeAnthropic, run: ClaudeRun) -> RecordedRequest:
    requests = api.messages_requests()
    assert requests, f"no /v1/messages request reached the fake API\n{run.describe()}"
    return requests[0]


def context_of(request: RecordedRequest) -> str:
    """The message text that holds the SessionStart hook's context ('' when there is none)."""
    texts = [
        block.get("text", "") if isinstance(block, dict) else str(block)
        for message in request.body["messages"]
        for block in (message["content"] if isinstance(message.get("content"), list) else [message.get("content")])
    ]
    return next((t for t in texts if "SessionStart hook additional context" in t), "")


def session_of(run: ClaudeRun) -> str:
    data = json.loads(run.stdout.strip().splitlines()[-1])
    return str(data["session_id"])


def lane_state(project: ClaudeProject, lane: str) -> dict[str, Any]:
    with open(os.path.join(project.agent_dir(), "lanes", lane, "state.json"), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def live_lanes(project: ClaudeProject) -> list[str]:
    return [n for n in os.listdir(os.path.join(project.agent_dir(), "lanes")) if not n.startswith(".")]


def phx(project: ClaudeProject, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phoenix_protocol", *args],
        cwd=project.dir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_no_hook_failed(project: ClaudeProject) -> None:
    failed = [e for e in project.ops() if e["event"] in ("hook_failed", "lanes_not_settled")]
    assert not failed, failed


def run_claude(project: ClaudeProject, prompt: str, answer: str) -> tuple[ClaudeRun, RecordedRequest]:
    with FakeAnthropic([Turn.say(answer)]) as api:
        run = project.run(["-p", prompt, "--output-format", "json"], api=api)
    assert run.returncode == 0, run.describe()
    return run, first_request(api, run)


@pytest.mark.e2e
def test_two_sessions_and_one_crash(project: ClaudeProject) -> None:
    task = "Migrate the billing tables"
    release = threading.Event()
    with FakeAnthropic([working_turn(project, task), Turn.held(release)]) as api_a:
        a = project.start(["-p", "migrate the billing tables", *allow(project)], api=api_a)
        try:
            # A ran its tool (state-update) and waits for its model: alive, working.
            wait_until(lambda: len(api_a.main_requests()) >= 2, a, "its second model request")
            held = project.state()
            assert (held["status"], held["current_task"]) == ("working", task)
            a_session, a_pid = held["session_id"], held["pid"]

            # B starts beside it: told about A, not RECOVERY DETECTED (A is alive); B ends.
            run_b, first_b = run_claude(project, "hello", "Hello from B.")
            told = context_of(first_b)
            assert RECOVERY not in first_b.text, told
            assert "Another live session" in told and a_session in told and task in told
            b_session = session_of(run_b)
            lane = lane_state(project, b_session)
            assert (lane["session_id"], lane["status"], lane["status_event"]) == (b_session, "idle", "session_end")
            state = project.state()  # B's end left A's state alone
            assert (state["session_id"], state["status"], state["pid"]) == (a_session, "working", a_pid)

            crash(a)
        finally:
            release.set()
            if a.poll() is None:
                crash(a)
    assert liveness(a_pid, held["pid_start_time"], held["host"]) is False

    # The watchdog reports the crash (not idle: stalled, status error).
    watchdog = phx(project, "watchdog", "--once", "--json", "--grace", "0")
    assert watchdog.returncode == 5, watchdog.stdout + watchdog.stderr
    report = json.loads(watchdog.stdout)
    assert report["stalled"] == ["default"], report
    state = project.state()
    assert (state["status"], state["status_event"], state["updated_by"]) == ("error", "stalled", "watchdog")

    status = json.loads(phx(project, "status", "--json").stdout)
    [primary, side] = status["lanes"]
    assert (primary["lane"], primary["recover"], primary["task"]) == (None, True, task)
    assert (side["lane"], side["status"], side["recover"]) == (b_session, "idle", False)

    # The next session recovers A's task...
    run_c, first_c = run_claude(project, "carry on", "Resuming the migration.")
    told = context_of(first_c)
    assert RECOVERY in told and f"Last task: {task}" in told, json.dumps(first_c.body["messages"])[:3000]
    # One context, short (docs/recovery.md's table: the figures printed here).
    from test_recovery import contexts

    [phoenix_part] = contexts(first_c, project, session_of(run_c))
    assert len(phoenix_part) <= 2000, phoenix_part
    figures = {"scenario": "two sessions and one crash", "context_chars": len(phoenix_part)}
    print(json.dumps({**figures, "request_bytes": len(first_c.raw)}))
    start = [e for e in project.ops() if e["event"] == "session_start"][-1]
    assert start["meta"]["session_id"] == session_of(run_c)
    assert (start["status"], start["meta"]["recovered"], start["meta"]["previous_status"]) == ("warn", True, "error")

    # ...once: the session after it is told of no recovery.
    _run_d, first_d = run_claude(project, "what now", "Nothing to recover.")
    assert RECOVERY not in first_d.text
    assert os.listdir(os.path.join(project.agent_dir(), "lanes")) == [".retired"]  # B's lane kept as history
    assert_no_hook_failed(project)


@pytest.mark.e2e
def test_a_crashed_side_session_is_recovered_by_the_next_one(project: ClaudeProject) -> None:
    """The other way round: B (in a lane beside a live A) is SIGKILLed while working; the
    watchdog marks its lane stalled; the next session (A still alive) recovers B's task; the
    session after it hears of no recovery, and A's state was never touched."""
    task_a, task_b = "Keep the API up", "Port the scheduler to asyncio"
    release_a, release_b = threading.Event(), threading.Event()
    with (
        FakeAnthropic([working_turn(project, task_a), Turn.held(release_a)]) as api_a,
        FakeAnthropic([working_turn(project, task_b), Turn.held(release_b)]) as api_b,
    ):
        a = project.start(["-p", "keep the api up", *allow(project)], api=api_a)
        b: subprocess.Popen[str] | None = None
        try:
            wait_until(lambda: len(api_a.main_requests()) >= 2, a, "its second model request")
            b = project.start(["-p", "port the scheduler", *allow(project)], api=api_b)
            wait_until(lambda: len(api_b.main_requests()) >= 2, b, "its second model request")
            assert RECOVERY not in api_b.messages_requests()[0].text
            [b_session] = live_lanes(project)
            lane = lane_state(project, b_session)
            assert (lane["status"], lane["current_task"]) == ("working", task_b)
            crash(b)

            watchdog = phx(project, "watchdog", "--once", "--json", "--grace", "0")
            assert watchdog.returncode == 5, watchdog.stdout + watchdog.stderr
            assert json.loads(watchdog.stdout)["stalled"] == [f"default@{b_session}"]
            lane = lane_state(project, b_session)
            assert (lane["status"], lane["status_event"]) == ("error", "stalled")

            _run_c, first_c = run_claude(project, "carry on", "Taking over the scheduler port.")
            told = context_of(first_c)
            assert RECOVERY in told and f"Last task: {task_b}" in told, told
            assert "Another live session" in told  # A is alive: no recovery of A
            _run_d, first_d = run_claude(project, "what now", "Nothing to recover.")
            assert RECOVERY not in first_d.text

            state = project.state()
            assert (state["status"], state["current_task"]) == ("working", task_a)
            recovered = [e for e in project.ops() if e["event"] == "lane_recovered"]
            assert [e["meta"]["session_id"] for e in recovered] == [b_session]
        finally:
            release_a.set()
            release_b.set()
            for session in (a, b):
                if session is not None and session.poll() is None:
                    crash(session)
    assert_no_hook_failed(project)
