"""Lanes: the folders where sessions of one agent that run side by side keep their state.

An agent's *primary lane* is its directory's ``state.json``, ``ops.jsonl`` and ``brief.md``:
seed 000's files, which people and scripts read. A session that starts while the primary lane is
held by another live session gets a lane of its own, the same three files in
``<agent>/lanes/<lane-id>/`` (the lane id: ``core._ids.lane_id_of`` of its session id), and every
later hook event of that session goes there (``Agent.lane_of_session``: one ``stat``).

A lane leaves ``lanes/`` once, by a rename to ``lanes/.retired/<lane-id>.<ms>/`` (its files kept as
history): when its session ended cleanly, or when a new session recovers it after its session
died. The rename is the claim: of the sessions that start together and find the same dead lane,
exactly one renames it, and only that one is handed its recovery (``retire_lane`` returns
``None`` to the others). Which session does what is in ``services._lanes``; this module only moves
folders. See docs/lanes.md.
"""

from __future__ import annotations

import os

from phoenix_protocol.core._durable import ensure_dir, fsync_dir
from phoenix_protocol.core._errors import StorageError
from phoenix_protocol.core._ids import is_valid_id, validate_id

__all__ = [
    "LANES_DIR",
    "PRIMARY",
    "RETIRED_DIR",
    "lane_dir",
    "lane_ids",
    "open_lane",
    "retire_lane",
    "retired_lanes",
]

LANES_DIR = "lanes"
RETIRED_DIR = ".retired"
PRIMARY = "primary"
"""The name reports give the primary lane (``state.json`` in the agent's directory); never a lane id
(ids of lanes are session ids: UUIDs, or ``sid-`` and hex digits)."""
_LOCK_FILES = ("state.json.lock", "ops.jsonl.lock")


def lane_dir(agent_dir: str, lane: str) -> str:
    """``<agent_dir>/lanes/<lane>`` (the id is validated)."""
    return os.path.join(agent_dir, LANES_DIR, validate_id(lane, "lane id"))


def lane_ids(agent_dir: str) -> list[str]:
    """The lanes of the agent in ``agent_dir`` (not the primary, not the retired), sorted."""
    root = os.path.join(agent_dir, LANES_DIR)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if is_valid_id(n) and os.path.isdir(os.path.join(root, n)))


def open_lane(agent_dir: str, lane: str) -> str:
    """Create the folder of lane ``lane`` (0700; nothing when it exists); returns its path."""
    path = lane_dir(agent_dir, lane)
    ensure_dir(path)
    return path


def retire_lane(agent_dir: str, lane: str, now_ms: int) -> str | None:
    """Move lane ``lane`` to ``lanes/.retired/<lane>.<now_ms>`` (durably: both folders fsynced);
    returns where it went, or ``None`` when it was not there (another process retired it first:
    the rename is atomic, so of processes racing for one lane exactly one gets it).

    The lane's lock files are removed from the retired folder afterwards, so that a process that
    kept one open (``FileLock`` keeps its descriptors) opens the lane's new lock file should a
    lane of the same id be opened again, instead of locking the retired one."""
    source = lane_dir(agent_dir, lane)
    retired_root = os.path.join(agent_dir, LANES_DIR, RETIRED_DIR)
    ensure_dir(retired_root)
    for attempt in range(100):
        target = os.path.join(retired_root, f"{lane}.{now_ms}" + (f".{attempt}" if attempt else ""))
        if os.path.lexists(target):
            continue
        try:
            os.rename(source, target)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if os.path.lexists(target):
                continue  # taken between the look and the rename
            raise StorageError(f"could not retire lane {lane} of {agent_dir}: {exc.strerror}.", path=source) from exc
        break
    else:  # pragma: no cover - a hundred lanes of one id retired in one millisecond
        raise StorageError(f"could not retire lane {lane} of {agent_dir}: no free name.", path=source)
    try:
        fsync_dir(os.path.join(agent_dir, LANES_DIR))
        fsync_dir(retired_root)
    except OSError as exc:
        raise StorageError(
            f"lane {lane} of {agent_dir} was retired to {target}, but the move could not be made durable "
            f"({exc.strerror}).",
            path=target,
        ) from exc
    for name in _LOCK_FILES:
        try:
            os.unlink(os.path.join(target, name))
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - left behind: harmless in a retired folder
            pass
    return target


def retired_lanes(agent_dir: str) -> list[str]:
    """The folders of the agent's retired lanes, oldest first (by the time in their name)."""
    root = os.path.join(agent_dir, LANES_DIR, RETIRED_DIR)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []

    def when(name: str) -> tuple[int, str]:
        parts = name.split(".")
        stamp = parts[1] if len(parts) > 1 else ""
        return (int(stamp) if stamp.isdigit() else 0, name)

    return [os.path.join(root, n) for n in sorted(names, key=when) if os.path.isdir(os.path.join(root, n))]
