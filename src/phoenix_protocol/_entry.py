"""The ``phx`` console script. ``phx hook ...`` goes straight to the light hook module; every
other command loads the full CLI (click, rich)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``phx``; returns the exit code (the console-script wrapper exits with it)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"]:
        from phoenix_protocol._hooks import main as hook_main

        hook_main(args[1:])  # raises SystemExit(0)
        return 0  # pragma: no cover
    from phoenix_protocol._cli import cli

    return cli(args)
