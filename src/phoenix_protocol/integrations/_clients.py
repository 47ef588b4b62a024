"""The agent CLIs Phoenix serves, in one place: how each names its hook events, where its settings
live, what its payloads look like. Hot path: nothing is imported here.

Phoenix's hook handlers (``_hooks``, ``_hooks_session``) speak one vocabulary, whichever CLI runs
them:

=====================  =================  ==================  ================
Phoenix's event        Claude Code        Gemini CLI          Codex CLI
=====================  =================  ==================  ================
session-start          SessionStart       SessionStart        SessionStart
post-tool-use          PostToolUse        AfterTool           PostToolUse
post-tool-use-failure  PostToolUseFailure (in AfterTool)      (in PostToolUse)
pre-compact            PreCompact         PreCompress         PreCompact
stop                   Stop               AfterAgent          Stop
session-end            SessionEnd         SessionEnd          SessionEnd
user-prompt            UserPromptSubmit   BeforeAgent         UserPromptSubmit
subagent-start         SubagentStart      —                   —
subagent-stop          SubagentStop       —                   —
task-created           TaskCreated        —                   —
task-completed         TaskCompleted      —                   —
teammate-idle          TeammateIdle       —                   —
=====================  =================  ==================  ================

The last five are Claude Code's agent teams' (``_cc_teams``: what they record, the guardrails).

A hook command names Phoenix's event and the CLI (``phx hook post-tool-use --client gemini-cli``;
no ``--client``: Claude Code, as every earlier release wrote it). The CLI's own event name is taken
too (``phx hook AfterTool --client gemini-cli``), and with no event at all, the payload's
``hook_event_name``. ``adapt_payload`` turns each CLI's payload into the shape the handlers read
(Claude Code's), so that they stay the same for all three.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "CLIENTS",
    "DEFAULT_CLIENT",
    "EVENTS",
    "OUTPUT_CONTEXT",
    "OUTPUT_MESSAGE",
    "OUTPUT_SILENT",
    "TEAM_EVENTS",
    "TEAM_TOOLS",
    "Client",
    "adapt_output",
    "adapt_payload",
    "claude_team_name",
    "client_named",
]

EVENTS = (
    "session-start",
    "post-tool-use",
    "post-tool-use-failure",
    "pre-compact",
    "stop",
    "session-end",
    "user-prompt",
    "subagent-start",
    "subagent-stop",
    "task-created",
    "task-completed",
    "teammate-idle",
)
"""Phoenix's hook events, the vocabulary of the handlers."""
TEAM_EVENTS = frozenset({"subagent-start", "subagent-stop", "task-created", "task-completed", "teammate-idle"})
"""The events of Claude Code's agent teams (``_cc_teams``)."""
TEAM_TOOLS = frozenset({"SendMessage", "TaskCreate", "TaskUpdate", "TaskStop", "Agent", "TeamCreate", "TeamDelete"})
"""Claude Code's tools that change its team (their PostToolUse is recorded by ``_cc_teams``)."""

DEFAULT_CLIENT = "claude-code"

OUTPUT_CONTEXT = "context"
"""The event's output may carry ``hookSpecificOutput`` (``hookEventName``: the event that fired,
which Claude Code checks: "Hook returned incorrect event name"; ``additionalContext``: text for
the model's next request) and ``systemMessage`` (a line for the user)."""
OUTPUT_MESSAGE = "message"
"""The event's output may carry ``systemMessage`` only: the CLI reads no ``hookSpecificOutput``
for it (Claude Code's PreCompact) or refuses one."""
OUTPUT_SILENT = "silent"
"""The hook prints nothing for the event: output there changes what the CLI does (Stop: output
keeps the turn going) or nobody reads it (SessionEnd)."""
_SIBLING = {"post-tool-use": "post-tool-use-failure", "post-tool-use-failure": "post-tool-use"}
"""Phoenix's events that one registration may serve (older installs ran ``post-tool-use`` for
Claude Code's PostToolUseFailure too)."""


class Client:
    """One agent CLI as Phoenix serves it.

    ``hooks``: what ``phx install`` registers, ``(native event, Phoenix's event, timeout in
    seconds, matcher or None)`` each. ``scopes``: the settings file of each scope, relative to the
    project (``project``, ``local``) or to the user's configuration folder (``user``: see
    ``config_dir``); ``shared_scopes`` those committed to git, which get the portable command.
    ``timeout_ms``: the settings give timeouts in milliseconds. ``entry_name``: each hook entry
    carries a ``name`` (Gemini CLI shows it and fingerprints it for trust). ``project_vars``: the
    environment variables a hook reads the project directory from, in order (else the payload's
    ``cwd``). ``shell_tools`` / ``file_tools``: the tools that run a command (``{"command": …}``)
    or write a file (``{"file_path": …}``), for the brief's recent work and drift's progress.
    ``own_tools``: the CLI's built-in tool names, which the heartbeat records without the redactor.
    ``home_var``: a variable that stands for ``HOME`` when the CLI looks for ``config_folder``
    (Gemini CLI's ``$GEMINI_CLI_HOME``). ``pre_compact_every_call``: the CLI fires its
    pre-compaction hook before every model call, whether it compacts or not (Gemini CLI 0.61.0's
    PreCompress, trigger ``auto``): Phoenix throttles its automatic ones
    (``pre_compact_interval_minutes``). ``stderr_shown``: the CLI shows the user a hook's stderr
    when its stdout is empty, every time (Gemini CLI 0.61.0, as a "Hook system message"): a hook
    that failed prints ``{}`` on stdout then, and tells the user once a session (``_hook_notice``).
    ``entry_fields``: more fields of the hook entry of some of Phoenix's events (Codex's
    ``additionalContextLimit`` for SessionStart). ``outputs``: what the output of each of the
    CLI's events may carry (``OUTPUT_CONTEXT``, ``OUTPUT_MESSAGE``, ``OUTPUT_SILENT``; an event
    not listed: ``OUTPUT_MESSAGE``), and ``specific_required`` the events whose output the CLI
    refuses without ``hookSpecificOutput`` (``adapt_output``).
    """

    __slots__ = (
        "config_dir_var",
        "config_folder",
        "entry_fields",
        "entry_name",
        "file_tools",
        "home_var",
        "hooks",
        "label",
        "name",
        "outputs",
        "own_tools",
        "pre_compact_every_call",
        "project_vars",
        "scopes",
        "shared_scopes",
        "shell_tools",
        "specific_required",
        "stderr_shown",
        "timeout_ms",
    )

    def __init__(
        self,
        name: str,
        label: str,
        *,
        hooks: tuple[tuple[str, str, int, str | None], ...],
        scopes: dict[str, str],
        shared_scopes: tuple[str, ...],
        config_folder: str,
        config_dir_var: str | None,
        timeout_ms: bool = False,
        entry_name: bool = False,
        project_vars: tuple[str, ...] = (),
        shell_tools: frozenset[str] = frozenset(),
        file_tools: frozenset[str] = frozenset(),
        own_tools: frozenset[str] = frozenset(),
        home_var: str | None = None,
        pre_compact_every_call: bool = False,
        stderr_shown: bool = False,
        entry_fields: dict[str, dict[str, Any]] | None = None,
        outputs: dict[str, str] | None = None,
        specific_required: frozenset[str] = frozenset(),
    ) -> None:
        self.name = name
        self.label = label
        self.hooks = hooks
        self.scopes = scopes
        self.shared_scopes = shared_scopes
        self.config_folder = config_folder
        self.config_dir_var = config_dir_var
        self.timeout_ms = timeout_ms
        self.entry_name = entry_name
        self.project_vars = project_vars
        self.shell_tools = shell_tools
        self.file_tools = file_tools
        self.own_tools = own_tools
        self.home_var = home_var
        self.pre_compact_every_call = pre_compact_every_call
        self.stderr_shown = stderr_shown
        self.entry_fields = entry_fields or {}
        self.outputs = outputs or {}
        self.specific_required = specific_required

    def __repr__(self) -> str:
        return f"Client({self.name!r})"

    def native_event(self, event: str) -> str | None:
        """The CLI's name for Phoenix's ``event`` (``None``: the CLI has no such hook)."""
        for native, ours, _, _ in self.hooks:
            if ours == event:
                return native
        return None

    def fired_event(self, event: str, payload: Mapping[str, Any] | None = None) -> str | None:
        """The CLI's name of the event that runs the hook: the payload's ``hook_event_name`` when it
        is one of the CLI's events Phoenix handles as ``event`` (a hook registered for two events,
        ``post-tool-use`` for Claude Code's PostToolUseFailure, is told which one fired), else the
        CLI's name for ``event``."""
        named = payload.get("hook_event_name") if payload is not None else None
        if isinstance(named, str) and self.event_of(named) in (event, _SIBLING.get(event)):
            return named
        return self.native_event(event)

    def event_of(self, native: str) -> str | None:
        """Phoenix's event for the CLI's event name ``native`` (``None``: not one Phoenix handles)."""
        for name, ours, _, _ in self.hooks:
            if name == native:
                return ours
        return None

    def user_config_dir(self, env: Mapping[str, str] | None = None) -> str:
        """The CLI's folder of user settings (``$CLAUDE_CONFIG_DIR``, ``$CODEX_HOME``, else
        ``~/.claude``, ``~/.gemini`` (``$GEMINI_CLI_HOME/.gemini``), ``~/.codex``)."""
        environ = os.environ if env is None else env
        configured = environ.get(self.config_dir_var) if self.config_dir_var else None
        if configured:
            return os.path.expanduser(configured)
        home = (environ.get(self.home_var) if self.home_var else None) or environ.get("HOME") or os.path.expanduser("~")
        return os.path.join(home, self.config_folder)

    def user_settings(self, env: Mapping[str, str] | None = None) -> str:
        """The file of the CLI's user-scope hooks, in ``user_config_dir``."""
        return os.path.join(self.user_config_dir(env), self.scopes["user"])

    def project_dir(self, payload: dict[str, Any], env: Mapping[str, str] | None = None) -> str | None:
        """The project the CLI was started in, as it tells its hooks (a ``cd`` in the session does
        not change it), else the payload's ``cwd``; ``None`` when neither names a directory."""
        environ = os.environ if env is None else env
        for candidate in [*(environ.get(var) for var in self.project_vars), payload.get("cwd")]:
            if isinstance(candidate, str) and os.path.isabs(candidate) and os.path.isdir(candidate):
                return candidate
        return None


_CLAUDE_CODE_TOOLS = frozenset(
    {
        "Agent",
        "Bash",
        "BashOutput",
        "CronCreate",
        "CronDelete",
        "CronList",
        "Edit",
        "EnterWorktree",
        "ExitPlanMode",
        "ExitWorktree",
        "Glob",
        "Grep",
        "KillBash",
        "KillShell",
        "LS",
        "ListAgents",
        "ListMcpResourcesTool",
        "Monitor",
        "MultiEdit",
        "NotebookEdit",
        "NotebookRead",
        "ReadMcpResourceTool",
        "Read",
        "ReportFindings",
        "ScheduleWakeup",
        "SendMessage",
        "Skill",
        "SlashCommand",
        "Task",
        "TaskOutput",
        "TaskStop",
        "TodoRead",
        "TodoWrite",
        "ToolSearch",
        "WebFetch",
        "WebSearch",
        "Workflow",
        "Write",
    }
)  # fmt: skip
_GEMINI_CLI_TOOLS = frozenset(
    {
        # Offered to the model by 0.61.0 (its requests' functionDeclarations, seen 2026-11-28):
        "activate_skill",
        "enter_plan_mode",
        "exit_plan_mode",
        "glob",
        "google_web_search",
        "grep_search",
        "invoke_agent",
        "list_background_processes",
        "list_directory",
        "read_background_output",
        "read_file",
        "replace",
        "run_shell_command",
        "update_topic",
        "web_fetch",
        "write_file",
        "write_todos",
        # Earlier releases' names:
        "read_many_files",
        "save_memory",
        "search_file_content",
    }
)  # fmt: skip


CLAUDE_CODE = Client(
    "claude-code",
    "Claude Code",
    hooks=(
        ("SessionStart", "session-start", 10, None),
        ("PostToolUse", "post-tool-use", 5, "*"),
        ("PostToolUseFailure", "post-tool-use-failure", 5, "*"),
        ("PreCompact", "pre-compact", 10, None),
        ("UserPromptSubmit", "user-prompt", 5, None),
        ("Stop", "stop", 5, None),
        ("SessionEnd", "session-end", 2, None),
        # Agent teams (docs/teams.md#claude-code-agent-teams). TaskCompleted runs the team's check
        # command (claude_team_check_timeout, 300 s by default).
        ("SubagentStart", "subagent-start", 5, None),
        ("SubagentStop", "subagent-stop", 5, None),
        ("TaskCreated", "task-created", 5, None),
        ("TaskCompleted", "task-completed", 330, None),
        ("TeammateIdle", "teammate-idle", 10, None),
    ),
    scopes={"project": ".claude/settings.json", "local": ".claude/settings.local.json", "user": "settings.json"},
    shared_scopes=("project",),
    config_folder=".claude",
    config_dir_var="CLAUDE_CONFIG_DIR",
    project_vars=("CLAUDE_PROJECT_DIR",),
    shell_tools=frozenset({"Bash"}),
    file_tools=frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"}),
    own_tools=_CLAUDE_CODE_TOOLS,
    # Claude Code 2.1.330 reads additionalContext for these (and refuses an output naming another
    # event: "Hook returned incorrect event name: expected 'PostToolUseFailure' but got
    # 'PostToolUse'"); PreCompact and SessionEnd have no hookSpecificOutput.
    outputs={
        "SessionStart": OUTPUT_CONTEXT,
        "PostToolUse": OUTPUT_CONTEXT,
        "PostToolUseFailure": OUTPUT_CONTEXT,
        "UserPromptSubmit": OUTPUT_CONTEXT,
        "PreCompact": OUTPUT_MESSAGE,
        "Stop": OUTPUT_SILENT,
        "SessionEnd": OUTPUT_SILENT,
        # The agent-team events (_cc_teams): Phoenix prints nothing there but a systemMessage
        # when a hook fails; a guardrail refuses by exit code 2 and stderr, not by its output.
        "SubagentStart": OUTPUT_MESSAGE,
        "SubagentStop": OUTPUT_MESSAGE,
        "TaskCreated": OUTPUT_MESSAGE,
        "TaskCompleted": OUTPUT_MESSAGE,
        "TeammateIdle": OUTPUT_MESSAGE,
    },
)

GEMINI_CLI = Client(
    "gemini-cli",
    "Gemini CLI",
    hooks=(
        ("SessionStart", "session-start", 10, None),
        ("AfterTool", "post-tool-use", 5, None),
        ("PreCompress", "pre-compact", 10, None),
        ("BeforeAgent", "user-prompt", 5, None),
        ("AfterAgent", "stop", 5, None),
        ("SessionEnd", "session-end", 2, None),
    ),
    scopes={"project": ".gemini/settings.json", "user": "settings.json"},
    shared_scopes=("project",),
    config_folder=".gemini",
    config_dir_var=None,
    timeout_ms=True,
    entry_name=True,
    project_vars=("GEMINI_PROJECT_DIR", "CLAUDE_PROJECT_DIR"),
    shell_tools=frozenset({"run_shell_command"}),
    file_tools=frozenset({"write_file", "replace"}),
    own_tools=_GEMINI_CLI_TOOLS,
    home_var="GEMINI_CLI_HOME",
    pre_compact_every_call=True,
    stderr_shown=True,
    # Gemini CLI 0.61.0 appends AfterTool's additionalContext to the tool's result, prepends
    # SessionStart's to the first prompt and adds BeforeAgent's to the prompt (<hook_context>).
    outputs={
        "SessionStart": OUTPUT_CONTEXT,
        "AfterTool": OUTPUT_CONTEXT,
        "BeforeAgent": OUTPUT_CONTEXT,
        "PreCompress": OUTPUT_MESSAGE,
        "AfterAgent": OUTPUT_SILENT,
        "SessionEnd": OUTPUT_SILENT,
    },
)

CODEX = Client(
    "codex",
    "Codex CLI",
    # Seen with Codex 0.171.0 (tests/e2e/test_codex.py): the shell tool reports itself as "Bash"
    # ({"command": ...}), Codex's patch tool as "apply_patch" ({"command": <the patch>}); a
    # PostToolUse matcher left out matches every tool; SessionEnd's timeout is clamped to 3 s.
    hooks=(
        ("SessionStart", "session-start", 10, None),
        ("PostToolUse", "post-tool-use", 5, None),
        ("PreCompact", "pre-compact", 10, None),
        ("UserPromptSubmit", "user-prompt", 5, None),
        ("Stop", "stop", 5, None),
        ("SessionEnd", "session-end", 2, None),
    ),
    scopes={"project": ".codex/hooks.json", "user": "hooks.json"},
    shared_scopes=("project",),
    config_folder=".codex",
    config_dir_var="CODEX_HOME",
    shell_tools=frozenset({"Bash", "shell", "exec_command"}),
    file_tools=frozenset({"apply_patch"}),
    own_tools=frozenset({"Bash", "shell", "exec_command", "apply_patch", "update_plan", "view_image"}),
    # Codex keeps 2,500 tokens of a hook's additionalContext (it counts 4 bytes a token) and cuts the
    # rest; the brief and the recovery context may take 10,000 characters, up to 4 bytes each.
    entry_fields={"session-start": {"additionalContextLimit": 10_000}},
    # Codex 0.171.0's output types: SessionStart, PostToolUse and UserPromptSubmit have a
    # hookSpecificOutput with additionalContext; PreCompact's has none ("this event cannot emit
    # additionalContext"); a SessionStart output without hookSpecificOutput is refused.
    outputs={
        "SessionStart": OUTPUT_CONTEXT,
        "PostToolUse": OUTPUT_CONTEXT,
        "UserPromptSubmit": OUTPUT_CONTEXT,
        "PreCompact": OUTPUT_MESSAGE,
        "Stop": OUTPUT_SILENT,
        "SessionEnd": OUTPUT_SILENT,
    },
    specific_required=frozenset({"SessionStart"}),
)

CLIENTS: dict[str, Client] = {c.name: c for c in (CLAUDE_CODE, GEMINI_CLI, CODEX)}
"""Every CLI Phoenix serves, by the name ``phx install`` and ``--client`` take."""
_ALIASES = {"claude": "claude-code", "gemini": "gemini-cli", "codex-cli": "codex"}


def claude_team_name(session_id: str) -> str:
    """The name Claude Code 2.1.330 gives the agent team of an interactive session:
    ``session-<the session id's first 8 hex digits>`` (its folder under ``~/.claude/teams``)."""
    return "session-" + session_id.replace("-", "")[:8]


def client_named(name: str | None) -> Client:
    """The CLI called ``name`` (``None``: Claude Code). Raises ``ValueError`` for another name."""
    if name is None:
        return CLAUDE_CODE
    key = name.strip().lower()
    found = CLIENTS.get(_ALIASES.get(key, key))
    if found is None:
        raise ValueError(f"unknown agent CLI {name!r}; expected one of {', '.join(CLIENTS)}")
    return found


def adapt_payload(client: Client, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as the handlers read it (Claude Code's shape): each CLI's differences are
    turned here, and nowhere else. Changes ``payload`` in place and returns it."""
    if client is GEMINI_CLI:
        # AfterAgent: the model's last answer (the persona check reads it as Claude Code's Stop gives it).
        answer = payload.get("prompt_response")
        if isinstance(answer, str) and "last_assistant_message" not in payload:
            payload["last_assistant_message"] = answer
        # AfterTool: a failed call is told in the response, not by another event.
        response = payload.get("tool_response")
        if isinstance(response, dict) and "is_error" not in response:
            error = _gemini_tool_error(response)
            if error is not None:
                payload["tool_response"] = {**response, "is_error": True, "error": error}
        # Gemini's transcript (~/.gemini/tmp/<project>/chats/session-….jsonl) is not Claude Code's:
        # what a resumed conversation holds is told by Phoenix's own records (_context).
        payload.pop("transcript_path", None)
    elif client is CODEX and payload.get("tool_name") == "apply_patch":
        _codex_patch(payload)
    return payload


_SHELL_SECTIONS = ("Exit Code: ", "Error: ", "Signal: ", "Background PIDs: ", "Process Group PGID: ")
"""What follows the output in the result Gemini CLI's shell tool gives the model (0.61.0:
``Output: …``, then a line each: ``Error`` for a process-level error, ``Exit Code`` when it is not
0, ``Signal`` when a signal ended it, ``Background PIDs``, ``Process Group PGID``), wrapped in
``<untrusted_context>`` (which escapes that closing tag inside the output)."""
_WRAPPER = ("<untrusted_context>\n", "\n</untrusted_context>")
_SECTIONS_SCAN = 4096


def _gemini_tool_error(response: dict[str, Any]) -> str | None:
    """Why a Gemini CLI tool call failed, from its ``tool_response`` (``{llmContent,
    returnDisplay}``, plus ``error: {message, type}`` from most tools), or ``None`` when it did
    not. A shell command that exited non-zero, failed to start or was killed by a signal has no
    ``error``: its ``llmContent`` ends with ``Exit Code: 2`` (``Error: …``, ``Signal: …``) lines
    after the output. Those are told from the output by ``returnDisplay``, which is the output
    itself (so an output whose last line reads ``Exit Code: 3`` is not taken for one); where it is
    not (colours, an escaped tag), the lines are read from the end."""
    error = response.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) and message else "tool reported an error"
    if isinstance(error, str) and error:
        return error
    content = response.get("llmContent")
    if not isinstance(content, str) or "\n" not in content:
        return None
    if content.startswith(_WRAPPER[0]) and content.endswith(_WRAPPER[1]):
        content = content[len(_WRAPPER[0]) : -len(_WRAPPER[1])]
    if not content.startswith("Output: "):
        return None
    display = response.get("returnDisplay")
    if isinstance(display, str) and display and content.startswith("Output: " + display + "\n"):
        content = content[len("Output: " + display) :]  # the lines after the output, exactly
    found: dict[str, str] = {}
    for line in reversed(content[-_SECTIONS_SCAN:].split("\n")):  # the lines at the end, last first
        section = next((s for s in _SHELL_SECTIONS if line.startswith(s)), None)
        if section is None:
            break
        found[section] = line[len(section) :].strip()
    code = found.get("Exit Code: ")
    if code is not None and code != "0":
        return f"exit code {code}"
    for section in ("Error: ", "Signal: "):
        if found.get(section):
            return f"{section[:-2].lower()}: {found[section]}"
    return None


_PATCH_HEADS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")


def _codex_patch(payload: dict[str, Any]) -> None:
    """Codex's ``apply_patch`` call as the handlers read a file tool's: ``tool_input.file_path``
    names the file the patch writes (the first, and how many more), and a response that starts
    ``Exit code: N`` with N not 0 is a failure. (A patch that does not apply runs no PostToolUse
    at all. A shell command's response is its output only, without its exit code: Phoenix cannot
    tell a failed command from it, and records the call as done.)"""
    tool_input = payload.get("tool_input")
    patch = tool_input.get("command") if isinstance(tool_input, dict) else None
    files: list[str] = []
    for line in patch.splitlines() if isinstance(patch, str) else []:
        for head in _PATCH_HEADS:
            if line.startswith(head):
                name = line[len(head) :].strip()
                if name and name not in files:
                    files.append(name)
    if files and isinstance(tool_input, dict):
        more = f" (+{len(files) - 1} more)" if len(files) > 1 else ""
        tool_input["file_path"] = files[0] + more
    response = payload.get("tool_response")
    if isinstance(response, str) and response.startswith("Exit code: "):
        code = response[len("Exit code: ") :].split("\n", 1)[0].strip()
        if code != "0":
            output = response.split("Output:\n", 1)[-1].strip().split("\n", 1)[0]
            payload["tool_response"] = {"success": False, "error": f"apply_patch exited {code}: {output}"[:300]}


def adapt_output(client: Client, event: str, out: str | None, payload: Mapping[str, Any] | None = None) -> str | None:
    """A hook's JSON output ``out`` in the shape ``client`` accepts for the event that fired
    (``Client.fired_event``: Phoenix's ``event``, or the payload's ``hook_event_name``), by the
    table ``Client.outputs``: ``hookSpecificOutput.hookEventName`` names that event (Claude Code
    refuses an output that names another); an event whose output carries no
    ``hookSpecificOutput`` loses it (``systemMessage`` stays); a silent event prints nothing; an
    event whose output needs one (Codex's SessionStart) gets one. An output already right is
    returned as it is; one that is not JSON too."""
    if not out:
        return out
    fired = client.fired_event(event, payload)
    if fired is None:
        return out
    kind = client.outputs.get(fired, OUTPUT_MESSAGE)
    if kind == OUTPUT_SILENT:
        return None
    from phoenix_protocol.core._jsonio import dumps_line, loads

    try:
        document = loads(out)
    except ValueError:
        return out
    if not isinstance(document, dict):
        return out
    specific = document.get("hookSpecificOutput")
    if kind == OUTPUT_CONTEXT:
        if isinstance(specific, dict):
            if specific.get("hookEventName") == fired:
                return out
            document["hookSpecificOutput"] = {**specific, "hookEventName": fired}
        elif fired in client.specific_required:
            document["hookSpecificOutput"] = {"hookEventName": fired}
        else:
            return out
        return dumps_line(document)
    if specific is None:
        return out
    document.pop("hookSpecificOutput")
    return dumps_line(document) if document else None
