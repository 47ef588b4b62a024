"""This user's Phoenix homes on this machine: the list ``phx status --all`` reads.

``$XDG_STATE_HOME/phoenix/homes.json`` (``~/.local/state/phoenix/homes.json`` without it)::

    {"schema_version": 1,
     "homes": [{"path": "/src/app/.phoenix", "first_used": "2026-11-27T10:00:00.000Z",
                "last_used": "2026-11-27T12:30:00.000Z"}]}

A home is recorded when a session starts in it (the SessionStart hook) and when ``phx status``
looks at it. The list is a convenience, not state: written atomically but not fsynced, at most
``MAX_HOMES`` entries (the least recently used go first); a damaged file is kept aside
(``homes.json.corrupt-<time>``) and started again; one written by a newer Phoenix is read as far
as it can be and never rewritten.
"""

from __future__ import annotations

import os

from phoenix_protocol.core._durable import FileLock, atomic_write, ensure_dir, keep_damaged, read_bytes
from phoenix_protocol.core._errors import SchemaVersionError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["MAX_HOMES", "SCHEMA_VERSION", "known_homes", "register_home", "registry_path"]

SCHEMA_VERSION = 1
MAX_HOMES = 500


def registry_path(env: Mapping[str, str] | None = None) -> str:
    """Where the list lives: ``$XDG_STATE_HOME/phoenix/homes.json`` (an absolute
    ``$XDG_STATE_HOME`` only, as the XDG specification says), else
    ``~/.local/state/phoenix/homes.json``."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "phoenix", "homes.json")


def _read(path: str, now_ms: int | None) -> tuple[list[dict[str, Any]], int]:
    """The entries, and the file's schema version (newer than ``SCHEMA_VERSION``: never rewritten).
    With ``now_ms``, a damaged file is kept aside (``keep_damaged``) before it is started again."""
    from phoenix_protocol.core._jsonio import JSONError, loads

    data = read_bytes(path)
    if data is None:
        return [], SCHEMA_VERSION
    try:
        document = loads(data)
        if not isinstance(document, dict) or not isinstance(document.get("homes"), list):
            raise JSONError("not a list of homes")
    except JSONError:
        if now_ms is not None:
            keep_damaged(path, data, now_ms)
        return [], SCHEMA_VERSION
    version = document.get("schema_version")
    entries = [e for e in document["homes"] if isinstance(e, dict) and isinstance(e.get("path"), str)]
    return entries, version if isinstance(version, int) and not isinstance(version, bool) else SCHEMA_VERSION


def known_homes(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The recorded homes, most recently used first: ``path``, ``first_used``, ``last_used``,
    and ``exists`` (whether the folder is still there)."""
    entries, _version = _read(registry_path(env), None)
    out = []
    for entry in sorted(entries, key=lambda e: str(e.get("last_used") or ""), reverse=True):
        path = entry["path"]
        out.append(
            {
                "path": path,
                "first_used": entry.get("first_used"),
                "last_used": entry.get("last_used"),
                "exists": os.path.isdir(path),
            }
        )
    return out


def register_home(root: str, *, now_ms: int, env: Mapping[str, str] | None = None) -> bool:
    """Record that home ``root`` (an absolute path) was used at ``now_ms``; returns whether the
    list changed. Raises ``SchemaVersionError`` for a list written by a newer Phoenix (left as it
    is), ``StorageError`` when it cannot be written."""
    from phoenix_protocol.core._clock import iso_from_ms
    from phoenix_protocol.core._jsonio import dumps_output

    root = os.path.abspath(root)
    path = registry_path(env)
    ensure_dir(os.path.dirname(path))
    now = iso_from_ms(now_ms)
    with FileLock(path, 5.0):
        entries, version = _read(path, now_ms)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{path} was written by a newer Phoenix; it was left as it is.",
                path=path,
                found=version,
                supported=SCHEMA_VERSION,
            )
        found = next((e for e in entries if e["path"] == root), None)
        if found is not None and found.get("last_used") == now:
            return False
        if found is None:
            found = {"path": root, "first_used": now}
            entries.append(found)
        found["last_used"] = now
        entries.sort(key=lambda e: str(e.get("last_used") or ""), reverse=True)
        document = {"schema_version": SCHEMA_VERSION, "homes": entries[:MAX_HOMES]}
        atomic_write(path, (dumps_output(document) + "\n").encode("utf-8"), durable=False)
    return True
