"""``brief.md``: the warm hand-off a new session reads instead of the dead session's transcript.

Generated from ``state.json`` and the git work tree, in seed 000's sections (Current State, Open
Loops, Next Actions) plus Earlier Tasks, Done Recently and Git. It must make sense to a reader who
has nothing else, and be worth reading: each fact once, no ids or digests, no bookkeeping.

- **Current State**: the status (and who set it), the task, its last output or error, the last
  tool call (its own time, not the time anything last wrote the state), and the session it
  describes with that session's tool calls.
- **Open Loops**, **Next Actions**: the current task's only; each note belongs to the task it was
  written under. Earlier tasks that still hold open notes are listed under **Earlier Tasks**, by
  name and count, never mixed in.
- **Done Recently**: the commands run and files written for the current task (``recent_work``,
  recorded by the PostToolUse hook), newest last.
- **Git**: the branch, HEAD and changed files (Phoenix's own ``.phoenix/`` and the agent CLI's
  ``.claude/``, ``.gemini/``, ``.codex/`` left out).

Size: at most ``max_chars`` characters (10,000 by default: Claude Code cuts hook context there).
When it must cut, it cuts the least important first: changed files, then Done Recently, then
Earlier Tasks, then old open loops and next actions (newest kept), then long lines; Current State
is kept whole. What was cut is said, with a count.

The whole text passes through the secret redactor before it is returned.
"""

from __future__ import annotations

from phoenix_protocol.agent._state import AgentState, other_tasks, task_notes
from phoenix_protocol.core._git import GitContext
from phoenix_protocol.core._redact import redact

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["WORK_VERBS", "describe_work", "render_brief", "short_time"]

_MAX_LINE = 400
_GIT_FILES = 10
_TOOL_PATHS = (".phoenix/", ".claude/", ".gemini/", ".codex/")
"""Changed paths the brief leaves out: Phoenix's home and the agent CLI's settings."""
WORK_VERBS = {"Bash": "ran", "Write": "wrote", "Edit": "edited", "MultiEdit": "edited", "NotebookEdit": "edited"}
_SOURCES = {"model": "the model", "hook": "a hook", "watchdog": "the watchdog"}
_EVENTS = {
    "session_start": "session started",
    "session_end": "session ended",
    "task_started": "task started",
    "task_done": "task done",
    "task_error": "task failed",
    "state_idle": "idle",
    "stalled": "stalled",
}


def _line(text: str, limit: int = _MAX_LINE) -> str:
    """One line of dynamic content: redacted *before* it is shortened, so a cut can never
    leave part of a secret behind."""
    text = redact(" ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_time(iso: object, now_iso: str) -> str:
    """``HH:MM:SSZ`` on the day of ``now_iso``, else ``YYYY-MM-DD HH:MMZ``."""
    text = str(iso or "")
    if len(text) < 19:
        return text or "?"
    if text[:10] == now_iso[:10]:
        return text[11:19] + "Z"
    return f"{text[:10]} {text[11:16]}Z"


def describe_work(entry: list[Any], now_iso: str) -> str | None:
    """One ``recent_work`` entry as a line: ``21:45:17Z ran `pytest -q` (failed)``."""
    if len(entry) < 4 or not isinstance(entry[2], str):
        return None
    from phoenix_protocol.core._clock import iso_from_ms

    when = short_time(iso_from_ms(entry[0]), now_iso) if isinstance(entry[0], int) else "?"
    verb = WORK_VERBS.get(str(entry[1]), str(entry[1]).lower())
    detail = _line(entry[2], 200).replace("`", "'")
    return f"{when} {verb} `{detail}`" + ("" if entry[3] is not False else " (failed)")


class _Section:
    def __init__(
        self, title: str, head: list[str], items: list[str], *, priority: int, keep_newest: bool = True
    ) -> None:
        self.title = title
        self.head = head
        self.items = items
        self.priority = priority  # higher is cut first
        self.keep_newest = keep_newest
        self.dropped = 0

    def render(self) -> str:
        lines = [f"## {self.title}", *self.head, *self.items]
        if self.dropped:
            lines.append(f"- … {self.dropped} more not shown (brief size limit)")
        if not self.head and not self.items and not self.dropped:
            lines.append("- (none)")
        return "\n".join(lines)

    def drop_one(self) -> bool:
        if not self.items:
            return False
        if self.keep_newest:
            self.items.pop(0)
        else:
            self.items.pop()
        self.dropped += 1
        return True


def _current(state: AgentState, now: str, notices: list[str]) -> list[str]:
    """Current State: each fact once."""
    who = _SOURCES.get(state.updated_by, state.updated_by)
    how = _EVENTS.get(state.status_event or "", state.status_event or "")
    lines = [f"- Status: **{state.status}** (set by {who}" + (f": {how})" if how else ")")]
    if state.current_task:
        label = "Working on" if state.status == "working" else "Last task"
        lines.append(f"- {label}: {_line(state.current_task)}")
    else:
        lines.append('- Task: none recorded (`phx state working "…"` records one)')
    if state.last_output:
        lines.append(f"- Last output: {_line(state.last_output)}")
    if state.status == "error" and state.error_message:
        lines.append(f"- Error: {_line(state.error_message)}")
    tool = state.last_tool
    if tool:
        ok = "ok" if tool.get("ok", True) else "failed"
        text = f"- Last tool call: {short_time(tool.get('at'), now)}, {_line(str(tool.get('name', '?')), 40)} {ok}"
        if tool.get("error"):
            text += f": {_line(str(tool['error']), 200)}"
        lines.append(text)
    if state.session_id:
        calls = f"{state.tool_calls} tool call{'' if state.tool_calls == 1 else 's'}"
        since = f" since {short_time(state.session_started_at, now)}" if state.session_started_at else ""
        lines.append(f"- Session {_line(state.session_id, 80)}{since}: {calls}")
    if state.drift:
        lines.append(f"- Drift detected: {_line(str(state.drift.get('detail', '')))} (at {state.drift.get('at')})")
    if state.refresh_requested:
        lines.append(f"- Refresh requested: {_line(str(state.refresh_requested.get('reason', '')))}")
    lines += [f"- Note: {_line(notice)}" for notice in notices]
    return lines


def _git_section(git: GitContext) -> _Section:
    changed = [(status, path) for status, path in git.changed if not path.startswith(_TOOL_PATHS)]
    total = git.changed_total - (len(git.changed) - len(changed))
    where = git.branch or "(detached HEAD)"
    if git.head:
        subject = f' "{_line(git.head_subject or "", 120)}"' if git.head_subject else ""
        head = [f"- Branch {where} at {git.head}{subject}"]
    else:
        head = [f"- Branch {where} (no commits yet)"]
    head.append(f"- Changed files: {total}" if total else "- Work tree clean")
    files = [f"  - `{status.strip() or status}` {_line(path, 200)}" for status, path in changed[:_GIT_FILES]]
    if total > len(files):
        files.append(f"  - … and {total - len(files)} more")
    return _Section("Git", head, files, priority=4, keep_newest=False)


def render_brief(
    state: AgentState,
    *,
    agent_id: str,
    git: GitContext | None = None,
    generated_at: str,
    max_chars: int = 10_000,
    notices: list[str] | None = None,
    work_limit: int = 10,
) -> str:
    """Render the brief as Markdown (see the module docstring). ``work_limit``: the things done
    listed under Done Recently."""
    loops, actions = task_notes(state)
    sections = [
        _Section("Current State", _current(state, generated_at, list(notices or [])), [], priority=0),
        _Section("Open Loops", [], [f"- [{i['id']}] {_line(i['text'])}" for i in loops], priority=1),
        _Section(
            "Next Actions", [], [f"- [{i['id']}] {_line(i['text'])}" for i in actions], priority=1, keep_newest=False
        ),
    ]
    earlier = other_tasks(state)
    if earlier:
        items = [
            f"- {_line(task, 160) if task else '(no task)'}: {count} open item{'' if count == 1 else 's'}"
            for task, count in earlier
        ]
        head = ['- Not mixed in above; `phx state working "<task>"` brings a task and its notes back.']
        sections.append(_Section("Earlier Tasks", head, items, priority=2))
    done = [line for entry in state.recent_work[-work_limit:] if (line := describe_work(entry, generated_at))]
    if done and work_limit:
        sections.append(_Section("Done Recently", [], [f"- {line}" for line in done], priority=3))
    if git is not None:
        sections.append(_git_section(git))

    header = (
        f"# Brief: agent `{agent_id}`\n"
        f"_Phoenix Protocol, {short_time(generated_at, '')}: from state.json (authoritative for status and task) "
        "and git; it stands alone, without a transcript._"
    )

    def assemble() -> str:
        return header + "\n\n" + "\n\n".join(s.render() for s in sections) + "\n"

    text = assemble()
    # Cut the least important content first, one item at a time.
    for section in sorted(sections, key=lambda s: -s.priority):
        while len(text) > max_chars and section.priority > 0 and section.drop_one():
            text = assemble()
    if len(text) > max_chars:
        for section in sections:
            section.head = [_line(h, 160) for h in section.head]
            section.items = [_line(i, 160) for i in section.items]
        text = assemble()
    text = redact(text)  # every part was redacted already; this pass is a safety net
    if len(text) > max_chars:
        marker = "\n… (brief cut at the size limit)\n"
        text = text[: max_chars - len(marker)] + marker
    return text
