"""The catalogue of one agent's checkpoints: what exists, in order, and how a write is made durable.

Two files next to the checkpoints, both owned by this module:

``index.log`` (the log: a write-ahead log, reused in place)
    A 512-byte header, the ``open`` frame (the log's ``generation``, a random ``salt``, the boot
    it was started in, the agent) padded with zeros, then frames
    ``@<payload length> <seed> <hash>\\n<payload>``: the payload is one JSON line of metadata and, for a
    checkpoint of at most ``INLINE_LIMIT`` bytes, the checkpoint's bytes. ``hash`` is the xxh3-64
    of the payload seeded with ``seed``, the previous frame's hash (the first frame's: the salt):
    a reader takes frames from the header on while that chain holds and stops at the first frame
    that breaks it, a torn one (a writer killed mid-write) or one left from an earlier generation
    (told by its seed alone, before its payload is read). A frame whose payload does not verify
    while the frames after it chain on its stated hash is damage in the middle (bit rot), not a
    torn tail: readers read past it and the next writer settles the log (``_past_damage``). One
    whose head line only is damaged is read whole: its payload, up to the next frame, hashes on
    the chain to that frame's seed (``_resync``).
    When a generation ends (settling, below) the header gets a new generation and salt and frames
    are written from offset 512 again, over the old ones: the log's blocks stay allocated, so the
    ``fdatasync`` of a record flushes that record alone and never the file's metadata, as SQLite's
    write-ahead log does. (Logs written by earlier versions, framed with a crc32 and appended
    only, are read as they are and converted by the next writer.)

``index.json`` (the snapshot)
    Every checkpoint known when the log was last settled: ``next_seq``, ``generation`` and one
    entry per checkpoint (name, seq, type, time, label, operation, size). Replaced atomically
    and durably, only when the log is settled.

How a checkpoint becomes durable (the writer holds the store's lock):

- *small* (at most ``INLINE_LIMIT``, the common case): one frame holding the checkpoint's bytes
  and the names retention drops, written at the log's end and ``fdatasync``-ed: that is the
  durable point, one flush. What follows from it is derived from that frame and done behind
  (``_background``, a worker thread of the writing process): the named file is created (whole
  or not at all, without a flush) and the files retention dropped are removed. Until then the
  process reads the checkpoint from memory, other processes from the log. A process killed
  before its write-behind leaves the files to the next writer that loads the log (any process),
  and ``flush()`` waits for it. A power loss can lose named files written since the last
  settle: the log still holds them, and the first writer after a reboot (the boot id changed)
  rewrites each from the log before going on.
- *large*: the frame (metadata only) is written first, which reserves the seq, then the file
  is created with ``fsync`` of the file and of the directory. A record whose file never appeared
  (the writer was killed in between) is hidden from readers and dropped by the next writer.

Settling (once a frame passes the log's capacity, ``LOG_LIMIT`` bytes or ``LOG_FRAMES`` frames
of its size if that is more, or ``LOG_RECORDS`` records; and on ``rebuild``): every named file
the log holds is created if missing and fsynced, the files it dropped are removed, the snapshot is
replaced (generation + 1), then the header is rewritten in place with that generation and a new
salt. A crash between the two leaves a log older than the snapshot, which is then ignored (the
snapshot has it all). The write that passes the capacity does not settle: it asks the
write-behind (``_settle_behind``), which flushes the named files without the lock first, so that
writers go on meanwhile and wait only for the snapshot and the header. A write that finds the log
at twice its capacity (no settle came) settles it itself before writing. Either way nothing is
durable sooner or later: until the new header is written, the log holds every checkpoint.

Only writers (under the lock) create or remove files. Readers (any process, no lock) keep the view
in memory; on each load they read the log's header and whatever frames follow the end they knew
(a few hundred bytes when nothing changed; a new header or another file: the whole log again).
The log's timestamps are never asked for (``InPlaceFile.identity``): on Linux a query makes the
next write's ``fdatasync`` commit the file system's journal. The directory is looked at again when
its modification time changed, or changed too recently to tell (within the file system's
timestamp granularity); a changed directory (an edit by hand: a file copied in or deleted) is
listed and reconciled. A missing or unreadable snapshot is rebuilt from the log and the directory
by the next writer, which reports it (``on_damage``) and keeps an unreadable one as
``index.json.corrupt-<time>``; the log's header keeps the snapshot's ``next_seq`` as of the last
settle, so that the seq of a checkpoint dropped since is never handed out again.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from datetime import date as _date
from typing import Any, NamedTuple

import orjson
import xxhash

from phoenix_protocol._clock import iso_from_ms, system_clock
from phoenix_protocol._durable import (
    InPlaceFile,
    atomic_create,
    atomic_write,
    fsync_file,
    fsync_files,
    in_place_file,
    keep_damaged,
    read_bytes,
)
from phoenix_protocol._errors import StorageError
from phoenix_protocol._jsonio import JSONError, dumps_line, loads

__all__ = [
    "CHECKPOINT_TYPES",
    "HEADER_SIZE",
    "INLINE_LIMIT",
    "LOG_LIMIT",
    "SUFFIX",
    "Catalog",
    "CheckpointInfo",
    "frame",
    "make_name",
    "parse_name",
]

CHECKPOINT_TYPES = ("routine", "pre-operation", "recovery", "session")
SUFFIX = ".checkpoint"
INDEX_NAME = "index.json"
LOG_NAME = "index.log"
LOG_VERSION = 2
HEADER_SIZE = 512
LOG_LIMIT = 4 * 1024 * 1024
INLINE_LIMIT = 1280 * 1024
"""Checkpoints up to this size go through the log (one flush, the file written behind); larger
ones are flushed as their own file."""
LOG_FRAMES = 8
"""A log holds at least this many frames of the size being written (8 MB for 1 MB checkpoints):
settling, which flushes every named file the log holds, comes every few writes at most."""
LOG_RECORDS = 512
BEHIND_CHUNK = 16  # named files created (and as many removed) per hold of the lock
BEHIND_BYTES = 32 * 1024 * 1024
"""Named files waiting to be written behind hold at most about this much memory."""
_CHUNK = 64 * 1024  # what a reader reads at once past the end it knew
_PROBE = 4096  # ... at first
_RESYNC_AGAIN_S = 1.0  # a reader looks again after this long for a successor of a broken record (``_resync``)
_RESYNC_SLACK = 64 * 1024  # beyond INLINE_LIMIT: a record's metadata line and the next head (``_resync``)
_DAMAGE_LOOKAHEAD = 8  # damaged frames in a row a reader looks past for one that verifies (``_past_damage``)
_FRAME_HEAD = 56  # a frame header is at most this long: "@" + length + 2 x (" " + 16 hex digits) + "\n"
_V1 = -1  # the seed of a frame of the earlier format (crc32, no seed)
_EPOCH_DAY = _date(1970, 1, 1).toordinal()
_SETTLE_ROUNDS = 3  # rounds of flushing named files before a settle behind takes the lock
_SETTLED_NS = 50_000_000  # a modification time older than this is past any timestamp granularity


class CheckpointInfo:
    """What the catalogue knows of a checkpoint, without reading it."""

    __slots__ = (
        "_encoded",
        "checkpoint_type",
        "failed_sections",
        "label",
        "name",
        "operation_id",
        "seq",
        "size",
        "timestamp_ms",
    )

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
        self._encoded: str | None = None

    @property
    def timestamp(self) -> str:
        return iso_from_ms(self.timestamp_ms)

    def encoded(self) -> str:
        """The entry's line in ``index.json`` (encoded once)."""
        if self._encoded is None:
            self._encoded = dumps_line(self.as_dict())
        return self._encoded

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
    """``(agent_id, seq, timestamp_ms, checkpoint_type)`` from a checkpoint file name, or ``None``."""
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
    global _name_second
    secs, milli = divmod(timestamp_ms, 1000)
    last = _name_second
    if last[0] != secs:
        last = _name_second = (secs, time.strftime("%Y%m%d%H%M%S", time.gmtime(secs)))
    return f"{agent_id}_{last[1]}{milli:03d}-{seq:08d}_{checkpoint_type}{SUFFIX}"


_boot: str | None = None


def boot_id() -> str:
    """This boot of the machine (a reboot may have lost files written without a flush)."""
    global _boot
    if _boot is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as fh:
                _boot = fh.read().decode("ascii", "replace").strip()
        except OSError:
            import psutil

            _boot = f"boot-{int(psutil.boot_time())}"
    return _boot


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    """A frame's metadata line (orjson: this is on every write; the stdlib codec when missing)."""
    try:
        return orjson.dumps(meta)
    except (TypeError, orjson.JSONEncodeError):  # pragma: no cover - metadata is plain JSON
        return dumps_line(meta).encode("ascii")


def _frame_head(buf: bytes, pos: int) -> tuple[int, int, int, int] | None:
    """``(payload start, payload length, seed, hash)`` of the frame header at ``pos``; the seed
    is ``_V1`` for a frame of the earlier format (``@<length> <crc32>``)."""
    if buf[pos : pos + 1] != b"@":
        return None
    nl = buf.find(b"\n", pos, pos + _FRAME_HEAD)
    if nl < 0:
        return None
    fields = buf[pos + 1 : nl].split(b" ")
    if not fields[0].isdigit():  # a length is digits only (int() would take "-12" or " 12")
        return None
    with contextlib.suppress(ValueError):  # not numbers: not a frame header
        if len(fields) == 3 and len(fields[1]) == len(fields[2]) == 16:
            return nl + 1, int(fields[0]), int(fields[1], 16), int(fields[2], 16)
        if len(fields) == 2 and len(fields[1]) == 8:
            return nl + 1, int(fields[0]), _V1, int(fields[1], 16)
    return None


def _head(length: int, seed: int, digest: int) -> bytes:
    """A frame's header line (``_frame_head`` reads it)."""
    return b"@%d %016x %016x\n" % (length, seed, digest)


def frame(meta: dict[str, Any], content: bytes = b"", seed: int = 0) -> tuple[bytes, int]:
    """One log frame (``meta`` and ``content``) chained on ``seed``, and its hash (the next seed)."""
    payload = dumps_line(meta).encode("ascii") + b"\n" + content
    digest = xxhash.xxh3_64_intdigest(payload, seed=seed)
    return _head(len(payload), seed, digest) + payload, digest


def _parse_header(header: bytes) -> tuple[int, int, str, int] | None:
    """``(generation, salt, boot, next_seq)`` from a log header of this version, or ``None``
    (``next_seq``: the snapshot's when the log was started; 0 in headers written before it was
    kept there)."""
    head = _frame_head(header, 0)
    if head is None or head[2] == _V1:
        return None
    start, length, _seed, digest = head
    payload = header[start : start + length]
    # The header's seed is always 0: a damaged seed field is ignored, and a hash field one hex
    # digit off is taken as damage to that digit (damage to the payload changes the whole hash).
    actual = xxhash.xxh3_64_intdigest(payload, seed=0)
    if len(payload) != length or sum(a != b for a, b in zip(f"{actual:016x}", f"{digest:016x}", strict=True)) > 1:
        return None
    try:
        meta = loads(payload[: payload.find(b"\n")] if b"\n" in payload else payload)
        if not isinstance(meta, dict) or meta.get("k") != "open" or meta.get("v") != LOG_VERSION:
            return None
        return int(meta["generation"]), int(meta["salt"]), str(meta.get("boot", "")), int(meta.get("next_seq", 0))
    except (JSONError, KeyError, TypeError, ValueError):
        return None


def _frames_salvaged(data: bytes, next_seq: int) -> tuple[dict[str, tuple[CheckpointInfo, Slot]], int, set[str]]:
    """The checkpoints a log whose header does not read still holds (its bytes ``data``): each
    frame is checked against its own seed, so any whole frame is found; only seqs from the
    snapshot's ``next_seq`` on (older frames are of generations the snapshot holds), less those a
    later frame dropped. Also the highest seq any put frame had, dropped and large ones included,
    or the header's JSON says was given (a number never to hand out again: a damaged one only
    skips numbers), and the names the frames dropped (their files, if a writer was killed before
    removing them, must not come back)."""
    found: dict[str, tuple[CheckpointInfo, Slot]] = {}
    dropped: set[str] = set()
    said = _damaged_header_meta(data).get("next_seq")
    highest = said - 1 if type(said) is int and said > 0 else 0
    # Frames of earlier generations stay past the current one's end (the log is reused in
    # place). With the snapshot lost too, ``next_seq`` cannot tell them; the current generation's
    # first checkpoint can: its frames chain from offset HEADER_SIZE on the header's salt.
    next_seq = max(next_seq, _first_seq_of_generation(data))
    pos = HEADER_SIZE
    while pos < len(data):
        head = _frame_head(data, pos)
        if head is None:
            pos = data.find(b"@", pos + 1)
            if pos < 0:
                break
            continue
        start, length, seed, digest = head
        end = start + length
        if end > len(data) or seed == _V1 or xxhash.xxh3_64_intdigest(data[start:end], seed=seed) != digest:
            pos += 1
            continue
        meta_end = data.find(b"\n", start, end)
        try:
            meta = loads(data[start:meta_end]) if meta_end >= 0 else None
        except JSONError:
            meta = None
        if isinstance(meta, dict):
            if meta.get("k") == "put":
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    info = CheckpointInfo.from_dict(meta)
                    highest = max(highest, info.seq)
                    if info.seq >= next_seq and meta_end + 1 < end:  # a large one's file is its own
                        found[info.name] = (info, Slot(pos, end - pos, meta_end + 1 - pos, seed))
            for name in meta.get("drop") or ():
                found.pop(str(name), None)
                dropped.add(str(name))
        pos = end
    return found, highest, dropped


def _damaged_header_meta(data: bytes) -> dict[str, Any]:
    """What the JSON of a log header that does not verify still says (nothing if it does not
    read); any of it may be the damaged part."""
    header = data[:HEADER_SIZE]
    nl = header.find(b"\n")
    end = header.find(b"\n", nl + 1)
    try:
        meta = loads(header[nl + 1 : end]) if 0 <= nl < end else None
    except JSONError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _first_seq_of_generation(data: bytes) -> int:
    """The seq of the first checkpoint of the generation a log whose header does not verify was
    in (its bytes ``data``), when that can be told: the salt still reads from the header's JSON,
    and the frames from offset HEADER_SIZE chain on it up to a checkpoint's. Else 0."""
    meta = _damaged_header_meta(data)
    if type(meta.get("salt")) is not int:
        return 0
    seed, pos = meta["salt"], HEADER_SIZE
    while (head := _frame_head(data, pos)) is not None:
        start, length, frame_seed, digest = head
        stop = start + length
        if frame_seed != seed or stop > len(data):
            return 0  # not this generation's (none of its frames left, or the first damaged)
        meta_end = data.find(b"\n", start, stop)
        if xxhash.xxh3_64_intdigest(data[start:stop], seed=frame_seed) == digest and meta_end >= 0:
            with contextlib.suppress(JSONError):
                record = loads(data[start:meta_end])
                if isinstance(record, dict) and record.get("k") == "put" and type(record.get("seq")) is int:
                    return int(record["seq"])
        seed, pos = digest, stop
    return 0


def _seed_at(view: View, head_bytes: bytes, head: tuple[int, int, int, int] | None) -> int | None:
    """Where the seed field is in the head at the end of the chain (``head_bytes``, ``head`` as
    parsed) when that head is this generation's, damaged (its seed reads as the chain, or one hex
    digit off it, a digit that may be no hex digit any more), rather than the end of the log
    (zeros, or a record of an earlier generation, whose seed is another); else ``None``."""
    if head is not None:  # it reads: ours if its seed is one hex digit off (the other fifteen agree)
        x = head[2] ^ view.chain
        shift = (x.bit_length() - 1) & ~3
        one_off = bool(x) and x >> shift < 16 and not x & ((1 << shift) - 1)
        return head_bytes.find(b" ") + 1 if one_off else None
    chain = b"%016x" % view.chain
    at = head_bytes.find(chain)
    if at >= 0:
        return at
    if head_bytes[:1] != b"@":
        return None  # zeros, or what an earlier generation left
    for at in range(3, 11):  # "@", 1 to 8 length digits, " "
        field = head_bytes[at : at + 16]
        if len(field) == 16 and sum(a != b for a, b in zip(field, chain, strict=True)) == 1:
            return at
    return None


def _never_again(view: View, payload: bytes) -> None:
    """The seq of a damaged record (its ``payload``), if it still reads, is never handed out
    again: from its metadata, else from the ``"seq":`` its bytes still hold."""
    seq = None
    meta_end = payload.find(b"\n")
    with contextlib.suppress(JSONError, TypeError):
        said = loads(payload[:meta_end] if meta_end >= 0 else payload)
        if isinstance(said, dict) and type(said.get("seq")) is int:
            seq = said["seq"]
    if seq is None:
        at = payload.find(b'"seq":', 0, meta_end if meta_end >= 0 else len(payload))
        digits = payload[at + 6 : at + 22].split(b",")[0].split(b"}")[0].strip() if at >= 0 else b""
        seq = int(digits) if digits.isdigit() else None
    if seq is not None and 0 < seq < 1 << 53:
        view.next_seq = max(view.next_seq, seq + 1)


class Slot(NamedTuple):
    """Where a checkpoint's bytes are in the log: its frame, and the seed that verifies it."""

    frame_at: int
    frame_len: int
    content_at: int  # offset of the checkpoint's bytes within the frame
    seed: int  # _V1: a crc32 frame of the earlier, append-only log


class View:
    """One process's picture of the catalogue (see the module docstring for when it is reused)."""

    def __init__(self) -> None:
        self.generation = 0
        self.next_seq = 1
        self.entries: dict[str, CheckpointInfo] = {}
        self.inline: dict[str, Slot] = {}  # name -> where its bytes are in the log
        self.pending: set[str] = set()  # large checkpoints recorded whose file is not there (yet)
        self.unchecked: set[str] = set()  # logged by another process: is the named file there?
        self.dropped: set[str] = set()  # dropped by this log's records (never re-added from the directory)
        self.unremoved: set[str] = set()  # dropped by another process, which may have died before unlinking
        self.log_ino: int | None = None  # the log file's inode when last looked at (None: no log)
        self.log_end = 0  # end of the last whole frame
        self.log_version = 0
        self.log_generation = -1  # -1: no usable log
        self.log_damaged = False  # a log whose header reads in neither format (see ``_salvage``)
        self.damaged_frames: list[int] = []  # offsets of frames damaged mid-log, read past (``_past_damage``)
        self.recovered: dict[str, bytes] = {}  # checkpoints of frames whose head only was damaged (``_resync``)
        self.resync_tried: tuple[int, int, float] | None = None  # (offset, chain, when) a ``_resync`` last tried
        self.end_seen: tuple[int, bytes] | None = None  # where the chain ended, and the bytes there (``_ours``)
        self.salvage_from = 0  # with it: the snapshot's next_seq (the seqs its frames may add)
        self.snapshot_lost = False  # no snapshot read: missing, or unreadable (see ``_snapshot_lost``)
        self.snapshot_damaged: bytes | None = None  # an unreadable snapshot's bytes
        self.vanished: set[str] = set()  # listed, left out: no file and no copy in the log (``_reconcile``)
        self.chain = 0  # the last frame's hash (the salt, before the first frame): the next frame's seed
        self.log_boot = ""
        self.log_header = b""  # the header as last read or written (a refresh compares bytes)
        self.log_records = 0
        self.dir_seen = -1
        self._order: list[CheckpointInfo] = []  # every entry, oldest first (changed in place)
        self._types: dict[str, list[CheckpointInfo]] = {kind: [] for kind in CHECKPOINT_TYPES}  # likewise
        self._sorted: tuple[CheckpointInfo, ...] | None = None  # immutable: readers iterate it freely
        self.counts: dict[str, int] | None = None  # set when ``entries`` holds only some (PostgreSQL)

    def invalidate(self) -> None:
        """Forget the snapshot handed to readers (rebuilt on the next use)."""
        self._sorted = None

    def ordered(self) -> tuple[CheckpointInfo, ...]:
        """Visible entries, oldest first (a snapshot: changes replace it, never edit it)."""
        if self._sorted is None:
            pending = self.pending
            self._sorted = tuple(e for e in self._order if e.name not in pending) if pending else tuple(self._order)
        return self._sorted

    def count(self, kind: str) -> int:
        """How many checkpoints of type ``kind`` there are (all of them, even in a partial view)."""
        if self.counts is not None:
            return self.counts.get(kind, 0)
        return len(self.by_type().get(kind, ()))

    def by_type(self) -> dict[str, list[CheckpointInfo]]:
        """Visible entries of each type, oldest first (do not change the lists)."""
        if not self.pending:
            return self._types
        groups: dict[str, list[CheckpointInfo]] = {kind: [] for kind in CHECKPOINT_TYPES}
        for e in self.ordered():
            groups.setdefault(e.checkpoint_type, []).append(e)
        return groups

    def fill(self, entries: Iterable[CheckpointInfo]) -> None:
        """Start from ``entries`` (a snapshot), whatever their order."""
        for info in entries:
            self.entries[info.name] = info
        self._order = sorted(self.entries.values(), key=_by_seq)
        self._types = {kind: [] for kind in CHECKPOINT_TYPES}
        for info in self._order:
            self._types.setdefault(info.checkpoint_type, []).append(info)
        self._sorted = None

    def add(self, info: CheckpointInfo) -> None:
        old = self.entries.get(info.name)
        if old is not None:
            self._unorder(old)
        self.entries[info.name] = info
        _insert(self._order, info)
        _insert(self._types.setdefault(info.checkpoint_type, []), info)
        self._sorted = None
        if info.seq >= self.next_seq:
            self.next_seq = info.seq + 1

    def remove(self, name: str) -> None:
        info = self.entries.pop(name, None)
        self.inline.pop(name, None)
        self.pending.discard(name)
        self.unchecked.discard(name)
        if info is not None:
            self._unorder(info)
            self._sorted = None

    def _unorder(self, info: CheckpointInfo) -> None:
        for order in (self._order, self._types.get(info.checkpoint_type)):
            if order:
                if order[0] is info:  # retention drops the oldest, mostly
                    del order[0]
                else:
                    with contextlib.suppress(ValueError):
                        order.remove(info)


def _insert(order: list[CheckpointInfo], info: CheckpointInfo) -> None:
    """Put ``info`` in ``order`` by seq (at the end, mostly)."""
    if not order or order[-1].seq < info.seq:
        order.append(info)
    else:
        bisect.insort(order, info, key=_by_seq)


def _by_seq(info: CheckpointInfo) -> int:
    return info.seq


class Catalog:
    """The snapshot and the log of one checkpoint directory. ``lock`` takes the store's write
    lock (the write-behind takes it too)."""

    def __init__(
        self,
        directory: str,
        agent_id: str,
        describe: Callable[[CheckpointInfo], CheckpointInfo],
        lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        delay: float = 0.0,
        on_behind_error: Callable[[StorageError], None] | None = None,
        on_damage: Callable[[str, str], None] | None = None,
    ) -> None:
        self.dir = directory
        self.on_behind_error = on_behind_error
        self.on_damage = on_damage
        """Told (one line) when the log did not read and what could be saved of it was."""
        """Told when a named file cannot be created from the log (a write-behind, or a writer's
        repair): the checkpoint stays durable in the log, readable from it, until it can be."""
        self.agent_id = agent_id
        self.index_path = os.path.join(directory, INDEX_NAME)
        self.log_path = os.path.join(directory, LOG_NAME)
        self._describe = describe
        self._lock = lock
        self.delay = delay  # seconds before the write-behind runs (what follows meanwhile joins it)
        self._view: View | None = None
        self._mutex = threading.RLock()  # threads of one process share the view
        self._as_writer = False  # the load under way is a writer's (``_resync``)
        # Written by this process, not yet done on disk (the write-behind's work; under _mutex):
        # name -> (its entry, its bytes, the log generation it was written in)
        self.deferred: dict[str, tuple[CheckpointInfo, bytes, int]] = {}  # named file not created yet
        self.unlink_later: set[str] = set()  # dropped checkpoints whose file may still be there
        self._behind_bytes = 0
        # A settle this process's write asked the write-behind for: the log generation it was
        # asked in (-1: none), and the named files of that generation flushed for it already.
        self._settle_asked = -1
        self._synced: set[str] = set()

    @property
    def log(self) -> InPlaceFile:
        """The log's descriptor, shared by every catalogue of this directory in the process."""
        return in_place_file(self.log_path)

    # -- loading -------------------------------------------------------------------------------

    def load(self, *, writer: bool = False) -> View:
        """The current view. ``writer=True`` (under the store's lock) also repairs: files only the
        log holds are created, large records without a file dropped, an old or unusable log
        replaced, and after a reboot every file the log holds is checked and rewritten from it."""
        with self._mutex:
            self._as_writer = writer
            try:
                return self._load(writer)
            finally:
                self._as_writer = False

    def _load(self, writer: bool) -> View:
        """``load``, holding ``_mutex``."""
        try:
            dir_mtime = os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            dir_mtime = -1
        log = self.log
        view = self._view
        if view is not None and view.log_ino is not None and view.log_version == LOG_VERSION:
            # The common case: one call reads the header and what follows the end we knew.
            # Replacing or deleting the log changes the directory: a reader whose directory
            # did not change reads through the descriptor it has; a writer always checks it.
            seen = log.look(0, HEADER_SIZE, view.log_end, _PROBE, check=writer or dir_mtime != view.dir_seen)
            if seen is None:
                view = self._full_load(None)  # the log vanished
            elif seen[0] != view.log_ino or seen[1] != view.log_header:
                view = self._full_load(seen[0])  # another file, or a new generation
            else:
                self._replay(view, seen[0], seen[2])
        else:
            ino = log.identity()
            if view is None or ino is not None or view.log_ino is not None:
                # no view yet, or a log now or before (of another version, appeared, vanished)
                view = self._full_load(ino)
        if writer and view.damaged_frames and view.log_ino is not None:
            # Found by an earlier load without the lock: look again, whole, under it (no
            # writer can be writing a frame now) before anything is repaired.
            view = self._full_load(view.log_ino)
        if view.pending:
            self._check_pending(view, writer=writer)
        if dir_mtime != view.dir_seen:
            self._reconcile(view, dir_mtime)
        if writer:
            self._repair(view)
        self._view = view
        return view

    def log_damaged(self) -> bool:
        """Whether the view last loaded found the log's header unreadable (its checkpoints read
        from its frames until a writer salvages it)."""
        return self._view is not None and self._view.log_damaged

    def snapshot_problem(self) -> str | None:
        """What is wrong with ``index.json`` as the view last loaded found it: unreadable, or
        missing though the log was settled before (a store never settled has none); a writer
        rebuilds it from the log and the directory."""
        view = self._view
        if view is None:
            return None
        if view.snapshot_damaged is not None:
            return f"{self.index_path} does not read"
        if view.snapshot_lost and view.log_version == LOG_VERSION and view.log_generation > 0:
            return f"{self.index_path} is missing"
        return None

    def vanished(self) -> list[str]:
        """The checkpoints the view last loaded left out: listed by the snapshot or the log, with
        neither a file nor a copy in the log (deleted outside Phoenix). Forgotten once a writer
        settles the log."""
        return sorted(self._view.vanished) if self._view is not None else []

    def frames_damaged(self) -> list[int]:
        """Offsets of the records the view last loaded read past, damaged in the middle of the
        log (``_past_damage``; a writer settles the log)."""
        return list(self._view.damaged_frames) if self._view is not None else []

    def reload(self) -> View:
        """Forget the view and load again (after noticing it went stale)."""
        with self._mutex:
            self._view = None
            return self.load()

    def _read_snapshot(self, view: View) -> tuple[int, int, list[CheckpointInfo]] | None:
        """The snapshot, or ``None`` (missing; or unreadable: its bytes kept in
        ``view.snapshot_damaged`` for the next writer to keep aside)."""
        data = read_bytes(self.index_path)
        if data is None:
            return None
        try:
            index = loads(data)
            entries = [CheckpointInfo.from_dict(e) for e in index["entries"]]
            return int(index.get("generation", 0)), int(index["next_seq"]), entries
        except (JSONError, KeyError, TypeError, ValueError, AttributeError):
            view.snapshot_damaged = data
            return None

    def _full_load(self, ino: int | None) -> View:
        """The snapshot and the whole log; ``load`` then reconciles with the directory (a fresh
        view has not seen it), which also covers a lost snapshot or log."""
        view = View()
        snapshot = self._read_snapshot(view)
        if snapshot is not None:
            view.generation, view.next_seq, entries = snapshot
            view.fill(entries)
        else:
            view.snapshot_lost = True
        if ino is not None:
            view.log_ino = ino
            header = self.log.read(0, HEADER_SIZE, ino=ino)
            view.log_header = header
            if self._open_header(view, header):
                self._replay(view, ino)
            elif (old := _frame_head(header, 0)) is not None and old[2] == _V1:
                st = self.log.stat()  # an old-format log, read whole once (its next writer converts it)
                self._replay_v1(view, self.log.read(0, st.st_size if st is not None else 0, ino=ino))
            elif header.strip(b"\0"):
                # Neither format: a writer salvages its frames (``_salvage``); until then readers
                # read from them the checkpoints only they hold.
                view.log_damaged = True
                view.salvage_from = view.next_seq  # the snapshot's: frames of older seqs it holds
                st = self.log.stat()
                data = self.log.read(0, st.st_size if st is not None else 0, ino=ino)
                found, highest, dropped = _frames_salvaged(data, view.next_seq)
                for name in dropped:
                    view.remove(name)
                    view.dropped.add(name)  # not taken back from the directory
                for name, (info, slot) in found.items():
                    view.add(info)
                    view.inline[name] = slot
                view.next_seq = max(view.next_seq, highest + 1)
        return view

    def _open_header(self, view: View, header: bytes) -> bool:
        """Take the log's generation and salt from its header; ``False`` if it is not a usable
        header of this version."""
        parsed = _parse_header(header)
        if parsed is None:
            return False
        view.log_generation, view.chain, view.log_boot, next_seq = parsed
        # The seqs handed out before the log started: a lost snapshot must not hand them out again.
        view.next_seq = max(view.next_seq, next_seq)
        view.log_version = LOG_VERSION
        view.log_end = HEADER_SIZE
        view.log_records = 0
        return True

    def _replay(self, view: View, ino: int, probe: bytes | None = None) -> None:
        """Apply the frames that follow ``view.log_end`` while the hash chain holds (``probe``:
        the first ``_PROBE`` bytes there, already read)."""
        pos = view.log_end
        if probe is None:  # mostly nothing follows (a writer checking under its lock): read little first
            probe = self.log.read(pos, _PROBE, ino=ino)
        buf, eof = probe, len(probe) < _PROBE
        base = pos  # the log offset of buf[0]
        while True:
            i = pos - base
            if i + _FRAME_HEAD > len(buf) and not eof:
                buf, base, i = self.log.read(pos, _CHUNK, ino=ino), pos, 0
                eof = len(buf) < _CHUNK
            head = _frame_head(buf, i)
            if head is None or head[2] != view.chain:  # torn, or from an earlier generation
                seen = (pos, buf[i : i + _FRAME_HEAD])
                seed_at = None if seen == view.end_seen else _seed_at(view, seen[1], head)
                if seed_at is None:
                    view.end_seen = seen  # the end, as the last load found it: not looked at again
                    break
                if (found := self._resync(view, ino, pos, seed_at)) is None:
                    break
                pos = self._apply_recovered(view, pos, *found)
                buf, base, eof = self._chunk(pos, ino)
                continue
            start, length, _seed, digest = head
            end = start + length
            if end > len(buf):  # a frame larger than what was read: read it whole
                need = end - i
                buf, base, eof = self.log.read(pos, need, ino=ino), pos, False
                if len(buf) < need:  # past the file's end: torn, or a damaged length
                    if (found := self._resync(view, ino, pos, buf.find(b" ") + 1)) is None:
                        break
                    pos = self._apply_recovered(view, pos, *found)
                    buf, base, eof = self._chunk(pos, ino)
                    continue
                start, end, i = start - i, end - i, 0
            if xxhash.xxh3_64_intdigest(memoryview(buf)[start:end], seed=view.chain) != digest:
                past = self._past_damage(ino, pos + end - i, digest)
                if past is None:
                    # A torn tail (or nothing after it to tell), or a damaged length or hash:
                    # the payload may still chain on to a later record.
                    if (found := self._resync(view, ino, pos, buf.find(b" ", i) + 1 - i)) is None:
                        break
                    pos = self._apply_recovered(view, pos, *found)
                    buf, base, eof = self._chunk(pos, ino)
                    continue
                # A frame after it chains on its stated hash: so it was whole when that one was
                # written. Read it again: a writer may have been writing it when it was read.
                again = self.log.read(pos, end - i, ino=ino)
                if len(again) == end - i and xxhash.xxh3_64_intdigest(again[start - i :], seed=view.chain) == digest:
                    buf, base, eof = again, pos, False  # whole now: read on from it
                    start, end, i = start - i, end - i, 0
                else:
                    view.damaged_frames.append(pos)  # its own checkpoint is left to its file
                    _never_again(view, buf[start:end])
                    pos, view.chain = past
                    buf, base, eof = self._chunk(pos, ino)
                    continue
            meta_end = buf.find(b"\n", start, end)
            if meta_end < 0:
                break
            try:
                meta = loads(buf[start:meta_end])
            except JSONError:
                break
            slot = Slot(pos, end - i, meta_end + 1 - i, view.chain)
            self._apply(view, meta, slot, end - meta_end - 1)
            view.chain = digest
            pos += end - i
        view.log_end = pos

    def _resync(self, view: View, ino: int, pos: int, seed_at: int) -> tuple[bytes, int, int] | None:
        """A record at ``pos`` whose head line is damaged (its length, seed, hash or framing)
        while its payload is whole: the payload runs from the head line's end (after the seed
        field at ``seed_at``, a space, the hash field and the newline) to the next record, whose
        seed is the payload's hash on the chain. Returns ``(record bytes, payload start, hash)``,
        or ``None`` (nothing after it chains on: a torn tail). A reader tries a place again after
        ``_RESYNC_AGAIN_S`` (another process may have written after it since); a writer, under the
        lock and about to write there, always does."""
        now = time.monotonic()
        tried = view.resync_tried
        recent = tried is not None and tried[:2] == (pos, view.chain) and now - tried[2] < _RESYNC_AGAIN_S
        if recent and not self._as_writer:
            return None
        view.resync_tried = (pos, view.chain, now)
        if seed_at <= 0:
            return None
        window = self.log.read(pos, INLINE_LIMIT + _RESYNC_SLACK, ino=ino)
        payload_at = seed_at + 16 + 1 + 16 + 1
        hasher = xxhash.xxh3_64(seed=view.chain)  # one pass: each candidate end adds what lies before it
        hashed = payload_at
        q = window.find(b"@", payload_at)
        while q >= 0:
            head = _frame_head(window, q)
            if head is not None and head[2] != _V1:
                hasher.update(memoryview(window)[hashed:q])
                hashed = q
                if hasher.intdigest() == head[2]:
                    return window[:q], payload_at, head[2]
            q = window.find(b"@", q + 1)
        return None

    def _apply_recovered(self, view: View, pos: int, frame: bytes, payload_at: int, digest: int) -> int:
        """Take a record ``_resync`` recovered (its head damaged, its payload verified by the chain):
        applied as read, its checkpoint's bytes kept in memory (the log's copy no longer verifies
        on its own), and the damage noted for the next writer; one whose head reads and verifies
        now (a writer was writing it when it was first read) is taken as it is. Returns where the
        next record is."""
        head = _frame_head(frame, 0)
        whole = (
            head is not None
            and head[0] + head[1] == len(frame)
            and head[2] == view.chain
            and head[3] == digest
            and xxhash.xxh3_64_intdigest(memoryview(frame)[head[0] :], seed=view.chain) == digest
        )
        if whole:
            payload_at = head[0]  # type: ignore[index]  # whole: head is a head
        else:
            view.damaged_frames.append(pos)
        meta_end = frame.find(b"\n", payload_at)
        try:
            meta = loads(frame[payload_at:meta_end]) if meta_end >= 0 else None
        except JSONError:
            meta = None
        if isinstance(meta, dict):
            content_at = meta_end + 1
            self._apply(view, meta, Slot(pos, len(frame), content_at, view.chain), len(frame) - content_at)
            if not whole and meta.get("k") == "put" and len(frame) > content_at and isinstance(meta.get("name"), str):
                view.recovered[meta["name"]] = frame[content_at:]
        view.chain = digest
        return pos + len(frame)

    def _chunk(self, pos: int, ino: int) -> tuple[bytes, int, bool]:
        """``_replay``'s buffer read on from ``pos``: its bytes, their log offset, and whether the
        file ends in them."""
        buf = self.log.read(pos, _CHUNK, ino=ino)
        return buf, pos, len(buf) < _CHUNK

    def _past_damage(self, ino: int, at: int, claimed: int) -> tuple[int, int] | None:
        """A frame whose head chains on but whose payload does not verify: damaged in the middle
        of the log (bit rot), or a torn tail? The frames after it (from ``at``) chain on its
        ``claimed`` hash up to one that verifies: damage, and that frame's offset and seed are
        returned. A torn tail has nothing after it that chains (each frame is flushed before the
        next is written; a frame of an earlier generation has another seed): ``None``. (A head
        whose length is not digits never parses, so ``at`` is always past the frame.)"""
        seed = claimed
        for _ in range(_DAMAGE_LOOKAHEAD):
            head = _frame_head(self.log.read(at, _FRAME_HEAD, ino=ino), 0)
            if head is None or head[2] != seed:
                return None
            start, length, _seed, digest = head
            data = self.log.read(at, start + length, ino=ino)
            if len(data) < start + length:
                return None
            if xxhash.xxh3_64_intdigest(memoryview(data)[start:], seed=seed) == digest:
                return at, seed
            seed, at = digest, at + start + length  # damaged too: the next one may tell
        return None

    def _replay_v1(self, view: View, data: bytes) -> None:
        """A log of the earlier, append-only format (``@<length> <crc32>``): read it all."""
        pos = 0
        size = len(data)
        first = True
        while pos < size:
            head = _frame_head(data, pos)
            if head is None or head[2] != _V1:
                break
            start, length, _seed, crc = head
            end = start + length
            if end > size or zlib.crc32(data[start:end]) != crc:
                break
            meta_end = data.find(b"\n", start, end)
            try:
                meta = loads(data[start : meta_end if meta_end >= 0 else end])
            except JSONError:
                break
            if first:
                if not isinstance(meta, dict) or meta.get("k") != "open":
                    break
                view.log_generation = int(meta.get("generation", 0))
                view.log_boot = str(meta.get("boot", ""))
                view.log_version = 1
                first = False
            else:
                content_len = end - meta_end - 1 if meta_end >= 0 else 0
                self._apply(
                    view, meta, Slot(pos, end - pos, (meta_end + 1 - pos) if meta_end >= 0 else 0, _V1), content_len
                )
            pos = end
        view.log_end = pos

    def _apply(self, view: View, meta: Any, slot: Slot, content_len: int) -> None:
        if not isinstance(meta, dict):
            return
        view.log_records += 1
        if view.log_generation < view.generation:
            return  # a log the snapshot already holds (a crash between the two replacements)
        kind = meta.get("k")
        if kind == "put":
            try:
                info = CheckpointInfo.from_dict(meta)
            except (KeyError, TypeError, ValueError):
                return
            view.add(info)
            if content_len > 0:
                view.inline[info.name] = slot
                if info.name not in self.deferred:
                    view.unchecked.add(info.name)
            elif not os.path.exists(os.path.join(self.dir, info.name)):
                view.pending.add(info.name)
                view.invalidate()
        for name in meta.get("drop") or ():
            view.remove(str(name))
            view.dropped.add(str(name))
            if str(name) not in self.unlink_later:
                view.unremoved.add(str(name))
            parsed = parse_name(str(name))
            if parsed is not None:  # its number was given (its own record may be the damaged one)
                view.next_seq = max(view.next_seq, parsed[1] + 1)

    def _check_pending(self, view: View, *, writer: bool) -> None:
        for name in list(view.pending):
            if os.path.exists(os.path.join(self.dir, name)):
                view.pending.discard(name)
            elif writer:  # no writer is between its record and its file: this one never finished
                view.remove(name)
        view.invalidate()

    def _reconcile(self, view: View, dir_mtime: int | None) -> None:
        """Make the view agree with the directory: entries whose file is gone (and that the log
        cannot restore) are left out; checkpoint files it does not know are read and added."""
        try:
            names = set(os.listdir(self.dir))
        except FileNotFoundError:
            names = set()
        for name in list(view.entries):
            if name not in names and name not in view.inline and name not in view.pending:
                view.remove(name)
                view.vanished.add(name)
        unknown = []
        for name in names:
            if name in view.entries or name in view.dropped or not name.endswith(SUFFIX):
                continue
            parsed = parse_name(name)
            if parsed is None or parsed[0] != self.agent_id:
                continue
            _agent, seq, ms, ctype = parsed
            try:
                size = os.stat(os.path.join(self.dir, name)).st_size
            except FileNotFoundError:
                continue
            unknown.append(CheckpointInfo(name, seq, ctype, ms, size=size))
        for info in unknown:
            view.add(self._describe(info))
        view.invalidate()
        if dir_mtime is None:
            try:
                dir_mtime = os.stat(self.dir).st_mtime_ns
            except FileNotFoundError:
                dir_mtime = -1
        # A directory changed within the timestamp granularity may change again unseen: look again.
        view.dir_seen = dir_mtime if time.time_ns() - dir_mtime > _SETTLED_NS else -1

    def note_own_change(self) -> None:
        """After this process (holding the lock) changed the directory: the view is current."""
        if self._view is not None:
            try:
                self._view.dir_seen = os.stat(self.dir).st_mtime_ns
            except FileNotFoundError:
                self._view.dir_seen = -1

    # -- reading a checkpoint's bytes -----------------------------------------------------------

    def logged_content(self, view: View, name: str) -> bytes | None:
        """The bytes of checkpoint ``name`` as this process wrote them or as the log holds them
        (verified against its frame's hash), or ``None``: not in the log, or the view is stale."""
        with self._mutex:
            written = self.deferred.get(name)
            if written is not None:
                return written[1]
            recovered = view.recovered.get(name)
            if recovered is not None:
                return recovered  # its record's head is damaged (``_resync``): verified when read
            slot = view.inline.get(name)
        if slot is None:
            return None
        raw = self.log.read(slot.frame_at, slot.frame_len)
        head = _frame_head(raw, 0)
        if head is None or len(raw) != slot.frame_len:
            return None
        start, length, seed, digest = head
        payload = raw[start : start + length]
        if seed != slot.seed:
            return None  # another frame is there now
        if seed == _V1:
            if zlib.crc32(payload) != digest:
                return None
        elif xxhash.xxh3_64_intdigest(payload, seed=seed) != digest:
            return None
        return raw[slot.content_at :]

    # -- repairing (writers) -------------------------------------------------------------------

    def _salvage(self, view: View) -> None:
        """The log's header does not read (damaged, or a newer format's): keep the log beside it
        as ``index.log.corrupt-<time>``, and create the named file of each checkpoint that only
        its frames hold. Each frame carries its own seed, so a frame is checked on its own; the
        checkpoints written since the snapshot (``index.json``) have a seq from its ``next_seq``
        on, so a frame of an older generation, which the snapshot holds, is never brought back.
        A checkpoint a later frame dropped is not created. Told through ``on_damage``."""
        st = self.log.stat()
        data = self.log.read(0, st.st_size if st is not None else 0, ino=view.log_ino)
        kept = keep_damaged(self.log_path, data, system_clock.now_ms())
        frames, highest, dropped = _frames_salvaged(data, view.salvage_from)
        view.next_seq = max(view.next_seq, highest + 1)
        self._unlink([n for n in dropped if n not in frames and os.path.lexists(os.path.join(self.dir, n))])
        made = []
        for name, (_info, slot) in frames.items():
            content = data[slot.frame_at + slot.content_at : slot.frame_at + slot.frame_len]
            path = os.path.join(self.dir, name)
            try:
                atomic_create(path, content, durable=True)
            except FileExistsError:
                if read_bytes(path) == content:
                    continue
                # The same checkpoint (its name holds its seq), damaged in its file (written behind
                # without a flush before a power loss, say): the frame's bytes are verified.
                atomic_write(path, content)
            made.append(name)
        view.log_damaged = False
        self._tell(
            "checkpoint_log_salvaged",
            f"{self.log_path}: its header does not read (damaged, or written by a newer Phoenix); kept as "
            f"{os.path.basename(kept)}, {len(made)} checkpoint(s) it held (files missing or damaged) written "
            "back from its frames"
            + (f" ({', '.join(made[:5])}{' ...' if len(made) > 5 else ''})" if made else "")
            + "; a new log was started",
        )
        if made:
            self._reconcile(view, None)

    def _snapshot_lost(self, view: View, *, log_damaged: bool = False) -> bool:
        """No snapshot read while one was written before (the log is of a later generation than
        the first), or one that does not read: the catalogue was rebuilt from the log (whose header
        keeps the next seq as of the last settle) and the directory; an unreadable snapshot is
        kept as ``index.json.corrupt-<time>``, a new one written, and it is told through
        ``on_damage``. ``True`` when it settled the catalogue so."""
        damaged = view.snapshot_damaged
        view.snapshot_lost = False
        view.snapshot_damaged = None
        if damaged is None and view.log_generation <= 0 and not log_damaged:
            return False  # never settled (a damaged log's header cannot say: reported all the same): the first log holds everything, no snapshot was written yet
        kept = keep_damaged(self.index_path, damaged, system_clock.now_ms()) if damaged is not None else None
        self._settle(view)
        self._tell(
            "checkpoint_index_rebuilt",
            f"{self.index_path}: "
            + (f"does not read (kept as {os.path.basename(kept)})" if kept else "missing")
            + f"; rebuilt from index.log and the directory: {len(view.entries)} checkpoint(s), "
            f"the next number {view.next_seq}",
        )
        return True

    def _tell(self, event: str, message: str) -> None:
        """Report damage found (and repaired) through ``on_damage``: the report must not fail it."""
        if self.on_damage is not None:
            with contextlib.suppress(Exception):
                self.on_damage(event, message)

    def _repair(self, view: View) -> None:
        if view.damaged_frames:
            self._frames_damaged(view)  # settles it (and rebuilds a lost snapshot on the way)
            return
        if view.log_damaged:
            self._salvage(view)
            if view.snapshot_lost and self._snapshot_lost(view, log_damaged=True):
                return
        if view.snapshot_lost and view.log_version in (1, LOG_VERSION):
            if view.log_boot != boot_id():
                self._rewrite_after_reboot(view)  # before the settle below ends the log's copies
            if self._snapshot_lost(view):
                return
        if view.log_version == 1 and view.log_generation >= view.generation:
            if view.log_boot != boot_id():
                self._rewrite_after_reboot(view)  # before the settle ends the log's copies
            self._settle(view)  # an old-format log: its files made durable, then a new log
            return
        if view.log_version != LOG_VERSION or view.log_generation < view.generation or view.log_generation < 0:
            self._start_log(view)  # none yet, one the snapshot already holds, or one unreadable
            return
        if view.unremoved:  # a writer killed between its record and its unlinks left some
            left = [n for n in view.unremoved if os.path.lexists(os.path.join(self.dir, n))]
            view.unremoved.clear()
            if left:
                self._unlink(left)
                self.note_own_change()
        if view.unchecked:  # logged by a writer that may have died before creating the file
            for name in list(view.unchecked):
                if name in view.entries and not os.path.exists(os.path.join(self.dir, name)):
                    try:
                        self._materialize(view, name)
                    except StorageError as exc:
                        # The directory takes no new file (permissions, a full disk): the log
                        # holds the checkpoint, and this writer's own record can still go there.
                        self._behind_failed(exc)
                        continue  # the next writer tries again
                view.unchecked.discard(name)
            self.note_own_change()
        if view.log_boot != boot_id():
            self._rewrite_after_reboot(view)
            self._settle(view)  # which flushes them

    def _frames_damaged(self, view: View) -> None:
        """Frames damaged in the middle of the log, which readers read past: settle it (the next
        generation no longer holds them, and nothing is written over the frames after them),
        rewriting first, after a reboot, the files written without a flush. Told through
        ``on_damage``."""
        at = list(view.damaged_frames)
        if view.log_boot != boot_id():
            self._rewrite_after_reboot(view)
        kept = keep_damaged(self.log_path, self.log.read(0, view.log_end, ino=view.log_ino), system_clock.now_ms())
        if not (view.snapshot_lost and self._snapshot_lost(view)):  # which settles, and says so
            self._settle(view)
        self._tell(
            "checkpoint_log_frame_damaged",
            f"{self.log_path}: {len(at)} record(s) damaged in the middle of the log (at byte "
            f"{', '.join(str(a) for a in at)}), kept as {os.path.basename(kept)}; the records after them were "
            "read and the log settled into a new generation. A checkpoint only a damaged record held, "
            "without its file, is lost",
        )

    def _rewrite_after_reboot(self, view: View) -> None:
        """A reboot since the log started: files written without a flush may be lost or damaged.
        Rewrite each from the log (the caller then settles, which flushes them)."""
        for name in list(view.inline):
            content = self.logged_content(view, name)
            path = os.path.join(self.dir, name)
            if content is not None and read_bytes(path) != content:
                atomic_write(path, content, durable=False)
        self._reconcile(view, None)

    def _materialize(self, view: View, name: str) -> None:
        """Create the named file of a logged checkpoint if it is not there (never overwrites)."""
        content = self.logged_content(view, name)
        if content is None:
            return
        with contextlib.suppress(FileExistsError):  # made by someone else already
            atomic_create(os.path.join(self.dir, name), content, durable=False)

    # -- writing (under the store's lock, after ``load(writer=True)``) --------------------------

    def put(
        self,
        view: View,
        info: CheckpointInfo,
        data: bytes,
        drop: list[CheckpointInfo],
        *,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Make checkpoint ``info`` (file bytes ``data``) durable and apply what retention dropped.
        ``meanwhile`` runs while the frame is being flushed (see ``InPlaceFile.write``)."""
        with self._mutex:
            try:
                self._put(view, info, data, drop, meanwhile)
            except BaseException:
                self._view = None  # what reached the disk is read back by the next load
                self._undefer(info.name)
                raise

    def _append(
        self,
        view: View,
        meta: dict[str, Any],
        content: bytes,
        *,
        durable: bool = True,
        after: Callable[[Slot], None] | None = None,
    ) -> Slot:
        """Write one frame at the log's end (settling first when it would not fit); ``after``
        gets its slot while the frame is being flushed."""
        meta_line = _meta_bytes(meta)
        length = len(meta_line) + 1 + len(content)
        capacity = max(LOG_LIMIT, LOG_FRAMES * (_FRAME_HEAD + length))
        end = view.log_end + _FRAME_HEAD + length
        if end > 2 * capacity or view.log_records >= 2 * LOG_RECORDS:
            self._settle(view)  # the settle asked for behind did not come in time: here, now
        elif (end > capacity or view.log_records >= LOG_RECORDS) and self._settle_asked != view.log_generation:
            self._settle_asked = view.log_generation
            self._synced.clear()
            from phoenix_protocol import _background

            _background.submit(self, self.flush_deferred, delay=0.0)
        seed = view.chain
        hasher = xxhash.xxh3_64(meta_line, seed=seed)
        hasher.update(b"\n")
        hasher.update(content)
        digest = hasher.intdigest()
        head = _head(length, seed, digest)
        at = view.log_end
        slot = Slot(at, len(head) + length, len(head) + len(meta_line) + 1, seed)

        def written() -> None:
            view.chain = digest
            view.log_end = at + slot.frame_len
            view.log_records += 1
            if after is not None:
                after(slot)

        self.log.write([head, meta_line, b"\n", content], at, durable=durable, ino=view.log_ino, meanwhile=written)
        return slot

    def _put(
        self,
        view: View,
        info: CheckpointInfo,
        data: bytes,
        drop: list[CheckpointInfo],
        meanwhile: Callable[[], None] | None,
    ) -> None:
        meta: dict[str, Any] = {"k": "put", **info.as_dict()}
        if len(data) <= INLINE_LIMIT:
            # One frame holds the bytes and what retention drops: one fdatasync makes it all
            # durable. What follows from it is bookkept while that flush runs.
            if drop:
                meta["drop"] = [d.name for d in drop]

            def bookkeep(slot: Slot) -> None:
                view.inline[info.name] = slot
                self._defer(info, data, view.log_generation)  # the named file comes behind
                view.add(info)
                self._dropped(view, drop, behind=True)
                self.write_behind()
                if meanwhile is not None:
                    meanwhile()

            self._append(view, meta, data, after=bookkeep)
        else:
            # The frame reserves the seq; the file is flushed on its own; what retention drops
            # goes only once the new checkpoint is durable.
            self._append(view, meta, b"", durable=False)
            atomic_create(os.path.join(self.dir, info.name), data)  # fsync of the file, then of the directory
            view.add(info)
            if drop:
                self._append(view, {"k": "drop", "drop": [d.name for d in drop]}, b"", durable=False)
                self._dropped(view, drop)
            if meanwhile is not None:
                meanwhile()

    def drop(self, view: View, drop: list[CheckpointInfo]) -> None:
        """Remove checkpoints (retention outside a write): a durable record, then the files."""
        if not drop:
            return
        with self._mutex:
            try:
                self._append(view, {"k": "drop", "drop": [d.name for d in drop]}, b"")
                self._dropped(view, drop)
            except BaseException:
                self._view = None
                raise

    def _defer(self, info: CheckpointInfo, data: bytes, generation: int) -> None:
        self.deferred[info.name] = (info, data, generation)
        self._behind_bytes += len(data)

    def _undefer(self, name: str) -> tuple[CheckpointInfo, bytes, int] | None:
        written = self.deferred.pop(name, None)
        if written is not None:
            self._behind_bytes -= len(written[1])
        return written

    def _dropped(self, view: View, drop: list[CheckpointInfo], *, behind: bool = False) -> None:
        """Apply what a record dropped: out of the view, then the files (now, or behind). A
        checkpoint this process wrote and dropped before creating its file is not created; its
        name is removed all the same (another writer may have created it from the log)."""
        if not drop:
            return
        names = [d.name for d in drop]
        for name in names:
            view.remove(name)
            view.dropped.add(name)
            self._undefer(name)
        if behind:
            self.unlink_later.update(names)
        else:
            self._unlink(names)
            self.note_own_change()

    def _unlink(self, names: Iterable[str]) -> None:
        for name in list(names):
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"could not remove {name}: {exc.strerror}.", path=name) from exc

    # -- write-behind -----------------------------------------------------------------------------

    def write_behind(self) -> None:
        """Have the worker thread create the named files and remove the dropped ones, after the
        delay; at once when what waits holds more than ``BEHIND_BYTES`` (the delay batches
        writes, it is not meant to hold gigabytes in memory)."""
        from phoenix_protocol import _background

        urgent = self._behind_bytes > BEHIND_BYTES
        _background.submit(self, self.flush_deferred, delay=0.0 if urgent else self.delay)

    def flush(self) -> None:
        """Wait until this process's write-behind is done (doing what is left of it here); raise
        what it failed with."""
        from phoenix_protocol import _background

        _background.wait(self)
        if self.deferred or self.unlink_later or self._settle_asked >= 0:
            self.flush_deferred()

    def flush_deferred(self) -> None:
        """The write-behind itself (also run by ``flush`` of a process without a worker), a
        chunk at a time: a writer waiting for the lock waits for one chunk, not the batch. Then
        the settle a write of this process asked for, if any (``_settle_behind``)."""
        try:
            self._create_deferred()
            if self._settle_asked >= 0:
                self._settle_behind()
        except StorageError as exc:
            self._behind_failed(exc)
            raise

    def _behind_failed(self, exc: StorageError) -> None:
        if self.on_behind_error is not None:
            with contextlib.suppress(Exception):  # reporting must not hide the failure itself
                self.on_behind_error(exc)

    def _store_lock(self) -> contextlib.AbstractContextManager[Any]:
        """The store's write lock (none for a catalogue opened without one)."""
        return self._lock() if self._lock is not None else contextlib.nullcontext()

    def _create_deferred(self) -> None:
        while self.deferred or self.unlink_later:
            with self._store_lock():
                view = self.load(writer=True)
                with self._mutex:
                    self._apply_deferred(view, BEHIND_CHUNK)
            time.sleep(0)  # let a writer in

    def _settle_behind(self) -> None:
        """Settle the log a write found past its capacity, while writers go on. The named files
        the log holds are flushed first, without the lock (a named file never changes once
        created; those this process had yet to write are created first), in a few rounds while
        writers add more; the lock is then taken for what is left (the files written or created
        since, the snapshot, the new header): writers wait for that part only. Nothing is durable sooner or later than with a settle in the write itself:
        until the new header is written, the log holds every checkpoint."""
        for _ in range(_SETTLE_ROUNDS):
            self._create_deferred()
            with self._mutex:
                view = self._view
                if view is None or view.log_generation != self._settle_asked:
                    break
                todo = [n for n in view.inline if n in view.entries and n not in self._synced]
            if len(todo) <= BEHIND_CHUNK:
                break
            missing = {os.path.basename(p) for p in fsync_files([os.path.join(self.dir, n) for n in todo])}
            with self._mutex:
                if self._view is not None and self._view.log_generation == self._settle_asked:
                    self._synced.update(n for n in todo if n not in missing)
        with self._store_lock():
            view = self.load(writer=True)
            with self._mutex:
                if view.log_generation == self._settle_asked:
                    self._settle(view)  # unless another writer (or the write itself) settled first
                self._settle_asked = -1
                self._synced.clear()

    def _apply_deferred(self, view: View, limit: int | None = None) -> None:
        """Create the named files this process wrote and remove the dropped ones (caller holds
        the lock and the mutex), ``limit`` files at most. A checkpoint written here is created
        unless it was dropped since: by a record of this log, or by a settle of another process
        (which creates every checkpoint still listed itself). One the view lost otherwise (its
        log deleted by hand) is created and listed again from the bytes held here."""
        changed = bool(self.deferred or self.unlink_later)
        for name, (info, data, generation) in list(itertools.islice(self.deferred.items(), limit)):
            listed = name in view.entries
            if listed or (name not in view.dropped and generation == view.log_generation):
                with contextlib.suppress(FileExistsError):
                    atomic_create(os.path.join(self.dir, name), data, durable=False)
                if not listed:
                    view.add(info)
            self._undefer(name)
        if self.unlink_later:
            names = list(itertools.islice(self.unlink_later, limit))
            self.unlink_later.difference_update(names)
            self._unlink(names)
        if changed:
            self.note_own_change()

    # -- settling ----------------------------------------------------------------------------------

    def _settle(self, view: View) -> None:
        """Flush every file the log holds, write the snapshot, start a new generation."""
        self._apply_deferred(view)
        synced = self._synced if self._settle_asked == view.log_generation else set()
        live = [os.path.join(self.dir, name) for name in view.inline if name in view.entries and name not in synced]
        for path in fsync_files(live):  # made durable, all at once; those missing are created first
            self._materialize(view, os.path.basename(path))
            fsync_file(path)
        for name in list(view.entries):
            if name in view.pending:
                view.remove(name)
        self._unlink(view.dropped)  # the new generation will not remember them
        entries = view.ordered()
        generation = max(view.generation, view.log_generation) + 1
        head = dumps_line(
            {
                "kind": "phoenix.checkpoint-index",
                "schema_version": 1,
                "agent_id": self.agent_id,
                "generation": generation,
                "next_seq": view.next_seq,
            }
        )
        lines = ",\n".join(e.encoded() for e in entries)
        text = head[:-1] + ',"entries":[\n' + lines + ("\n" if lines else "") + "]}\n"
        atomic_write(self.index_path, text.encode("ascii"))  # also flushes the directory's new names
        view.generation = generation
        view.snapshot_lost, view.snapshot_damaged = False, None
        self._start_log(view)

    def _start_log(self, view: View) -> None:
        """A new generation: the header rewritten in place (a file of this version), or a new
        log file (none yet, or one of the earlier format)."""
        view.damaged_frames.clear()  # they were the old generation's
        view.recovered.clear()
        view.resync_tried = None
        generation = max(view.generation, view.log_generation, 0)
        salt = int.from_bytes(os.urandom(8), "big")
        meta = {
            "k": "open",
            "v": LOG_VERSION,
            "generation": generation,
            "salt": salt,
            "boot": boot_id(),
            "agent_id": self.agent_id,
            "next_seq": view.next_seq,
        }
        header, _digest = frame(meta)
        if len(header) > HEADER_SIZE:  # pragma: no cover - ids are at most 64 characters
            raise StorageError(f"checkpoint log header of {len(header)} bytes does not fit", path=self.log_path)
        header += b"\0" * (HEADER_SIZE - len(header))
        view.log_header = header
        ino = self.log.identity()
        if ino is not None and view.log_version == LOG_VERSION and ino == view.log_ino:
            # the file whose whole header this view read: in place, the blocks stay allocated
            self.log.write([header], 0, ino=ino)
        else:
            atomic_write(self.log_path, header)
            self.log.close()  # the descriptor held the file this one replaced
            ino = self.log.identity()
        if ino is None:  # pragma: no cover - just written
            raise StorageError("the checkpoint log vanished while it was started", path=self.log_path)
        view.log_version = LOG_VERSION
        view.log_generation = generation
        view.chain = salt
        view.log_end = HEADER_SIZE
        view.log_boot = boot_id()
        view.log_records = 0
        view.log_ino = ino
        view.inline.clear()
        view.unchecked.clear()
        view.dropped.clear()
        view.unremoved.clear()
        self.note_own_change()
        self._view = view

    def rebuild(self) -> int:
        """Reconcile with the directory from scratch and settle (under the lock); returns how
        many entries the snapshot and the log had wrong (all of them when the snapshot was lost;
        a store never settled has none: its first log, generation 0, holds everything)."""
        with self._mutex:
            had_snapshot = self._read_snapshot(View()) is not None  # before a writer's load rewrites a lost one
            self.load(writer=True)  # files only the log holds are created
            view = self._full_load(self.log.identity())
            complete = had_snapshot or (
                view.log_version == LOG_VERSION and view.log_generation == 0 and view.generation == 0
            )
            before = {e.name for e in view.ordered()} if complete else set()
            self._reconcile(view, None)
            self._settle(view)
            self._view = view
            return len(before ^ {e.name for e in view.ordered()})
