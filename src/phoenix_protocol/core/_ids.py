"""The one id validator: agent, team, teammate, session and message ids all go through it.

An id becomes a directory or file name, so it must never be able to name anything outside
its parent: the safe alphabet is ASCII letters, digits, ``.``, ``_`` and ``-``; the first
character is a letter or digit (so ``.``, ``..`` and hidden names are impossible); at most
``MAX_ID_LENGTH`` characters. This refuses ``..``, ``a/b``, absolute paths, empty strings,
NUL and every control character.

Hot path: no imports (``re`` alone costs more than the whole heartbeat).
"""

from __future__ import annotations

from phoenix_protocol.core._errors import InvalidIdError

__all__ = [
    "MAX_ID_LENGTH",
    "SESSION_ID_LENGTH",
    "hashed_session_id",
    "is_valid_id",
    "lane_id_of",
    "secret_in_id",
    "session_id_of",
    "short_digest",
    "validate_id",
    "validate_session_id",
]

MAX_ID_LENGTH = 64
"""Longest id accepted: short enough for any file system, long enough for a UUID plus a prefix."""

SESSION_ID_LENGTH = 128
"""Longest session id accepted (they come from agents' payloads, not from Phoenix)."""

_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_REST = _FIRST | frozenset("._-")


def is_valid_id(value: object, *, max_length: int = MAX_ID_LENGTH) -> bool:
    """Whether ``value`` is a string ``validate_id`` would accept."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= max_length
        and value[0] in _FIRST
        and all(ch in _REST for ch in value)
    )


def validate_id(value: object, kind: str = "id", *, max_length: int = MAX_ID_LENGTH) -> str:
    """Return ``value`` unchanged if it is a safe id, else raise ``InvalidIdError`` saying why.

    ``kind`` names the id in the message ("agent id", "team id", ...).
    """
    if is_valid_id(value, max_length=max_length):
        return value  # type: ignore[return-value]  # is_valid_id checked isinstance(value, str)
    if not isinstance(value, str):
        reason = f"must be a string, not {type(value).__name__}"
    elif value == "":
        reason = "must not be empty"
    elif len(value) > max_length:
        reason = f"is {len(value)} characters long; the limit is {max_length}"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        reason = "contains a control character"
    elif "/" in value or "\\" in value:
        reason = "contains a path separator"
    elif value[0] not in _FIRST:
        reason = "must start with an ASCII letter (A-Z, a-z) or a digit"
    else:
        bad = sorted({ch for ch in value if ch not in _REST})
        reason = "contains " + ", ".join(repr(ch) for ch in bad)
    shown = f" {value!r}" if isinstance(value, str) and len(value) <= 80 else ""
    raise InvalidIdError(
        f"invalid {kind}{shown}: it {reason}. Use 1-{max_length} characters from "
        "A-Z a-z 0-9 . _ - starting with a letter or digit."
    )


_HEX = frozenset("0123456789abcdefABCDEF")


def _plainly_no_secret(value: str) -> bool:
    """A UUID (what Claude Code, Gemini CLI and Codex give) or a prefix and hex digits (what
    Phoenix makes: ``sid-<hex>``, ``lead-<hex>``): no secret, without loading the redactor."""
    if len(value) == 36 and all(value[i] == "-" if i in (8, 13, 18, 23) else value[i] in _HEX for i in range(36)):
        return True
    head, dash, tail = value.partition("-")
    return bool(dash) and head in ("sid", "lead") and bool(tail) and all(ch in _HEX for ch in tail)


def secret_in_id(value: str) -> str | None:
    """The kind of secret ``value`` looks like (``"github-token"``...), ``None`` if none: an id
    is stored and logged in clear, so a credential given as one must never be kept as it is."""
    if _plainly_no_secret(value):
        return None
    from phoenix_protocol.core._redact import find_secrets

    found = find_secrets(value)
    return found[0].kind if found else None


def validate_session_id(value: object) -> str:
    """``validate_id`` for a session id (up to ``SESSION_ID_LENGTH`` characters), which also
    refuses one that looks like a secret; the message never shows that value."""
    sid = validate_id(value, "session id", max_length=SESSION_ID_LENGTH)
    kind = secret_in_id(sid)
    if kind is not None:
        raise InvalidIdError(
            f"invalid session id: it looks like a secret ({kind}), and a session id is stored and logged in "
            "clear. Use an id that is no credential (or none, for a new one)."
        )
    return sid


def session_id_of(value: object) -> str | None:
    """An agent's session id as Phoenix keeps it, never refused (hooks must not fail on it): one
    ``validate_session_id`` accepts stays as it is; any other text (too long, a path, characters
    outside ``[A-Za-z0-9._-]``, or a secret) becomes ``sid-`` and a hash of it, the same every
    time, so that a session's start, heartbeats and end still meet. ``None``: no text at all."""
    if is_valid_id(value, max_length=SESSION_ID_LENGTH) and secret_in_id(value) is None:  # type: ignore[arg-type]
        return value  # type: ignore[return-value]  # is_valid_id checked isinstance(value, str)
    if isinstance(value, str) and value:
        return hashed_session_id(value)
    return None


def lane_id_of(session_id: str) -> str:
    """The lane id of a session (``docs/lanes.md``): its id as its agent CLI gave it when that is
    a UUID (what Claude Code gives) or an id Phoenix made (``sid-<hex>``), else ``sid-`` and a
    hash of it. The same for the raw id a hook reads and the id ``session_id_of`` keeps of it, and
    cheap enough for the hot path (no redactor: one that could be a secret is hashed; a UUID
    costs about a microsecond)."""
    if (
        len(session_id) == 36
        and session_id[8] == session_id[13] == session_id[18] == session_id[23] == "-"
        and session_id.count("-") == 4
        and _HEX.issuperset(session_id.replace("-", ""))
    ):
        return session_id  # a UUID: what Claude Code gives
    if is_valid_id(session_id) and _plainly_no_secret(session_id):
        return session_id
    return hashed_session_id(session_id)


def hashed_session_id(value: str) -> str:
    """``sid-`` and a hash of ``value``: what ``session_id_of`` keeps for a session id it cannot
    keep as it is. Cheap enough for the hot path (``short_digest``), so that a heartbeat can tell
    the state's ``sid-`` from its session's raw id without a secret check."""
    return "sid-" + short_digest(value.encode("utf-8", "surrogatepass"), 24)


def short_digest(data: bytes, length: int = 16) -> str:
    """The first ``length`` hex digits of the sha256 of ``data``: the hot path's hashes (tool
    inputs, session ids, a team's runtime directory). CPython's own module, cheaper to import than
    ``hashlib``, named by version, so that the hot path never imports a module that is missing
    (under the hook's ``-S`` that would set up the site packages)."""
    import sys

    try:
        sha256 = __import__("_sha256" if sys.version_info < (3, 12) else "_sha2").sha256
    except (ImportError, AttributeError):  # pragma: no cover - another Python implementation
        import hashlib

        sha256 = hashlib.sha256
    return str(sha256(data).hexdigest()[:length])
