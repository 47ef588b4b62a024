"""The resume protocol (seed 004, section 2): a lead (re-)attaches to a team after a crash.

``resume`` runs the seed's validation sequence and returns every step with its outcome:

1. **discovery**: the team's ``metadata.json`` exists;
2. **team status**: active, pending or suspended attach; consolidating attaches with a warning and,
   when git shows staged or dirty changes, the partial consolidation and its options
   (retry | abort | inspect); completed is permanent (read-only);
3. **lead session**: the same session takes the fast path; another session may re-attach when the
   bound lead has been silent for more than 5 minutes (no file to delete by hand); a lead still
   active elsewhere is a transient refusal (retry later);
4. **probe teammates**: their liveness classes (online, idle, suspended, stale; clock skew noted);
5. **verify facts**: the facts command's hash against the one stored with the newest full
   checkpoint (a mismatch is a warning);
6. **load mailbox**: the newest messages and the unread count, from the mailbox's tail;
7. **summary**: tasks by status, teammates by class, last activity.

Exit codes: 0 attached, 1 transient (retry), 2 permanent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import CorruptStateError, LockTimeoutError, SchemaVersionError, StorageError
from phoenix_protocol.store._teams import (
    FULL_SNAPSHOT_MS,
    LEAD_TIMEOUT_MS,
    ZOMBIE_CHECKPOINT_MS,
    Team,
    TeamNotFoundError,
)

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home

__all__ = ["EXIT_ATTACHED", "EXIT_PERMANENT", "EXIT_TRANSIENT", "ResumeResult", "probe", "resume", "summary"]

EXIT_ATTACHED, EXIT_TRANSIENT, EXIT_PERMANENT = 0, 1, 2


class ResumeResult:
    """The steps taken, the summary, and the exit code."""

    def __init__(self, team_id: str) -> None:
        self.team_id = team_id
        self.steps: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self.exit_code = EXIT_ATTACHED
        self.attached = False

    def step(self, name: str, level: str, detail: str, **data: Any) -> None:
        self.steps.append({"step": name, "level": level, "detail": detail, **data})

    def as_dict(self) -> dict[str, Any]:
        return {
            "team_id": self.team_id,
            "attached": self.attached,
            "exit_code": self.exit_code,
            "steps": self.steps,
            "summary": self.summary,
        }


def probe(team: Team, *, now_ms: int | None = None) -> dict[str, Any]:
    """Liveness of every teammate and of the lead, without changing anything but the
    sequence-number bookkeeping of skewed clocks."""
    now = team.clock.now_ms() if now_ms is None else now_ms
    data = team.read()
    mates = []
    lives = team.liveness_all(now_ms=now)
    for mate in team.roster():
        live = lives[mate["name"]]
        mates.append({"name": mate["name"], "role": mate.get("role"), "current_task": mate.get("current_task"), **live})
    counts: dict[str, int] = {}
    for mate in mates:
        counts[mate["class"]] = counts.get(mate["class"], 0) + 1
    silence = team.lead_silence_ms(now_ms=now)
    return {
        "team_id": team.id,
        "status": data["status"],
        "lead": data["lead"],
        "lead_session_id": data.get("lead_session_id"),
        "lead_silence_ms": silence,
        "teammates": mates,
        "counts": counts,
    }


def next_checkpoint_ms(data: dict[str, Any], *, now_ms: int, zombie: bool = False) -> int:
    """When the next checkpoint is due, never before ``now_ms``: every 30 s in ZOMBIE mode, else
    the periodic full snapshot 5 minutes after the last one (a snapshot overdue is due now)."""
    log = data["session_log"]
    if zombie:
        due = int(log.get("last_full_snapshot_ms") or now_ms) + ZOMBIE_CHECKPOINT_MS
    else:
        due = int(log.get("last_full_snapshot_ms") or log.get("last_checkpoint_ms") or now_ms) + FULL_SNAPSHOT_MS
    return max(due, now_ms)


def summary(team: Team, data: dict[str, Any], probed: dict[str, Any], *, now_ms: int) -> dict[str, Any]:
    """The seed's summary: age, tasks by status, teammates by class, last activity."""
    tasks: dict[str, int] = {}
    for task in data["tasks"]:
        tasks[task["status"]] = tasks.get(task["status"], 0) + 1
    log = data["session_log"]
    return {
        "team_id": team.id,
        "name": data.get("name"),
        "status": data["status"],
        "created_seconds_ago": (now_ms - int(data.get("created_ms") or now_ms)) // 1000,
        "tasks": tasks,
        "teammates": probed["counts"],
        "last_action": log.get("last_action"),
        "last_action_at": log.get("last_action_at"),
        "last_checkpoint_at": iso_from_ms(log["last_checkpoint_ms"]) if log.get("last_checkpoint_ms") else None,
        "next_checkpoint_at": iso_from_ms(next_checkpoint_ms(data, now_ms=now_ms)),
    }


def resume(
    home: Home,
    team_id: str,
    *,
    session_id: str,
    clock: Clock = system_clock,
    verify_facts: bool = True,
    attach: bool = True,
    allow_stale: bool = False,
    config: Config | None = None,
) -> ResumeResult:
    """Run the validation sequence and, unless ``attach=False`` (probe only), bind the lead."""
    from phoenix_protocol.core._ids import validate_session_id

    validate_session_id(session_id)  # stored in clear: never a secret
    result = ResumeResult(team_id)
    try:
        team = Team.open(home, team_id, clock=clock, config=config)
        _resume(
            result,
            team,
            session_id=session_id,
            clock=clock,
            verify_facts=verify_facts,
            attach=attach,
            allow_stale=allow_stale,
        )
    except TeamNotFoundError as exc:
        result.step("discovery", "error", str(exc))
        result.exit_code = EXIT_PERMANENT
    except (CorruptStateError, SchemaVersionError) as exc:
        result.step("discovery", "error", str(exc))
        result.exit_code = EXIT_PERMANENT
    except (LockTimeoutError, StorageError) as exc:
        result.step("io", "error", f"{exc} (transient: retry)")
        result.exit_code = EXIT_TRANSIENT
    return result


def _resume(
    result: ResumeResult,
    team: Team,
    *,
    session_id: str,
    clock: Clock,
    verify_facts: bool,
    attach: bool,
    allow_stale: bool,
) -> None:
    data = team.read()
    now = clock.now_ms()
    result.step("discovery", "ok", f"team {team.id} found ({team.store.location})")

    status = data["status"]
    if status == "completed":
        result.step("team status", "error", "team completed: its state is read-only (review it with `phx team status`)")
        result.exit_code = EXIT_PERMANENT
        return
    if status == "consolidating":
        partial = team.partial_consolidation()
        if partial:
            result.step(
                "team status",
                "warn",
                "partial consolidation: the last session was consolidating and git has staged or dirty changes; "
                "choose retry | abort | inspect (`phx team consolidate TEAM --resolve retry|abort|inspect`)",
                partial_consolidation=partial,
            )
        else:
            result.step("team status", "warn", "team mid-consolidation: finish it (`phx team complete`) or retry it")
    else:
        result.step("team status", "ok", f"status {status}")

    bound = data.get("lead_session_id")
    silence = team.lead_silence_ms(now_ms=now)
    if bound is None or bound == session_id:
        result.step(
            "lead session", "ok", "fast path: this session is the lead" if bound else "no lead session bound yet"
        )
    elif silence is None or silence > LEAD_TIMEOUT_MS:
        minutes = "never seen" if silence is None else f"silent for {silence // 60_000} min"
        result.step("lead session", "warn", f"re-attaching: the bound lead session {bound} is {minutes}")
    elif not attach:
        result.step("lead session", "ok", f"the lead is attached in session {bound}, seen {silence // 1000} s ago")
    else:
        result.step(
            "lead session",
            "error",
            f"the lead is attached in session {bound}, seen {silence // 1000} s ago; retry after it has been silent "
            f"for {LEAD_TIMEOUT_MS // 60_000} minutes",
        )
        result.exit_code = EXIT_TRANSIENT
        return

    probed = probe(team, now_ms=now)
    skewed = [m["name"] for m in probed["teammates"] if m["skew"]]
    detail = ", ".join(f"{count} {cls}" for cls, count in sorted(probed["counts"].items())) or "no teammates"
    if skewed:
        detail += f"; clock skew from {', '.join(skewed)}: ordered by heartbeat sequence"
    others = [m for m in probed["teammates"] if m["name"] != data["lead"]]
    stale = [m["name"] for m in others if m["class"] == "stale"]
    idle = [m["name"] for m in others if m["class"] == "idle"]
    suspended = [m["name"] for m in others if m["class"] == "suspended"]
    if idle:
        detail += f"; idle (send a wake-up): {', '.join(idle)}"
    if suspended:
        detail += f"; suspended (their tasks may be reassigned): {', '.join(suspended)}"
    if stale:
        detail += (
            f"; stale (no heartbeat for {team.config.team_suspended_minutes:g} min or more): {', '.join(stale)}: "
            f"reassign their tasks (`phx team sweep {team.id}`)"
        )
    if stale and len(stale) == len(others) and not allow_stale:
        result.step(
            "probe teammates",
            "error",
            detail + "; every teammate is stale: start a new team, or attach anyway (`--allow-stale`)",
            teammates=probed["teammates"],
        )
        result.exit_code = EXIT_PERMANENT
        return
    level = "warn" if skewed or stale or idle or suspended else "ok"
    result.step("probe teammates", level, detail, teammates=probed["teammates"])
    episode = zombie_episode(team, data, now_ms=now)
    if episode is not None:
        names = ", ".join(m["name"] for m in episode["teammates"]) or "no teammate"
        result.step(
            "zombie",
            "warn",
            f"Detected ZOMBIE at {episode['detected_at'][11:16]} (UTC): the lead was silent and {names} worked on; "
            + ("asking them for their status" if attach else "resume asks them for their status"),
            zombie=episode,
        )

    if verify_facts:
        latest = team.latest_checkpoint(kind="full")
        stored = (latest or {}).get("facts", {}).get("hash") if latest else None
        current = team.facts_hash()
        if stored is None:
            result.step("verify facts", "ok", "no facts recorded yet", facts=current)
        elif stored == current["hash"]:
            result.step("verify facts", "ok", "facts match the last full checkpoint", facts=current)
        else:
            result.step(
                "verify facts",
                "warn",
                f"facts changed since checkpoint {latest.get('seq') if latest else '?'} ({current['source']}): safe to "
                "proceed, but review what changed",
                facts=current,
                stored=stored,
            )

    recent = [m.as_dict() for m in team.mailbox.replay(5)]
    stats = team.mailbox.stats()
    unread = team.mailbox.unread_count(data["lead"]) if data["lead"] in team.teammate_names() else 0
    result.step(
        "load mailbox",
        "ok",
        f"{stats.get('count', 0)} messages, {unread} unread by the lead",
        recent=recent,
        unread=unread,
    )

    if attach:

        def bind(meta: dict[str, Any]) -> None:
            meta["lead_session_id"] = session_id
            meta["lead_last_seen_ms"] = now
            meta["lead_last_seen"] = iso_from_ms(now)
            meta["session_log"]["lead_timeout_detected_at"] = None
            meta["session_log"]["lead_timeout_detected_ms"] = None
            meta["session_log"]["zombie_teammates"] = []
            if episode is not None:  # kept for the record: the last episode and whom it concerned
                meta["session_log"]["last_zombie_episode"] = {
                    "detected_at": episode["detected_at"],
                    "teammates": [m["name"] for m in episode["teammates"]],
                    "resumed_at": iso_from_ms(now),
                }
            if meta["status"] == "suspended":
                meta["status"] = "active"
            team._log(meta, "lead_attached")

        meta, _ = team._change(bind, metadata_only=True)  # the tasks are as read above
        data = {**meta, "tasks": data["tasks"]}
        team.heartbeat(data["lead"], session_id=session_id)
        result.attached = True
        if episode is not None:
            episode["asked"] = ask_zombies(team, data["lead"], episode)
    result.summary = summary(team, data, probed, now_ms=now)
    result.step("summary", "ok", "ready to continue, consolidate, or message teammates")


def zombie_episode(team: Team, data: dict[str, Any], *, now_ms: int) -> dict[str, Any] | None:
    """Seed 004 §3.3: the lead went silent and its teammates worked on (ZOMBIE mode). ``None``
    when there was no such episode; else when it was detected (by a teammate, or from the lead's
    silence when none checked), the teammates concerned (those who noticed it, and those holding
    unfinished tasks), each with its tasks' checkpoints, and the newest team checkpoint."""
    log = data["session_log"]
    detected_ms = log.get("lead_timeout_detected_ms")
    if log.get("lead_timeout_detected_at") and not isinstance(detected_ms, int):
        from phoenix_protocol.core._clock import ms_from_iso

        detected_ms = ms_from_iso(log["lead_timeout_detected_at"])
    if not isinstance(detected_ms, int):
        silence = team.lead_silence_ms(now_ms=now_ms)
        if data["status"] not in ("active", "suspended") or silence is None or silence <= LEAD_TIMEOUT_MS:
            return None
        detected_ms = now_ms - silence + LEAD_TIMEOUT_MS  # when a teammate checking would have seen it
    lead = data["lead"]
    names = [n for n in log.get("zombie_teammates") or [] if n != lead]
    for task in data["tasks"]:
        owner = task.get("assigned_to")
        if owner and owner != lead and task["status"] in ("in_progress", "blocked") and owner not in names:
            names.append(owner)
    roster = set(team.teammate_names())
    teammates = []
    for name in names:
        if name not in roster:
            continue
        tasks = [
            {"task_id": t["task_id"], "title": t["title"], "status": t["status"], "checkpoint": t["checkpoint"]}
            for t in data["tasks"]
            if t.get("assigned_to") == name and t["status"] in ("in_progress", "blocked")
        ]
        teammates.append({"name": name, "tasks": tasks})
    latest = team.latest_checkpoint()
    saved = (
        {k: latest.get(k) for k in ("seq", "checkpoint_type", "reason", "timestamp")}
        | {"name": f"checkpoint-{latest['seq']:08d}.json"}
        if latest
        else None
    )
    return {
        "detected_at": iso_from_ms(detected_ms),
        "detected_ms": detected_ms,
        "teammates": teammates,
        "latest_checkpoint": saved,
    }


def ask_zombies(team: Team, lead: str, episode: dict[str, Any]) -> list[dict[str, Any]]:
    """Message each teammate of a ZOMBIE episode for its status, as the seed's "Detected ZOMBIE at
    14:42. Status?", with what its checkpoint says. One message id per episode and teammate: a
    resume run twice asks once."""
    asked = []
    for mate in episode["teammates"]:
        lines = []
        for task in mate["tasks"]:
            point = task["checkpoint"]
            files = point.get("files_modified") or []
            lines.append(
                f"{task['task_id']} ({task['status']}): check {point.get('check_status')}, {len(files)} file(s)"
                + (f" ({', '.join(files[:5])}{', ...' if len(files) > 5 else ''})" if files else "")
                + (f", last note: {point['note']}" if point.get("note") else "")
            )
        body = (
            "Your checkpoint: " + "; ".join(lines) if lines else "No task of yours is in progress."
        ) + " Reply with where you stand: continue, commit, or roll back?"
        message = team.send(
            lead,
            mate["name"],
            type="question",
            subject=f"Detected ZOMBIE at {episode['detected_at'][11:16]}. Status?",
            body=body,
            msg_id=f"zombie-{episode['detected_ms']}-{mate['name']}",
        )
        asked.append({"name": mate["name"], "seq": message.seq, "msg_id": message.msg_id})
    return asked
