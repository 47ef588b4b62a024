"""``phx export`` / ``phx import``: a whole home, moved between stores without loss.

The export is one JSON-lines file (0600: it holds everything the home holds, secrets already
redacted): a header, then one record per thing, each with a ``type``:

- ``file``: a file under ``agents/`` (state, ops logs, checkpoints, identity, sessions), by
  path relative to the home, content in base64 (an export by an earlier release may also have
  ``tokens.json``: its tokens are imported into the token store). An agent's checkpoints
  (``agents/<id>/checkpoints/*.checkpoint``: seed 003's document, with its ``checksum`` in the
  record, and ``operations.jsonl``) and sessions (``agents/<id>/sessions/current.json`` and
  ``sessions.jsonl``) are rows of the database on every store, exported as the files earlier
  releases kept and imported as rows. The others stay files on every store, except state
  (``state.json``, ``ops.jsonl`` and its rotations) and identity
  (``identity.yaml``, ``identity.digest``): on PostgreSQL they are rows, exported as the files
  they would be (the ops log as one ``ops.jsonl``: every machine's events in seq order) and
  imported as rows. A machine's bookkeeping for its copy of an agent (``store-link.json``,
  ``.store-rev``, ``.store-sync``, ``.pre-compact``, ``.identity-copy``) is not exported. The checkpoint catalogue
  (``index.json``, ``index.log``) is not exported: it is rebuilt from the checkpoints.
- ``team``: a team's metadata (with its tasks) and roster; then its ``message`` records (in
  sequence order, with their timestamps, ids and acknowledgements), ``cursor`` records,
  ``heartbeat`` records and ``team_checkpoint`` records.
- ``memory``: one memory (id, namespace, text, tags, metadata, creation time).
- ``token``: one of the memory bridge's tokens, its ``record`` as stored (the digest of its
  secret, never the secret), in the order they are listed.

``import_home`` writes them into the store the target home is configured with (files, or
``PHOENIX_STORE=postgresql://…``) through the stores' own interfaces, so the same file moves a
home from files to PostgreSQL and back. It refuses, before writing anything, when the target
already has one of the teams, memories or files: an import never merges and never overwrites.
A message keeps its sequence number (the mailbox's sequence is gap-free, so sending them in
order to an empty mailbox gives each its number back; anything else is an error), its id and
its timestamp.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import ManualClock, system_clock
from phoenix_protocol.core._config import Config, load_config
from phoenix_protocol.core._durable import FileLock, atomic_write, ensure_dir, iter_lines, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, UsageError
from phoenix_protocol.core._jsonio import JSONError, dumps_line, loads

if TYPE_CHECKING:
    from phoenix_protocol.core._home import Home

__all__ = ["FORMAT_VERSION", "export_home", "import_home", "read_export"]

FORMAT_VERSION = 1
_FILE_ROOTS = ("agents",)
_FILE_NAMES = ("tokens.json",)
"""Files at the top of the home that an export by an earlier release may have (imported, not exported)."""
_SKIP_SUFFIXES = (".lock", ".tmp")
_CATALOGUE = ("index.json", "index.log")
_ROWS = ("checkpoints", "sessions")
"""What an agent keeps as rows of the database on every store (``_store_file``'s kinds)."""
_LOCAL = ("store-link.json", ".store-rev", ".store-sync", ".pre-compact", ".identity-copy")
"""A machine's bookkeeping for its copy of an agent on the PostgreSQL store (``_state_pg``)."""

Progress = Callable[[str], None]


def _store_file(rel: str) -> tuple[str, str, str] | None:
    """``(agent_id, "checkpoints" | "sessions" | "state" | "identity", name)`` when ``rel`` is
    a file the PostgreSQL store keeps as rows: an agent's checkpoints, sessions, ``state.json``,
    ops log and identity."""
    parts = os.path.normpath(rel).split(os.sep)
    if len(parts) == 4 and parts[0] == "agents" and parts[2] in ("checkpoints", "sessions"):
        return parts[1], parts[2], parts[3]
    if len(parts) == 3 and parts[0] == "agents" and (parts[2] == "state.json" or parts[2].startswith("ops.jsonl")):
        return parts[1], "state", parts[2]
    if len(parts) == 3 and parts[0] == "agents" and parts[2] in ("identity.yaml", "identity.digest"):
        return parts[1], "identity", parts[2]
    return None


def _home_files(home: Home, *, store_files: bool = True) -> Iterator[str]:
    for root in _FILE_ROOTS:
        top = os.path.join(home.root, root)
        for directory, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(_SKIP_SUFFIXES) or ".tmp-" in name or name.startswith(".tmp") or name in _LOCAL:
                    continue
                rel = os.path.relpath(os.path.join(directory, name), home.root)
                owned = _store_file(rel)
                if owned is not None and (not store_files or owned[2] in _CATALOGUE):
                    continue
                yield rel


def _records(home: Home, config: Config, progress: Progress) -> Iterator[dict[str, Any]]:
    from phoenix_protocol.store._pg import is_postgres_url
    from phoenix_protocol.store._teams import KEEP_CHECKPOINTS, Team, list_teams

    on_pg = is_postgres_url(config.store)
    from phoenix_protocol.store._tokens import TokenStore

    tokens = TokenStore(home, config=config)  # an earlier release's tokens.json moved into the store first
    from phoenix_protocol.services._agent import Agent

    for agent_id in home.agent_ids():  # checkpoint and session files of an earlier release: imported first
        Agent(agent_id, home, config=config).checkpoints.backend.before_use()
    for rel in _home_files(home, store_files=not on_pg):
        if (_store_file(rel) or ("", "", ""))[1] in _ROWS:
            continue  # the import above kept them aside; the rows are exported below
        data = read_bytes(os.path.join(home.root, rel))
        if data is not None:
            yield _file_record(rel, data)
    yield from _checkpoint_rows(home, config)
    if on_pg:
        from phoenix_protocol.services._agent import sync_copies

        sync_copies(home, progress=progress, config=config)  # this machine's copies first pass on what they hold
        yield from _pg_store_files(config.store, config.pg_pool_size)
    for team_id in list_teams(home, config=config):
        progress(f"team {team_id}")
        team = Team(home, team_id, config=config)
        roster = team.roster()
        yield {"type": "team", "team_id": team_id, "metadata": team.read(), "roster": roster}
        box = team.mailbox
        count = int(box.stats()["count"])
        for message in box.replay(count) if count else []:
            fields = message.as_dict()
            fields["message_type"] = fields.pop("type")  # "type" names the record
            yield {"type": "message", "team_id": team_id, **fields}
        readers = box.readers()
        for reader, state in box.cursor_states(readers).items():
            yield {"type": "cursor", "team_id": team_id, "reader": reader, "delivered_seq": state["delivered_seq"]}
        for name, beat in team.store.read_beats([m["name"] for m in roster]).items():
            if beat is not None:
                yield {"type": "heartbeat", "team_id": team_id, **beat, "name": name}
        for name in team.store.checkpoint_names()[-KEEP_CHECKPOINTS:]:
            record = team.store.read_checkpoint(name)
            if record is not None:
                yield {"type": "team_checkpoint", "team_id": team_id, "name": name, "record": record}
    from phoenix_protocol.store._memory import open_memory_store

    memory = open_memory_store(home, config=config)
    for namespace in memory.namespaces():
        progress(f"memory {namespace}")
        for record in memory.export(namespace):
            yield {"type": "memory", **record}
    for token in tokens.export():
        yield {"type": "token", "record": token}


def _file_record(rel: str, data: bytes) -> dict[str, Any]:
    return {"type": "file", "path": rel, "content": base64.b64encode(data).decode("ascii")}


def _pg_store_files(url: str, pool_size: int) -> Iterator[dict[str, Any]]:
    """Agents' state and identity kept on PostgreSQL, as the files the file store would hold."""
    from phoenix_protocol.agent._state_pg import agents_with_state, export_texts

    for agent_id in agents_with_state(url):
        state, lines = export_texts(url, agent_id)
        base = os.path.join("agents", agent_id)
        if state is not None:
            yield _file_record(os.path.join(base, "state.json"), state.encode("utf-8"))
        if lines:
            yield _file_record(os.path.join(base, "ops.jsonl"), "".join(f"{x}\n" for x in lines).encode("utf-8"))
    from phoenix_protocol.agent._identity_pg import agents_with_identity, export_identity

    for agent_id in agents_with_identity(url):
        document, digest = export_identity(url, agent_id)
        if document is not None:
            yield _file_record(os.path.join("agents", agent_id, "identity.yaml"), document)
        if digest is not None:
            yield _file_record(os.path.join("agents", agent_id, "identity.digest"), (digest + "\n").encode("ascii"))


def _checkpoint_rows(home: Home, config: Config) -> Iterator[dict[str, Any]]:
    """Agents' checkpoints and sessions (rows of the database), as the files earlier releases kept."""
    from phoenix_protocol.store._checkpoints import LEGACY, CheckpointRows, agents_with_checkpoints
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._sessions import SessionRows

    db = open_database(home, config)
    if not db.exists():
        return
    for agent_id in agents_with_checkpoints(db):
        rows = CheckpointRows(db, agent_id)
        base = os.path.join("agents", agent_id, "checkpoints")
        for info in rows.ordered():
            stored = rows.read(info.name)
            if stored is None:
                continue
            if stored.checksum == LEGACY:  # an earlier release's file bytes, as they were
                yield _file_record(os.path.join(base, info.name), stored.legacy or b"")
            else:
                yield {**_file_record(os.path.join(base, info.name), stored.content), "checksum": stored.checksum}
        lines = [dumps_line(record) + "\n" for record in rows.operations()]
        if lines:
            yield _file_record(os.path.join(base, "operations.jsonl"), "".join(lines).encode("ascii"))
        sessions = SessionRows(db, agent_id)
        base = os.path.join("agents", agent_id, "sessions")
        current = sessions.current_text()
        if current is not None:
            yield _file_record(os.path.join(base, "current.json"), current.encode("utf-8"))
        texts = sessions.lines()
        if texts:
            yield _file_record(os.path.join(base, "sessions.jsonl"), "".join(f"{x}\n" for x in texts).encode("utf-8"))


def _import_checkpoint_rows(home: Home, config: Config, files: list[dict[str, Any]]) -> None:
    """Agents' checkpoint and session files of an export, as rows of the database."""
    from phoenix_protocol.core._ids import validate_id
    from phoenix_protocol.services._checkpoints import from_file
    from phoenix_protocol.store._checkpoints import CheckpointInfo, CheckpointRows, Stored, lock_agent, parse_name
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._sessions import SessionRows

    db = open_database(home, config)
    sessions: dict[str, tuple[str | None, list[str]]] = {}
    for record in files:
        agent_id, kind, name = _store_file(record["path"]) or ("", "", "")
        validate_id(agent_id, "agent id")
        data = base64.b64decode(record["content"])
        if kind == "sessions":
            text, lines = sessions.get(agent_id, (None, []))
            if name == "current.json":
                text = data.decode("utf-8")
            elif name.startswith("sessions.jsonl"):
                lines = lines + [line.decode("utf-8") for _off, line in iter_lines(data)]
            else:
                raise UsageError(f"the export has {record['path']!r}, which Phoenix does not keep; refused.")
            sessions[agent_id] = (text, lines)
            continue
        rows = CheckpointRows(db, agent_id)
        if name == "operations.jsonl":
            for _off, line in iter_lines(data):
                rows.record_operation(loads(line))
            continue
        parsed = parse_name(name)
        if parsed is None or parsed[0] != agent_id:
            raise UsageError(f"the export has {record['path']!r}, which is not a checkpoint of {agent_id!r}; refused.")
        envelope: dict[str, Any] | None
        if isinstance(record.get("checksum"), str):
            stored = Stored(data, str(record["checksum"]), None)
            try:
                envelope = loads(data)
            except JSONError:
                envelope = None
        else:  # an earlier release's file (or a damaged one, kept as it is: reported on read)
            stored, envelope = from_file(data, record["path"])
        label = operation_id = None
        if isinstance(envelope, dict):
            label = envelope.get("summary")
            op = envelope.get("operation")
            operation_id = op.get("id") if isinstance(op, dict) else None
        _agent, seq, ms, ctype = parsed
        info = CheckpointInfo(name, seq, ctype, ms, label=label, operation_id=operation_id, size=len(data))

        def put(tx: Any, rows: CheckpointRows = rows, info: CheckpointInfo = info, stored: Stored = stored) -> None:
            lock_agent(tx, rows.agent_id)
            rows.put_existing(tx, info, stored.content, stored.checksum, stored.legacy)

        db.transaction(put)
    for agent_id, (text, lines) in sessions.items():
        SessionRows(db, agent_id).import_texts(text, sorted(lines, key=_seq_of))


def _import_pg_store_files(url: str, pool_size: int, files: list[dict[str, Any]]) -> None:
    """Agents' state and identity files of an export, as rows of the PostgreSQL store."""
    # An agent's state is a document and a log (rotations in any order).
    documents = {"state": "state.json"}
    logs = {"state": "ops.jsonl"}
    kept: dict[tuple[str, str], tuple[str | None, list[str]]] = {}
    identities: dict[str, tuple[bytes | None, str | None]] = {}
    from phoenix_protocol.core._ids import validate_id

    for record in files:
        agent_id, kind, name = _store_file(record["path"]) or ("", "", "")
        validate_id(agent_id, "agent id")
        data = base64.b64decode(record["content"])
        if kind == "identity":
            document, seal = identities.get(agent_id, (None, None))
            if name == "identity.yaml":
                document = data
            else:
                seal = data.decode("ascii", "replace").strip() or None
            identities[agent_id] = (document, seal)
            continue
        if kind in documents:
            text, lines = kept.get((kind, agent_id), (None, []))
            if name == documents[kind]:
                text = data.decode("utf-8")
            elif name.startswith(logs[kind]):
                lines = lines + [line.decode("utf-8") for _off, line in iter_lines(data)]
            else:
                raise UsageError(f"the export has {record['path']!r}, which Phoenix does not keep; refused.")
            kept[(kind, agent_id)] = (text, lines)
            continue
        raise UsageError(f"the export has {record['path']!r}, which Phoenix does not keep; refused.")
    from phoenix_protocol.agent._state_pg import import_texts

    for (_kind, agent_id), (text, lines) in kept.items():
        import_texts(url, agent_id, text, sorted(lines, key=_seq_of))  # rotated files come in any order
    from phoenix_protocol.agent._identity_pg import import_identity

    for agent_id, (document, seal) in identities.items():
        if document is not None:
            import_identity(url, agent_id, document, seal)


def _seq_of(line: str) -> int:
    """A log line's seq (an unreadable line sorts first; the import skips it)."""
    try:
        value = loads(line)
    except JSONError:
        return 0
    seq = value.get("seq") if isinstance(value, dict) else None
    return seq if isinstance(seq, int) else 0


def export_home(
    home: Home, path: str, *, progress: Progress | None = None, config: Config | None = None
) -> dict[str, int]:
    """Write everything in ``home`` (and its store, per ``config``: default the home's) to ``path``;
    returns the count of each record type."""
    from phoenix_protocol.store._pg import describe, is_postgres_url

    if config is None:
        config = load_config(home.root, project_root=home.project_root)
    source = describe(config.store) if is_postgres_url(config.store) else "files"
    lines = [
        dumps_line({"kind": "phoenix.export", "format_version": FORMAT_VERSION, "home": home.root, "store": source})
    ]
    counts: dict[str, int] = {}
    for record in _records(home, config, progress or (lambda _what: None)):
        counts[record["type"]] = counts.get(record["type"], 0) + 1
        lines.append(dumps_line(record))
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return counts


def read_export(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the records of an export; a damaged line is an error naming it."""
    data = read_bytes(path)
    if data is None:
        raise UsageError(f"no export at {path}.")
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            value = loads(raw)
        except JSONError as exc:
            raise CorruptStateError(f"{path}:{number} is not JSON ({exc}); the export is damaged.", path=path) from None
        if not isinstance(value, dict):
            raise CorruptStateError(f"{path}:{number} is not a JSON object.", path=path)
        if header is None:
            if value.get("kind") != "phoenix.export":
                raise UsageError(f"{path} is not a Phoenix export (no phoenix.export header).")
            if int(value.get("format_version", 0)) > FORMAT_VERSION:
                raise SchemaVersionError(
                    f"{path} was written by a newer Phoenix (export format {value.get('format_version')}).",
                    path=path,
                )
            header = value
            continue
        records.append(value)
    if header is None:
        raise UsageError(f"{path} is empty: not a Phoenix export.")
    return header, records


def import_home(
    home: Home, path: str, *, progress: Progress | None = None, config: Config | None = None
) -> dict[str, int]:
    """Load an export into ``home`` and the store ``config`` names (default: the home's; see the
    module docstring)."""
    from phoenix_protocol.store._memory import open_memory_store
    from phoenix_protocol.store._pg import is_postgres_url
    from phoenix_protocol.store._teams import KEEP_CHECKPOINTS, Team, list_teams

    say = progress or (lambda _what: None)
    _header, records = read_export(path)
    if config is None:
        config = load_config(home.root, project_root=home.project_root)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_type.setdefault(str(record.get("type")), []).append(record)
    unknown = set(by_type) - {"file", "team", "message", "cursor", "heartbeat", "team_checkpoint", "memory", "token"}
    if unknown:
        raise UsageError(f"{path} has records of unknown types: {', '.join(sorted(unknown))}.")

    # Refuse before writing anything.
    home.ensure()
    existing_teams = set(list_teams(home, config=config))
    clash = [r["team_id"] for r in by_type.get("team", []) if r["team_id"] in existing_teams]
    clash += [
        r["path"]
        for r in by_type.get("file", [])
        if r["path"] not in _FILE_NAMES and os.path.exists(_inside(home, r["path"]))
    ]
    if is_postgres_url(config.store):
        clash += _pg_store_clashes(config.store, config.pg_pool_size, by_type.get("file", []))
    clash += _checkpoint_clashes(home, config, by_type.get("file", []))
    memory = open_memory_store(home, config=config)
    clash += [r["id"] for r in by_type.get("memory", []) if memory.exists(str(r["id"]))]
    from phoenix_protocol.store._tokens import TokenStore, parse_token_file

    tokens = TokenStore(home, config=config)
    token_records = [r.get("record") for r in by_type.get("token", [])]
    for record in by_type.get("file", []):
        if record["path"] in _FILE_NAMES:  # an earlier release's tokens.json
            token_records += parse_token_file(base64.b64decode(record["content"]), f"{path}: {record['path']}")
    stored_ids = {i.id for i in tokens.list()}
    clash += [f"token {r['id']}" for r in token_records if isinstance(r, dict) and r.get("id") in stored_ids]
    if clash:
        raise UsageError(
            f"the target already has {len(clash)} of the exported items (e.g. {', '.join(map(str, clash[:3]))}): "
            "import into an empty home and store; nothing was written."
        )

    store_files = []
    row_files = []
    for record in by_type.get("file", []):
        target = _inside(home, record["path"])
        if record["path"] in _FILE_NAMES:
            continue  # its tokens go to the token store (below)
        owned = _store_file(record["path"])
        if owned is not None and owned[2] in _CATALOGUE:
            continue  # an older export: the catalogue is rebuilt from the checkpoints
        if owned is not None and owned[1] in _ROWS:
            row_files.append(record)
            continue
        if owned is not None and is_postgres_url(config.store):
            store_files.append(record)
            continue
        ensure_dir(os.path.dirname(target))
        if os.path.basename(target) == "state.json":
            # Written under its lock, as every state write is: the lock file left says a state was
            # written here (``StateStore.lost`` looks for a lost one only then).
            with FileLock(target):
                atomic_write(target, base64.b64decode(record["content"]))
        else:
            atomic_write(target, base64.b64decode(record["content"]))
    if row_files:
        say(f"{len(row_files)} checkpoint and session files")
        _import_checkpoint_rows(home, config, row_files)
    if store_files:
        say(f"{len(store_files)} state and identity files")
        _import_pg_store_files(config.store, config.pg_pool_size, store_files)
    for team_record in by_type.get("team", []):
        team_id = team_record["team_id"]
        say(f"team {team_id}")
        team = Team(home, team_id, config=config)
        team.store.create(team_record["metadata"], team_record["roster"])
        clock = ManualClock()
        box = team.store.mailbox()
        box.clock = clock
        for message in sorted(_of(by_type, "message", team_id), key=lambda m: int(m["seq"])):
            clock.set(int(message["ts_ms"]))
            sent = box.send(
                message["from"],
                message["to"],
                type=message["message_type"],
                subject=message["subject"],
                body=message["body"],
                msg_id=message["msg_id"],
            )
            if sent.seq != int(message["seq"]):
                raise CorruptStateError(
                    f"{path}: team {team_id}'s message {message['msg_id']} was #{message['seq']} but came in as "
                    f"#{sent.seq}: the exported mailbox has a gap.",
                    path=path,
                )
        for cursor in _of(by_type, "cursor", team_id):
            if int(cursor["delivered_seq"]):
                box.mark_delivered(cursor["reader"], int(cursor["delivered_seq"]))
        for message in _of(by_type, "message", team_id):
            for reader in message.get("acked_by") or []:
                box.ack(reader, int(message["seq"]))
        box.clock = system_clock
        for beat in _of(by_type, "heartbeat", team_id):
            team.store.put_beat({k: v for k, v in beat.items() if k not in ("type", "team_id")})
        for checkpoint in sorted(_of(by_type, "team_checkpoint", team_id), key=lambda c: int(c["record"]["seq"])):
            record = checkpoint["record"]
            team.store.write_checkpoint(
                checkpoint["name"], int(record["seq"]), str(record.get("checkpoint_type")), record, KEEP_CHECKPOINTS
            )
    memories = by_type.get("memory", [])
    if memories:
        say(f"{len(memories)} memories")
        memory.import_records([{k: v for k, v in r.items() if k != "type"} for r in memories])
    if token_records:
        say(f"{len(token_records)} tokens")
        tokens.import_records(token_records)
    return {kind: len(items) for kind, items in by_type.items()}


def _pg_store_clashes(url: str, pool_size: int, files: list[dict[str, Any]]) -> list[str]:
    """Exported state and identity files the PostgreSQL store already has rows for."""
    from phoenix_protocol.agent._state_pg import agents_with_state

    with_state = set(agents_with_state(url))
    from phoenix_protocol.agent._identity_pg import agents_with_identity

    with_identity = set(agents_with_identity(url))
    clashes = []
    for record in files:
        owned = _store_file(record["path"])
        if owned is None or owned[1] in _ROWS:
            continue
        agent_id, kind, _name = owned
        if (agent_id in with_identity) if kind == "identity" else (agent_id in with_state):
            clashes.append(record["path"])
    return clashes


def _checkpoint_clashes(home: Home, config: Config, files: list[dict[str, Any]]) -> list[str]:
    """Exported checkpoint and session files the database already has rows for."""
    from phoenix_protocol.store._checkpoints import CheckpointRows, agents_with_checkpoints
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._sessions import SessionRows

    db = open_database(home, config)
    taken_agents = set(agents_with_checkpoints(db)) if db.exists() else set()
    clashes = []
    for record in files:
        owned = _store_file(record["path"])
        if owned is None or owned[1] not in _ROWS or owned[2] in _CATALOGUE or owned[0] not in taken_agents:
            continue
        agent_id, kind, name = owned
        if kind == "sessions":
            rows = SessionRows(db, agent_id)
            taken = bool(rows.lines()) or rows.current_text() is not None
        elif name == "operations.jsonl":
            taken = bool(CheckpointRows(db, agent_id).operations())
        else:
            taken = CheckpointRows(db, agent_id).read(name) is not None
        if taken:
            clashes.append(record["path"])
    return clashes


def _of(by_type: dict[str, list[dict[str, Any]]], kind: str, team_id: str) -> list[dict[str, Any]]:
    return [r for r in by_type.get(kind, []) if r.get("team_id") == team_id]


def _inside(home: Home, rel: str) -> str:
    """``rel`` under the home; a path that leaves it (``..``, absolute) is refused."""
    target = os.path.normpath(os.path.join(home.root, rel))
    if os.path.isabs(rel) or not target.startswith(os.path.normpath(home.root) + os.sep):
        raise UsageError(f"the export names a file outside the home ({rel!r}); refused.")
    if not (rel in _FILE_NAMES or rel.split(os.sep, 1)[0] in _FILE_ROOTS):
        raise UsageError(f"the export names a file Phoenix does not export ({rel!r}); refused.")
    return target
