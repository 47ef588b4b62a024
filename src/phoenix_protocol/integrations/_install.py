"""``phx install claude-code`` / ``phx uninstall claude-code``: our hooks in Claude Code's settings.

Scopes and files (as Claude Code defines them):

=========  ===========================================
project    ``<project>/.claude/settings.json`` (shared with the team through git)
local      ``<project>/.claude/settings.local.json`` (this machine only)
user       ``~/.claude/settings.json`` (every project of this user)
=========  ===========================================

The command written runs this very installation's interpreter by absolute path, so it works
whatever ``PATH`` Claude Code runs with, and goes straight to the light hook module::

    '/path/to/.venv/bin/python' -S -P -c 'import sys; sys.path.append("/path/to/.venv/lib/python3.11/site-packages"); from phoenix_protocol.integrations._hooks import main; main()' post-tool-use

``-S`` skips setting up the site packages, about 2 ms of every heartbeat; the command names the
directory Phoenix is installed in instead (``install_dir``), and the hook sets the site packages
up when an import needs them (``_hooks._SiteOnFirstMiss``). After the environment moves, run
``phx install`` again (as for a moved interpreter).

Install is idempotent (a second run changes nothing), keeps every other key and hook, replaces
an older Phoenix entry in place (say, after the venv moved), and keeps a backup of the file it
changes (``settings.json.bak-<time>``). Uninstall removes exactly the entries whose command runs
``phoenix_protocol.integrations._hooks`` and nothing else, dropping matcher groups and event lists it leaves
empty. A settings file that is not valid JSON is refused, untouched.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys

from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._durable import atomic_write, ensure_dir, read_bytes
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import find_work_tree_root
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.core._jsonio import JSONError, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "HOOK_SPECS",
    "SCOPES",
    "InstallResult",
    "check_installed",
    "hook_command",
    "install_claude_code",
    "install_dir",
    "settings_path",
    "uninstall_claude_code",
]

SCOPES = ("project", "local", "user")
MARKER = "phoenix_protocol.integrations._hooks"
LEGACY_MARKERS = ("phoenix_protocol._hooks ",)
"""What the hook commands of earlier releases name: recognised as ours, so that install replaces them."""

# (Claude Code event, our event, timeout in seconds, matcher or None)
HOOK_SPECS: list[tuple[str, str, int, str | None]] = [
    ("SessionStart", "session-start", 10, None),
    ("PostToolUse", "post-tool-use", 5, "*"),
    ("PostToolUseFailure", "post-tool-use-failure", 5, "*"),
    ("PreCompact", "pre-compact", 10, None),
    ("Stop", "stop", 5, None),
    ("SessionEnd", "session-end", 2, None),
]


def hook_command(event: str, *, python: str | None = None, agent: str | None = None) -> str:
    """The shell command Claude Code runs for ``event`` (see the module docstring). With
    ``python``, another interpreter than this one: the command then lets it find Phoenix as its
    own start-up does (without ``-S``)."""
    interpreter = python or sys.executable
    if not interpreter:
        raise UsageError("cannot tell which Python runs Phoenix (sys.executable is empty).")
    code = f"from {MARKER} import main; main()"
    flags = ["-P"]
    if python is None or python == sys.executable:
        where = install_dir()
        literal = f'"{where}"' if where.isprintable() and not {'"', "\\"} & set(where) else repr(where)
        code = f"import sys; sys.path.append({literal}); {code}"
        flags = ["-S", "-P"]
    parts = [shlex.quote(interpreter), *flags, "-c", shlex.quote(code), event]
    if agent is not None:
        parts += ["--agent", shlex.quote(validate_id(agent, "agent id"))]
    return " ".join(parts)


def install_dir() -> str:
    """The directory this Phoenix is imported from (the one holding ``phoenix_protocol/``): the
    site packages of its environment, or the source tree of an editable install."""
    import phoenix_protocol

    return os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))


def settings_path(scope: str, *, project_dir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The settings file for ``scope``."""
    if scope not in SCOPES:
        raise UsageError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}.")
    environ = os.environ if env is None else env
    if scope == "user":
        home = environ.get("HOME") or os.path.expanduser("~")
        return os.path.join(home, ".claude", "settings.json")
    base = os.path.abspath(project_dir or os.getcwd())
    root = find_work_tree_root(base) if project_dir is None else base
    name = "settings.json" if scope == "project" else "settings.local.json"
    return os.path.join(root or base, ".claude", name)


class InstallResult:
    """What an install or uninstall did (or would do, with ``dry_run``)."""

    def __init__(
        self, path: str, changed: bool, settings: dict[str, Any], actions: list[str], backup: str | None, dry_run: bool
    ) -> None:
        self.path = path
        self.changed = changed
        self.settings = settings
        self.actions = actions
        self.backup = backup
        self.dry_run = dry_run

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "backup": self.backup,
            "actions": self.actions,
            "settings": self.settings,
        }


def _load(path: str) -> dict[str, Any]:
    data = read_bytes(path)
    if data is None or not data.strip():
        return {}
    try:
        settings = loads(data)
    except JSONError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix it first, Phoenix left it untouched.") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{path} does not hold a JSON object; Phoenix left it untouched.")
    hooks = settings.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise UsageError(f'{path}: "hooks" is not an object; Phoenix left the file untouched.')
    return settings


def _is_ours(entry: object) -> bool:
    command = str(entry.get("command", "")) if isinstance(entry, dict) else ""
    return MARKER in command or any(legacy in command for legacy in LEGACY_MARKERS)


def _save(path: str, before: bytes | None, settings: dict[str, Any], clock: Clock) -> str | None:
    import json  # settings files are written rarely: the full codec's indentation is welcome

    ensure_dir(os.path.dirname(path))
    backup = None
    mode = 0o644
    if before is not None:
        stamp = clock.now_iso().replace(":", "").replace("-", "")
        backup = f"{path}.bak-{stamp}"
        mode = stat.S_IMODE(os.stat(path).st_mode)
        atomic_write(backup, before)
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, text.encode("utf-8"))
    os.chmod(path, mode)
    return backup


def install_claude_code(
    scope: str = "project",
    *,
    project_dir: str | None = None,
    agent: str | None = None,
    python: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    clock: Clock = system_clock,
) -> InstallResult:
    """Merge Phoenix's hooks into the settings file of ``scope``."""
    path = settings_path(scope, project_dir=project_dir, env=env)
    before = read_bytes(path)
    settings = _load(path)
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    actions: list[str] = []
    for claude_event, event, timeout, matcher in HOOK_SPECS:
        wanted: dict[str, Any] = {
            "type": "command",
            "command": hook_command(event, python=python, agent=agent),
            "timeout": timeout,
        }
        groups = hooks.get(claude_event)
        if groups is None:
            groups = hooks[claude_event] = []
        if not isinstance(groups, list):
            raise UsageError(f"{path}: hooks.{claude_event} is not a list; Phoenix left the file untouched.")
        found = False
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            for i, entry in enumerate(group["hooks"]):
                if _is_ours(entry):
                    if found:
                        continue
                    found = True
                    if entry != wanted:
                        group["hooks"][i] = wanted
                        actions.append(f"updated {claude_event}")
        if not found:
            group_new: dict[str, Any] = {"hooks": [wanted]}
            if matcher is not None:
                group_new = {"matcher": matcher, "hooks": [wanted]}
            groups.append(group_new)
            actions.append(f"added {claude_event}")
    changed = bool(actions)
    backup = None
    if changed and not dry_run:
        backup = _save(path, before, settings, clock)
    return InstallResult(path, changed, settings, actions, backup, dry_run)


def check_installed(
    *, project_dir: str | None = None, env: Mapping[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """Phoenix's hook entries that will not run as written, or that differ from what ``phx
    install`` writes now from this interpreter, in the settings of every scope (the project's
    two when ``project_dir`` is given, the user's): ``(scope, settings path, problem)`` each.
    An entry whose interpreter is another one than this is only checked for being there (it
    may be another environment's on purpose). A settings file that does not read is named."""
    problems: list[tuple[str, str, str]] = []
    events = {event for _, event, _, _ in HOOK_SPECS}
    for scope in SCOPES:
        if scope != "user" and project_dir is None:
            continue
        path = settings_path(scope, project_dir=project_dir, env=env)
        try:
            settings = _load(path)  # a missing file: no hooks
        except UsageError as exc:
            problems.append((scope, path, str(exc)))
            continue
        seen: set[str] = set()
        hooks = settings.get("hooks")
        for groups in hooks.values() if isinstance(hooks, dict) else []:
            for group in groups if isinstance(groups, list) else []:
                entries = group.get("hooks") if isinstance(group, dict) else None
                for entry in entries if isinstance(entries, list) else []:
                    if not _is_ours(entry):
                        continue
                    command = str(entry.get("command", ""))
                    problem = _command_problem(command, events)
                    if problem is not None and problem not in seen:
                        seen.add(problem)
                        problems.append((scope, path, problem))
    return problems


def _command_problem(command: str, events: set[str]) -> str | None:
    """What is wrong with a Phoenix hook command, if anything (see ``check_installed``)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return f"a Phoenix hook command does not parse as a shell command: {command[:200]}"
    if not argv:
        return "a Phoenix hook command is empty"
    interpreter = argv[0]
    if not (os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)):
        return f"the hooks run {interpreter}, which is not there any more (the environment moved?)"
    where = _imported_from(argv)
    if where is not None and not os.path.isfile(os.path.join(where, "phoenix_protocol", "__init__.py")):
        return f"the hooks import Phoenix from {where}, which does not hold it any more (Phoenix moved?)"
    if interpreter != sys.executable:
        return None
    event = next((arg for arg in argv[1:] if arg in events), None)
    agent = argv[argv.index("--agent") + 1] if "--agent" in argv[:-1] else None
    try:
        wanted = hook_command(event, agent=agent) if event is not None else None
    except UsageError:
        wanted = None
    if command != wanted:
        return "the hook commands are not the ones this Phoenix writes (an earlier Phoenix's, or edited)"
    return None


def _imported_from(argv: list[str]) -> str | None:
    """The directory a ``-S`` hook command appends to ``sys.path`` to import Phoenix from (see
    ``hook_command``), or None for a command without one."""
    import ast

    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else None
    try:
        tree = ast.parse(code) if code is not None else None
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree) if tree is not None else []:
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "sys.path.append"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
    return None


def uninstall_claude_code(
    scope: str = "project",
    *,
    project_dir: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    clock: Clock = system_clock,
) -> InstallResult:
    """Remove exactly the hook entries ``install_claude_code`` adds."""
    path = settings_path(scope, project_dir=project_dir, env=env)
    before = read_bytes(path)
    if before is None:
        return InstallResult(path, False, {}, [], None, dry_run)
    settings = _load(path)
    hooks = settings.get("hooks")
    actions: list[str] = []
    if isinstance(hooks, dict):
        for claude_event in list(hooks):
            groups = hooks[claude_event]
            if not isinstance(groups, list):
                continue
            kept_groups = []
            for group in groups:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    remaining = [e for e in group["hooks"] if not _is_ours(e)]
                    if len(remaining) != len(group["hooks"]):
                        actions.append(f"removed {claude_event}")
                        if not remaining:
                            continue
                        kept_groups.append({**group, "hooks": remaining})
                        continue
                kept_groups.append(group)
            if kept_groups:
                hooks[claude_event] = kept_groups
            else:
                del hooks[claude_event]
        if not hooks:
            del settings["hooks"]
    changed = bool(actions)
    backup = None
    if changed and not dry_run:
        backup = _save(path, before, settings, clock)
    return InstallResult(path, changed, settings, actions, backup, dry_run)
