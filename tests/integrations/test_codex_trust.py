"""Codex's hook trust (``_codex_trust``) and ``phx doctor``'s Codex checks (``_codex_check``).

The hashes below are what the real Codex 0.171.0 reported for these hooks (``codex app-server``,
``hooks/list``, ``currentHash``); ``tests/e2e/test_codex.py`` checks every hook Phoenix installs
against it again, and that a hook trusted this way runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.integrations._codex_check import check_codex, codex_sessions_since
from phoenix_protocol.integrations._codex_trust import (
    config_path,
    forget_hooks,
    hook_hash,
    hook_trust,
    key_paths,
    project_trusted,
    trust_hooks,
    trusted_hashes,
)

PROBE = "python3 /tmp/cxprobe/probe.py /tmp/cxprobe/run5/out"
SEEN = {  # (event, matcher, handler) -> what Codex 0.171.0 computed
    ("PreToolUse", "*", (("command", f"{PROBE} PreToolUse"), ("timeout", 10))): (
        "sha256:29cd56538dcb017232a584224521a3604d10b5b04e888a6b58af5c532a54a529"
    ),
    ("SessionStart", None, (("command", f"{PROBE} SessionStart"), ("timeout", 10))): (
        "sha256:a32999b699fd3acebc9d5ba2f695562f11aef5f6e26603df416995e65bf670b1"
    ),
    # SessionEnd's timeout is clamped to 3 s before it is hashed.
    ("SessionEnd", None, (("command", f"{PROBE} SessionEnd"), ("timeout", 10))): (
        "sha256:28f23c733de86b8477153fc76eb529a0470db9ca9ec71bc953c08b4ae9f859f1"
    ),
    ("Stop", None, (("command", f"{PROBE} Stop"), ("timeout", 10))): (
        "sha256:d4bce9ce72a7f99e92c3ea25aea8912c284913c9f0adbf0f50889e2a510b3ea8"
    ),
}


@pytest.mark.parametrize("seen", list(SEEN.items()), ids=[k[0] for k in SEEN])
def test_hash_is_the_one_codex_computes(
    seen: tuple[tuple[str, str | None, tuple[tuple[str, object], ...]], str],
) -> None:
    (event, matcher, fields), expected = seen
    assert hook_hash(event, matcher, {"type": "command", **dict(fields)}) == expected


def test_hash_normalizes_as_codex_does() -> None:
    handler = {"type": "command", "command": "echo x", "timeout": 5}
    base = hook_hash("PostToolUse", "*", handler)
    assert hook_hash("PostToolUse", "*", {**handler, "commandWindows": "echo y"}) == base  # never hashed
    assert hook_hash("PostToolUse", "*", {**handler, "unknown": 1}) == base
    assert hook_hash("PostToolUse", None, handler) != base
    assert hook_hash("Stop", "x", handler) == hook_hash("Stop", None, handler)  # Codex ignores Stop's matcher
    assert hook_hash("PostToolUse", "*", {**handler, "timeout": None}) == hook_hash(
        "PostToolUse", "*", {**handler, "timeout": 600}
    )
    assert hook_hash("SessionEnd", None, {**handler, "timeout": 9}) == hook_hash(
        "SessionEnd", None, {**handler, "timeout": 3}
    )
    assert hook_hash("SessionEnd", None, {**handler, "timeout": None}) == hook_hash(
        "SessionEnd", None, {**handler, "timeout": 1}
    )
    # additionalContextLimit counts where Codex reads it, and not at its default of 2,500 tokens.
    assert hook_hash("SessionStart", None, {**handler, "additionalContextLimit": 2500}) == hook_hash(
        "SessionStart", None, handler
    )
    assert hook_hash("SessionStart", None, {**handler, "additionalContextLimit": 10000}) != hook_hash(
        "SessionStart", None, handler
    )
    assert hook_hash("PreCompact", None, {**handler, "additionalContextLimit": 10000}) == hook_hash(
        "PreCompact", None, handler
    )


def _hooks_file(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "project" / ".codex" / "hooks.json"
    path.parent.mkdir(parents=True)
    settings: dict[str, Any] = {
        "hooks": {
            "SessionStart": [
                {"hooks": [{"type": "command", "command": "their-hook"}]},
                {"hooks": [{"type": "command", "command": "phx hook session-start", "timeout": 10}]},
            ],
            "PostToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "theirs"}, {"type": "prompt"}]},
                {"matcher": "*", "hooks": [{"type": "command", "command": "phx hook post-tool-use", "timeout": 5}]},
            ],
        }
    }
    path.write_text(json.dumps(settings))
    return str(path), settings


def _ours(handler: object) -> bool:
    return isinstance(handler, dict) and str(handler.get("command", "")).startswith("phx ")


def test_keys_name_the_file_event_group_and_handler(tmp_path: Path) -> None:
    path, settings = _hooks_file(tmp_path)
    everything = hook_trust(path, settings)
    assert [h.keys[0] for h in everything] == [
        f"{path}:session_start:0:0",
        f"{path}:session_start:1:0",
        f"{path}:post_tool_use:0:0",  # the prompt handler has no trust of its own
        f"{path}:post_tool_use:1:0",
    ]
    ours = hook_trust(path, settings, _ours)
    assert [h.keys[0].rsplit(":", 3)[1:] for h in ours] == [["session_start", "1", "0"], ["post_tool_use", "1", "0"]]


def test_a_project_reached_through_a_link_gets_both_keys(tmp_path: Path) -> None:
    path, _ = _hooks_file(tmp_path)
    os.symlink(tmp_path / "project", tmp_path / "link")
    linked = str(tmp_path / "link" / ".codex" / "hooks.json")
    assert key_paths(linked) == (linked, os.path.realpath(linked))
    assert key_paths(path) == (path,)


def test_trust_writes_only_phoenix_hooks_and_keeps_the_file(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    config = Path(config_path(env))
    config.parent.mkdir(parents=True)
    original = (
        '# my settings\nmodel = "gpt-5.5"  # the one I like\n\n[projects."/src/app"]\ntrust_level = "trusted"\n\n'
        '[hooks.state."/elsewhere/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:theirs"\n'
    )
    config.write_text(original)
    config.chmod(0o640)
    path, settings = _hooks_file(tmp_path)
    ours = hook_trust(path, settings, _ours)
    done = trust_hooks(ours, env=env)
    assert done.changed and done.keys == [h.keys[0] for h in ours]
    text = config.read_text()
    assert text.startswith(original)  # the user's lines, comments and order as they were
    assert trusted_hashes(env) == {
        "/elsewhere/hooks.json:stop:0:0": "sha256:theirs",
        **{h.keys[0]: h.hash for h in ours},
    }
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    assert not trust_hooks(ours, env=env).changed  # idempotent
    # Uninstall forgets exactly those (a key whose hash the user changed since stays).
    forgot = forget_hooks(ours, env=env)
    assert forgot.changed and config.read_text().rstrip("\n") == original.rstrip("\n")


def test_trust_on_no_config_creates_a_private_one(tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path / "codex")}
    path, settings = _hooks_file(tmp_path)
    ours = hook_trust(path, settings, _ours)
    assert trust_hooks(ours, env=env, dry_run=True).changed and not os.path.exists(config_path(env))
    trust_hooks(ours, env=env)
    assert oct(os.stat(config_path(env)).st_mode & 0o777) == "0o600"
    assert set(trusted_hashes(env)) == {h.keys[0] for h in ours}
    forget_hooks(ours, env=env)
    assert Path(config_path(env)).read_text().strip() == ""


def test_a_config_that_is_not_toml_is_left_alone(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    Path(config_path(env)).parent.mkdir(parents=True)
    Path(config_path(env)).write_text("model = [unclosed\n")
    path, settings = _hooks_file(tmp_path)
    with pytest.raises(UsageError, match="not valid TOML"):
        trust_hooks(hook_trust(path, settings, _ours), env=env)
    assert Path(config_path(env)).read_text() == "model = [unclosed\n"
    assert trusted_hashes(env) == {} and project_trusted(str(tmp_path), env) is None


def test_project_trust(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    Path(config_path(env)).parent.mkdir(parents=True)
    Path(config_path(env)).write_text(
        f'[projects."{tmp_path / "a"}"]\ntrust_level = "trusted"\n[projects."{tmp_path / "b"}"]\ntrust_level = "untrusted"\n'
    )
    assert project_trusted(str(tmp_path / "a"), env) is True
    assert project_trusted(str(tmp_path / "b"), env) is False
    assert project_trusted(str(tmp_path / "c"), env) is None


def _rollout(home: Path, session: str, cwd: str, when: str, mtime: float) -> None:
    folder = home / ".codex" / "sessions" / "2026" / "11" / "28"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "timestamp": when,
        "type": "session_meta",
        "payload": {
            "session_id": session,
            "id": session,
            "timestamp": when,
            "cwd": cwd,
            "base_instructions": {"text": "x" * 20000},
        },
    }
    path = folder / f"rollout-{session}.jsonl"
    path.write_text(
        json.dumps(meta, separators=(",", ":")) + "\n" + json.dumps({"type": "event"}) + "\n"
    )  # compact, as Codex writes
    os.utime(path, (mtime, mtime))


def test_doctor_reports_untrusted_hooks_and_sessions_they_missed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    path, settings = _hooks_file(tmp_path)
    project = str(tmp_path / "project")
    installed = os.stat(path).st_mtime
    Path(config_path(env)).parent.mkdir(parents=True, exist_ok=True)
    Path(config_path(env)).write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    _rollout(home, "s-before", project, "2020-01-01T00:00:00.000Z", installed - 3600)  # before the install
    assert codex_sessions_since(project, installed, env) == []
    [(scope, where, problem)] = check_codex(project, ours=_ours, events=list, env=env)
    assert (scope, where) == ("project", path)
    assert "2 of Phoenix's 2 Codex hooks are not trusted (PostToolUse, SessionStart)" in problem
    assert "Trust all and continue" in problem and "phx install codex --scope project --trust" in problem

    from phoenix_protocol.core._clock import iso_from_ms

    now = iso_from_ms(int((installed + 60) * 1000))
    _rollout(home, "s-after", os.path.join(project, "sub"), now, installed + 60)
    _rollout(home, "s-elsewhere", str(tmp_path / "other"), now, installed + 60)
    assert codex_sessions_since(project, installed, env) == ["s-after"]
    found = check_codex(project, ours=_ours, events=list, env=env)
    assert len(found) == 2 and "never ran" in found[1][2] and "s-after" in found[1][2]
    # Once the hooks are trusted and Phoenix recorded the session: nothing to report.
    trust_hooks(hook_trust(path, settings, _ours), env=env)
    ran = [[{"event": "session_start", "meta": {"session_id": "s-after", "client": "codex"}}]]
    assert check_codex(project, ours=_ours, events=lambda: ran, env=env) == []
    # A project Codex does not trust loads no hooks at all.
    Path(config_path(env)).write_text(Path(config_path(env)).read_text().replace('"trusted"', '"untrusted"', 1))
    [(_, _, problem)] = check_codex(project, ours=_ours, events=lambda: ran, env=env)
    assert "Codex does not trust the project" in problem and "codex exec --trust" in problem


def test_doctor_says_nothing_without_phoenix_hooks(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert check_codex(str(tmp_path), ours=_ours, env=env) == []
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "hooks.json").write_text("{not json")
    [(_, _, problem)] = check_codex(str(tmp_path), ours=_ours, env=env)
    assert "not valid JSON" in problem
