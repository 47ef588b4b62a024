"""``phx install claude-code`` / ``phx uninstall claude-code``: our hooks in Claude Code's settings.

Scopes and files (as Claude Code defines them), and the command each gets:

=========  ====================================================  =================================
project    ``<project>/.claude/settings.json`` (shared: commit)  the portable command
local      ``<project>/.claude/settings.local.json`` (this       this machine's fast command
           machine only)
user       ``~/.claude/settings.json``, or                       this machine's fast command
           ``$CLAUDE_CONFIG_DIR/settings.json`` (every project)
=========  ====================================================  =================================

The **portable command** (``_portable``) names nothing of this machine, so a committed settings
file works for every teammate, CI and checkout::

    command -v phx >/dev/null 2>&1 || exit 0; exec phx hook post-tool-use --shared

``phx`` from ``PATH``, however Phoenix was installed; nothing at all (exit 0, no output) where it is
not installed. It stands aside when this machine registers the fast command for the same event in
local or user scope (Claude Code runs the hooks of every settings file: without that, each event
would run twice).

The **fast command** runs this very installation's interpreter by absolute path, so it works
whatever ``PATH`` Claude Code runs with, and goes straight to the light hook module::

    '/path/to/.venv/bin/python' -S -P -c 'import sys; sys.path.append("/path/to/.venv/lib/python3.11/site-packages"); from phoenix_protocol.integrations._hooks import main; main()' post-tool-use

``-S`` skips setting up the site packages, about 2 ms of every heartbeat; the command names the
directory Phoenix is installed in instead (``install_dir``), and the hook sets the site packages
up when an import needs them (``_hooks._SiteOnFirstMiss``). After the environment moves, run
``phx install`` again (as for a moved interpreter). It belongs to this machine: ``phx doctor``
reports one found in the shared settings (written there by an earlier Phoenix).

Install is idempotent (a second run changes nothing), keeps every other key and hook, and replaces
an older Phoenix entry in place (say, after the venv moved, or the fast command an earlier Phoenix
wrote into the shared file). Uninstall removes exactly the entries whose command is one of ours
and nothing else, dropping matcher groups and event lists it leaves empty, and removes a file it
leaves holding nothing (``{}``). Both keep the file's formatting (its indentation, key order,
separators, final newline, line endings, escaping of non-ASCII text), so an install followed by
an uninstall gives back the very bytes there were; no backup is written (``--dry-run`` shows the
result first). A settings file that is not valid JSON is refused, untouched.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys

from phoenix_protocol.core._durable import atomic_write, ensure_dir, fsync_dir, read_bytes
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import find_work_tree_root
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.core._jsonio import JSONError, loads
from phoenix_protocol.integrations._clients import CLAUDE_CODE, CLIENTS, CODEX, Client, client_named
from phoenix_protocol.integrations._portable import (
    LEGACY_MARKERS,
    MARKER,
    PORTABLE_GUARD,
    SHARED_FLAG,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any

__all__ = [
    "HOOK_SPECS",
    "MARKER",
    "SCOPES",
    "InstallResult",
    "check_installed",
    "hook_command",
    "hook_entries",
    "hook_kind",
    "install_claude_code",
    "install_dir",
    "install_hooks",
    "is_phoenix_hook",
    "portable_command",
    "project_root",
    "read_settings",
    "settings_path",
    "uninstall_claude_code",
    "uninstall_hooks",
]

SCOPES = ("project", "local", "user")
SHARED_SCOPES = ("project",)
"""Scopes whose file is shared with other machines (committed): they get the portable command."""
_DESCRIPTIONS = {
    "project": "project scope: shared with the team through git; commit it",
    "local": "local scope: this machine only; keep it out of git",
    "user": "user scope: every project of this user on this machine",
}

HOOK_SPECS: list[tuple[str, str, int, str | None]] = list(CLAUDE_CODE.hooks)
"""Claude Code's registrations: (its event, Phoenix's event, timeout in seconds, matcher or None);
every CLI's are in ``_clients``."""


def _client_args(client: Client) -> list[str]:
    """The hook command's ``--client`` argument (none for Claude Code, as earlier releases wrote it)."""
    return [] if client is CLAUDE_CODE else ["--client", client.name]


def hook_command(
    event: str, *, python: str | None = None, agent: str | None = None, client: Client = CLAUDE_CODE
) -> str:
    """This machine's fast command for ``event`` (see the module docstring) run by ``client``.
    With ``python``, another interpreter than this one: the command then lets it find Phoenix as
    its own start-up does (without ``-S``)."""
    interpreter = python or sys.executable
    if not interpreter:
        raise UsageError("cannot tell which Python runs Phoenix (sys.executable is empty).")
    code = f"from {MARKER} import main; main()"
    flags = ["-P"]
    if python is None or python == sys.executable:
        where = install_dir()
        literal = f'"{where}"' if where.isprintable() and not {'"', "\\"} & set(where) else repr(where)
        code = f"import sys; sys.path.append({literal}); {code}"
        flags = ["-S", "-P"]
    parts = [shlex.quote(interpreter), *flags, "-c", shlex.quote(code), event, *_client_args(client)]
    if agent is not None:
        parts += ["--agent", shlex.quote(validate_id(agent, "agent id"))]
    return " ".join(parts)


def portable_command(event: str, *, agent: str | None = None, client: Client = CLAUDE_CODE) -> str:
    """The shared settings' command for ``event`` run by ``client``: ``phx`` from ``PATH`` where
    Phoenix is installed, exit 0 and silence where it is not, standing aside for this machine's
    fast command (``_portable``). Names nothing of this machine. ``/bin/sh`` (dash, bash) runs it."""
    parts = [event, *_client_args(client)]
    if agent is not None:
        parts += ["--agent", shlex.quote(validate_id(agent, "agent id"))]
    return PORTABLE_GUARD + " ".join([*parts, SHARED_FLAG])


def install_dir() -> str:
    """The directory this Phoenix is imported from (the one holding ``phoenix_protocol/``): the
    site packages of its environment, or the source tree of an editable install."""
    import phoenix_protocol

    return os.path.dirname(os.path.dirname(os.path.abspath(phoenix_protocol.__file__)))


def settings_path(
    scope: str,
    *,
    project_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    client: Client = CLAUDE_CODE,
) -> str:
    """The file ``client`` reads its hooks of ``scope`` from."""
    if scope not in client.scopes:
        raise UsageError(f"{client.label}: scope must be one of {', '.join(client.scopes)}, not {scope!r}.")
    if scope == "user":
        return client.user_settings(env)
    return os.path.join(project_root(project_dir), *client.scopes[scope].split("/"))


def project_root(project_dir: str | None) -> str:
    """The project whose settings files the project and local scopes name: ``project_dir``, else
    the git work tree root of the current directory (else the current directory)."""
    base = os.path.abspath(project_dir or os.getcwd())
    return (find_work_tree_root(base) if project_dir is None else None) or base


class InstallResult:
    """What an install or uninstall did (or would do, with ``dry_run``): the file, its scope,
    which command it holds (``portable`` or ``machine``), the commands by Claude Code event, and
    whether the file was ``created`` or ``removed``."""

    def __init__(
        self,
        path: str,
        changed: bool,
        settings: dict[str, Any],
        actions: list[str],
        dry_run: bool,
        *,
        scope: str = "project",
        kind: str = "portable",
        commands: dict[str, str] | None = None,
        created: bool = False,
        removed: bool = False,
        notes: list[str] | None = None,
        client: Client = CLAUDE_CODE,
    ) -> None:
        self.client = client
        self.path = path
        self.changed = changed
        self.settings = settings
        self.actions = actions
        self.dry_run = dry_run
        self.scope = scope
        self.kind = kind
        self.commands = commands or {}
        self.created = created
        self.removed = removed
        self.notes = notes or []
        self.trust: dict[str, Any] | None = None
        """Codex: ``config.toml``'s trust entries written (``--trust``) or removed (uninstall):
        ``{"path", "keys", "changed"}``; ``None`` for the other CLIs."""

    @property
    def description(self) -> str:
        """What the file is, in a few words (``project scope: shared ...``)."""
        return _DESCRIPTIONS[self.scope]

    @property
    def template(self) -> str:
        """The command of every event, the event's name as ``<event>``."""
        for claude_event, event, _, _ in self.client.hooks:
            command = self.commands.get(claude_event)
            if command is not None:
                before, found, after = command.partition(f" {event}")
                return f"{before} <event>{after}" if found else command
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "client": self.client.name,
            "path": self.path,
            "scope": self.scope,
            "kind": self.kind,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "created": self.created,
            "removed": self.removed,
            "actions": self.actions,
            "commands": self.commands,
            "notes": self.notes,
            **({"trust": self.trust} if self.client is CODEX else {}),  # Codex's trust step
            "settings": self.settings,
        }


class _Format:
    """How a settings file is laid out, to write it back the same way (``detect``): the
    ``json.dumps`` arguments that reproduce it, its final newline, line endings and byte-order mark."""

    def __init__(
        self,
        indent: int | str | None = 2,
        separators: tuple[str, str] = (",", ": "),
        ensure_ascii: bool = False,
        final_newline: bool = True,
        crlf: bool = False,
        bom: bool = False,
    ) -> None:
        self.indent = indent
        self.separators = separators
        self.ensure_ascii = ensure_ascii
        self.final_newline = final_newline
        self.crlf = crlf
        self.bom = bom

    @classmethod
    def detect(cls, data: bytes) -> _Format:
        text = data.decode("utf-8-sig", errors="replace")
        bom = data.startswith(b"\xef\xbb\xbf")
        crlf = "\r\n" in text
        text = text.replace("\r\n", "\n")
        body = text.strip()
        indent: int | str | None = None
        if "\n" in body:
            indent = 0  # one item a line, none indented, unless a line says otherwise
            for line in body.splitlines()[1:]:
                stripped = line.lstrip(" \t")
                if stripped and stripped != line:
                    unit = line[: len(line) - len(stripped)]
                    indent = len(unit) if set(unit) == {" "} else unit
                    break
        key_sep = ": " if _outside_strings(body, '":') is None or _outside_strings(body, '": ') is not None else ":"
        # With an indent, items end their line; on one line, "a, b" or "a,b".
        one_line_sep = ", " if _outside_strings(body, ", ") is not None else ","
        item_sep = one_line_sep if indent is None else ","
        ensure_ascii = all(b < 0x80 for b in data[3 if bom else 0 :]) and "\\u" in text
        if ensure_ascii:  # escaped non-ASCII: \u00e9, not only escaped control characters
            ensure_ascii = any(int(text[i + 2 : i + 6], 16) >= 0x80 for i in _escapes(text))
        return cls(indent, (item_sep, key_sep), ensure_ascii, text.endswith("\n"), crlf, bom)

    def dump(self, settings: dict[str, Any]) -> bytes:
        import json  # settings files are written rarely: the full codec's options are welcome

        text = json.dumps(settings, indent=self.indent, separators=self.separators, ensure_ascii=self.ensure_ascii)
        if self.final_newline:
            text += "\n"
        if self.crlf:
            text = text.replace("\n", "\r\n")
        return (b"\xef\xbb\xbf" if self.bom else b"") + text.encode("utf-8", errors="surrogatepass")


def _outside_strings(text: str, needle: str) -> int | None:
    """The offset of the first ``needle`` in JSON ``text`` outside its strings, or ``None``. A
    ``needle`` that starts with ``"`` is looked for at the quotes that close a string (``": ``
    after a key)."""
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if text.startswith(needle, i):
                    return i
        elif ch == '"':
            in_string = True
        elif text.startswith(needle, i):
            return i
    return None


def _escapes(text: str) -> list[int]:
    """Offsets of the ``\\uXXXX`` escapes in JSON ``text`` (an escaped backslash is not one)."""
    found = []
    i = 0
    while i < len(text) - 5:
        if text[i] == "\\":
            if text[i + 1] == "u" and all(c in "0123456789abcdefABCDEF" for c in text[i + 2 : i + 6]):
                found.append(i)
            i += 2
            continue
        i += 1
    return found


def _load(path: str, data: bytes | None) -> dict[str, Any]:
    if data is None or not data.strip():
        return {}
    try:
        settings = loads(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    except JSONError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix it first, Phoenix left it untouched.") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{path} does not hold a JSON object; Phoenix left it untouched.")
    hooks = settings.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise UsageError(f'{path}: "hooks" is not an object; Phoenix left the file untouched.')
    return settings


def _is_portable(command: str) -> bool:
    return command.startswith(PORTABLE_GUARD) and command.endswith(" " + SHARED_FLAG)


def _is_machine(command: str) -> bool:
    return MARKER in command or any(legacy in command for legacy in LEGACY_MARKERS)


def is_phoenix_hook(entry: object) -> bool:
    """Whether a hook entry of a settings file is one of Phoenix's (either command)."""
    return _is_ours(entry)


def hook_kind(entry: object) -> str | None:
    """``portable`` or ``machine`` for one of Phoenix's hook entries (``is_phoenix_hook``), else ``None``."""
    command = str(entry.get("command", "")) if isinstance(entry, dict) else ""
    if _is_portable(command):
        return "portable"
    return "machine" if _is_machine(command) else None


def read_settings(path: str) -> dict[str, Any]:
    """A CLI's settings file as ``phx install`` reads it: ``{}`` when there is none; ``UsageError``
    when it is not a JSON object (or its ``hooks`` is not one)."""
    return _load(path, read_bytes(path))


def hook_entries(settings: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every hook entry of a settings file, with its event (the CLI's name), in file order; a
    part that is not the shape the CLI reads (an event's groups not a list, ...) holds none."""
    hooks = settings.get("hooks")
    for event, groups in hooks.items() if isinstance(hooks, dict) else []:
        for group in groups if isinstance(groups, list) else []:
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                yield event, entry


def _is_ours(entry: object) -> bool:
    command = str(entry.get("command", "")) if isinstance(entry, dict) else ""
    return _is_machine(command) or _is_portable(command)


def _save(path: str, before: bytes | None, settings: dict[str, Any]) -> None:
    """Write ``settings`` to ``path`` laid out as ``before`` was (a new file: two-space indent),
    keeping its permissions (a new file: 0644, as Claude Code's own)."""
    ensure_dir(os.path.dirname(path))
    mode = 0o644
    layout = _Format()
    if before is not None:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if before.strip():
            layout = _Format.detect(before)
    atomic_write(path, layout.dump(settings))
    os.chmod(path, mode)


def _remove(path: str, *, folder: bool = True) -> None:
    """Remove a settings file left holding nothing, and (``folder``) the folder holding it
    (``.claude``, ``.gemini``, ``.codex``) if that is left empty."""
    parent = os.path.dirname(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot remove {path}, which holds nothing any more: {exc}") from None
    if folder:
        try:
            os.rmdir(parent)
        except OSError:  # not empty (the CLI's other files, the user's): it stays
            pass
        else:
            fsync_dir(os.path.dirname(parent))
            return
    fsync_dir(parent)


def _git_ignored(path: str) -> bool | None:
    """Whether git ignores ``path`` (``None``: not in a work tree, or git is not there)."""
    import subprocess

    folder = os.path.dirname(path)
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        done = subprocess.run(
            ["git", "check-ignore", "-q", "--", path],
            cwd=folder,
            capture_output=True,
            timeout=5,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(done.returncode)


def install_claude_code(
    scope: str = "project",
    *,
    project_dir: str | None = None,
    agent: str | None = None,
    python: str | None = None,
    portable: bool | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> InstallResult:
    """``install_hooks`` for Claude Code."""
    return install_hooks(
        CLAUDE_CODE,
        scope,
        project_dir=project_dir,
        agent=agent,
        python=python,
        portable=portable,
        dry_run=dry_run,
        env=env,
    )


def _entry(client: Client, event: str, command: str, timeout: int) -> dict[str, Any]:
    """One hook entry as ``client``'s settings hold it."""
    entry: dict[str, Any] = {"type": "command", "command": command}
    if client.entry_name:
        entry = {"name": f"phoenix-{event}", **entry}
    entry["timeout"] = timeout * 1000 if client.timeout_ms else timeout
    entry.update(client.entry_fields.get(event, {}))
    return entry


def install_hooks(
    client: Client | str,
    scope: str = "project",
    *,
    project_dir: str | None = None,
    agent: str | None = None,
    python: str | None = None,
    portable: bool | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    trust: bool = False,
) -> InstallResult:
    """Merge Phoenix's hooks into ``client``'s settings file of ``scope``: the portable command in
    the shared (project) settings, this machine's fast command in local and user settings
    (``portable`` chooses otherwise; ``python``: the fast command of another interpreter).
    Codex runs only hooks the user trusts: ``trust`` writes their ``trusted_hash`` into Codex's
    ``config.toml``; without it the notes say how to trust them (``_codex_trust``)."""
    client = _as_client(client)
    path = settings_path(scope, project_dir=project_dir, env=env, client=client)
    use_portable = scope in client.shared_scopes if portable is None else portable
    if use_portable and python is not None:
        raise UsageError("the portable command runs `phx` from PATH: it names no interpreter (drop python=).")
    before = read_bytes(path)
    settings = _load(path, before)
    had_hooks = "hooks" in settings
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    actions: list[str] = []
    commands: dict[str, str] = {}
    for claude_event, event, timeout, matcher in client.hooks:
        command = (
            portable_command(event, agent=agent, client=client)
            if use_portable
            else hook_command(event, python=python, agent=agent, client=client)
        )
        commands[claude_event] = command
        wanted = _entry(client, event, command, timeout)
        groups = hooks.get(claude_event)
        if groups is None:
            groups = hooks[claude_event] = []
        if not isinstance(groups, list):
            raise UsageError(f"{path}: hooks.{claude_event} is not a list; Phoenix left the file untouched.")
        found = False
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            for i, entry in enumerate(group["hooks"]):
                if _is_ours(entry):
                    if found:
                        continue
                    found = True
                    if entry != wanted:
                        group["hooks"][i] = wanted
                        actions.append(f"updated {claude_event}")
        if not found:
            group_new: dict[str, Any] = {"hooks": [wanted]}
            if matcher is not None:
                group_new = {"matcher": matcher, "hooks": [wanted]}
            groups.append(group_new)
            actions.append(f"added {claude_event}")
    if not actions and not had_hooks:  # pragma: no cover - every install adds to a file without hooks
        del settings["hooks"]
    changed = bool(actions)
    if changed and not dry_run:
        _save(path, before, settings)
    notes = []
    if scope == "local" and _git_ignored(path) is False:
        notes.append(
            f"git does not ignore {path}: it names this machine's paths, keep it out of commits "
            f"(add `{client.scopes['local']}` to .gitignore)"
        )
    elif trust and client is not CODEX:
        raise UsageError(f"--trust is for Codex, whose hooks run only once trusted; {client.label} has no such step.")
    result = InstallResult(
        path,
        changed,
        settings,
        actions,
        dry_run,
        scope=scope,
        kind="portable" if use_portable else "machine",
        commands=commands,
        created=changed and before is None,
        notes=notes,
        client=client,
    )
    if client is CODEX:
        _codex_trust_step(result, project_dir, env, trust=trust)
    return result


def _codex_trust_step(
    result: InstallResult, project_dir: str | None, env: Mapping[str, str] | None, *, trust: bool
) -> None:
    """After a Codex install: trust Phoenix's hooks (``trust``), or say how, unless Codex trusts
    them already; and for the project's file, whether Codex trusts the project."""
    from phoenix_protocol.integrations._codex_trust import (
        hook_trust,
        project_trusted,
        status_of,
        trust_hooks,
        trust_steps,
        trusted_hashes,
    )

    hooks = hook_trust(result.path, result.settings, _is_ours)
    project_root = os.path.dirname(os.path.dirname(result.path)) if result.scope == "project" else None
    if trust:
        done = trust_hooks(hooks, env=env, dry_run=result.dry_run)
        result.trust = {"path": done.path, "keys": done.keys, "changed": done.changed}
    elif any(status_of(hook, trusted_hashes(env)) != "trusted" for hook in hooks):
        command = f"phx install codex --scope {result.scope} --trust"
        steps = trust_steps(result.scope, result.path, project_root=project_root, command=command)
        result.notes += steps[1:-1] if project_root is None else steps[:-1]
        return
    if project_root is not None and project_trusted(project_root, env) is not True:
        result.notes.append(trust_steps("project", result.path, project_root=project_root)[0])


def _as_client(client: Client | str) -> Client:
    if isinstance(client, str):
        try:
            return client_named(client)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return client


def check_installed(
    *, project_dir: str | None = None, env: Mapping[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """Phoenix's hook entries that will not run as written, run twice, or differ from what ``phx
    install`` writes now, in the settings of every agent CLI and scope (the project's when
    ``project_dir`` is given, the user's): ``(scope, settings path, problem)`` each. A problem
    whose fix is not ``phx install <cli> --scope <scope>`` names its own. A fast command in the
    shared settings is one (it fails on every other machine); a fast command whose interpreter is
    another one than this is only checked for being there (it may be another environment's on
    purpose); the portable command for ``phx`` being on ``PATH``, unless this machine registers
    the fast one it stands aside for, as is Phoenix's Claude Code plugin where a settings file
    enables it (``_plugin``; its hooks stand aside for these, never run twice with them). A
    settings file that does not read is named."""
    problems: list[tuple[str, str, str]] = []
    for client in CLIENTS.values():
        problems += _check_client(client, project_dir, env)
    return problems


def _check_client(client: Client, project_dir: str | None, env: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """``check_installed`` for one agent CLI."""
    import shutil

    from phoenix_protocol.integrations._plugin import enabled_plugin

    problems: list[tuple[str, str, str]] = []
    events = {event for _, event, _, _ in client.hooks}
    machine: dict[str, dict[str, str]] = {}  # scope -> the CLI's event -> fast command
    portable_in: list[tuple[str, str]] = []
    by_scope: dict[str, dict[str, Any]] = {}
    for scope in client.scopes:
        if scope != "user" and project_dir is None:
            continue
        path = settings_path(scope, project_dir=project_dir, env=env, client=client)
        try:
            settings = _load(path, read_bytes(path))  # a missing file: no hooks
        except UsageError as exc:
            problems.append((scope, path, str(exc)))
            continue
        by_scope[scope] = settings
        seen: set[str] = set()
        for claude_event, entry in hook_entries(settings):
            if not _is_ours(entry):
                continue
            command = str(entry.get("command", ""))
            if _is_portable(command):
                if (scope, path) not in portable_in:
                    portable_in.append((scope, path))
                problem = _portable_problem(command, events, client)
            elif scope in client.shared_scopes:
                problem = _shared_machine_problem(command, client)
            else:
                machine.setdefault(scope, {})[claude_event] = command
                problem = _command_problem(command, events, client)
            if problem is not None and problem not in seen:
                seen.add(problem)
                problems.append((scope, path, problem))
    local, user = machine.get("local", {}), machine.get("user", {})
    twice = sorted(e for e in local.keys() & user.keys() if local[e] != user[e])
    if twice:  # the same command in both runs once (Claude Code runs identical commands once)
        path = settings_path("local", project_dir=project_dir, env=env, client=client)
        problems.append(
            (
                "local",
                path,
                f"Phoenix's hooks are registered in both {path} and "
                f"{settings_path('user', env=env, client=client)} with different commands: {client.label} runs "
                f"both, so {', '.join(twice)} run twice; `phx uninstall {client.name} --scope local` (or `--scope "
                "user`) removes one",
            )
        )
    environ = os.environ if env is None else env
    runners = [(scope, path, "the shared hooks run") for scope, path in portable_in]
    plugin = enabled_plugin(by_scope) if client is CLAUDE_CODE else None
    if plugin is not None:  # its hooks run the shared command too (``_plugin``)
        path = settings_path(plugin[0], project_dir=project_dir, env=env)
        runners.append((plugin[0], path, f"the Claude Code plugin {plugin[1]} (enabled here) runs"))
    if runners and shutil.which("phx", path=environ.get("PATH")) is None:
        fast = next(s for s in client.scopes if s not in client.shared_scopes)
        for scope, path, which in runners:
            if not all(e in local or e in user for e, _, _, _ in client.hooks):
                problems.append(
                    (
                        scope,
                        path,
                        f"{which} `phx` from PATH and this machine's PATH has none: here they "
                        "do nothing. Put the bin/ folder Phoenix is installed in on PATH (pipx and "
                        f"`uv tool` use ~/.local/bin), or `phx install {client.name} --scope {fast}` (a command "
                        "for this machine, which the shared one stands aside for)",
                    )
                )
    return problems


def _event_and_options(argv: list[str], events: set[str]) -> tuple[str | None, str | None, str | None]:
    """The event, ``--agent`` and ``--client`` a hook command's arguments name."""
    event = next((arg for arg in argv if arg in events), None)
    agent = argv[argv.index("--agent") + 1] if "--agent" in argv[:-1] else None
    client = argv[argv.index("--client") + 1] if "--client" in argv[:-1] else None
    return event, agent, client


def _portable_problem(command: str, events: set[str], client: Client = CLAUDE_CODE) -> str | None:
    """What is wrong with a portable hook command, if anything: only that it is not the one this
    Phoenix writes (an earlier one's, or edited)."""
    try:
        argv = shlex.split(command[len(PORTABLE_GUARD) :])
    except ValueError:
        argv = []
    event = argv[0] if argv and argv[0] in events else None
    _, agent, _ = _event_and_options(argv, events)
    try:
        wanted = portable_command(event, agent=agent, client=client) if event is not None else None
    except UsageError:
        wanted = None
    if command != wanted:
        return "the hook commands are not the ones this Phoenix writes (an earlier Phoenix's, or edited)"
    return None


def _shared_machine_problem(command: str, client: Client = CLAUDE_CODE) -> str:
    """The problem of a fast command in the shared settings (an earlier Phoenix wrote it there)."""
    try:
        interpreter = shlex.split(command)[0]
    except (ValueError, IndexError):
        interpreter = command[:200]
    return (
        f"the shared settings name this machine's interpreter ({interpreter}): on every other machine "
        "and checkout, and here after the environment moves, each hook fails with `/bin/sh: …: not found` "
        f"(written by an earlier Phoenix). `phx install {client.name} --scope project` writes the portable "
        f"command instead (and `--scope {'local' if 'local' in client.scopes else 'user'}` this machine's fast one)"
    )


def _command_problem(command: str, events: set[str], client: Client = CLAUDE_CODE) -> str | None:
    """What is wrong with a fast hook command, if anything (see ``check_installed``)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return f"a Phoenix hook command does not parse as a shell command: {command[:200]}"
    if not argv:
        return "a Phoenix hook command is empty"
    interpreter = argv[0]
    if not (os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)):
        return f"the hooks run {interpreter}, which is not there any more (the environment moved?)"
    where = _imported_from(argv)
    if where is not None and not os.path.isfile(os.path.join(where, "phoenix_protocol", "__init__.py")):
        return f"the hooks import Phoenix from {where}, which does not hold it any more (Phoenix moved?)"
    if interpreter != sys.executable:
        return None
    event, agent, _ = _event_and_options(argv[1:], events)
    try:
        wanted = hook_command(event, agent=agent, client=client) if event is not None else None
    except UsageError:
        wanted = None
    if command != wanted:
        return "the hook commands are not the ones this Phoenix writes (an earlier Phoenix's, or edited)"
    return None


def _imported_from(argv: list[str]) -> str | None:
    """The directory a ``-S`` hook command appends to ``sys.path`` to import Phoenix from (see
    ``hook_command``), or None for a command without one."""
    import ast

    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else None
    try:
        tree = ast.parse(code) if code is not None else None
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree) if tree is not None else []:
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "sys.path.append"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
    return None


def uninstall_claude_code(
    scope: str = "project",
    *,
    project_dir: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> InstallResult:
    """``uninstall_hooks`` for Claude Code."""
    return uninstall_hooks(CLAUDE_CODE, scope, project_dir=project_dir, dry_run=dry_run, env=env)


def uninstall_hooks(
    client: Client | str,
    scope: str = "project",
    *,
    project_dir: str | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
) -> InstallResult:
    """Remove exactly the hook entries ``install_hooks`` adds for ``client`` (either command),
    leaving the rest of the file as it was laid out; a file left holding nothing is removed."""
    client = _as_client(client)
    path = settings_path(scope, project_dir=project_dir, env=env, client=client)
    kind = "portable" if scope in client.shared_scopes else "machine"
    before = read_bytes(path)
    if before is None:
        return InstallResult(path, False, {}, [], dry_run, scope=scope, kind=kind, client=client)
    settings = _load(path, before)
    ours = []
    if client is CODEX:  # their trust entries, as installed (the keys name each one's place)
        from phoenix_protocol.integrations._codex_trust import hook_trust

        ours = hook_trust(path, settings, _is_ours)
    hooks = settings.get("hooks")
    actions: list[str] = []
    commands: dict[str, str] = {}
    if isinstance(hooks, dict):
        for claude_event in list(hooks):
            groups = hooks[claude_event]
            if not isinstance(groups, list):
                continue
            kept_groups = []
            for group in groups:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    remaining = [e for e in group["hooks"] if not _is_ours(e)]
                    if len(remaining) != len(group["hooks"]):
                        actions.append(f"removed {claude_event}")
                        for entry in group["hooks"]:
                            if _is_ours(entry):
                                commands.setdefault(claude_event, str(entry.get("command", "")))
                        if not remaining:
                            continue
                        kept_groups.append({**group, "hooks": remaining})
                        continue
                kept_groups.append(group)
            if kept_groups:
                hooks[claude_event] = kept_groups
            else:
                del hooks[claude_event]
        if not hooks:
            del settings["hooks"]
    changed = bool(actions)
    removed = changed and not settings
    if changed and not dry_run:
        if removed:
            _remove(path)
        else:
            _save(path, before, settings)
    result = InstallResult(
        path,
        changed,
        settings,
        actions,
        dry_run,
        scope=scope,
        kind=kind,
        commands=commands,
        removed=removed,
        client=client,
    )
    if ours:
        from phoenix_protocol.integrations._codex_trust import forget_hooks

        forgot = forget_hooks(ours, env=env, dry_run=dry_run)
        result.trust = {"path": forgot.path, "keys": forgot.keys, "changed": forgot.changed}
    return result
