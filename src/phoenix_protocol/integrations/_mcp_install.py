"""``phx install <cli> --mcp`` / ``phx uninstall <cli> --mcp``: ``phx mcp`` registered as the MCP
server ``phoenix`` of each agent CLI.

=============  =======  =========================================================  ==================
CLI            scope    file (key)                                                 command
=============  =======  =========================================================  ==================
Claude Code    project  ``<project>/.mcp.json`` (``mcpServers``)                   ``phx`` from PATH
               local    ``~/.claude.json`` (``projects["<project>"].mcpServers``)  this interpreter
               user     ``~/.claude.json`` (``mcpServers``)                        this interpreter
Gemini CLI     project  ``<project>/.gemini/settings.json`` (``mcpServers``)       ``phx`` from PATH
               user     ``~/.gemini/settings.json`` (``mcpServers``)               this interpreter
Codex          project  ``<project>/.codex/config.toml`` (``[mcp_servers]``)       ``phx`` from PATH
               user     ``~/.codex/config.toml`` (``[mcp_servers]``)               this interpreter
=============  =======  =========================================================  ==================

(``~/.claude.json`` is ``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set; ``~/.codex`` is
``$CODEX_HOME``.) A shared (project) file gets ``phx mcp`` from ``PATH``, which names nothing of
this machine; the others this installation's interpreter by absolute path (``python -m
phoenix_protocol mcp``). The server is started in the project, where ``phx mcp`` finds the home
(``.phoenix/`` at the git root) as every ``phx`` command does.

As with the hooks (``_install``): idempotent, an older entry of Phoenix's replaced in place, every
other key kept, the JSON file's layout kept (``_install._Format``) and the TOML file's (tomlkit), a
file left holding nothing removed, so that an install then an uninstall gives back the user's
settings. An entry named ``phoenix`` that is not Phoenix's is refused, untouched.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._durable import read_bytes
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.integrations._clients import CLAUDE_CODE, CODEX, Client
from phoenix_protocol.integrations._install import _as_client, _load, _remove, _save, project_root, settings_path

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "SERVER",
    "McpInstallResult",
    "install_mcp",
    "is_phoenix_server",
    "mcp_path",
    "server_entry",
    "uninstall_mcp",
]

SERVER = "phoenix"
"""The name Phoenix's MCP server is registered under (tools reach the model as
``mcp__phoenix__<tool>`` in Claude Code and Codex, ``mcp_phoenix_<tool>`` in Gemini CLI)."""
_MODULE_ARGS = ["-m", "phoenix_protocol", "mcp"]
_DESCRIPTIONS = {
    "project": "project scope: shared with the team through git; commit it",
    "local": "local scope: this machine and this project only",
    "user": "user scope: every project of this user on this machine",
}


class McpInstallResult:
    """What an MCP install or uninstall did (or would do, with ``dry_run``)."""

    def __init__(
        self,
        client: Client,
        path: str,
        scope: str,
        *,
        kind: str,
        changed: bool,
        dry_run: bool,
        action: str | None,
        servers: dict[str, Any],
        entry: dict[str, Any] | None,
        created: bool = False,
        removed: bool = False,
        notes: list[str] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.scope = scope
        self.kind = kind
        self.changed = changed
        self.dry_run = dry_run
        self.action = action
        self.servers = servers
        self.entry = entry
        self.created = created
        self.removed = removed
        self.notes = notes or []

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self.scope]

    def as_dict(self) -> dict[str, Any]:
        return {
            "client": self.client.name,
            "mcp": True,
            "server": SERVER,
            "path": self.path,
            "scope": self.scope,
            "kind": self.kind,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "created": self.created,
            "removed": self.removed,
            "action": self.action,
            "entry": self.entry,
            "notes": self.notes,
            "servers": self.servers,
        }


def _claude_json(env: Mapping[str, str] | None) -> str:
    """Claude Code's own state file, which holds the user's and each project's MCP servers."""
    environ = os.environ if env is None else env
    configured = environ.get("CLAUDE_CONFIG_DIR")
    if configured:
        return os.path.join(os.path.expanduser(configured), ".claude.json")
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".claude.json")


def mcp_path(
    client: Client | str, scope: str, *, project_dir: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The file ``client`` reads its MCP servers of ``scope`` from (see the module docstring)."""
    client = _as_client(client)
    if scope not in client.scopes:
        raise UsageError(f"{client.label}: scope must be one of {', '.join(client.scopes)}, not {scope!r}.")
    if client is CLAUDE_CODE:
        return os.path.join(project_root(project_dir), ".mcp.json") if scope == "project" else _claude_json(env)
    if client is CODEX:
        if scope == "user":
            from phoenix_protocol.integrations._codex_trust import config_path

            return config_path(env)
        return os.path.join(project_root(project_dir), ".codex", "config.toml")
    return settings_path(scope, project_dir=project_dir, env=env, client=client)


def server_entry(
    client: Client | str, scope: str, *, agent: str | None = None, python: str | None = None
) -> dict[str, Any]:
    """The server's entry as ``client`` reads it: ``phx mcp`` from PATH in a shared file, this
    interpreter's ``-m phoenix_protocol mcp`` (or ``python``'s) in the others."""
    client = _as_client(client)
    extra = ["--agent", validate_id(agent, "agent id")] if agent is not None else []
    if scope in client.shared_scopes:
        if python is not None:
            raise UsageError("the shared file runs `phx` from PATH: it names no interpreter (drop python=).")
        entry: dict[str, Any] = {"command": "phx", "args": ["mcp", *extra]}
    else:
        interpreter = python or sys.executable
        if not interpreter:
            raise UsageError("cannot tell which Python runs Phoenix (sys.executable is empty).")
        entry = {"command": interpreter, "args": [*_MODULE_ARGS, *extra]}
    if client is CLAUDE_CODE:
        entry = {"type": "stdio", **entry}
    elif client is CODEX:
        entry["startup_timeout_sec"] = 20
    return entry


def is_phoenix_server(entry: object) -> bool:
    """Whether an MCP server entry runs ``phx mcp`` (either command this module writes)."""
    if not isinstance(entry, dict):
        return False
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    argv = [str(a) for a in args]
    return (os.path.basename(command) == "phx" and argv[:1] == ["mcp"]) or argv[:3] == _MODULE_ARGS


def _remove_file(path: str) -> None:
    """Remove a file left holding nothing, and the CLI's dot-folder (``.gemini``, ``.codex``) if
    that is left empty (never a project's root or a home: ``.mcp.json``, ``~/.claude.json``)."""
    _remove(path, folder=os.path.basename(os.path.dirname(path)) in (".gemini", ".codex"))


# -- JSON files (Claude Code, Gemini CLI) --------------------------------------------------------


def _servers_of(settings: dict[str, Any], path: str, container: list[str], *, create: bool) -> dict[str, Any] | None:
    """The ``mcpServers`` object at ``container`` (keys from the top) in ``settings``."""
    node: Any = settings
    for key in [*container, "mcpServers"]:
        child = node.get(key)
        if child is None:
            if not create:
                return None
            child = node[key] = {}
        if not isinstance(child, dict):
            raise UsageError(
                f"{path}: {'.'.join([*container, key])} is not an object; Phoenix left the file untouched."
            )
        node = child
    found: dict[str, Any] = node
    return found


def _prune(settings: dict[str, Any], container: list[str]) -> None:
    """Drop ``mcpServers`` and the containers above it that were left empty."""
    chain: list[tuple[dict[str, Any], str]] = []
    node: Any = settings
    for key in [*container, "mcpServers"]:
        chain.append((node, key))
        node = node[key]
    for parent, key in reversed(chain):
        if parent[key] == {}:
            del parent[key]
        else:
            break


def _json_change(
    path: str, container: list[str], entry: dict[str, Any] | None, dry_run: bool
) -> tuple[str | None, dict[str, Any], bool, bool]:
    """Set (``entry``) or remove (``None``) ``mcpServers.phoenix`` at ``container`` in the JSON
    file ``path``: ``(action, servers after, created, removed)``; no action: nothing to change."""
    before = read_bytes(path)
    if entry is None and before is None:
        return None, {}, False, False
    settings = _load(path, before)
    servers = _servers_of(settings, path, container, create=entry is not None)
    if servers is None:
        return None, {}, False, False
    current = servers.get(SERVER)
    if current is not None and not is_phoenix_server(current):
        raise UsageError(
            f'{path}: the MCP server "{SERVER}" there is not Phoenix\'s ({current!r:.200}); '
            "Phoenix left the file untouched."
        )
    action = None
    if entry is None:
        if current is not None:
            del servers[SERVER]
            action = "removed"
    elif current != entry:
        action = "updated" if current is not None else "added"
        servers[SERVER] = entry
    shown = dict(servers)
    if entry is None and action is not None:
        _prune(settings, container)
    removed = action == "removed" and not settings
    if action is not None and not dry_run:
        if removed:
            _remove_file(path)
        else:
            _save(path, before, settings)
    return action, shown, action is not None and before is None, removed


# -- TOML (Codex) -------------------------------------------------------------------------------


def _toml_change(
    path: str, entry: dict[str, Any] | None, dry_run: bool
) -> tuple[str | None, dict[str, Any], bool, bool]:
    """``_json_change`` for Codex's ``config.toml`` (``[mcp_servers.phoenix]``), with tomlkit."""
    import tomlkit

    from phoenix_protocol.integrations._codex_trust import _load as load_toml
    from phoenix_protocol.integrations._codex_trust import _save as save_toml

    before = read_bytes(path)
    if entry is None and before is None:
        return None, {}, False, False
    doc = load_toml(path)
    servers = doc.get("mcp_servers")
    if servers is None:
        if entry is None:
            return None, {}, False, False
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    if not isinstance(servers, dict):
        raise UsageError(f"{path}: mcp_servers is not a table; Phoenix left the file untouched.")
    current: Any = servers.get(SERVER)
    plain = current.unwrap() if hasattr(current, "unwrap") else current
    if current is not None and not is_phoenix_server(plain):
        raise UsageError(f'{path}: the MCP server "{SERVER}" there is not Phoenix\'s; Phoenix left the file untouched.')
    action = None
    if entry is None:
        if current is not None:
            del servers[SERVER]
            action = "removed"
            if not servers:
                del doc["mcp_servers"]
    elif plain != entry:
        action = "updated" if current is not None else "added"
        table = tomlkit.table()
        for key, value in entry.items():
            table[key] = value
        servers[SERVER] = table
    shown = {str(k): (v.unwrap() if hasattr(v, "unwrap") else v) for k, v in servers.items()}
    removed = action == "removed" and not tomlkit.dumps(doc).strip()
    if action is not None and not dry_run:
        if removed:
            _remove_file(path)
        else:
            save_toml(path, before, _trimmed(doc) if entry is None else doc)
    return action, shown, action is not None and before is None, removed


def _trimmed(doc: Any) -> Any:
    """``doc`` without the blank lines tomlkit leaves at its end once a last table is removed
    (the blank line it put before the table when it was added)."""
    import tomlkit

    text = tomlkit.dumps(doc)
    return tomlkit.parse(text.rstrip("\n") + "\n") if text.endswith("\n\n") else doc


# -- install / uninstall ------------------------------------------------------------------------


def _change(
    client: Client,
    scope: str,
    entry: dict[str, Any] | None,
    *,
    project_dir: str | None,
    dry_run: bool,
    env: Mapping[str, str] | None,
) -> McpInstallResult:
    path = mcp_path(client, scope, project_dir=project_dir, env=env)
    if client is CODEX:
        action, servers, created, removed = _toml_change(path, entry, dry_run)
    else:
        container = ["projects", project_root(project_dir)] if client is CLAUDE_CODE and scope == "local" else []
        action, servers, created, removed = _json_change(path, container, entry, dry_run)
    return McpInstallResult(
        client,
        path,
        scope,
        kind="portable" if scope in client.shared_scopes else "machine",
        changed=action is not None,
        dry_run=dry_run,
        action=action,
        servers=servers,
        entry=entry,
        created=created,
        removed=removed,
    )


def install_mcp(
    client: Client | str,
    scope: str = "project",
    *,
    project_dir: str | None = None,
    agent: str | None = None,
    python: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> McpInstallResult:
    """Register ``phx mcp`` as ``client``'s MCP server ``phoenix`` in its file of ``scope``."""
    client = _as_client(client)
    entry = server_entry(client, scope, agent=agent, python=python)
    result = _change(client, scope, entry, project_dir=project_dir, dry_run=dry_run, env=env)
    if client is CODEX and scope == "project":
        result.notes.append(
            "Codex reads a project's .codex/config.toml only once it trusts the project "
            '(`codex` asks; `[projects."<path>"] trust_level = "trusted"` in ~/.codex/config.toml)'
        )
    if client is CLAUDE_CODE and scope == "project":
        result.notes.append("Claude Code asks once before it starts a server of a project's .mcp.json")
    return result


def uninstall_mcp(
    client: Client | str,
    scope: str = "project",
    *,
    project_dir: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> McpInstallResult:
    """Remove the MCP server ``phoenix`` that ``install_mcp`` registered (nothing else)."""
    return _change(_as_client(client), scope, None, project_dir=project_dir, dry_run=dry_run, env=env)
