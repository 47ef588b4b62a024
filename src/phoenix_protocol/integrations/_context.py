"""What the SessionStart hook hands the model: the brief once per conversation, then only what changed.

Claude Code keeps a conversation's hook context in its transcript and sends it again with every
later request: a resumed session (``claude --resume``/``--continue``) still holds the brief it
was given at its start, and a compaction keeps the newest messages verbatim (Claude Code 2.1.330
lists them in the ``compact_boundary`` record, ``compactMetadata.preservedMessages``) and
summarizes the rest. Injecting the whole brief at every SessionStart therefore stacks copies of it
in one request (issue 30, item 5: three copies after startup, resume, ``/compact``, resume).

Each injection carries an id (``phx-ctx-`` and 10 hex digits, in its first line) and is recorded
in the agent's ``injections.json``: the id, the session, whether it was the *full* context or a
*delta*, when, and the facts it handed over (task, status, the task's notes, ...). At
SessionStart the hook finds which of its injections the conversation still holds
(``held_injections``: those in the transcript after its last compaction, or kept verbatim by it;
none for ``startup``/``clear``, which start a new conversation):

- none of them a full one: the full context (recovery banner, notices, the brief);
- a full one: only what changed since the newest one held (the task, its notes, the things done
  since, an error), or nothing when nothing did. A recovery (the previous run of a resumed
  session ended while working) is said in one line either way.

So a request never carries two copies of the brief. When the transcript cannot be read (no path,
another format), the records decide: a ``resume`` holds what this session was given since its
last full injection, a ``compact`` holds nothing.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._redact import clip

if TYPE_CHECKING:
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "INJECTIONS",
    "MARK",
    "changes",
    "facts_of",
    "held_injections",
    "record_injection",
    "transcript_ids",
]

INJECTIONS = "injections.json"
MARK = "phx-ctx-"
_ID = re.compile(rb"phx-ctx-[0-9a-f]{10}")
_KEEP_RECORDS = 64
MAX_INJECTIONS_BYTES = 1 << 20
"""The most of ``injections.json`` read (its ``_KEEP_RECORDS`` records take a few KB)."""
_TRANSCRIPT_TAIL = 32 * 1024 * 1024
"""The part of a transcript read (from its end): a compaction starts the conversation over."""
_DELTA_WORK = 8


def new_id() -> str:
    return MARK + os.urandom(5).hex()


# -- the facts handed over --------------------------------------------------------------------


def facts_of(state: AgentState) -> dict[str, Any]:
    """What an injection told the model about ``state``: what a later one compares with."""
    from phoenix_protocol.agent._state import other_tasks, task_notes

    loops, actions = task_notes(state)
    return {
        "task": state.current_task,
        "status": state.status,
        "error": state.error_message if state.status == "error" else None,
        "output": state.last_output,
        "notes": [[i["id"], "open_loop", i["text"]] for i in loops]
        + [[i["id"], "next_action", i["text"]] for i in actions],
        "others": [[task, count] for task, count in other_tasks(state)],
    }


def _text(value: object, limit: int = 300) -> str:
    from phoenix_protocol.core._redact import redact

    text = redact(" ".join(str(value).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def changes(old: dict[str, Any], state: AgentState, since_ms: int, now_iso: str, *, work: bool = True) -> list[str]:
    """What changed in ``state`` since an injection that handed over ``old`` at ``since_ms``:
    lines for the model, each fact once; ``[]`` when nothing did. ``work``: say what was done
    since too (not when the conversation did it all itself: its transcript shows it)."""
    from phoenix_protocol.agent._brief import describe_work
    from phoenix_protocol.agent._state import other_tasks, task_notes

    new = facts_of(state)
    lines: list[str] = []
    label = {"open_loop": "open loop", "next_action": "next action"}
    if new["task"] != old.get("task"):
        lines.append(f"- Task now: {_text(new['task']) if new['task'] else '(none)'}")
        left = dict(other_tasks(state)).get(old.get("task") or "")
        if old.get("task"):
            kept = f"; its {left} open item{'' if left == 1 else 's'} stay with it" if left else ""
            lines.append(f"  (was: {_text(old['task'], 160)}{kept})")
        loops, actions = task_notes(state)
        for item in loops + actions:  # the new task's notes: none of them was handed over
            kind = "open loop" if item in loops else "next action"
            lines.append(f"- {kind.capitalize()} [{item['id']}]: {_text(item['text'])}")
    else:
        before = {(n[0], n[2]) for n in old.get("notes") or [] if isinstance(n, list) and len(n) == 3}
        now = {(n[0], n[2]) for n in new["notes"]}
        for number, kind, text in new["notes"]:
            if (number, text) not in before:
                lines.append(f"- New {label[kind]} [{number}]: {_text(text)}")
        for number, text in sorted(before - now):
            lines.append(f"- Resolved [{number}]: {_text(text, 160)}")
    if new["status"] != old.get("status") and "error" in (new["status"], old.get("status")):
        lines.append(f"- Status: {old.get('status')} → {new['status']}")
    if new["error"] and new["error"] != old.get("error"):
        lines.append(f"- Error: {_text(new['error'])}")
    if new["output"] and new["output"] != old.get("output"):
        lines.append(f"- Last output: {_text(new['output'])}")
    done = [e for e in state.recent_work if work and len(e) > 0 and isinstance(e[0], int) and e[0] > since_ms]
    described = [line for entry in done[-_DELTA_WORK:] if (line := describe_work(entry, now_iso))]
    if described:
        more = len(done) - len(described)
        lines.append("- Done since: " + "; ".join(described) + (f" (and {more} more)" if more > 0 else ""))
    return lines


# -- what the conversation holds ------------------------------------------------------------------


def _read_tail(path: str, limit: int) -> bytes | None:
    """The last ``limit`` bytes of a regular file (``None``: not one, or unreadable). Opened
    without blocking: the path comes from the hook's payload."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(0, info.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        return data if start == 0 else data[data.find(b"\n") + 1 :]  # a whole first line
    except OSError:
        return None
    finally:
        os.close(fd)


def transcript_ids(path: object, *, compacting: bool = False) -> set[str] | None:
    """The ids of Phoenix's injections a Claude Code transcript still sends to the model: hook
    context (``hook_additional_context`` attachments) after the last ``compact_boundary``, or
    kept verbatim by it (its ``preservedMessages``). ``None``: no transcript to read.

    ``compacting``: the SessionStart of a compaction, whose boundary is not in the file yet when
    the hook runs (Claude Code 2.1.330 writes it later). The compaction keeps the messages from
    the last assistant message on (its ``preservedSegment`` starts there: seen in every
    compaction the e2e tests make): those are what the conversation will hold."""
    if not isinstance(path, str) or not path or not os.path.isabs(path):
        return None
    data = _read_tail(path, _TRANSCRIPT_TAIL)
    if data is None:
        return None
    from phoenix_protocol.core._jsonio import JSONError, loads

    lines = data.split(b"\n")
    boundary, preserved = -1, set()
    if compacting:
        for i in range(len(lines) - 1, -1, -1):
            if b'"assistant"' not in lines[i]:
                continue
            try:
                record = loads(lines[i])
            except JSONError:
                continue
            if isinstance(record, dict) and record.get("type") == "assistant":
                boundary = i
                break
        lines = lines[boundary + 1 :]
        boundary = -1
    for i in range(len(lines) - 1, -1, -1) if not compacting else ():
        if b'"compact_boundary"' not in lines[i]:
            continue
        try:
            record = loads(lines[i])
        except JSONError:
            continue
        if isinstance(record, dict) and record.get("subtype") == "compact_boundary":
            boundary = i
            kept = ((record.get("compactMetadata") or {}).get("preservedMessages") or {}).get("uuids")
            preserved = {u for u in kept if isinstance(u, str)} if isinstance(kept, list) else set()
            break
    found: set[str] = set()
    for i, line in enumerate(lines):
        if b"phx-ctx-" not in line or b"hook_additional_context" not in line:
            continue
        if i < boundary:
            try:
                record = loads(line)
            except JSONError:
                continue
            if not isinstance(record, dict) or record.get("uuid") not in preserved:
                continue  # summarized away by the compaction
        found.update(m.decode("ascii") for m in _ID.findall(line))
    return found


# -- the records --------------------------------------------------------------------------------


def _path(agent: Agent) -> str:
    return os.path.join(agent.dir, INJECTIONS)


def load_records(agent: Agent) -> dict[str, dict[str, Any]]:
    """The injections recorded (by id); an unreadable file counts as none (it is rewritten; an
    entry Phoenix refuses, a FIFO or a link, is the doctor's to move aside)."""
    from phoenix_protocol.core._durable import read_bytes
    from phoenix_protocol.core._errors import PhoenixError
    from phoenix_protocol.core._jsonio import loads_object

    try:
        data = loads_object(read_bytes(_path(agent), limit=MAX_INJECTIONS_BYTES))
    except (OSError, PhoenixError):
        return {}
    records = (data or {}).get("injections")
    if not isinstance(records, dict):
        return {}
    return {k: v for k, v in records.items() if isinstance(v, dict) and isinstance(v.get("ms"), int)}


def record_injection(agent: Agent, record: dict[str, Any]) -> None:
    """Add ``record`` (``id``, ``session_id``, ``kind``, ``source``, ``ms``, ``facts``), keeping
    the newest ``_KEEP_RECORDS``."""
    from phoenix_protocol.core._durable import FileLock, atomic_write
    from phoenix_protocol.core._jsonio import dumps_document

    agent.ensure()
    with FileLock(_path(agent), agent.config.lock_timeout):
        records = load_records(agent)
        records[record["id"]] = {k: v for k, v in record.items() if k != "id"}
        newest = sorted(records.items(), key=lambda item: item[1]["ms"])[-_KEEP_RECORDS:]
        atomic_write(_path(agent), dumps_document({"schema_version": 1, "injections": dict(newest)}).encode())


def held_injections(agent: Agent, session_id: str | None, source: str, transcript_path: object) -> list[dict[str, Any]]:
    """The recorded injections the conversation holds, oldest first: as its transcript says, or
    when that cannot be read, as the records say (see the module docstring)."""
    if source in ("startup", "clear"):
        return []
    records = load_records(agent)
    ids = transcript_ids(transcript_path, compacting=source == "compact")
    if ids is not None:
        held = [{"id": i, **records[i]} for i in ids if i in records]
        return sorted(held, key=lambda r: r["ms"])
    if source != "resume" or not session_id:
        return []
    mine = sorted(
        ({"id": i, **r} for i, r in records.items() if r.get("session_id") == session_id), key=lambda r: r["ms"]
    )
    fulls = [n for n, r in enumerate(mine) if r.get("kind") == "full"]
    return mine[fulls[-1] :] if fulls else []


def session_context(
    agent: Agent,
    described: AgentState,
    *,
    session_id: str | None,
    source: str,
    transcript_path: object,
    banner: list[str],
    notices: list[str],
    wanted: bool,
) -> str | None:
    """The context to inject (``None``: none), recorded: the full context (``banner``,
    ``notices`` and the brief of ``described``) when the conversation holds no full one of ours
    and ``wanted`` says there is something to hand over; else ``banner`` (a recovery), the
    notices and what changed since the newest one it holds, or ``None`` when that is nothing."""
    held = held_injections(agent, session_id, source, transcript_path)
    now_ms = agent.clock.now_ms()
    now_iso = agent.clock.now_iso()
    ident = new_id()
    full = not any(r.get("kind") == "full" for r in held)
    if full:
        if not wanted:
            return None
        if banner:
            title = banner[0].replace(" ===", f" · {ident} ===", 1)
            head = [title, *banner[1:], "Carry on from the brief below; the old transcript is not needed."]
        else:
            head = [f"=== Phoenix Protocol brief ({source}) · {ident} ==="]
        head += [f"Note: {n}" for n in notices]
        header = "\n".join(head) + "\n\n"
        budget = max(1000, agent.config.brief_max_chars - len(header))
        from phoenix_protocol.integrations._hooks import _GIT_TIMEOUT

        text = (header + agent.render_brief(described, max_chars=budget, git_timeout=_GIT_TIMEOUT))[
            : agent.config.brief_max_chars
        ]
    else:
        base = held[-1]
        # The session the state last belonged to is this conversation's: what was done since its
        # last injection, it did itself (its transcript shows it). The state's facts are still
        # said: they are the authority, whoever wrote them.
        own = described.session_id == session_id
        lines = changes(base.get("facts") or {}, described, int(base["ms"]), now_iso, work=not own)
        if not lines and not banner and not notices:
            return None
        first = banner[0] if banner else "=== Phoenix Protocol: since the brief above ==="
        first = first.replace(" ===", f" · {ident} ===", 1)
        above = f"the brief above ({base['id']}, {_short(_iso(int(base['ms'])), now_iso)})"
        body = [first, *banner[1:], *(f"Note: {n}" for n in notices)]
        body.append(f"Since {above}:" if lines else f"Nothing in the state changed since {above}.")
        text = "\n".join(body + lines)[: agent.config.brief_max_chars]
    try:
        record_injection(
            agent,
            {
                "id": ident,
                "session_id": session_id,
                "kind": "full" if full else "delta",
                "source": source,
                "ms": now_ms,
                "facts": facts_of(described),
            },
        )
    except Exception as exc:  # noqa: BLE001 - the context still goes out; the next start injects it whole
        agent.record("context_not_recorded", "warn", {"error": clip(f"{type(exc).__name__}: {exc}", 300)})
    return text


def _iso(ms: int) -> str:
    from phoenix_protocol.core._clock import iso_from_ms

    return iso_from_ms(ms)


def _short(iso: str, now_iso: str) -> str:
    from phoenix_protocol.agent._brief import short_time

    return short_time(iso, now_iso)
