"""The one configuration mechanism.

Each setting is looked up in this order, later sources winning:

1. the built-in default (``SETTINGS`` below);
2. ``[tool.phoenix]`` in ``pyproject.toml`` at the root of the git work tree;
3. ``phoenix.toml`` in the Phoenix home;
4. the environment variable ``PHOENIX_<NAME>`` (upper case), e.g. ``PHOENIX_LOCK_TIMEOUT=2``;
5. explicit overrides (CLI flags, keyword arguments).

Values are checked against the setting's type and bounds (numbers must be finite: no ``inf`` or
``nan``, which TOML and ``float()`` accept); a bad value is a ``ConfigError``
naming where it came from. ``Config.sources`` tells where each value was found.

Hot path: TOML is parsed only when a file exists (``pyproject.toml`` only when it mentions
``tool.phoenix``), so the heartbeat pays nothing for configuration it does not have.
"""

from __future__ import annotations

import os

from phoenix_protocol._errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["SETTINGS", "Config", "load_config"]

# name: (type, default, minimum, description)
SETTINGS: dict[str, tuple[type, Any, float | None, str]] = {
    "lock_timeout": (float, 10.0, 0.0, "Seconds to wait for a state or log lock before giving up."),
    "hook_lock_timeout": (float, 2.0, 0.0, "Seconds a hook waits for a lock (hooks have a time budget)."),
    "heartbeat_log_interval": (
        float,
        60.0,
        0.0,
        "Seconds between heartbeat lines in ops.jsonl (state.json is updated on every tool call).",
    ),
    "ops_max_bytes": (int, 10 * 1024 * 1024, 4096, "Size at which ops.jsonl rotates to ops.jsonl.1."),
    "ops_keep": (int, 5, 1, "Rotated ops logs kept (ops.jsonl.1 ... ops.jsonl.N)."),
    "brief_max_chars": (int, 10_000, 500, "Longest brief.md; Claude Code cuts hook context at 10,000."),
    "brief_recent_events": (int, 12, 0, "Ops events listed under Recent Activity in the brief."),
    "process_start_tolerance": (
        float,
        1.0,
        0.0,
        "Seconds by which two readings of one process's start time may differ (boot time is whole seconds).",
    ),
    # Checkpoints and sessions (seed 003; seed 002's paif_config).
    "agent_id": (str, "", None, "Default agent id when neither --agent nor $PHOENIX_AGENT is given (paif_config)."),
    "checkpoint_on_exit": (bool, True, None, "Take a session checkpoint when a session ends (paif_config)."),
    "restore_on_start": (bool, True, None, "Restore from the newest checkpoint when a session starts (paif_config)."),
    "checkpoint_interval_minutes": (float, 30.0, 0.0, "Minutes of work between routine checkpoints (0: never)."),
    "refresh_after_minutes": (
        float,
        120.0,
        0.0,
        "Minutes of continuous work after which a recovery checkpoint and a forced refresh are taken (0: never).",
    ),
    "keep_routine": (int, 3, 1, "Routine checkpoints kept per agent."),
    "checkpoint_files_delay": (
        float,
        0.5,
        0.0,
        "Seconds after a checkpoint is durable (in the checkpoint log) before its named file is written "
        "and dropped ones removed, in one batch with whatever follows meanwhile (flush() and exit do it at once).",
    ),
    "recovery_retention_days": (float, 7.0, 0.0, "Days a recovery checkpoint is kept."),
    "keep_session_checkpoints": (
        int,
        50,
        1,
        "Session checkpoints kept per agent (the sessions list keeps every session).",
    ),
    # Watchdog (seed 000) and operational drift (seed 003).
    "watchdog_grace": (
        float,
        60.0,
        0.0,
        "Seconds after the last heartbeat before a working agent whose process is gone is marked stalled.",
    ),
    "watchdog_remote_grace": (
        float,
        3600.0,
        0.0,
        "Seconds without a heartbeat before an agent recorded on another host is marked stalled (its process cannot be checked here).",
    ),
    "watchdog_interval": (float, 60.0, 1.0, "Seconds between passes of `phx watchdog --interval`."),
    "watchdog_process_names": (
        str,
        "claude,gemini,codex",
        None,
        "Comma-separated agent process names for the tmux mode.",
    ),
    "drift_repeat_limit": (
        int,
        3,
        1,
        "The same action (or cycle) more than this many times without progress is drift.",
    ),
    "drift_window": (int, 10, 3, "Calls per window for the error-rate and slowdown detectors."),
    "drift_error_rate_factor": (
        float,
        2.0,
        1.0,
        "Error rate rising by this factor between windows (and >= 50 %) is drift.",
    ),
    "drift_slowdown_factor": (float, 2.0, 1.0, "Median call time rising over three windows by this factor is drift."),
    "drift_stall_minutes": (
        float,
        20.0,
        0.0,
        "Minutes of calls without progress (while working) that count as drift (0: never).",
    ),
    # Persona drift (seed 002, "persona gravity").
    "persona_scorer": (
        str,
        "lexical",
        None,
        "Persona drift scorer: lexical, or embedding (needs the [persona] extra).",
    ),
    "persona_threshold": (float, 0.5, 0.0, "A persona check passes when its score (0-1) is at least this."),
    # Teams (seed 004).
    "team_online_minutes": (float, 10.0, 0.0, "A teammate whose last heartbeat is younger than this is online."),
    "team_idle_minutes": (float, 30.0, 0.0, "... younger than this is idle (then suspended: tasks may be reassigned)."),
    "team_suspended_minutes": (float, 60.0, 0.0, "... younger than this is suspended; older is stale."),
    "team_git_mirror": (
        bool,
        False,
        None,
        "Mirror full team checkpoints into refs/phoenix/teams/<team_id> (git plumbing only).",
    ),
    # Storage backend (issue 8).
    "store": (
        str,
        "files",
        None,
        "Where teams (and memory) are kept: files (the home) or a postgresql:// URL ([postgres] extra).",
    ),
    "pg_pool_size": (int, 10, 1, "Most connections one process keeps open to the PostgreSQL store."),
    # The memory bridge (seed 002's HTTP service, `phx serve`).
    "server_host": (str, "127.0.0.1", None, "Address `phx serve` listens on (non-loopback needs a token)."),
    "server_port": (int, 8765, 1, "Port `phx serve` listens on."),
    "server_max_body_bytes": (
        int,
        1024 * 1024,
        1024,
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
    keep_routine: int
    checkpoint_files_delay: float
    recovery_retention_days: float
    keep_session_checkpoints: int
    watchdog_grace: float
    watchdog_remote_grace: float
    watchdog_interval: float
    watchdog_process_names: str
    drift_repeat_limit: int
    drift_window: int
    drift_error_rate_factor: float
    drift_slowdown_factor: float
    drift_stall_minutes: float
    persona_scorer: str
    persona_threshold: float
    team_online_minutes: float
    team_idle_minutes: float
    team_suspended_minutes: float
    team_git_mirror: bool
    store: str
    pg_pool_size: int
    server_host: str
    server_port: int
    server_max_body_bytes: int

    def __init__(self, values: Mapping[str, Any] | None = None, sources: Mapping[str, str] | None = None) -> None:
        self.sources: dict[str, str] = {}
        for name, (_type, default, _min, _doc) in SETTINGS.items():
            setattr(self, name, default)
            self.sources[name] = "default"
        for name, value in (values or {}).items():
            setattr(self, name, _coerce(name, value, (sources or {}).get(name, "argument")))
            self.sources[name] = (sources or {}).get(name, "argument")

    def as_dict(self) -> dict[str, Any]:
        """Every setting and its value."""
        return {name: getattr(self, name) for name in SETTINGS}


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_INF = float("inf")


def _coerce(name: str, value: Any, source: str) -> Any:
    if name not in SETTINGS:
        known = ", ".join(sorted(SETTINGS))
        raise ConfigError(f"unknown setting {name!r} in {source}; known settings: {known}.")
    kind, _default, minimum, _doc = SETTINGS[name]
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
        converted = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name} in {source} must be a {kind.__name__}, got {value!r}.") from None
    if kind is float and not -_INF < converted < _INF:  # TOML and float() read inf and nan; nan passes any bound
        raise ConfigError(
            f"setting {name} in {source} must be a finite number, got {value!r}; for no limit write a large one."
        )
    if minimum is not None and converted < minimum:
        raise ConfigError(f"setting {name} in {source} must be at least {minimum:g}, got {value!r}.")
    return converted


def _flatten_paif(data: dict[str, Any]) -> dict[str, Any]:
    """Accept seed 002's ``paif_config`` table (``agent_id`` and a ``session_protocol`` table)."""
    paif = data.pop("paif_config", None)
    if paif is None:
        return data
    if not isinstance(paif, dict):
        raise ConfigError("paif_config must be a table.")
    flat = {k: v for k, v in paif.items() if k != "session_protocol"}
    protocol = paif.get("session_protocol", {})
    if not isinstance(protocol, dict):
        raise ConfigError("paif_config.session_protocol must be a table.")
    flat.update(protocol)
    return {**{str(k).replace("-", "_"): v for k, v in flat.items()}, **data}


def _read_toml(path: str, table: tuple[str, ...] = ()) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"could not read {path}: {exc.strerror}.") from None
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
    return _flatten_paif({str(k).replace("-", "_"): v for k, v in data.items()})


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
