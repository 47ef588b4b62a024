"""Short text for people: one line, cut to a length with the cut marked."""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(text: object, limit: int) -> str:
    """``text`` (``None`` as empty) on one line, its runs of whitespace made single spaces, cut to
    ``limit`` characters with an ellipsis marking the cut. Not a redactor: redact first where the
    text may hold a secret (``core._redact``)."""
    flat = " ".join(str("" if text is None else text).split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"
