"""The labelled secrets corpus (tests/data/secrets/), shared by tests/test_redact.py and
bench/redact_corpus.py.

``secrets.txt``: ``kind<TAB>line<TAB>secret[<TAB>secret...]`` with ``\\n``, ``\\t`` and ``\\\\``
escapes; ``ordinary.txt``: one ordinary line each. Lines starting with ``#: `` are comments.
"""

from __future__ import annotations

import os

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "secrets")
WINDOW = 12
"""A secret counts as leaked if any WINDOW-character piece of it survives."""


def unescape(field: str) -> str:
    """Undo the corpus escapes: ``\\n`` newline, ``\\t`` tab, ``\\\\`` backslash."""
    out: list[str] = []
    i = 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field) and field[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[field[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def load_positives() -> list[tuple[str, str, list[str]]]:
    """``(kind, line, secrets)`` for every labelled secret line."""
    rows = []
    with open(os.path.join(DATA, "secrets.txt"), encoding="utf-8") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if not line or line.startswith("#: "):
                continue
            kind, text, *secrets = line.split("\t")
            rows.append((kind, unescape(text), [unescape(s) for s in secrets]))
    return rows


def load_negatives() -> list[str]:
    """Every ordinary (secret-free) line."""
    with open(os.path.join(DATA, "ordinary.txt"), encoding="utf-8") as fh:
        return [ln.rstrip("\n") for ln in fh if ln.strip() and not ln.startswith("#: ")]


def leaked(secret: str, output: str) -> bool:
    """Whether ``secret`` survives in ``output`` whole or as any WINDOW-character piece."""
    if secret in output:
        return True
    return any(secret[i : i + WINDOW] in output for i in range(len(secret) - WINDOW + 1))
