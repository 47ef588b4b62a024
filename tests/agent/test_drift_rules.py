"""Issue 36's drift rules, each on an injected-time trace played through the real PostToolUse hook
(``PHOENIX_NOW_MS`` pins the clock per call), with the issue's false-positive sessions as
regression cases: a legitimate read-only investigation, deploy polling, healthy 19-call and
30-call test-driven sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.agent._drift import (
    Action,
    DriftConfig,
    command_exempt,
    detect,
    normalize_command,
    observe,
)
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent

T0 = 1_767_225_600_000
SEC = 1000
MIN = 60 * SEC


class Session:
    """A Claude Code session played through the hook at injected times."""

    def __init__(self, project: Path, monkeypatch: pytest.MonkeyPatch, task: str = "Fix the build") -> None:
        self.project = project
        self.monkeypatch = monkeypatch
        self.now = T0
        self.outputs: list[str] = []
        monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
        monkeypatch.setenv("PHOENIX_NOW_MS", str(self.now))
        self._run("session-start", hook_event_name="SessionStart", source="startup")
        self.agent = Agent.open("default", home=Home(str(project / ".phoenix")))
        self.agent.state.set_status("working", task, session_id="s1")

    def _run(self, event: str, **payload: Any) -> str:
        body = {"session_id": "s1", "cwd": str(self.project), "transcript_path": "/dev/null", **payload}
        code, out, err = run([event], json.dumps(body).encode())
        assert code == 0, err
        return out

    def call(self, tool: str, tool_input: dict[str, Any], *, after_s: float = 20, error: str | None = None) -> str:
        self.now += int(after_s * SEC)
        self.monkeypatch.setenv("PHOENIX_NOW_MS", str(self.now))
        if error is None:
            out = self._run("post-tool-use", hook_event_name="PostToolUse", tool_name=tool, tool_input=tool_input)
        else:
            out = self._run(
                "post-tool-use-failure",
                hook_event_name="PostToolUseFailure",
                tool_name=tool,
                tool_input=tool_input,
                error=error,
            )
        self.outputs.append(out)
        return out

    def bash(self, command: str, **kw: Any) -> str:
        return self.call("Bash", {"command": command, "description": "run it"}, **kw)

    def drift_events(self) -> list[dict[str, Any]]:
        return [e["meta"] for e in self.agent.ops.read()[0] if e["event"] == "drift_detected"]

    def warnings(self) -> list[str]:
        return [json.loads(o)["hookSpecificOutput"]["additionalContext"] for o in self.outputs if o]


def _settings(project: Path, text: str) -> None:
    home = project / ".phoenix"
    home.mkdir(exist_ok=True)
    (home / "phoenix.toml").write_text(text)


# -- the normaliser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("pytest tests/test_db.py | tail -20", "pytest tests/test_db.py | tail -50"),
        ("cd /repo && pytest tests/test_db.py", "pytest tests/test_db.py"),
        ("cd /repo; cd sub && make", "make"),
        ("pytest -x -q tests/test_db.py", "pytest tests/test_db.py -q -x"),  # flag order
        ("pytest tests/test_db.py", "pytest --maxfail=1 tests/test_db.py"),  # an extra flag
        ("make build 2>&1 | head -n 40", "make build"),
        ("sleep 5 && tail -n 20 build.log", "sleep 10 && tail -n 50 build.log"),  # numbers
        ("git  push   origin 'main'", 'git push origin "main"'),  # quoting and whitespace
        ("git push -f origin main", "git push --force-with-lease origin main"),
    ],
)
def test_near_duplicate_commands_normalise_the_same(a: str, b: str) -> None:
    assert normalize_command(a) == normalize_command(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("pytest tests/test_db.py", "pytest tests/test_api.py"),
        ("git push origin main", "git push origin release"),
        ("make build", "make test"),
        ("pytest tests/test_db.py | grep FAIL", "pytest tests/test_db.py"),  # grep changes what is shown
        ("echo 'a && b'", "echo a && b"),  # operators inside quotes are text
    ],
)
def test_different_commands_stay_different(a: str, b: str) -> None:
    assert normalize_command(a) != normalize_command(b)


def test_command_exemption_matches_at_a_word_boundary() -> None:
    prefixes = ("kubectl rollout status",)
    assert command_exempt(normalize_command("kubectl rollout status deploy/web --timeout=60s"), prefixes)
    assert command_exempt(normalize_command("cd infra && kubectl rollout status deploy/web"), prefixes)
    assert not command_exempt(normalize_command("kubectl rollout statuses"), prefixes)
    assert not command_exempt(normalize_command("kubectl rollout undo deploy/web"), prefixes)


def test_an_action_of_six_items_still_reads() -> None:
    old = [1, "Bash", "d", False, None, False]
    assert Action.from_list(old).exempt is False and Action.from_list(old).to_list() == old
    new = Action(1, "Bash", "d", exempt=True).to_list()
    assert len(new) == 7 and Action.from_list(new).exempt is True
    with pytest.raises(ValueError, match="six or seven"):
        Action.from_list([*new, 1])


# -- persistent failure ----------------------------------------------------------------------------


def test_persistent_failure_fifteen_different_failing_builds(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: 15 different failing build calls raised nothing before the 20-minute alarm (the
    error-rate rule needs a rise over the previous window)."""
    s = Session(project, monkeypatch)
    for i in range(15):
        s.bash(f"make target_{i}", error=f"make: *** [target_{i}] Error {i + 1}")
    events = s.drift_events()
    assert events and events[0]["kind"] == "persistent_failure", events
    assert "7 of the last 7 calls failed" in events[0]["detail"]
    first = next(i for i, out in enumerate(s.outputs) if out)
    assert first == 6  # the seventh call
    assert len(s.warnings()) == 1  # one warning for the episode


def test_without_the_new_rule_the_same_trace_raises_nothing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with persistent_failure exempted (the rules as they were), nothing fires."""
    _settings(project, 'drift_exempt_rules = "persistent_failure"\n')
    s = Session(project, monkeypatch)
    for i in range(15):
        s.bash(f"make target_{i}", error=f"make: *** [target_{i}] Error {i + 1}")
    assert s.drift_events() == []


def test_failures_between_edits_are_not_persistent() -> None:
    cfg = DriftConfig()
    ring: list[Action] = []
    now = T0
    for i in range(40):
        now += 15 * SEC
        edit = i % 3 == 2
        ring, _progressed, signals = observe(
            ring,
            now_ms=now,
            tool="Edit" if edit else "Bash",
            digest=f"d{i}",
            ok=edit,
            duration_ms=None,
            config=cfg,
            last_progress_ms=T0,
        )
        assert not signals, (i, signals)


# -- near-duplicates -------------------------------------------------------------------------------


def test_six_failing_variants_of_one_command_are_repetition(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: near-identical commands (``| tail -20`` vs ``-50``, a ``cd … &&`` prefix, an extra
    flag) counted as different, so six failing variants raised nothing."""
    s = Session(project, monkeypatch)
    variants = [
        "pytest tests/test_db.py | tail -20",
        "pytest tests/test_db.py | tail -50",
        f"cd {project} && pytest tests/test_db.py",
        "pytest -x tests/test_db.py",
        "pytest tests/test_db.py -x -q",
        "pytest tests/test_db.py --maxfail=1 2>&1 | head -40",
    ]
    for command in variants:
        s.bash(command, error="E   AssertionError: assert 2 == 3")
    events = s.drift_events()
    assert events and events[0]["kind"] == "repetition", events
    assert "the same Bash call 4 times" in events[0]["detail"]
    assert [bool(o) for o in s.outputs] == [False, False, False, True, False, False]


# -- slowdown from gaps ----------------------------------------------------------------------------


def _gap_trace(tool_seconds: list[float], think_s: float = 5.0) -> list[Action]:
    """Calls whose only timing is when they ended: think time, then the tool's own time."""
    out = []
    now = T0
    for i, tool_s in enumerate(tool_seconds):
        now += int((think_s + tool_s) * SEC)
        out.append(Action(now, "Bash", f"cmd{i}", ok=True, duration_ms=None))
    return out


def test_slowdown_from_the_gaps_when_the_cli_sends_no_durations() -> None:
    # 0.5 s -> 60 s per call, think time 5 s: the think time dilutes the trend, so the gaps need a
    # steeper slowdown than durations do (docs/drift.md).
    growing = [0.5 + 60 * i / 40 for i in range(41)]
    trace = _gap_trace(growing)
    signals = detect(trace, now_ms=trace[-1].ts_ms, config=DriftConfig(stall_minutes=0))
    assert [s.kind for s in signals] == ["slowdown"], signals
    assert "median gap between calls" in signals[0].detail
    # Earlier in the same trace (two windows of slowing down only) it is not yet a trend.
    early = trace[:25]
    assert detect(early, now_ms=early[-1].ts_ms, config=DriftConfig(stall_minutes=0)) == []


def test_steady_gaps_with_noise_are_no_slowdown() -> None:
    import random

    rng = random.Random(7)
    trace = _gap_trace([rng.uniform(0.5, 12) for _ in range(41)], think_s=4)
    assert detect(trace, now_ms=trace[-1].ts_ms, config=DriftConfig(stall_minutes=0)) == []


def test_gaps_are_not_used_when_the_cli_sends_durations() -> None:
    trace = _gap_trace([0.5 + 60 * i / 40 for i in range(41)])
    for a in trace[-5:]:
        a.duration_ms = 1000  # a CLI that sends durations: the few it sent decide
    assert detect(trace, now_ms=trace[-1].ts_ms, config=DriftConfig(stall_minutes=0)) == []


def test_a_pause_is_no_call_time() -> None:
    """A gap of half the stall time or more (the person away, a long think) is left out."""
    trace = _gap_trace([2.0] * 41)
    for a in trace[30:]:
        a.ts_ms += 15 * MIN  # one 15-minute pause before call 30 shifts the rest
    assert detect(trace, now_ms=trace[-1].ts_ms, config=DriftConfig(stall_minutes=20)) == []


# -- exemptions and the false-positive sessions ---------------------------------------------------


def test_deploy_polling_is_exempt_by_default(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: polling a deploy (``kubectl rollout status`` x4) tripped repetition."""
    s = Session(project, monkeypatch, task="Deploy 2.4.0")
    s.bash("kubectl apply -f k8s/")
    for _ in range(3):
        s.bash("kubectl rollout status deploy/web --timeout=60s", error="error: timed out waiting for the condition")
    s.bash("kubectl rollout status deploy/web --timeout=60s", after_s=60)
    assert s.drift_events() == [] and not any(s.outputs)


def test_without_the_default_exemption_polling_is_repetition(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(project, 'drift_exempt_commands = ""\n')
    s = Session(project, monkeypatch, task="Deploy 2.4.0")
    s.bash("kubectl apply -f k8s/")
    for _ in range(4):
        s.bash("kubectl rollout status deploy/web --timeout=60s", error="error: timed out waiting for the condition")
    assert [e["kind"] for e in s.drift_events()][:1] == ["repetition"]


def test_a_command_the_model_exempts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(project, monkeypatch, task="Wait for the nightly job")
    assert cli(["drift", "exempt", "--command", "./scripts/job-status.sh", "--home", str(project / ".phoenix")]) == 0
    for _ in range(8):
        s.bash("./scripts/job-status.sh nightly", after_s=60)
    assert s.drift_events() == []
    s.bash("./scripts/other.sh")  # other commands still count
    for _ in range(4):
        s.bash("make deploy", error="boom")
    assert s.drift_events()


def _investigate(s: Session, minutes: float) -> None:
    k = 0
    end = s.now + int(minutes * MIN)
    while s.now < end:
        k += 1
        if k % 3:
            s.call("Read", {"file_path": f"{s.project}/src/module_{k}.py"}, after_s=25)
        else:
            s.call("Grep", {"pattern": f"session_{k}", "path": "src"}, after_s=25)


def test_read_only_investigation_exempted_by_the_model(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: a legitimate 20-minute read-only investigation tripped ``no_progress``. The model
    (or the user) exempts the task; the exemption ends with the task."""
    s = Session(project, monkeypatch, task="Find why sessions expire early (read-only)")
    assert cli(["drift", "exempt", "no_progress", "--home", str(project / ".phoenix")]) == 0
    _investigate(s, 21)
    assert s.drift_events() == [] and not any(s.outputs)
    # A new task: the exemption no longer holds, and the same work is judged again.
    s.agent.state.set_status("working", "Read more", session_id="s1")
    _investigate(s, 21)
    assert [e["kind"] for e in s.drift_events()] == ["no_progress"]


def test_a_task_that_says_it_is_read_only(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's setting ``drift_read_only_tasks`` (default ``read-only,readonly``): a task whose
    text says it is read-only is exempt from ``no_progress``, with no command to run."""
    s = Session(project, monkeypatch, task="Find why sessions expire early (read-only)")
    _investigate(s, 25)
    assert s.drift_events() == [] and not any(s.outputs)


def test_read_only_words_are_a_setting(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(project, 'drift_read_only_tasks = "audit"\n')
    s = Session(project, monkeypatch, task="Find why sessions expire early (read-only)")
    _investigate(s, 21)
    assert [e["kind"] for e in s.drift_events()] == ["no_progress"]
    s.agent.state.set_status("working", "Audit the session code", session_id="s1")
    _investigate(s, 25)
    assert [e["kind"] for e in s.drift_events()] == ["no_progress"]  # no second one


def test_read_only_investigation_without_an_exemption_is_still_flagged(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the exemption is for: the rule cannot tell a 20-minute investigation from an agent
    reading around in circles (bench/drift_compare.py's review_task), so it fires at 20 minutes."""
    s = Session(project, monkeypatch, task="Find why sessions expire early")
    _investigate(s, 21)
    assert [e["kind"] for e in s.drift_events()] == ["no_progress"]


def test_healthy_19_call_session(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(project, monkeypatch, task="Add the --since option")
    src = f"{project}/src/app/cli.py"
    s.bash("git status")
    s.call("Grep", {"pattern": "def main", "path": "src"})
    s.call("Read", {"file_path": src})
    s.call("Read", {"file_path": f"{project}/tests/test_cli.py"})
    s.call("Edit", {"file_path": src, "old_string": "a", "new_string": "b"})
    s.bash("pytest -q tests/test_cli.py", error="1 failed")
    s.call("Read", {"file_path": src})
    s.call("Edit", {"file_path": src, "old_string": "b", "new_string": "c"})
    s.bash("pytest -q tests/test_cli.py")
    s.call("Edit", {"file_path": f"{project}/tests/test_cli.py", "old_string": "x", "new_string": "y"})
    s.bash("pytest -q tests/test_cli.py")
    s.bash("ruff check src tests")
    s.bash("ruff format src tests")
    s.bash("pytest -q")
    s.call("Edit", {"file_path": f"{project}/README.md", "old_string": "p", "new_string": "q"})
    s.bash("git diff --stat")
    s.bash("git add -A")
    s.bash("git commit -m 'Add --since'")
    s.bash("git log --oneline -1")
    assert len(s.outputs) == 19
    assert s.drift_events() == [] and not any(s.outputs)


def test_test_driven_30_call_session(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same failing test command after every edit, failing differently: progress between."""
    s = Session(project, monkeypatch, task="Implement token refresh test-first")
    src = f"{project}/src/auth.py"
    for r in range(10):
        s.bash("pytest -q tests/test_auth.py -x 2>&1 | tail -30", error=f"E   AssertionError: case {r}")
        s.call("Read", {"file_path": src})
        s.call("Edit", {"file_path": src, "old_string": f"v{r}", "new_string": f"v{r + 1}"})
    assert len(s.outputs) == 30
    assert s.drift_events() == [] and not any(s.outputs)


# -- one warning per episode ------------------------------------------------------------------------


def test_an_a_b_loop_warns_once(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: an A-B loop injected two warnings on consecutive calls."""
    s = Session(project, monkeypatch)
    for i in range(20):
        if i % 2:
            s.call("Read", {"file_path": f"{project}/src/db.py"})
        else:
            s.bash("pytest tests/test_db.py", error="E   KeyError: 'user_id'")
    flags = [bool(o) for o in s.outputs]
    assert sum(flags) == 1, flags
    assert len(s.drift_events()) >= 2  # later signals of the episode are logged, not injected
    # Progress ends the episode; the next loop warns again, once.
    s.call("Edit", {"file_path": f"{project}/src/db.py", "old_string": "a", "new_string": "b"})
    for i in range(12):
        s.bash("pytest tests/test_db.py" if i % 2 else "alembic upgrade head", error="boom")
    assert sum(bool(o) for o in s.outputs) == 2
