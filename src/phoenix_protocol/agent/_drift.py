"""Operational drift (seed 003): signs that an agent is busy without getting anywhere.

Four detectors over the agent's recent actions (a ring of tool calls the PostToolUse hook keeps in
state.json) and its progress marks:

``repetition``
    The same action (tool name + a normalized digest of its input) more than ``repeat_limit`` (3)
    times without progress in between, or a cycle of 2 to 4 actions (A, B, A, B, ...) repeated
    more than ``repeat_limit`` times without progress.
``error_rate``
    The share of failed calls in the latest window of ``window`` calls is at least 50 %, at least
    ``error_rate_factor`` (2) times the previous window's, with at least 3 failures.
``slowdown``
    The median duration of three consecutive windows rises each time, the last at least
    ``slowdown_factor`` (2) times the first (seed 003's "processing time increases steadily").
``no_progress``
    Working, calls keep coming (at least ``window`` within the last ``stall_minutes``, 20), and
    nothing counted as progress for ``stall_minutes``. A long think without calls is not drift.

Progress is a successful edit (``Edit``, ``Write``, ``MultiEdit``, ``NotebookEdit``, ...), or a
change the agent makes to its own state (task, notes, progress): it resets repetition and stall.

Pure functions, no I/O; imports nothing (the heartbeat runs it on every tool call).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EDIT_TOOLS", "Action", "DriftConfig", "Signal", "detect", "is_progress", "observe", "warn_once"]

EDIT_TOOLS = frozenset(
    {"Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch", "write_file", "replace", "edit_file", "create_file"}
)
"""Tools whose success counts as progress (Claude Code's, Gemini CLI's and Codex's editors)."""


class Action:
    """One tool call: when, which tool, a digest of its input, outcome, duration, progress."""

    __slots__ = ("digest", "duration_ms", "ok", "progress", "tool", "ts_ms")

    def __init__(
        self,
        ts_ms: int,
        tool: str,
        digest: str,
        ok: bool = True,
        duration_ms: int | None = None,
        progress: bool = False,
    ) -> None:
        self.ts_ms = ts_ms
        self.tool = tool
        self.digest = digest
        self.ok = ok
        self.duration_ms = duration_ms
        self.progress = progress

    @property
    def key(self) -> str:
        return self.tool + ":" + self.digest

    def to_list(self) -> list[Any]:
        """Compact form kept in state.json."""
        return [self.ts_ms, self.tool, self.digest, self.ok, self.duration_ms, self.progress]

    @classmethod
    def from_list(cls, item: list[Any]) -> Action:
        ts, tool, digest, ok, duration, progress = item
        return cls(
            int(ts), str(tool), str(digest), bool(ok), duration if isinstance(duration, int) else None, bool(progress)
        )


class DriftConfig:
    """Thresholds (settings ``drift_*`` in the configuration)."""

    def __init__(
        self,
        *,
        repeat_limit: int = 3,
        window: int = 10,
        error_rate_factor: float = 2.0,
        slowdown_factor: float = 2.0,
        stall_minutes: float = 20.0,
    ) -> None:
        self.repeat_limit = repeat_limit
        self.window = window
        self.error_rate_factor = error_rate_factor
        self.slowdown_factor = slowdown_factor
        self.stall_minutes = stall_minutes

    @classmethod
    def from_config(cls, config: Any) -> DriftConfig:
        return cls(
            repeat_limit=int(getattr(config, "drift_repeat_limit", 3)),
            window=int(getattr(config, "drift_window", 10)),
            error_rate_factor=float(getattr(config, "drift_error_rate_factor", 2.0)),
            slowdown_factor=float(getattr(config, "drift_slowdown_factor", 2.0)),
            stall_minutes=float(getattr(config, "drift_stall_minutes", 20.0)),
        )

    @property
    def keep(self) -> int:
        """How many recent actions the detectors need."""
        return max(3 * self.window, 4 * (self.repeat_limit + 1) + 1)


class Signal:
    """A detected drift: its kind, a human sentence, and a signature (to warn only once)."""

    __slots__ = ("detail", "kind", "signature")

    def __init__(self, kind: str, detail: str, signature: str) -> None:
        self.kind = kind
        self.detail = detail
        self.signature = signature

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "signature": self.signature}

    def __repr__(self) -> str:
        return f"Signal({self.kind!r}, {self.detail!r})"


def is_progress(actions: list[Action], tool: str, digest: str, ok: bool, *, edit: bool | None = None) -> bool:
    """Whether a call moves the work on: a successful edit (``edit``, by default: the tool is in
    ``EDIT_TOOLS``), unless the very same edit already succeeded in the recent actions (an edit
    flip-flopping X -> Y -> X, or rewriting the same content, goes nowhere)."""
    if not ok or not (tool in EDIT_TOOLS if edit is None else edit):
        return False
    key = tool + ":" + digest
    return not any(a.ok and a.progress and a.key == key for a in actions)


def _since_progress(actions: list[Action]) -> list[Action]:
    for i in range(len(actions) - 1, -1, -1):
        if actions[i].progress:
            return actions[i + 1 :]
    return actions


def _repetition(actions: list[Action], limit: int) -> Signal | None:
    tail = _since_progress(actions)
    if len(tail) <= limit:
        return None
    keys = [a.key for a in tail]
    last = keys[-1]
    # The same action, anywhere since the last progress, more than `limit` times.
    count = keys.count(last)
    if count > limit:
        tool = tail[-1].tool
        return Signal("repetition", f"the same {tool} call {count} times without progress", f"repeat:{last}")
    # A cycle of 2-4 distinct actions repeated back to back more than `limit` times.
    for period in (2, 3, 4):
        need = period * (limit + 1)
        if len(keys) < need:
            continue
        window = keys[-need:]
        pattern = window[:period]
        if len(set(pattern)) < 2:
            continue
        if all(window[i] == pattern[i % period] for i in range(need)):
            tools = ", ".join(a.tool for a in tail[-period:])
            return Signal(
                "repetition",
                f"a cycle of {period} calls ({tools}) repeated {limit + 1} times without progress",
                "cycle:" + "|".join(sorted(pattern)),
            )
    return None


def _error_rate(actions: list[Action], window: int, factor: float) -> Signal | None:
    if len(actions) < 2 * window:
        return None
    current = actions[-window:]
    previous = actions[-2 * window : -window]
    failed_now = sum(1 for a in current if not a.ok)
    failed_before = sum(1 for a in previous if not a.ok)
    rate_now = failed_now / window
    rate_before = failed_before / window
    if failed_now >= 3 and rate_now >= 0.5 and rate_now >= factor * max(rate_before, 0.05):
        return Signal(
            "error_rate",
            f"{failed_now} of the last {window} calls failed (previously {failed_before} of {window})",
            f"errors:{failed_now // 2}",
        )
    return None


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _slowdown(actions: list[Action], window: int, factor: float) -> Signal | None:
    """Each call's duration relative to the median of the same tool (a long-tailed mix of fast
    reads and slow builds is not a trend), compared over three windows."""
    timed = [(a.tool, a.duration_ms) for a in actions if a.duration_ms is not None]
    if len(timed) < 3 * window:
        return None
    timed = timed[-3 * window :]
    by_tool: dict[str, list[int]] = {}
    for tool, duration in timed:
        by_tool.setdefault(tool, []).append(duration)
    typical = {tool: max(_median(values), 1.0) for tool, values in by_tool.items()}
    ratios = [duration / typical[tool] for tool, duration in timed]
    r1, r2, r3 = (_median_f(ratios[i * window : (i + 1) * window]) for i in range(3))
    raw_last = _median([d for _t, d in timed[-window:]])
    raw_first = _median([d for _t, d in timed[:window]])
    if r1 < r2 < r3 and r3 >= factor * r1 and raw_last >= 1000 and raw_last >= factor * raw_first:
        return Signal(
            "slowdown",
            f"calls keep getting slower: median {raw_first / 1000:.1f}s, then "
            f"{_median([d for _t, d in timed[window : 2 * window]]) / 1000:.1f}s, then {raw_last / 1000:.1f}s",
            f"slow:{int(raw_last // 1000)}",
        )
    return None


def _median_f(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _no_progress(
    actions: list[Action], now_ms: int, last_progress_ms: int | None, window: int, minutes: float
) -> Signal | None:
    """At least ``window`` calls within the last ``minutes``, and no progress in that time. A long
    think without calls lets the calls age out: thinking is not drift."""
    if not minutes or len(actions) < window:
        return None
    span = int(minutes * 60_000)
    marks = [a.ts_ms for a in actions if a.progress]
    # A pause of half the stall time or more (thinking, waiting for the user) restarts the clock.
    marks += [actions[i].ts_ms for i in range(1, len(actions)) if actions[i].ts_ms - actions[i - 1].ts_ms >= span // 2]
    reference = max(marks + ([last_progress_ms] if last_progress_ms else []), default=None)
    if reference is not None and now_ms - reference < span:
        return None
    recent = [a for a in actions if now_ms - a.ts_ms <= span]
    if len(recent) < window:
        return None  # not enough calls lately
    if reference is None and now_ms - actions[0].ts_ms < span:
        return None  # no progress mark, and too short a history to judge
    since = f"for {(now_ms - reference) // 60_000} minutes" if reference else "in the recorded history"
    return Signal(
        "no_progress", f"{len(recent)} calls and no progress {since}", f"stall:{reference or actions[0].ts_ms}"
    )


def detect(
    actions: list[Action],
    *,
    now_ms: int,
    config: DriftConfig | None = None,
    last_progress_ms: int | None = None,
) -> list[Signal]:
    """Every drift signal in ``actions`` (oldest first) as of ``now_ms``."""
    cfg = config or DriftConfig()
    signals = []
    for found in (
        _repetition(actions, cfg.repeat_limit),
        _error_rate(actions, cfg.window, cfg.error_rate_factor),
        _slowdown(actions, cfg.window, cfg.slowdown_factor),
        _no_progress(actions, now_ms, last_progress_ms, cfg.window, cfg.stall_minutes),
    ):
        if found is not None:
            signals.append(found)
    return signals


WARNED_KEEP = 16
"""How many signatures an episode of drift remembers having warned about."""


def warn_once(
    signals: list[Signal], record: dict[str, Any] | None, at: str
) -> tuple[Signal, dict[str, Any], bool] | None:
    """The first of ``signals`` not warned about yet in this episode of drift, the record to keep
    (``state.drift``), and whether it opens the episode.

    An episode lasts from its first warning to the next progress (which clears the record). Its
    record remembers every signature warned about (the newest ``WARNED_KEEP``), not only the
    last: two alternating failing calls give a new signature on every call (``repeat:A``,
    ``repeat:B``, the cycle, the error rate), and each would warn again. Only the signal that
    opens an episode takes seed 003's emergency recovery; the later ones are only warnings.
    ``None`` when every signal was warned about already.
    """
    previous = record if isinstance(record, dict) else None
    warned: list[str] = []
    if previous is not None:
        kept = previous.get("warned")
        if isinstance(kept, list):
            warned = [item for item in kept if isinstance(item, str)]
        elif isinstance(previous.get("signature"), str):
            warned = [previous["signature"]]  # a record written before the list was kept
    for signal in signals:
        if signal.signature in warned:
            continue
        since = at if previous is None else str(previous.get("since") or previous.get("at") or at)
        new = {**signal.as_dict(), "at": at, "since": since, "warned": [*warned, signal.signature][-WARNED_KEEP:]}
        return signal, new, previous is None
    return None


def observe(
    actions: list[Action],
    *,
    now_ms: int,
    tool: str,
    digest: str,
    ok: bool,
    duration_ms: int | None,
    config: DriftConfig,
    last_progress_ms: int | None,
    edit: bool | None = None,
) -> tuple[list[Action], bool, list[Signal]]:
    """One tool call as the heartbeat sees it: the new ring of recent actions (at most
    ``config.keep``), whether the call was progress (``is_progress``), and the drift signals
    (none after progress). ``last_progress_ms`` is the previous progress mark (or when work
    started)."""
    progress = is_progress(actions, tool, digest, ok, edit=edit)
    ring = [*actions[-(config.keep - 1) :], Action(now_ms, tool, digest, ok, duration_ms, progress)]
    if progress:
        return ring, True, []
    return ring, False, detect(ring, now_ms=now_ms, config=config, last_progress_ms=last_progress_ms)
