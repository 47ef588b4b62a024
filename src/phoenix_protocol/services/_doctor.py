"""``phx doctor``: check a Phoenix home and repair what can be repaired without losing anything.

For every agent it checks, and with ``repair=True`` fixes:

- the agent's files and directories as entries (``_check_entries``): each must be a regular file
  (the directories on the way: directories) of this user, no symbolic link, no FIFO, no device,
  no larger than Phoenix reads, which is all the hooks and the CLI accept (``_durable.confine``).
  Another entry there is reported; a repair moves it aside, whole and untouched, as
  ``<name>.quarantine-<time>`` (a symbolic link is renamed, never followed: the file it points
  to is not Phoenix's to touch), and the checks below then rebuild what was there: the state from
  the ops log, the identity from a checkpoint; a lock file or ``brief.md`` is written anew.
- ``state.json`` that is empty, torn, not JSON or invalid: the bad file is kept as
  ``state.json.corrupt-<time>`` and a new one is rebuilt from ``ops.jsonl`` (all rotations),
  replaying every state transition, heartbeat and note; the report says what was recovered
  and from which events. A file written by a newer Phoenix is reported and left alone. A
  missing one whose history the log holds is written from it (``StateStore.lost``).
- ``ops.jsonl`` with a torn last line (cut off under the log's lock) or unreadable lines
  (reported with file and line; readers already skip them, and they stay for forensics).
- temporary files left by writers that were killed (``.state.json.<pid>.<n>.<host tag>.tmp``): removed
  once their writer is gone (see ``abandoned_temp``); a write still in progress is left alone.
- ``identity.yaml`` that does not read (not YAML, not an identity): the bad file is kept as
  ``identity.yaml.corrupt-<time>`` and the identity restored from the newest valid checkpoint's
  copy, with the changes logged since replayed over it, that gives the sealed core; the report
  names the changes that could not be replayed (logged without their value).
  A core edited by hand is reported only (``phx identity reset-core`` accepts it).
- checkpoints and sessions: an agent's ``checkpoints/`` and ``sessions/`` files of an earlier
  release imported into the database (``_checkpoint_import``; kept as ``*.migrated-<time>``);
  each checkpoint row verified (a damaged one reported: ``latest`` skips it), another agent's
  checkpoint imported from a file copied in reported.
- permissions wider than 0700 (directories) or 0600 (files): tightened.
- Phoenix's Claude Code hook commands (project and user settings) whose interpreter is gone, or
  that differ from what this Phoenix writes: reported (``_install.check_installed``), not changed.

Nothing is ever deleted that holds data; nothing is reset to defaults silently.
"""

from __future__ import annotations

import contextlib
import os
import stat
from itertools import pairwise

from phoenix_protocol.agent._replay import rebuild_state
from phoenix_protocol.agent._seqlog import SeqLog
from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._durable import (
    DIR_MODE,
    FILE_MODE,
    check_entry,
    host_tag,
    keep_damaged,
    move_aside,
    read_bytes,
    repair_tail,
    temp_writer,
    torn_tail_length,
)
from phoenix_protocol.core._errors import (
    CorruptStateError,
    NotFoundError,
    PhoenixError,
    SchemaVersionError,
    UnsafeFileError,
    UsageError,
)
from phoenix_protocol.core._jsonio import dumps_document

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

__all__ = ["Finding", "abandoned_temp", "check_home", "rebuild_state"]

TEMP_UNKNOWN_WRITER_AGE_MS = 3_600_000
"""A temporary file whose name names no writer is abandoned once it is this old (1 hour)."""


class Finding:
    """One thing the doctor found: ``level`` is ``ok``, ``warn`` or ``error``."""

    __slots__ = ("agent", "level", "message", "path", "repaired")

    def __init__(
        self, level: str, message: str, *, agent: str | None = None, path: str | None = None, repaired: bool = False
    ) -> None:
        self.level = level
        # errors name their file ("PATH: ...", "PATH was written by ..."); the finding names it already
        if path and message.startswith(f"{path} was "):
            message = "this file was " + message.removeprefix(f"{path} was ")
        self.message = message.removeprefix(f"{path}: ") if path else message
        self.agent = agent
        self.path = path
        self.repaired = repaired

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "agent": self.agent,
            "path": self.path,
            "message": self.message,
            "repaired": self.repaired,
        }


def _check_modes(root: str, repair: bool, findings: list[Finding]) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name, wanted, is_dir in [(d, DIR_MODE, True) for d in dirnames] + [
            (f, FILE_MODE, False) for f in filenames
        ]:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) or (
                hasattr(os, "geteuid") and st.st_uid != os.geteuid()
            ):
                continue  # a link, a FIFO, another user's entry: not ours to change (_check_entries)
            mode = stat.S_IMODE(st.st_mode)
            if mode & ~wanted:
                what = "directory" if is_dir else "file"
                if repair:
                    try:
                        os.chmod(path, wanted)
                    except FileNotFoundError:  # removed meanwhile (a temp file renamed, another doctor)
                        continue
                findings.append(
                    Finding("warn", f"{what} mode {mode:04o} is wider than {wanted:04o}", path=path, repaired=repair)
                )
    try:
        mode = stat.S_IMODE(os.stat(root).st_mode)
        if mode & ~DIR_MODE:
            if repair:
                os.chmod(root, DIR_MODE)
            findings.append(Finding("warn", f"home mode {mode:04o} is wider than 0700", path=root, repaired=repair))
    except FileNotFoundError:
        pass


def abandoned_temp(path: str, now_ms: int) -> bool:
    """Whether ``path`` is a temporary file of an atomic write (``_durable``) that no writer
    will ever finish: the temporary file of a write still in progress is not.

    Its name carries its writer's pid and host (``.<name>.<pid>.<n>.<host tag>.tmp``, see
    ``_durable.temp_name``). A writer on this host (or a name from before host tags,
    ``.<name>.<pid>.<n>.tmp``, which only this host's writers made) is gone when no process has
    that pid any more, or the one that has it started after the file was last written (the pid
    was reused). A writer that cannot be inspected counts as alive. A writer on another host (a
    home shared between machines) cannot be inspected from here, and a name without a pid names
    no writer: such a file is abandoned once it is ``TEMP_UNKNOWN_WRITER_AGE_MS`` old (its
    modification time against ``now_ms``, the agent's clock), far longer than any write takes.
    A file already gone is not.
    """
    name = os.path.basename(path)
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    writer = temp_writer(name)
    if writer is None or writer[1] not in (None, host_tag()):  # no writer, or another host's
        return now_ms - st.st_mtime_ns // 1_000_000 >= TEMP_UNKNOWN_WRITER_AGE_MS
    return not _may_still_write(writer[0], st.st_mtime)


def _may_still_write(pid: int, written_at: float) -> bool:
    """Whether process ``pid`` may be the writer of a file last written at ``written_at``
    (seconds since the epoch): it runs, and started no later than that (give or take the
    second by which the kernel's start times may be off). One not ours to inspect may."""
    from phoenix_protocol.core._process import process_state

    if pid <= 0:
        return False
    running, started = process_state(pid)
    return running and (started is None or started <= written_at + 1.0)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


_LINE_FINDINGS = 20
"""Unreadable lines reported one by one per file; the others are counted."""


def _check_log(log: SeqLog, aid: str, repair: bool, findings: list[Finding], now_ms: int = 0) -> list[dict[str, Any]]:
    """Report (and with ``repair`` cut off) a JSON-lines log's torn last line, and report its
    unreadable lines (readers skip them; they stay for forensics); returns its records. A log
    its appenders refuse (a torn tail longer than a record, no record near its end: a hook's
    append fails on it every time) is an error; ``repair`` keeps a long tail aside as
    ``<log>.corrupt-<time>`` before cutting it, and moves a log without a record near its end
    aside whole (the log goes on in a new file)."""
    from phoenix_protocol.agent._seqlog import MAX_LINE

    records, problems = log.read()
    unreadable: dict[str, int] = {}
    for problem in problems:
        if problem.kind == "torn-tail" and problem.path == log.path:
            if repair:
                with log.lock():
                    data = read_bytes(log.path, limit=log.max_read) or b""
                    tail = len(data) - (data.rfind(b"\n") + 1)
                    kept = keep_damaged(log.path, data[len(data) - tail :], now_ms) if tail > MAX_LINE else None
                    del data
                    removed = repair_tail(log.path)
                findings.append(
                    Finding(
                        "warn",
                        f"torn last line cut off ({removed} bytes, never acknowledged)"
                        + (f"; kept as {os.path.basename(kept)}" if kept else ""),
                        agent=aid,
                        path=problem.path,
                        repaired=repair,
                    )
                )
            else:
                tail = torn_tail_length(read_bytes(log.path, limit=log.max_read) or b"")
                level = "error" if tail > MAX_LINE else "warn"  # appends refuse to cut it: they fail
                findings.append(Finding(level, problem.message, agent=aid, path=problem.path))
        else:
            unreadable[problem.path] = unreadable.get(problem.path, 0) + 1
            if unreadable[problem.path] <= _LINE_FINDINGS:
                findings.append(
                    Finding("warn", f"line {problem.line}: {problem.message}", agent=aid, path=problem.path)
                )
    for path, count in unreadable.items():
        if count > _LINE_FINDINGS:
            findings.append(Finding("warn", f"{count - _LINE_FINDINGS:,} more unreadable lines", agent=aid, path=path))
    try:
        log.last_seq()
    except UnsafeFileError as exc:  # appends would fail on it every time
        finding = Finding("error", str(exc), agent=aid, path=log.path)
        findings.append(finding)
        if repair:
            with log.lock():
                kept_as = move_aside(log.path, now_ms)
            finding.repaired = True
            findings.append(
                Finding(
                    "warn",
                    f"moved aside as {os.path.basename(kept_as)} (kept whole); the log goes on in a new file",
                    agent=aid,
                    path=log.path,
                    repaired=True,
                )
            )
    return records


def _agent_files(agent: Agent) -> list[tuple[str, int | None]]:
    """Every file of ``agent`` that the hooks or the CLI read or write, with the most Phoenix
    reads of it (``None``: never read, a lock)."""
    from phoenix_protocol.agent._identity import MAX_DIGEST_BYTES, MAX_IDENTITY_BYTES
    from phoenix_protocol.agent._state import MAX_STATE_BYTES

    log = agent.ops.log
    injections = os.path.join(agent.dir, "injections.json")
    files: list[tuple[str, int | None]] = [(agent.state.path, MAX_STATE_BYTES), (log.path, log.max_read)]
    files += [(f"{log.path}.{i}", log.max_read) for i in range(1, log.keep + 1)]
    files += [
        (agent.brief_path, max(1 << 20, 4 * agent.config.brief_max_chars)),
        (agent.identity.path, MAX_IDENTITY_BYTES),
        (agent.identity.digest_path, MAX_DIGEST_BYTES),
        (os.path.join(agent.dir, ".store-sync"), 64),  # integrations._hooks.SYNC_MARK
        (os.path.join(agent.dir, ".pre-compact"), 256),  # integrations._pre_compact.MARK
        (injections, 1 << 20),  # integrations._context: INJECTIONS, MAX_INJECTIONS_BYTES
    ]
    locks = [(path + ".lock", None) for path in (agent.state.path, log.path, agent.identity.path, injections)]
    return locks + files  # locks first: moving a data file aside takes its lock


def _check_entries(agent: Agent, repair: bool) -> tuple[list[Finding], set[str], bool]:
    """The agent's directories and files as entries (see the module docstring); ``repair`` moves
    a refused one aside. Returns the findings, the paths still refused (not repaired), and
    whether the agent's directory can be checked further."""
    findings: list[Finding] = []
    refused: set[str] = set()
    aid = agent.id
    home = agent.home.root
    for directory in (os.path.join(home, "agents"), agent.dir):
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return findings, refused, False
        problem = None
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(directory)
            problem = f"is a symbolic link (to {target}), not a directory of the home: Phoenix does not follow it"
        elif not stat.S_ISDIR(st.st_mode):
            problem = "is not a directory: Phoenix cannot keep the agent's files there"
        elif hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            problem = f"is owned by another user (uid {st.st_uid}): Phoenix does not use it"
        if problem is None:
            continue
        finding = Finding("error", problem, agent=aid, path=directory)
        findings.append(finding)
        if repair:
            kept = move_aside(directory, agent.clock.now_ms())
            finding.repaired = True
            findings.append(
                Finding(
                    "warn",
                    f"moved aside as {os.path.basename(kept)} (nothing in it or behind it was changed or deleted); "
                    "the agent starts again from no state there",
                    agent=aid,
                    path=directory,
                    repaired=True,
                )
            )
        else:
            refused.add(directory)
        return findings, refused, False
    for path, limit in _agent_files(agent):
        problem_ = check_entry(path, limit=limit)
        if problem_ is None:
            continue
        message = str(problem_).removeprefix(f"{path} ").split(" Run `phx doctor`", 1)[0]
        finding = Finding("error", message, agent=aid, path=path)
        findings.append(finding)
        if not repair:
            refused.add(path)
            continue
        lock = None if path.endswith(".lock") else (agent.state.lock() if path == agent.state.path else None)
        with lock if lock is not None else contextlib.nullcontext():
            kept = move_aside(path, agent.clock.now_ms())
        finding.repaired = True
        rebuilt = {
            agent.state.path: "; the state is rebuilt from the ops log below",
            agent.identity.path: "; the identity is restored from a checkpoint below",
            agent.brief_path: "; the next session start writes a new one",
        }.get(
            path,
            "; Phoenix writes a new one when it needs it"
            if path.endswith((".lock", ".store-sync", ".pre-compact"))
            else "",
        )
        if path == agent.ops.path or path.startswith(agent.ops.path + "."):
            rebuilt = "; its events are not read any more (the log goes on without them)"
        findings.append(
            Finding(
                "warn",
                f"moved aside as {os.path.basename(kept)} (kept whole; nothing it points to was touched){rebuilt}",
                agent=aid,
                path=path,
                repaired=True,
            )
        )
    return findings, refused, True


def check_agent(agent: Agent, *, repair: bool = True) -> list[Finding]:
    """Check (and repair) one agent; returns what was found."""
    aid = agent.id
    findings, refused, go_on = _check_entries(agent, repair)
    if not go_on:
        return findings or [Finding("ok", "no state yet", agent=aid, path=agent.dir)]
    if refused:  # --check: what reads a refused file would only say so again
        return findings
    # Leftover temporary files from killed writers.
    try:
        names = os.listdir(agent.dir)
    except FileNotFoundError:
        return [Finding("ok", "no state yet", agent=aid, path=agent.dir)]
    for name in names:
        path = os.path.join(agent.dir, name)
        if abandoned_temp(path, agent.clock.now_ms()):
            if repair:
                with contextlib.suppress(FileNotFoundError):  # another doctor removed it first
                    os.unlink(path)
            findings.append(
                Finding("warn", "temporary file left by an interrupted write", agent=aid, path=path, repaired=repair)
            )
    # The ops log (this home's file: on the PostgreSQL store, this machine's copy).
    events = _check_log(agent.ops.log, aid, repair, findings, agent.clock.now_ms())
    seqs = [e["seq"] for e in events]
    if seqs:
        gaps = sum(1 for a, b in pairwise(seqs) if b != a + 1)
        if gaps:
            findings.append(
                Finding(
                    "warn",
                    f"seq has {gaps} gap(s) or reordering(s) (lines lost or edited)",
                    agent=aid,
                    path=agent.ops.path,
                )
            )
        if seqs[0] != 1:
            findings.append(
                Finding(
                    "ok",
                    f"oldest event kept is seq {seqs[0]} (older ones rotated away)",
                    agent=aid,
                    path=agent.ops.path,
                )
            )
    # state.json (this home's file).
    try:
        agent.state.read_local()
        if agent.state.exists():
            findings.append(Finding("ok", "state.json is valid", agent=aid, path=agent.state.path))
        elif agent.state.remote is None:  # on PostgreSQL the server's record is the state (``_check_copy``)
            findings += _lost_state(agent, repair)
    except SchemaVersionError as exc:
        findings.append(Finding("error", str(exc), agent=aid, path=agent.state.path))
    except CorruptStateError as exc:
        unreadable = Finding("error", str(exc), agent=aid, path=agent.state.path)
        findings.append(unreadable)
        if repair:
            findings.append(_rebuild(agent, events))
            unreadable.repaired = True
    if agent.state.remote is not None and not any(f.level == "error" for f in findings):
        findings.append(_check_copy(agent, repair))
    findings += _check_checkpoints(agent, repair)
    findings += _check_identity(agent, repair)
    return findings


def _check_copy(agent: Agent, repair: bool) -> Finding:
    """On the PostgreSQL store: whether this machine's copy holds changes the server lacks
    (``repair`` passes them on, as the next sync would)."""
    from phoenix_protocol.core._errors import PhoenixError

    record = agent.store_record()
    try:
        pending = record.pending()
        where = record.server
        if pending["events"] or pending["state"]:
            what = f"{pending['events']} event(s)" + (" and the state" if pending["state"] else "")
            if repair:
                record.sync()
                return Finding("warn", f"{what} passed on to {where}", agent=agent.id, path=where, repaired=True)
            return Finding(
                "warn", f"{what} not yet on {where} (the next sync passes them on; `phx db sync` now)", agent=agent.id
            )
        if pending["behind"]:
            return Finding(
                "ok",
                f"{where} holds a newer record (changed elsewhere); this copy takes it with its next change",
                agent=agent.id,
            )
        return Finding("ok", f"this machine's copy and {where} agree", agent=agent.id, path=where)
    except PhoenixError as exc:
        return Finding("error", str(exc), agent=agent.id, path=record.server)


def _owner_by_name(name: str) -> str | None:
    """The agent a checkpoint's name says it belongs to (``None``: a name of no such form)."""
    from phoenix_protocol.store._checkpoints import parse_name

    parsed = parse_name(name)
    return parsed[0] if parsed is not None else None


def _check_checkpoints(agent: Agent, repair: bool) -> list[Finding]:
    """The agent's checkpoint and session files of an earlier release are imported (``repair``;
    else reported); every checkpoint in the database verifies."""
    aid = agent.id
    store = agent.checkpoints
    findings: list[Finding] = []
    left = [d for d in ("checkpoints", "sessions") if os.path.isdir(os.path.join(agent.dir, d))]
    db = store.backend.db
    if left and not repair:
        findings.append(
            Finding(
                "warn",
                f"{' and '.join(d + '/' for d in left)} of an earlier release not imported into {db.where} yet: "
                "the agent's next use (or `phx doctor`) imports them, keeping the files aside",
                agent=aid,
                path=agent.dir,
            )
        )
        return findings
    if left:
        from phoenix_protocol.services._checkpoint_import import import_agent_files

        try:
            report = import_agent_files(agent, db)
        except PhoenixError as exc:
            return [Finding("error", str(exc), agent=aid, path=os.path.join(agent.dir, left[0]))]
        except OSError as exc:
            return [Finding("error", f"the import stopped: {exc}", agent=aid, path=os.path.join(agent.dir, left[0]))]
        if report is not None:
            findings.append(
                Finding(
                    "warn",
                    f"{' and '.join(d + '/' for d in left)} of an earlier release imported into {db.where} "
                    f"({report['checkpoints']} checkpoint(s), {report['sessions']} session record(s)); "
                    "the files are kept as *.migrated-<time>",
                    agent=aid,
                    path=agent.dir,
                    repaired=True,
                )
            )
            left_out = [*report.get("left_out", []), *report.get("not_this_agents", [])]
            if left_out:
                findings.append(
                    Finding(
                        "error",
                        f"{len(left_out)} checkpoint file(s) not imported (another agent's, or a name or number the "
                        f"database already holds): {', '.join(left_out[:3])}{' ...' if len(left_out) > 3 else ''}; "
                        "they stay in checkpoints.migrated-<time> for you to inspect",
                        agent=aid,
                        path=agent.dir,
                    )
                )
    if not db.exists():
        return findings
    if not repair:
        from phoenix_protocol.store import _schema

        if _schema.status(db)["pending"]:
            return findings  # the store's own check reports it; reading would migrate it
    valid = 0
    for info in store.entries():
        where = store.backend.where(info.name)
        try:
            owner = _owner_by_name(info.name)
            checkpoint = store.read(info.name) if owner in (None, aid) else None
            if checkpoint is None or checkpoint.agent_id != aid:
                findings.append(
                    Finding(
                        "error",
                        f"belongs to agent {owner if checkpoint is None else checkpoint.agent_id!r}, not {aid!r} "
                        "(imported from a file copied in by hand?): `latest` and restore skip it",
                        agent=aid,
                        path=where,
                    )
                )
                continue
            valid += 1
        except (CorruptStateError, SchemaVersionError, UsageError) as exc:
            if isinstance(exc, NotFoundError) and info.name not in {e.name for e in store.entries()}:
                continue  # dropped by a writer (retention) since it was listed: nothing is wrong
            newer = isinstance(exc, SchemaVersionError)
            findings.append(
                Finding(
                    "warn" if newer else "error",
                    f"{exc} `latest` skips it" + (" until then" if newer else ""),
                    agent=aid,
                    path=where,
                )
            )
    where = store.backend.where("").rstrip("/")
    findings.append(Finding("ok", f"{valid} checkpoint(s) verified", agent=aid, path=where))
    return findings


def _check_identity(agent: Agent, repair: bool) -> list[Finding]:
    """The identity reads and its core matches its seal; a damaged file (``repair``) is restored
    from the newest checkpoint holding a copy, and so is a missing one whose seal is still there; a
    damaged seal is written again when the ops log says the core is the one last sealed. A core
    edited by hand is reported, never undone."""
    store = agent.identity
    if not store.exists() and not os.path.exists(store.digest_path):
        return []
    from phoenix_protocol.core._errors import PhoenixError

    path = store.path
    try:
        identity = store.read()
    except CorruptStateError as exc:
        damaged = Finding("error", str(exc), agent=agent.id, path=path)
        if not repair:
            return [damaged]
        try:
            done = store.repair()
        except PhoenixError as failed:
            return [Finding("error", str(failed), agent=agent.id, path=path)]
        if done is None:  # changed meanwhile (fixed by hand, or the PostgreSQL store's row)
            return _check_identity(agent, repair=False)
        damaged.repaired = True
        if done.checkpoint is None:  # the PostgreSQL store's row: nothing to replay over it
            source, replayed = "the PostgreSQL store's record", ""
        else:
            source = f"checkpoint {done.checkpoint}"
            replayed = (
                f"; {len(done.replayed)} change(s) made after it replayed from the ops log"
                if done.replayed
                else "; no change made after it to replay"
            )
        later = (
            f"; {len(done.later_changes)} change(s) logged without their value are not in it: "
            + "; ".join(done.later_changes[:5])
            + (" ..." if len(done.later_changes) > 5 else "")
            if done.later_changes
            else ""
        )
        kept = (
            f"the damaged file kept as {os.path.basename(done.kept_as)}"
            if done.kept_as is not None
            else "the file was missing"
        )
        restored = Finding(
            "warn",
            f"identity.yaml restored from {source} ({kept}){replayed}{later}",
            agent=agent.id,
            path=path,
            repaired=True,
        )
        return [damaged, restored]
    except PhoenixError as exc:
        return [Finding("error", str(exc), agent=agent.id, path=path)]
    seal = store.seal_problem()
    if seal is not None:
        if not repair:
            return [
                Finding(
                    "warn",
                    f"{seal}; `phx doctor` writes it again if the ops log vouches for the core",
                    agent=agent.id,
                    path=path,
                )
            ]
        if store.reseal():
            return [
                Finding(
                    "warn",
                    f"{seal}: written again (the core is the one the ops log says was last sealed)",
                    agent=agent.id,
                    path=store.digest_path,
                    repaired=True,
                )
            ]
        return [
            Finding(
                "error",
                f"{seal}, and the ops log cannot vouch for the core: review identity.yaml, then run "
                "`phx identity reset-core` to seal it",
                agent=agent.id,
                path=store.digest_path,
            )
        ]
    from phoenix_protocol.agent._identity import redacted_core

    if redacted_core(identity.immutable) != identity.immutable:
        # Reported, not changed: the core is the user's to change, and the redactor may take a
        # value for a secret that is none (`auth: oauth2-pkce`).
        return [
            Finding(
                "warn",
                "the sealed core holds what looks like a secret in clear (sealed before Phoenix redacted a core "
                "written by hand): review identity.yaml; if it is one, `phx identity reset-core` seals it with the "
                "secret redacted (if it is none, leave it)",
                agent=agent.id,
                path=path,
            )
        ]
    return [Finding("ok", "identity.yaml is valid and its core matches its seal", agent=agent.id, path=path)]


def _lost_state(agent: Agent, repair: bool) -> list[Finding]:
    """A missing state.json whose history the ops log holds (``StateStore.lost``): the next write
    rebuilds it from the log; ``repair`` writes it now."""
    lost = agent.state.lost(thorough=True)
    if lost is None:
        return []
    state, meta = lost
    what = (
        f"missing, though the ops log holds its history (events seq {meta['first_seq']}..{meta['last_seq']}): "
        f"status {state.status}, task {state.current_task or '(none)'!r}, {len(state.open_loops)} open loop(s), "
        f"{len(state.next_actions)} next action(s)"
    )
    if not repair:
        return [Finding("error", what + "; the next write rebuilds it (or run `phx doctor`)", agent=agent.id,
                        path=agent.state.path)]  # fmt: skip
    with agent.state.lock():
        agent.state.change_locked(lambda _state: None)  # rebuilds it and logs state_rebuilt
    return [Finding("warn", what + "; rebuilt from the log", agent=agent.id, path=agent.state.path, repaired=True)]


def _rebuild(agent: Agent, events: list[dict[str, Any]]) -> Finding:
    with agent.state.lock():
        data = read_bytes(agent.state.path)
        # Someone may have repaired it meanwhile.
        try:
            if data is not None:
                agent.state.parse(data)
                return Finding(
                    "ok", "state.json became valid meanwhile; left as it is", agent=agent.id, path=agent.state.path
                )
        except (CorruptStateError, SchemaVersionError):
            pass
        kept = keep_damaged(agent.state.path, data, agent.clock.now_ms()) if data is not None else ""
        state, used = rebuild_state(events)
        agent.state.write_locked(state)
    first = events[0]["seq"] if events else None
    last = events[-1]["seq"] if events else None
    source = ", ".join(os.path.basename(p) for p in agent.ops.log.files()) or "nothing (no ops log)"
    detail = (
        f"rebuilt from {len(events)} events (seq {first}..{last}) in {source}: status {state.status}, "
        f"task {state.current_task or '(none)'!r}, {len(state.open_loops)} open loop(s), "
        f"{len(state.next_actions)} next action(s), heartbeat {state.heartbeat_seq}"
        + (f"; used {', '.join(used)}" if used else "")
        + (f"; the damaged file is kept as {os.path.basename(kept)}" if data is not None else "")
    )
    agent.record("state_rebuilt", "warn", {"events": len(events), "first_seq": first, "last_seq": last}, trusted=True)
    return Finding("warn", detail, agent=agent.id, path=agent.state.path, repaired=True)


def check_home(
    home: Home,
    agents: list[Agent],
    *,
    repair: bool = True,
    hook_problems: Callable[[str | None], list[tuple[str, str, str]]] | None = None,
    config: Config | None = None,
) -> list[Finding]:
    """Check the home's permissions, its store and every agent in ``agents``, on ``config``
    (default: the home's; one that does not read is a finding, and the store goes unchecked).
    ``hook_problems(project_dir)``: what is wrong with the hook commands installed for this
    project, as ``(scope, settings file, problem)`` (the CLI passes the Claude Code installer's
    check; reported only: the settings are not the home's to change). A problem that names no
    `phx` command to fix it gets ``phx install claude-code --scope <scope>``."""

    def hook_commands() -> list[Finding]:
        return [
            Finding(
                "warn",
                problem
                if "`phx " in problem
                else f"{problem}: `phx install claude-code --scope {scope}` rewrites them",
                path=path,
            )
            for scope, path, problem in (hook_problems(home.project_root) if hook_problems else [])
        ]

    findings: list[Finding] = []
    if not os.path.isdir(home.root):
        return [
            Finding("ok", "no Phoenix home yet (nothing to check)", path=home.root),
            *hook_commands(),
        ]
    findings.extend(_check_home_entries(home, repair))
    _check_modes(home.root, repair, findings)
    if config is None:
        from phoenix_protocol.core._config import load_config

        try:
            config = load_config(home.root, project_root=home.project_root)
        except PhoenixError as exc:
            findings.append(Finding("error", str(exc), path=home.root))
    if config is not None:
        findings.extend(_check_store(config, repair))
        findings.extend(_check_memory_and_tokens(home, config, repair))
    findings.extend(hook_commands())
    for agent in agents:
        findings.extend(check_agent_apart(agent, repair=repair))
    return findings


_HOME_FILES = (".gitignore", "phoenix.db", "phoenix.db-wal", "phoenix.db-shm", "phoenix.db-journal", "phoenix.db.lock")
"""The home's own files that Phoenix (or SQLite, for Phoenix) opens: regular files of the user only."""


def _check_home_entries(home: Home, repair: bool) -> list[Finding]:
    """The home's own files as entries (as ``_check_entries`` for an agent's): a FIFO, a link, a
    directory or another user's file in place of one is reported and, with ``repair``, moved
    aside whole. (``phoenix.toml`` is read before anything else: one that is no regular file
    stops every command with a message saying so.)"""
    from phoenix_protocol.core._clock import system_clock

    findings: list[Finding] = []
    for name in _HOME_FILES:
        path = os.path.join(home.root, name)
        problem = check_entry(path)
        if problem is None:
            continue
        message = str(problem).removeprefix(f"{path} ").split(" Run `phx doctor`", 1)[0]
        finding = Finding("error", message, path=path)
        findings.append(finding)
        if not repair:
            continue
        kept = move_aside(path, system_clock.now_ms())
        finding.repaired = True
        lost = (
            "; what it pointed to or held is not read as the store any more (a new database is started)"
            if name.startswith("phoenix.db") and not name.endswith(".lock")
            else ""
        )
        findings.append(
            Finding(
                "warn",
                f"moved aside as {os.path.basename(kept)} (kept whole; nothing it points to was touched){lost}",
                path=path,
                repaired=True,
            )
        )
    return findings


def check_agent_apart(agent: Agent, *, repair: bool = True) -> list[Finding]:
    """``check_agent``, its failure a finding: one agent's trouble does not hide the others'."""
    from phoenix_protocol.core._errors import PhoenixError

    try:
        return check_agent(agent, repair=repair)
    except PhoenixError as exc:
        path = getattr(exc, "path", None) or agent.dir
        return [Finding("error", f"its check stopped: {exc}", agent=agent.id, path=path)]


def _check_memory_and_tokens(home: Home, config: Config, repair: bool) -> list[Finding]:
    """An earlier release's ``memory/memory.sqlite3`` and ``tokens.json`` not moved into the
    database yet (``repair`` moves them, as first use would), and token records that authenticate
    nothing (reported: ``phx token revoke`` is the fix)."""
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.store import _move_memory

    if _move_memory.pending(home):
        if not repair:
            return [
                Finding(
                    "warn", "memories and tokens of an earlier release wait to move into the database", path=home.root
                )
            ]
        try:
            from phoenix_protocol.store._db import open_database

            moved = _move_memory.move_earlier_files(home, open_database(home, config))
        except PhoenixError as exc:
            return [Finding("error", str(exc), path=getattr(exc, "path", None) or home.root)]
        if moved is not None:
            return [
                Finding(
                    "warn",
                    f"{moved['memories']} memories and {moved['tokens']} tokens of an earlier release moved into "
                    f"{moved['database']} (kept aside: {', '.join(moved['kept_aside'])})",
                    path=home.root,
                    repaired=True,
                )
            ]
        return []
    from phoenix_protocol.store import _schema
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._tokens import TokenStore

    db = open_database(home, config)
    try:
        if not db.exists() or (_schema.status(db)["pending"] and not repair):
            return []  # nothing stored yet, or a schema --check must not migrate
        problems = TokenStore(home, config=config).problems()
    except PhoenixError as exc:
        if db.engine == "postgresql":
            return []  # the store's check names the server's trouble
        return [Finding("error", str(exc), path=getattr(exc, "path", None) or home.root)]
    return [Finding("warn", problem) for problem in problems]


def _check_store(config: Config, repair: bool) -> list[Finding]:
    """With the PostgreSQL store: the server answers and its schema is current (``repair``
    applies pending migrations, as first use would). Nothing to check for the file store here."""
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.store._pg import is_postgres_url

    store = config.store
    if not is_postgres_url(store):
        return []
    from phoenix_protocol.store import _pg

    try:
        status = _pg.status(store)
        if status["current"] > status["latest"]:
            raise SchemaVersionError(
                f"the PostgreSQL store {status['server']} was migrated by a newer Phoenix "
                f"(schema {status['current']}; this one knows up to {status['latest']}): upgrade phoenix-protocol."
            )
        pending = len(status["pending"])
        if pending and repair:
            _pg.migrate(store)
            return [
                Finding(
                    "warn",
                    f"store {status['server']}: {pending} migration(s) applied",
                    path=status["server"],
                    repaired=True,
                )
            ]
        if pending:
            return [
                Finding(
                    "warn",
                    f"store {status['server']}: {pending} migration(s) pending (`phx db migrate`)",
                    path=status["server"],
                )
            ]
        return [
            Finding("ok", f"store {status['server']}: schema {status['current']} is current", path=status["server"])
        ]
    except PhoenixError as exc:
        return [Finding("error", str(exc), path=_pg.describe(store))]


def describe_state(state: AgentState) -> str:
    """The state as it would be written (for reports)."""
    return dumps_document(state.to_dict())
