"""Codex's hook trust: which of Phoenix's Codex hooks Codex will run, and trusting them.

Codex (0.171.0) runs a hook from a ``hooks.json`` only once it is trusted: its
``~/.codex/config.toml`` (``$CODEX_HOME/config.toml``) holds, per hook, ::

    [hooks.state."/abs/path/.codex/hooks.json:session_start:0:0"]
    trusted_hash = "sha256:…"

The key is the ``hooks.json`` file's absolute path, the event's label, and the indices of the
matcher group and of the handler in it; the hash covers the hook's normalized definition, so any
edit makes it untrusted again. **An untrusted hook silently does not run** (no warning in
``codex exec``; the TUI asks once: "Hooks need review", and lists them under ``/hooks``).
Project-layer files (``<repo>/.codex/``) load at all only in a trusted project
(``[projects."/abs/repo"] trust_level = "trusted"``).

The hash (``command_hook_hash`` in codex-rs ``hooks/src/engine/discovery.rs``, through
``version_for_toml`` in ``config/src/fingerprint.rs``) is sha256 over the compact JSON, keys
sorted, of the event's label and the hook's matcher group holding only that handler, as it
serializes through TOML (absent values left out)::

    {"event_name": "pre_tool_use", "matcher": "*",
     "hooks": [{"type": "command", "command": "…", "timeout": 5, "async": false}]}

normalized: the timeout is always there (600 when absent, at least 1; SessionEnd's 1 when absent,
clamped to 1..3), ``commandWindows`` never, the matcher of UserPromptSubmit and Stop never
(Codex ignores it), ``statusMessage`` and ``additionalContextLimit`` when set. The end-to-end tests
check every key and hash computed here against what the real Codex reports (``codex
app-server``'s ``hooks/list``) and that a hook trusted this way runs without
``--dangerously-bypass-hook-trust``.

``phx install codex --trust`` writes these entries for Phoenix's own hooks (and no other) with
tomlkit, which keeps the rest of ``config.toml`` as it was laid out; ``phx uninstall codex``
removes them again. Without ``--trust`` the install result says how to trust them by hand
(``trust_steps``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass

from phoenix_protocol.core._durable import atomic_write, ensure_dir, read_bytes
from phoenix_protocol.core._errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = [
    "EVENT_LABELS",
    "HookTrust",
    "codex_home",
    "config_path",
    "forget_hooks",
    "hook_hash",
    "hook_trust",
    "project_trusted",
    "trust_hooks",
    "trust_steps",
]

EVENT_LABELS = {
    "PreToolUse": "pre_tool_use",
    "PermissionRequest": "permission_request",
    "PostToolUse": "post_tool_use",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "UserPromptSubmit": "user_prompt_submit",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
    "Stop": "stop",
}
"""Codex's hook events and the labels its trust keys and hashes use."""
_NO_MATCHER = frozenset({"UserPromptSubmit", "Stop"})
"""Events whose matcher Codex ignores (and leaves out of the hash)."""
DEFAULT_TIMEOUT = 600
SESSION_END_TIMEOUT = (1, 3)
"""SessionEnd's timeout when absent, and the most Codex allows (it clamps a larger one)."""
DEFAULT_CONTEXT_LIMIT = 2500
"""The tokens of a hook's ``additionalContext`` Codex keeps by default (about 10,000 bytes: it
counts a token per 4 bytes); a hook's ``additionalContextLimit`` raises it."""
_CONTEXT_EVENTS = frozenset({"PreToolUse", "PostToolUse", "SessionStart", "UserPromptSubmit", "SubagentStart"})
"""Events whose ``additionalContextLimit`` Codex reads (and hashes)."""
_MAX_CONFIG = 4 * 1024 * 1024


def codex_home(env: Mapping[str, str] | None = None) -> str:
    """Codex's folder: ``$CODEX_HOME``, else ``~/.codex``."""
    environ = os.environ if env is None else env
    configured = environ.get("CODEX_HOME")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".codex")


def config_path(env: Mapping[str, str] | None = None) -> str:
    """Codex's user configuration, where hook trust and project trust live."""
    return os.path.join(codex_home(env), "config.toml")


def normalized_timeout(event: str, timeout: object) -> int:
    """The timeout Codex runs (and hashes) a hook with, in seconds."""
    value = timeout if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout >= 0 else None
    if event == "SessionEnd":
        low, high = SESSION_END_TIMEOUT
        return min(max(low if value is None else value, low), high)
    return max(DEFAULT_TIMEOUT if value is None else value, 1)


def hook_hash(event: str, matcher: object, handler: Mapping[str, Any]) -> str:
    """Codex's ``trusted_hash`` of one command handler of ``event`` in a group with ``matcher``
    (see the module docstring)."""
    normalized: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": normalized_timeout(event, handler.get("timeout")),
        "async": handler.get("async") is True,
    }
    if handler.get("statusMessage") is not None:
        normalized["statusMessage"] = handler["statusMessage"]
    limit = handler.get("additionalContextLimit")
    if limit is not None and limit != DEFAULT_CONTEXT_LIMIT and event in _CONTEXT_EVENTS:
        normalized["additionalContextLimit"] = limit
    identity: dict[str, Any] = {"event_name": EVENT_LABELS[event], "hooks": [normalized]}
    if isinstance(matcher, str) and event not in _NO_MATCHER:
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HookTrust:
    """One command hook of a ``hooks.json`` as Codex's trust sees it."""

    event: str
    """Codex's event name (``SessionStart``)."""
    keys: tuple[str, ...]
    """Its ``[hooks.state]`` keys: the file's absolute path as Codex names it (with the real path
    too when that differs: a project reached through a symbolic link)."""
    hash: str
    """The ``trusted_hash`` that trusts it as it is now."""
    command: str


def key_paths(hooks_path: str) -> tuple[str, ...]:
    """The names Codex may give ``hooks_path`` in a trust key: as given (absolute), and its real
    path (Codex finds a project's ``.codex`` from its working directory, a physical path)."""
    given = os.path.abspath(hooks_path)
    real = os.path.join(os.path.realpath(os.path.dirname(given)), os.path.basename(given))
    return (given,) if real == given else (given, real)


def hook_trust(
    hooks_path: str, settings: Mapping[str, Any], ours: Callable[[Mapping[str, Any]], bool] | None = None
) -> list[HookTrust]:
    """The command hooks of ``settings`` (a ``hooks.json``'s content, at ``hooks_path``) with
    their trust keys and hashes; only those ``ours`` accepts, when given."""
    found: list[HookTrust] = []
    hooks = settings.get("hooks")
    paths = key_paths(hooks_path)
    for event, groups in hooks.items() if isinstance(hooks, dict) else []:
        if event not in EVENT_LABELS or not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if not isinstance(handler, dict) or handler.get("type") != "command":
                    continue
                if not isinstance(handler.get("command"), str) or (ours is not None and not ours(handler)):
                    continue
                keys = tuple(f"{path}:{EVENT_LABELS[event]}:{g}:{h}" for path in paths)
                found.append(
                    HookTrust(event, keys, hook_hash(event, group.get("matcher"), handler), handler["command"])
                )
    return found


def _load(path: str) -> Any:
    """``config.toml`` as a tomlkit document (an empty one when the file is missing)."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    data = read_bytes(path, limit=_MAX_CONFIG)
    try:
        return tomlkit.parse(data.decode("utf-8") if data else "")
    except (TOMLKitError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML ({exc}); fix it first, Phoenix left it untouched.") from None


def _states(doc: Any) -> dict[str, Any]:
    hooks = doc.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    return state if isinstance(state, dict) else {}


def trusted_hashes(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``[hooks.state]`` of Codex's ``config.toml``: key -> ``trusted_hash``. A file that does
    not read counts as none (Codex would not start either)."""
    try:
        states = _states(_load(config_path(env)))
    except (UsageError, OSError):
        return {}
    return {
        str(key): str(value["trusted_hash"])
        for key, value in states.items()
        if isinstance(value, dict) and isinstance(value.get("trusted_hash"), str)
    }


def status_of(hook: HookTrust, trusted: Mapping[str, str]) -> str:
    """``trusted``, ``modified`` (trusted once, changed since) or ``untrusted``."""
    hashes = [trusted[key] for key in hook.keys if key in trusted]
    if hook.hash in hashes:
        return "trusted"
    return "modified" if hashes else "untrusted"


def project_trusted(project_root: str, env: Mapping[str, str] | None = None) -> bool | None:
    """Whether Codex trusts the project (``[projects."<root>"] trust_level``): ``True``,
    ``False`` (marked untrusted), ``None`` (not decided: Codex asks, and ``codex exec`` loads no
    project configuration)."""
    try:
        doc = _load(config_path(env))
    except (UsageError, OSError):
        return None
    projects = doc.get("projects")
    if not isinstance(projects, dict):
        return None
    for path in {os.path.abspath(project_root), os.path.realpath(project_root)}:
        entry = projects.get(path)
        level = entry.get("trust_level") if isinstance(entry, dict) else None
        if level == "trusted":
            return True
        if level == "untrusted":
            return False
    return None


@dataclass
class TrustResult:
    """What ``trust_hooks`` or ``forget_hooks`` did (or would do): Codex's ``config.toml``, the
    keys written or removed, whether the file changed."""

    path: str
    keys: list[str]
    changed: bool


def _save(path: str, before: bytes | None, doc: Any) -> None:
    import tomlkit

    ensure_dir(os.path.dirname(path))
    mode = stat.S_IMODE(os.stat(path).st_mode) if before is not None else 0o600
    text = tomlkit.dumps(doc)
    atomic_write(path, text.encode("utf-8"))
    os.chmod(path, mode)


def trust_hooks(hooks: list[HookTrust], *, env: Mapping[str, str] | None = None, dry_run: bool = False) -> TrustResult:
    """Write the ``trusted_hash`` of each of ``hooks`` into Codex's ``config.toml`` (keeping the
    rest of the file as it was laid out)."""
    import tomlkit

    path = config_path(env)
    before = read_bytes(path, limit=_MAX_CONFIG)
    doc = _load(path)
    table = doc.get("hooks")
    if table is None:
        table = doc["hooks"] = tomlkit.table(is_super_table=True)
    if not isinstance(table, dict):
        raise UsageError(f"{path}: hooks is not a table; Phoenix left the file untouched.")
    states = table.get("state")
    if states is None:
        states = table["state"] = tomlkit.table(is_super_table=True)
    if not isinstance(states, dict):
        raise UsageError(f"{path}: hooks.state is not a table; Phoenix left the file untouched.")
    written: list[str] = []
    for hook in hooks:
        for key in hook.keys:
            entry = states.get(key)
            if not isinstance(entry, dict):
                entry = states[key] = tomlkit.table()
            if entry.get("trusted_hash") != hook.hash:
                entry["trusted_hash"] = hook.hash
                written.append(key)
    if not states:
        del table["state"]
    if not table:
        del doc["hooks"]
    if written and not dry_run:
        _save(path, before, doc)
    return TrustResult(path, written, bool(written))


def forget_hooks(hooks: list[HookTrust], *, env: Mapping[str, str] | None = None, dry_run: bool = False) -> TrustResult:
    """Remove the ``[hooks.state]`` entries of ``hooks`` (Phoenix's, as they were installed) from
    Codex's ``config.toml``: only those whose hash is theirs, so that a hook the user put in
    their place since and trusted keeps its trust."""
    path = config_path(env)
    before = read_bytes(path, limit=_MAX_CONFIG)
    if before is None:
        return TrustResult(path, [], False)
    doc = _load(path)
    states = _states(doc)
    removed: list[str] = []
    for hook in hooks:
        for key in hook.keys:
            entry = states.get(key)
            if isinstance(entry, dict) and entry.get("trusted_hash") == hook.hash:
                del states[key]
                removed.append(key)
    if removed:
        table = doc["hooks"]
        if not table["state"]:
            del table["state"]
        if not table:
            del doc["hooks"]
        if not dry_run:
            _save(path, before, doc)
    return TrustResult(path, removed, bool(removed))


def trust_steps(scope: str, hooks_path: str, *, project_root: str | None = None, command: str = "") -> list[str]:
    """How to trust Phoenix's hooks by hand, step by step (Codex 0.171.0)."""
    steps = []
    if scope == "project" and project_root:
        steps.append(
            f"Codex loads {hooks_path} only in a trusted project: start `codex` in {project_root} and answer "
            "that you trust the folder (or run `codex exec --trust` there once); or register the hooks for "
            "all your projects instead, which Codex loads in any project: `phx install codex --scope user`"
        )
    steps += [
        "Codex runs a hook only once you trust it, and an untrusted hook silently does not run: "
        'start `codex`; at the prompt "Hooks need review" choose "Trust all and continue" '
        "(later: type `/hooks`, review Phoenix's hooks and trust them)",
        f"or let Phoenix trust them: `{command or 'phx install codex --trust'}` (writes their trusted_hash "
        "into ~/.codex/config.toml; any later edit of the hooks makes them untrusted again)",
        "`phx doctor` reports Phoenix's Codex hooks that Codex does not trust or that never ran",
    ]
    return steps
