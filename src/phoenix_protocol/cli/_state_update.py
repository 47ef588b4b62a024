"""``state-update``: a drop-in replacement for seed 000's bash script, with the same flags.

    state-update --working "task" | --done "summary" | --error "message" | --idle

It writes through the same library as ``phx state`` (locking, atomic durable writes, the ops
log, redaction, precedence). Extra options: ``--agent ID``, ``--home PATH``, ``--json``.
Exit codes are those of ``phx`` (0 ok, 2 usage, 3 corrupt state, 4 refused, 1 failure).
"""

from __future__ import annotations

import sys

USAGE = (
    'Usage: state-update --working "task" | --done "summary" | --error "message" | --idle '
    "[--agent ID] [--home PATH] [--json]"
)


def main(argv: list[str] | None = None) -> int:
    """Translate the seed's flags to ``phx state ...`` and run it."""
    args = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    action: list[str] | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--working", "--done", "--error"):
            if i + 1 >= len(args):
                if arg == "--done":
                    action = ["done"]
                    i += 1
                    continue
                sys.stderr.write(f"error: {arg} needs a text argument\n{USAGE}\n")
                return 2
            action = [arg[2:], args[i + 1]]
            i += 2
        elif arg == "--idle":
            action = ["idle"]
            i += 1
        elif arg in ("--agent", "--home") and i + 1 < len(args):
            passthrough += [arg, args[i + 1]]
            i += 2
        elif arg in ("--json", "--force"):
            passthrough.append(arg)
            i += 1
        elif arg in ("-h", "--help"):
            sys.stdout.write(USAGE + "\n")
            return 0
        else:
            sys.stderr.write(f"error: unknown argument {arg!r}\n{USAGE}\n")
            return 2
    if action is None:
        sys.stderr.write(USAGE + "\n")
        return 2
    from phoenix_protocol.cli._main import cli

    return cli(["state", *action, *passthrough])
