"""``phx watchdog --tmux`` with a real tmux server (``tmux.TmuxServer``) and real process trees
(issue 36, found 2): fake agents are scripts named ``claude``, ``codex`` and ``gemini`` (their
process name is the script's), next to ``sleep`` and ``tail`` in other panes.

* a session is judged as a whole: an agent in one pane is not "stalled" because another pane of
  the session runs ``sleep``;
* agents are tied to panes by their recorded process (PID and start time), whatever the session is
  called; by the pane their SessionStart recorded; by the session's name only when nothing else is
  recorded;
* the tmux rule has a grace: an agent started a few seconds after ``phx state working`` is not
  stalled at once;
* panes are reported as ``session:window.pane``, in text and ``--json``;
* the server's socket comes from ``--tmux-socket`` or the ``watchdog_tmux_socket`` setting;
* a ``tail -f …/codex`` is not an agent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux import TmuxServer

from phoenix_protocol.agent._state import AgentState, Transition
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clis import agents_in_tree
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._watchdog import AgentVerdict, WatchdogReport, run_pass

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TmuxServer]:
    created = TmuxServer(str(tmp_path / "tmux.sock"))
    yield created
    created.kill()


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Fake agents: scripts named like the CLIs, which sleep."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("claude", "codex", "gemini"):
        script = folder / name
        script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
        script.chmod(0o755)
    return folder


@pytest.fixture
def home_here(tmp_path: Path) -> Home:
    root = tmp_path / "project" / ".phoenix"
    root.mkdir(parents=True)
    return Home(str(root))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}


def _agent_in(pane_pid: int, name: str) -> tuple[int, float]:
    """The fake agent ``name`` in the pane's process tree, once it is there: (pid, start time)."""
    deadline = time.monotonic() + 10
    while True:
        found = [a for a in agents_in_tree(pane_pid) if a.name == name]
        if found:
            return found[0].pid, found[0].start_time
        assert time.monotonic() < deadline, f"no {name} in the tree of {pane_pid}"
        time.sleep(0.05)


def _split(server: TmuxServer, session: str, command: str, cwd: str) -> tuple[str, int]:
    out = server.tmux("split-window", "-d", "-P", "-F", "#{pane_id} #{pane_pid}", "-t", session, "-c", cwd, command)
    pane_id, pid = out.split()
    return pane_id, int(pid)


def _working(home: Home, clock: ManualClock, agent_id: str, process: tuple[int, float] | None = None) -> Agent:
    agent = Agent.open(agent_id, home=home, clock=clock)
    if process is not None:
        agent.state.start_session(
            f"s-{agent_id}", process={"pid": process[0], "start_time": process[1], "host": hostname()}
        )
    agent.state.set_status("working", f"task of {agent_id}", session_id=f"s-{agent_id}" if process else None)
    return agent


def _verdict(report: WatchdogReport, agent_id: str) -> AgentVerdict:
    return next(v for v in report.verdicts if v.agent_id == agent_id)


def test_a_session_is_judged_whole_and_agents_are_tied_by_their_process(
    server: TmuxServer, bin_dir: Path, home_here: Home, clock: ManualClock, tmp_path: Path
) -> None:
    cwd = str(tmp_path)
    _, claude_pane = server.start("work", [str(bin_dir / "claude")], cwd=cwd, env=_env())
    _split(server, "work", "sleep 600", cwd)  # a second pane of the same session: no agent
    _, codex_pane = server.start("elsewhere", [str(bin_dir / "codex")], cwd=cwd, env=_env())
    claude = _agent_in(claude_pane, "claude")
    codex = _agent_in(codex_pane, "codex")

    _working(home_here, clock, "builder", claude)  # its session is not named after it
    _working(home_here, clock, "reviewer", codex)
    _working(home_here, clock, "work")  # nothing recorded: seed 000's session-name convention
    clock.advance(120)  # watchdog_grace (60 s) past; watchdog_remote_grace (1 h, no process recorded) not
    report = run_pass(home_here, clock=clock, tmux=True, tmux_socket=server.socket)

    builder, reviewer, work = (_verdict(report, a) for a in ("builder", "reviewer", "work"))
    assert (builder.verdict, builder.pane) == ("alive", "work:0.0")
    assert (reviewer.verdict, reviewer.pane) == ("alive", "elsewhere:0.0")
    # The sleep in work:0.1 does not make the session's agent "stalled": the session has one.
    assert work.verdict == "unknown" and "no agent process" not in work.detail
    assert work.pane is not None and work.pane.startswith("work:0.")
    assert not report.stalled
    targets = {p.target: p for p in report.tmux or []}
    assert set(targets) == {"work:0.0", "work:0.1", "elsewhere:0.0"}
    assert [a["name"] for a in targets["work:0.0"].agents] == ["claude"]
    assert targets["work:0.1"].agents == []


def test_a_recorded_process_in_another_pane_wins_over_the_session_name(
    server: TmuxServer, bin_dir: Path, home_here: Home, clock: ManualClock, tmp_path: Path
) -> None:
    """An agent called like a session that holds only ``sleep`` but whose recorded process runs in
    another session is tied to that pane, and alive."""
    cwd = str(tmp_path)
    server.start("alpha", ["sleep", "600"], cwd=cwd, env=_env())
    _, pane_pid = server.start("other", [str(bin_dir / "gemini")], cwd=cwd, env=_env())
    _working(home_here, clock, "alpha", _agent_in(pane_pid, "gemini"))
    clock.advance(3600)
    report = run_pass(home_here, clock=clock, tmux=True, tmux_socket=server.socket)
    verdict = _verdict(report, "alpha")
    assert (verdict.verdict, verdict.pane) == ("alive", "other:0.0")
    assert not report.stalled


def test_the_tmux_rule_has_a_grace(
    server: TmuxServer, bin_dir: Path, home_here: Home, clock: ManualClock, tmp_path: Path
) -> None:
    """``phx state working``, then the agent starts a few seconds later in its session: not stalled
    meanwhile; a session that never gets one is stalled once ``watchdog_grace`` has passed."""
    cwd = str(tmp_path)
    server.start("late", ["sleep", "600"], cwd=cwd, env=_env())
    server.start("never", ["sleep", "600"], cwd=cwd, env=_env())
    _working(home_here, clock, "late")
    _working(home_here, clock, "never")
    clock.advance(5)
    report = run_pass(home_here, clock=clock, tmux=True, tmux_socket=server.socket)
    for agent_id in ("late", "never"):
        verdict = _verdict(report, agent_id)
        assert verdict.verdict == "grace" and "(grace 60s)" in verdict.detail, verdict.detail
    assert not report.stalled
    _, pid = _split(server, "late", str(bin_dir / "claude"), cwd)
    _agent_in(pid, "claude")
    clock.advance(60)
    report = run_pass(home_here, clock=clock, tmux=True, tmux_socket=server.socket)
    assert _verdict(report, "late").verdict == "unknown"
    never = _verdict(report, "never")
    assert never.verdict == "stalled" and never.action == "marked_stalled"
    assert [v.agent_id for v in report.stalled] == ["never"]


def test_a_recorded_pane_ties_an_agent_without_a_process(
    server: TmuxServer, home_here: Home, clock: ManualClock, tmp_path: Path
) -> None:
    """The pane the SessionStart hook recorded ($TMUX_PANE) ties the agent, not the session's name."""
    pane_id, _ = server.start("some-session", ["sleep", "600"], cwd=str(tmp_path), env=_env())
    agent = _working(home_here, clock, "tied")

    def record_pane(state: AgentState) -> list[Transition]:
        state.tmux = {"pane": pane_id, "socket": server.socket}  # as SessionStart records $TMUX_PANE
        return []

    agent.state.change(record_pane)
    clock.advance(120)
    report = run_pass(home_here, clock=clock, tmux=True, tmux_socket=server.socket)
    verdict = _verdict(report, "tied")
    assert verdict.verdict == "stalled" and verdict.pane == "some-session:0.0"
    assert "by recorded pane" in verdict.detail


def test_tail_of_a_file_named_codex_is_no_agent(server: TmuxServer, bin_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "codex"
    log.parent.mkdir()
    log.write_text("")
    _, tail_pid = server.start("logs", ["tail", "-f", str(log)], cwd=str(tmp_path), env=_env())
    _, real_pid = server.start("real", [str(bin_dir / "codex")], cwd=str(tmp_path), env=_env())
    _agent_in(real_pid, "codex")
    assert agents_in_tree(tail_pid) == []
    assert [a.name for a in agents_in_tree(real_pid)] == ["codex"]


def test_reports_name_panes_and_the_socket_comes_from_the_settings(
    server: TmuxServer,
    bin_dir: Path,
    home_here: Home,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cwd = str(tmp_path)
    _, pid = server.start("desk", [str(bin_dir / "claude")], cwd=cwd, env=_env())
    _split(server, "desk", "sleep 600", cwd)
    claude = _agent_in(pid, "claude")
    ident = identity_of(claude[0])
    assert ident is not None
    _working(home_here, ManualClock(), "desk-agent", claude)
    # --tmux-socket, --json: the panes and the agent's pane as session:window.pane.
    assert (
        cli(["watchdog", "--once", "--json", "--dry-run", "--tmux-socket", server.socket, "--home", home_here.root])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert {p["target"] for p in out["tmux"]} == {"desk:0.0", "desk:0.1"}
    [agent] = out["agents"]
    assert agent["pane"] == "desk:0.0" and agent["verdict"] == "alive"
    # The setting: phx watchdog --tmux finds the same server without --tmux-socket.
    with open(os.path.join(home_here.root, "phoenix.toml"), "w", encoding="utf-8") as fh:
        fh.write(f'watchdog_tmux_socket = "{server.socket}"\n')
    assert cli(["watchdog", "--once", "--tmux", "--dry-run", "--home", home_here.root]) == 0
    text = capsys.readouterr().out
    assert "tmux desk:0.0" in text and "tmux desk:0.1" in text and "claude-code(" in text
    # The detail column wraps at the terminal's width (CI's is narrower): read its words in order.
    assert "tmux pane desk:0.0" in " ".join(text.split())
