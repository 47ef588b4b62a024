"""Agents' checkpoints as rows of the home's database (``phx_checkpoints``), on either engine.

The store (``phoenix_protocol.services._checkpoints.CheckpointStore``) builds the envelope, its checksum
and its name; this module keeps them, with the catalogue's metadata beside the body, so that
listing reads no body.

- ``content`` is seed 003's JSON document as text (``sqlite3 .phoenix/phoenix.db "select content
  from phx_checkpoints" | jq`` works), ``checksum`` its own column: ``xxh3-128:<hex>`` of the
  content's UTF-8 bytes; ``line:<algorithm>:<hex>`` for a checkpoint written by an earlier release
  (the checksum its file's last line held: of the document up to its last field, then ``,\\n``;
  migration 9 and the import of a home's files keep it as it was); ``legacy`` for one whose file
  did not read as that (damaged, or a row migration 9 could not convert): its bytes are in
  ``legacy``, and a read reports it as the file was reported.
- A write is one transaction: the agent's row of ``phx_checkpoint_seq`` is locked (PostgreSQL:
  ``FOR UPDATE``, across machines; SQLite: ``BEGIN IMMEDIATE`` holds the database), what
  retention needs of the catalogue is read, the checkpoint inserted, what retention drops
  deleted, and the next seq stored. The seq counter never goes back, so a seq is never reused
  even when retention deleted the newest. Durable when the transaction returns (WAL with
  ``synchronous=FULL``, or the server's commit): a writer killed before that leaves nothing.
- Operation outcomes are rows of ``phx_checkpoint_operations``, in the order they were recorded.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable, Iterator
from datetime import date as _date
from typing import TYPE_CHECKING, Any, NamedTuple

from phoenix_protocol.core._clock import iso_from_ms
from phoenix_protocol.store._db import AgentRows

if TYPE_CHECKING:
    from phoenix_protocol.store._db import Database, Tx

__all__ = [
    "CHECKPOINT_TYPES",
    "SUFFIX",
    "CheckpointInfo",
    "CheckpointRows",
    "Stored",
    "View",
    "agents_with_checkpoints",
    "lock_agent",
    "make_name",
    "parse_name",
]

CHECKPOINT_TYPES = ("routine", "pre-operation", "recovery", "session")
SUFFIX = ".checkpoint"
LEGACY = "legacy"
"""The ``checksum`` of a row whose body is still an earlier release's file bytes (``legacy`` column)."""
_EPOCH_DAY = _date(1970, 1, 1).toordinal()


class CheckpointInfo:
    """What the catalogue knows of a checkpoint, without reading it."""

    __slots__ = ("checkpoint_type", "failed_sections", "label", "name", "operation_id", "seq", "size", "timestamp_ms")

    def __init__(
        self,
        name: str,
        seq: int,
        checkpoint_type: str,
        timestamp_ms: int,
        *,
        label: str | None = None,
        operation_id: str | None = None,
        size: int = 0,
    ) -> None:
        self.name = name
        self.seq = seq
        self.checkpoint_type = checkpoint_type
        self.timestamp_ms = timestamp_ms
        self.label = label
        self.operation_id = operation_id
        self.size = size
        self.failed_sections: tuple[str, ...] = ()
        """The sections whose collector failed, as ``create`` returns them (not stored in the
        catalogue: read the checkpoint for those of another)."""

    @property
    def timestamp(self) -> str:
        return iso_from_ms(self.timestamp_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seq": self.seq,
            "checkpoint_type": self.checkpoint_type,
            "timestamp": self.timestamp,
            "timestamp_ms": self.timestamp_ms,
            "label": self.label,
            "operation_id": self.operation_id,
            "size": self.size,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointInfo:
        return cls(
            str(data["name"]),
            int(data["seq"]),
            str(data["checkpoint_type"]),
            int(data["timestamp_ms"]),
            label=data.get("label"),
            operation_id=data.get("operation_id"),
            size=int(data.get("size", 0)),
        )

    def __repr__(self) -> str:
        return f"CheckpointInfo({self.name!r})"


def parse_name(name: str) -> tuple[str, int, int, str] | None:
    """``(agent_id, seq, timestamp_ms, checkpoint_type)`` from a checkpoint's name, or ``None``."""
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    head, _, ctype = stem.rpartition("_")
    agent_id, _, stamp = head.rpartition("_")
    if ctype not in CHECKPOINT_TYPES or not agent_id:
        return None
    digits, _, seq = stamp.partition("-")
    if len(digits) != 17 or not digits.isdigit() or not seq.isdigit():
        return None
    hour, minute, second = int(digits[8:10]), int(digits[10:12]), int(digits[12:14])
    if hour > 23 or minute > 59 or second > 60:
        return None
    try:  # strptime would cost more than the rest of reading a small checkpoint
        day = _date(int(digits[:4]), int(digits[4:6]), int(digits[6:8])).toordinal() - _EPOCH_DAY
    except ValueError:
        return None
    ms = ((day * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + int(digits[14:])
    return agent_id, int(seq), ms, ctype


_name_second: tuple[int, str] = (-1, "")  # the last whole second formatted for a name


def make_name(agent_id: str, seq: int, timestamp_ms: int, checkpoint_type: str) -> str:
    """Seed 003's ``<agent_id>_<timestamp>_<checkpoint_type>.checkpoint``, the timestamp
    ``YYYYmmddHHMMSSmmm-<seq>``: unique even for many checkpoints within one second."""
    global _name_second
    secs, milli = divmod(timestamp_ms, 1000)
    last = _name_second
    if last[0] != secs:
        last = _name_second = (secs, time.strftime("%Y%m%d%H%M%S", time.gmtime(secs)))
    return f"{agent_id}_{last[1]}{milli:03d}-{seq:08d}_{checkpoint_type}{SUFFIX}"


class View:
    """What retention looks at when a checkpoint is written: the count of each type, and the
    checkpoints that could be dropped (every recovery and pre-operation one, and the oldest
    routine and session ones past what is kept), oldest first; ``next_seq``."""

    def __init__(self) -> None:
        self.next_seq = 1
        self.counts: dict[str, int] = {}
        self._types: dict[str, list[CheckpointInfo]] = {kind: [] for kind in CHECKPOINT_TYPES}

    def add(self, info: CheckpointInfo) -> None:
        bisect.insort(self._types.setdefault(info.checkpoint_type, []), info, key=_by_seq)
        if info.seq >= self.next_seq:
            self.next_seq = info.seq + 1

    def count(self, kind: str) -> int:
        """How many checkpoints of type ``kind`` there are (all of them)."""
        return self.counts.get(kind, 0)

    def by_type(self) -> dict[str, list[CheckpointInfo]]:
        """The candidates of each type, oldest first (do not change the lists)."""
        return self._types


def _by_seq(info: CheckpointInfo) -> int:
    return info.seq


class Stored(NamedTuple):
    """A checkpoint's body as kept: ``content`` (UTF-8 JSON), ``checksum``, and ``legacy``, an
    earlier release's file bytes when ``checksum`` is ``legacy``."""

    content: bytes
    checksum: str
    legacy: bytes | None


_COLUMNS = "name, seq, checkpoint_type, timestamp_ms, label, operation_id, size"
_FIRST = "CASE WHEN row_number() OVER (ORDER BY seq DESC) = 1 THEN {} END"
_NEWEST = {
    (typed, with_content): (
        f"SELECT {_COLUMNS}"  # noqa: S608 - constant SQL
        + (", " + ", ".join(_FIRST.format(c) for c in ("content", "checksum", "legacy")) if with_content else "")
        + " FROM phx_checkpoints WHERE agent_id = ?"
        + (" AND checkpoint_type = ?" if typed else "")
        + " AND seq < ? ORDER BY seq DESC LIMIT ?"
    )
    for typed in (False, True)
    for with_content in (False, True)
}
_COUNTS = "SELECT checkpoint_type, count(*) FROM phx_checkpoints WHERE agent_id = ? GROUP BY checkpoint_type"
_OF_TYPE = (
    f"SELECT {_COLUMNS} FROM phx_checkpoints WHERE agent_id = ? "  # noqa: S608 - constant SQL
    "AND checkpoint_type = ? ORDER BY seq"
)
_OLDEST = (
    f"SELECT {_COLUMNS} FROM phx_checkpoints WHERE agent_id = ? "  # noqa: S608 - constant SQL
    "AND checkpoint_type = ? ORDER BY seq LIMIT ?"
)
_INSERT = {
    # SQLite takes the body's UTF-8 bytes and stores them as TEXT (CAST): no decoding to a str
    # and encoding back in between; PostgreSQL takes text.
    False: "INSERT INTO phx_checkpoints (agent_id, name, seq, checkpoint_type, timestamp_ms, label, operation_id, "
    "size, content, checksum, legacy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS TEXT), ?, ?)",
    True: "INSERT INTO phx_checkpoints (agent_id, name, seq, checkpoint_type, timestamp_ms, label, operation_id, "
    "size, content, checksum, legacy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
}
_BODY = {
    # The body as bytes where the engine hands them over so (SQLite), as text elsewhere.
    (
        False,
        "seq",
    ): "SELECT CAST(content AS BLOB), checksum, legacy FROM phx_checkpoints WHERE agent_id = ? AND seq = ?",
    (
        False,
        "name",
    ): "SELECT CAST(content AS BLOB), checksum, legacy FROM phx_checkpoints WHERE agent_id = ? AND name = ?",
    (True, "seq"): "SELECT content, checksum, legacy FROM phx_checkpoints WHERE agent_id = ? AND seq = ?",
    (True, "name"): "SELECT content, checksum, legacy FROM phx_checkpoints WHERE agent_id = ? AND name = ?",
}
_ALL_SEQS = 2**62  # "before" for the first page: past any seq


def _info(row: Any) -> CheckpointInfo:
    name, seq, ctype, ms, label, op_id, size = row[:7]
    return CheckpointInfo(str(name), int(seq), str(ctype), int(ms), label=label, operation_id=op_id, size=int(size))


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return bytes(value)


def lock_agent(tx: Tx, agent_id: str) -> int:
    """Lock the agent's row of ``phx_checkpoint_seq`` until the commit (its checkpoints' and
    sessions' write lock, across machines on PostgreSQL); returns its next seq."""
    tx.execute("INSERT INTO phx_checkpoint_seq (agent_id, next_seq) VALUES (?, 1) ON CONFLICT DO NOTHING", (agent_id,))
    sql = "SELECT next_seq FROM phx_checkpoint_seq WHERE agent_id = ?" + tx.dialect.for_update  # noqa: S608
    found = tx.scalar(sql, (agent_id,))
    return int(found or 1)


Build = Callable[[View, Callable[[], set[str]]], tuple[CheckpointInfo, bytes, str, list[CheckpointInfo]]]
"""What ``create`` asks to write: from the view (and the operations that succeeded, asked for only
when needed), the new checkpoint, its content, its checksum and what retention drops."""
Choose = Callable[[View, Callable[[], set[str]]], list[CheckpointInfo]]


class CheckpointRows(AgentRows):
    """One agent's checkpoints in ``db``."""

    def __init__(self, db: Database, agent_id: str, *, keep_routine: int = 3, keep_session: int = 50) -> None:
        super().__init__(db, agent_id)
        self.keep = (keep_routine, keep_session)
        self._prefetched: tuple[str, Stored] | None = None  # the newest one's body, for the read that follows

    def where(self, name: str) -> str:
        """Where checkpoint ``name`` is, for messages: the database, the agent and the name."""
        return f"{self.db.where}#agents/{self.agent_id}/checkpoints/{name}"

    def ordered(self) -> list[CheckpointInfo]:
        """Every checkpoint, oldest first (metadata only)."""
        result: list[CheckpointInfo] = self._read(
            lambda tx: [
                _info(r)
                for r in tx.all(
                    f"SELECT {_COLUMNS} FROM phx_checkpoints WHERE agent_id = ? ORDER BY seq",  # noqa: S608 - constant
                    (self.agent_id,),
                )
            ],
            [],
        )
        return result

    def newest(
        self, checkpoint_type: str | None, limit: int | None, *, reading: bool = False
    ) -> Iterator[CheckpointInfo]:
        """Newest first, fetched a page at a time (``latest`` usually needs the first only);
        ``reading``: the caller reads the first one next (on PostgreSQL its body comes along)."""
        page = min(limit, 50) if limit is not None else 8
        before = _ALL_SEQS
        given = 0
        # On PostgreSQL the first page brings the newest body along (a round trip saved); SQLite
        # has no round trip to save, and its window function would copy every body of the page.
        prefetch = reading and self.db.dialect.postgres
        while limit is None or given < limit:
            with_content = prefetch and before == _ALL_SEQS
            rows: list[Any] = self._read(
                functools.partial(
                    self._page,
                    checkpoint_type=checkpoint_type,
                    before=before,
                    size=page,
                    with_content=with_content,
                    with_body=reading and not prefetch and before == _ALL_SEQS,
                ),
                [],
            )
            if with_content and rows:
                first = rows[0]
                self._prefetched = (str(first[0]), Stored(_bytes(first[7]), str(first[8]), _legacy(first[9])))
            elif reading and before == _ALL_SEQS and len(rows) > 1 and isinstance(rows[-1], Stored):
                self._prefetched = (str(rows[0][0]), rows.pop())
            for row in rows:
                yield _info(row)
                given += 1
                if limit is not None and given >= limit:
                    return
            if len(rows) < page:
                return
            before = int(rows[-1][1])
            page = min(page * 4, 500)

    def _page(
        self,
        tx: Tx,
        checkpoint_type: str | None,
        before: int,
        size: int,
        *,
        with_content: bool = False,
        with_body: bool = False,
    ) -> list[Any]:
        """A page of the catalogue; ``with_content``: the newest body in the rows (PostgreSQL's
        window); ``with_body``: appended as a ``Stored`` by a second statement of the same
        transaction (SQLite)."""
        typed = checkpoint_type is not None
        params = (self.agent_id, checkpoint_type, before, size) if typed else (self.agent_id, before, size)
        rows = tx.all(_NEWEST[typed, with_content], params)
        if with_body and rows:
            body = tx.one(_BODY[tx.dialect.postgres, "seq"], (self.agent_id, int(rows[0][1])))
            if body is not None:
                rows.append(Stored(_bytes(body[0]), str(body[1]), _legacy(body[2])))
        return rows

    def read(self, name: str) -> Stored | None:
        """The body of checkpoint ``name``, or ``None`` when there is none."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == name:
            return prefetched[1]

        def work(tx: Tx) -> Stored | None:
            row = tx.one(_BODY[tx.dialect.postgres, "name"], (self.agent_id, name))
            return Stored(_bytes(row[0]), str(row[1]), _legacy(row[2])) if row else None

        result: Stored | None = self._read(work)
        return result

    def _view(self, tx: Tx) -> View:
        """What retention needs, with the agent's write lock held until the commit: the count of
        each type, every recovery and pre-operation checkpoint (few), and only the oldest routine
        and session ones that could fall past what is kept once one more is written."""
        next_seq = lock_agent(tx, self.agent_id)
        view = View()
        view.counts = {str(kind): int(n) for kind, n in tx.all(_COUNTS, (self.agent_id,))}
        routine_excess = max(0, view.counts.get("routine", 0) + 1 - self.keep[0])
        session_excess = max(0, view.counts.get("session", 0) + 1 - self.keep[1])
        # One type per statement: each is a range of the (agent, type, seq) index (an IN list
        # made SQLite scan every row of the agent instead).
        candidates = tx.all(_OF_TYPE, (self.agent_id, "recovery")) + tx.all(_OF_TYPE, (self.agent_id, "pre-operation"))
        for kind, excess in (("routine", routine_excess), ("session", session_excess)):
            if excess:  # each by the (agent, type, seq) index: only the oldest that may drop
                candidates += tx.all(_OLDEST, (self.agent_id, kind, excess))
        for candidate in candidates:
            view.add(_info(candidate))
        view.next_seq = max(view.next_seq, next_seq)
        return view

    def _completed(self, tx: Tx) -> set[str]:
        rows = tx.all(
            "SELECT op_id FROM phx_checkpoint_operations WHERE agent_id = ? AND outcome = 'succeeded'",
            (self.agent_id,),
        )
        return {str(r[0]) for r in rows}

    def _delete(self, tx: Tx, drop: list[CheckpointInfo]) -> None:
        if drop:
            tx.execute(
                f"DELETE FROM phx_checkpoints WHERE agent_id = ? AND name IN ({tx.dialect.placeholders(len(drop))})",  # noqa: S608
                (self.agent_id, *[d.name for d in drop]),
            )

    def insert(self, tx: Tx, info: CheckpointInfo, content: bytes, checksum: str, legacy: bytes | None = None) -> None:
        """Insert a checkpoint (no lock taken: the caller holds ``lock_agent``)."""
        i = info
        postgres = tx.dialect.postgres
        text = content.decode("utf-8", "surrogatepass") if postgres else content
        tx.execute(
            _INSERT[postgres],
            (
                self.agent_id,
                i.name,
                i.seq,
                i.checkpoint_type,
                i.timestamp_ms,
                i.label,
                i.operation_id,
                i.size,
                text,
                checksum,
                legacy,
            ),
        )

    def write(self, build: Build) -> tuple[CheckpointInfo, list[CheckpointInfo]]:
        """One transaction: ``build`` from the current view under the agent's write lock, the new
        checkpoint inserted, what retention drops deleted. Durable when it returns."""

        def work(tx: Tx) -> tuple[CheckpointInfo, list[CheckpointInfo]]:
            view = self._view(tx)
            info, content, checksum, drop = build(view, lambda: self._completed(tx))
            self.insert(tx, info, content, checksum)
            self._delete(tx, drop)
            tx.execute(
                "UPDATE phx_checkpoint_seq SET next_seq = ? WHERE agent_id = ?",
                (max(view.next_seq, info.seq + 1), self.agent_id),
            )
            return info, drop

        result: tuple[CheckpointInfo, list[CheckpointInfo]] = self._write(work)
        return result

    def prune(self, choose: Choose) -> list[CheckpointInfo]:
        """Under the agent's write lock: delete what ``choose`` picks from the current view."""

        def work(tx: Tx) -> list[CheckpointInfo]:
            view = self._view(tx)
            drop = choose(view, lambda: self._completed(tx))
            self._delete(tx, drop)
            return drop

        result: list[CheckpointInfo] = self._write(work)
        return result

    def record_operation(self, record: dict[str, Any]) -> None:
        """Remember an operation's outcome (``{"id", "outcome", "at"}``)."""
        self._write(lambda tx: self.insert_operation(tx, record))

    def insert_operation(self, tx: Tx, record: dict[str, Any]) -> None:
        tx.execute(
            "INSERT INTO phx_checkpoint_operations (agent_id, op_id, outcome, at) VALUES (?, ?, ?, ?)",
            (self.agent_id, str(record["id"]), str(record["outcome"]), str(record["at"])),
        )

    def completed_operations(self) -> set[str]:
        """Ids of the operations that succeeded."""
        result: set[str] = self._read(self._completed, set())
        return result

    def operation_outcomes(self) -> dict[str, str]:
        """The outcome of each ended operation by its id: ``succeeded`` once a success is
        recorded, else ``failed``; an operation not in it is open."""
        outcomes: dict[str, str] = {}
        for record in self.operations():
            if outcomes.get(record["id"]) != "succeeded":
                outcomes[str(record["id"])] = str(record["outcome"])
        return outcomes

    def operations(self) -> list[dict[str, Any]]:
        """Every recorded outcome, in order (the lines ``operations.jsonl`` held in earlier releases)."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            rows = tx.all(
                "SELECT op_id, outcome, at FROM phx_checkpoint_operations WHERE agent_id = ? ORDER BY line",
                (self.agent_id,),
            )
            return [{"id": r[0], "outcome": r[1], "at": r[2]} for r in rows]

        result: list[dict[str, Any]] = self._read(work, [])
        return result

    def put_existing(self, tx: Tx, info: CheckpointInfo, content: bytes, checksum: str, legacy: bytes | None) -> bool:
        """Store an existing checkpoint as it is (an import), unless one of its name or number is
        there already (``False``); its seq moves the counter past it. The caller holds
        ``lock_agent``."""
        taken = tx.scalar(
            "SELECT count(*) FROM phx_checkpoints WHERE agent_id = ? AND (name = ? OR seq = ?)",
            (self.agent_id, info.name, info.seq),
        )
        if int(taken or 0):
            return False
        self.insert(tx, info, content, checksum, legacy)
        tx.execute(
            "UPDATE phx_checkpoint_seq SET next_seq = ? WHERE agent_id = ? AND next_seq <= ?",
            (info.seq + 1, self.agent_id, info.seq),
        )
        return True


def _legacy(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def agents_with_checkpoints(db: Database) -> list[str]:
    """Every agent the database holds checkpoints, operation outcomes or sessions of."""

    def work(tx: Tx) -> list[str]:
        rows = tx.all(
            "SELECT agent_id FROM phx_checkpoints UNION SELECT agent_id FROM phx_checkpoint_operations "
            "UNION SELECT agent_id FROM phx_session_current UNION SELECT agent_id FROM phx_session_log ORDER BY 1"
        )
        return [str(r[0]) for r in rows]

    result: list[str] = db.read(work)
    return result
