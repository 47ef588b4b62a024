"""``state-update``: a drop-in for seed 000's bash script (its "Step 1").

    state-update --working "task" | --done "summary" | --error "message" | --idle

As the seed's script: each flag sets ``status`` (``working``, ``idle``, ``error``, ``idle``),
``current_task`` (the text after the flag, empty when there is none; ``--idle`` empties it) and
``last_active`` (``date -Iseconds``: local time with its offset); it prints nothing; on anything
else it prints ``Usage: state-update --working|--done|--error|--idle [message]`` on stdout and
exits 0. Only the first argument is the flag, and only the one after it its text; what follows is
ignored, except Phoenix's options below.

Which file (see docs/state.md, "state-update: seed 000's script"), in order:

1. ``--home`` or ``--agent`` given, or ``$PHOENIX_HOME`` set: the agent's state in that Phoenix home.
2. ``$PHOENIX_STATE_DIR`` set: the seed's ``STATE_FILE`` when it names a file (one that exists and
   is not a directory, or a path ending in ``.json``); otherwise it names a Phoenix home (the
   alias ``phx`` reads), and the agent's state there.
3. ``$PHOENIX_SESSION_ID`` or ``$PHOENIX_AGENT`` set (a session whose hooks Phoenix runs, an agent
   named for Phoenix): the agent's state in the home.
4. ``./state.json`` exists: that file, as the seed (an agent's own ``state.json``, run from its
   folder in a Phoenix home, is that agent's state).
5. A Phoenix home exists for this directory (``.phoenix/`` at the git root): the agent's state there.
6. Otherwise ``./state.json``, created, as the seed.

The seed's file is written as the script writes it (keys updated in place, others kept, ``jq``'s
two-space layout; a new file as one compact line; mode 0600), atomically and durably, its text
redacted; nothing else is written beside it (no lock file, no ops log: the script has none). The
agent's state in a Phoenix home gets the same fields through the library, with Phoenix's
guarantees (its lock, atomic durable writes, the ops event, precedence); ``--done`` also records
the summary as ``last_output``, ``--error`` the message as ``error_message``.

Where it differs from the script, on purpose: a file that is not a JSON object is refused
(exit 3, left as it is; the script emptied it), an empty one is written anew (the script left it
empty), text that holds ``"`` or ``\\`` is escaped (the script wrote invalid JSON), a secret in
the text is redacted.

Phoenix's options, before the flag or after its text: ``--agent ID``, ``--home PATH``, ``--json``
(print the result as one JSON document), ``--force`` (override a higher-precedence status).
Exit codes are those of ``phx`` (0 ok, 1 failure, 3 a corrupt or newer state, 4 refused).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

USAGE = "Usage: state-update --working|--done|--error|--idle [message]"
"""The seed's usage line, word for word."""

_FLAGS = {"--working": "working", "--done": "idle", "--error": "error", "--idle": "idle"}
_EVENTS = {"--working": "task_started", "--done": "task_done", "--error": "task_error", "--idle": "state_idle"}


def main(argv: list[str] | None = None) -> int:
    """Run ``state-update``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    options: dict[str, str] = {}
    flags: set[str] = set()
    flag: str | None = None
    text = ""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--agent", "--home") and i + 1 < len(args):
            options[arg[2:]] = args[i + 1]
            i += 2
        elif arg.startswith(("--agent=", "--home=")):
            key, _, value = arg[2:].partition("=")
            options[key] = value
            i += 1
        elif arg in ("--json", "--force"):
            flags.add(arg)
            i += 1
        elif flag is None:
            if arg not in _FLAGS:  # the seed's `*)`: the usage line, exit 0
                break
            flag = arg
            if arg != "--idle" and i + 1 < len(args):
                text = args[i + 1]  # whatever it is, as the script's "$2"
                i += 1
            i += 1
        else:
            i += 1  # the script ignores "$3" and the rest
    if flag is None:
        _write(sys.stdout, USAGE + "\n")
        return 0
    from phoenix_protocol.core._errors import PhoenixError

    as_json = "--json" in flags
    try:
        target = _target(options, os.environ, os.getcwd())
        if isinstance(target, str):
            document = _update_file(target, _FLAGS[flag], "" if flag == "--idle" else text)
        else:
            document = _update_agent(target, flag, text, force="--force" in flags)
    except (PhoenixError, OSError) as exc:  # one line (or one JSON document) and phx's exit code
        return _report(exc, as_json)
    if as_json:
        from phoenix_protocol.core._jsonio import dumps_output

        _write(sys.stdout, dumps_output({"ok": True, **document}) + "\n")
    return 0


def _target(options: Mapping[str, str], env: Mapping[str, str], cwd: str) -> str | tuple[str | None, str | None]:
    """The seed's state file (a path), or ``(home, agent)`` for an agent's state in a Phoenix home
    (``None``: as ``phx`` resolves it); the rules in the module docstring."""
    from phoenix_protocol.core._home import resolve_home

    if "home" in options or "agent" in options or env.get("PHOENIX_HOME"):
        return options.get("home"), options.get("agent")
    state_dir = env.get("PHOENIX_STATE_DIR")
    if state_dir:
        path = os.path.join(cwd, state_dir)
        if (os.path.lexists(path) and not os.path.isdir(path)) or (
            not os.path.lexists(path) and state_dir.endswith(".json")
        ):
            return path
        return None, None
    if env.get("PHOENIX_SESSION_ID") or env.get("PHOENIX_AGENT"):
        return None, None
    local = os.path.join(cwd, "state.json")
    if os.path.isfile(local):
        return _agent_of(cwd, env) or local
    if os.path.isdir(resolve_home(cwd, env)):
        return None, None
    return local


def _agent_of(folder: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(home, agent)`` when ``folder`` is an agent's folder in a Phoenix home
    (``<home>/agents/<id>``), else ``None``."""
    from phoenix_protocol.core._home import resolve_home
    from phoenix_protocol.core._ids import is_valid_id

    folder = os.path.abspath(folder)
    agents = os.path.dirname(folder)
    home = os.path.dirname(agents)
    if os.path.basename(agents) != "agents" or not is_valid_id(os.path.basename(folder)):
        return None
    if home != resolve_home(folder, env) and not os.path.exists(os.path.join(home, "phoenix.db")):
        return None
    return home, os.path.basename(folder)


def _update_agent(target: tuple[str | None, str | None], flag: str, text: str, *, force: bool) -> dict[str, Any]:
    """The agent's state in a Phoenix home, through the library (as ``phx state``), with the
    seed's fields: the text is the task whatever the status."""
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.services._agent import Agent

    home, agent_id = target
    session_id = os.environ.get("PHOENIX_SESSION_ID") or None
    # A session beside another one writes its own lane (docs/lanes.md).
    agent = Agent.open(agent_id, home=Home(os.path.abspath(home)) if home else None).follow_session(session_id)
    status = _FLAGS[flag]
    state = agent.state.set_status(
        status,
        None if flag == "--idle" else text,
        source="model",
        session_id=session_id,
        force=force,
        event=_EVENTS[flag],
        task=None if flag == "--idle" else text,
    )
    return {"agent": agent.id, "home": agent.home.root, "path": agent.state.path, "state": state.to_dict()}


def _update_file(path: str, status: str, task: str) -> dict[str, Any]:
    """Seed 000's ``update_state`` on its ``STATE_FILE``: the three fields set, every other key
    kept where it was; written atomically and durably (0600, as the script's ``mktemp``)."""
    import datetime

    from phoenix_protocol.core._clock import system_clock
    from phoenix_protocol.core._durable import atomic_write, read_bytes
    from phoenix_protocol.core._errors import CorruptStateError
    from phoenix_protocol.core._jsonio import JSONError, loads
    from phoenix_protocol.core._redact import redact

    before = read_bytes(path) if os.path.isfile(path) else None
    now = datetime.datetime.fromtimestamp(system_clock.now_ms() / 1000).astimezone()
    fields = {"status": status, "current_task": redact(task), "last_active": now.isoformat(timespec="seconds")}
    if before is None or not before.strip():
        # The script's `echo "{...}"`: one compact line.
        data = _dumps(fields, compact=True)
        state = fields
    else:
        try:
            state = loads(before)
        except (JSONError, UnicodeDecodeError) as exc:
            raise CorruptStateError(f"{path} is not valid JSON ({exc}); it was left as it is.", path=path) from None
        if not isinstance(state, dict):
            raise CorruptStateError(f"{path} does not hold a JSON object; it was left as it is.", path=path)
        state.update(fields)  # the script's jq: '.status=$s | .current_task=$t | .last_active=$ts'
        data = _dumps(state, compact=False)
    atomic_write(path, data)
    return {"path": os.path.abspath(path), "state": state}


def _dumps(value: dict[str, Any], *, compact: bool) -> bytes:
    """As the script writes it: ``jq``'s output (two-space indent, text as itself but DEL as
    ``\\u007f``), or its ``echo`` of one compact line."""
    import json

    text = (
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if compact
        else json.dumps(value, indent=2, ensure_ascii=False)
    )
    return (text.replace("\x7f", "\\u007f") + "\n").encode("utf-8", errors="surrogatepass")


def _report(exc: BaseException, as_json: bool) -> int:
    """One line on stderr (``phx``'s format), or under ``--json`` its error document on stdout;
    the exit code ``phx`` gives the error."""
    from phoenix_protocol.cli._entry import _exit_code

    code = _exit_code(exc)
    message = " ".join(str(exc).split()) or type(exc).__name__
    if as_json:
        from phoenix_protocol.core._jsonio import dumps_output

        error = {"type": type(exc).__name__, "message": message, "exit_code": code}
        _write(sys.stdout, dumps_output({"ok": False, "error": error}) + "\n")
    else:
        _write(sys.stderr, f"state-update: error: {message}\n")
    return code


def _write(stream: Any, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except (BrokenPipeError, ValueError):
        pass
