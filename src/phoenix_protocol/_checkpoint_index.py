"""The catalogue of one agent's checkpoints: what exists, in order, and how a write is made durable.

Two files next to the checkpoints, both owned by this module:

``index.json`` (the snapshot)
    Every checkpoint known when the log was last settled: ``next_seq``, ``generation`` and one
    entry per checkpoint (name, seq, type, time, label, operation, size). Replaced atomically
    and durably, only when the log is settled.

``index.log`` (the log)
    Framed records appended since: ``@<payload length> <crc32>\\n<payload>``, the payload one
    JSON line of metadata and, for a checkpoint of at most ``INLINE_LIMIT`` bytes, the
    checkpoint's bytes. The first record names the log's ``generation`` and the boot it was
    started in. A record is one ``write``; a torn tail (a writer killed mid-write) fails its
    length or its crc, is ignored by readers and cut by the next writer.

How a checkpoint becomes durable (the writer holds the store's lock):

- *small* (at most ``INLINE_LIMIT``, the common case): one record holding the checkpoint's bytes
  and the names retention drops, appended and ``fdatasync``-ed: that is the durable point, one
  flush, as a database's write-ahead log. The named file is then created atomically without a
  flush (a process killed at any moment leaves it whole or absent; whoever next loads the log
  creates it if absent). A power loss can lose named files written since the last settle: the
  log still holds them, and the first writer after a reboot (the boot id changed) rewrites each
  from the log before going on.
- *large*: the record (metadata only) is appended first, which reserves the seq, then the file
  is created with ``fsync`` of the file and of the directory (copying megabytes into the log as
  well would cost more than the flushes). A record whose file never appeared (the writer was
  killed in between) is hidden from readers and dropped by the next writer.

Settling (every ``LOG_LIMIT`` bytes or ``LOG_RECORDS`` records, and on ``rebuild``): the named
files the log holds are fsynced, the snapshot is replaced (generation + 1), then the log is
replaced by an empty one of that generation; one directory fsync follows each. A crash between
the two leaves a log older than the snapshot, which is then ignored (the snapshot has it all).

Readers (any process, no lock) keep the view in memory while the log (inode, size) and the
directory (mtime) are unchanged: two ``stat`` calls. A changed log is replayed from where they
stopped; a changed directory (an edit by hand: a file copied in or deleted) is listed and
reconciled. A missing or unreadable snapshot is rebuilt from the directory.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from datetime import date as _date
from typing import Any

from phoenix_protocol._clock import iso_from_ms
from phoenix_protocol._durable import (
    atomic_create,
    atomic_write,
    durable_append,
    fsync_file,
    read_bytes,
    read_range,
    truncate_file,
)
from phoenix_protocol._errors import StorageError
from phoenix_protocol._jsonio import JSONError, dumps_line, loads

__all__ = [
    "CHECKPOINT_TYPES",
    "INLINE_LIMIT",
    "SUFFIX",
    "Catalog",
    "CheckpointInfo",
    "make_name",
    "parse_name",
]

CHECKPOINT_TYPES = ("routine", "pre-operation", "recovery", "session")
SUFFIX = ".checkpoint"
INDEX_NAME = "index.json"
LOG_NAME = "index.log"
INLINE_LIMIT = 256 * 1024
"""Checkpoints up to this size are written into the log (one flush); larger ones are flushed as
their own file (the copy would cost more than the flushes it saves)."""
LOG_LIMIT = 4 * 1024 * 1024
LOG_RECORDS = 512
_EPOCH_DAY = _date(1970, 1, 1).toordinal()
_SETTLED_NS = 50_000_000  # a directory mtime older than this is past any timestamp granularity


class CheckpointInfo:
    """What the catalogue knows of a checkpoint, without reading it."""

    __slots__ = ("_encoded", "checkpoint_type", "label", "name", "operation_id", "seq", "size", "timestamp_ms")

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


def make_name(agent_id: str, seq: int, timestamp_ms: int, checkpoint_type: str) -> str:
    secs, milli = divmod(timestamp_ms, 1000)
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(secs)) + f"{milli:03d}"
    return f"{agent_id}_{stamp}-{seq:08d}_{checkpoint_type}{SUFFIX}"


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


def frame(meta: dict[str, Any], content: bytes = b"") -> bytes:
    payload = dumps_line(meta).encode("ascii") + b"\n" + content
    return b"@%d %08x\n" % (len(payload), zlib.crc32(payload)) + payload


class View:
    """One process's picture of the catalogue (see the module docstring for when it is reused)."""

    def __init__(self) -> None:
        self.generation = 0
        self.next_seq = 1
        self.entries: dict[str, CheckpointInfo] = {}
        self.inline: dict[str, tuple[int, int]] = {}  # name -> (offset, length) in the log
        self.pending: set[str] = set()  # large checkpoints recorded whose file is not there (yet)
        self.unchecked: set[str] = set()  # logged by another process: is the named file there?
        self.dropped: set[str] = set()  # dropped by this log's records (never re-added from the directory)
        self.unremoved: set[str] = set()  # dropped by another process, which may have died before unlinking
        self.log_ino = -1
        self.log_size = 0
        self.log_pos = 0  # end of the last whole record
        self.log_generation = -1  # -1: no usable log
        self.log_boot = ""
        self.log_records = 0
        self.dir_seen = -1
        self._sorted: tuple[CheckpointInfo, ...] | None = None  # immutable: readers iterate it freely
        self.counts: dict[str, int] | None = None  # set when ``entries`` holds only some (PostgreSQL)
        self._by_type: dict[str, list[CheckpointInfo]] | None = None

    def invalidate(self) -> None:
        """Forget the orders derived from ``entries`` (rebuilt on the next use)."""
        self._sorted = None
        self._by_type = None

    def ordered(self) -> tuple[CheckpointInfo, ...]:
        """Visible entries, oldest first (a snapshot: changes replace it, never edit it)."""
        if self._sorted is None:
            pending = self.pending
            self._sorted = tuple(
                sorted((e for e in self.entries.values() if e.name not in pending), key=lambda e: e.seq)
            )
        return self._sorted

    def count(self, kind: str) -> int:
        """How many checkpoints of type ``kind`` there are (all of them, even in a partial view)."""
        if self.counts is not None:
            return self.counts.get(kind, 0)
        return len(self.by_type().get(kind, ()))

    def by_type(self) -> dict[str, list[CheckpointInfo]]:
        """Visible entries of each type, oldest first (kept up to date like ``ordered``)."""
        if self._by_type is None:
            groups: dict[str, list[CheckpointInfo]] = {kind: [] for kind in CHECKPOINT_TYPES}
            for e in self.ordered():
                groups.setdefault(e.checkpoint_type, []).append(e)
            self._by_type = groups
        return self._by_type

    def add(self, info: CheckpointInfo) -> None:
        old = self.entries.get(info.name)
        self.entries[info.name] = info
        ordered = self._sorted
        if old is None and ordered is not None and (not ordered or ordered[-1].seq < info.seq):
            self._sorted = (*ordered, info)  # the common case: the newest checkpoint (no re-sort)
            if self._by_type is not None:
                self._by_type.setdefault(info.checkpoint_type, []).append(info)
        else:
            self.invalidate()
        if info.seq >= self.next_seq:
            self.next_seq = info.seq + 1

    def remove(self, name: str) -> None:
        info = self.entries.pop(name, None)
        self.inline.pop(name, None)
        self.pending.discard(name)
        self.unchecked.discard(name)
        if info is not None and self._sorted is not None:
            current = self._sorted
            if current and current[0] is info:  # retention drops the oldest, mostly
                self._sorted = current[1:]
            else:
                self._sorted = tuple(e for e in current if e is not info)
            try:
                if self._by_type is not None:
                    self._by_type[info.checkpoint_type].remove(info)
            except (ValueError, KeyError):
                self.invalidate()


class Catalog:
    """The snapshot and the log of one checkpoint directory."""

    def __init__(
        self,
        directory: str,
        agent_id: str,
        describe: Callable[[CheckpointInfo], CheckpointInfo],
    ) -> None:
        self.dir = directory
        self.agent_id = agent_id
        self.index_path = os.path.join(directory, INDEX_NAME)
        self.log_path = os.path.join(directory, LOG_NAME)
        self._describe = describe
        self._view: View | None = None
        self._mutex = threading.RLock()  # threads of one process share the view

    # -- loading -------------------------------------------------------------------------------

    def load(self, *, writer: bool = False) -> View:
        """The current view. ``writer=True`` (under the store's lock) also repairs: a torn log
        tail is cut, a missing log started, large records without a file dropped, and after a
        reboot every file the log holds is checked and rewritten from it."""
        with self._mutex:
            try:
                st = os.stat(self.log_path)
                log_key: tuple[int, int] | None = (st.st_ino, st.st_size)
            except FileNotFoundError:
                log_key = None
            view = self._view
            if view is None or log_key is None or log_key[0] != view.log_ino or log_key[1] < view.log_pos:
                view = self._full_load(log_key)
            elif log_key[1] != view.log_size or view.log_pos != view.log_size:
                self._replay(view, view.log_pos, log_key[1])
            if view.pending:
                self._check_pending(view, writer=writer)
            if view.unchecked:
                for name in list(view.unchecked):
                    if not os.path.exists(os.path.join(self.dir, name)):
                        self.materialize(view, name)
                view.unchecked.clear()
            try:
                dir_mtime = os.stat(self.dir).st_mtime_ns
            except FileNotFoundError:
                dir_mtime = -1
            if dir_mtime != view.dir_seen:
                self._reconcile(view, dir_mtime)
            if writer:
                self._repair(view)
            self._view = view
            return view

    def _read_snapshot(self) -> tuple[int, int, list[CheckpointInfo]] | None:
        data = read_bytes(self.index_path)
        if data is None:
            return None
        try:
            index = loads(data)
            entries = [CheckpointInfo.from_dict(e) for e in index["entries"]]
            return int(index.get("generation", 0)), int(index["next_seq"]), entries
        except (JSONError, KeyError, TypeError, ValueError, AttributeError):
            return None

    def _full_load(self, log_key: tuple[int, int] | None) -> View:
        """The snapshot and the whole log; ``load`` then reconciles with the directory (a fresh
        view has not seen it), which also covers a lost snapshot or log."""
        view = View()
        snapshot = self._read_snapshot()
        if snapshot is not None:
            view.generation, view.next_seq, entries = snapshot
            for info in entries:
                view.entries[info.name] = info
        if log_key is not None:
            view.log_ino = log_key[0]
            self._replay(view, 0, log_key[1])
        return view

    def _replay(self, view: View, start: int, end: int) -> None:
        """Apply the log's whole records between ``start`` and ``end``."""
        view.log_size = end
        if end <= start:
            return
        data = read_range(self.log_path, start, end - start)
        if data is None:
            view.log_size = view.log_pos = 0
            view.log_generation = -1
            return
        pos = 0
        size = len(data)
        while pos < size:
            nl = data.find(b"\n", pos, pos + 32)
            if data[pos : pos + 1] != b"@" or nl < 0:
                break
            try:
                length_text, crc_text = data[pos + 1 : nl].split(b" ")
                length, crc = int(length_text), int(crc_text, 16)
            except ValueError:
                break
            body_start = nl + 1
            body_end = body_start + length
            if body_end > size or zlib.crc32(data[body_start:body_end]) != crc:
                break
            meta_end = data.find(b"\n", body_start, body_end)
            try:
                meta = loads(data[body_start : meta_end if meta_end >= 0 else body_end])
            except JSONError:
                break
            content_start = start + meta_end + 1 if meta_end >= 0 else start + body_end
            self._apply(view, meta, content_start, start + body_end - content_start, start == 0 and pos == 0)
            pos = body_end
        view.log_pos = start + pos

    def _apply(self, view: View, meta: Any, content_at: int, content_len: int, first: bool) -> None:
        if not isinstance(meta, dict):
            return
        kind = meta.get("k")
        if first:
            if kind == "open":
                view.log_generation = int(meta.get("generation", 0))
                view.log_boot = str(meta.get("boot", ""))
                view.log_records = 0
            return
        view.log_records += 1
        if view.log_generation < view.generation:
            return  # a log the snapshot already holds (a crash between the two replacements)
        if kind == "put":
            try:
                info = CheckpointInfo.from_dict(meta)
            except (KeyError, TypeError, ValueError):
                return
            view.add(info)
            if content_len > 0:
                view.inline[info.name] = (content_at, content_len)
                view.unchecked.add(info.name)
            elif not os.path.exists(os.path.join(self.dir, info.name)):
                view.pending.add(info.name)
                view.invalidate()
        for name in meta.get("drop") or ():
            view.remove(str(name))
            view.dropped.add(str(name))
            view.unremoved.add(str(name))

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

    # -- repairing (writers) -------------------------------------------------------------------

    def _repair(self, view: View) -> None:
        if view.log_generation < view.generation or view.log_generation < 0:
            self._start_log(view)  # none yet, one the snapshot already holds, or one unreadable
            return
        if view.log_pos < view.log_size:
            truncate_file(self.log_path, view.log_pos)
            view.log_size = view.log_pos
        if view.unremoved:  # a writer killed between its record and its unlinks left some
            left = [n for n in view.unremoved if os.path.lexists(os.path.join(self.dir, n))]
            view.unremoved.clear()
            if left:
                self._unlink(left)
        if view.log_boot != boot_id():
            # A reboot since the log started: files written without a flush may be lost or
            # damaged. Rewrite each from the log, then settle (which flushes them).
            for name in list(view.inline):
                content = self.logged_content(view, name)
                path = os.path.join(self.dir, name)
                if content is not None and read_bytes(path) != content:
                    atomic_write(path, content, durable=False)
            self._reconcile(view, None)
            self.settle(view)

    def materialize(self, view: View, name: str) -> None:
        """Create the named file of a logged checkpoint if it is not there (never overwrites)."""
        where = view.inline.get(name)
        if where is None:
            return
        content = read_range(self.log_path, where[0], where[1])
        if content is None or len(content) != where[1]:
            return
        # Someone else made it, or this reader may not write here: the log still has it.
        with contextlib.suppress(FileExistsError, StorageError):
            atomic_create(os.path.join(self.dir, name), content, durable=False)

    def logged_content(self, view: View, name: str) -> bytes | None:
        where = view.inline.get(name)
        if where is None:
            return None
        content = read_range(self.log_path, where[0], where[1])
        return content if content is not None and len(content) == where[1] else None

    # -- writing (under the store's lock, after ``load(writer=True)``) --------------------------

    def put(self, view: View, info: CheckpointInfo, data: bytes, drop: list[CheckpointInfo]) -> None:
        """Make checkpoint ``info`` (file bytes ``data``) durable and apply what retention dropped."""
        with self._mutex:
            try:
                self._put(view, info, data, drop)
            except BaseException:
                self._view = None  # what reached the disk is read back by the next load
                raise

    def _put(self, view: View, info: CheckpointInfo, data: bytes, drop: list[CheckpointInfo]) -> None:
        meta: dict[str, Any] = {"k": "put", **info.as_dict()}
        path = os.path.join(self.dir, info.name)
        start = view.log_size
        if len(data) <= INLINE_LIMIT:
            # The record holds the bytes and what retention drops: one fdatasync makes it all durable.
            if drop:
                meta["drop"] = [d.name for d in drop]
            record = frame(meta, data)
            durable_append(self.log_path, record)
            view.log_size = view.log_pos = start + len(record)
            view.inline[info.name] = (view.log_size - len(data), len(data))
            view.add(info)
            with contextlib.suppress(FileExistsError):  # a reader made it from the log already
                atomic_create(path, data, durable=False)
        else:
            # The record reserves the seq; the file is flushed on its own; what retention drops
            # goes only once the new checkpoint is durable.
            record = frame(meta)
            durable_append(self.log_path, record, durable=False)
            view.log_size = view.log_pos = start + len(record)
            atomic_create(path, data)  # fsync of the file, then of the directory
            view.add(info)
        view.log_records += 1
        if len(data) > INLINE_LIMIT and drop:
            self._drop(view, drop, durable=False)  # the new checkpoint is durable on its own
        else:
            self._dropped(view, drop)
        if view.log_size > LOG_LIMIT or view.log_records >= LOG_RECORDS:
            self._settle(view)

    def drop(self, view: View, drop: list[CheckpointInfo]) -> None:
        """Remove checkpoints (retention outside a write): a durable record, then the files."""
        if not drop:
            return
        with self._mutex:
            try:
                self._drop(view, drop)
            except BaseException:
                self._view = None
                raise

    def _drop(self, view: View, drop: list[CheckpointInfo], *, durable: bool = True) -> None:
        record = frame({"k": "drop", "drop": [d.name for d in drop]})
        start = view.log_size
        durable_append(self.log_path, record, durable=durable)
        view.log_size = view.log_pos = start + len(record)
        view.log_records += 1
        self._dropped(view, drop)

    def _dropped(self, view: View, drop: list[CheckpointInfo]) -> None:
        """Apply what a record dropped: out of the view, then the files."""
        for d in drop:
            view.remove(d.name)
            view.dropped.add(d.name)
        self._unlink(d.name for d in drop)
        self.note_own_change()

    def _unlink(self, names: Iterable[str]) -> None:
        for name in list(names):
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"could not remove {name}: {exc.strerror}.", path=name) from exc

    def settle(self, view: View) -> None:
        """Flush every file the log holds, write the snapshot, start an empty log."""
        with self._mutex:
            self._settle(view)

    def _settle(self, view: View) -> None:
        for name in view.inline:
            if name in view.entries and not fsync_file(os.path.join(self.dir, name)):
                self.materialize(view, name)
                fsync_file(os.path.join(self.dir, name))
        for name in list(view.entries):
            if name in view.pending:
                view.remove(name)
        self._unlink(view.dropped)  # the new log will not remember them
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
        atomic_write(self.index_path, text.encode("ascii"))
        view.generation = generation
        self._start_log(view)

    def _start_log(self, view: View) -> None:
        generation = max(view.generation, 0)
        record = frame({"k": "open", "generation": generation, "boot": boot_id(), "agent_id": self.agent_id})
        atomic_write(self.log_path, record)
        st = os.stat(self.log_path)
        view.log_ino, view.log_size, view.log_pos = st.st_ino, st.st_size, st.st_size
        view.log_generation = generation
        view.log_boot = boot_id()
        view.log_records = 0
        view.inline.clear()
        view.unchecked.clear()
        view.dropped.clear()
        view.unremoved.clear()
        self.note_own_change()
        self._view = view

    def rebuild(self) -> int:
        """Reconcile with the directory from scratch and settle (under the lock); returns how
        many entries the snapshot and the log had wrong (all of them when the snapshot was lost)."""
        with self._mutex:
            self.load(writer=True)  # cuts a torn tail, restores files only the log holds
            try:
                st = os.stat(self.log_path)
                log_key: tuple[int, int] | None = (st.st_ino, st.st_size)
            except FileNotFoundError:
                log_key = None
            view = self._full_load(log_key)
            before = {e.name for e in view.ordered()} if os.path.exists(self.index_path) else set()
            self._reconcile(view, None)
            self._settle(view)
            self._view = view
            return len(before ^ {e.name for e in view.ordered()})
