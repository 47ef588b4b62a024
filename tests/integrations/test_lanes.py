"""Sessions side by side (issue 30, item 4; docs/lanes.md), with real processes: each "claude" is
a sleeping process whose pid the hooks record (``PHOENIX_AGENT_PID``), killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import run_hook
from phoenix_protocol.agent._lanes import lane_ids, retired_lanes
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import RECOVERY_BANNER
from phoenix_protocol.services._agent import Agent

A = "0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53"  # Claude Code gives each session a UUID
B = "1c7a4d2f-8b3e-4fa6-9d52-3a0e7b1c8f64"
C = "2d8b5e3a-9c4f-4ab7-8e63-4b1f8c2d9a75"
D = "3e9c6f4b-ad5a-4bc8-9f74-5c2a9d3eab86"


class Claude:
    """A stand-in for one running ``claude``: a live process, and its hooks as Claude Code runs them."""

    def __init__(self, project: Path, session: str) -> None:
        self.project = project
        self.session = session
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def hook(self, command: str, event: str, **extra: Any) -> str:
        done = run_hook(
            self.project, command, event, {"PHOENIX_AGENT_PID": str(self.proc.pid)}, session_id=self.session, **extra
        )
        assert done.returncode == 0 and not done.stderr, done.stderr
        return done.stdout.decode()

    def start(self, source: str = "startup") -> str:
        """The SessionStart hook; returns the context it gave the model ('' for none)."""
        out = self.hook("session-start", "SessionStart", source=source)
        if not out.strip():
            return ""
        data = json.loads(out)
        return str(data["hookSpecificOutput"]["additionalContext"])

    def tool(self, command: str = "ls") -> None:
        self.hook("post-tool-use", "PostToolUse", tool_name="Bash", tool_input={"command": command}, tool_response={})

    def say_working(self, task: str) -> None:
        """The model's own write, from a Bash call of this session (`phx state working`)."""
        env = {**os.environ, "PHOENIX_SESSION_ID": self.session}
        done = subprocess.run(
            [sys.executable, "-m", "phoenix_protocol", "state", "working", task],
            cwd=self.project,
            env=env,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def end(self) -> None:
        self.hook("session-end", "SessionEnd", reason="other")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def claudes(project: Path) -> Iterator[dict[str, Claude]]:
    made: dict[str, Claude] = {}
    yield made
    for claude in made.values():
        claude.stop()


def _open(project: Path) -> Agent:
    return Agent.open("default", home=Home(str(project / ".phoenix")))


def _primary(project: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project / ".phoenix" / "agents" / "default" / "state.json").read_text())
    return data


def _lane(project: Path, session: str) -> dict[str, Any]:
    path = project / ".phoenix" / "agents" / "default" / "lanes" / session / "state.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _watchdog(project: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = cli(["watchdog", "--once", "--json", "--grace", "0", "--home", str(project / ".phoenix")])
    return code, json.loads(capsys.readouterr().out)


def _events(project: Path) -> list[dict[str, Any]]:
    events, _ = _open(project).ops.read()
    return events


def test_two_sessions_and_one_crash(
    project: Path, claudes: dict[str, Claude], capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's story: A works; B starts beside it (not told RECOVERY DETECTED about a live A)
    and ends; A is SIGKILLed: the watchdog reports the crash, the next session recovers A's task,
    and the one after that hears of no recovery."""
    a = claudes["a"] = Claude(project, A)
    assert a.start() == ""
    a.say_working("Migrate the billing tables")
    a.tool()

    b = claudes["b"] = Claude(project, B)
    told = b.start()
    assert RECOVERY_BANNER not in told
    assert "Another live session" in told and A in told and "Migrate the billing tables" in told
    assert lane_ids(str(project / ".phoenix" / "agents" / "default")) == [B]
    b.say_working("Write the release notes")  # the model of B writes to B's lane
    b.tool("echo b")
    assert _primary(project)["current_task"] == "Migrate the billing tables"
    assert _primary(project)["session_id"] == A and _primary(project)["status"] == "working"
    lane = _lane(project, B)
    assert (lane["session_id"], lane["current_task"], lane["heartbeat_seq"]) == (B, "Write the release notes", 1)
    b.end()
    b.kill()
    assert _lane(project, B)["status"] == "idle"
    assert _primary(project)["status"] == "working" and _primary(project)["pid"] == a.proc.pid  # untouched

    a.kill()
    code, report = _watchdog(project, capsys)
    assert code == 5, report
    assert report["stalled"] == ["default"], report
    [primary] = [v for v in report["agents"] if v["lane"] is None]
    assert primary["verdict"] == "stalled" and primary["action"] == "marked_stalled"
    state = _primary(project)
    assert (state["status"], state["status_event"], state["updated_by"]) == ("error", "stalled", "watchdog")

    c = claudes["c"] = Claude(project, C)
    told = c.start()
    assert RECOVERY_BANNER in told and "Last task: Migrate the billing tables" in told
    c.end()
    # B's ended lane was retired by C's start, its files kept.
    assert lane_ids(str(project / ".phoenix" / "agents" / "default")) == []
    [kept] = retired_lanes(str(project / ".phoenix" / "agents" / "default"))
    assert json.loads((Path(kept) / "state.json").read_text())["current_task"] == "Write the release notes"

    d = claudes["d"] = Claude(project, D)
    assert RECOVERY_BANNER not in d.start()  # only once
    names = [e["event"] for e in _events(project)]
    assert names.count("lane_opened") == 1 and names.count("lane_retired") == 1
    assert "lane_recovered" not in names


def test_a_dead_lane_is_marked_stalled_and_recovered_once(
    project: Path, claudes: dict[str, Claude], capsys: pytest.CaptureFixture[str]
) -> None:
    """B (in a lane beside a live A) dies while working: the watchdog marks its lane stalled
    (status error, not idle), the next session to start recovers B's task, then nobody again."""
    a = claudes["a"] = Claude(project, A)
    a.start()
    a.say_working("Keep the API up")
    b = claudes["b"] = Claude(project, B)
    b.start()
    b.say_working("Port the scheduler to asyncio")
    b.kill()

    code, report = _watchdog(project, capsys)
    assert code == 5 and report["stalled"] == [f"default@{B}"], report
    verdicts = {v["lane"]: v for v in report["agents"]}
    assert verdicts[None]["verdict"] == "alive" and verdicts[B]["verdict"] == "stalled"
    lane = _lane(project, B)
    assert (lane["status"], lane["status_event"], lane["updated_by"]) == ("error", "stalled", "watchdog")
    assert _open(project).checkpoints.entries() == []  # lanes take no checkpoints
    code, report = _watchdog(project, capsys)
    assert code == 0 and {v["lane"]: v["verdict"] for v in report["agents"]} == {None: "alive", B: "error"}

    c = claudes["c"] = Claude(project, C)  # A still lives: C gets a lane too, and recovers B
    told = c.start()
    assert RECOVERY_BANNER in told and "Last task: Port the scheduler to asyncio" in told and B in told
    assert "Keep the API up" in told  # ...and hears that A works beside it
    agent_dir = str(project / ".phoenix" / "agents" / "default")
    assert lane_ids(agent_dir) == [C]
    [recovered] = [e for e in _events(project) if e["event"] == "lane_recovered"]
    assert recovered["status"] == "warn"
    assert recovered["meta"]["session_id"] == B and recovered["meta"]["by_session_id"] == C
    assert recovered["meta"]["task"] == "Port the scheduler to asyncio"

    d = claudes["d"] = Claude(project, D)
    assert RECOVERY_BANNER not in d.start()
    assert sorted(lane_ids(agent_dir)) == sorted([C, D])
    assert _primary(project)["session_id"] == A  # A's state was never touched
    assert _primary(project)["current_task"] == "Keep the API up"


def test_sessions_starting_together_recover_a_dead_lane_once(project: Path, claudes: dict[str, Claude]) -> None:
    """Four sessions start at once beside a live A while B's lane is dead: exactly one of them is
    told B's recovery (the claim is the lane's rename), and each gets a lane of its own."""
    a = claudes["a"] = Claude(project, A)
    a.start()
    b = claudes["b"] = Claude(project, B)
    b.start()
    b.say_working("Rebuild the search index")
    b.kill()
    others = [
        Claude(project, sid)
        for sid in (
            "4fad7a5c-be6b-4cd9-8a85-6d3bae4fbc97",
            "5abe8b6d-cf7c-4dea-9b96-7e4cbf5acda8",
            "6bcf9c7e-da8d-4efb-8ca7-8f5dca6bdeb9",
            "7cdaad8f-ebae-4afc-9db8-9a6edb7cefca",
        )
    ]
    for i, claude in enumerate(others):
        claudes[f"o{i}"] = claude
    with ThreadPoolExecutor(len(others)) as pool:
        told = list(pool.map(lambda claude: claude.start(), others))
    assert sum("Rebuild the search index" in context for context in told) == 1, told
    agent_dir = str(project / ".phoenix" / "agents" / "default")
    assert sorted(lane_ids(agent_dir)) == sorted(claude.session for claude in others)
    assert len([e for e in _events(project) if e["event"] == "lane_recovered"]) == 1


def test_sessions_starting_together_on_a_free_agent_never_share_a_lane(
    project: Path, claudes: dict[str, Claude]
) -> None:
    """Three live sessions start at once with nobody holding the agent: one takes the primary
    lane, the others get lanes of their own (under the primary lane's lock): none is overwritten."""
    sessions = [A, B, C]
    for sid in sessions:
        claudes[sid] = Claude(project, sid)
    with ThreadPoolExecutor(3) as pool:
        told = list(pool.map(lambda sid: claudes[sid].start(), sessions))
    assert not any(RECOVERY_BANNER in context for context in told)
    holder = _primary(project)["session_id"]
    agent_dir = str(project / ".phoenix" / "agents" / "default")
    assert sorted([holder, *lane_ids(agent_dir)]) == sorted(sessions)
    for sid in sessions:
        claudes[sid].tool(f"echo {sid}")
    for sid in lane_ids(agent_dir):
        assert _lane(project, sid)["heartbeat_seq"] == 1
    assert _primary(project)["heartbeat_seq"] == 1


def test_one_session_keeps_the_primary_lane_as_before(project: Path, claudes: dict[str, Claude]) -> None:
    """The single-session case is unchanged: resume, compaction and /clear (a new session id in
    the same agent process) stay in state.json, and a crash is recovered there."""
    a = claudes["a"] = Claude(project, A)
    a.start()
    a.say_working("Tune the cache")
    a.hook("pre-compact", "PreCompact", trigger="auto")
    assert "Tune the cache" in a.start(source="compact")
    a.end()
    cleared = Claude(project, B)
    cleared.proc.kill()
    cleared.proc.wait()
    cleared.proc = a.proc  # /clear: the same claude process, a new session
    claudes["cleared"] = cleared
    told = cleared.start(source="clear")  # the handover of the session checkpoint A's end took
    assert RECOVERY_BANNER not in told and "Another live session" not in told
    assert _primary(project)["session_id"] == B
    assert lane_ids(str(project / ".phoenix" / "agents" / "default")) == []
    cleared.say_working("Tune the cache, take two")
    a.kill()
    c = claudes["c"] = Claude(project, C)
    told = c.start()
    assert RECOVERY_BANNER in told and "Tune the cache, take two" in told
    assert "lane_opened" not in [e["event"] for e in _events(project)]


def test_a_resumed_session_goes_back_to_its_lane(project: Path, claudes: dict[str, Claude]) -> None:
    """`claude --resume` of a session that has a lane (A still beside it) starts in that lane again,
    with its task; a compaction inside a lane stays in the lane."""
    a = claudes["a"] = Claude(project, A)
    a.start()
    b = claudes["b"] = Claude(project, B)
    b.start()
    b.say_working("Draft the RFC")
    b.hook("pre-compact", "PreCompact", trigger="auto")
    assert "Draft the RFC" in b.start(source="compact")
    b.end()
    told = b.start(source="resume")
    # The conversation already holds the brief the compaction injected: the resume adds nothing
    # it holds again (docs/recovery.md), but it is back in its own lane, with its task.
    assert "RECOVERY DETECTED" not in (told or "")
    lane = _lane(project, B)
    assert (lane["status"], lane["current_task"]) == ("working", "Draft the RFC")
    assert _primary(project)["session_id"] == A
    assert _open(project).checkpoints.entries() == []  # no routine, no session checkpoint of a lane
