"""``brief.md``: the warm hand-off a new session reads instead of the dead session's transcript.

Generated from ``state.json``, the recent ops log, the open loops and next actions, and the git
work tree, in seed 000's sections (Current State, Open Loops, Next Actions) plus Git Context and
Recent Activity. It must make sense to a reader who has nothing else.

Size: at most ``max_chars`` characters (10,000 by default: Claude Code cuts hook context there).
When it must cut, it cuts the least important first: Recent Activity, then the list of changed
files, then old open loops and next actions (newest kept), then long lines; Current State is
kept whole. What was cut is said, with a count.

The whole text passes through the secret redactor before it is returned.
"""

from __future__ import annotations

from phoenix_protocol.agent._state import AgentState
from phoenix_protocol.core._git import GitContext
from phoenix_protocol.core._redact import redact

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["render_brief"]

_MAX_LINE = 400


def _line(text: str, limit: int = _MAX_LINE) -> str:
    """One line of dynamic content: redacted *before* it is shortened, so a cut can never
    leave part of a secret behind."""
    text = redact(" ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def _describe_event(event: dict[str, Any]) -> str:
    meta = event.get("meta") or {}
    name = event.get("event", "?")
    parts = [f"{str(event.get('ts', ''))[:19].replace('T', ' ')}", f"{name}"]
    if event.get("status") not in (None, "ok"):
        parts.append(f"[{event.get('status')}]")
    detail = ""
    if isinstance(meta, dict):
        for key in ("task", "text", "output", "error", "tool", "reason", "source", "message"):
            value = meta.get(key)
            if value:
                detail = f"{key}: {value}"
                break
    line = " ".join(parts) + (f" — {detail}" if detail else "")
    return "- " + _line(line, 240)


def render_brief(
    state: AgentState,
    *,
    agent_id: str,
    events: list[dict[str, Any]] | None = None,
    git: GitContext | None = None,
    generated_at: str,
    max_chars: int = 10_000,
    notices: list[str] | None = None,
) -> str:
    """Render the brief as Markdown (see the module docstring)."""
    current: list[str] = [
        f"- Status: **{state.status}**"
        + (f" (set by {state.updated_by}" + (f", {state.status_event}" if state.status_event else "") + ")")
    ]
    if state.current_task:
        label = "Working on" if state.status == "working" else "Last task"
        current.append(f"- {label}: {_line(state.current_task)}")
    else:
        current.append('- Task: none recorded (`phx state working "…"` records one)')
    if state.last_output:
        current.append(f"- Last output: {_line(state.last_output)}")
    if state.status == "error" and state.error_message:
        current.append(f"- Error: {_line(state.error_message)}")
    if state.last_active:
        activity = f"- Last activity: {state.last_active}"
        if state.last_tool:
            ok = "ok" if state.last_tool.get("ok", True) else "FAILED"
            activity += f" (tool {state.last_tool.get('name', '?')}, {ok})"
            if state.last_tool.get("error"):
                activity += f": {_line(str(state.last_tool['error']), 200)}"
        current.append(activity)
    if state.session_id:
        current.append(
            f"- Session: {state.session_id}"
            + (f", started {state.session_started_at}" if state.session_started_at else "")
            + f", {state.heartbeat_seq} tool calls recorded"
        )
    if state.drift:
        current.append(f"- Drift detected: {_line(str(state.drift.get('detail', '')))} (at {state.drift.get('at')})")
    if state.refresh_requested:
        current.append(f"- Refresh requested: {_line(str(state.refresh_requested.get('reason', '')))}")
    for notice in notices or []:
        current.append(f"- Note: {_line(notice)}")

    loops = [f"- [{item['id']}] {_line(item['text'])}" for item in state.open_loops]
    actions = [f"- [{item['id']}] {_line(item['text'])}" for item in state.next_actions]

    sections = [
        _Section("Current State", current, [], priority=0),
        _Section("Open Loops", [], loops, priority=2, keep_newest=True),
        _Section("Next Actions", [], actions, priority=2, keep_newest=False),
    ]
    if git is not None:
        head = []
        where = git.branch or "(detached HEAD)"
        if git.head:
            subject = f' "{_line(git.head_subject or "", 120)}"' if git.head_subject else ""
            head.append(f"- Branch: {where} at {git.head}{subject}")
        else:
            head.append(f"- Branch: {where} (no commits yet)")
        head.append(f"- Changed files: {git.changed_total}" + (" (work tree clean)" if not git.changed_total else ""))
        files = [f"  - `{status}` {_line(path, 200)}" for status, path in git.changed]
        extra = git.changed_total - len(git.changed)
        if extra > 0:
            files.append(f"  - … and {extra} more")
        sections.append(_Section("Git Context", head, files, priority=3, keep_newest=False))
    recent = [_describe_event(e) for e in (events or [])]
    sections.append(_Section("Recent Activity", [], recent, priority=4, keep_newest=True))

    header = (
        f"# Brief: agent `{agent_id}`\n"
        f"_Generated {generated_at} by Phoenix Protocol from state.json, ops.jsonl and git. "
        "State is authoritative for status and task; this brief stands alone, without a transcript._"
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
