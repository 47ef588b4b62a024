"""The one clock: the system clock's pin (``PHOENIX_NOW_MS``), the manual clock, ISO formatting."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from phoenix_protocol.core._clock import ManualClock, SystemClock, iso_from_ms, ms_from_iso, system_clock


def test_the_pin_is_read_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHOENIX_NOW_MS", raising=False)
    before = time.time_ns() // 1_000_000
    assert before <= system_clock.now_ms() <= time.time_ns() // 1_000_000
    monkeypatch.setenv("PHOENIX_NOW_MS", "1767225600123")
    assert system_clock.now_ms() == 1_767_225_600_123 and SystemClock().now_iso() == "2026-01-01T00:00:00.123Z"
    os.environ["PHOENIX_NOW_MS"] = "42"  # set directly, not through monkeypatch: seen as well
    assert system_clock.now_ms() == 42
    monkeypatch.setenv("PHOENIX_NOW_MS", "not a number")  # ignored, not an error
    assert system_clock.now_ms() >= before
    monkeypatch.setenv("PHOENIX_NOW_MS", "")
    assert system_clock.now_ms() >= before
    monkeypatch.delenv("PHOENIX_NOW_MS")
    assert system_clock.now_ms() >= before


def test_the_pin_reaches_a_subprocess() -> None:
    code = "from phoenix_protocol.core._clock import system_clock; print(system_clock.now_ms())"
    env = {**os.environ, "PHOENIX_NOW_MS": "1767225600000"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1767225600000"


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock()
    start = clock.now_ms()
    assert clock.now_ms() == start and clock.now_iso() == "2026-01-01T00:00:00.000Z"
    clock.advance(90, ms=5)
    assert clock.now_ms() == start + 90_005 and clock.monotonic() == pytest.approx(90.005)
    clock.set(start - 1000)  # skew: it may go back
    assert clock.now_ms() == start - 1000


@pytest.mark.parametrize("ms", [0, 999, 1_767_225_600_000, 1_767_225_659_999, 1_767_225_660_001])
def test_iso_round_trip(ms: int) -> None:
    text = iso_from_ms(ms)
    assert text.endswith("Z") and len(text) == 24 and ms_from_iso(text) == ms


def test_iso_parsing_takes_offsets_and_naive_times_and_refuses_the_rest() -> None:
    assert (
        ms_from_iso("2026-01-01T01:00:00+01:00")
        == ms_from_iso("2026-01-01T00:00:00Z")
        == ms_from_iso("2026-01-01T00:00:00")
    )
    with pytest.raises(ValueError):
        ms_from_iso("yesterday")
