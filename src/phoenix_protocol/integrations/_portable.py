"""The shared (portable) hook command and when it stands aside. Hot path: ``os`` only.

``phx install claude-code`` (project scope) writes into ``.claude/settings.json``, the file a
team commits, a command that names nothing of this machine::

    command -v phx >/dev/null 2>&1 || exit 0; exec phx hook post-tool-use --shared

Claude Code runs it with ``/bin/sh -c``. Where ``phx`` is on ``PATH`` (pipx, ``uv tool``, pip, a
venv whose ``bin/`` is on ``PATH``) it runs the hook; where it is not (a teammate without Phoenix,
CI, a checkout after ``make clean``) it exits 0 and prints nothing: no hook error anywhere.

Claude Code runs the hooks of every settings file (user, project, local), each of them: a hook
registered in two files runs twice. So the shared command stands aside (``--shared``: exit 0, having
read its stdin, before anything is opened) when this machine registers Phoenix's own
machine-specific command (``phx install claude-code --scope local`` or ``--scope user``: an
absolute interpreter, ``-S -P``, faster), which then does the work alone.

Phoenix's Claude Code plugin (``plugins/phoenix``, docs/hooks.md) runs this very command from its
``hooks/hooks.json``: another shared source, which Claude Code runs beside every settings file's
hooks (it merges no identical commands across the two). The plugin is the fallback: its hook
(Claude Code sets ``CLAUDE_PLUGIN_ROOT`` for a plugin's hooks, and only for them) stands aside for
Phoenix's command in any settings file, the project's shared one included, which then runs alone
(with its ``--agent``, if any). The settings' own shared command never stands aside for the plugin.
"""

from __future__ import annotations

import os

from phoenix_protocol.integrations._clients import CLAUDE_CODE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from phoenix_protocol.integrations._clients import Client

__all__ = [
    "LEGACY_MARKERS",
    "MARKER",
    "PORTABLE_GUARD",
    "SHARED_FLAG",
    "machine_registration",
    "plugin_root",
    "user_settings_path",
]

MARKER = "phoenix_protocol.integrations._hooks"
"""What every machine-specific hook command Phoenix writes names (the module it imports)."""
LEGACY_MARKERS = ("phoenix_protocol._hooks ",)
"""What the hook commands of earlier releases name: recognised as ours, so that install replaces them."""
SHARED_FLAG = "--shared"
"""The argument of the shared command: ``phx hook <event> --shared`` stands aside for a
machine-specific registration. An older ``phx`` ignores it (an argument after the event)."""
PORTABLE_GUARD = "command -v phx >/dev/null 2>&1 || exit 0; exec phx hook "
"""How the shared command begins (the event, its options and ``SHARED_FLAG`` follow)."""

_MAX_SETTINGS = 4 * 1024 * 1024
_MAX_PLUGIN_HOOKS = 64 * 1024
"""The most of a plugin's ``hooks/hooks.json`` read (Phoenix's holds about 1.6 KB)."""


def user_settings_path(env: Mapping[str, str] | None = None) -> str:
    """Claude Code's user settings: ``$CLAUDE_CONFIG_DIR/settings.json`` when that is set (Claude
    Code 2.1.330 then reads no ``~/.claude/settings.json``), else ``~/.claude/settings.json``."""
    return CLAUDE_CODE.user_settings(env)


def plugin_root(env: Mapping[str, str] | None = None) -> str | None:
    """The folder of Phoenix's Claude Code plugin when this hook is that plugin's (Claude Code sets
    ``CLAUDE_PLUGIN_ROOT`` for a plugin's hooks), else ``None``. A ``CLAUDE_PLUGIN_ROOT`` that
    names another plugin (inherited from elsewhere) does not count: that plugin's
    ``hooks/hooks.json`` must run the shared command."""
    environ = os.environ if env is None else env
    root = environ.get("CLAUDE_PLUGIN_ROOT")
    if not root:
        return None
    try:
        with open(os.path.join(root, "hooks", "hooks.json"), "rb") as fh:
            data = fh.read(_MAX_PLUGIN_HOOKS)
    except OSError:
        return None
    return root if PORTABLE_GUARD.encode() in data else None


def machine_registration(
    claude_event: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    client: Client | None = None,
) -> str | None:
    """The settings file that registers Phoenix's machine-specific hook command for the event
    ``claude_event`` (the CLI's own name: ``PostToolUse``, ``AfterTool``, ...) of ``client``
    (default Claude Code) on this machine: for Claude Code the local settings of the project it
    runs in, then the user's; for the others the user's; or ``None``. The project is the one the
    CLI names to its hooks (``$CLAUDE_PROJECT_DIR``), else ``cwd``. A file that does not read, or
    is not valid JSON, counts as none: the CLI runs no hook from it either.

    For the Claude Code plugin's hook (``plugin_root``) any Phoenix command counts, the shared one
    too, and the project's shared settings are read first: the file whose command the plugin
    stands aside for."""
    client = CLAUDE_CODE if client is None else client
    environ = os.environ if env is None else env
    project = client.project_dir({"cwd": cwd}, environ) or cwd or os.getcwd()
    markers: tuple[str, ...] = (MARKER, *LEGACY_MARKERS)
    paths = []
    for scope, relative in client.scopes.items():
        if scope in client.shared_scopes:
            continue
        paths.append(client.user_settings(environ) if scope == "user" else os.path.join(project, *relative.split("/")))
    if client is CLAUDE_CODE and plugin_root(environ) is not None:
        markers = (*markers, PORTABLE_GUARD)
        paths.insert(0, os.path.join(project, *client.scopes["project"].split("/")))
    for path in paths:
        try:
            with open(path, "rb") as fh:
                data = fh.read(_MAX_SETTINGS + 1)
        except OSError:
            continue
        if len(data) > _MAX_SETTINGS or not any(m.encode() in data for m in markers):
            continue
        from phoenix_protocol.core._jsonio import JSONError, loads

        try:
            settings = loads(data)
        except (JSONError, UnicodeDecodeError):
            continue
        hooks = settings.get("hooks") if isinstance(settings, dict) else None
        groups = hooks.get(claude_event) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                command = entry.get("command") if isinstance(entry, dict) else None
                if isinstance(command, str) and any(m in command for m in markers):
                    return path
    return None
