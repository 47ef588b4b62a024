"""Phoenix's Claude Code plugin: what ``plugins/phoenix`` in this repository holds, and where a
settings file enables it.

The repository is a plugin marketplace (``.claude-plugin/marketplace.json`` at its root, named
``phoenix-protocol``) listing one plugin, ``phoenix`` (``plugins/phoenix/``)::

    /plugin marketplace add <this repository: owner/repo, a git URL or a local path>
    /plugin install phoenix@phoenix-protocol

The plugin ships no Python: its ``hooks/hooks.json`` registers, for the events ``phx install
claude-code`` registers (``HOOK_SPECS``), the very command the shared settings get
(``portable_command``: ``phx`` from ``PATH``, exit 0 and silence where Phoenix is not installed).
It names no path at all, so nothing needs ``${CLAUDE_PLUGIN_ROOT}``: a script in the plugin
would cost the heartbeat one more ``/bin/sh`` (docs/benchmarks.md). Claude Code sets
``CLAUDE_PLUGIN_ROOT`` in a plugin hook's environment, and that is how the hook knows it is the
plugin's: it stands aside for Phoenix's command in any settings file (``_portable``), so that an
event never runs twice.

``plugin_hooks()`` is what ``hooks/hooks.json`` must hold and ``PLUGIN_VERSION`` what the
manifests must say (the tests compare the committed files with them).
"""

from __future__ import annotations

from phoenix_protocol._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["MARKETPLACE_NAME", "PLUGIN_DIR", "PLUGIN_NAME", "PLUGIN_VERSION", "enabled_plugin", "plugin_hooks"]

PLUGIN_NAME = "phoenix"
"""The plugin's name (``plugin.json``, the marketplace's entry): its id is ``phoenix@<marketplace>``."""
MARKETPLACE_NAME = "phoenix-protocol"
"""The name of the marketplace this repository is (``.claude-plugin/marketplace.json``)."""
PLUGIN_DIR = "plugins/phoenix"
"""The plugin's folder, from the repository's root (the marketplace entry's ``source``)."""
PLUGIN_VERSION = __version__
"""The plugin's version: the package's, in ``plugin.json`` and the marketplace entry."""
_DESCRIPTION = "Phoenix Protocol's Claude Code hooks: phx from PATH, nothing at all where Phoenix is not installed"


def plugin_hooks() -> dict[str, Any]:
    """The document ``plugins/phoenix/hooks/hooks.json`` holds: one group per event of
    ``HOOK_SPECS``, each with the shared command, its timeout and (tool events) its matcher."""
    from phoenix_protocol.integrations._install import HOOK_SPECS, portable_command

    hooks: dict[str, Any] = {}
    for claude_event, event, timeout, matcher in HOOK_SPECS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": portable_command(event), "timeout": timeout}]}
        hooks[claude_event] = [{"matcher": matcher, **group} if matcher is not None else group]
    return {"description": _DESCRIPTION, "hooks": hooks}


def enabled_plugin(settings_by_scope: Mapping[str, Mapping[str, Any]]) -> tuple[str, str] | None:
    """Which settings file enables Phoenix's plugin, as ``(scope, plugin id)``, from each scope's
    settings (``user``, ``project``, ``local``; a scope left out counts as empty): the
    ``enabledPlugins`` entry ``phoenix@<marketplace>`` of the most specific scope that names one
    (local over project over user, as Claude Code reads them; ``true`` or a list enables it);
    ``None`` when none does, or that one says ``false``. Plugins loaded otherwise (``--plugin-dir``, managed settings) are not seen."""
    for scope in ("local", "project", "user"):
        enabled = settings_by_scope.get(scope, {}).get("enabledPlugins")
        if not isinstance(enabled, dict):
            continue
        for plugin_id, value in enabled.items():
            if isinstance(plugin_id, str) and plugin_id.partition("@")[0] == PLUGIN_NAME:
                on = value is True or (isinstance(value, list) and bool(value))
                return (scope, plugin_id) if on else None
    return None
