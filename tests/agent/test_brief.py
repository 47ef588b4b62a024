"""brief.md: the seed's sections, git context, the 10,000-character cap, importance order."""

from __future__ import annotations

from pathlib import Path

from conftest import git
from phoenix_protocol.agent._brief import render_brief
from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._git import GitContext, git_context
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent


def _state(loops: int = 0, actions: int = 0) -> AgentState:
    state = AgentState(status="working", current_task="Implementing user authentication", updated_by="model")
    state.open_loops = [{"id": i, "text": f"open loop number {i} " + "x" * 80} for i in range(1, loops + 1)]
    state.next_actions = [
        {"id": 1000 + i, "text": f"next action number {i} " + "y" * 80} for i in range(1, actions + 1)
    ]
    return state


def test_sections_in_the_seed_order() -> None:
    state = _state(1, 1)
    state.recent_work = [[1_767_225_600_000, "Bash", "pytest -q", False]]
    text = render_brief(state, agent_id="zero", generated_at="2026-01-01T00:00:00.000Z")
    order = [text.index(h) for h in ("## Current State", "## Open Loops", "## Next Actions", "## Done Recently")]
    assert order == sorted(order)
    assert "Working on: Implementing user authentication" in text
    assert "- 00:00:00Z ran `pytest -q` (failed)" in text
    assert "transcript" in text  # says it stands alone


def test_git_context_inside_a_repository(project: Path) -> None:
    (project / "new.py").write_text("print()\n")
    (project / "README.md").write_text("changed\n")
    git(project, "checkout", "-q", "-b", "feature/auth")
    ctx = git_context(str(project))
    assert ctx is not None and ctx.branch == "feature/auth" and ctx.head_subject == "Initial commit"
    assert sorted(p for _s, p in ctx.changed) == ["README.md", "new.py"]
    agent = Agent.open("a", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Auth")
    text = agent.write_brief()
    assert "Branch feature/auth at" in text and "new.py" in text and "README.md" in text
    assert Path(agent.brief_path).read_text() == text
    # The brief must not leave git's index lock behind or change the repository.
    assert not (project / ".git" / "index.lock").exists()


def test_outside_git_there_is_no_git_section(tmp_path: Path) -> None:
    assert git_context(str(tmp_path)) is None


def test_cap_keeps_current_state_and_newest_items() -> None:
    state = _state(80, 80)
    state.recent_work = [[1_767_225_600_000 + i, "Bash", f"make step-{i} " + "z" * 60, True] for i in range(12)]
    git = GitContext("/r", "main", "abc1234", "subject", [("M", f"src/file_{i}.py") for i in range(500)], 900)
    text = render_brief(state, agent_id="zero", git=git, generated_at="t", max_chars=10_000, work_limit=12)
    assert len(text) <= 10_000
    assert "Implementing user authentication" in text  # Current State is never cut
    assert "open loop number 80" in text  # the newest open loops stay
    assert "next action number 1 " in text  # the first next actions stay
    assert "more not shown (brief size limit)" in text
    assert "src/file_" not in text and "make step-" not in text  # least important: cut first
    assert "- … 12 more not shown (brief size limit)" in text


def test_tiny_cap_still_bounded() -> None:
    state = _state(5, 5)
    state.current_task = "t" * 3000
    text = render_brief(state, agent_id="zero", generated_at="t", max_chars=600)
    assert len(text) <= 600


def test_secrets_never_reach_the_brief() -> None:
    state = _state()
    state.last_output = "used token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    text = render_brief(state, agent_id="zero", generated_at="t")
    assert "A1b2C3d4E5f6G7h8I9j0" not in text


def test_a_task_typed_in_another_encoding_still_gets_a_brief(tmp_path: Path) -> None:
    agent = Agent.open("zero", home=Home(str(tmp_path / ".phoenix")))
    agent.state.set_status("working", b"fix caf\xe9 parser".decode("utf-8", "surrogateescape"))  # as argv gives it
    text = agent.write_brief(git_timeout=0.5)
    assert "fix caf\ufffd parser" in text
    assert "fix caf\ufffd parser" in Path(agent.brief_path).read_bytes().decode("utf-8")
