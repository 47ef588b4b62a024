"""``phx doctor --env``: the environment Phoenix runs in, for a bug report or a first check.

What is described (``describe_environment``, a stable document; docs/doctor.md):

- **phoenix**: its version, the commit when it runs from a clone, where it is imported from and
  the interpreter running it;
- **python**, **sqlite** (the library the ``sqlite3`` module is linked with, the one the embedded
  store uses) and **psycopg** (from the installed distribution's metadata, without importing it;
  ``None`` without the ``[postgres]`` extra);
- **clis**: each agent CLI Phoenix serves (Claude Code, Gemini CLI, Codex): its command on
  ``PATH`` and what its ``--version`` answers (all asked at once, within a short deadline: a CLI
  that does not answer is killed and reported so);
- **hooks**: for each CLI and each scope, the settings file ``phx install`` writes, whether it
  holds Phoenix's hooks, which kind (the shared ``portable`` command, this machine's ``machine``
  one) and for which events; and for each CLI when its SessionStart hook last ran in this home
  (the newest ``session_start`` ops event that names the CLI, over the home's agents);
- **store**: the engine and where it is (a path, or ``postgresql://host:port/db``: never a password),
  and the home.

Nothing is written: no database is created or migrated, no settings file touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from phoenix_protocol.core._clis import CLIS
from phoenix_protocol.core._errors import PhoenixError
from phoenix_protocol.integrations._clients import CLIENTS
from phoenix_protocol.integrations._install import (
    hook_entries,
    hook_kind,
    install_dir,
    read_settings,
    settings_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home

__all__ = ["VERSION_TIMEOUT", "cli_versions", "describe_environment", "hook_registrations", "last_hook_runs"]

VERSION_TIMEOUT = 15.0
"""Seconds the agent CLIs have, all together, to answer ``--version``. Gemini CLI 0.61.0 takes
the longest, 4.6 s on an idle two-core machine and 7.7 to 9.8 s while tests ran beside it (it
starts itself a second time); Claude Code and Codex answer in under a second."""
_MAX_VERSION = 200
EXTENSION_NAME = "phoenix-protocol"
"""The Gemini CLI extension's name (``gemini-extension.json``): its folder in ``~/.gemini/extensions/``."""


def describe_environment(
    home: Home,
    *,
    config: Config,
    project_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    events: Callable[[], list[dict[str, Any]]] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """The environment as one JSON-ready document (the module docstring lists its parts).
    ``project_dir``: the project whose settings files are read (else only the user's);
    ``events``: the home's ops events, newest last (for when the hooks last ran)."""
    import platform
    import sqlite3

    from phoenix_protocol import __version__
    from phoenix_protocol.core._git import checkout_revision

    where = install_dir()
    runs = last_hook_runs(events() if events is not None else [])
    hooks = hook_registrations(project_dir, env)
    for entry in hooks:
        entry["last_session_start"] = runs.get(entry["client"])
    return {
        "phoenix": {
            "version": __version__,
            "commit": checkout_revision(where),
            "installed_in": where,
            "executable": sys.executable,
        },
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "sqlite": {"version": sqlite3.sqlite_version},
        "psycopg": {"version": _distribution_version("psycopg"), "pool": _distribution_version("psycopg-pool")},
        "clis": cli_versions(env, timeout=timeout),
        "hooks": hooks,
        "store": _store(home, config),
    }


def _distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _store(home: Home, config: Config) -> dict[str, Any]:
    from phoenix_protocol.store._db import DB_NAME, is_postgres_url

    store = str(config.store or "sqlite")
    if is_postgres_url(store):
        try:
            from phoenix_protocol.store._pg import describe

            where = describe(store)
        except PhoenixError as exc:  # the [postgres] extra missing, or a URL psycopg refuses
            where = f"(not readable: {exc})"
        return {"engine": "postgresql", "where": where, "home": home.root}
    path = os.path.join(home.root, DB_NAME)
    return {"engine": "sqlite", "where": path, "exists": os.path.isfile(path), "home": home.root}


def cli_versions(env: Mapping[str, str] | None = None, *, timeout: float | None = None) -> list[dict[str, Any]]:
    """Each agent CLI: ``{"client", "label", "command", "path", "version", "problem"}``, its
    command looked up on ``PATH`` (``env``'s, else this process's) and asked ``--version``, all
    at once, within ``timeout`` seconds (default ``VERSION_TIMEOUT``); ``path`` ``None`` when it is
    not installed."""
    timeout = VERSION_TIMEOUT if timeout is None else timeout
    environ = dict(os.environ if env is None else env)
    started: list[tuple[dict[str, Any], subprocess.Popen[bytes] | None]] = []
    for name, cli in CLIS.items():
        command = sorted(cli.binaries)[0]
        path = shutil.which(command, path=environ.get("PATH", os.defpath))
        entry: dict[str, Any] = {
            "client": name,
            "label": CLIENTS[name].label if name in CLIENTS else name,
            "command": command,
            "path": path,
            "version": None,
            "problem": None,
        }
        proc = None
        if path is not None:
            try:
                proc = subprocess.Popen(
                    [path, "--version"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=environ,
                    start_new_session=True,
                )
            except OSError as exc:
                entry["problem"] = f"could not run: {exc.strerror or exc}"
        started.append((entry, proc))
    deadline = time.monotonic() + timeout
    for entry, proc in started:
        if proc is None:
            continue
        with proc:
            try:
                out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(proc)
                entry["problem"] = f"no answer to --version within {timeout:g} s"
                continue
        text = out.decode("utf-8", "replace").strip()
        if proc.returncode != 0:
            entry["problem"] = f"--version exited {proc.returncode}"
        elif text:
            entry["version"] = text.splitlines()[0][:_MAX_VERSION]
    return [entry for entry, _ in started]


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import contextlib
    import signal

    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()


def hook_registrations(project_dir: str | None, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each CLI's settings file of each scope (the project's only with ``project_dir``):
    ``{"client", "scope", "path", "installed", "kind", "events", "problem", "plugin"}``; ``kind``
    is ``portable``, ``machine`` or ``mixed`` where Phoenix's hooks are, ``events`` the CLI's
    events they are registered for, ``plugin`` Phoenix's Claude Code plugin where this file
    enables it (its id, ``phoenix@phoenix-protocol``) or, on Gemini CLI's user entry, Phoenix's
    extension when it is installed or linked (``phoenix-protocol``); their hooks run ``phx`` from
    ``PATH``."""
    from phoenix_protocol.integrations._plugin import enabled_plugin

    found: list[dict[str, Any]] = []
    for client in CLIENTS.values():
        by_scope: dict[str, dict[str, Any]] = {}
        entries_of_client: list[dict[str, Any]] = []
        for scope in client.scopes:
            if scope != "user" and project_dir is None:
                continue
            path = settings_path(scope, project_dir=project_dir, env=env, client=client)
            entry: dict[str, Any] = {
                "client": client.name,
                "scope": scope,
                "path": path,
                "installed": False,
                "kind": None,
                "events": [],
                "problem": None,
                "plugin": None,
            }
            found.append(entry)
            entries_of_client.append(entry)
            try:
                settings = read_settings(path)
            except PhoenixError as exc:
                entry["problem"] = str(exc)
                continue
            by_scope[scope] = settings
            kinds: set[str] = set()
            for event, hook in hook_entries(settings):
                kind = hook_kind(hook)
                if kind is not None:
                    kinds.add(kind)
                    if event not in entry["events"]:
                        entry["events"].append(event)
            if kinds:
                entry["installed"] = True
                entry["kind"] = kinds.pop() if len(kinds) == 1 else "mixed"
        plugin = enabled_plugin(by_scope) if client.name == "claude-code" else None
        if client.name == "gemini-cli":  # the extension (gemini extensions install|link): the user's
            folder = os.path.join(client.user_config_dir(env), "extensions", EXTENSION_NAME)
            plugin = ("user", EXTENSION_NAME) if os.path.isdir(folder) else None
        for entry in entries_of_client:
            if plugin is not None and entry["scope"] == plugin[0]:
                entry["plugin"] = plugin[1]
    return found


def last_hook_runs(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest ``session_start`` event of each CLI (its ``client``; events of earlier releases
    that name none count as Claude Code's) among ``events``: ``{"at", "session_id", "agent"}``."""
    runs: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("event") != "session_start" or not isinstance(event.get("ts"), str):
            continue
        found = event.get("meta")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        named = meta.get("client")
        client = named if isinstance(named, str) else "claude-code"
        if client not in runs or event["ts"] >= runs[client]["at"]:
            runs[client] = {"at": event["ts"], "session_id": meta.get("session_id"), "agent": event.get("agent")}
    return runs
