"""The team mailbox: append-only JSON lines, idempotent sends, per-reader cursors, acknowledgements.

Guarantees
----------
- **Every message stored once, every seq once.** ``send`` assigns ``seq`` = previous + 1 under the
  mailbox lock (``SeqLog``), after looking the sender-supplied ``msg_id`` up: an id already stored
  (by any sender of the team, at any time, archived or not) returns the original message with
  ``duplicate=True`` and writes nothing. A retry after a timeout, a partition or a SIGKILL is safe.
- **Durable before it returns.** The line is written under the lock and fsynced after the lock is
  released, so concurrent senders share journal commits (group commit) instead of queueing behind
  each other's fsync; ``send`` returns only once its own line is on disk. Rotation fsyncs a
  segment before renaming it, and ``mark_delivered`` fsyncs the mailbox before it moves a cursor,
  so no reader is ever told about a message a power loss could take back.
- **Delivered only after it was handed over, acknowledged only when the reader says so.** ``fetch``
  never moves the cursor; ``mark_delivered`` does (monotonic, durable); ``ack`` refuses a message
  that was not delivered to that reader, or not addressed to it.
- **Cost proportional to what is new.** Readers jump to their cursor with a binary search over
  byte offsets (lines are in seq order) and read forward; readers far behind use the recipient
  indexes. ``replay`` reads the tail backwards; ``stats`` reads names and one last line;
  ``unread_count`` counts with binary searches over fixed-width index lines. Only rebuilding a
  lost index, and ``compact`` (which reads the segments it considers), read much of the mailbox.
- **Nothing is deleted.** Past ``max_bytes`` the active file is renamed to a segment named by
  its seq range; ``compact`` moves segments whose every message every recipient acknowledged into
  ``mailbox.archive/``, where they stay readable. Phoenix never deletes either.

The indexes (``mailbox.index/``) are derived data, rebuilt from the segments when lost (delete
the directory; the next call rebuilds it). They lag the mailbox by up to ``INDEX_LAG`` messages:
each process covers the lag from the mailbox itself (its "tail": the lines after ``indexed_seq``,
read once and then followed), and a sender that sees the lag reach ``INDEX_LAG`` appends the
missing entries, fsyncs them, then advances ``indexed_seq`` in ``state.json``. A crash at any
point leaves at worst duplicate or surplus entries past ``indexed_seq``, which readers ignore and
the next indexing cuts off.

On-disk layout (in the team's directory; files 0600, directories 0700; every record has
``schema_version``)::

    mailbox.jsonl                          active segment: one message per line, seq-ordered
    mailbox.jsonl.lock                     flock for appends, rotation and tail repair
    mailbox.<first>-<last>.jsonl           rotated segments (12-digit seqs), read-only
    mailbox.archive/mailbox.<f>-<l>.jsonl  compacted segments: every recipient acknowledged all
    mailbox.index/state.json               {"indexed_seq": W, ...}: the indexes cover seq <= W
    mailbox.index/ids/<xx>.jsonl           msg id -> seq, 256 buckets by crc32 (idempotency)
    mailbox.index/to.<reader>.jsonl        fixed-width: direct messages to reader (seq, segment, offset, length)
    mailbox.index/broadcast.jsonl          fixed-width: broadcasts (+ sender)
    mailbox.index/broadcast-from.<s>.jsonl fixed-width: broadcasts sent by s (to count "from others")
    mailbox.cursors/<reader>.jsonl         the reader's journal: delivered / ack events (durable)
    mailbox.cursors/<reader>.json          snapshot of the journal's fold (cursor_state)

A message line::

    {"seq":42,"schema_version":1,"kind":"message","msg_id":"m-1","from":"alice","to":"*",
     "type":"question","subject":"...","body":"...","ts":"2026-02-20T14:43:15.000Z","ts_ms":...}
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right

from phoenix_protocol._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol._durable import (
    FileLock,
    atomic_write,
    durable_append,
    ensure_dir,
    fsync_dir,
    read_last_line,
    repair_tail,
)
from phoenix_protocol._errors import (
    CorruptStateError,
    LockTimeoutError,
    SchemaVersionError,
    StorageError,
    UsageError,
)
from phoenix_protocol._ids import is_valid_id, validate_id
from phoenix_protocol._jsonio import JSONError, dumps_document, dumps_line, loads
from phoenix_protocol._seqlog import LogProblem, SeqLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, TypeAlias

    _Entry: TypeAlias = tuple[int, int, int, int, bytes]
    """(seq, first seq of its segment, byte offset, line length, the line)"""

__all__ = [
    "BROADCAST",
    "INDEX_LAG",
    "MAX_BODY_BYTES",
    "MAX_SUBJECT_BYTES",
    "MESSAGE_TYPES",
    "SCHEMA_VERSION",
    "Inbox",
    "Mailbox",
    "Message",
    "check_message",
]

SCHEMA_VERSION = 1
BROADCAST = "*"
"""The ``to`` of a message for every teammate but its sender."""
MESSAGE_TYPES = ("info", "question", "challenge", "resolution")
MAX_SUBJECT_BYTES = 1024
MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
INDEX_LAG = 4096
"""Messages the indexes may lag behind the mailbox before a sender brings them up to date."""
_REBUILD_LAG = 8 * INDEX_LAG  # beyond this, index first (outside the mailbox lock)
_ID_BUCKETS = 256
_NEVER = 1 << 62  # SeqLog's own rotation is off: the mailbox rotates without ever deleting
_CHUNK = 1 << 20
_PROBE = 1024
_SEEK_WINDOW = 8192
_MAX_PROBLEMS = 100
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

ACTIVE_NAME = "mailbox.jsonl"
INDEX_DIR = "mailbox.index"
CURSOR_DIR = "mailbox.cursors"
ARCHIVE_DIR = "mailbox.archive"

# Fixed-width index lines: numbers right-aligned with spaces (valid JSON, readable by jq), so
# entry i sits at byte i * width and counts are binary searches.
_LOC_HEAD = '{"schema_version":1,"seq":'
_LOC_FMT = _LOC_HEAD + '%12d,"seg":%12d,"off":%12d,"len":%8d}\n'
_BC_FMT = _LOC_HEAD + '%12d,"seg":%12d,"off":%12d,"len":%8d,"from":%-66s}\n'
_LOC_WIDTH = len(_LOC_FMT % (0, 0, 0, 0))
_BC_WIDTH = len(_BC_FMT % (0, 0, 0, 0, '""'))


class Message:
    """One mailbox message. ``sender`` is ``"from"`` on disk; ``to`` is a name or ``"*"``.

    ``acked_by`` lists the readers who acknowledged it (filled in when the message is read);
    ``duplicate`` is True when ``send`` found the id already stored and returned the original.
    """

    __slots__ = ("acked_by", "body", "duplicate", "msg_id", "sender", "seq", "subject", "to", "ts", "ts_ms", "type")

    def __init__(
        self,
        *,
        seq: int,
        msg_id: str,
        sender: str,
        to: str,
        type: str,
        subject: str,
        body: str,
        ts: str,
        ts_ms: int,
        acked_by: list[str] | None = None,
        duplicate: bool = False,
    ) -> None:
        self.seq = seq
        self.msg_id = msg_id
        self.sender = sender
        self.to = to
        self.type = type
        self.subject = subject
        self.body = body
        self.ts = ts
        self.ts_ms = ts_ms
        self.acked_by: list[str] = list(acked_by or [])
        self.duplicate = duplicate

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Message:
        """A message from its on-disk record."""
        return cls(
            seq=int(record["seq"]),
            msg_id=str(record.get("msg_id", "")),
            sender=str(record.get("from", "")),
            to=str(record.get("to", "")),
            type=str(record.get("type", "info")),
            subject=str(record.get("subject", "")),
            body=str(record.get("body", "")),
            ts=str(record.get("ts", "")),
            ts_ms=int(record.get("ts_ms") or 0),
        )

    @property
    def broadcast(self) -> bool:
        """Whether the message is for every teammate but its sender."""
        return self.to == BROADCAST

    def addressed_to(self, reader: str) -> bool:
        """Whether ``reader`` is a recipient: named in ``to``, or any teammate but the sender of a broadcast."""
        return self.to == reader or (self.to == BROADCAST and self.sender != reader)

    def as_dict(self) -> dict[str, Any]:
        """The message as JSON (``from`` for the sender, as on disk)."""
        out: dict[str, Any] = {
            "seq": self.seq,
            "msg_id": self.msg_id,
            "from": self.sender,
            "to": self.to,
            "type": self.type,
            "subject": self.subject,
            "body": self.body,
            "ts": self.ts,
            "ts_ms": self.ts_ms,
            "acked_by": list(self.acked_by),
        }
        if self.duplicate:
            out["duplicate"] = True
        return out

    def __repr__(self) -> str:
        dup = " duplicate" if self.duplicate else ""
        return f"<Message #{self.seq} {self.msg_id} {self.sender}->{self.to} {self.type}{dup}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]


class Inbox(list[Message]):
    """What ``fetch`` returns: the messages, oldest first, and ``through_seq``, the seq up to which
    the reader has now seen everything addressed to it (pass it to ``mark_delivered`` once the
    messages were handed over, so the next fetch starts after the messages it skipped)."""

    through_seq: int = 0


class _ReaderState:
    """The fold of one reader's journal: delivered cursor and acknowledged ranges.

    ``acked`` holds disjoint sorted ranges ``[a, b]``: every message addressed to the reader with a
    seq in ``[a, b]`` is acknowledged. The first range starts at 0, so ``acked[0][1]`` is the
    seq up to which everything is acknowledged.
    """

    __slots__ = ("acked", "delivered", "journal_bytes", "reader")

    def __init__(self, reader: str) -> None:
        self.reader = reader
        self.delivered = 0
        self.acked: list[list[int]] = [[0, 0]]
        self.journal_bytes = 0

    @property
    def acked_through(self) -> int:
        return self.acked[0][1]

    def covers(self, seq: int) -> bool:
        """Whether ``seq`` falls in an acknowledged range (the caller checks it is addressed here)."""
        i = bisect_right(self.acked, [seq, _NEVER]) - 1
        return i >= 0 and self.acked[i][0] <= seq <= self.acked[i][1]


class _SegmentedLog(SeqLog):
    """``SeqLog`` over the active ``mailbox.jsonl`` plus rotated segments that are renamed, never deleted.

    Appends, torn-tail repair and rollback are SeqLog's; rotation is replaced (SeqLog's drops its
    oldest file) and ``last_seq`` / ``files`` read across the seq-named segments.
    """

    def __init__(
        self, path: str, *, archive_dir: str, max_bytes: int, lock_timeout: float, prepare: Callable[[], None]
    ) -> None:
        super().__init__(path, max_bytes=_NEVER, keep=0, lock_timeout=lock_timeout, prepare=prepare)
        self.segment_bytes = max_bytes
        self.directory = os.path.dirname(path) or "."
        self.archive_dir = archive_dir
        self._known_end: tuple[int, int] | None = None
        self._known_last: int | None = None

    def expect(self, end: tuple[int, int] | None, last: int | None) -> None:
        """What the caller (holding the lock) just read: the active file ends at ``end`` =
        ``(inode, size)`` with no torn tail, and its last seq is ``last``. The next ``mark`` and
        ``last_seq`` answer from it instead of reading the file again (one append's worth)."""
        self._known_end = end
        self._known_last = last

    def mark(self) -> tuple[int, int]:
        """SeqLog's ``mark`` (repair the tail, report the end), or what ``expect`` was told."""
        end, self._known_end = self._known_end, None
        return end if end is not None else super().mark()

    def rotated(self) -> list[tuple[int, int, str]]:
        """``(first seq, last seq, path)`` of every rotated segment, archived ones included, oldest first."""
        out = []
        for directory in (self.directory, self.archive_dir):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"could not list {directory}: {exc.strerror}.", path=directory) from exc
            for name in names:
                span = _segment_span(name)
                if span is not None:
                    out.append((span[0], span[1], os.path.join(directory, name)))
        out.sort()
        return out

    def files(self) -> list[str]:
        """Every segment file, oldest first, the active one last (SeqLog's ``read`` reads them all)."""
        out = [path for _first, _last, path in self.rotated()]
        if os.path.exists(self.path):
            out.append(self.path)
        return out

    def last_seq(self) -> int:
        """The newest seq: the active file's last line, else the newest rotated segment's."""
        known, self._known_last = self._known_last, None
        if known is not None:
            return known
        line = read_last_line(self.path)
        if line is not None:
            seq = _line_seq(line)
            if seq is not None:
                return seq
            best = super().last_seq()  # a corrupt last line: SeqLog scans the file
            if best:
                return best
        rotated = self.rotated()
        return max(last for _first, last, _path in rotated) if rotated else 0

    def rotate_locked(self) -> bool:
        """Rename the active file to ``mailbox.<first>-<last>.jsonl`` once it holds ``segment_bytes``
        (caller holds the lock). Returns whether an active file exists afterwards."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"could not read {self.path}: {exc.strerror}.", path=self.path) from exc
        if size < self.segment_bytes:
            return True
        self.repaired_bytes += repair_tail(self.path)  # a torn fragment must not end a read-only segment
        data_first = _first_line_seq(self.path)
        if data_first is None:
            return True  # nothing readable to rotate
        last = self.last_seq()
        dest = os.path.join(self.directory, _segment_name(data_first, last))
        if os.path.exists(dest):
            raise StorageError(
                f"could not rotate {self.path}: {dest} already exists. Run `phx doctor`; nothing was changed.",
                path=dest,
            )
        _sync(self.path)  # everything in it is durable before it becomes read-only
        try:
            os.rename(self.path, dest)
            fsync_dir(self.directory)
        except OSError as exc:
            raise StorageError(f"could not rotate {self.path}: {exc.strerror}.", path=self.path) from exc
        return False


def _segment_name(first: int, last: int) -> str:
    return f"mailbox.{first:012d}-{last:012d}.jsonl"


def _segment_span(name: str) -> tuple[int, int] | None:
    if not (name.startswith("mailbox.") and name.endswith(".jsonl")) or len(name) != 39:
        return None
    first, dash, last = name[8:20], name[20], name[21:33]
    if dash != "-" or not (first.isdigit() and last.isdigit()):
        return None
    return int(first), int(last)


def _sync(path: str) -> None:
    """fsync ``path``: ``durable_append`` of nothing opens, fsyncs and closes it."""
    durable_append(path, b"")


def _sync_all(paths: list[str]) -> None:
    """fsync many files at once. One after the other, each fsync waits for a journal commit of
    its own (an indexing touches ~270 files: most of a second); issued together from a few
    threads, they share commits."""
    if len(paths) < 4:
        for path in paths:
            _sync(path)
        return
    import threading

    todo = list(reversed(paths))
    errors: list[StorageError] = []

    def work() -> None:
        while True:
            try:
                path = todo.pop()  # list.pop is atomic under the GIL
            except IndexError:
                return
            try:
                _sync(path)
            except StorageError as exc:  # reported by the caller's thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(16, len(paths)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _line_seq(raw: bytes) -> int | None:
    try:
        record = loads(raw)
    except JSONError:
        return None
    if isinstance(record, dict):
        seq = record.get("seq")
        if isinstance(seq, int):
            return seq
    return None


def _first_line_seq(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        off = 0
        buf = b""
        while True:
            chunk = os.pread(fd, 4096, off)
            if not chunk:
                return None
            off += len(chunk)
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                seq = _line_seq(buf[:nl])
                if seq is not None:
                    return seq
                buf = buf[nl + 1 :]
    finally:
        os.close(fd)


def _record(raw: bytes) -> dict[str, Any] | None:
    """A message record from one line, ``None`` if it does not parse; refuses newer schemas."""
    try:
        record = loads(raw)
    except JSONError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
        return None
    version = record.get("schema_version", 1)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"mailbox message #{record['seq']} has schema_version {version}; this Phoenix reads up to "
            f"{SCHEMA_VERSION}. Upgrade phoenix-protocol.",
            found=version,
            supported=SCHEMA_VERSION,
        )
    return record


def _field(raw: bytes, key: bytes) -> str | None:
    """The string value of top-level ``key`` in a message line, found without parsing it.

    Exact for the keys it is used on (``msg_id``, ``from``, ``to``): their values are ids (no
    quote, no backslash), and a quote inside any JSON string is escaped, so ``"key":"`` cannot
    occur inside another value.
    """
    at = raw.find(key)
    if at < 0:
        return None
    at += len(key)
    end = raw.find(b'"', at)
    return raw[at:end].decode("ascii", "replace") if end >= 0 else None


_MSG_ID = b'"msg_id":"'
_FROM = b'"from":"'
_TO = b'"to":"'


def _for_reader(raw: bytes, reader: str) -> bool:
    """Whether a message line is addressed to ``reader`` (direct, or someone else's broadcast)."""
    to = _field(raw, _TO)
    return to == reader or (to == BROADCAST and _field(raw, _FROM) != reader)


def _message(raw: bytes) -> Message | None:
    record = _record(raw)
    return Message.from_record(record) if record is not None else None


def _bucket(msg_id: str) -> str:
    import zlib

    return f"{zlib.crc32(msg_id.encode('ascii')) % _ID_BUCKETS:02x}.jsonl"


def check_message(type: str, subject: object, body: object) -> None:
    """The checks every mailbox (files or PostgreSQL) makes of a message before storing it."""
    if type not in MESSAGE_TYPES:
        raise UsageError(f"message type must be one of {', '.join(MESSAGE_TYPES)}, not {type!r}.")
    if not isinstance(subject, str) or not subject.strip():
        raise UsageError("a message needs a non-empty subject.")
    if not isinstance(body, str):
        raise UsageError("a message body must be a string.")
    if len(subject.encode("utf-8", "surrogatepass")) > MAX_SUBJECT_BYTES:
        raise UsageError(f"the subject is longer than {MAX_SUBJECT_BYTES} bytes: shorten it.")
    if len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise UsageError(f"the body is longer than {MAX_BODY_BYTES // 1024} KB: send a path or a summary instead.")


def _new_msg_id() -> str:
    return "m-" + os.urandom(12).hex()


class _Pos:
    """A read position: the segment (by its first seq) and a byte offset in it. After a read,
    ``end`` is ``(inode, size)`` of the active file when the read ended exactly at its end on a
    readable line (no torn tail), else ``None``."""

    __slots__ = ("end", "first", "off")

    def __init__(self, first: int, off: int) -> None:
        self.first = first
        self.off = off
        self.end: tuple[int, int] | None = None


class _Tail:
    """What a process has read of the messages the indexes do not cover yet (seq > ``base``):
    each line, its id (for senders), and its recipient and sender (taken out when a reader
    first asks)."""

    __slots__ = ("base", "by_id", "heads", "last", "pos", "recs", "seqs")

    def __init__(self, base: int, pos: _Pos) -> None:
        self.base = base
        self.pos = pos
        self.recs: list[_Entry] = []
        self.seqs: list[int] = []
        self.heads: list[tuple[str | None, str | None]] = []  # (to, from) of recs[: len(heads)]
        self.by_id: dict[str, _Entry] = {}
        self.last: int | None = None
        """The newest seq read (kept when pruned)."""

    def add(self, entry: _Entry) -> None:
        seq = entry[0]
        if self.last is not None and seq <= self.last:
            return  # cannot happen in a well-formed mailbox; never let the order break
        self.last = seq
        self.recs.append(entry)
        self.seqs.append(seq)
        msg_id = _field(entry[4], _MSG_ID)
        if msg_id is not None and msg_id not in self.by_id:
            self.by_id[msg_id] = entry

    def prune(self, base: int) -> None:
        if base <= self.base:
            return
        cut = bisect_right(self.seqs, base)
        for entry in self.recs[:cut]:
            msg_id = _field(entry[4], _MSG_ID)
            if msg_id is not None and self.by_id.get(msg_id) is entry:
                del self.by_id[msg_id]
        del self.recs[:cut]
        del self.seqs[:cut]
        del self.heads[:cut]
        self.base = base

    def for_reader(self, reader: str, start: int, limit: int | None) -> tuple[list[_Entry], int | None]:
        """Entries with seq >= ``start`` addressed to ``reader`` (at most ``limit``), and the last
        seq looked at."""
        heads = self.heads
        for entry in self.recs[len(heads) :]:
            raw = entry[4]
            heads.append((_field(raw, _TO), _field(raw, _FROM)))
        i = bisect_left(self.seqs, start)
        out: list[_Entry] = []
        for j in range(i, len(self.recs)):
            to, sender = heads[j]
            if to == reader or (to == BROADCAST and sender != reader):
                out.append(self.recs[j])
                if limit is not None and len(out) >= limit:
                    return out, self.seqs[j]
        return out, (self.seqs[-1] if i < len(self.seqs) else None)


class _Reset(Exception):
    """The file being followed shrank: start over."""


class Mailbox:
    """The mailbox of team ``team_id``, stored in ``directory`` (the team's directory).

    Safe for any number of processes at once; one object is for one thread (it keeps a read
    position and a descriptor). See the module docstring for the guarantees and the files. ``bytes_read`` counts the bytes this object read from the mailbox and its
    indexes (to check that reads cost what is new, not what is stored).
    """

    def __init__(
        self,
        directory: str,
        *,
        team_id: str,
        clock: Clock = system_clock,
        lock_timeout: float = 10.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.team_id = validate_id(team_id, "team id")
        self.directory = directory
        self.clock = clock
        self.lock_timeout = lock_timeout
        if max_bytes < 1024:
            raise UsageError(f"mailbox max_bytes must be at least 1024, not {max_bytes}.")
        self.max_bytes = max_bytes
        self.path = os.path.join(directory, ACTIVE_NAME)
        self.index_dir = os.path.join(directory, INDEX_DIR)
        self.ids_dir = os.path.join(self.index_dir, "ids")
        self.cursor_dir = os.path.join(directory, CURSOR_DIR)
        self.archive_dir = os.path.join(directory, ARCHIVE_DIR)
        self.state_path = os.path.join(self.index_dir, "state.json")
        self.log = _SegmentedLog(
            self.path,
            archive_dir=self.archive_dir,
            max_bytes=max_bytes,
            lock_timeout=lock_timeout,
            prepare=self._prepare,
        )
        self.bytes_read = 0
        self.problems: list[LogProblem] = []
        """Lines skipped while reading (torn or unreadable), at most 100."""
        self._tail: _Tail | None = None
        self._afd: int | None = None  # the active file, kept open: (fd, inode, first seq)
        self._aino = 0
        self._afirst: int | None = None
        self._state_key: tuple[int, int, int] | None = None
        self._indexed = 0
        self._prepared = False
        self._index_ready = False
        self._next_index_try = 0
        self._valid_names: set[str] = set()
        self._iso_second = -1
        self._iso_prefix = ""

    def close(self) -> None:
        """Release the descriptor kept on the active file (also done when the object goes away)."""
        fd, self._afd = self._afd, None
        if fd is not None:
            try:
                os.close(fd)
            except (OSError, TypeError, AttributeError):  # also at interpreter exit
                pass

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- public API ------------------------------------------------------------------------------

    def send(
        self,
        sender: str,
        to: str,
        *,
        type: str = "info",
        subject: str,
        body: str,
        msg_id: str | None = None,
    ) -> Message:
        """Store a message durably and return it; with a ``msg_id`` already stored, return the
        original (``duplicate=True``) and write nothing. Subject and body are redacted."""
        valid = self._valid_names  # names seen valid before: skip the per-character check
        if sender not in valid:
            valid.add(validate_id(sender, "sender"))
        if to != BROADCAST and to not in valid:
            valid.add(validate_id(to, "recipient"))
        check_message(type, subject, body)
        msg_id = _new_msg_id() if msg_id is None else validate_id(msg_id, "message id")
        from phoenix_protocol._redact import redact

        ms = self.clock.now_ms()
        second = ms // 1000
        if second != self._iso_second:
            self._iso_second, self._iso_prefix = second, iso_from_ms(second * 1000)[:-4]
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": "message",
            "msg_id": msg_id,
            "from": sender,
            "to": to,
            "type": type,
            "subject": redact(subject),
            "body": redact(body),
            "ts": f"{self._iso_prefix}{ms % 1000:03d}Z",
            "ts_ms": ms,
        }
        self._prepare()
        indexed = self._indexed_seq()
        tail = self._tail
        if tail is None or (tail.last or 0) - tail.base > _REBUILD_LAG or indexed < tail.base:
            self._catch_up_index()
            indexed = self._indexed_seq()
        # The id index covers seq <= indexed, and only grows: look there before taking the lock,
        # then under the lock look at everything after ``indexed`` (the tail).
        found = self._find_indexed_id(msg_id) if indexed else None
        if found is None:
            # Read what the other senders wrote before taking the lock, so that under it only the
            # last few lines are left to read (a shorter critical section: fewer senders wait).
            self._tail_refresh(indexed, indexed)
            with self.log.lock():
                tail = self._tail_refresh(indexed, indexed)
                entry = tail.by_id.get(msg_id)
                if entry is not None:
                    found = _message(entry[4])
                if found is None:
                    end = tail.pos.end
                    if end is not None and end[1] >= self.max_bytes:
                        self.log.rotate_locked()
                        end = (-1, 0) if not os.path.exists(self.path) else None
                    elif end is None and not os.path.exists(self.path):
                        end = (-1, 0)
                    self.log.expect(end, tail.last if end is not None else None)
                    try:
                        seq = self.log.append_locked(record, durable=False)
                    finally:
                        self.log.expect(None, None)
                    mark_ino = end[0] if end is not None else 0
        if found is not None:
            found.duplicate = True
            self._fill_acks([found])
            return found
        # Outside the lock: concurrent senders' fsyncs share one journal commit. The descriptor
        # kept on the active file still points at the file this line went to, even if another
        # sender rotated it since (rotation fsyncs it anyway).
        if self._afd is not None and mark_ino == self._aino:
            try:
                os.fsync(self._afd)
            except OSError as exc:
                raise StorageError(f"could not append to {self.path}: {exc.strerror}.", path=self.path) from exc
        else:
            _sync(self.path)
            if mark_ino == -1:  # this append created the file: make its name durable too
                try:
                    fsync_dir(self.directory)
                except OSError as exc:
                    raise StorageError(f"could not confirm durable append to {self.path}: {exc.strerror}.") from exc
        due = seq - indexed >= INDEX_LAG and seq >= self._next_index_try
        if due and seq - self._indexed_seq() >= INDEX_LAG and self._index(seq, wait=False) < seq:
            self._next_index_try = seq + 256  # another sender is at it: do not knock every time
        return Message(
            seq=seq,
            msg_id=msg_id,
            sender=sender,
            to=to,
            type=type,
            subject=record["subject"],
            body=record["body"],
            ts=record["ts"],
            ts_ms=ms,
        )

    def fetch(self, reader: str, *, limit: int | None = None) -> Inbox:
        """Messages for ``reader`` (direct, or others' broadcasts) past its delivered cursor,
        oldest first. Does not move the cursor: call ``mark_delivered`` once they are handed over."""
        reader = validate_id(reader, "reader")
        if limit is not None and limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}.")
        state = self._reader_state(reader)
        start = state.delivered
        out = Inbox()
        out.through_seq = start
        indexed = self._indexed_seq()
        if start < indexed:
            for seq, first, off, length in self._index_entries(reader, start, indexed):
                out.append(self._read_at(seq, first, off, length))
                if limit is not None and len(out) >= limit:
                    out.through_seq = seq
                    self._fill_acks(out)
                    return out
            out.through_seq = indexed
        left = None if limit is None else limit - len(out)
        entries, last = self._recent_for(reader, max(start, indexed) + 1, left)
        for entry in entries:
            message = _message(entry[4])
            if message is None:
                self._problem(self.path, entry[2], "corrupt-line", f"unreadable message #{entry[0]} skipped")
                continue
            out.append(message)
        if last is not None:
            out.through_seq = last
        self._fill_acks(out)
        return out

    def mark_delivered(self, reader: str, up_to_seq: int) -> None:
        """Record that every message for ``reader`` up to ``up_to_seq`` was handed to it (durable;
        the cursor never moves backwards). Call it only after handing them over."""
        reader = validate_id(reader, "reader")
        if not isinstance(up_to_seq, int) or up_to_seq < 0:
            raise UsageError(f"a seq is a non-negative integer, not {up_to_seq!r}.")
        with self._reader_lock(reader):
            state = self._reader_state(reader)
            if up_to_seq <= state.delivered:
                return
            last = self.log.last_seq()
            if up_to_seq > last:
                raise UsageError(
                    f"cannot mark message #{up_to_seq} delivered to {reader}: the mailbox ends at #{last}."
                )
            # A cursor never points past what a power loss could take back: the senders of the
            # newest lines may not have fsynced yet (rotated segments were fsynced when rotated).
            active = self._active()
            if active is not None:
                try:
                    os.fsync(active[0])
                except OSError as exc:
                    raise StorageError(f"could not sync {self.path}: {exc.strerror}.", path=self.path) from exc
            self._journal(reader, state, "delivered", up_to_seq)

    def ack(self, reader: str, seq: int) -> None:
        """Record that ``reader`` acknowledges message ``seq`` (durable, idempotent). Refused for a
        message not addressed to ``reader`` or not delivered to it yet."""
        reader = validate_id(reader, "reader")
        if not isinstance(seq, int) or seq < 1:
            raise UsageError(f"a message seq is a positive integer, not {seq!r}.")
        with self._reader_lock(reader):
            state = self._reader_state(reader)
            entry = self._entry(seq)
            message = _message(entry[4]) if entry is not None else None
            if message is None:
                raise UsageError(f"there is no message #{seq} in team {self.team_id}'s mailbox.")
            if not message.addressed_to(reader):
                whom = "a broadcast by " + message.sender if message.broadcast else "addressed to " + message.to
                raise UsageError(f"message #{seq} is {whom}, not for {reader}: only a recipient can acknowledge it.")
            if seq > state.delivered:
                raise UsageError(
                    f"message #{seq} has not been delivered to {reader} yet: read it first "
                    f"(`phx team inbox {self.team_id} --as {reader}`), then acknowledge it."
                )
            if state.covers(seq):
                return
            self._journal(reader, state, "ack", seq)

    def acked_by(self, seq: int) -> list[str]:
        """The readers who acknowledged message ``seq`` (sorted); ``[]`` for an unknown seq."""
        message = self.get(seq)
        return message.acked_by if message is not None else []

    def get(self, seq: int) -> Message | None:
        """Message ``seq`` with its ``acked_by``, or ``None`` when there is none (O(log size))."""
        entry = self._entry(seq)
        message = _message(entry[4]) if entry is not None else None
        if message is None:
            return None
        self._fill_acks([message])
        return message

    def replay(self, last: int) -> list[Message]:
        """The newest ``last`` messages, whoever they are for, oldest first (reads only the tail)."""
        if last <= 0:
            return []
        lines: list[bytes] = []
        files = [self.path] + [path for _f, _l, path in reversed(self.log.rotated())]
        for path in files:
            for raw in self._lines_backwards(path):
                lines.append(raw)
                if len(lines) >= last:
                    break
            if len(lines) >= last:
                break
        out = []
        for raw in reversed(lines):
            record = _record(raw)
            if record is not None:
                out.append(Message.from_record(record))
        out.sort(key=lambda m: m.seq)
        self._fill_acks(out)
        return out

    def stats(self) -> dict[str, Any]:
        """Counts without reading messages: ``count`` (the last seq), ``first_seq`` (oldest not
        archived), segments and bytes (active + rotated, and archived apart), ``indexed_seq``."""
        rotated = self.log.rotated()
        live = [(f, path) for f, _l, path in rotated if os.path.dirname(path) != self.archive_dir]
        archived = [path for _f, _l, path in rotated if os.path.dirname(path) == self.archive_dir]
        active_size = _size(self.path)
        last = self.log.last_seq()
        first = 0
        if live:
            first = live[0][0]
        elif active_size:
            first = _first_line_seq(self.path) or 0
        return {
            "schema_version": SCHEMA_VERSION,
            "team_id": self.team_id,
            "count": last,
            "first_seq": first,
            "segments": len(live) + (1 if active_size else 0),
            "bytes": active_size + sum(_size(path) for _f, path in live),
            "archived_segments": len(archived),
            "archived_bytes": sum(_size(path) for path in archived),
            "indexed_seq": self._indexed_seq(),
        }

    def unread_count(self, reader: str) -> int:
        """How many messages for ``reader`` are past its delivered cursor (binary searches over the
        indexes plus the few messages they do not cover yet)."""
        reader = validate_id(reader, "reader")
        start = self._reader_state(reader).delivered
        indexed = self._indexed_seq()
        count = 0
        if start < indexed:
            count += self._count(self._to_path(reader), _LOC_WIDTH, start, indexed)
            count += self._count(self._bc_path(), _BC_WIDTH, start, indexed)
            count -= self._count(self._bc_from_path(reader), _LOC_WIDTH, start, indexed)
        return count + len(self._recent_for(reader, max(start, indexed) + 1)[0])

    def wait(self, reader: str, timeout: float, *, interval: float = 0.5) -> bool:
        """Block until ``reader`` has an unread message (``True``) or ``timeout`` seconds pass
        (``False``). The files have no wake-up signal: this looks every ``interval`` seconds
        (``PgMailbox.wait`` is woken by the sender's commit instead)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            if self.unread_count(reader):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(interval, left))

    def cursor_state(self, reader: str) -> dict[str, Any]:
        """The reader's cursor for checkpoints: delivered seq, acknowledged-through seq and the
        acknowledged ranges beyond it."""
        reader = validate_id(reader, "reader")
        state = self._reader_state(reader)
        return {
            "schema_version": SCHEMA_VERSION,
            "reader": reader,
            "delivered_seq": state.delivered,
            "acked_through": state.acked_through,
            "acked_ranges": [list(r) for r in state.acked[1:]],
        }

    def cursor_states(self, readers: list[str]) -> dict[str, dict[str, Any]]:
        """``cursor_state`` of each reader."""
        return {reader: self.cursor_state(reader) for reader in readers}

    def readers(self) -> list[str]:
        """Everyone who has a cursor (has marked something delivered), sorted."""
        try:
            names = os.listdir(self.cursor_dir)
        except FileNotFoundError:
            return []
        return sorted(n[:-6] for n in names if n.endswith(".jsonl") and is_valid_id(n[:-6]))

    def compact(self, recipients: Callable[[Message], Iterable[str]] | Iterable[str]) -> dict[str, Any]:
        """Move each rotated segment whose every message every recipient acknowledged into
        ``mailbox.archive/`` (still readable; never deleted). ``recipients`` is the team's roster
        (a broadcast is for everyone in it but its sender) or a function of the message."""
        if callable(recipients):
            recipients_of: Callable[[Message], Iterable[str]] = recipients
        else:
            roster = set(recipients)

            def recipients_of(message: Message) -> Iterable[str]:
                return roster - {message.sender} if message.broadcast else {message.to}

        states: dict[str, _ReaderState] = {}
        archived: list[str] = []
        kept: list[dict[str, Any]] = []
        for first, _last, path in self.log.rotated():
            if os.path.dirname(path) == self.archive_dir:
                continue
            blocker = self._first_unacked(path, first, recipients_of, states)
            if blocker is not None:
                kept.append({"segment": os.path.basename(path), "first_unacked": blocker[0], "reader": blocker[1]})
                continue
            ensure_dir(self.archive_dir)
            dest = os.path.join(self.archive_dir, os.path.basename(path))
            if os.path.exists(dest):
                raise StorageError(f"could not archive {path}: {dest} already exists.", path=dest)
            try:
                os.rename(path, dest)
                fsync_dir(self.archive_dir)
                fsync_dir(self.directory)
            except FileNotFoundError:
                continue  # another compaction moved it first
            except OSError as exc:
                raise StorageError(f"could not archive {path}: {exc.strerror}.", path=path) from exc
            archived.append(os.path.basename(path))
        return {"archived": archived, "kept": kept, "stats": self.stats()}

    def reindex(self) -> int:
        """Bring the indexes up to the newest message now (senders do it as messages arrive; after
        deleting ``mailbox.index/`` this rebuilds it at once). Returns the indexed seq."""
        self._prepare()
        if os.path.exists(self.path):
            _sync(self.path)
        return self._index(self.log.last_seq(), wait=True)

    # -- files -----------------------------------------------------------------------------------

    def _prepare(self) -> None:
        if not self._prepared:
            ensure_dir(self.directory)
            self._prepared = True

    def _problem(self, path: str, off: int, kind: str, message: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(LogProblem(path, off, kind, message))

    def _open(self, path: str) -> int | None:
        try:
            return os.open(path, os.O_RDONLY | _CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"could not read {path}: {exc.strerror}.", path=path) from exc

    def _pread(self, fd: int, n: int, off: int) -> bytes:
        data = os.pread(fd, n, off)
        self.bytes_read += len(data)
        return data

    def _read_file(self, path: str) -> bytes:
        fd = self._open(path)
        if fd is None:
            return b""
        try:
            size = os.fstat(fd).st_size
            return self._pread(fd, size, 0) if size else b""
        finally:
            os.close(fd)

    def _first_seq(self, fd: int, size: int) -> int | None:
        """The seq of the first readable line of an open segment."""
        off = 0
        buf = b""
        while off < size:
            chunk = self._pread(fd, min(_PROBE, size - off), off)
            if not chunk:
                break
            off += len(chunk)
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                seq = _line_seq(buf[:nl])
                if seq is not None:
                    return seq
                buf = buf[nl + 1 :]
        return None

    def _active(self) -> tuple[int, int, int, int | None] | None:
        """``(fd, inode, size, first seq)`` of the active file, or ``None`` when there is none. The
        descriptor stays open across calls: one ``stat`` tells whether it is still the active file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"could not read {self.path}: {exc.strerror}.", path=self.path) from exc
        size = st.st_size
        if self._afd is None or st.st_ino != self._aino:
            self.close()
            fd = self._open(self.path)
            if fd is None:
                return None
            fst = os.fstat(fd)
            self._afd, self._aino, self._afirst, size = fd, fst.st_ino, None, fst.st_size
        if self._afirst is None and size > 0:
            self._afirst = self._first_seq(self._afd, size)
        return self._afd, self._aino, size, self._afirst

    def _open_segment(self, first: int) -> tuple[int, int, int | None, str, bool] | None:
        """The segment starting at seq ``first``: ``(fd, size, last seq or None if active, path,
        owned)``; the caller closes ``fd`` when ``owned`` (the active file's is kept)."""
        active = self._active()
        if active is not None and active[3] == first:
            return active[0], active[2], None, self.path, False
        for seg_first, seg_last, path in self.log.rotated():
            if seg_first == first:
                rfd = self._open(path)
                if rfd is None:  # archived under our feet
                    continue
                return rfd, os.fstat(rfd).st_size, seg_last, path, True
        if active is not None and active[3] is None:
            return active[0], active[2], None, self.path, False  # empty active: the next segment
        return None

    def _next_first(self, after: int) -> int | None:
        """The first seq of the next existing segment after the one starting at ``after``."""
        firsts = [f for f, _l, _p in self.log.rotated() if f > after]
        active = _first_line_seq(self.path)
        if active is not None and active > after:
            firsts.append(active)
        return min(firsts) if firsts else None

    def _read_on(self, pos: _Pos, chunk_size: int = _CHUNK) -> Iterator[_Entry]:
        """Entries from ``pos`` to the current end, across segments, advancing ``pos``. Reads
        ``chunk_size`` bytes at a time (more for a longer line)."""
        pos.end = None
        while True:
            opened = self._open_segment(pos.first)
            if opened is None:
                nxt = self._next_first(pos.first)
                if nxt is None:
                    return
                self._problem(self.path, 0, "missing-segment", f"segment starting at #{pos.first} is missing")
                pos.first, pos.off = nxt, 0
                continue
            fd, size, last, path, owned = opened
            clean = True
            try:
                if size < pos.off:
                    raise _Reset
                want = chunk_size
                while pos.off < size:
                    chunk = self._pread(fd, min(want, size - pos.off), pos.off)
                    if not chunk:
                        break
                    end = chunk.rfind(b"\n")
                    if end < 0:
                        if len(chunk) < size - pos.off:  # a line longer than a chunk
                            want *= 2
                            continue
                        break  # a torn tail: never read, repaired by the next append
                    off = pos.off
                    first = pos.first
                    for raw in chunk[:end].split(b"\n"):
                        length = len(raw)
                        line_off = off
                        off += length + 1
                        pos.off = off
                        # A line as SeqLog writes it starts {"seq":N, and ends }: read N directly.
                        seq: int | None = None
                        if raw[-1:] == b"}" and raw.startswith(b'{"seq":'):
                            comma = raw.find(b",", 7)
                            if comma > 7 and raw[7:comma].isdigit():
                                seq = int(raw[7:comma])
                        if seq is None:  # anything else: parse it properly
                            record = _record(raw)
                            seq = record["seq"] if record is not None else None
                        if seq is None:
                            clean = False
                            if raw.strip():
                                self._problem(path, line_off, "corrupt-line", "unreadable line skipped")
                        else:
                            clean = True
                            yield (seq, first, line_off, length, raw)
            finally:
                if owned:
                    os.close(fd)
            if last is None:
                pos.end = (self._aino, size) if clean and pos.off == size and size > 0 else None
                return
            pos.first, pos.off = last + 1, 0

    def _seek(self, fd: int, size: int, target: int) -> int:
        """Offset of the first line with seq >= ``target`` in an open segment (``size`` if none).

        Bisection over byte offsets (lines are in seq order): O(log size) small reads.
        """
        lo, hi = 0, size
        while hi - lo > _SEEK_WINDOW:
            mid = (lo + hi) // 2
            probe = self._line_after(fd, mid, hi)
            if probe is None:
                hi = mid
                continue
            start, end, seq = probe
            if seq >= target:
                hi = start
            else:
                lo = end
        pos = lo
        while pos < size:
            probe = self._line_after(fd, pos, size)
            if probe is None:
                return size
            start, end, seq = probe
            if seq >= target or start >= hi:
                return start
            pos = end
        return size

    def _line_after(self, fd: int, pos: int, limit: int) -> tuple[int, int, int] | None:
        """``(start, end, seq)`` of the first readable line starting at or after ``pos`` and before
        ``limit`` (``end`` is past its newline); ``None`` if there is none."""
        base = pos - 1 if pos > 0 else 0
        buf = self._pread(fd, _PROBE, base)
        scan = 0
        if pos > 0:  # the bytes up to the first newline belong to a line that started earlier
            while True:
                nl = buf.find(b"\n", scan)
                if nl >= 0:
                    scan = nl + 1
                    break
                scan = len(buf)
                more = self._pread(fd, max(_PROBE, len(buf)), base + len(buf))
                if not more:
                    return None
                buf += more
        while True:
            if base + scan >= limit:
                return None
            nl = buf.find(b"\n", scan)
            if nl < 0:
                base, buf, scan = base + scan, buf[scan:], 0
                more = self._pread(fd, max(_PROBE, len(buf)), base + len(buf))
                if not more:
                    return None  # a torn tail
                buf += more
                continue
            seq = _line_seq(buf[scan:nl])
            if seq is not None:
                return base + scan, base + nl + 1, seq
            scan = nl + 1

    def _locate(self, seq: int) -> _Pos | None:
        """The position of the first line with seq >= ``seq`` (the end if past it)."""
        for _attempt in range(3):
            pos = self._locate_once(seq)
            if pos is not None:
                return pos
        return None

    def _locate_once(self, seq: int) -> _Pos | None:
        active = self._active()
        if active is not None:
            fd, _ino, size, active_first = active
            if active_first is not None and active_first <= seq:
                return _Pos(active_first, self._seek(fd, size, seq))
        rotated = self.log.rotated()
        for first, last, path in rotated:
            if last < seq:
                continue
            rfd = self._open(path)
            if rfd is None:
                return None  # archived under our feet: look again
            try:
                if first >= seq:
                    return _Pos(first, 0)
                return _Pos(first, self._seek(rfd, os.fstat(rfd).st_size, seq))
            finally:
                os.close(rfd)
        # past every rotated segment: the active one (possibly not written yet)
        nxt = (rotated[-1][1] + 1) if rotated else 1
        return _Pos(nxt, 0)

    def _entry(self, seq: int) -> _Entry | None:
        if seq < 1:
            return None
        tail = self._tail
        if tail is not None and tail.seqs and tail.seqs[0] <= seq <= tail.seqs[-1]:
            i = bisect_left(tail.seqs, seq)
            if tail.seqs[i] == seq:
                return tail.recs[i]
        pos = self._locate(seq)
        if pos is None:
            return None
        try:
            for entry in self._read_on(pos, 4096):
                return entry if entry[0] == seq else None
        except _Reset:
            pass
        return None

    def _read_at(self, seq: int, first: int, off: int, length: int) -> Message:
        """The message an index entry points at (falls back to a search if the entry is stale)."""
        opened = self._open_segment(first)
        if opened is not None:
            fd = opened[0]
            try:
                record = _record(self._pread(fd, length, off))
            finally:
                if opened[4]:
                    os.close(fd)
            if record is not None and record["seq"] == seq:
                return Message.from_record(record)
        entry = self._entry(seq)
        message = _message(entry[4]) if entry is not None else None
        if message is None:
            raise CorruptStateError(
                f"message #{seq} is in the mailbox index but not in the mailbox of team {self.team_id}. "
                "Run `phx doctor`.",
                path=self.path,
            )
        return message

    def _lines_backwards(self, path: str) -> Iterator[bytes]:
        """Complete lines of ``path``, newest first (a torn tail is skipped)."""
        fd = self._open(path)
        if fd is None:
            return
        try:
            pos = os.fstat(fd).st_size
            rest = b""
            in_torn_tail = True
            while pos > 0:
                start = max(0, pos - 65536)
                chunk = self._pread(fd, pos - start, start)
                pos = start
                if in_torn_tail:
                    nl = chunk.rfind(b"\n")
                    if nl < 0:
                        continue
                    chunk = chunk[: nl + 1]
                    in_torn_tail = False
                else:
                    chunk += rest
                parts = chunk.split(b"\n")
                rest = parts[0] if pos > 0 else b""
                for raw in reversed(parts[1:] if pos > 0 else parts):
                    if raw.strip():
                        yield raw
        finally:
            os.close(fd)

    # -- the tail and the id index ---------------------------------------------------------------

    def _indexed_seq(self) -> int:
        """``indexed_seq`` of ``mailbox.index/state.json`` (re-read only when the file changed)."""
        try:
            st = os.stat(self.state_path)
        except FileNotFoundError:
            self._state_key = None
            self._indexed = 0
            return 0
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._state_key:
            data = self._read_file(self.state_path)
            try:
                state = loads(data)
                indexed = int(state["indexed_seq"])
                version = int(state.get("schema_version", 1))
            except (JSONError, KeyError, TypeError, ValueError):
                indexed, version = 0, 1  # unreadable: rebuilt from the mailbox
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.state_path} has schema_version {version}; upgrade phoenix-protocol.",
                    path=self.state_path,
                    found=version,
                    supported=SCHEMA_VERSION,
                )
            self._state_key = key
            self._indexed = max(0, indexed)
        return self._indexed

    def _tail_refresh(self, prune_to: int | None = None, indexed: int | None = None) -> _Tail:
        """Bring this process's tail up to the end of the mailbox and return it.

        The tail holds every message after ``tail.base``, and ``tail.base`` never passes
        ``indexed_seq``: whatever the tail dropped, the indexes have (so a send that looked the id
        up in the indexes and then in the tail has seen every message). ``prune_to`` keeps the
        tail from dropping anything after it (what the caller looked up, or needs);
        ``indexed``: ``indexed_seq`` if the caller just read it."""
        if indexed is None:
            indexed = self._indexed_seq()
        tail = self._tail
        if tail is not None and indexed < tail.base:
            tail = self._tail = None  # the index was rebuilt from nothing: start over
        base = indexed if prune_to is None else min(indexed, prune_to)
        if tail is not None:
            tail.prune(base)
            try:
                for entry in self._read_on(tail.pos):
                    tail.add(entry)
                return tail
            except _Reset:
                self._tail = None
        pos = self._locate(base + 1) or _Pos(base + 1, 0)
        tail = _Tail(base, pos)
        for entry in self._read_on(tail.pos):
            if entry[0] > base:
                tail.add(entry)
        self._tail = tail
        return tail

    def _recent_for(self, reader: str, start: int, limit: int | None = None) -> tuple[list[_Entry], int | None]:
        """Messages for ``reader`` with seq >= ``start`` (at most ``limit``), for a reader that has
        the indexes' part already, and the last seq looked at. From this process's tail when it
        covers ``start`` (or would start there anyway), else read straight from ``start`` (a
        reader close to the end reads only what is new)."""
        tail = self._tail
        if (tail is not None and tail.base < start) or (tail is None and start <= self._indexed_seq() + 1):
            try:
                tail = self._tail_refresh(start - 1)
                if tail.base < start:
                    return tail.for_reader(reader, start, limit)
            except _Reset:
                self._tail = None
        out: list[_Entry] = []
        last: int | None = None
        pos = self._locate(start)
        if pos is None:
            return out, last
        try:
            for entry in self._read_on(pos):
                if entry[0] < start:
                    continue
                last = entry[0]
                if _for_reader(entry[4], reader):
                    out.append(entry)
                    if limit is not None and len(out) >= limit:
                        break
        except _Reset:
            pass
        return out, last

    def _find_indexed_id(self, msg_id: str) -> Message | None:
        """The message stored under ``msg_id`` according to the id index (which covers at least
        every seq up to ``indexed_seq``)."""
        data = self._read_file(os.path.join(self.ids_dir, _bucket(msg_id)))
        needle = b'"id":"' + msg_id.encode("ascii") + b'"'
        at = data.find(needle)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            if end < 0:
                break  # a torn line: never a complete entry
            try:
                item = loads(data[start:end])
                seq = int(item["seq"]) if item.get("id") == msg_id else 0
            except (JSONError, KeyError, TypeError, ValueError, AttributeError):
                seq = 0
            if seq > 0:
                found = self._entry(seq)
                if found is not None and _field(found[4], _MSG_ID) == msg_id:
                    message = _message(found[4])
                    if message is not None:
                        return message
            at = data.find(needle, end)
        return None

    def _catch_up_index(self) -> None:
        """Index first when the indexes lag far behind (a lost index, or no sender indexed for a
        while), so that a fresh process never reads a long tail under the mailbox lock."""
        last = self.log.last_seq()
        if last - self._indexed_seq() > _REBUILD_LAG:
            if os.path.exists(self.path):
                _sync(self.path)
            self._index(last, wait=True)

    def _index(self, upto: int, *, wait: bool) -> int:
        """Index messages ``indexed_seq + 1 .. upto`` (all durable): append their entries, fsync,
        then advance ``indexed_seq``. Without ``wait``, skipped when another process is at it."""
        if not self._index_ready:
            ensure_dir(self.ids_dir)
            self._index_ready = True
        lock = FileLock(self.state_path, self.lock_timeout if wait else 0)
        try:
            lock.acquire()
        except LockTimeoutError:
            if wait:
                raise
            return self._indexed_seq()
        try:
            self._state_key = None
            indexed = self._indexed_seq()
            if upto <= indexed:
                return indexed
            pos = self._locate(indexed + 1)
            if pos is None:
                return indexed
            prepared: set[str] = set()
            groups: dict[str, list[str]] = {}
            done = indexed
            pending = 0
            for seq, first, off, length, raw in self._read_on(pos):
                if seq <= indexed:
                    continue
                if seq > upto:
                    break
                done = seq
                record = _record(raw)  # parsed in full: a damaged line is never indexed
                if record is None:
                    continue
                msg_id = record.get("msg_id")
                sender = record.get("from")
                to = record.get("to")
                if isinstance(msg_id, str) and is_valid_id(msg_id):
                    line = dumps_line({"schema_version": SCHEMA_VERSION, "id": msg_id, "seq": seq})
                    groups.setdefault(os.path.join(self.ids_dir, _bucket(msg_id)), []).append(line + "\n")
                if to == BROADCAST and isinstance(sender, str) and is_valid_id(sender):
                    groups.setdefault(self._bc_path(), []).append(_BC_FMT % (seq, first, off, length, f'"{sender}"'))
                    groups.setdefault(self._bc_from_path(sender), []).append(_LOC_FMT % (seq, first, off, length))
                elif isinstance(to, str) and is_valid_id(to):
                    groups.setdefault(self._to_path(to), []).append(_LOC_FMT % (seq, first, off, length))
                pending += 1
                if pending >= 65536:
                    self._write_groups(groups, prepared, indexed)
                    groups.clear()
                    pending = 0
            self._write_groups(groups, prepared, indexed)
            if done > indexed:
                state = {
                    "schema_version": SCHEMA_VERSION,
                    "kind": "mailbox-index",
                    "team_id": self.team_id,
                    "indexed_seq": done,
                    "updated_at": self.clock.now_iso(),
                }
                atomic_write(self.state_path, dumps_document(state).encode("ascii"))
            self._state_key = None
            return self._indexed_seq()
        finally:
            lock.release()

    def _write_groups(self, groups: dict[str, list[str]], prepared: set[str], indexed: int) -> None:
        """Append each group to its index file, then make them all durable (files and names)."""
        written = []
        new_dirs = set()
        for path, lines in groups.items():
            if path not in prepared:
                # Entries past indexed_seq come from an indexing that did not finish: cut them
                # (fixed-width files), or a torn line (id buckets), before appending.
                if os.path.dirname(path) == self.ids_dir:
                    repair_tail(path)
                else:
                    width = _BC_WIDTH if path == self._bc_path() else _LOC_WIDTH
                    keep = self._index_le(path, width, indexed) * width
                    if _size(path) > keep:
                        _truncate(path, keep)
                prepared.add(path)
            if not os.path.exists(path):
                new_dirs.add(os.path.dirname(path))
            durable_append(path, "".join(lines).encode("ascii"), durable=False)
            written.append(path)
        _sync_all(written)
        for directory in new_dirs:
            fsync_dir(directory)

    # -- the recipient indexes -----------------------------------------------------------------

    def _to_path(self, reader: str) -> str:
        return os.path.join(self.index_dir, f"to.{reader}.jsonl")

    def _bc_path(self) -> str:
        return os.path.join(self.index_dir, "broadcast.jsonl")

    def _bc_from_path(self, sender: str) -> str:
        return os.path.join(self.index_dir, f"broadcast-from.{sender}.jsonl")

    def _entry_seq(self, fd: int, width: int, i: int) -> int:
        raw = self._pread(fd, width, i * width)
        head = len(_LOC_HEAD)
        try:
            if len(raw) == width and raw.startswith(_LOC_HEAD.encode()) and raw.endswith(b"}\n"):
                return int(raw[head : head + 12])
        except ValueError:
            pass
        return _NEVER  # past the durable prefix after a crash: treated as beyond any bound

    def _index_le_fd(self, fd: int, width: int, bound: int) -> int:
        n = os.fstat(fd).st_size // width
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry_seq(fd, width, mid) <= bound:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _index_le(self, path: str, width: int, bound: int) -> int:
        """How many entries of a fixed-width index have seq <= ``bound``."""
        fd = self._open(path)
        if fd is None:
            return 0
        try:
            return self._index_le_fd(fd, width, bound)
        finally:
            os.close(fd)

    def _count(self, path: str, width: int, after: int, upto: int) -> int:
        fd = self._open(path)
        if fd is None:
            return 0
        try:
            return self._index_le_fd(fd, width, upto) - self._index_le_fd(fd, width, after)
        finally:
            os.close(fd)

    def _index_iter(self, path: str, width: int, after: int, upto: int) -> Iterator[tuple[int, int, int, int, str]]:
        """``(seq, segment, offset, length, sender)`` of the entries with ``after < seq <= upto``."""
        fd = self._open(path)
        if fd is None:
            return
        try:
            i = self._index_le_fd(fd, width, after)
            end = self._index_le_fd(fd, width, upto)
            while i < end:
                n = min(end - i, 256)
                block = self._pread(fd, n * width, i * width)
                for k in range(n):
                    item = loads(block[k * width : (k + 1) * width])
                    yield item["seq"], item["seg"], item["off"], item["len"], item.get("from", "")
                i += n
        except (JSONError, KeyError, TypeError) as exc:
            raise CorruptStateError(
                f"{path} is damaged ({exc}). It is derived data: delete {self.index_dir} and it is rebuilt.",
                path=path,
            ) from None
        finally:
            os.close(fd)

    def _index_entries(self, reader: str, after: int, upto: int) -> Iterator[tuple[int, int, int, int]]:
        """Indexed messages for ``reader`` with ``after < seq <= upto``, in seq order."""
        import heapq

        direct = self._index_iter(self._to_path(reader), _LOC_WIDTH, after, upto)
        broadcasts = (e for e in self._index_iter(self._bc_path(), _BC_WIDTH, after, upto) if e[4] != reader)
        for seq, first, off, length, _sender in heapq.merge(direct, broadcasts):
            yield seq, first, off, length

    def _next_addressed(self, reader: str, after: int) -> int | None:
        """The smallest seq > ``after`` addressed to ``reader``, if any."""
        indexed = self._indexed_seq()
        if after < indexed:
            for seq, *_rest in self._index_entries(reader, after, indexed):
                return seq
        entries, _last = self._recent_for(reader, max(after, indexed) + 1, 1)
        return entries[0][0] if entries else None

    # -- readers ---------------------------------------------------------------------------------

    def _journal_path(self, reader: str) -> str:
        return os.path.join(self.cursor_dir, f"{reader}.jsonl")

    def _snapshot_path(self, reader: str) -> str:
        return os.path.join(self.cursor_dir, f"{reader}.json")

    def _reader_lock(self, reader: str) -> FileLock:
        ensure_dir(self.cursor_dir)
        return FileLock(self._journal_path(reader), self.lock_timeout)

    def _reader_state(self, reader: str) -> _ReaderState:
        """The snapshot, plus whatever the journal holds beyond it."""
        state = _ReaderState(reader)
        try:
            snap = loads(self._read_file(self._snapshot_path(reader)) or b"null")
        except JSONError:
            snap = None
        if isinstance(snap, dict) and int(snap.get("schema_version", 1)) > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self._snapshot_path(reader)} has schema_version {snap['schema_version']}; upgrade phoenix-protocol.",
                path=self._snapshot_path(reader),
                found=int(snap["schema_version"]),
                supported=SCHEMA_VERSION,
            )
        journal_size = _size(self._journal_path(reader))
        if isinstance(snap, dict):
            try:
                jb = int(snap["journal_bytes"])
                ranges = [[int(a), int(b)] for a, b in snap["acked_ranges"]]
                if 0 <= jb <= journal_size and ranges and ranges[0][0] == 0:
                    state.journal_bytes = jb
                    state.delivered = int(snap["delivered_seq"])
                    state.acked = ranges
            except (KeyError, TypeError, ValueError):
                pass
        if journal_size > state.journal_bytes:
            fd = self._open(self._journal_path(reader))
            if fd is not None:
                try:
                    data = self._pread(fd, journal_size - state.journal_bytes, state.journal_bytes)
                finally:
                    os.close(fd)
                end = data.rfind(b"\n") + 1
                for raw in data[:end].split(b"\n"):
                    if not raw.strip():
                        continue
                    try:
                        event = loads(raw)
                        kind, seq = event["kind"], int(event["seq"])
                    except (JSONError, KeyError, TypeError, ValueError):
                        continue
                    if kind == "delivered":
                        state.delivered = max(state.delivered, seq)
                    elif kind == "ack" and not state.covers(seq):
                        self._insert_ack(state, seq)
                state.journal_bytes += end
        return state

    def _insert_ack(self, state: _ReaderState, seq: int) -> None:
        """Add ``seq`` to the acknowledged ranges, merging neighbours with no message for the
        reader between them."""
        ranges = state.acked
        i = bisect_right(ranges, [seq, _NEVER])
        ranges.insert(i, [seq, seq])
        if i > 0 and self._next_addressed(state.reader, ranges[i - 1][1]) == seq:
            ranges[i - 1][1] = seq
            del ranges[i]
            i -= 1
        if i + 1 < len(ranges) and self._next_addressed(state.reader, ranges[i][1]) == ranges[i + 1][0]:
            ranges[i][1] = ranges[i + 1][1]
            del ranges[i + 1]

    def _journal(self, reader: str, state: _ReaderState, kind: str, seq: int) -> None:
        """Append one event to the reader's journal (durable), then refresh its snapshot. The
        caller holds the reader's lock and folded the journal into ``state``."""
        journal = self._journal_path(reader)
        repair_tail(journal)  # what remains is exactly what ``state`` folded
        event = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "reader": reader,
            "seq": seq,
            "ts": self.clock.now_iso(),
        }
        line = (dumps_line(event) + "\n").encode("ascii")
        durable_append(journal, line)
        if kind == "delivered":
            state.delivered = max(state.delivered, seq)
        else:
            self._insert_ack(state, seq)
        state.journal_bytes += len(line)
        snapshot = {
            "schema_version": SCHEMA_VERSION,
            "kind": "mailbox-cursor",
            "team_id": self.team_id,
            "reader": reader,
            "delivered_seq": state.delivered,
            "acked_through": state.acked_through,
            "acked_ranges": state.acked,
            "journal_bytes": state.journal_bytes,
            "updated_at": self.clock.now_iso(),
        }
        # The journal is the record; the snapshot only saves folding it, so it need not be fsynced.
        atomic_write(self._snapshot_path(reader), dumps_document(snapshot).encode("ascii"), durable=False)

    def _fill_acks(self, messages: list[Message]) -> None:
        if not messages:
            return
        states = [self._reader_state(r) for r in self.readers()]
        for message in messages:
            message.acked_by = [s.reader for s in states if message.addressed_to(s.reader) and s.covers(message.seq)]

    def _first_unacked(
        self,
        path: str,
        first: int,
        recipients_of: Callable[[Message], Iterable[str]],
        states: dict[str, _ReaderState],
    ) -> tuple[int, str] | None:
        """The first message of a segment some recipient has not acknowledged, and who."""
        for entry in self._read_on(_Pos(first, 0)):
            if entry[1] != first:
                break  # read past the segment
            message = _message(entry[4])
            if message is None:
                continue
            for reader in sorted(set(recipients_of(message))):
                if reader not in states:
                    states[reader] = self._reader_state(reader)
                if not states[reader].covers(message.seq):
                    return message.seq, reader
        return None

    # -- test and benchmark support --------------------------------------------------------------

    def _bulk_load(self, records: Iterable[dict[str, Any]]) -> int:
        """Append many already-valid message records under one lock, rotating like ``send``,
        without the idempotency check (callers guarantee unique ids). For building large test
        mailboxes fast. Returns the last seq."""
        self._prepare()
        with self.log.lock():
            self.log.rotate_locked()
            self.log.mark()
            seq = self.log.last_seq()
            size = _size(self.path)
            lines: list[bytes] = []
            pending = 0
            for record in records:
                seq += 1
                line = (dumps_line({"seq": seq, **{k: v for k, v in record.items() if k != "seq"}}) + "\n").encode()
                lines.append(line)
                pending += len(line)
                if size + pending >= self.max_bytes:
                    durable_append(self.path, b"".join(lines))
                    lines, pending = [], 0
                    self.log.rotate_locked()
                    size = _size(self.path)
            if lines:
                durable_append(self.path, b"".join(lines))
        return seq


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StorageError(f"could not read {path}: {exc.strerror}.", path=path) from exc


def _truncate(path: str, size: int) -> None:
    """Cut a derived index file back to ``size`` bytes (never used on the mailbox itself)."""
    try:
        fd = os.open(path, os.O_WRONLY | _CLOEXEC)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"could not repair {path}: {exc.strerror}.", path=path) from exc
