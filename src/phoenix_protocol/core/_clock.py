"""The one clock. Everything that needs the time takes a ``Clock``; tests inject ``ManualClock``.

Machines read milliseconds since the epoch (UTC); people read ISO 8601 in UTC with a ``Z``.
Ordering never relies on either: sequence numbers order events.

Hot path: imports only ``time`` and ``os``.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Clock", "ManualClock", "SystemClock", "iso_from_ms", "ms_from_iso", "system_clock"]


class Clock:
    """Source of the current time. Subclass and override ``now_ms`` (and ``monotonic``) to inject time."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, UTC."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for timeouts and durations)."""
        return time.monotonic()

    def now_iso(self) -> str:
        """The current time as ISO 8601 UTC with milliseconds, e.g. ``2026-02-02T10:30:00.000Z``."""
        return iso_from_ms(self.now_ms())


def _pin_reader() -> tuple[Callable[[Any], Any], object]:
    """How to read ``PHOENIX_NOW_MS``: from the dict behind ``os.environ`` (encoded keys, kept in
    step by every change made through ``os.environ``) where there is one; a lookup there costs
    20 ns where ``os.environ.get`` of a missing key costs 1 µs, and the clock is read several
    times by every event and checkpoint."""
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and callable(encode):
        return data.get, encode("PHOENIX_NOW_MS")
    return os.environ.get, "PHOENIX_NOW_MS"  # pragma: no cover - not CPython's os.environ


_read_pin, _PIN_KEY = _pin_reader()


class SystemClock(Clock):
    """The real clock. ``PHOENIX_NOW_MS`` (an integer) pins it, for demos and subprocess tests."""

    def now_ms(self) -> int:
        pinned = _read_pin(_PIN_KEY)
        if pinned:
            try:
                return int(pinned)
            except ValueError:
                pass
        return time.time_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that moves only when told to. For tests: ``clock.advance(seconds=90)``."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self._ms = start_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float = 0.0, *, ms: int = 0) -> None:
        """Move the clock forward."""
        delta = int(seconds * 1000) + ms
        self._ms += delta
        self._mono += delta / 1000

    def set(self, ms: int) -> None:
        """Jump to an absolute time (may go backwards, to simulate clock skew)."""
        self._ms = ms


system_clock = SystemClock()
"""The shared default clock."""


_last_second: tuple[int, str] = (-1, "")  # the last whole second formatted (callers repeat it)


def iso_from_ms(ms: int) -> str:
    """Format milliseconds since the epoch as ISO 8601 UTC: ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    global _last_second
    secs, milli = divmod(int(ms), 1000)
    last = _last_second
    if last[0] != secs:
        last = _last_second = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
    return f"{last[1]}.{milli:03d}Z"


def ms_from_iso(text: str) -> int:
    """Parse an ISO 8601 timestamp (with ``Z`` or an offset; naive means UTC) into milliseconds.

    Raises ``ValueError`` on anything that is not a timestamp.
    """
    from datetime import UTC, datetime  # not on the hot path

    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)
