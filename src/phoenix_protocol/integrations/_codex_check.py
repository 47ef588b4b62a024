"""``phx doctor`` for Codex: Phoenix's Codex hooks that Codex will not run, or has not run.

Codex runs an untrusted hook silently not at all (``_codex_trust``), so a user who installed the
hooks and skipped the trust step sees Codex work as usual and Phoenix record nothing. Two checks,
for the project's ``.codex/hooks.json`` and the user's ``~/.codex/hooks.json``, each only where
they hold Phoenix's hooks:

- **trust** (from the files alone): each of Phoenix's hooks against the ``trusted_hash`` in
  Codex's ``config.toml`` (untrusted, or modified since it was trusted), and for the project's
  file whether Codex trusts the project at all (it loads no project ``.codex/`` otherwise);
- **never ran** (from what happened): the Codex sessions started in this project since the file
  last changed (Codex's own session files, ``~/.codex/sessions/…/rollout-*.jsonl``, whose first
  record names the session and its working directory) against the sessions Phoenix's SessionStart
  hook recorded (the ``session_start`` events of the home's agents, ``client: codex``). A Codex
  session that Phoenix never heard of means the hooks did not run, whatever the reason (not
  trusted, the project not trusted, ``phx`` not on Codex's ``PATH``, hooks disabled).

Each problem comes with the steps that fix it (``trust_steps``). Reported only: Codex's files are
not Phoenix's to change (``phx install codex --trust`` is the user's decision).
"""

from __future__ import annotations

import json
import os

from phoenix_protocol.core._durable import read_bytes, read_range
from phoenix_protocol.core._errors import PhoenixError
from phoenix_protocol.core._jsonio import JSONError, loads
from phoenix_protocol.integrations._codex_trust import (
    HookTrust,
    codex_home,
    config_path,
    hook_trust,
    project_trusted,
    status_of,
    trust_steps,
    trusted_hashes,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["check_codex", "codex_sessions_since", "phoenix_hooks"]

_MAX_HOOKS_FILE = 4 * 1024 * 1024
_META_BYTES = 8192
"""How much of a rollout file's first line is read: its ``session_meta`` names the session and
its ``cwd`` before the (long) base instructions."""
MAX_ROLLOUTS = 500
"""At most this many of Codex's newest session files are looked at."""


def hooks_file(scope: str, project_dir: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """Codex's ``hooks.json`` of ``scope``: ``<project>/.codex/hooks.json`` or ``~/.codex/hooks.json``."""
    if scope == "user":
        return os.path.join(codex_home(env), "hooks.json")
    return os.path.join(project_dir, ".codex", "hooks.json") if project_dir else None


def phoenix_hooks(
    path: str, ours: Callable[[Mapping[str, Any]], bool]
) -> tuple[list[HookTrust], float | None, str | None]:
    """Phoenix's hooks in the ``hooks.json`` at ``path`` with their trust keys and hashes, the
    file's modification time (``None``: no file), and what keeps it from being read (or ``None``)."""
    try:
        data = read_bytes(path, limit=_MAX_HOOKS_FILE)
        mtime = os.stat(path).st_mtime if data is not None else None
    except (OSError, PhoenixError) as exc:
        return [], None, f"{path} does not read: {exc}"
    if data is None:
        return [], None, None
    try:
        settings = loads(data) if data.strip() else {}
    except JSONError as exc:
        return [], mtime, f"{path} is not valid JSON ({exc}): Codex runs none of its hooks"
    if not isinstance(settings, dict):
        return [], mtime, f"{path} does not hold a JSON object: Codex runs none of its hooks"
    return hook_trust(path, settings, ours), mtime, None


def codex_sessions_since(project_dir: str, since: float, env: Mapping[str, str] | None = None) -> list[str]:
    """The ids of the Codex sessions started in ``project_dir`` (or below it) at or after
    ``since`` (seconds since the epoch), from Codex's session files (the newest
    ``MAX_ROLLOUTS``)."""
    root = os.path.join(codex_home(env), "sessions")
    found: list[tuple[float, str]] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("rollout-") and name.endswith(".jsonl"):
                path = os.path.join(dirpath, name)
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:
                    continue
                if mtime >= since:
                    found.append((mtime, path))
    wanted = {os.path.abspath(project_dir), os.path.realpath(project_dir)}
    ids: list[str] = []
    for _mtime, path in sorted(found, reverse=True)[:MAX_ROLLOUTS]:
        meta = _session_meta(path)
        if meta is None:
            continue
        session_id, cwd, started = meta
        inside = any(cwd == w or cwd.startswith(w.rstrip("/") + "/") for w in wanted)
        if inside and started >= since:
            ids.append(session_id)
    return ids


def _session_meta(path: str) -> tuple[str, str, float] | None:
    """``(session id, cwd, start time)`` from a rollout file's first record (its beginning only)."""
    try:
        head = read_range(path, 0, _META_BYTES)
    except (OSError, PhoenixError):
        return None
    if not head:
        return None
    text = head.split(b"\n", 1)[0].decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    values: dict[str, str] = {}
    for key in ("id", "cwd", "timestamp"):
        at = text.find(f'"{key}":"')
        if at < 0:
            return None
        try:
            value, _ = decoder.raw_decode(text, at + len(key) + 3)
        except ValueError:
            return None
        values[key] = str(value)
    from phoenix_protocol.core._clock import ms_from_iso

    try:
        started = ms_from_iso(values["timestamp"]) / 1000
    except ValueError:
        return None
    return values["id"], values["cwd"], started


def _recorded_sessions(agents_events: list[list[dict[str, Any]]]) -> set[str]:
    """The session ids Phoenix's SessionStart hook recorded, in the given agents' ops events."""
    seen: set[str] = set()
    for events in agents_events:
        for event in events:
            meta = event.get("meta")
            if event.get("event") == "session_start" and isinstance(meta, dict):
                sid = meta.get("session_id")
                if isinstance(sid, str):
                    seen.add(sid)
    return seen


def check_codex(
    project_dir: str | None,
    *,
    ours: Callable[[Mapping[str, Any]], bool],
    events: Callable[[], list[list[dict[str, Any]]]] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[tuple[str, str, str]]:
    """What keeps Phoenix's Codex hooks from running, as ``(scope, hooks.json, problem)``: see
    the module docstring. ``ours`` tells Phoenix's hook entries; ``events()`` gives the ops
    events of the home's agents (the never-ran check needs them; skipped without)."""
    problems: list[tuple[str, str, str]] = []
    trusted = None
    for scope in ("project", "user"):
        path = hooks_file(scope, project_dir, env)
        if path is None:
            continue
        hooks, mtime, unreadable = phoenix_hooks(path, ours)
        if unreadable is not None:
            problems.append((scope, path, unreadable))
            continue
        if not hooks or mtime is None:
            continue
        command = f"phx install codex --scope {scope} --trust"
        steps = trust_steps(scope, path, project_root=project_dir, command=command)
        if trusted is None:
            trusted = trusted_hashes(env)
        if scope == "project" and project_dir and project_trusted(project_dir, env) is not True:
            problems.append(
                (
                    scope,
                    path,
                    f'Codex does not trust the project (no trust_level = "trusted" for {project_dir} in '
                    f"{config_path(env)}), so it runs none of Phoenix's hooks there. {steps[0]}",
                )
            )
        statuses = {hook.event: status_of(hook, trusted) for hook in hooks}
        bad = sorted(event for event, status in statuses.items() if status != "trusted")
        if bad:
            modified = sorted(e for e in bad if statuses[e] == "modified")
            what = f"{len(bad)} of Phoenix's {len(statuses)} Codex hooks are not trusted ({', '.join(bad)})"
            if modified:
                what += f"; {', '.join(modified)} changed since they were trusted"
            problems.append(
                (
                    scope,
                    path,
                    f"{what}: Codex silently runs no untrusted hook. To trust them: " + "; ".join(steps[-3:-1]),
                )
            )
        if events is None or not project_dir:
            continue
        started = codex_sessions_since(project_dir, mtime, env)
        if not started:
            continue
        try:
            recorded = _recorded_sessions(events())
        except (PhoenixError, OSError) as exc:
            problems.append((scope, path, f"could not read the home's ops events to check the hooks ran: {exc}"))
            continue
        missed = [sid for sid in started if sid not in recorded]
        if missed and len(missed) == len(started):
            problems.append(
                (
                    scope,
                    path,
                    f"Phoenix's Codex hooks never ran: Codex started {len(started)} session(s) in this project "
                    f"since {path} last changed (the newest: {missed[0]}), and Phoenix's SessionStart hook "
                    "recorded none of them. " + "; ".join(steps[:-1]),
                )
            )
    return problems
