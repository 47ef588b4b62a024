"""Where the home is."""

from __future__ import annotations

from pathlib import Path

from phoenix_protocol.core._home import Home, find_work_tree_root, resolve_home


def test_home_is_at_the_git_work_tree_root(project: Path) -> None:
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    assert resolve_home(str(sub), {}) == str(project / ".phoenix")
    assert find_work_tree_root(str(sub)) == str(project)


def test_outside_git_the_home_is_in_the_working_directory(tmp_path: Path) -> None:
    assert resolve_home(str(tmp_path), {}) == str(tmp_path / ".phoenix")


def test_phoenix_home_wins_and_state_dir_is_an_alias(tmp_path: Path, project: Path) -> None:
    assert resolve_home(str(project), {"PHOENIX_HOME": str(tmp_path / "h")}) == str(tmp_path / "h")
    assert resolve_home(str(project), {"PHOENIX_STATE_DIR": str(tmp_path / "s")}) == str(tmp_path / "s")
    both = {"PHOENIX_HOME": str(tmp_path / "h"), "PHOENIX_STATE_DIR": str(tmp_path / "s")}
    assert resolve_home(str(project), both) == str(tmp_path / "h")
    assert resolve_home(str(project), {"PHOENIX_HOME": "rel"}) == str(project / "rel")


def test_worktree_with_a_git_file_counts(tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text("gitdir: /elsewhere\n")
    assert resolve_home(str(tmp_path / "wt"), {}) == str(tmp_path / "wt" / ".phoenix")


def test_agent_ids_lists_only_valid_directories(home: Home) -> None:
    home.ensure_agent_dir("b")
    home.ensure_agent_dir("a")
    Path(home.root, "agents", ".hidden").mkdir()
    assert home.agent_ids() == ["a", "b"]
