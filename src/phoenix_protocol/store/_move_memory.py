"""Move what an earlier release kept in files of the home into the database: its memories
(``memory/memory.sqlite3``, an SQLite database of its own) and the memory bridge's tokens
(``tokens.json``).

``move_earlier_files(home, db)`` runs on the first use of the memory or token store (every use
costs two ``stat`` calls once the files are gone). Under the home's lock for the move:

1. both files are read (nothing is written to them);
2. everything is copied into the database in one transaction (memories keep their id, text,
   tags, metadata and time, passing the redactor as every memory written does; tokens keep their
   record as stored, appended in their order); an id already there is left as it is, so a move
   interrupted anywhere (even by SIGKILL) runs again safely on the next use;
3. the copy is verified: every memory id is in the database with its namespace and text, every
   token's row holds its record;
4. only then are the files kept aside, never deleted: ``memory/`` is renamed
   ``memory.migrated-<time>/`` and ``tokens.json`` ``tokens.json.migrated-<time>``; a line in
   ``store-moves.jsonl`` records what moved where.

A file that does not read is left in place and named (``CorruptStateError``), and nothing of it
is moved.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._durable import FileLock, durable_append, fsync_dir, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, StorageError, UsageError

if TYPE_CHECKING:
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Database, Tx

__all__ = ["MEMORY_DIR", "MOVES_LOG", "TOKENS_FILE", "move_earlier_files"]

MEMORY_DIR = "memory"
MEMORY_FILE = "memory.sqlite3"
TOKENS_FILE = "tokens.json"
MOVES_LOG = "store-moves.jsonl"
_LOCK = "store-move"
_MEMORY_SCHEMA = 1  # the earlier release's memory.sqlite3


def _paths(home: Home) -> tuple[str, str]:
    return os.path.join(home.root, MEMORY_DIR, MEMORY_FILE), os.path.join(home.root, TOKENS_FILE)


def pending(home: Home) -> bool:
    """Whether the home still has files of an earlier release to move."""
    memory, tokens = _paths(home)
    return os.path.exists(memory) or os.path.exists(tokens)


def move_earlier_files(home: Home, db: Database, *, clock: Clock = system_clock) -> dict[str, Any] | None:
    """Move the home's ``memory/memory.sqlite3`` and ``tokens.json`` into ``db`` (see the module
    docstring); what was moved, or ``None`` when there was nothing to move."""
    if not pending(home):
        return None
    with FileLock(os.path.join(home.root, _LOCK), 60.0):
        if not pending(home):  # another process moved them meanwhile
            return None
        memory_path, tokens_path = _paths(home)
        memories = _read_memories(memory_path) if os.path.exists(memory_path) else None
        tokens = _read_tokens(tokens_path) if os.path.exists(tokens_path) else None
        return _move(home, db, clock, memory_path, memories, tokens_path, tokens)


def _read_memories(path: str) -> list[tuple[str, str, str, list[str], str, int]]:
    """The memories of an earlier release's store, checked and redacted as ``store`` would."""
    from phoenix_protocol.store._memory import _import_row

    damaged = (
        f"{path} (memories written by an earlier Phoenix) does not read: %s. It was left in place and "
        "nothing was moved: move it aside to use the memory store (or restore it from a backup)."
    )
    try:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    except sqlite3.Error as exc:
        raise CorruptStateError(damaged % exc, path=path) from exc
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "memories" not in tables:
            return []  # made, never written
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else _MEMORY_SCHEMA
            if version > _MEMORY_SCHEMA:
                raise SchemaVersionError(
                    f"{path} was written by a newer Phoenix (memory schema {version}); upgrade phoenix-protocol.",
                    path=path,
                    found=version,
                    supported=_MEMORY_SCHEMA,
                )
        rows = conn.execute(
            "SELECT id, namespace, text, tags, metadata, created_ms FROM memories ORDER BY rowid"
        ).fetchall()
    except (sqlite3.Error, ValueError) as exc:
        raise CorruptStateError(damaged % exc, path=path) from exc
    finally:
        conn.close()
    out = []
    import json

    for memory_id, namespace, text, tags, metadata, created_ms in rows:
        try:
            record = {
                "id": memory_id,
                "namespace": namespace,
                "text": text,
                "tags": json.loads(tags),
                "metadata": json.loads(metadata),
                "created_ms": created_ms,
            }
            out.append(_import_row(record))
        except (ValueError, UsageError) as exc:
            raise CorruptStateError(damaged % f"memory {memory_id!r}: {exc}", path=path) from None
    return out


def _read_tokens(path: str) -> list[Any]:
    from phoenix_protocol.store._tokens import parse_token_file

    data = read_bytes(path)
    return parse_token_file(data, path) if data is not None else []


def _move(
    home: Home,
    db: Database,
    clock: Clock,
    memory_path: str,
    memories: list[tuple[str, str, str, list[str], str, int]] | None,
    tokens_path: str,
    tokens: list[Any] | None,
) -> dict[str, Any]:
    from phoenix_protocol.store import _memory, _tokens

    token_records = tokens or []
    keys: list[str] = []

    def copy(tx: Tx) -> None:
        nonlocal keys
        if memories:
            _memory.insert_rows(tx, memories)
        if token_records:
            # Keys as the first run gave them: rows of this move already there are not "taken".
            mine = set(_tokens.row_keys(token_records, set()))
            taken = {str(k) for (k,) in tx.all("SELECT id FROM phx_tokens")} - mine
            keys = _tokens.row_keys(token_records, taken)
            _tokens.insert_records(tx, token_records, keys)

    db.transaction(copy)
    _verify(db, memories or [], token_records, keys)

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(clock.now_ms() / 1000)) + f"{clock.now_ms() % 1000:03d}Z"
    kept: list[str] = []
    if tokens is not None:
        kept.append(_keep_aside(tokens_path, f"{tokens_path}.migrated-{stamp}"))
    if memories is not None:
        directory = os.path.dirname(memory_path)
        kept.append(_keep_aside(directory, f"{directory}.migrated-{stamp}"))
    fsync_dir(home.root)
    moved = {
        "event": "store.moved",
        "at": iso_from_ms(clock.now_ms()),
        "database": db.where,
        "memories": len(memories or []),
        "tokens": len(token_records),
        "kept_aside": [os.path.relpath(p, home.root) for p in kept],
    }
    import orjson

    with contextlib.suppress(OSError, StorageError):  # the record is a courtesy; the move is done
        durable_append(os.path.join(home.root, MOVES_LOG), orjson.dumps(moved) + b"\n")
    return moved


def _verify(
    db: Database, memories: list[tuple[str, str, str, list[str], str, int]], tokens: list[Any], keys: list[str]
) -> None:
    """Every memory and token of the files is in the database (ids, and what each holds)."""
    from phoenix_protocol.store._tokens import record_json

    def work(tx: Tx) -> list[str]:
        missing: list[str] = []
        for memory_id, namespace, text, *_rest in memories:
            row = tx.one("SELECT namespace, text FROM phx_memories WHERE id = ?", (memory_id,))
            if row is None or (row[0], row[1]) != (namespace, text):
                missing.append(memory_id)
        for key, record in zip(keys, tokens, strict=True):
            stored = tx.scalar("SELECT record FROM phx_tokens WHERE id = ?", (key,))
            if stored != record_json(record):
                missing.append(f"token {key}")
        return missing

    missing = db.read(work)
    counted = len(memories) + len(tokens) - len(missing)
    if missing:
        raise StorageError(
            f"moving the home's memories and tokens into {db.where}: {len(missing)} of them are not there as "
            f"they are in the files (e.g. {', '.join(missing[:3])}; {counted} are). The files were left in place: "
            "nothing is lost. The database already holds other items under those ids (a store shared by two "
            "homes?): export this home with the earlier release and import it elsewhere."
        )


def _keep_aside(path: str, target: str) -> str:
    """Rename ``path`` to ``target`` (another name when taken); never deletes anything."""
    candidate, n = target, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{target}.{n}"
    try:
        os.rename(path, candidate)
    except FileNotFoundError:
        return candidate
    except OSError as exc:
        raise StorageError(
            f"the home's {os.path.basename(path)} was copied into the database but could not be renamed "
            f"{os.path.basename(candidate)} ({exc.strerror}); nothing is lost: fix the permissions of {os.path.dirname(path)}.",
            path=path,
        ) from exc
    return candidate
