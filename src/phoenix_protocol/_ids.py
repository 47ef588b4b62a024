"""The one id validator: agent, team, teammate, session and message ids all go through it.

An id becomes a directory or file name, so it must never be able to name anything outside
its parent: the safe alphabet is ASCII letters, digits, ``.``, ``_`` and ``-``; the first
character is a letter or digit (so ``.``, ``..`` and hidden names are impossible); at most
``MAX_ID_LENGTH`` characters. This refuses ``..``, ``a/b``, absolute paths, empty strings,
NUL and every control character.

Hot path: no imports (``re`` alone costs more than the whole heartbeat).
"""

from __future__ import annotations

from phoenix_protocol._errors import InvalidIdError

__all__ = ["MAX_ID_LENGTH", "is_valid_id", "validate_id"]

MAX_ID_LENGTH = 64
"""Longest id accepted: short enough for any file system, long enough for a UUID plus a prefix."""

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
