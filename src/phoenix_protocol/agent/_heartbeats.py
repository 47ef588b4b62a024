"""Teammate heartbeats on a fast path, and the liveness classes read from them (seed 004).

A heartbeat is one small JSON file per teammate in a runtime directory (``$XDG_RUNTIME_DIR``, else
the system temp dir), replaced atomically without fsync on every beat: it is the hottest write
in a team, its loss in a crash costs nothing (the next beat replaces it), and its last values are
copied into every team checkpoint. It carries UTC milliseconds *and* a sequence number::

    {"schema_version": 1, "name": "engineer-a", "seq": 87, "ms": 1740069825000, "host": "...", "session_id": "..."}

Liveness classes, by the time since the last beat: ``online`` (< 10 min), ``idle`` (< 30 min),
``suspended`` (< 60 min), ``stale`` (>= 60 min), thresholds configurable. Wall clocks disagree
across machines: a beat from the *future* by more than 30 s is reported as clock skew, and then
ordering falls back to the sequence number: the observer remembers when (by its own clock) it
last saw the sequence advance, and classifies by that.

Hot path (the PostToolUse hook beats for a teammate): ``os``, ``time`` and Phoenix primitives only.
"""

from __future__ import annotations

import os

from phoenix_protocol.core._durable import atomic_write, confine, ensure_dir, read_bytes, read_range
from phoenix_protocol.core._ids import short_digest, validate_id
from phoenix_protocol.core._jsonio import dumps_line, loads_object

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["CLASSES", "SKEW_MS", "beat", "classify", "note_files", "read_beat", "runtime_dir", "take_files"]

CLASSES = ("online", "idle", "suspended", "stale")
SKEW_MS = 30_000
"""A beat this far in the future is clock skew, not life."""


MAX_BEAT_BYTES = 64 * 1024
"""The largest heartbeat file read (a beat is a hundred bytes)."""


def runtime_root() -> str:
    """This user's directory for runtime files (heartbeats, which hook notices were shown):
    ``phoenix-<uid>`` in ``$XDG_RUNTIME_DIR``, else ``$TMPDIR``, else /tmp. Registered with
    ``_durable.confine`` without following it: in a shared /tmp, another user may have put a
    symbolic link or a directory of theirs at that name, which is then refused."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"  # noqa: S108 - per-user subdir, 0700
    root = os.path.join(os.path.abspath(base), f"phoenix-{os.getuid()}")
    confine(root, follow=False)
    return root


def runtime_dir(home_root: str, team_id: str) -> str:
    """Where a team's heartbeats live: per user, per home, per team."""
    digest = short_digest(home_root.encode("utf-8", "surrogatepass"))
    return os.path.join(runtime_root(), digest, validate_id(team_id, "team id"))


def read_beat(directory: str, name: str) -> dict[str, Any] | None:
    """The last heartbeat of ``name``, or ``None`` (none yet, or unreadable)."""
    path = os.path.join(directory, validate_id(name, "teammate name") + ".json")
    beat_ = loads_object(read_bytes(path, limit=MAX_BEAT_BYTES))
    if beat_ is None or not isinstance(beat_.get("seq"), int) or not isinstance(beat_.get("ms"), int):
        return None
    return beat_


def beat(
    directory: str, name: str, *, now_ms: int, host: str | None = None, session_id: str | None = None
) -> dict[str, Any]:
    """Record a heartbeat of ``name`` (sequence number one above the last); returns it."""
    validate_id(name, "teammate name")
    if not os.path.isdir(directory):
        ensure_dir(directory)
    previous = read_beat(directory, name)
    record = {
        "schema_version": 1,
        "name": name,
        "seq": (previous["seq"] if previous else 0) + 1,
        "ms": now_ms,
        "host": host or os.uname().nodename,
        "session_id": session_id,
    }
    atomic_write(os.path.join(directory, name + ".json"), (dumps_line(record) + "\n").encode("ascii"), durable=False)
    return record


def classify(
    elapsed_ms: int,
    *,
    online_minutes: float = 10.0,
    idle_minutes: float = 30.0,
    suspended_minutes: float = 60.0,
) -> str:
    """The liveness class for a time since the last beat (see the module docstring)."""
    minutes = elapsed_ms / 60_000
    if minutes < online_minutes:
        return "online"
    if minutes < idle_minutes:
        return "idle"
    if minutes < suspended_minutes:
        return "suspended"
    return "stale"


MAX_FILES_BYTES = 256 * 1024
"""The most of a teammate's noted files read at once (the hook appends one path a line): a
longer file is read in pieces of this size."""


def _noted_paths(path: str) -> list[str]:
    """The distinct paths of a noted-files file, in the order first noted, read a piece at a time
    (a teammate that edited thousands of times between two takes has a file of any size)."""
    seen: dict[str, None] = {}
    offset = 0
    rest = b""
    while True:
        piece = read_range(path, offset, MAX_FILES_BYTES) or b""
        if not piece:
            break
        offset += len(piece)
        lines = (rest + piece).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line:
                seen[line.decode("utf-8", "surrogateescape")] = None
    if rest:
        seen[rest.decode("utf-8", "surrogateescape")] = None
    return list(seen)


def note_files(directory: str, name: str, paths: list[str]) -> None:
    """Note files a teammate's Write/Edit tool calls changed (the PostToolUse hook, on the hot
    path): one append to ``<name>.files`` in the team's runtime directory, taken into the task's
    checkpoint by ``take_files`` (``Team.absorb_files``)."""
    validate_id(name, "teammate name")
    lines = "".join(p.replace("\n", " ") + "\n" for p in paths if p)
    if not lines:
        return
    if not os.path.isdir(directory):
        ensure_dir(directory)
    fd = os.open(os.path.join(directory, name + ".files"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, lines.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)


def take_files(directory: str, name: str, keep: Callable[[list[str]], None]) -> list[str]:
    """The files noted for ``name`` since the last take, handed to ``keep`` (which stores them)
    and only then forgotten; a ``keep`` that fails leaves them noted for the next take."""
    path = os.path.join(directory, validate_id(name, "teammate name") + ".files")
    taking = f"{path}.taking-{os.getpid()}"
    try:
        os.rename(path, taking)  # appends from now on start a new file
    except FileNotFoundError:
        return []
    paths = _noted_paths(taking)
    try:
        keep(paths)
    except BaseException:
        note_files(directory, name, paths)  # back where they were, for the next take
        os.unlink(taking)
        raise
    os.unlink(taking)
    return paths
