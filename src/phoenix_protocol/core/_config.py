"""The one configuration mechanism.

Each setting is looked up in this order, later sources winning:

1. the built-in default (``SETTINGS`` below);
2. ``[tool.phoenix]`` in ``pyproject.toml`` at the root of the git work tree;
3. ``phoenix.toml`` in the Phoenix home;
4. the environment variable ``PHOENIX_<NAME>`` (upper case), e.g. ``PHOENIX_LOCK_TIMEOUT=2``;
5. explicit overrides (CLI flags, keyword arguments).

Values are checked against the setting's type and bounds, from every source: every number has a
minimum and a maximum (``SETTINGS``), and must be finite (no ``inf`` or ``nan``, which TOML and
``float()`` accept), so that no value overflows where it is used (a time span in milliseconds,
``time.sleep``, a port). A bad value is a ``ConfigError`` naming where it came from.
``Config.sources`` tells where each value was found.

One file may give a setting more than one way (``ops-keep`` and ``ops_keep``; flat and in seed
002's ``[paif_config]`` or ``[paif_config.session_protocol]``). The same value is fine; different
values are a ``ConfigError`` naming both keys, both values and the one that would win: this module
has no channel for warnings (it never prints), and a silently ignored setting is a bad value too.

Hot path: TOML is parsed only when a file exists (``pyproject.toml`` only when it mentions
``tool.phoenix``), so the heartbeat pays nothing for configuration it does not have.
"""

from __future__ import annotations

import os

from phoenix_protocol.core._errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["SETTINGS", "Config", "comma_list", "load_config"]

# Largest values: none a user needs, each safe downstream (a number of seconds must fit
# ``time.sleep``, ``Event.wait`` and ``setitimer``; days and minutes become milliseconds).
_YEAR_S = 365 * 24 * 3600  # seconds
_YEAR_MIN = 365 * 24 * 60  # minutes
_CENTURY_DAYS = 36_500
_MANY = 1_000_000  # kept items

# name: (type, default, minimum, maximum, description); numbers have both bounds, inclusive.
SETTINGS: dict[str, tuple[type, Any, float | None, float | None, str]] = {
    "lock_timeout": (float, 10.0, 0.0, _YEAR_S, "Seconds to wait for a state or log lock before giving up."),
    "hook_lock_timeout": (float, 2.0, 0.0, _YEAR_S, "Seconds a hook waits for a lock (hooks have a time budget)."),
    "heartbeat_log_interval": (
        float,
        60.0,
        0.0,
        _YEAR_S,
        "Seconds between heartbeat lines in ops.jsonl (state.json is updated on every tool call).",
    ),
    "ops_max_bytes": (int, 10 * 1024 * 1024, 4096, 2**40, "Size at which ops.jsonl rotates to ops.jsonl.1."),
    "ops_keep": (int, 5, 1, 10_000, "Rotated ops logs kept (ops.jsonl.1 ... ops.jsonl.N)."),
    "brief_max_chars": (int, 10_000, 500, 1_000_000, "Longest brief.md; Claude Code cuts hook context at 10,000."),
    "brief_recent_events": (
        int,
        8,
        0,
        10_000,
        "Things done (commands run, files written) listed under Done Recently in the brief (state.json keeps 12).",
    ),
    "process_start_tolerance": (
        float,
        1.0,
        0.0,
        _YEAR_S,
        "Seconds by which two readings of one process's start time may differ (boot time is whole seconds).",
    ),
    # Checkpoints and sessions (seed 003; seed 002's paif_config).
    "agent_id": (
        str,
        "",
        None,
        None,
        "Default agent id when neither --agent nor $PHOENIX_AGENT is given (paif_config).",
    ),
    "checkpoint_on_exit": (bool, True, None, None, "Take a session checkpoint when a session ends (paif_config)."),
    "restore_on_start": (
        bool,
        True,
        None,
        None,
        "Restore from the newest checkpoint when a session starts (paif_config).",
    ),
    "checkpoint_interval_minutes": (
        float,
        30.0,
        0.0,
        _YEAR_MIN,
        "Minutes of work between routine checkpoints (0: never).",
    ),
    "refresh_after_minutes": (
        float,
        120.0,
        0.0,
        _YEAR_MIN,
        "Minutes of continuous work after which a recovery checkpoint and a forced refresh are taken (0: never).",
    ),
    "pre_compact_interval_minutes": (
        float,
        10.0,
        0.0,
        _YEAR_MIN,
        "Least minutes between the checkpoints of an automatic pre-compaction hook that its CLI fires before "
        "every model call (Gemini CLI's PreCompress); a manual compaction always takes one (0: every time).",
    ),
    "keep_routine": (int, 3, 1, _MANY, "Routine checkpoints kept per agent."),
    "checkpoint_files_delay": (
        float,
        0.5,
        0.0,
        _YEAR_S,
        "Seconds after a checkpoint is durable (committed) before its checkpoint_created ops event is written, "
        "in one batch with whatever follows meanwhile (flush() and exit do it at once).",
    ),
    "recovery_retention_days": (float, 7.0, 0.0, _CENTURY_DAYS, "Days a recovery checkpoint is kept."),
    "keep_session_checkpoints": (
        int,
        50,
        1,
        _MANY,
        "Session checkpoints kept per agent (the sessions list keeps every session).",
    ),
    # Watchdog (seed 000) and operational drift (seed 003).
    "watchdog_grace": (
        float,
        60.0,
        0.0,
        _YEAR_S,
        "Seconds after the last heartbeat before a working agent whose process is gone is marked stalled.",
    ),
    "watchdog_remote_grace": (
        float,
        3600.0,
        0.0,
        _YEAR_S,
        "Seconds without a heartbeat before an agent recorded on another host is marked stalled (its process cannot be checked here).",
    ),
    "watchdog_interval": (float, 60.0, 1.0, _YEAR_S, "Seconds between passes of `phx watchdog --loop`."),
    "watchdog_process_names": (
        str,
        "claude,gemini,codex",
        None,
        None,
        "Comma-separated agent process names for the tmux mode, beside the CLIs Phoenix knows (claude, gemini, codex).",
    ),
    "watchdog_hang_minutes": (
        float,
        30.0,
        0.0,
        _YEAR_MIN,
        "Minutes without a heartbeat, and without CPU progress of its process tree, after which a working agent "
        "whose process runs is reported hung (0: never).",
    ),
    "watchdog_tmux_socket": (
        str,
        "",
        None,
        None,
        "The tmux server's socket (tmux -S) for `phx watchdog --tmux`; empty: each agent's recorded one, else tmux's default.",
    ),
    "tmux_refresh_agents": (
        str,
        "",
        None,
        None,
        "Comma-separated agent ids (or *: every agent) whose due forced refresh `phx watchdog --tmux` performs "
        "by typing the CLI's clear command into the agent's tmux pane when it is idle at its prompt; empty: none.",
    ),
    # The drift detectors keep max(3 x window, 4 x (repeat limit + 1) + 1) recent calls in the state.
    "drift_repeat_limit": (
        int,
        3,
        1,
        1000,
        "The same action (or cycle) more than this many times without progress is drift.",
    ),
    "drift_window": (int, 10, 3, 1000, "Calls per window for the error-rate and slowdown detectors."),
    "drift_error_rate_factor": (
        float,
        2.0,
        1.0,
        1000.0,
        "Error rate rising by this factor between windows (and >= 50 %) is drift.",
    ),
    "drift_slowdown_factor": (
        float,
        2.0,
        1.0,
        1000.0,
        "Median call time rising over three windows by this factor is drift.",
    ),
    "drift_stall_minutes": (
        float,
        20.0,
        0.0,
        _YEAR_MIN,
        "Minutes of calls without progress (while working) that count as drift (0: never).",
    ),
    "drift_failure_share": (
        float,
        0.7,
        0.1,
        1.0,
        "This share (or more) of the last window's calls failing, with no progress between, is drift "
        "(persistent failure).",
    ),
    "drift_exempt_commands": (
        str,
        "kubectl rollout status,kubectl wait,gh run watch,gh pr checks",
        None,
        None,
        "Comma-separated shell command prefixes (normalized as docs/drift.md says) whose calls no drift "
        "rule counts: polling; empty: none.",
    ),
    "drift_exempt_rules": (
        str,
        "",
        None,
        None,
        "Comma-separated drift rules that never fire (repetition, error_rate, persistent_failure, slowdown, "
        "no_progress).",
    ),
    "drift_read_only_tasks": (
        str,
        "read-only,readonly",
        None,
        None,
        "Comma-separated words that mark a task as read-only (a word of its text, any case): such a task is "
        "exempt from the no_progress drift rule.",
    ),
    # Notifications to the person (issue 36): stalled, hung, stopped agents and drift.
    "notify_desktop": (bool, True, None, None, "Desktop notifications through notify-send, where it is installed."),
    "notify_webhook": (
        str,
        "",
        None,
        None,
        "URL that receives a JSON POST per notification (e.g. a Slack incoming webhook or an ntfy topic); empty: none.",
    ),
    "notify_webhook_format": (
        str,
        "json",
        None,
        None,
        "Body of the webhook's POST: json (Phoenix's fields), slack ({text}) or ntfy (ntfy's JSON publish).",
    ),
    "notify_terminal": (
        str,
        "osc9",
        None,
        None,
        "Terminal notification Claude Code emits for the drift hook (terminalSequence): osc9, osc777 or off.",
    ),
    "notify_interval_minutes": (
        float,
        30.0,
        0.0,
        _YEAR_MIN,
        "At most one notification per agent and kind within this many minutes.",
    ),
    # Persona drift (seed 002, "persona gravity").
    "persona_scorer": (
        str,
        "lexical",
        None,
        None,
        "Persona drift scorer: lexical, or embedding (needs the [persona] extra).",
    ),
    "persona_threshold": (float, 0.5, 0.0, 1.0, "A persona check passes when its score (0-1) is at least this."),
    # Memory (seed 002).
    "memory_recall": (
        str,
        "lexical",
        None,
        None,
        "How memory recall ranks: lexical (BM25), or semantic (fused with sentence embeddings; "
        "needs the [persona] extra).",
    ),
    # Teams (seed 004).
    "team_online_minutes": (
        float,
        10.0,
        0.0,
        _YEAR_MIN,
        "A teammate whose last heartbeat is younger than this is online.",
    ),
    "team_idle_minutes": (
        float,
        30.0,
        0.0,
        _YEAR_MIN,
        "... younger than this is idle (then suspended: tasks may be reassigned).",
    ),
    "team_suspended_minutes": (
        float,
        60.0,
        0.0,
        _YEAR_MIN,
        "... younger than this is suspended; older is stale.",
    ),
    "team_git_mirror": (
        bool,
        False,
        None,
        None,
        "On every full team checkpoint, commit the team (as phx team export writes it) to "
        "refs/phoenix/teams/<team_id> (git plumbing only).",
    ),
    # Claude Code's own agent teams (docs/teams.md#claude-code-agent-teams).
    "claude_team_check_command": (
        str,
        "",
        None,
        None,
        "A shell command run in the project when a Claude Code teammate completes a task: while it "
        "exits non-zero, the completion is refused (empty: no check).",
    ),
    "claude_team_check_timeout": (
        float,
        300.0,
        1.0,
        _YEAR_S,
        "Seconds the check command may run; one that runs longer does not refuse the completion.",
    ),
    "claude_team_keep_busy": (
        bool,
        False,
        None,
        None,
        "A Claude Code teammate that goes idle while it owns a task in progress is told to go on.",
    ),
    "claude_team_keep_busy_limit": (
        int,
        3,
        1,
        1000,
        "How many times in a row a teammate is kept working on one task before it may go idle.",
    ),
    # Storage backend (issue 8).
    "store": (
        str,
        "sqlite",
        None,
        None,
        "The store: sqlite (phoenix.db in the home; files, the earlier name, means the same) or a "
        "postgresql:// URL ([postgres] extra).",
    ),
    "pg_pool_size": (int, 10, 1, 1000, "Most connections one process keeps open to the PostgreSQL store."),
    # The memory bridge (seed 002's HTTP service, `phx serve`).
    "server_host": (
        str,
        "127.0.0.1",
        None,
        None,
        "Address `phx serve` listens on (non-loopback needs a token).",
    ),
    "server_port": (int, 8765, 1, 65535, "Port `phx serve` listens on."),
    "server_max_body_bytes": (
        int,
        1024 * 1024,
        1024,
        2**30,
        "Largest request body the server accepts; larger ones get 413 before they are read.",
    ),
}


class Config:
    """Resolved settings. Read them as attributes: ``config.lock_timeout``."""

    lock_timeout: float
    hook_lock_timeout: float
    heartbeat_log_interval: float
    ops_max_bytes: int
    ops_keep: int
    brief_max_chars: int
    brief_recent_events: int
    process_start_tolerance: float
    agent_id: str
    checkpoint_on_exit: bool
    restore_on_start: bool
    checkpoint_interval_minutes: float
    refresh_after_minutes: float
    pre_compact_interval_minutes: float
    keep_routine: int
    checkpoint_files_delay: float
    recovery_retention_days: float
    keep_session_checkpoints: int
    watchdog_grace: float
    watchdog_remote_grace: float
    watchdog_interval: float
    watchdog_process_names: str
    watchdog_hang_minutes: float
    watchdog_tmux_socket: str
    tmux_refresh_agents: str
    drift_repeat_limit: int
    drift_window: int
    drift_error_rate_factor: float
    drift_slowdown_factor: float
    drift_stall_minutes: float
    drift_failure_share: float
    drift_exempt_commands: str
    drift_exempt_rules: str
    drift_read_only_tasks: str
    notify_desktop: bool
    notify_webhook: str
    notify_webhook_format: str
    notify_terminal: str
    notify_interval_minutes: float
    persona_scorer: str
    persona_threshold: float
    memory_recall: str
    team_online_minutes: float
    team_idle_minutes: float
    team_suspended_minutes: float
    team_git_mirror: bool
    claude_team_check_command: str
    claude_team_check_timeout: float
    claude_team_keep_busy: bool
    claude_team_keep_busy_limit: int
    store: str
    pg_pool_size: int
    server_host: str
    server_port: int
    server_max_body_bytes: int

    def __init__(self, values: Mapping[str, Any] | None = None, sources: Mapping[str, str] | None = None) -> None:
        self.sources: dict[str, str] = {}
        for name, (_type, default, _min, _max, _doc) in SETTINGS.items():
            setattr(self, name, default)
            self.sources[name] = "default"
        for name, value in (values or {}).items():
            setattr(self, name, _coerce(name, value, (sources or {}).get(name, "argument")))
            self.sources[name] = (sources or {}).get(name, "argument")

    def as_dict(self) -> dict[str, Any]:
        """Every setting and its value."""
        return {name: getattr(self, name) for name in SETTINGS}

    def replace(self, changes: Mapping[str, Any]) -> Config:
        """A copy with ``changes`` applied as explicit overrides are (checked, source ``argument``):
        ``load_config(..., overrides=changes)`` without reading the files again."""
        return Config({**self.as_dict(), **changes}, {**self.sources, **dict.fromkeys(changes, "argument")})


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_INF = float("inf")


def comma_list(value: object) -> list[str]:
    """The items of a comma-separated setting (``watchdog_process_names``, ``tmux_refresh_agents``),
    stripped, empty ones left out."""
    return [item.strip() for item in str(value or "").split(",") if item.strip()]


def _number(x: float) -> str:
    """A bound as a user would write it: ``31536000``, ``0.5``, never ``3.1536e+07``."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _coerce(name: str, value: object, source: str) -> bool | int | float | str:
    if name not in SETTINGS:
        known = ", ".join(sorted(SETTINGS))
        raise ConfigError(f"unknown setting {name!r} in {source}; known settings: {known}.")
    kind, _default, minimum, maximum, _doc = SETTINGS[name]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError
        if kind is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        converted: int | float = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name} in {source} must be a {kind.__name__}, got {value!r}.") from None
    if kind is float and not -_INF < converted < _INF:  # TOML and float() read inf and nan; nan passes any bound
        raise ConfigError(f"setting {name} in {source} must be a finite number{_span(name)}, got {value!r}.")
    if minimum is not None and converted < minimum:
        raise ConfigError(
            f"setting {name} in {source} must be at least {_number(minimum)}, got {value!r}{_span(name)}."
        )
    if maximum is not None and converted > maximum:  # huge values overflow later (time spans, sleeps, ports)
        raise ConfigError(f"setting {name} in {source} must be at most {_number(maximum)}, got {value!r}{_span(name)}.")
    return converted


def _span(name: str) -> str:
    """`` (from MIN to MAX)`` for a setting with both bounds (for messages)."""
    _kind, _default, minimum, maximum, _doc = SETTINGS[name]
    return "" if minimum is None or maximum is None else f" (from {_number(minimum)} to {_number(maximum)})"


def _toml(value: Any) -> str:
    """``value`` as it would be written in TOML (for messages)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _keys(table: dict[Any, Any], where: str, source: str) -> dict[str, Any]:
    """``table`` with dashes in its keys read as underscores. A key written both ways with
    different values is a ``ConfigError`` (otherwise the later one would win without a word)."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in table.items():
        name = str(key).replace("-", "_")
        if name in out:
            _refuse_conflict(name, [(where + spelled[name], out[name]), (where + str(key), value)], source)
        out[name] = value
        spelled[name] = str(key)
    return out


def _refuse_conflict(name: str, written: list[tuple[str, Any]], source: str) -> None:
    """``written``: the keys that set ``name`` in one file, as ``(key, value)``, the one that
    would win last. The same value twice is fine; different values are a ``ConfigError``."""
    winner_key, winner = written[-1]
    known = name in SETTINGS  # compared as read: 30 and 30.0 are one number, "on" and true one bool
    read = _coerce(name, winner, f"{source} ({winner_key})") if known else winner
    for key, value in written[:-1]:
        if (_coerce(name, value, f"{source} ({key})") if known else value) != read:
            raise ConfigError(
                f"setting {name} is given twice in {source} with different values: {key} = {_toml(value)} "
                f"and {winner_key} = {_toml(winner)}; {winner_key} would win. Keep one of them."
            )


def _flatten_paif(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Accept seed 002's ``paif_config`` table (``agent_id`` and a ``session_protocol`` table).

    The same setting may be written flat, in ``[paif_config]`` and in
    ``[paif_config.session_protocol]``; given in more than one of them with different values it
    is a ``ConfigError`` naming both (which one would win is no guess a user should have to make)."""
    paif = data.pop("paif_config", None)
    if paif is None:
        return data
    if not isinstance(paif, dict):
        raise ConfigError("paif_config must be a table.")
    table = _keys(paif, "paif_config.", source)
    protocol = table.pop("session_protocol", {})
    if not isinstance(protocol, dict):
        raise ConfigError("paif_config.session_protocol must be a table.")
    layers = [
        ("paif_config.", table),
        ("paif_config.session_protocol.", _keys(protocol, "paif_config.session_protocol.", source)),
        ("", data),
    ]
    merged: dict[str, Any] = {}
    for i, (prefix, layer) in enumerate(layers):  # later wins: the top level over session_protocol over paif_config
        for name, value in layer.items():
            earlier = [(p + name, lay[name]) for p, lay in layers[:i] if name in lay]
            if earlier:
                _refuse_conflict(name, [*earlier, (prefix + name, value)], source)
            merged[name] = value
    return merged


_MAX_TOML = 4 * 1024 * 1024
"""The largest settings file read (``phoenix.toml``, ``pyproject.toml``)."""


def _read_toml(path: str, table: tuple[str, ...] = ()) -> dict[str, Any]:
    # Through _durable: a regular file only, opened without blocking (a FIFO at phoenix.toml
    # would hang every hook), at most _MAX_TOML bytes of it.
    from phoenix_protocol.core._durable import read_bytes
    from phoenix_protocol.core._errors import PhoenixError, UnsafeFileError

    try:
        raw = read_bytes(path, limit=_MAX_TOML)
    except UnsafeFileError as exc:  # its advice (`phx doctor`) cannot run without settings
        what = str(exc).split(": Phoenix", 1)[0].split(" Run `phx doctor`", 1)[0].rstrip(".")
        raise ConfigError(f"{what}: Phoenix does not read it as settings; replace it with a regular file.") from None
    except PhoenixError as exc:
        raise ConfigError(str(exc)) from None
    if raw is None:
        return {}
    if table and b"phoenix" not in raw:
        return {}
    import tomllib

    try:
        data: Any = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}.") from None
    for key in table:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [{'.'.join(table)}] must be a table.")
    source = f"{path} [{'.'.join(table)}]" if table else path
    return _flatten_paif(_keys(data, "", source), source)


def load_config(
    home: str | None = None,
    *,
    project_root: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Resolve every setting from the sources listed in the module docstring."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers: list[tuple[str, dict[str, Any]]] = []
    if project_root:
        path = os.path.join(project_root, "pyproject.toml")
        layers.append((f"{path} [tool.phoenix]", _read_toml(path, ("tool", "phoenix"))))
    if home:
        path = os.path.join(home, "phoenix.toml")
        layers.append((path, _read_toml(path)))
    environ = os.environ if env is None else env
    from_env = {}
    for key, raw in environ.items():  # one pass over the environment, not one lookup per setting
        if key.startswith("PHOENIX_") and raw != "":
            name = key[8:].lower()
            if name in SETTINGS:
                from_env[name] = raw
    layers.append(("environment", from_env))
    layers.append(("argument", dict(overrides or {})))
    for source, layer in layers:
        for name, value in layer.items():
            label = f"PHOENIX_{name.upper()}" if source == "environment" else source
            values[name] = _coerce(name, value, label)
            sources[name] = label
    return Config(values, sources)
