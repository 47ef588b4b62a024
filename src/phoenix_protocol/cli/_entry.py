"""The ``phx`` console script.

Two commands skip the full CLI (click, rich, every command module): ``phx hook ...`` goes straight
to the light hook module (``phx hook EVENT --shared``, what the shared settings run, first stands
aside for this machine's own registration: ``_stands_aside``), and ``phx team resume|probe TEAM
--json`` (what a lead's session start runs, on a time budget) to the resume protocol. Anything
else, or any option these fast paths do not know, loads the full CLI, so behaviour is the same.

Why ``_team_resume_json`` parses its few options by hand, next to click (``bench/import_costs.py
--runs 40``, docs/benchmarks.md; 2026-11-27, a loaded 2-core VM): the resume path imports 86
modules, 48 ms of imports, 66 ms for the whole process; click on top adds 24 ms of imports (32 ms
of process); the full CLI imports 141 modules, 103 ms, before resume's own. Resume's target of
150 ms is already missed. argparse would cost about 1 ms here (resume loads ``re`` anyway), but it
exits on a usage error where this path hands over to the full CLI: overriding that takes about as
many lines as the loop it would replace. The hook's own options (``_hooks._parse_args``) are
parsed by hand for the same reason, more strongly: argparse costs the hook's import path 10 ms
(``re``, ``gettext``; 21 modules), click 38 ms, and the heartbeat's whole budget over a bare
interpreter is about 8 ms.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``phx``; returns the exit code (the console-script wrapper exits with it)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"] and not {"--help", "-h"} & set(args[1:2]):  # help is the full CLI's
        from phoenix_protocol.integrations._hooks import main as hook_main

        if "--shared" in args[1:]:
            if _stands_aside(args[1:]):
                return 0
            args = [arg for arg in args if arg != "--shared"]
        hook_main(args[1:])  # raises SystemExit(0)
        return 0  # pragma: no cover
    if args[:2] in (["team", "resume"], ["team", "probe"]) and "--json" in args:
        code = _team_resume_json(args[1], args[2:])
        if code is not None:
            return code
    from phoenix_protocol.cli._main import cli

    return cli(args)


def _stands_aside(args: list[str]) -> bool:
    """``phx hook EVENT [--client CLI] --shared``, the command of the shared settings and of the
    Claude Code plugin (``_portable``): whether this machine registers Phoenix's own command for
    the event elsewhere (the fast command in local or user scope; for the plugin's hook, any
    settings file's), which then does the work alone (the CLIs run the hooks of every source). Then stdin is
    read to its end (Claude Code never sees the pipe break) and nothing else happens. Never
    raises: in doubt, the hook runs."""
    try:
        from phoenix_protocol.integrations._clients import client_named
        from phoenix_protocol.integrations._portable import machine_registration

        client = client_named(args[args.index("--client") + 1] if "--client" in args[:-1] else None)
        event = args[0] if args and not args[0].startswith("-") else ""
        native = client.native_event(event) or (event if client.event_of(event) else None)
        if native is None or machine_registration(native, client=client) is None:
            return False
    except Exception:  # noqa: BLE001 - a hook never breaks the agent: in doubt, it runs
        return False
    try:
        stream = sys.stdin.buffer if sys.stdin is not None else None
        while stream is not None and stream.read(1 << 20):
            pass
    except (OSError, ValueError):
        pass
    return True


def _team_resume_json(command: str, args: list[str]) -> int | None:
    """``phx team resume|probe TEAM --json [--session ID] [--home PATH]`` without click or rich;
    ``None`` when the arguments need the full CLI (help, unknown options, usage errors)."""
    import os

    options: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--json":
            i += 1
        elif arg in ("--session", "--home") and i + 1 < len(args) and not (command == "probe" and arg == "--session"):
            options[arg[2:]] = args[i + 1]
            i += 2
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
            i += 1
    if len(positional) != 1:
        return None
    import uuid

    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._jsonio import dumps_output
    from phoenix_protocol.services._team_resume import resume

    try:
        home = Home(os.path.abspath(options["home"])) if "home" in options else Home.resolve()
        if command == "probe":
            result = resume(
                home, positional[0], session_id=os.environ.get("PHOENIX_SESSION_ID") or "probe", attach=False
            )
        else:
            session = options.get("session") or os.environ.get("PHOENIX_SESSION_ID") or f"lead-{uuid.uuid4().hex[:12]}"
            result = resume(home, positional[0], session_id=session)
    except (PhoenixError, OSError) as exc:
        # Reported here, in the full CLI's JSON error format (running the CLI again could
        # repeat side effects such as the lead's attachment).
        code = _exit_code(exc)
        message = " ".join(str(exc).split()) or type(exc).__name__
        error = {"type": type(exc).__name__, "message": message, "exit_code": code}
        write_stdout(dumps_output({"ok": False, "error": error}) + "\n")
        return code
    # The text the full CLI writes (Output.write_document): é as itself, a lone surrogate as U+FFFD.
    write_stdout(dumps_output({"ok": result.exit_code == 0, **result.as_dict()}) + "\n")
    return result.exit_code


def write_stdout(text: str) -> bool:
    """``text`` on stdout, flushed; ``False`` when its reader went away (stdout then points at
    /dev/null: the exit code stays as it is). The CLI's ``_cli.write_stdout`` is this one."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()
        return False
    return True


def stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null (its reader went away): what is still written, and
    the interpreter's last flush, then fail nothing."""
    import contextlib
    import os

    with contextlib.suppress(OSError):  # no descriptor (a test's captured stdout): nothing to point
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _exit_code(exc: BaseException) -> int:
    """The CLI's exit codes (see ``_cli.EXIT_CODES``) without importing the CLI."""
    from phoenix_protocol.core._errors import CorruptStateError, RefusedError, SchemaVersionError, UsageError

    if isinstance(exc, UsageError):
        return 2
    if isinstance(exc, (CorruptStateError, SchemaVersionError)):
        return 3
    if isinstance(exc, RefusedError):
        return 4
    return 1
