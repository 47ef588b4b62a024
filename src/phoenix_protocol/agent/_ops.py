"""The ops log (``ops.jsonl``): the agent's append-only event stream.

One JSON object per line::

    {"seq": 12, "ts": "2026-02-02T10:30:00.000Z", "event": "session_start", "status": "ok", "meta": {...}}

``seq`` increases by one per event, ``ts`` is ISO 8601 UTC, ``status`` is ``ok``, ``warn`` or
``error``, ``meta`` is optional. State transitions are logged with the fields needed to
rebuild ``state.json`` from the log alone (``phx doctor``).

Strings inside ``meta`` are passed through the secret redactor unless the caller marks the
event as carrying only structured values (``trusted=True``: event names, ids, tool names,
counters, digests), which keeps the redactor off the heartbeat's hot path.

``record_later`` writes an event behind (``_background``): for an event about something already
durable elsewhere (``checkpoint_created``: the checkpoint log is the record). Its time is taken at
the call; its seq when it is written, before any later event of this process (``record``, the
readers and ``flush_later`` write what is waiting first), so the log keeps the process's order.
A process killed before the write-behind ran loses that event, never what it is about.
"""

from __future__ import annotations

import _thread

from phoenix_protocol.agent._seqlog import LogProblem, SeqLog
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from phoenix_protocol.agent._state_pg import PgAgentRecord

__all__ = ["OPS_STATUSES", "OpsLog"]

OPS_STATUSES = ("ok", "warn", "error")

# Events written behind, by log path (shared by every OpsLog of a path in this process).
_later: dict[str, list[dict[str, Any]]] = {}
_later_guard = _thread.allocate_lock()


class OpsLog:
    """The ops log of one agent, at ``path``."""

    def __init__(
        self,
        path: str,
        *,
        clock: Clock = system_clock,
        max_bytes: int = 10 * 1024 * 1024,
        keep: int = 5,
        lock_timeout: float = 10.0,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.clock = clock
        self.log = SeqLog(path, max_bytes=max_bytes, keep=keep, lock_timeout=lock_timeout, prepare=prepare)
        self.remote: Callable[[], PgAgentRecord] | None = None
        """On the PostgreSQL store: returns the agent's record on the server (``_state_pg``); the
        readers then return every copy's events (appends always go to this machine's file)."""

    def record(
        self,
        event: str,
        status: str = "ok",
        meta: dict[str, Any] | None = None,
        *,
        durable: bool = True,
        trusted: bool = False,
        lock_timeout: float | None = None,
    ) -> int:
        """Append one event; returns its seq. ``trusted=True`` skips redaction of ``meta``."""
        entry = self.make_entry(event, status, meta, trusted=trusted)
        if self.path in _later:
            self.flush_later()
        return self.log.append(entry, durable=durable, lock_timeout=lock_timeout)

    def record_later(
        self,
        event: str,
        status: str = "ok",
        meta: dict[str, Any] | None = None,
        *,
        trusted: bool = False,
        delay: float = 0.0,
    ) -> dict[str, Any]:
        """Append one event behind, ``delay`` seconds from now with whatever follows meanwhile
        (not durable; see the module docstring); returns it (see ``retract_later``)."""
        entry = self.make_entry(event, status, meta, trusted=trusted)
        with _later_guard:
            _later.setdefault(self.path, []).append(entry)
        from phoenix_protocol.core import _background

        _background.submit(("ops", self.path), self.flush_later, delay=delay)
        return entry

    def retract_later(self, entry: dict[str, Any]) -> bool:
        """Take back an event ``record_later`` queued, if it was not written yet."""
        with _later_guard:
            waiting = _later.get(self.path)
            for i, queued in enumerate(waiting or ()):
                if queued is entry:
                    del waiting[i]  # type: ignore[union-attr]
                    if not waiting:
                        del _later[self.path]
                    return True
        return False

    def flush_later(self) -> None:
        """Write the events waiting to be written behind, in order (a no-op when there are none)."""
        if self.path not in _later:
            return
        with self.log.lock():
            with _later_guard:
                entries = _later.pop(self.path, [])
            for i, entry in enumerate(entries):
                try:
                    self.log.append_locked(entry, durable=False)
                except BaseException:
                    with _later_guard:  # what was not written waits for the next try, in order
                        _later[self.path] = entries[i:] + _later.get(self.path, [])
                    raise

    def make_entry(
        self, event: str, status: str = "ok", meta: dict[str, Any] | None = None, *, trusted: bool = False
    ) -> dict[str, Any]:
        """The record ``record`` would append, without its seq (for callers holding the lock)."""
        if status not in OPS_STATUSES:
            raise UsageError(f"ops status must be one of {', '.join(OPS_STATUSES)}, not {status!r}.")
        if not event or not isinstance(event, str):
            raise UsageError("an ops event needs a non-empty name.")
        entry: dict[str, Any] = {"ts": self.clock.now_iso(), "event": event, "status": status}
        if meta:
            if not trusted:
                from phoenix_protocol.core._redact import redact_value

                meta = redact_value(meta)  # type: ignore[assignment]
            entry["meta"] = meta
        return entry

    def read(self, *, since_seq: int = 0) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """Every readable event (across rotations), oldest first, and what was skipped."""
        if self.path in _later:
            self.flush_later()
        if self.remote is not None:
            return self.remote().events(since_seq=since_seq)
        return self.log.read(since_seq=since_seq)

    def since(self, seq: int) -> list[dict[str, Any]]:
        """The readable events with a seq above ``seq``, oldest first (read from the end: the
        cost follows what is new)."""
        if self.path in _later:
            self.flush_later()
        if self.remote is not None:
            return self.read(since_seq=seq)[0]
        return self.log.since(seq)

    def tail(self, n: int) -> tuple[list[dict[str, Any]], list[LogProblem]]:
        """The newest ``n`` events, oldest first, and what was skipped."""
        if self.path in _later:
            self.flush_later()
        if self.remote is not None:
            return self.remote().events(tail=n)
        return self.log.tail(n)
