"""Operational drift (seed 003): signs that an agent is busy without getting anywhere.

Five detectors over the agent's recent actions (a ring of tool calls the PostToolUse hook keeps in
state.json) and its progress marks:

``repetition``
    The same action (tool name + a normalized digest of its input) more than ``repeat_limit`` (3)
    times without progress in between, or a cycle of 2 to 4 actions (A, B, A, B, ...) repeated
    more than ``repeat_limit`` times without progress.
``error_rate``
    The share of failed calls in the latest window of ``window`` calls is at least 50 %, at least
    ``error_rate_factor`` (2) times the previous window's, with at least 3 failures.
``persistent_failure``
    Many failures without a rise: at least ``failure_share`` (70 %) of the last ``window`` calls
    since the last progress failed (seven different failing builds in a row are drift even when
    the window before was failing too).
``slowdown``
    The median duration of three consecutive windows rises each time, the last at least
    ``slowdown_factor`` (2) times the first (seed 003's "processing time increases steadily").
    When the CLI sends no durations, the gaps between calls stand in for them (pauses of half the
    stall time or more left out).
``no_progress``
    Working, calls keep coming (at least ``window`` within the last ``stall_minutes``, 20), and
    nothing counted as progress for ``stall_minutes``. A long think without calls is not drift.

Progress is a successful edit (``Edit``, ``Write``, ``MultiEdit``, ``NotebookEdit``, ...), or a
change the agent makes to its own state (task, notes, progress): it resets repetition and stall.

Shell commands are compared after ``normalize_command`` (near-duplicates are one action), and a
call marked ``exempt`` (a polling command the user or the model exempted) counts for none of the
detectors but the slowdown. Whole rules can be exempted for a task (``exempt_rules``).

Pure functions, no I/O; imports nothing (the heartbeat runs it on every tool call).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "EDIT_TOOLS",
    "EXEMPT_KEY",
    "RULES",
    "Action",
    "DriftConfig",
    "Signal",
    "command_exempt",
    "detect",
    "is_progress",
    "normalize_command",
    "observe",
    "read_only",
    "task_exemption",
    "warn_once",
]

RULES = ("repetition", "persistent_failure", "error_rate", "slowdown", "no_progress")
"""Every detector's name (the ``kind`` of its signals), as exemptions name them, in the order
they are checked (the first signal is the one the model hears)."""

EDIT_TOOLS = frozenset(
    {"Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch", "write_file", "replace", "edit_file", "create_file"}
)
"""Tools whose success counts as progress (Claude Code's, Gemini CLI's and Codex's editors)."""


DEFAULT_EXEMPT_COMMANDS = "kubectl rollout status,kubectl wait,gh run watch,gh pr checks"  # as in core._config
"""Polling commands exempt by default (``drift_exempt_commands``): waiting on a deploy or a CI
run repeats the same command by design."""


def _items(value: object) -> tuple[str, ...]:
    """A comma-separated setting as a tuple of its non-empty, stripped items."""
    return tuple(item.strip() for item in str(value or "").split(",") if item.strip())


_OPERATORS = ("&&", "||", "|", ";")
_PAGERS = frozenset({"tail", "head", "cat", "less", "more"})
_REDIRECTS = ("2>&1", "1>&2", ">/dev/null", "2>/dev/null", "&>/dev/null")


def _shell_tokens(command: str) -> list[str]:
    """Words and operators of a shell command: quotes group (and go), operators (``&&``, ``||``,
    ``|``, ``;``) outside quotes are tokens of their own. No expansion, no subshells: a tokenizer
    for comparing commands, not a shell (``shlex`` would import ``re`` on the hook's hot path)."""
    tokens: list[str] = []
    word: list[str] = []
    started = False
    quote = ""
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < n:
                i += 1
                word.append(command[i])
            else:
                word.append(c)
        elif c in "'\"":
            quote, started = c, True
        elif c == "\\" and i + 1 < n:
            i += 1
            word.append(command[i])
            started = True
        elif c in " \t\n":
            if started:
                tokens.append("".join(word))
                word, started = [], False
        elif c in "|;" or command[i : i + 2] == "&&":
            if started:
                tokens.append("".join(word))
                word, started = [], False
            two = command[i : i + 2]
            op = two if two in ("&&", "||") else c
            tokens.append(op)
            i += len(op)
            continue
        else:
            word.append(c)
            started = True
        i += 1
    if started:
        tokens.append("".join(word))
    return tokens


def _number(word: str) -> bool:
    digits = word.replace(".", "").replace(":", "").replace("+", "").replace("-", "")
    return bool(digits) and digits.isdigit()


def normalize_command(command: str) -> str:
    """A shell command reduced to what makes it the same action (documented in docs/drift.md):

    - leading ``cd DIR &&`` (or ``cd DIR;``) steps go: where a command runs is not what it does;
    - trailing pipes into ``tail``, ``head``, ``cat``, ``less`` or ``more`` go (``| tail -20``
      and ``| tail -50`` show the same run), and so do redirections such as ``2>&1``;
    - options go (every word starting with ``-``: flag order and an extra flag do not make a
      new command; ``-n 20``'s value stays, as a number);
    - numbers become ``N`` (``sleep 5``/``sleep 10``, ``-n 20``/``-n 50``);
    - quoting and whitespace do not count.

    What is left is the commands' words in order, joined by their operators: ``pytest -x
    tests/test_db.py``, ``cd /repo && pytest tests/test_db.py -q | tail -20`` and ``pytest
    tests/test_db.py --maxfail=1 2>&1 | head -50`` are one command; ``pytest tests/test_api.py``
    is another."""
    tokens = _shell_tokens(command)
    segments: list[list[str]] = [[]]
    joins: list[str] = []
    for token in tokens:
        if token in _OPERATORS:
            joins.append(token)
            segments.append([])
        else:
            segments[-1].append(token)
    # Leading `cd DIR` steps (joined by && or ;) go.
    while len(segments) > 1 and segments[0] and segments[0][0] == "cd" and joins[0] in ("&&", ";"):
        segments.pop(0)
        joins.pop(0)
    # Trailing pagers (joined by a pipe) go.
    while len(segments) > 1 and joins[-1] == "|" and (not segments[-1] or segments[-1][0] in _PAGERS):
        segments.pop()
        joins.pop()
    out: list[str] = []
    for k, segment in enumerate(segments):
        if k:
            out.append(joins[k - 1])
        for word in segment:
            if word.startswith("-") and len(word) > 1:
                continue
            if word in _REDIRECTS or (len(word) > 1 and (word[0] in "<>" or word[:2] in ("1>", "2>", "&>"))):
                continue
            if any(c in word for c in " \t\n|&;"):
                out.append("'" + word + "'")  # quoted text that looks like operators stays text
            else:
                out.append("N" if _number(word) else word)
    return " ".join(out)


def command_exempt(normalized: str, prefixes: tuple[str, ...] | list[str]) -> bool:
    """Whether a normalized command starts with one of ``prefixes`` (each normalized too), at a
    word boundary: ``kubectl rollout status`` exempts ``kubectl rollout status deploy/web``."""
    for prefix in prefixes:
        want = normalize_command(prefix)
        if want and (normalized == want or normalized.startswith(want + " ")):
            return True
    return False


class Action:
    """One tool call: when, which tool, a digest of its input, outcome, duration, progress, and
    whether it is exempt from the detectors (a polling command the user or the model exempted)."""

    __slots__ = ("digest", "duration_ms", "exempt", "ok", "progress", "tool", "ts_ms")

    def __init__(
        self,
        ts_ms: int,
        tool: str,
        digest: str,
        ok: bool = True,
        duration_ms: int | None = None,
        progress: bool = False,
        exempt: bool = False,
    ) -> None:
        self.ts_ms = ts_ms
        self.tool = tool
        self.digest = digest
        self.ok = ok
        self.duration_ms = duration_ms
        self.progress = progress
        self.exempt = exempt

    @property
    def key(self) -> str:
        return self.tool + ":" + self.digest

    def to_list(self) -> list[Any]:
        """Compact form kept in state.json (a seventh item, ``1``, only for an exempt call)."""
        item = [self.ts_ms, self.tool, self.digest, self.ok, self.duration_ms, self.progress]
        return [*item, 1] if self.exempt else item

    @classmethod
    def from_list(cls, item: list[Any]) -> Action:
        ts, tool, digest, ok, duration, progress, *rest = item
        if len(rest) > 1:
            raise ValueError("an action has six or seven items")
        return cls(
            int(ts),
            str(tool),
            str(digest),
            bool(ok),
            duration if isinstance(duration, int) else None,
            bool(progress),
            bool(rest and rest[0]),
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
        failure_share: float = 0.7,
        exempt_commands: tuple[str, ...] = (),
        exempt_rules: tuple[str, ...] = (),
        read_only_words: tuple[str, ...] = (),
    ) -> None:
        self.repeat_limit = repeat_limit
        self.window = window
        self.error_rate_factor = error_rate_factor
        self.slowdown_factor = slowdown_factor
        self.stall_minutes = stall_minutes
        self.failure_share = failure_share
        self.exempt_commands = exempt_commands
        """Normalized command prefixes whose calls are exempt (``command_exempt``)."""
        self.exempt_rules = exempt_rules
        """Rules (``RULES``) that never signal."""
        self.read_only_words = read_only_words
        """Words that mark a task as read-only (``task_exemption``: no ``no_progress``)."""

    @classmethod
    def from_config(cls, config: Any) -> DriftConfig:
        return cls(
            repeat_limit=int(getattr(config, "drift_repeat_limit", 3)),
            window=int(getattr(config, "drift_window", 10)),
            error_rate_factor=float(getattr(config, "drift_error_rate_factor", 2.0)),
            slowdown_factor=float(getattr(config, "drift_slowdown_factor", 2.0)),
            stall_minutes=float(getattr(config, "drift_stall_minutes", 20.0)),
            failure_share=float(getattr(config, "drift_failure_share", 0.7)),
            exempt_commands=_items(getattr(config, "drift_exempt_commands", DEFAULT_EXEMPT_COMMANDS)),
            exempt_rules=_items(getattr(config, "drift_exempt_rules", "")),
            read_only_words=_items(getattr(config, "drift_read_only_tasks", "read-only,readonly")),
        )

    @property
    def keep(self) -> int:
        """How many recent actions the detectors need."""
        return max(3 * self.window + 1, 4 * (self.repeat_limit + 1) + 1)


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


def _persistent_failure(actions: list[Action], window: int, share: float) -> Signal | None:
    """At least ``share`` of the last ``window`` calls since the last progress failed, whatever
    the window before held: a run of different failing builds, not only a rise."""
    tail = _since_progress(actions)
    last = tail[-window:]
    need = max(3, -(-int(share * window * 1000) // 1000))  # ceil(share x window), at least 3
    failed = sum(1 for a in last if not a.ok)
    if failed < need:
        return None
    anchor = tail[0].ts_ms if len(tail) < len(actions) else 0  # the first call after progress
    return Signal(
        "persistent_failure",
        f"{failed} of the last {len(last)} calls failed, with no progress in between",
        f"failing:{anchor}",
    )


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _gaps(actions: list[Action], pause_ms: int) -> list[tuple[str, int]]:
    """Each call's time since the previous call (the tool's run and the model's turn before it),
    for a CLI that sends no durations; a pause of ``pause_ms`` or more is no call's time."""
    out = []
    for i in range(1, len(actions)):
        gap = actions[i].ts_ms - actions[i - 1].ts_ms
        if 0 <= gap < pause_ms:
            out.append((actions[i].tool, gap))
    return out


def _slowdown(actions: list[Action], window: int, factor: float, pause_ms: int = 600_000) -> Signal | None:
    """Each call's duration relative to the median of the same tool (a long-tailed mix of fast
    reads and slow builds is not a trend), compared over three windows. Without durations (a CLI
    that sends none), the gaps between calls (``_gaps``)."""
    timed = [(a.tool, a.duration_ms) for a in actions if a.duration_ms is not None]
    measured = "median"
    if len(timed) < 3 * window:
        if any(a.duration_ms is not None for a in actions[-window:]):
            return None  # the CLI sends durations; too few of them yet
        timed = _gaps(actions, pause_ms)
        measured = "median gap between calls"
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
            f"calls keep getting slower: {measured} {raw_first / 1000:.1f}s, then "
            f"{_median([d for _t, d in timed[window : 2 * window]]) / 1000:.1f}s, then {raw_last / 1000:.1f}s",
            f"slow:{int(raw_last // 1000)}" if measured == "median" else f"slowgap:{int(raw_last // 1000)}",
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
    exempt_rules: tuple[str, ...] | list[str] | set[str] = (),
) -> list[Signal]:
    """Every drift signal in ``actions`` (oldest first) as of ``now_ms``, but none of the rules
    the configuration or ``exempt_rules`` (a task's exemption) exempt."""
    cfg = config or DriftConfig()
    skip = set(cfg.exempt_rules) | set(exempt_rules)
    # Exempt calls (polling) count for no detector but the slowdown, which times every call.
    counted = [a for a in actions if not a.exempt] if any(a.exempt for a in actions) else actions
    pause_ms = int(cfg.stall_minutes * 30_000) or 600_000
    signals = []
    for rule in RULES:
        if rule in skip:
            continue
        if rule == "repetition":
            signal = _repetition(counted, cfg.repeat_limit)
        elif rule == "persistent_failure":
            signal = _persistent_failure(counted, cfg.window, cfg.failure_share)
        elif rule == "error_rate":
            signal = _error_rate(counted, cfg.window, cfg.error_rate_factor)
        elif rule == "slowdown":
            signal = _slowdown(actions, cfg.window, cfg.slowdown_factor, pause_ms)
        else:
            signal = _no_progress(counted, now_ms, last_progress_ms, cfg.window, cfg.stall_minutes)
        if signal is not None:
            signals.append(signal)
    return signals


EXEMPT_KEY = "drift_exempt"
"""The state field (``state.json``) of a task's exemption: ``{"task", "rules", "commands", "at", "by"}``."""


def read_only(task: str | None, words: tuple[str, ...] | list[str]) -> bool:
    """Whether ``task`` says it is read-only: one of ``words`` in it, as a word, in any case
    (``"Find why sessions expire (read-only)"`` with the default ``read-only``)."""
    if not task or not words:
        return False
    text = " " + "".join(c if c.isalnum() or c in "-_" else " " for c in task.lower()) + " "
    return any(" " + w.lower() + " " in text for w in words if w)


def task_exemption(
    record: object, task: str | None, read_only_words: tuple[str, ...] | list[str] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The rules and command prefixes a task is exempt from: ``record`` (``state.drift_exempt``)
    holds while the agent's current task is the one it was set for (``task`` ``None`` in the
    record: until it is cleared); a task that says it is read-only (``read_only``) is exempt from
    ``no_progress``."""
    base: tuple[str, ...] = ("no_progress",) if read_only(task, read_only_words) else ()
    rules, commands = _recorded_exemption(record, task)
    return tuple(dict.fromkeys(base + rules)), commands


def _recorded_exemption(record: object, task: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(record, dict):
        return (), ()
    for_task = record.get("task")
    if for_task is not None and for_task != task:
        return (), ()
    rules = record.get("rules")
    commands = record.get("commands")
    return (
        tuple(r for r in rules if isinstance(r, str)) if isinstance(rules, list) else (),
        tuple(c for c in commands if isinstance(c, str)) if isinstance(commands, list) else (),
    )


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
    exempt: bool = False,
    exempt_rules: tuple[str, ...] | list[str] | set[str] = (),
) -> tuple[list[Action], bool, list[Signal]]:
    """One tool call as the heartbeat sees it: the new ring of recent actions (at most
    ``config.keep``), whether the call was progress (``is_progress``), and the drift signals
    (none after progress). ``last_progress_ms`` is the previous progress mark (or when work
    started); ``exempt``: the call is an exempt command (``command_exempt``); ``exempt_rules``:
    rules the task is exempt from."""
    progress = is_progress(actions, tool, digest, ok, edit=edit)
    ring = [*actions[-(config.keep - 1) :], Action(now_ms, tool, digest, ok, duration_ms, progress, exempt)]
    if progress:
        return ring, True, []
    signals = detect(ring, now_ms=now_ms, config=config, last_progress_ms=last_progress_ms, exempt_rules=exempt_rules)
    return ring, False, signals
