"""Notifications to the person (issue 36): an agent stalled, hung, stopped, or drifting.

The model hears about drift from the hook; the person hears from here, on up to three channels,
each configured in ``phoenix.toml`` (docs/notifications.md):

- **desktop**: ``notify-send`` where it is installed (``notify_desktop``, default on);
- **webhook**: one JSON ``POST`` to ``notify_webhook`` (empty: none), shaped for
  ``notify_webhook_format``: ``json`` (Phoenix's fields), ``slack`` (an incoming webhook's
  ``{"text"}``) or ``ntfy`` (ntfy's JSON publishing: the topic is the URL's last path segment,
  posted to the server's root);
- **terminal**: the OSC 9 or OSC 777 notification escape (``notify_terminal``), which the drift
  hook hands Claude Code as ``terminalSequence`` for it to write to its terminal (a hook has no
  terminal of its own); ``terminal_sequence`` builds it.

``claim`` rate-limits: at most one notification per agent and kind within
``notify_interval_minutes``, remembered in ``agents/<id>/notified.json`` under a lock (so that the
hook and the watchdog, in different processes, do not both send). ``notify`` claims and then
delivers in the background: the watchdog hands delivery to ``core._background``'s worker thread,
the hook to a detached child (``integrations._hooks._detached``); ``deliver`` itself blocks (each
channel with a timeout of ``TIMEOUT`` seconds) and never raises: each channel's outcome is logged
as one ``notification_sent`` ops event. The webhook's URL (often a secret) is never logged.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._errors import ConfigError, PhoenixError
from phoenix_protocol.core._text import one_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from phoenix_protocol.core._config import Config
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "KINDS",
    "Notification",
    "claim",
    "deliver",
    "desktop_available",
    "notify",
    "notify_or_record",
    "terminal_sequence",
    "webhook_request",
]

KINDS = ("stalled", "hung", "stopped", "drift")
"""What is notified: the watchdog's verdicts (stalled: the process is gone; hung, stopped) and drift."""

FORMATS = ("json", "slack", "ntfy")
TERMINAL_STYLES = ("osc9", "osc777", "off")
TIMEOUT = 5.0
"""Seconds each channel may take (the webhook's connection and response, notify-send)."""
NOTIFIED_FILE = "notified.json"
_TITLES = {
    "stalled": "agent stalled",
    "hung": "agent hung",
    "stopped": "agent stopped",
    "drift": "agent drifting",
}


class Notification:
    """One notification: which agent, what kind, a title and a message for people."""

    __slots__ = ("agent", "at", "home", "kind", "message", "title")

    def __init__(self, agent: str, kind: str, message: str, *, at: str, home: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown notification kind {kind!r}")
        self.agent = agent
        self.kind = kind
        self.message = one_line(message, 500)
        self.title = f"Phoenix: {agent}: {_TITLES[kind]}"
        self.at = at
        self.home = home

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": "phoenix-protocol",
            "kind": self.kind,
            "agent": self.agent,
            "title": self.title,
            "message": self.message,
            "at": self.at,
            "home": self.home,
        }


def _check(config: Config) -> None:
    if config.notify_webhook_format not in FORMATS:
        raise ConfigError(
            f"setting notify_webhook_format must be one of {', '.join(FORMATS)}, got {config.notify_webhook_format!r}."
        )
    if config.notify_terminal not in TERMINAL_STYLES:
        raise ConfigError(
            f"setting notify_terminal must be one of {', '.join(TERMINAL_STYLES)}, got {config.notify_terminal!r}."
        )
    url = config.notify_webhook
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError("setting notify_webhook must be an http:// or https:// URL.")


def claim(agent: Agent, kind: str, *, now_ms: int | None = None) -> bool:
    """Whether a ``kind`` notification for ``agent`` may go now (none within
    ``notify_interval_minutes``); if so, the time is recorded, under the lock, before returning."""
    from phoenix_protocol.core._durable import FileLock, atomic_write, read_bytes
    from phoenix_protocol.core._jsonio import dumps_line, loads_object

    now = agent.clock.now_ms() if now_ms is None else now_ms
    interval_ms = int(agent.config.notify_interval_minutes * 60_000)
    agent.ensure()
    path = os.path.join(agent.dir, NOTIFIED_FILE)
    with FileLock(path, timeout=agent.config.lock_timeout):
        try:
            sent = loads_object(read_bytes(path, limit=64 * 1024)) or {}
        except ValueError:
            sent = {}  # damaged: start over (at worst one notification too many)
        last = sent.get(kind)
        if isinstance(last, int) and not isinstance(last, bool) and 0 <= now - last < interval_ms:
            return False
        sent = {k: v for k, v in sent.items() if k in KINDS}
        sent[kind] = now
        atomic_write(path, dumps_line(sent).encode(), durable=False)
    return True


def terminal_sequence(note: Notification, style: str) -> str | None:
    """The terminal notification escape for ``note``: OSC 9 (iTerm2, WezTerm, Windows Terminal,
    ConEmu) or OSC 777 (urxvt, Ghostty, foot, Warp), BEL-terminated; ``None`` for ``off``.
    Control characters and ``;`` (OSC 777's separator) are left out of the text."""
    if style == "off":
        return None

    def plain(text: str) -> str:
        return "".join(c for c in text if c >= " " and c != "\x7f" and not "\x80" <= c <= "\x9f")

    title, body = plain(note.title), plain(note.message)
    if style == "osc777":
        return f"\x1b]777;notify;{title.replace(';', ',')};{body.replace(';', ',')}\x07"
    if style == "osc9":
        return f"\x1b]9;{title}: {body}\x07"
    raise ConfigError(f"setting notify_terminal must be one of {', '.join(TERMINAL_STYLES)}, got {style!r}.")


def webhook_request(note: Notification, url: str, fmt: str) -> tuple[str, bytes]:
    """The URL to POST to and the JSON body for ``fmt``."""
    from phoenix_protocol.core._jsonio import dumps_line

    if fmt == "slack":
        return url, dumps_line({"text": f"*{note.title}*\n{note.message}"}).encode()
    if fmt == "ntfy":
        # ntfy's JSON publishing: POST to the server's root with the topic in the body.
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        prefix, _, topic = parts.path.rstrip("/").rpartition("/")
        if not topic:
            raise ConfigError("setting notify_webhook: an ntfy URL ends with the topic (https://ntfy.sh/TOPIC).")
        root = urlunsplit((parts.scheme, parts.netloc, prefix + "/", "", ""))
        body = {
            "topic": topic,
            "title": note.title,
            "message": note.message,
            "tags": ["warning"],
            "priority": 4,
        }
        return root, dumps_line(body).encode()
    if fmt == "json":
        return url, dumps_line(note.as_dict()).encode()
    raise ConfigError(f"setting notify_webhook_format must be one of {', '.join(FORMATS)}, got {fmt!r}.")


def _post(url: str, body: bytes) -> str:
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ConfigError("a webhook URL is http:// or https://.")
    request = urllib.request.Request(  # noqa: S310 (http/https checked above)
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "phoenix-protocol"},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 (http/https checked)
        return f"HTTP {response.status}"


def desktop_available() -> bool:
    """Whether a desktop notifier (``notify-send``) is on ``PATH``."""
    import shutil

    return shutil.which("notify-send") is not None


def _desktop(note: Notification) -> str | None:
    import shutil
    import subprocess

    program = shutil.which("notify-send")
    if program is None:
        return None
    urgency = "normal" if note.kind == "drift" else "critical"
    subprocess.run(
        [program, "--app-name=Phoenix Protocol", f"--urgency={urgency}", note.title, note.message],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=TIMEOUT,
        check=True,
    )
    return "notify-send"


def deliver(agent: Agent, note: Notification, config: Config | None = None) -> dict[str, str]:
    """Send ``note`` on the desktop and webhook channels now (blocking, ``TIMEOUT`` each); returns
    each channel's outcome (``"ok: …"`` or ``"failed: …"``) and logs them as ``notification_sent``.
    Never raises for a channel's failure."""
    cfg = config or agent.config
    outcomes: dict[str, str] = {}
    if cfg.notify_desktop:
        try:
            used = _desktop(note)
            if used is not None:
                outcomes["desktop"] = "ok: " + used
        except Exception as exc:  # noqa: BLE001 (a channel's failure is reported, never raised)
            outcomes["desktop"] = f"failed: {type(exc).__name__}"
    if cfg.notify_webhook:
        try:
            target, body = webhook_request(note, cfg.notify_webhook, cfg.notify_webhook_format)
            outcomes["webhook"] = "ok: " + _post(target, body)
        except Exception as exc:  # noqa: BLE001
            outcomes["webhook"] = f"failed: {type(exc).__name__}: {one_line(str(exc), 120)}".replace(
                cfg.notify_webhook, "<webhook>"
            )
    if not outcomes:
        return outcomes  # no channel here (no webhook, no notifier): nothing went, nothing to log
    try:
        agent.record("notification_sent", "ok", {"kind": note.kind, "channels": outcomes})
    except Exception:  # noqa: BLE001, S110 (the log is best effort here: the notification went)
        pass
    return outcomes


def notify(
    agent: Agent,
    kind: str,
    message: str,
    *,
    now_ms: int | None = None,
    background: bool = True,
    spawn: Callable[[Callable[[], None]], None] | None = None,
) -> Notification | None:
    """Tell the person that ``agent`` is ``kind`` (``KINDS``): claim the rate limit (``claim``),
    then ``deliver`` on ``core._background``'s worker thread (``background=False``: now, in this
    thread; ``spawn``: through it, as the hook hands delivery to a detached child). ``None`` when
    rate-limited. Bad notification settings raise ``ConfigError``."""
    from phoenix_protocol.core._clock import iso_from_ms

    _check(agent.config)
    now = agent.clock.now_ms() if now_ms is None else now_ms
    if not claim(agent, kind, now_ms=now):
        return None
    note = Notification(agent.id, kind, message, at=iso_from_ms(now), home=agent.home.root)
    if not agent.config.notify_webhook and not (agent.config.notify_desktop and desktop_available()):
        return note  # no channel to send on (the terminal escape is the drift hook's own)
    if spawn is not None:
        spawn(lambda: _deliver_quietly(agent, note))
    elif background:
        from phoenix_protocol.core import _background

        _background.submit(("notify", agent.home.root, agent.id, kind, now), lambda: _deliver_quietly(agent, note))
    else:
        deliver(agent, note)
    return note


def notify_or_record(
    agent: Agent,
    kind: str,
    message: str,
    *,
    spawn: Callable[[Callable[[], None]], None] | None = None,
) -> Notification | None:
    """``notify``, which never stops its caller (a watchdog pass, a hook): a failure to notify
    (bad notification settings, the rate limit's lock) is an ops event ``notification_failed``."""
    try:
        return notify(agent, kind, message, spawn=spawn)
    except PhoenixError as exc:
        agent.record("notification_failed", "warn", {"kind": kind, "error": str(exc)[:300]})
        return None


def _deliver_quietly(agent: Agent, note: Notification) -> None:
    try:
        deliver(agent, note)
    except Exception:  # noqa: BLE001, S110 (off the caller's path: nothing to report to)
        pass
