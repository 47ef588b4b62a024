"""Replaying the ops events of an agent into a state: how ``phx doctor`` rebuilds a lost state.json,
how a state.json that is gone is read meanwhile, and how a checkpoint's state is brought up to
the events logged since it was taken."""

from __future__ import annotations

from typing import Any

from phoenix_protocol.agent._state import AgentState, _track_work, note_task
from phoenix_protocol.core._clock import iso_from_ms
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError

__all__ = ["event_ms", "rebuild_state"]


_STATUS_EVENTS = ("task_started", "task_done", "task_error", "state_idle", "stalled", "status_changed")


def event_ms(ts: object) -> int | None:
    from phoenix_protocol.core._clock import ms_from_iso

    try:
        return ms_from_iso(ts) if isinstance(ts, str) else None
    except ValueError:
        return None


def _checkpoint_clock(state: AgentState, name: object, meta: dict[str, Any], ts: object) -> None:
    """What a ``checkpoint_due`` claim (``claim_due_checkpoints``), a time-based checkpoint taken
    or a forced refresh (``force_refresh``) did to the clocks ``due_checkpoints`` reads and to the
    refresh flag: the last checkpoint's time, a recovery's new stretch of work and its request for
    a fresh brief."""
    ms = event_ms(ts)
    if ms is None:
        return
    if name == "forced_refresh":
        request = state.refresh_requested
        if isinstance(request, dict) and request.get("checkpoint") is None and meta.get("claimed") is not False:
            request["checkpoint"] = meta.get("checkpoint")  # the claim's: named once taken
        elif not meta.get("claimed"):
            state.refresh_requested = {"at": ts, "reason": meta.get("reason"), "checkpoint": meta.get("checkpoint")}
            state.work_started_ms = ms
        return
    kinds = meta.get("types") if name == "checkpoint_due" else [meta.get("type")]
    if not isinstance(kinds, list) or not {"routine", "recovery", "session"} & set(map(str, kinds)):
        return
    if name == "checkpoint_created" and (
        state.status != "working" or state.work_started_ms is None or ms < state.work_started_ms
    ):
        return  # as ``_mark_taken``: only a working agent's clock (the event is written behind: it may come late)
    state.last_checkpoint_ms = max(state.last_checkpoint_ms or 0, ms)
    if name == "checkpoint_due" and "recovery" in kinds and state.status == "working":
        state.work_started_ms = ms
        state.refresh_requested = {"at": ts, "reason": "continuous work", "checkpoint": None}


def rebuild_state(events: list[dict[str, Any]], start: AgentState | None = None) -> tuple[AgentState, list[str]]:
    """Replay ops events (oldest first) into a state (``start``: over a copy of that one, as a
    checkpoint's snapshot); returns it and a summary of what was used. A note added under a
    number another note already holds (a state.json lost and started again numbers from 1) does
    not replace it: the earlier one is kept and numbered after the others.

    Each note keeps the task it was written under (``note_added``'s ``task``; an event an earlier
    Phoenix wrote has none: the task current at that point of the replay); notes written with no
    task are adopted by the next task started, as ``switch_task`` does."""
    state = AgentState.from_dict(start.to_dict()) if start is not None else AgentState()
    used: dict[str, int] = {}
    notes: dict[int, dict[str, Any]] = {}
    displaced: list[dict[str, Any]] = []
    for which, items in (("open_loop", state.open_loops), ("next_action", state.next_actions)):
        for item in items:
            notes[item["id"]] = {**item, "kind": which, "task": note_task(item, state)}
    state.open_loops, state.next_actions = [], []
    for event in events:
        task_before = state.current_task
        name = event.get("event")
        raw_meta = event.get("meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        ts = event.get("ts")
        applied = True
        previous = state.status
        if name in ("checkpoint_due", "checkpoint_created", "forced_refresh"):
            # The clocks of time-based checkpoints (not state changes of their own: a log of an
            # agent that only takes checkpoints holds no state to rebuild).
            _checkpoint_clock(state, name, meta, ts)
            continue
        if name in _STATUS_EVENTS:
            to = meta.get("to")
            if to in ("idle", "working", "error"):
                state.status = to
            if isinstance(meta.get("task"), str):
                state.current_task = meta["task"]
            if isinstance(meta.get("output"), str):
                state.last_output = meta["output"]
            state.error_message = meta.get("error") if to == "error" else None
            if meta.get("source") in ("model", "hook", "watchdog"):
                state.updated_by = meta["source"]
            state.status_event = str(name)
        elif name == "session_start":
            sid = meta.get("session_id")
            ms = event_ms(ts)
            # As ``is_new_session``: `claude --resume` keeps the id of the session it brings back.
            if isinstance(sid, str) and (
                meta.get("source") in ("startup", "clear", "resume") or sid != state.session_id
            ):
                if previous != "working" or state.work_started_ms is None or state.refresh_requested:
                    state.work_started_ms = ms
                state.refresh_requested = None  # the new session is the refresh
                state.session_id = sid
                state.session_started_at = ts if isinstance(ts, str) else None
                state.status = "working"
                state.updated_by = "hook"
                state.status_event = "session_start"
                state.error_message = None
                state.last_tool = None
            elif state.refresh_requested and meta.get("source") == "compact":
                state.refresh_requested = None  # answered by the compacted conversation's fresh brief
                state.work_started_ms = ms if state.status == "working" else None
            if isinstance(meta.get("pid"), int):
                state.pid = meta["pid"]
            if isinstance(meta.get("host"), str):
                state.host = meta["host"]
            if isinstance(meta.get("task"), str) and meta["task"]:
                state.current_task = meta["task"]
        elif name == "session_end":
            if not meta.get("stale"):
                state.status = "idle"
                state.updated_by = "hook"
                state.status_event = "session_end"
                state.error_message = None
        elif name in ("heartbeat", "tool_failed"):
            if isinstance(meta.get("heartbeat_seq"), int):
                state.heartbeat_seq = max(state.heartbeat_seq, meta["heartbeat_seq"])
            tool = meta.get("tool")
            if isinstance(tool, str) and tool != "(stop)":
                state.last_tool = {"name": tool, "ok": name == "heartbeat", "at": ts}
                if name == "tool_failed" and meta.get("error"):
                    state.last_tool["error"] = meta["error"]
        elif name == "state_pulled":
            # A copy took the PostgreSQL store's record (``_state_pg``): the state it took.
            try:
                taken = AgentState.from_dict(meta.get("state"))  # type: ignore[arg-type]
            except (CorruptStateError, SchemaVersionError):
                applied = False
            else:
                notes = {}
                for which, items in (("open_loop", taken.open_loops), ("next_action", taken.next_actions)):
                    for item in items:
                        notes[item["id"]] = {**item, "kind": which, "task": note_task(item, taken)}
                taken.open_loops, taken.next_actions = [], []
                state = taken
        elif name == "session_adopted":
            if isinstance(meta.get("session_id"), str):
                state.session_id = meta["session_id"]
        elif name == "note_added":
            number, text, kind = meta.get("id"), meta.get("text"), meta.get("kind")
            if isinstance(number, int) and isinstance(text, str) and kind in ("open_loop", "next_action"):
                held = notes.get(number)
                if held is not None and (held["text"], held["kind"]) != (text, kind):
                    displaced.append(held)
                # A note displaced earlier and added again (a restore puts it back under a new
                # number, and logs it so) is that one, not another.
                again = next((d for d in displaced if (d["text"], d["kind"]) == (text, kind)), None)
                if again is not None:
                    displaced.remove(again)
                task = meta.get("task")
                notes[number] = {
                    "id": number,
                    "text": text,
                    "added_at": ts,
                    "kind": kind,
                    "task": task if isinstance(task, str) else state.current_task,
                }
                state.note_seq = max(state.note_seq, number)
        elif name == "note_resolved":
            number, text, kind = meta.get("id"), meta.get("text"), meta.get("kind")
            held = notes.get(number) if isinstance(number, int) else None
            if held is not None and (text is None or (held["text"], held["kind"]) == (text, kind)):
                notes.pop(held["id"])
            elif isinstance(text, str):  # the number holds another note now: resolve the one it named
                named = next((n for n in notes.values() if (n["text"], n["kind"]) == (text, kind)), None)
                if named is not None:
                    notes.pop(named["id"])
                else:
                    displaced[:] = [d for d in displaced if (d["text"], d["kind"]) != (text, kind)]
        elif name == "state_restored":
            # A restore put the task or the output back (``restore_state_snapshot``).
            if isinstance(meta.get("task"), str):
                state.current_task = meta["task"]
            if isinstance(meta.get("output"), str):
                state.last_output = meta["output"]
        else:
            applied = False
        if state.current_task != task_before:  # as ``switch_task``
            if not isinstance(meta.get("output"), str):
                state.last_output = None  # the task before's
            if not task_before:  # notes written with no task are adopted by the task named
                for held in (*notes.values(), *displaced):
                    if held.get("task") == "":
                        held["task"] = state.current_task
        if applied:
            used[str(name)] = used.get(str(name), 0) + 1
            if (ms := event_ms(ts)) is not None:
                state.last_active_ms = ms
                state.last_active = iso_from_ms(ms)
                if name in _STATUS_EVENTS or name == "session_end":  # a pulled state keeps its own clock
                    _track_work(state, previous)
    for item in displaced:
        state.note_seq = max([state.note_seq, *notes]) + 1
        notes[state.note_seq] = {**item, "id": state.note_seq}
    for item in sorted(notes.values(), key=lambda n: n["id"]):
        kind = item.pop("kind")
        (state.open_loops if kind == "open_loop" else state.next_actions).append(item)
    summary = [f"{count} {name}" for name, count in sorted(used.items())]
    return state, summary
