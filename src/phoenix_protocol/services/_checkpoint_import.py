"""The import of an agent's checkpoint and session files, written by an earlier release, into the
home's database: once, automatically, on the first use of the agent's checkpoints or sessions.

What is read: every ``agents/<id>/checkpoints/*.checkpoint`` file (its checksum line verified:
one that does not verify is imported as it is and reported on every read, as the file was), the
checkpoints ``index.log`` still holds whose file was never written (a writer killed before its
write-behind: a checkpoint there is taken only when its bytes verify and no record of the log
dropped it), ``operations.jsonl``, ``sessions/current.json`` and ``sessions/sessions.jsonl``.

How: everything is read first, then written in one transaction that also records the import
(``phx_file_imports``: per agent, machine and directory, so that another machine's files of the
same agent on PostgreSQL are imported too); then every checkpoint is read back and compared, and
only then are the directories renamed ``checkpoints.migrated-<time>`` and
``sessions.migrated-<time>``: kept, never deleted. A process killed at any point leaves either
nothing imported (the next use imports again) or the import recorded (the next use verifies and
renames). A checkpoint whose name or number the database already holds for the agent is left out
and named in the ``checkpoints_imported`` ops event (its file stays in the directory kept aside).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, StorageError
from phoenix_protocol.core._jsonio import JSONError, dumps_document, dumps_line, loads, loads_object

if TYPE_CHECKING:
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.store._checkpoints import CheckpointInfo, Stored
    from phoenix_protocol.store._db import Database, Tx

__all__ = ["import_agent_files", "importer"]

_done: set[tuple[int, str, str]] = set()
_lock = threading.Lock()
_META = re.compile(rb'\{"k":"(?:put|drop)"[^\n]*\}\n')


def importer(agent: Agent, db: Database) -> Callable[[], None]:
    """What a store runs before its first use: the agent's files imported, once per process."""

    def run() -> None:
        key = (os.getpid(), db.where, agent.dir)
        if key in _done:
            return
        with _lock:
            if key not in _done:
                import_agent_files(agent, db)
                _done.add(key)

    return run


def import_agent_files(agent: Agent, db: Database) -> dict[str, Any] | None:
    """Import the agent's ``checkpoints/`` and ``sessions/`` (see the module docstring); returns
    what was imported, or ``None`` when there was nothing to import."""
    checkpoints_dir = os.path.join(agent.dir, "checkpoints")
    sessions_dir = os.path.join(agent.dir, "sessions")
    if not os.path.isdir(checkpoints_dir) and not os.path.isdir(sessions_dir):
        return None
    from phoenix_protocol.core._durable import FileLock

    with FileLock(os.path.join(agent.dir, "files-import"), agent.config.lock_timeout):
        if not os.path.isdir(checkpoints_dir) and not os.path.isdir(sessions_dir):
            return None  # another process did it meanwhile
        return _import(agent, db, checkpoints_dir, sessions_dir)


def _source(directory: str) -> str:
    return f"{socket.gethostname()}:{os.path.realpath(directory)}"


def _read(path: str) -> bytes | None:
    from phoenix_protocol.core._durable import read_bytes

    return read_bytes(path)


def _checkpoint_files(agent: Agent, directory: str) -> tuple[dict[str, bytes], list[str]]:
    """The checkpoints of ``directory`` by name (files, then what only ``index.log`` holds), and
    the names of files that are not this agent's checkpoints (left in the directory kept aside)."""
    from phoenix_protocol.services._checkpoints import decode
    from phoenix_protocol.store._checkpoints import SUFFIX, parse_name

    found: dict[str, bytes] = {}
    foreign: list[str] = []
    if not os.path.isdir(directory):
        return found, foreign
    for name in sorted(os.listdir(directory)):
        if not name.endswith(SUFFIX):
            continue
        parsed = parse_name(name)
        data = _read(os.path.join(directory, name))
        if parsed is None or parsed[0] != agent.id or data is None:
            foreign.append(name)
            continue
        found[name] = data
    log = _read(os.path.join(directory, "index.log"))
    if log:
        puts: dict[str, bytes] = {}
        dropped: set[str] = set()
        for match in _META.finditer(log):
            try:
                meta = loads(match.group(0))
            except JSONError:
                continue
            if not isinstance(meta, dict):
                continue
            dropped.update(str(n) for n in meta.get("drop") or ())
            put = meta.get("name")
            if meta.get("k") != "put" or not isinstance(put, str) or put in found:
                continue
            name = put
            start = match.end()
            mark = log.find(b'\n  "checksum": "', start)
            end = log.find(b'"\n}\n', mark + 16) if mark >= 0 else -1
            if end < 0:
                continue
            data = log[start : end + 4]
            parsed = parse_name(name)
            try:
                decode(data, name)
            except (CorruptStateError, SchemaVersionError):  # a torn or overwritten frame: not taken
                parsed = None
            if parsed is not None and parsed[0] == agent.id:
                puts[name] = data
        for name, data in puts.items():
            if name not in dropped:
                found[name] = data
    return found, foreign


def _operations(directory: str) -> list[dict[str, Any]]:
    from phoenix_protocol.core._durable import iter_lines

    out = []
    for _off, line in iter_lines(_read(os.path.join(directory, "operations.jsonl")) or b""):
        try:
            record = loads(line)
        except JSONError:
            continue
        if isinstance(record, dict) and record.get("outcome") in ("succeeded", "failed") and "id" in record:
            out.append({"id": str(record["id"]), "outcome": str(record["outcome"]), "at": str(record.get("at", ""))})
    return out


def _sessions(directory: str) -> tuple[str | None, list[tuple[int, str]], bool]:
    """``current.json`` as a document (rebuilt from its start record if it does not read), the
    log's lines with their seqs, and whether ``current.json`` had to be rebuilt."""
    from phoenix_protocol.core._durable import iter_lines
    from phoenix_protocol.store._sessions import empty_current

    lines: list[tuple[int, str]] = []
    for _off, raw in iter_lines(_read(os.path.join(directory, "sessions.jsonl")) or b""):
        try:
            value = loads(raw)
        except JSONError:
            continue  # a torn last line: never acknowledged
        if isinstance(value, dict) and type(value.get("seq")) is int:
            lines.append((int(value["seq"]), raw.decode("utf-8", "replace")))
    data = _read(os.path.join(directory, "current.json"))
    if data is None:
        return None, lines, False
    record = loads_object(data)
    if record is not None:
        return data.decode("utf-8"), lines, False
    rebuilt = empty_current()
    for _seq, line in reversed(lines):
        start = loads(line)
        if start.get("event") == "start":
            rebuilt.update(
                session_id=start.get("session_id"),
                started_at=start.get("at"),
                source=start.get("source"),
                restored_from=start.get("restored_from"),
                identity_at_start=None,
            )
            break
    return dumps_document(rebuilt), lines, True


def _import(agent: Agent, db: Database, checkpoints_dir: str, sessions_dir: str) -> dict[str, Any]:
    from phoenix_protocol.services._checkpoints import from_file
    from phoenix_protocol.store._checkpoints import CheckpointInfo, CheckpointRows, lock_agent, parse_name
    from phoenix_protocol.store._sessions import SessionRows

    files, foreign = _checkpoint_files(agent, checkpoints_dir)
    prepared: list[tuple[CheckpointInfo, Stored]] = []
    for name, data in files.items():
        stored, envelope = from_file(data, name)
        _aid, seq, ms, ctype = parse_name(name) or ("", 0, 0, "")  # every name was parsed when read
        label = operation_id = None
        if envelope is not None:
            label = envelope.get("summary")
            op = envelope.get("operation")
            operation_id = op.get("id") if isinstance(op, dict) else None
        info = CheckpointInfo(name, seq, ctype, ms, label=label, operation_id=operation_id, size=len(data))
        prepared.append((info, stored))
    prepared.sort(key=lambda item: item[0].seq)
    operations = _operations(checkpoints_dir) if os.path.isdir(checkpoints_dir) else []
    current, lines, rebuilt = _sessions(sessions_dir) if os.path.isdir(sessions_dir) else (None, [], False)
    rows = CheckpointRows(db, agent.id)
    sessions = SessionRows(db, agent.id)
    sources = {
        kind: _source(path)
        for kind, path in (("checkpoints", checkpoints_dir), ("sessions", sessions_dir))
        if os.path.isdir(path)
    }
    now_ms = agent.clock.now_ms()
    from phoenix_protocol.core._clock import iso_from_ms

    def work(tx: Tx) -> dict[str, Any]:
        lock_agent(tx, agent.id)
        report: dict[str, Any] = {"checkpoints": 0, "left_out": [], "operations": 0, "sessions": 0}
        done = {
            kind: tx.scalar("SELECT report FROM phx_file_imports WHERE agent_id = ? AND source = ?", (agent.id, src))
            for kind, src in sources.items()
        }
        if "checkpoints" in sources and done["checkpoints"] is None:
            for info, stored in prepared:
                if rows.put_existing(tx, info, stored.content, stored.checksum, stored.legacy):
                    report["checkpoints"] += 1
                else:
                    report["left_out"].append(info.name)
            for record in operations:
                rows.insert_operation(tx, record)
            report["operations"] = len(operations)
            report["not_this_agents"] = foreign
            _mark(tx, agent.id, sources["checkpoints"], iso_from_ms(now_ms), report)
        if "sessions" in sources and done["sessions"] is None:
            if (
                current is not None
                and tx.scalar("SELECT count(*) FROM phx_session_current WHERE agent_id = ?", (agent.id,)) == 0
            ):
                sessions.put_current(tx, current)
            report["sessions"] = sum(1 for seq, line in lines if sessions.insert_line(tx, seq, line))
            report["current_rebuilt"] = rebuilt
            _mark(tx, agent.id, sources["sessions"], iso_from_ms(now_ms), {"sessions": report["sessions"]})
        report["already"] = sorted(k for k, v in done.items() if v is not None)
        return report

    report: dict[str, Any] = db.transaction(work)
    # Verified before anything is moved: every checkpoint imported reads back as it was read.
    left_out = set(report["left_out"])
    for info, stored in prepared:
        if info.name in left_out:
            continue
        back = rows.read(info.name)
        if back is None or back.checksum != stored.checksum or back.content != stored.content:
            raise StorageError(
                f"{db.where}: checkpoint {info.name} of {agent.id!r} did not read back as imported from "
                f"{checkpoints_dir}; the files are left where they are: run `phx doctor`.",
                path=checkpoints_dir,
            )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms / 1000))
    kept: dict[str, str] = {}
    for directory in (checkpoints_dir, sessions_dir):
        if os.path.isdir(directory):
            target = f"{directory}.migrated-{stamp}"
            n = 1
            while os.path.exists(target):
                n += 1
                target = f"{directory}.migrated-{stamp}-{n}"
            os.rename(directory, target)
            kept[os.path.basename(directory)] = target
    from phoenix_protocol.core._durable import fsync_dir

    fsync_dir(agent.dir)
    agent.record(
        "checkpoints_imported",
        "warn" if left_out or report.get("current_rebuilt") or foreign else "ok",
        {**report, "kept_as": kept, "into": db.where},
        trusted=True,
    )
    return report


def _mark(tx: Tx, agent_id: str, source: str, at: str, report: dict[str, Any]) -> None:
    tx.execute(
        "INSERT INTO phx_file_imports (agent_id, source, imported_at, report) VALUES (?, ?, ?, ?)",
        (agent_id, source, at, dumps_line(report)),
    )
