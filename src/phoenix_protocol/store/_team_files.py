"""Teams as files: seed 004's ``.team-state/<team-id>/`` layout written from the database
(``phx team export``, the git mirror), and the team folders of a home written by an earlier
release moved into the database.

The layout (``export_team``)::

    <team-id>/metadata.json                     the team with its task list (schema 1.1)
    <team-id>/mailbox.jsonl                     one message per line, in seq order, with acked_by
    <team-id>/teammates.json                    the roster
    <team-id>/checkpoints/checkpoint-<seq>.json the kept team checkpoints

Earlier releases kept each team in ``<home>/teams/<team-id>/`` (``metadata.json``,
``teammates.json``, ``checkpoints/``, the mailbox's segments ``mailbox.jsonl`` and
``mailbox.<first>-<last>.jsonl``, ``mailbox.archive/``, and each reader's cursor in
``mailbox.cursors/<reader>.json`` plus its journal ``<reader>.jsonl``). ``import_home_teams``
reads those plain JSON files, writes every team into the database in one transaction, reads it
back and compares, and only then renames ``teams/`` to ``teams.migrated-<UTC time>/``: nothing is
deleted, and a process killed at any point leaves either the folders in place (the next open
imports them again, or finds them imported and verifies) or the import done.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._durable import FileLock, atomic_write, ensure_dir, fsync_dir, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, UsageError
from phoenix_protocol.core._ids import is_valid_id
from phoenix_protocol.core._jsonio import JSONError, dumps_document, dumps_line, loads

if TYPE_CHECKING:
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._jsonio import JSON
    from phoenix_protocol.store._db import Database, Tx
    from phoenix_protocol.store._teams import Team

__all__ = ["export_team", "import_home_teams", "mirror_to_git", "team_files"]

_SEGMENT = re.compile(r"^mailbox\.(\d{12})-(\d{12})\.jsonl$")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)\.json$")


# -- export --------------------------------------------------------------------------------------


def team_files(team: Team) -> dict[str, bytes]:
    """The team's seed-004 files, by path relative to ``<team-id>/``, from one read of each part."""
    from phoenix_protocol.store._teams import SCHEMA_VERSION

    files: dict[str, bytes] = {
        "metadata.json": dumps_document(team.read()).encode("ascii"),
        "teammates.json": dumps_document({"schema_version": SCHEMA_VERSION, "teammates": team.roster()}).encode(
            "ascii"
        ),
    }
    box = team.mailbox
    count = int(box.stats()["count"])
    lines = []
    for message in box.replay(count) if count else []:
        record = {"schema_version": 1, "kind": "message", **message.as_dict()}
        lines.append(dumps_line(record) + "\n")
    files["mailbox.jsonl"] = "".join(lines).encode("ascii")
    for record in team.store.read_checkpoints():
        files[f"checkpoints/checkpoint-{int(record['seq']):08d}.json"] = dumps_document(record).encode("ascii")
    return files


def export_team(team: Team, directory: str) -> dict[str, Any]:
    """Write ``<directory>/<team-id>/`` (seed 004's layout); files there from an earlier export
    are replaced, and checkpoints no longer kept are removed. Returns what was written."""
    target = os.path.join(directory, team.id)
    files = team_files(team)
    ensure_dir(os.path.join(target, "checkpoints"))
    for rel, content in files.items():
        atomic_write(os.path.join(target, rel), content)
    kept = {os.path.basename(rel) for rel in files if rel.startswith("checkpoints/")}
    for name in os.listdir(os.path.join(target, "checkpoints")):
        if _CHECKPOINT.match(name) and name not in kept:
            os.unlink(os.path.join(target, "checkpoints", name))
    return {
        "team_id": team.id,
        "directory": target,
        "files": sorted(files),
        "messages": files["mailbox.jsonl"].count(b"\n"),
        "checkpoints": len(kept),
    }


def _git(root: str, *args: str, input_: bytes | None = None, env: dict[str, str] | None = None) -> bytes | None:
    full_env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C", **(env or {}))
    try:
        proc = subprocess.run(
            ["git", "-C", root, *args], input=input_, capture_output=True, timeout=60, env=full_env, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def mirror_to_git(team: Team, message: str) -> str | None:
    """Commit the team's seed-004 files to ``refs/phoenix/teams/<team_id>`` (each commit the child
    of the previous one) with git plumbing only (``hash-object``, ``mktree``, ``commit-tree``,
    ``update-ref``): no branch, index or work tree of the user's is touched. The commit id, or
    ``None`` outside a git work tree or when git fails."""
    root = team.home.project_root
    if root is None:
        return None
    files = team_files(team)
    with tempfile.TemporaryDirectory(prefix="phoenix-mirror-") as tmp:
        paths = []
        for rel, content in files.items():
            path = os.path.join(tmp, rel.replace("/", "__"))
            with open(path, "wb") as fh:
                fh.write(content)
            paths.append(path)
        out = _git(root, "hash-object", "-w", "--stdin-paths", input_="".join(p + "\n" for p in paths).encode())
        if out is None:
            return None
    blobs = dict(zip(files, out.decode().split(), strict=True))
    sub = "".join(f"100644 blob {sha}\t{rel.split('/', 1)[1]}\n" for rel, sha in blobs.items() if "/" in rel)
    entries = [f"100644 blob {sha}\t{rel}\n" for rel, sha in blobs.items() if "/" not in rel]
    if sub:
        checkpoints = _git(root, "mktree", input_=sub.encode())
        if checkpoints is None:
            return None
        entries.append(f"040000 tree {checkpoints.decode().strip()}\tcheckpoints\n")
    tree = _git(root, "mktree", input_="".join(entries).encode())
    if tree is None:
        return None
    ref = f"refs/phoenix/teams/{team.id}"
    parent = _git(root, "rev-parse", "--verify", "--quiet", ref)
    args = ["commit-tree", tree.decode().strip(), "-m", message]
    if parent:
        args += ["-p", parent.decode().strip()]
    env = {
        "GIT_AUTHOR_NAME": "Phoenix Protocol",
        "GIT_AUTHOR_EMAIL": "phoenix@localhost",
        "GIT_COMMITTER_NAME": "Phoenix Protocol",
        "GIT_COMMITTER_EMAIL": "phoenix@localhost",
    }
    commit = _git(root, *args, env=env)
    if commit is None:
        return None
    sha = commit.decode().strip()
    # Compare-and-swap: a concurrent mirror that moved the ref makes this one fail, not lose a commit.
    old = parent.decode().strip() if parent else "0" * 40
    if _git(root, "update-ref", ref, sha, old) is None:
        return None
    return sha


# -- the import of an earlier release's team folders ------------------------------------------


def _load(path: str) -> JSON:
    data = read_bytes(path)
    if data is None:
        return None
    try:
        return loads(data)
    except JSONError as exc:
        raise CorruptStateError(
            f"{path} is not valid JSON ({exc}): the teams of this home cannot be moved into the database until it "
            "is repaired or the team's folder is moved out of teams/ (nothing was changed).",
            path=path,
        ) from None


def _lines(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; a torn or damaged line is skipped."""
    out = []
    for raw in (read_bytes(path) or b"").split(b"\n"):
        if not raw.strip():
            continue
        try:
            value = loads(raw)
        except JSONError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _read_messages(folder: str) -> list[dict[str, Any]]:
    from phoenix_protocol.core._redact import redact

    paths = [os.path.join(folder, "mailbox.jsonl")]
    for sub in ("", "mailbox.archive"):
        try:
            names = os.listdir(os.path.join(folder, sub))
        except FileNotFoundError:
            continue
        paths += [os.path.join(folder, sub, n) for n in sorted(names) if _SEGMENT.match(n)]
    by_seq: dict[int, dict[str, Any]] = {}
    for path in paths:
        for record in _lines(path):
            try:
                seq = int(record["seq"])
            except (KeyError, TypeError, ValueError):
                continue
            if record.get("kind", "message") != "message" or seq in by_seq:
                continue
            by_seq[seq] = {
                "seq": seq,
                "msg_id": str(record.get("msg_id") or f"m-imported-{seq}"),
                "sender": str(record.get("from", "")),
                "to": str(record.get("to", "")),
                "type": str(record.get("type", "info")),
                "subject": redact(str(record.get("subject", ""))),
                "body": redact(str(record.get("body", ""))),
                "ts": str(record.get("ts", "")),
                "ts_ms": int(record.get("ts_ms") or 0),
            }
    return [by_seq[s] for s in sorted(by_seq)]


def _addressed(message: dict[str, Any], reader: str) -> bool:
    return bool(message["to"] == reader or (message["to"] == "*" and message["sender"] != reader))


def _read_cursors(folder: str, messages: list[dict[str, Any]]) -> dict[str, tuple[int, dict[int, int]]]:
    """Each reader's delivered seq and acknowledged seqs (with when, in ms): the snapshot's
    acknowledged ranges, plus every event of the journal (which the snapshot may lag)."""
    from phoenix_protocol.core._clock import ms_from_iso

    directory = os.path.join(folder, "mailbox.cursors")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    readers = sorted({n.split(".", 1)[0] for n in names if n.endswith((".json", ".jsonl"))})
    out: dict[str, tuple[int, dict[int, int]]] = {}
    for reader in readers:
        if not is_valid_id(reader):
            continue
        delivered = 0
        acks: dict[int, int] = {}
        try:
            snap = _load(os.path.join(directory, reader + ".json"))
        except CorruptStateError:
            snap = None  # derived from the journal, which is read below
        if isinstance(snap, dict):
            delivered = int(snap.get("delivered_seq") or 0)
            at = _ms(ms_from_iso, snap.get("updated_at"))
            for first, last in snap.get("acked_ranges") or []:
                for message in messages:
                    if max(int(first), 1) <= message["seq"] <= int(last) and _addressed(message, reader):
                        acks.setdefault(message["seq"], at)
        for event in _lines(os.path.join(directory, reader + ".jsonl")):
            try:
                seq = int(event["seq"])
            except (KeyError, TypeError, ValueError):
                continue
            if event.get("kind") == "delivered":
                delivered = max(delivered, seq)
            elif event.get("kind") == "ack":
                acks[seq] = _ms(ms_from_iso, event.get("ts"))
        out[reader] = (delivered, acks)
    return out


def _ms(parse: Any, text: object) -> int:
    try:
        return int(parse(str(text)))
    except (TypeError, ValueError):
        return 0


def _read_team(folder: str, team_id: str) -> dict[str, Any] | None:
    from phoenix_protocol.store._teams import migrate

    meta_path = os.path.join(folder, "metadata.json")
    metadata = _load(meta_path)
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise CorruptStateError(f"{meta_path} is not a JSON object: repair it or move the team's folder away.")
    metadata = migrate(metadata, meta_path)
    roster_path = os.path.join(folder, "teammates.json")
    roster_doc = _load(roster_path) or {"schema_version": "1.1", "teammates": []}
    roster = list(migrate(roster_doc, roster_path).get("teammates") or [])
    messages = _read_messages(folder)
    checkpoints = []
    try:
        names = sorted(os.listdir(os.path.join(folder, "checkpoints")))
    except FileNotFoundError:
        names = []
    for name in names:
        match = _CHECKPOINT.match(name)
        if not match:
            continue
        try:
            record = _load(os.path.join(folder, "checkpoints", name))
        except CorruptStateError:
            continue  # the old reader skipped a damaged checkpoint too; the file stays in the kept folder
        if isinstance(record, dict):
            checkpoints.append((int(match.group(1)), str(record.get("checkpoint_type") or "full"), record))
    return {
        "team_id": team_id,
        "metadata": {k: v for k, v in metadata.items() if k != "tasks"},
        "tasks": list(metadata.get("tasks") or []),
        "roster": roster,
        "messages": messages,
        "cursors": _read_cursors(folder, messages),
        "checkpoints": checkpoints,
    }


def _insert(tx: Tx, db: Database, team: dict[str, Any]) -> None:
    from phoenix_protocol.store._team_store import TeamStore, recount

    team_id = team["team_id"]
    TeamStore(db, team_id).insert(tx, team["metadata"], team["tasks"], team["roster"])
    tx.executemany(
        "INSERT INTO phx_messages (team_id, seq, msg_id, sender, recipient, type, subject, body, ts, ts_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                team_id,
                m["seq"],
                m["msg_id"],
                m["sender"],
                m["to"],
                m["type"],
                m["subject"],
                m["body"],
                m["ts"],
                m["ts_ms"],
            )
            for m in team["messages"]
        ],
    )
    seqs = {m["seq"] for m in team["messages"]}
    for reader, (delivered, acks) in team["cursors"].items():
        tx.execute(
            "INSERT INTO phx_cursors (team_id, reader, delivered) VALUES (?, ?, ?)",
            (team_id, reader, min(delivered, max(seqs, default=0))),
        )
        tx.executemany(
            "INSERT INTO phx_acks (team_id, seq, reader, acked_ms) VALUES (?, ?, ?, ?)",
            [(team_id, seq, reader, ms) for seq, ms in sorted(acks.items()) if seq in seqs],
        )
    tx.executemany(
        "INSERT INTO phx_team_checkpoints (team_id, seq, kind, record) VALUES (?, ?, ?, ?)",
        [(team_id, seq, kind, tx.dialect.json(record)) for seq, kind, record in team["checkpoints"]],
    )
    recount(tx, team_id)


def _verify(db: Database, team: dict[str, Any], where: str) -> None:
    """Read the team back from the database and compare it with what the folder holds."""
    from phoenix_protocol.store._team_store import Mailbox, TeamStore

    store = TeamStore(db, team["team_id"])
    box = Mailbox(db, team_id=team["team_id"])
    problems = []
    if store.read() != {**team["metadata"], "tasks": team["tasks"]}:
        problems.append("metadata or tasks")
    if store.roster() != team["roster"]:
        problems.append("roster")
    stored = box.replay(len(team["messages"]) + 1) if team["messages"] else []
    mine = [
        (m["seq"], m["msg_id"], m["sender"], m["to"], m["type"], m["subject"], m["body"], m["ts"], m["ts_ms"])
        for m in team["messages"]
    ]
    theirs = [(m.seq, m.msg_id, m.sender, m.to, m.type, m.subject, m.body, m.ts, m.ts_ms) for m in stored]
    if mine != theirs:
        problems.append("messages")
    seqs = {m["seq"] for m in team["messages"]}
    acked: dict[int, list[str]] = {}
    for reader, (_delivered, acks) in team["cursors"].items():
        for seq in acks:
            if seq in seqs:
                acked.setdefault(seq, []).append(reader)
    if any(sorted(acked.get(m.seq, [])) != m.acked_by for m in stored):
        problems.append("acknowledgements")
    states = box.cursor_states(list(team["cursors"]))
    top = max(seqs, default=0)
    if any(states[r]["delivered_seq"] != min(d, top) for r, (d, _a) in team["cursors"].items()):
        problems.append("cursors")
    if [r for _s, _k, r in team["checkpoints"]] != store.read_checkpoints():
        problems.append("checkpoints")
    if problems:
        raise CorruptStateError(
            f"team {team['team_id']} in {where} and in the database {db.where} differ ({', '.join(problems)}): "
            "the folder was left in place; move it out of teams/ to import it by hand (`phx import`), "
            "or remove the team from the database.",
            path=where,
        )


def import_home_teams(home: Home, db: Database, *, timeout: float = 30.0) -> dict[str, Any] | None:
    """Move ``<home>/teams/`` (an earlier release's team folders) into ``db`` (see the module
    docstring). ``None`` when there was nothing to move; else the teams and where the folders
    were kept."""
    source = os.path.join(home.root, "teams")
    with FileLock(source, timeout):
        if not os.path.isdir(source):
            return None  # another process moved them meanwhile
        teams = []
        for name in sorted(os.listdir(source)):
            folder = os.path.join(source, name)
            if is_valid_id(name) and os.path.isdir(folder):
                team = _read_team(folder, name)
                if team is not None:
                    teams.append(team)

        def work(tx: Tx) -> list[str]:
            added = []
            for team in teams:
                if tx.one("SELECT 1 FROM phx_teams WHERE team_id = ?", (team["team_id"],)) is None:
                    _insert(tx, db, team)
                    added.append(team["team_id"])
            return added

        added = db.transaction(work)
        for team in teams:
            _verify(db, team, os.path.join(source, team["team_id"]))
        kept = os.path.join(home.root, "teams.migrated-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        while os.path.exists(kept):
            kept += "-1"
        os.rename(source, kept)
        fsync_dir(home.root)
    return {"teams": [t["team_id"] for t in teams], "imported": added, "kept_in": kept}


def check_export_directory(directory: str) -> str:
    """``directory`` for ``phx team export`` (created if missing); refuses a file."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"{directory} is a file: give a directory to export the team into.")
    return directory
