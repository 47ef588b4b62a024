"""A sequenced, append-only JSON-lines log: the ops log now, the team mailbox later.

Guarantees:

- Each record gets ``seq`` = previous + 1, assigned under the log's ``FileLock``, so concurrent
  appenders never duplicate or skip a seq and their lines never interleave.
- An append is one durable write of one whole line. A process killed mid-append leaves at
  most a torn final fragment: readers skip it with a warning, and the next append (under
  the lock) cuts it off before writing. The fragment was never acknowledged, so its seq is
  reused and no acknowledged seq is ever lost or duplicated.
- Past ``max_bytes`` the log rotates (``log`` -> ``log.1`` -> ... -> ``log.N``, oldest
  dropped) under the same lock; the seq carries on, and readers read across rotations.
- A line in the middle that does not parse (a disk error, a hand edit) is reported as a
  problem with its file and line number and skipped; it never stops a reader.
- Bounded: a file is read whole only up to ``max_read`` bytes (4x the rotation size, at least
  64 MiB), and a line or a torn tail only up to ``MAX_LINE``; past them the file is refused
  (``UnsafeFileError``), as is anything that is not a regular file of this user (``_durable``).
"""

from __future__ import annotations

import os

from phoenix_protocol.core._durable import (
    FileLock,
    durable_append,
    iter_lines,
    open_regular,
    read_bytes,
    read_last_line,
    repair_tail,
    torn_tail_length,
)
from phoenix_protocol.core._errors import StorageError, UnsafeFileError
from phoenix_protocol.core._jsonio import JSONError, dumps_line, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

__all__ = ["MAX_LINE", "LogProblem", "SeqLog"]

_SCAN_LINES = 10_000
"""Lines ``last_seq`` looks back through for a record when the newest line is no record."""
MAX_LINE = 4 * 1024 * 1024
"""The longest record (or torn tail) the log's writers and readers look through: appends write
records of a few kilobytes; a file that does not end within this many bytes is no log of theirs."""


class LogProblem:
    """Something a reader skipped: a torn tail or an unparsable line."""

    __slots__ = ("kind", "line", "message", "path")

    def __init__(self, path: str, line: int, kind: str, message: str) -> None:
        self.path = path
        self.line = line
        self.kind = kind  # "torn-tail" | "corrupt-line"
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "kind": self.kind, "message": self.message}


class SeqLog:
    """A JSON-lines log at ``path`` whose records carry a monotonically increasing ``seq``."""

    def __init__(
        self,
        path: str,
        *,
        max_bytes: int = 10 * 1024 * 1024,
        keep: int = 5,
        lock_timeout: float = 10.0,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        """``prepare`` runs before the lock is taken (e.g. to create the directory)."""
        self.path = path
        self.prepare = prepare
        self.max_bytes = max_bytes
        self.keep = keep
        self.lock_timeout = lock_timeout
        self.max_read = max(64 * 1024 * 1024, 4 * max_bytes)
        """The largest file of the log read whole."""
        self.repaired_bytes = 0
        """Bytes of torn tail cut off by this object's appends (for reporting)."""

    def lock(self, timeout: float | None = None) -> FileLock:
        """The log's lock (appends take it themselves; take it to read-then-append atomically)."""
        if self.prepare is not None:
            self.prepare()
        return FileLock(self.path, self.lock_timeout if timeout is None else timeout)

    def files(self) -> list[str]:
        """Existing files of the log, oldest first (``log.N`` ... ``log.1``, ``log``)."""
        out = []
        for i in range(self.keep, 0, -1):
            rotated = f"{self.path}.{i}"
            if os.path.exists(rotated):
                out.append(rotated)
        if os.path.exists(self.path):
            out.append(self.path)
        return out

    def last_seq(self) -> int:
        """The seq of the newest complete record (0 when the log is empty)."""
        for path in [self.path] + [f"{self.path}.{i}" for i in range(1, self.keep + 1)]:
            line = read_last_line(path, limit=MAX_LINE)
            if line is None:
                continue
            try:
                record = loads(line)
                return int(record["seq"])
            except (JSONError, KeyError, TypeError, ValueError):
                # The newest line is corrupt: the newest record that reads, looked for backwards
                # (in a log of Phoenix's, a line or two before; within MAX_LINE bytes and
                # _SCAN_LINES lines, so that a file of garbage lines cannot cost the hook seconds).
                for n, record in enumerate(self._backwards(path, budget=MAX_LINE)):
                    if record is not None:
                        return int(record["seq"])
                    if n >= _SCAN_LINES:
                        raise UnsafeFileError(
                            f"{path}: its last {_SCAN_LINES:,} lines are no records; run `phx doctor`.",
                            path=path,
                            kind="too-large",
                        ) from None
        return 0

    def append(self, record: dict[str, Any], *, durable: bool = True, lock_timeout: float | None = None) -> int:
        """Give ``record`` the next seq, append it as one line, return the seq.

        ``record`` is written with ``seq`` as its first key; it must be JSON-serializable.
        """
        with self.lock(lock_timeout):
            return self.append_locked(record, durable=durable)

    def append_locked(self, record: dict[str, Any], *, durable: bool = True, after: int = 0) -> int:
        """``append`` for a caller already holding ``lock()``. If the write fails, the log is cut
        back to where it was, so a failed append leaves no line behind. ``after``: the seq is
        also greater than this (a copy of the log continuing numbers given elsewhere)."""
        mark = self.mark()
        seq = max(self.last_seq(), after) + 1
        line = dumps_line({"seq": seq, **{k: v for k, v in record.items() if k != "seq"}})
        try:
            durable_append(self.path, line.encode("ascii") + b"\n", durable=durable)
        except BaseException:
            self.rollback(mark)
            raise
        return seq

    def mark(self) -> tuple[int, int]:
        """Where the log ends now, as ``(inode, size)`` of the current file (caller holds the lock).

        Repairs a torn tail and rotates first, so that what follows the mark is only what the
        caller appends next. ``rollback(mark)`` removes it again.
        """
        self.repaired_bytes += repair_tail(self.path, limit=MAX_LINE)
        self._maybe_rotate()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return (-1, 0)
        return (st.st_ino, st.st_size)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Cut away everything appended since ``mark`` (caller holds the lock). Best effort: a
        failure here leaves the extra lines, which readers still parse."""
        inode, size = mark
        from phoenix_protocol.core._durable import FILE_MODE

        for path in [self.path] + [f"{self.path}.{i}" for i in range(1, self.keep + 1)]:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if st.st_ino == inode:
                keep = size
            elif path == self.path:
                keep = 0  # created or rotated in since the mark: holds only the new lines
            else:
                continue
            try:
                fd = open_regular(path, os.O_WRONLY, FILE_MODE)
                try:
                    os.ftruncate(fd, keep)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except (OSError, UnsafeFileError):
                pass

    def _maybe_rotate(self) -> None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return
        if size < self.max_bytes:
            return
        from phoenix_protocol.core._durable import fsync_dir

        try:
            oldest = f"{self.path}.{self.keep}"
            if os.path.exists(oldest):
                os.unlink(oldest)
            for i in range(self.keep - 1, 0, -1):
                src = f"{self.path}.{i}"
                if os.path.exists(src):
                    os.replace(src, f"{self.path}.{i + 1}")
            os.replace(self.path, f"{self.path}.1")
            fsync_dir(os.path.dirname(self.path) or ".")
        except OSError as exc:
            raise StorageError(f"could not rotate {self.path}: {exc.strerror}.", path=self.path) from exc

    def _read_file(self, path: str) -> Iterator[tuple[dict[str, Any] | None, LogProblem | None]]:
        data = read_bytes(path, limit=self.max_read)
        if not data:
            return
        lineno = 0
        for _offset, raw in iter_lines(data):
            lineno += 1
            if not raw.strip():
                continue
            try:
                record = loads(raw)
                if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
                    raise JSONError("not a record with an integer seq")
            except JSONError as exc:
                yield None, LogProblem(path, lineno, "corrupt-line", f"unreadable line skipped ({exc})")
                continue
            yield record, None
        torn = torn_tail_length(data)
        if torn:
            yield (
                None,
                LogProblem(
                    path, lineno + 1, "torn-tail", f"torn last line ({torn} bytes) skipped; the next append repairs it"
                ),
            )

    def read(self, *, since_seq: int = 0) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """All readable records with ``seq > since_seq`` across rotations, oldest first, and the
        problems met on the way. Never raises for content; raises ``StorageError`` for I/O."""
        records: list[dict[str, Any]] = []
        problems: list[LogProblem] = []
        for path in self.files():
            for record, problem in self._read_file(path):
                if problem is not None:
                    problems.append(problem)
                elif record is not None and record["seq"] > since_seq:
                    records.append(record)
        return records, problems

    def since(self, seq: int) -> list[dict[str, Any]]:
        """The readable records with a seq above ``seq``, oldest first. Reads files backwards from
        their end and stops at the first record at or below ``seq``, so the cost follows what is
        new, not the log's size (``read`` for the problems met on the way)."""
        collected: list[dict[str, Any]] = []
        for path in reversed(self.files()):
            for record in self._backwards(path):
                if record is None:
                    continue  # a damaged line: readers skip it
                if record["seq"] <= seq:
                    collected.reverse()
                    return collected
                collected.append(record)
        collected.reverse()
        return collected

    @staticmethod
    def _backwards(path: str, block: int = 65536, *, budget: int | None = None) -> Iterator[dict[str, Any] | None]:
        """The records of one file, newest first, reading from its end; ``None`` in place of a
        torn tail or an unreadable line (which readers skip; ``_read_file`` names them).
        ``budget``: reads at most this many bytes (``UnsafeFileError`` past them)."""
        try:
            fd = open_regular(path)
        except FileNotFoundError:
            return
        try:
            pos = end = os.fstat(fd).st_size
            pending = b""
            ended = False  # whether the file's last newline was found
            while pos > 0:
                if budget is not None and end - pos > budget:
                    raise UnsafeFileError(
                        f"{path}: no record in its last {budget:,} bytes; run `phx doctor`.",
                        path=path,
                        kind="too-large",
                    )
                size = min(block, pos)
                pos -= size
                parts = (os.pread(fd, size, pos) + pending).split(b"\n")
                if not ended:
                    torn = parts.pop()  # after the file's last newline: nothing, or a torn tail
                    ended = bool(parts)
                    if not ended:
                        pending = torn
                        continue
                    if torn:
                        yield None
                pending = parts.pop(0) if pos > 0 else b""
                for raw in reversed(parts):
                    if not raw.strip():
                        continue
                    try:
                        record = loads(raw)
                    except JSONError:
                        yield None
                        continue
                    yield record if isinstance(record, dict) and isinstance(record.get("seq"), int) else None
            if not ended and pending:
                yield None  # one torn line and nothing before it
        finally:
            os.close(fd)

    def tail(self, n: int) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """The newest ``n`` records and the problems met. Reads backwards from the end (the cost
        follows ``n``, not the log's size); a damaged line on the way sends it to the exact scan
        of those files, which names each problem with its line."""
        if n <= 0:
            return [], []
        newest: list[dict[str, Any]] = []
        files = list(reversed(self.files()))
        for path in files:
            for record in self._backwards(path):
                if record is None:
                    return self._tail_scan(n)
                newest.append(record)
                if len(newest) >= n:
                    newest.reverse()
                    return newest, []
        newest.reverse()
        return newest, []

    def _tail_scan(self, n: int) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """``tail`` by parsing whole files, newest first, until ``n`` records are found."""
        collected: list[dict[str, Any]] = []
        problems: list[LogProblem] = []
        for path in reversed(self.files()):
            chunk: list[dict[str, Any]] = []
            for record, problem in self._read_file(path):
                if problem is not None:
                    problems.append(problem)
                elif record is not None:
                    chunk.append(record)
            collected = chunk + collected
            if len(collected) >= n:
                break
        return collected[-n:], problems
